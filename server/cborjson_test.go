package server

import (
	"bytes"
	"encoding/binary"
	"math"
	"net/http"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/search"
)

// kvs is a CBOR map in the order of its entries, as the informers' encodings keep the
// order of the JSON they were decoded from.
type kvs []any // key, value, key, value...

// testCBOR encodes v (kvs, []any, string, []byte as a byte string, int64, float64,
// float32, bool, nil) as CBOR, in the given order.
func testCBOR(b []byte, v any) []byte {
	head := func(major byte, n uint64) []byte {
		switch {
		case n < 24:
			return append(b, major<<5|byte(n))
		case n <= math.MaxUint8:
			return append(b, major<<5|24, byte(n))
		case n <= math.MaxUint16:
			return binary.BigEndian.AppendUint16(append(b, major<<5|25), uint16(n))
		default:
			return binary.BigEndian.AppendUint64(append(b, major<<5|27), n)
		}
	}
	switch v := v.(type) {
	case kvs:
		b = head(cborMap, uint64(len(v)/2))
		for _, e := range v {
			b = testCBOR(b, e)
		}
		return b
	case []any:
		b = head(cborArray, uint64(len(v)))
		for _, e := range v {
			b = testCBOR(b, e)
		}
		return b
	case string:
		return append(head(cborText, uint64(len(v))), v...)
	case []byte:
		return append(head(cborBytes, uint64(len(v))), v...)
	case int64:
		if v < 0 {
			return head(cborNegint, uint64(-1-v))
		}
		return head(cborUint, uint64(v))
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 0xfb), math.Float64bits(v))
	case float32:
		return binary.BigEndian.AppendUint32(append(b, 0xfa), math.Float32bits(v))
	case bool:
		if v {
			return append(b, 0xf5)
		}
		return append(b, 0xf4)
	case nil:
		return append(b, 0xf6)
	}
	panic("testCBOR: unsupported value")
}

var cborTestResource = &apiResource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, kind: "Pod"}

// servedByDecoding is what appendServedCBOR must equal: the object decoded by the
// snapshot's Codec, then served and written as a list item is.
func servedByDecoding(data []byte, cluster, rv string) ([]byte, error) {
	obj, err := persist.Codec{}.Decode(data)
	if err != nil {
		return nil, err
	}
	return appendItem(nil, served(cborTestResource, object{cluster: cluster, obj: obj}, rv))
}

// cborTestObjects are encodings with the cases that served treats apart.
func cborTestObjects(t testing.TB) map[string][]byte {
	pod, err := persist.Codec{}.Encode(aggregatetest.RealisticPod("shop", "web-1", "42", map[string]string{"app": "web"}))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"realistic pod":    pod,
		"schema version 1": append([]byte{formatUnstructuredV1}, pod...),
		"JSON order, no annotations": testCBOR(nil, kvs{"kind", "Pod", "apiVersion", "v1", "metadata", kvs{"resourceVersion", "7", "name", "a", "namespace", "ns"},
			"spec", kvs{"z", int64(1), "a", []any{int64(-3), 1.5, float32(0.25), true, false, nil, "x<y>&\"z\"", "héllo \u2028"}}}),
		"annotations in place":    testCBOR(nil, kvs{"metadata", kvs{"annotations", kvs{"b", "2", ClusterAnnotation, "forged", ResourceVersionAnnotation, "forged", "a", int64(1)}, "name", "a", "resourceVersion", []byte("9")}}),
		"no metadata, no kind":    testCBOR(nil, kvs{"spec", kvs{}}),
		"metadata not a map":      testCBOR(nil, kvs{"metadata", "x", "kind", int64(3), "apiVersion", nil}),
		"annotations not a map":   testCBOR(nil, kvs{"metadata", kvs{"annotations", []any{"x"}, "resourceVersion", int64(5)}}),
		"byte strings everywhere": testCBOR(nil, kvs{[]byte("metadata"), kvs{[]byte("name"), []byte("\xff\xfe")}, []byte("kind"), []byte("Pod")}),
		"numbers":                 testCBOR(nil, kvs{"n", []any{int64(math.MaxInt64), int64(math.MinInt64), 1e21, 1e-7, math.Copysign(0, -1), 123456789.125, float32(3.4e38)}}),
		"duplicate key":           testCBOR(nil, kvs{"a", int64(1), "a", int64(2)}),
		"duplicate annotation":    testCBOR(nil, kvs{"metadata", kvs{"annotations", kvs{ClusterAnnotation, "x", ClusterAnnotation, "y"}}}),
		"invalid UTF-8 in a text": append(testCBOR(nil, kvs{"a", "b"})[:3], 0x61, 0xff),
		"truncated":               pod[:len(pod)/2],
		"trailing byte":           append(append([]byte(nil), pod...), 0),
		"not a map":               testCBOR(nil, []any{"x"}),
		"metadata-only":           {2, 0xa0},
		"empty":                   {},
	}
}

// TestServedCBOR holds appendServedCBOR, and the encodedServed that falls back to
// decoding, to the JSON of the decoded object as served: the same bytes, with and
// without a cursor as resourceVersion, and the same errors.
func TestServedCBOR(t *testing.T) {
	fast := map[string]bool{"realistic pod": true, "schema version 1": true, "JSON order, no annotations": true, "annotations in place": true,
		"no metadata, no kind": true, "metadata not a map": true, "annotations not a map": true, "byte strings everywhere": true, "numbers": true}
	for name, data := range cborTestObjects(t) {
		for _, rv := range []string{"", "cursor-1"} {
			t.Run(name+"/rv="+rv, func(t *testing.T) {
				want, werr := servedByDecoding(data, "prod", rv)
				var w cborJSON
				got, ok := w.appendServedCBOR([]byte("prefix"), data, servedTarget{kind: "Pod", apiVersion: "v1", cluster: "prod", rv: rv})
				if ok != fast[name] {
					t.Errorf("written from the CBOR: %v, want %v", ok, fast[name])
				}
				if ok && (werr != nil || !bytes.Equal(got, append([]byte("prefix"), want...))) {
					t.Errorf("got  %s\nwant prefix%s (%v)", got, want, werr)
				}
				e := &encodedServed{target: servedTarget{kind: "Pod", apiVersion: "v1", cluster: "prod", rv: rv}, data: data, codec: persist.Codec{}, res: cborTestResource}
				got, gerr := e.appendJSON(nil)
				if (gerr != nil) != (werr != nil) || werr == nil && !bytes.Equal(got, want) {
					t.Errorf("encodedServed: %s (%v)\nwant %s (%v)", got, gerr, want, werr)
				}
			})
		}
	}
}

// FuzzServedCBOR checks that whatever appendServedCBOR writes from some bytes is what
// decoding them and serving the object gives, and that encodedServed fails exactly
// where decoding does.
func FuzzServedCBOR(f *testing.F) {
	for _, data := range cborTestObjects(f) {
		f.Add(data, "prod", "")
		f.Add(data, "arn:aws:eks:eu-west-1:123:cluster/edge", "c1")
	}
	f.Fuzz(func(t *testing.T, data []byte, cluster, rv string) {
		want, werr := servedByDecoding(data, cluster, rv)
		var w cborJSON
		target := servedTarget{kind: "Pod", apiVersion: "v1", cluster: cluster, rv: rv}
		if got, ok := w.appendServedCBOR(nil, data, target); ok && (werr != nil || !bytes.Equal(got, want)) {
			t.Fatalf("from the CBOR: %s\nby decoding: %s (%v)", got, want, werr)
		}
		e := &encodedServed{target: target, data: data, codec: persist.Codec{}, res: cborTestResource}
		got, gerr := e.appendJSON(nil)
		if (gerr != nil) != (werr != nil) || werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("encodedServed: %s (%v)\nby decoding: %s (%v)", got, gerr, want, werr)
		}
	})
}

// TestCompactObjectSummary checks what the view of a compact fleet keeps beside the
// encoding: the metadata that selectors and the search index read, and the images.
func TestCompactObjectSummary(t *testing.T) {
	pod := aggregatetest.RealisticPod("shop", "web-1", "42", map[string]string{"app": "web"})
	co := newCompactObject(schema.GroupResource{Resource: "pods"}, pod, []byte{0xa0})
	ts := pod.GetCreationTimestamp()
	if co.GetName() != "web-1" || co.GetNamespace() != "shop" || co.GetResourceVersion() != "42" || co.GetLabels()["app"] != "web" ||
		co.GetUID() != pod.GetUID() || !ts.Equal(ptrTime(co.GetCreationTimestamp())) || co.GetKind() != "Pod" {
		t.Errorf("summary %v lacks the pod's metadata", co.Object)
	}
	pods := schema.GroupResource{Resource: "pods"}
	if got, want := search.Images(pods, co.Unstructured), search.Images(pods, pod); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("summary images %v, want %v", got, want)
	}
	if _, found, _ := unstructured.NestedMap(co.Object, "status"); found {
		t.Error("summary keeps the status")
	}
}

func ptrTime[T any](v T) *T { return &v }

// TestCompactServesSameBytes serves the same objects from a plain fleet and from a
// compact one (cache.encoding compact), and compares what clients get: lists, gets and
// the initial events of watches in every format, with selectors, byte for byte apart
// from the cursors, which are each server's own.
func TestCompactServesSameBytes(t *testing.T) {
	plain, compact := newFixtureOf(t, nil, nil), newFixtureOf(t, persist.Codec{}, nil)
	for _, f := range []*fixture{plain, compact} {
		f.apply(prod, podsGVR, aggregatetest.RealisticPod("shop", "real-1", "900", map[string]string{"app": "shop"}))
		f.sync()
	}
	if _, ok := compact.server.cache.lookup(podsGVR).clusters[prod].namespaces["shop"]["real-1"].(*compactObject); !ok {
		t.Fatal("the compact fleet's view does not hold the encoding")
	}
	cursors := regexp.MustCompile(`"(resourceVersion|continue)":"[^"]*"`)
	table := "application/json;as=Table;v=v1;g=meta.k8s.io"
	partialList := "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"
	for _, tc := range []struct{ path, accept string }{
		{"/clusters/*/api/v1/pods", ""},
		{"/clusters/*/api/v1/pods?limit=2", ""},
		{"/clusters/prod/api/v1/namespaces/shop/pods/real-1", ""},
		{"/clusters/*/api/v1/pods?labelSelector=app%3Dweb", ""},
		{"/clusters/*/api/v1/pods?fieldSelector=status.phase%3DRunning,metadata.namespace%3Ddefault", ""},
		{"/clusters/*/api/v1/pods?fieldSelector=spec.nodeName%21%3Dnode-1", ""},
		{"/clusters/*/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&limit=2", ""},
		{"/clusters/*/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&limit=2", table},
		{"/clusters/*/api/v1/pods", table},
		{"/clusters/*/api/v1/pods?includeObject=Object", table},
		{"/clusters/*/api/v1/pods", partialList},
		{"/clusters/prod/apis/apps/v1/deployments", ""},
		{"/clusters/*/api/v1/nodes", table},
		{"/clusters/*/api/v1/pods?watch=true&timeoutSeconds=1", ""},
		{"/clusters/*/api/v1/pods?watch=true&timeoutSeconds=1&fieldSelector=spec.nodeName%3Dnode-1", table},
		{"/apis/fleetwatch.io/v1alpha1/search?q=web", ""},
	} {
		var bodies [2][]byte
		for i, f := range []*fixture{plain, compact} {
			var r response
			if tc.accept != "" {
				r = f.get(tc.path, "Accept", tc.accept)
			} else {
				r = f.get(tc.path)
			}
			if r.code != http.StatusOK {
				t.Fatalf("GET %s (%s): %d %s", tc.path, tc.accept, r.code, r.body)
			}
			bodies[i] = cursors.ReplaceAll(r.body, []byte(`"$1":"…"`))
		}
		if !bytes.Equal(bodies[0], bodies[1]) {
			t.Errorf("GET %s (%s):\nplain   %s\ncompact %s", tc.path, tc.accept, bodies[0], bodies[1])
		}
	}
}
