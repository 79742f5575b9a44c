package jsondec

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// podJSON returns testdata/pod.json, a realistic pod with the managedFields of
// server-side apply, compacted as the apiserver writes it.
func podJSON(tb testing.TB) []byte {
	tb.Helper()
	data, err := os.ReadFile("testdata/pod.json")
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
// objects of watch events, keeping its managedFields or dropping them.
func BenchmarkObject(b *testing.B) {
	data := podJSON(b)
	for _, bm := range []struct {
		name string
		drop bool
	}{
		{"managedFields", false},
		{"dropManagedFields", true},
	} {
		b.Run(bm.name, func(b *testing.B) {
			d := Decoder{DropManagedFields: bm.drop}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := d.Object(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
