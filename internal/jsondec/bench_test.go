package jsondec

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// testdataJSON returns a file of testdata, compacted as the apiserver writes JSON:
// pod.json is a realistic pod with the managedFields of server-side apply, and
// configmap.json a ConfigMap applied by kubectl.
func testdataJSON(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		tb.Fatal(err)
	}
	return b.Bytes()
}

// BenchmarkObject decodes a realistic pod with one Decoder, as an informer decodes the
// objects of watch events, keeping its managedFields or dropping them: with Object, and
// with ObjectCBOR, which also reports the size of the CBOR (cbor-B/op), and with
// ObjectPartialCBOR, which builds only what files the object.
func BenchmarkObject(b *testing.B) {
	data := testdataJSON(b, "pod.json")
	for _, bm := range []struct {
		name string
		drop bool
	}{
		{"managedFields", false},
		{"dropManagedFields", true},
	} {
		b.Run(bm.name+"/Object", func(b *testing.B) {
			d := Decoder{DropManagedFields: bm.drop}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Object(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bm.name+"/ObjectCBOR", func(b *testing.B) {
			d := Decoder{DropManagedFields: bm.drop}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			var cbor []byte
			for b.Loop() {
				var err error
				if _, cbor, err = d.ObjectCBOR(data); err != nil || cbor == nil {
					b.Fatal(err, cbor == nil)
				}
			}
			b.ReportMetric(float64(len(cbor)), "cbor-B/op")
		})
		b.Run(bm.name+"/ObjectPartialCBOR", func(b *testing.B) {
			d := Decoder{DropManagedFields: bm.drop}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, cbor, err := d.ObjectPartialCBOR(data); err != nil || cbor == nil {
					b.Fatal(err, cbor == nil)
				}
			}
		})
	}
}
