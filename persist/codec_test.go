package persist

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/fleetwatch/fleetwatch/internal/metaenc"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// podJSON is a realistic pod as the API server sends it (three containers, an init
// container, labels, annotations, status), without managedFields, which are stripped
// before caching.
var podJSON = func() []byte {
	data, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		panic(err)
	}
	return data
}()

// testPod returns the pod of testdata/pod.json as the dynamic client decodes it, under
// another namespace and name.
func testPod(tb testing.TB, namespace, name string) *unstructured.Unstructured {
	tb.Helper()
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode(podJSON, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	u := obj.(*unstructured.Unstructured)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

// testMetadata returns the metadata of testdata/pod.json as the metadata client decodes
// it (times in time.Local, TypeMeta set), under another namespace and name.
func testMetadata(tb testing.TB, namespace, name string) *metav1.PartialObjectMetadata {
	tb.Helper()
	m := new(metav1.PartialObjectMetadata)
	if err := json.Unmarshal(podJSON, m); err != nil {
		tb.Fatal(err)
	}
	m.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
	m.Namespace, m.Name = namespace, name
	return m
}

func TestCodecRoundTrip(t *testing.T) {
	deletion := metav1.Unix(1795000000, 0) // whole seconds in time.Local, as decoded from the API
	grace := int64(30)
	tests := []struct {
		name string
		obj  runtime.Object
	}{
		{"pod", testPod(t, "shop", "api-1")},
		{"cluster-scoped", &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "node-1"},
		}}},
		{"number types", &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "generation": int64(9007199254740993)},
			"spec": map[string]any{
				"int": int64(-42), "big": int64(1) << 62, "float": 0.5, "wholeFloat": 3.0,
				"bool": true, "null": nil, "empty": map[string]any{}, "list": []any{int64(1), "two", 3.5, nil},
				"unicode": "grüße, 世界", "emptyString": "",
				// Longer than intern.MaxValueLen: decoded by a copy of its own, not
				// interned, which the overwrite below checks too.
				"long": strings.Repeat("long value ", 20),
			},
		}}},
		{"metadata", testMetadata(t, "shop", "api-1")},
		{"metadata deleting", func() runtime.Object {
			m := testMetadata(t, "shop", "api-2")
			m.DeletionTimestamp = &deletion
			m.DeletionGracePeriodSeconds = &grace
			m.Finalizers = []string{"example.com/cleanup"}
			return m
		}()},
		{"metadata minimal", &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x"}}},
	}
	// Codec decodes with pooled decoders, whose tables of strings outlive a decode:
	// each object is decoded twice, so that the second decode finds its strings there.
	decoders := map[string]func([]byte) (runtime.Object, error){"decodeObject": decodeObject, "Codec": Codec{}.Decode, "Codec again": Codec{}.Decode}
	for _, tt := range tests {
		for dname, decode := range decoders {
			t.Run(tt.name+"/"+dname, func(t *testing.T) {
				data, err := Codec{}.Encode(tt.obj)
				if err != nil {
					t.Fatal(err)
				}
				got, err := decode(data)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, tt.obj) {
					t.Errorf("round trip changed the object:\n got %#v\nwant %#v", got, tt.obj)
				}
				// The decoded object must not alias the encoded bytes (bbolt values die with
				// their transaction).
				for i := range data {
					data[i] = 0xff
				}
				if !reflect.DeepEqual(got, tt.obj) {
					t.Error("decoded object changed when its encoding was overwritten")
				}
			})
		}
	}
}

func TestCodecRejects(t *testing.T) {
	tests := []struct {
		name string
		obj  runtime.Object
	}{
		{"typed object", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}},
		{"nil unstructured", (*unstructured.Unstructured)(nil)},
		{"empty unstructured", &unstructured.Unstructured{}},
		{"nil metadata", (*metav1.PartialObjectMetadata)(nil)},
		{"nil", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := encodeObject(tt.obj); !errors.Is(err, ErrInvalid) {
				t.Errorf("encodeObject: got %v, want ErrInvalid", err)
			}
		})
	}
	for _, data := range [][]byte{nil, {}, {0}, {9, 0xa0}, {formatUnstructured}, {formatUnstructured, 0xf6}, {formatUnstructured, 0x80}, {formatMetadata, 0xff}, {formatMetadataMap, 0xff}, {formatMetadataMap}} {
		if _, err := decodeObject(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("decodeObject(%x): got %v, want ErrCorrupt", data, err)
		}
		// Codec decodes without copying data first, with a pooled decoder: a value cut
		// short is an error too, not a read past its end, and the decoder goes back to
		// the pool usable.
		if _, err := (Codec{}).Decode(data); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Codec.Decode(%x): got %v, want ErrCorrupt", data, err)
		}
	}
}

// TestCodecDecodePrefixes decodes every proper prefix of a pod's encoding with Codec, in
// a slice with no spare capacity: each is ErrCorrupt (no read past its end), and the
// pooled decoders then still decode the whole encoding right.
func TestCodecDecodePrefixes(t *testing.T) {
	pod := testPod(t, "shop", "api-1")
	data, err := Codec{}.Encode(pod)
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(data); n++ {
		prefix := slices.Clone(data[:n])
		if _, err := (Codec{}).Decode(prefix); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Codec.Decode of %d of %d bytes: got %v, want ErrCorrupt", n, len(data), err)
		}
	}
	got, err := Codec{}.Decode(data)
	if err != nil || !reflect.DeepEqual(got, pod) {
		t.Fatalf("Codec.Decode after the prefixes: %v, equal %v", err, reflect.DeepEqual(got, pod))
	}
}

func FuzzDecode(f *testing.F) {
	for _, obj := range []runtime.Object{testPod(f, "ns", "p"), testMetadata(f, "ns", "p")} {
		data, err := encodeObject(obj)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		if c := compress(data); c[0] == formatCompressed {
			f.Add(c)
			f.Add(c[:len(c)/2])
		}
	}
	addDictSeeds(f)
	f.Add([]byte{formatUnstructured, 0xbf, 0x61, 0x61, 0x9f, 0xff, 0xff})
	f.Add([]byte{formatMetadata, 0xa1, 0x68, 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', 0xa0})
	metadataMap := []byte{formatMetadataMap, 0xa1, 0x48, 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', 0xa1, 0x44, 'n', 'a', 'm', 'e', 0x41, 'p'}
	f.Add(metadataMap)
	compact, ok := metaenc.Compact(metadataMap[1:])
	if !ok {
		f.Fatal("not compacted")
	}
	f.Add(compact)
	f.Fuzz(func(t *testing.T, data []byte) {
		obj, err := decode(data) // without decodeObject's recover: a panic fails the fuzz test
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if obj == nil {
			t.Fatal("nil object without an error")
		}
	})
}

// jsonCodec is the alternative that was measured against CBOR: the object map through
// encoding/json, decoded with apimachinery's JSON decoder, which turns whole numbers into
// int64 as unstructured requires.
type jsonCodec struct{}

func (jsonCodec) encode(obj runtime.Object) ([]byte, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return json.Marshal(u.Object)
	}
	return json.Marshal(obj)
}

func (jsonCodec) decode(data []byte, metadataOnly bool) (runtime.Object, error) {
	if metadataOnly {
		m := new(metav1.PartialObjectMetadata)
		return m, json.Unmarshal(data, m)
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// benchObjects are the objects of BenchmarkEncode and BenchmarkDecode.
func benchObjects(b *testing.B) []struct {
	name string
	obj  runtime.Object
} {
	return []struct {
		name string
		obj  runtime.Object
	}{
		{"pod", testPod(b, "shop-prod", "checkout-api-7d9f8b6c5d-x2k9p")},
		{"metadata", testMetadata(b, "shop-prod", "checkout-api-7d9f8b6c5d-x2k9p")},
	}
}

// BenchmarkEncode reports ns/op, and the size of one stored object (B/obj) next to the
// size of the object in compact JSON (json-B/obj).
func BenchmarkEncode(b *testing.B) {
	for _, o := range benchObjects(b) {
		jsonData, err := jsonCodec{}.encode(o.obj)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(o.name+"/cbor", func(b *testing.B) {
			var data []byte
			var e cborEncoder // reused, as the writer does within a commit
			for b.Loop() {
				if data, err = e.encodeObject(o.obj); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "B/obj")
			b.ReportMetric(float64(len(jsonData)), "json-B/obj")
		})
		b.Run(o.name+"/json", func(b *testing.B) {
			var data []byte
			for b.Loop() {
				if data, err = (jsonCodec{}).encode(o.obj); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(data)), "B/obj")
			b.ReportMetric(float64(len(jsonData)), "json-B/obj")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, o := range benchObjects(b) {
		data, err := encodeObject(o.obj)
		if err != nil {
			b.Fatal(err)
		}
		jsonData, err := jsonCodec{}.encode(o.obj)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(o.name+"/cbor", func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := decodeObject(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(o.name+"/codec", func(b *testing.B) {
			// As a compact fleet decodes an object for a reader or a handler: a
			// decoder of the pool, its tables warm.
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			cpu0 := testenv.ProcessCPU()
			for b.Loop() {
				if _, err := (Codec{}).Decode(data); err != nil {
					b.Fatal(err)
				}
			}
			// The process's CPU, the collector's included, which a busy machine
			// inflates less than the time.
			b.ReportMetric(float64(testenv.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
		b.Run(o.name+"/json", func(b *testing.B) {
			b.SetBytes(int64(len(jsonData)))
			for b.Loop() {
				if _, err := (jsonCodec{}).decode(jsonData, o.name == "metadata"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
