package server

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
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
		co.GetUID() != pod.GetUID() || !ts.Equal(ptrTime(co.GetCreationTimestamp())) || co.GroupVersionKind() != pod.GroupVersionKind() {
		t.Errorf("summary %+v lacks the pod's metadata", co)
	}
	pods := schema.GroupResource{Resource: "pods"}
	if got, want := search.Images(pods, co), search.Images(pods, pod); len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("summary images %v, want %v", got, want)
	}
	// What stands for the object where its encoding fails to decode.
	u := co.unstructured()
	if u.GetName() != "web-1" || u.GetNamespace() != "shop" || !reflect.DeepEqual(u.GetLabels(), co.GetLabels()) || u.GroupVersionKind() != pod.GroupVersionKind() {
		t.Errorf("summary as unstructured: %v", u.Object)
	}
}

func ptrTime[T any](v T) *T { return &v }

// TestCompactServesSameBytes serves the same objects from a plain fleet and from a
// compact one (cache.encoding compact), and compares what clients get: lists, gets and
// the initial events of watches in every format, with selectors, byte for byte apart
// from the cursors, which are each server's own.
func TestCompactServesSameBytes(t *testing.T) {
	plain, compact, compressed := newFixtureOf(t, nil, nil), newFixtureOf(t, persist.Codec{}, nil), newFixtureOf(t, persist.Codec{Compress: true}, nil)
	for _, f := range []*fixture{plain, compact, compressed} {
		f.apply(prod, podsGVR, aggregatetest.RealisticPod("shop", "real-1", "900", map[string]string{"app": "shop"}))
		f.sync()
	}
	for _, f := range []*fixture{compact, compressed} {
		co, ok := f.server.cache.lookup(podsGVR).clusters[prod].namespaces["shop"]["real-1"].(*compactObject)
		if !ok {
			t.Fatal("the compact fleet's view does not hold the encoding")
		}
		// The compressing fleet's view keeps the encoding compressed, as the fleet does.
		if cbor, err := (persist.Codec{}).Expand(nil, co.data); err != nil || (&cbor[0] != &co.data[0]) != (f == compressed) {
			t.Errorf("the view holds %d bytes, %d expanded (%v)", len(co.data), len(cbor), err)
		}
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
		var bodies [3][]byte
		for i, f := range []*fixture{plain, compact, compressed} {
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
		if !bytes.Equal(bodies[0], bodies[1]) || !bytes.Equal(bodies[0], bodies[2]) {
			t.Errorf("GET %s (%s):\nplain      %s\ncompact    %s\ncompressed %s", tc.path, tc.accept, bodies[0], bodies[1], bodies[2])
		}
	}
}

// summaryTestObjects are encodings of objects with pod specs and labels in the forms
// that summarizeCBOR reads apart, beside cborTestObjects.
func summaryTestObjects(t testing.TB) map[string][]byte {
	objs := cborTestObjects(t)
	container := func(name, image string) kvs {
		return kvs{"name", name, "image", image, "ports", []any{kvs{"containerPort", int64(80)}}}
	}
	podSpec := kvs{"initContainers", []any{container("init", "busybox:1"), kvs{"name", "no-image"}},
		"containers", []any{container("a", "nginx:1.27"), container("b", "busybox:1"), "not a map", kvs{"image", int64(3)}},
		"ephemeralContainers", []any{container("debug", "debian:13")}}
	objs["deployment"] = testCBOR(nil, kvs{"apiVersion", "apps/v1", "kind", "Deployment",
		"metadata", kvs{"name", "web", "namespace", "shop", "uid", "u-1", "resourceVersion", "12", "creationTimestamp", "2026-11-27T10:00:00Z",
			"labels", kvs{"app", "web", "tier", "front", "n", int64(1)}, "annotations", kvs{"a", "b"}},
		"spec", kvs{"replicas", int64(3), "template", kvs{"metadata", kvs{"labels", kvs{"app", "web"}}, "spec", podSpec}}})
	objs["cronjob"] = testCBOR(nil, kvs{"apiVersion", "batch/v1", "kind", "CronJob", "metadata", kvs{"name", "nightly", "labels", kvs{}},
		"spec", kvs{"schedule", "@daily", "jobTemplate", kvs{"spec", kvs{"template", kvs{"spec", podSpec}}}}})
	objs["pod with a spec of the wrong type"] = testCBOR(nil, kvs{"kind", "Pod", "metadata", kvs{"name", "p", "labels", "not a map", "uid", int64(4)}, "spec", []any{"x"}})
	objs["pod spec in JSON order, images repeated"] = testCBOR(nil, kvs{"spec", kvs{"containers", []any{container("a", "x:1"), container("b", "x:1")}, "initContainers", []any{container("i", "y:2")}},
		"metadata", kvs{"namespace", "ns", "name", "p"}, "apiVersion", "v1", "kind", "Pod"})
	objs["repeated metadata"] = testCBOR(nil, kvs{"metadata", kvs{"name", "a"}, "metadata", kvs{"name", "b"}})
	objs["repeated name"] = testCBOR(nil, kvs{"metadata", kvs{"name", "a", "name", "b"}})
	return objs
}

// summaryResources are the resources whose objects TestSummarizeCBOR summarizes: with
// a pod spec at each of its depths, and without.
var summaryResources = []schema.GroupResource{{Resource: "pods"}, {Group: "apps", Resource: "deployments"}, {Group: "batch", Resource: "cronjobs"}, {Resource: "configmaps"}}

// summarizeCBOR returns the compactObject of data, whose CBOR is cbor, with the summary
// that readSummaryCBOR reads.
func summarizeCBOR(gr schema.GroupResource, cbor, data []byte) (_ *compactObject, ok bool) {
	sum, ok := readSummaryCBOR(gr, cbor)
	if !ok {
		return nil, false
	}
	return withSummary(data, sum), true
}

// checkSummary fails t if summarizeCBOR reads from data a summary other than the one
// newCompactObject makes of the decoded object; it returns whether summarizeCBOR read
// one.
func checkSummary(t *testing.T, gr schema.GroupResource, data []byte) bool {
	t.Helper()
	got, ok := summarizeCBOR(gr, data, data)
	// Compressed, the same summary, which keeps the compressed encoding.
	compressed := persist.Codec{Compress: true}.Shorten(data)
	if gotC, okC := summarizeEncoded(persist.Codec{}, gr, compressed); okC != ok || ok && (describeSummary(gotC) != describeSummary(got) || !bytes.Equal(gotC.data, compressed)) {
		t.Fatalf("%v: summary of the compressed encoding (%d → %d bytes) %v, %v; want %v, %v", gr, len(data), len(compressed), gotC, okC, got, ok)
	}
	obj, err := persist.Codec{}.Decode(data)
	u, isUnstructured := obj.(*unstructured.Unstructured)
	if !ok || err != nil || !isUnstructured {
		return ok
	}
	want := newCompactObject(gr, u, data)
	if !reflect.DeepEqual(*got.s(), *want.s()) || !bytes.Equal(got.data, data) {
		t.Fatalf("%v: summary from the CBOR %+v\nfrom the decoded object %+v", gr, *got.s(), *want.s())
	}
	// Read at the first look, the same summary.
	if lazy := newLazySummary(gr, persist.Codec{}).lazyCompactObject(data); !reflect.DeepEqual(*lazy.s(), *want.s()) {
		t.Fatalf("%v: summary read at the first look %+v\nfrom the decoded object %+v", gr, *lazy.s(), *want.s())
	}
	return true
}

// TestSummarizeCBOR holds the summary that the view of a compact fleet reads from an
// encoding to the one it makes of the decoded object, and checks which encodings are
// read without decoding.
func TestSummarizeCBOR(t *testing.T) {
	read := map[string]bool{"realistic pod": true, "schema version 1": true, "JSON order, no annotations": true, "annotations in place": true,
		"no metadata, no kind": true, "metadata not a map": true, "annotations not a map": true, "byte strings everywhere": true, "numbers": true,
		"deployment": true, "cronjob": true, "pod with a spec of the wrong type": true, "pod spec in JSON order, images repeated": true,
		// The members that the summary does not read are not checked for repeats or
		// for the UTF-8 of their texts: the decoding refuses these, and the fleet never
		// holds them.
		"duplicate key": true, "duplicate annotation": true, "invalid UTF-8 in a text": true}
	for name, data := range summaryTestObjects(t) {
		for _, gr := range summaryResources {
			t.Run(name+"/"+gr.String(), func(t *testing.T) {
				if ok := checkSummary(t, gr, data); ok != read[name] {
					t.Errorf("read from the CBOR: %v, want %v", ok, read[name])
				}
			})
		}
	}
	// The summary's texts are read from the encoding and copied: overwriting the
	// encoding's bytes changes nothing of it.
	data := bytes.Clone(summaryTestObjects(t)["deployment"])
	summarized, ok := summarizeCBOR(schema.GroupResource{Group: "apps", Resource: "deployments"}, data, data)
	if !ok || summarized.GetName() != "web" {
		t.Fatalf("the deployment is not summarized from its CBOR: %v", summarized)
	}
	texts := func() string {
		return describeSummary(summarized)
	}
	before := texts()
	for i := range data {
		data[i] = 'x'
	}
	if after := texts(); after != before {
		t.Errorf("the summary changed with the encoding's bytes:\n%s\n%s", before, after)
	}
	// The images, in search's order, each once.
	co, _ := summarizeCBOR(schema.GroupResource{Group: "apps", Resource: "deployments"}, summaryTestObjects(t)["deployment"], summaryTestObjects(t)["deployment"])
	if got, want := search.Images(schema.GroupResource{Group: "apps", Resource: "deployments"}, co), []string{"busybox:1", "nginx:1.27", "debian:13"}; !slices.Equal(got, want) {
		t.Errorf("images %v, want %v", got, want)
	}
}

// FuzzSummarizeCBOR checks that summarizeCBOR never panics, and that whatever summary
// it reads from bytes that decode is the one made of the decoded object.
func FuzzSummarizeCBOR(f *testing.F) {
	for _, data := range summaryTestObjects(f) {
		for i := range summaryResources {
			f.Add(data, i)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, resource int) {
		if resource < 0 {
			resource = -resource
		}
		checkSummary(t, summaryResources[resource%len(summaryResources)], data)
	})
}

// TestPairLabels checks a compact object's labels, kept as sorted pairs: read in place by
// selectors, and as a map by GetLabels; of a repeated key, the last value.
func TestPairLabels(t *testing.T) {
	var sum summary
	for _, t := range []string{"tier", "web", "app", "shop", "zone", "a", "app", "shop-2", "env", "prod"} {
		sum.labels = append(sum.labels, []byte(t))
	}
	co := withSummary(nil, sum.build())
	want := map[string]string{"tier": "web", "app": "shop-2", "zone": "a", "env": "prod"}
	if got := co.GetLabels(); !reflect.DeepEqual(got, want) {
		t.Errorf("GetLabels() = %v, want %v", got, want)
	}
	l := co.labelSet()
	for k, v := range want {
		if got, ok := l.Lookup(k); !ok || got != v || !l.Has(k) || l.Get(k) != v {
			t.Errorf("Lookup(%q) = %q, %v; want %q", k, got, ok, v)
		}
	}
	for _, k := range []string{"", "a", "apz", "zzz", "tie"} {
		if _, ok := l.Lookup(k); ok || l.Has(k) {
			t.Errorf("Lookup(%q) found a label", k)
		}
	}
	for sel, match := range map[string]bool{"app=shop-2,env": true, "app=shop": false, "tier in (web, api),!missing": true, "zone notin (a)": false} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Matches(labelsOf(co, co)); got != match {
			t.Errorf("%q matches: %v, want %v", sel, got, match)
		}
	}
	if got := (&compactObject{}).GetLabels(); got != nil {
		t.Errorf("no labels: GetLabels() = %v, want nil", got)
	}
}

// describeSummary spells out everything a compactObject's summary says.
func describeSummary(co *compactObject) string {
	return fmt.Sprintf("%v %q %q %q %q %v %v %q", co.GroupVersionKind(), co.GetNamespace(), co.GetName(), co.GetUID(),
		co.GetResourceVersion(), co.GetCreationTimestamp().UTC(), co.GetLabels(), co.ContainerImages())
}

// TestCompactObjectTexts checks the summary's texts, one string with their ends at its
// tail: each text where it was put, empty ones and long ones, no labels or no images, a
// zero compactObject, and the timestamp as unstructured reads it.
func TestCompactObjectTexts(t *testing.T) {
	long := strings.Repeat("x", 70000) // ends beyond 16 bits
	for name, sum := range map[string]summary{
		"empty": {},
		"all": {apiVersion: []byte("apps/v1"), kind: []byte("Deployment"),
			meta:   [len(summaryKeys)][]byte{[]byte("web"), []byte("shop"), []byte("u-1"), []byte("42"), []byte("2024-05-06T07:08:09Z")},
			has:    [len(summaryKeys)]bool{true, true, true, true, true},
			labels: [][]byte{[]byte("b"), []byte(""), []byte("a"), []byte(long)}, images: [][]byte{[]byte(long), []byte("nginx")}},
		"images only":   {meta: [len(summaryKeys)][]byte{[]byte("n")}, has: [len(summaryKeys)]bool{true}, images: [][]byte{[]byte("i")}},
		"bad timestamp": {meta: [len(summaryKeys)][]byte{4: []byte("yesterday")}, has: [len(summaryKeys)]bool{4: true}},
	} {
		t.Run(name, func(t *testing.T) {
			wantLabels := map[string]string{}
			for i := 0; i < len(sum.labels); i += 2 {
				wantLabels[string(sum.labels[i])] = string(sum.labels[i+1])
			}
			var wantImages []string
			for _, img := range sum.images {
				wantImages = append(wantImages, string(img))
			}
			meta := sum.meta
			co := withSummary([]byte{0xa0}, sum.build())
			for i, got := range []string{co.GetName(), co.GetNamespace(), string(co.GetUID()), co.GetResourceVersion()} {
				if got != string(meta[i]) {
					t.Errorf("%s = %q, want %q", summaryKeys[i], got, meta[i])
				}
			}
			if gvk := co.GroupVersionKind(); gvk != schema.FromAPIVersionAndKind(string(sum.apiVersion), string(sum.kind)) || co.GetObjectKind().GroupVersionKind() != gvk {
				t.Errorf("GroupVersionKind() = %v", gvk)
			}
			if got := co.GetLabels(); len(wantLabels) == 0 && got != nil || len(wantLabels) > 0 && !reflect.DeepEqual(got, wantLabels) {
				t.Errorf("GetLabels() = %v, want %v", got, wantLabels)
			}
			if got := co.ContainerImages(); !slices.Equal(got, wantImages) {
				t.Errorf("ContainerImages() = %v, want %v", got, wantImages)
			}
			var want metav1.Time
			_ = want.UnmarshalQueryParameter(string(meta[creationTimestamp]))
			if got := co.GetCreationTimestamp(); !got.Equal(&want) || got.IsZero() != want.IsZero() {
				t.Errorf("GetCreationTimestamp() = %v, want %v", got, want)
			}
		})
	}
	var zero compactObject
	if zero.GetName() != "" || zero.GetLabels() != nil || zero.ContainerImages() != nil || !ptrTime(zero.GetCreationTimestamp()).IsZero() || !zero.GroupVersionKind().Empty() {
		t.Errorf("a zero compactObject reads %s", describeSummary(&zero))
	}
}

// TestCompactObjectIsSmall holds the size of the struct that a compact daemon keeps for
// every object, and checks that it refuses to be modified.
func TestCompactObjectIsSmall(t *testing.T) {
	// 32 and 48 bytes (Go's size classes): 16 more than when the summary was in the
	// compactObject, for reading it at the first look rather than at every event.
	if size := unsafe.Sizeof(compactObject{}); size > 32 {
		t.Errorf("compactObject takes %d bytes, want at most 32", size)
	}
	if size := unsafe.Sizeof(compactSummary{}); size > 48 {
		t.Errorf("compactSummary takes %d bytes, want at most 48", size)
	}
	co := newCompactObject(schema.GroupResource{Resource: "pods"}, aggregatetest.RealisticPod("shop", "web-1", "42", map[string]string{"app": "web"}), nil)
	var m metav1.Object = co
	for name, set := range map[string]func(){
		"SetName": func() { m.SetName("x") }, "SetLabels": func() { m.SetLabels(nil) }, "SetResourceVersion": func() { m.SetResourceVersion("1") },
		"SetAnnotations": func() { m.SetAnnotations(nil) }, "SetGroupVersionKind": func() { co.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{}) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s modified the cached object", name)
				}
			}()
			set()
		}()
	}
	if co.GetName() != "web-1" {
		t.Errorf("name %q", co.GetName())
	}
}

// TestExpandScratchIsNotAnEncoding reads encodings that are not compressed, then
// compressed ones, through the scratch space that the latter expand into (summaries and
// JSON written from the CBOR): the scratch space must never be an encoding's own
// memory, which Expand returns for an encoding that is not compressed.
func TestExpandScratchIsNotAnEncoding(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	pod := aggregatetest.RealisticPod("shop", "web-1", "42", map[string]string{"app": "web"})
	plain, err := persist.Codec{}.Encode(pod)
	if err != nil {
		t.Fatal(err)
	}
	other := aggregatetest.RealisticPod("other", "db-2", "43", map[string]string{"app": "db"})
	compressed, err := persist.Codec{Compress: true}.Encode(other)
	if err != nil || len(compressed) >= len(plain) {
		t.Fatalf("the pod is not compressed: %v", err)
	}
	keep := bytes.Clone(plain)
	target := servedTarget{kind: "Pod", apiVersion: "v1", cluster: prod}
	for range 3 {
		if _, ok := summarizeEncoded(persist.Codec{}, pods, plain); !ok {
			t.Fatal("the pod is not summarized")
		}
		if _, err := (&encodedServed{target: target, data: plain, codec: persist.Codec{}, res: cborTestResource}).appendJSON(nil); err != nil {
			t.Fatal(err)
		}
		co, ok := summarizeEncoded(persist.Codec{}, pods, compressed)
		if !ok || co.GetName() != "db-2" {
			t.Fatalf("the compressed pod is not summarized: %v", co)
		}
		out, err := (&encodedServed{target: target, data: compressed, codec: persist.Codec{}, res: cborTestResource}).appendJSON(nil)
		if err != nil || !bytes.Contains(out, []byte(`"db-2"`)) {
			t.Fatalf("the compressed pod is not served: %v", err)
		}
	}
	if !bytes.Equal(plain, keep) {
		t.Fatal("expanding a compressed encoding wrote into another encoding")
	}
}
