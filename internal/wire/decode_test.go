package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	goruntime "runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/internal/intern"
)

// podJSON is a realistic pod as the API server sends it, with managedFields: the one
// that package jsondec's tests decode.
var podJSON = func() []byte {
	data, err := os.ReadFile("../jsondec/testdata/pod.json")
	if err != nil {
		panic(err)
	}
	return data
}()

// serializers returns the negotiated serializer of the dynamic client, and ours.
func serializers(dropManagedFields bool) (apimachinery, ours runtime.NegotiatedSerializer) {
	base := dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer
	return base, newNegotiatedSerializer(base, newDecoderPool(2), new(refusals), dropManagedFields, false, false, false)
}

// jsonInfo returns the JSON media type of ns.
func jsonInfo(t testing.TB, ns runtime.NegotiatedSerializer) runtime.SerializerInfo {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		t.Fatal("no JSON serializer")
	}
	return info
}

// objectDecoder returns the decoder of objects of ns, as a client gets it.
func objectDecoder(t testing.TB, ns runtime.NegotiatedSerializer) runtime.Decoder {
	return ns.DecoderToVersion(jsonInfo(t, ns).Serializer, schema.GroupVersion{Version: "v1"})
}

// jsonDecoders returns the JSON decoder of the dynamic client, and ours.
func jsonDecoders(t testing.TB, dropManagedFields bool) (apimachinery, ours runtime.Decoder) {
	a, o := serializers(dropManagedFields)
	return objectDecoder(t, a), objectDecoder(t, o)
}

// decodeCases are inputs for the decoders: objects, lists and errors as the apiserver
// sends them, and what it never sends.
var decodeCases = []string{
	string(podJSON),
	podListJSON(3),
	`{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"7"},"items":[]}`,
	`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"}},null]}`,
	`{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}}}`,
	`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}`,
	`{"kind":"Status","apiVersion":"other/v9","status":"Failure","code":410}`,
	`{"kind":"WatchEvent","apiVersion":"v1","type":"ADDED","object":{}}`,
	`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[]}`,
	`{"kind":"Widget","apiVersion":"example.com/v1","spec":{"n":1e3,"m":-0,"big":12345678901234567890}}`,
	`{"kind":"Widget","apiVersion":"example.com/"}`,
	`{"kind":"Widget","apiVersion":"/v1"}`,
	`{"kind":"Widget","apiVersion":"a/b/c"}`,
	`{"kind":"Widget","apiVersion":null}`,
	`{"kind":"Widget","apiVersion":1}`,
	`{"kind":"Widget"}`,
	`{"kind":"","apiVersion":"v1"}`,
	`{"kind":null,"apiVersion":"v1"}`,
	`{"apiVersion":"v1"}`,
	`{"APIVersion":"v1","kind":"Pod"}`,
	`{"apiVersion":"v1","kind":"Pod","Kind":"Status"}`,
	`{"apiVersion":"v1","kind":"Pod","kind":"Pod"}`,
	`{"apiVersion":5,"apiVersion":"v1","kind":"Pod"}`,
	`{"apiVersion":"v1","kind":"PodList","items":{}}`,
	`{"apiVersion":"v1","kind":"PodList","items":[1]}`,
	`{"apiVersion":"v1","kind":"Pod","metadata":{"managedFields":[{"manager":"x"}]}}`,
	`{"apiVersion":"v1","kind":"Pod"} x`,
	`{"apiVersion":"v1","kind":"Pod"`,
	`{"apiVersion":"v1","kind":"Pod","spec":1e400}`,
	`null`,
	`[]`,
	`"Pod"`,
	``,
}

// podListJSON returns a PodList of n realistic pods (testPods).
func podListJSON(n int) string {
	return string(newTestPods().list(n))
}

// testPods makes realistic pods: copies of podJSON, compacted, each with its own name,
// uid, resourceVersion, pod IP and container IDs. It is a format for fmt, with these
// as its arguments.
type testPods string

func newTestPods() testPods {
	var pod map[string]any
	if err := json.Unmarshal(podJSON, &pod); err != nil {
		panic(err)
	}
	delete(pod, "apiVersion")
	delete(pod, "kind")
	md := pod["metadata"].(map[string]any)
	md["name"], md["uid"], md["resourceVersion"] = "\x00name", "\x00uid", "\x00rv"
	status := pod["status"].(map[string]any)
	status["podIP"] = "\x00ip"
	for j, c := range status["containerStatuses"].([]any) {
		c.(map[string]any)["containerID"] = fmt.Sprintf("\x00cid%d", j)
	}
	data, err := json.Marshal(pod)
	if err != nil {
		panic(err)
	}
	format := strings.NewReplacer("%", "%%",
		`\u0000name`, "%[1]s", `\u0000uid`, "%[2]s", `\u0000rv`, "%[3]s", `\u0000ip`, "%[4]s",
		`\u0000cid0`, "%[5]s", `\u0000cid1`, "%[6]s", `\u0000cid2`, "%[7]s",
	).Replace(string(data))
	return testPods(format)
}

// append appends pod i.
func (p testPods) append(b []byte, i int) []byte {
	cid := func(j int) string { return fmt.Sprintf("containerd://%064x", i*8+j) }
	return fmt.Appendf(b, string(p),
		fmt.Sprintf("checkout-api-7d9f8b6c5d-%05d", i), fmt.Sprintf("5b1c2d3e-4f50-4a6b-8c7d-%012d", i),
		fmt.Sprint(184467321+i), fmt.Sprintf("10.%d.%d.%d", 64+i/65536, i/256%256, i%256),
		cid(0), cid(1), cid(2))
}

// list returns a PodList of n pods.
func (p testPods) list(n int) []byte {
	b := []byte(`{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"184467400"},"items":[`)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = p.append(b, i)
	}
	return append(b, "]}"...)
}

// events returns a watch stream of n Added events, made as they are read.
func (p testPods) events(n int) io.Reader {
	return &eventReader{pods: p, n: n}
}

type eventReader struct {
	pods testPods
	i, n int
	buf  []byte
}

func (r *eventReader) Read(b []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.i == r.n {
			return 0, io.EOF
		}
		// Unlike list items, the objects of events have their kind.
		const prefix = `{"type":"ADDED","object":`
		r.buf = append(r.pods.append([]byte(prefix), r.i), "}\n"...)
		r.buf = slices.Insert(r.buf, len(prefix)+1, []byte(`"apiVersion":"v1","kind":"Pod",`)...)
		r.i++
	}
	n := copy(b, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// checkDecode checks that ours decodes data into a new object of newInto as
// apimachinery does, apart from the managedFields it drops.
func checkDecode(t *testing.T, apimachinery, ours runtime.Decoder, dropManagedFields bool, data []byte, newInto func() runtime.Object) {
	t.Helper()
	want, wantGVK, wantErr := apimachinery.Decode(data, nil, newInto())
	got, gotGVK, err := ours.Decode(data, nil, newInto())
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%.200q into %T: error %v, apimachinery's %v", data, newInto(), err, wantErr)
	}
	if err != nil {
		if err.Error() != wantErr.Error() {
			t.Errorf("%.200q into %T: error %v, apimachinery's %v", data, newInto(), err, wantErr)
		}
		return
	}
	if dropManagedFields {
		switch want := want.(type) {
		case *unstructured.Unstructured:
			want.SetManagedFields(nil)
		case *unstructured.UnstructuredList:
			for i := range want.Items {
				want.Items[i].SetManagedFields(nil)
			}
		}
	}
	if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
		t.Errorf("%.200q into %T:\ngot  %#v\nwant %#v", data, newInto(), got, want)
	}
	if !reflect.DeepEqual(gotGVK, wantGVK) {
		t.Errorf("%.200q into %T: kind %v, apimachinery's %v", data, newInto(), gotGVK, wantGVK)
	}
}

// sameJSON reports whether a and b encode alike, which reflect.DeepEqual does not
// check for negative zero.
func sameJSON(t *testing.T, a, b any) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

var intos = []func() runtime.Object{
	func() runtime.Object { return nil },
	func() runtime.Object { return &unstructured.Unstructured{} },
	func() runtime.Object { return &unstructured.UnstructuredList{} },
	func() runtime.Object { return &metav1.Status{} },
}

func TestDecodeAsApimachinery(t *testing.T) {
	for _, drop := range []bool{false, true} {
		apimachinery, ours := jsonDecoders(t, drop)
		for _, data := range decodeCases {
			for _, into := range intos {
				checkDecode(t, apimachinery, ours, drop, []byte(data), into)
			}
		}
	}
}

// TestDecodeConcurrently decodes lists and watch event objects on several goroutines
// with one serializer, as the informers of a cluster do; run with -race.
func TestDecodeConcurrently(t *testing.T) {
	_, ours := jsonDecoders(t, true)
	list := []byte(podListJSON(5))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for range 20 {
				var err error
				if g%2 == 0 {
					_, _, err = ours.Decode(list, nil, &unstructured.UnstructuredList{})
				} else {
					_, _, err = ours.Decode(podJSON, nil, nil)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzDecode checks that the dynamic clients of NewDynamicClients decode what the
// dynamic client decodes to the same objects, and fail where it fails.
func FuzzDecode(f *testing.F) {
	for _, data := range decodeCases {
		f.Add([]byte(data), false)
	}
	apimachinery, dropping := jsonDecoders(f, true)
	_, keeping := jsonDecoders(f, false)
	f.Fuzz(func(t *testing.T, data []byte, drop bool) {
		ours := keeping
		if drop {
			ours = dropping
		}
		for _, into := range intos {
			checkDecode(t, apimachinery, ours, drop, data, into)
		}
	})
}

// TestDynamicClient lists and watches through the dynamic clients of
// NewDynamicClients, against a fake apiserver.
func TestDynamicClient(t *testing.T) {
	list := podListJSON(2)
	events := []string{
		`{"type":"ADDED","object":` + string(podJSON) + `}`,
		`{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ua := r.Header.Get("User-Agent"); ua != rest.DefaultKubernetesUserAgent() {
			t.Errorf("User-Agent %q, want the dynamic client's default %q", ua, rest.DefaultKubernetesUserAgent())
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/namespaces/gone/pods":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"gone"}`)
		case r.URL.Query().Get("watch") == "true":
			for _, ev := range events {
				fmt.Fprintln(w, ev)
			}
		default:
			fmt.Fprint(w, list)
		}
	}))
	defer srv.Close()

	dyn, kept, err := NewDynamicClients(&rest.Config{Host: srv.URL}, false)
	if err != nil {
		t.Fatal(err)
	}
	pods := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"})

	got, err := pods.Namespace("shop-prod").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 2 || got.GetResourceVersion() != "184467400" {
		t.Fatalf("listed %d items at %q", len(got.Items), got.GetResourceVersion())
	}
	a, b := got.Items[0], got.Items[1]
	if a.GetKind() != "Pod" || a.GetAPIVersion() != "v1" || a.GetName() == b.GetName() {
		t.Errorf("items %s %s %s, %s", a.GetAPIVersion(), a.GetKind(), a.GetName(), b.GetName())
	}
	if a.GetManagedFields() != nil {
		t.Error("managedFields decoded")
	}
	image := func(u unstructured.Unstructured) string {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
		return containers[0].(map[string]any)["image"].(string)
	}
	if unsafe.StringData(image(a)) != unsafe.StringData(image(b)) {
		t.Error("the same image of two pods is not one string")
	}

	_, err = pods.Namespace("gone").List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("listing from a 404 with a Status: %v, want NotFound", err)
	}

	w, err := pods.Namespace("shop-prod").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	u, ok := ev.Object.(*unstructured.Unstructured)
	if ev.Type != watch.Added || !ok {
		t.Fatalf("first event %s %T", ev.Type, ev.Object)
	}
	if u.GetName() != "checkout-api-7d9f8b6c5d-x2k9p" || u.GetManagedFields() != nil {
		t.Errorf("watched %s, managedFields %v", u.GetName(), u.GetManagedFields())
	}
	if unsafe.StringData(image(*u)) != unsafe.StringData(image(a)) {
		t.Error("the image of a watched pod is not the listed pods' string")
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark || ev.Object.(*unstructured.Unstructured).GetResourceVersion() != "12" {
		t.Errorf("second event %s %#v", ev.Type, ev.Object)
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Errorf("third event %s %#v, want an Expired Status", ev.Type, ev.Object)
	}

	got, err = kept.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("shop-prod").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items[0].GetManagedFields()) == 0 {
		t.Error("managedFields dropped by the client that keeps them")
	}
}

// keep returns a transform that does to an object what an informer's transform does
// to a pod before it keeps it (informer's transform): it drops its managedFields and
// interns its strings, unless interned says that the decoder did both already.
func keep(interned bool) cache.TransformFunc {
	var table intern.Table
	return func(obj any) (any, error) {
		if interned {
			return obj, nil
		}
		u := obj.(*unstructured.Unstructured)
		u.SetManagedFields(nil)
		table.Object(u.Object)
		return u, nil
	}
}

// BenchmarkDecode decodes a list of realistic pods (podJSON, with SSA managedFields)
// into an UnstructuredList: with UnstructuredJSONScheme; with the dynamic client's JSON
// decoder, which reads the list's kind first and then calls it; then also through a
// transform that strips and interns them, as informers did before jsondec; and with our
// decoder, which does both as it decodes. (The transform of package informer leaves
// what our decoder returns alone; BenchmarkTransform there measures its cost.)
func BenchmarkDecode(b *testing.B) {
	const n = 100
	data := []byte(podListJSON(n))
	apimachinery, ours := jsonDecoders(b, true)
	run := func(b *testing.B, dec runtime.Decoder, tf cache.TransformFunc) {
		b.SetBytes(int64(len(data)))
		b.ReportAllocs()
		for b.Loop() {
			obj, _, err := dec.Decode(data, nil, &unstructured.UnstructuredList{})
			if err != nil {
				b.Fatal(err)
			}
			if tf == nil {
				continue
			}
			for i := range obj.(*unstructured.UnstructuredList).Items {
				if _, err := tf(&obj.(*unstructured.UnstructuredList).Items[i]); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/pod")
	}
	b.Run("UnstructuredJSONScheme", func(b *testing.B) { run(b, unstructured.UnstructuredJSONScheme, nil) })
	b.Run("apimachinery", func(b *testing.B) { run(b, apimachinery, nil) })
	b.Run("apimachinery+transform", func(b *testing.B) { run(b, apimachinery, keep(false)) })
	b.Run("jsondec", func(b *testing.B) { run(b, ours, nil) })
}

// BenchmarkListHeap lists 10,000 realistic pods as a reflector does, and keeps them,
// transformed, in a store: in one response (list), or as the events of a streaming list
// (watch). It reports the live heap that they hold (heap-B/pod), the heap spans in use
// for them (inuse-B/pod), and the ratio of the two (inuse/heap): memory freed among the
// objects that stay cannot be given back. Run the sub-benchmarks apart, so that one does
// not inherit the other's heap:
//
//	go test ./internal/wire -run '^$' -bench 'ListHeap/list/jsondec' -benchtime 1x
func BenchmarkListHeap(b *testing.B) {
	const n = 10000
	pods := newTestPods()
	// decode returns the objects of the list or the stream.
	decode := func(b *testing.B, ns runtime.NegotiatedSerializer, list []byte) []runtime.Object {
		if list != nil {
			obj, _, err := objectDecoder(b, ns).Decode(list, nil, &unstructured.UnstructuredList{})
			if err != nil {
				b.Fatal(err)
			}
			items, err := meta.ExtractListWithAlloc(obj)
			if err != nil {
				b.Fatal(err)
			}
			return items
		}
		info := jsonInfo(b, ns)
		frames := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(pods.events(n)))
		dec := restclientwatch.NewDecoder(streaming.NewDecoder(frames, info.StreamSerializer.Serializer), objectDecoder(b, ns))
		var items []runtime.Object
		for {
			_, obj, err := dec.Decode()
			if errors.Is(err, io.EOF) {
				return items
			}
			if err != nil {
				b.Fatal(err)
			}
			items = append(items, obj)
		}
	}
	settle := func(m *goruntime.MemStats) {
		goruntime.GC()
		goruntime.GC()
		debug.FreeOSMemory()
		goruntime.ReadMemStats(m)
	}
	run := func(b *testing.B, ns runtime.NegotiatedSerializer, interned, watched bool) {
		// The response of a list is in memory while it is decoded, the events of a
		// watch one at a time.
		var list []byte
		if !watched {
			list = pods.list(n)
		}
		var heap, inuse float64
		var after goruntime.MemStats
		for b.Loop() {
			b.StopTimer()
			var before goruntime.MemStats
			settle(&before)
			b.StartTimer()
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			tf := keep(interned)
			for _, item := range decode(b, ns, list) {
				kept, err := tf(item)
				if err != nil {
					b.Fatal(err)
				}
				if err := store.Add(kept); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			settle(&after)
			if len(store.ListKeys()) != n {
				b.Fatalf("%d pods stored", len(store.ListKeys()))
			}
			heap += float64(after.HeapAlloc) - float64(before.HeapAlloc)
			inuse += float64(after.HeapInuse) - float64(before.HeapInuse)
			goruntime.KeepAlive(store)
			goruntime.KeepAlive(list)
			b.StartTimer()
		}
		b.ReportMetric(heap/float64(b.N*n), "heap-B/pod")
		b.ReportMetric(inuse/float64(b.N*n), "inuse-B/pod")
		b.ReportMetric(inuse/heap, "inuse/heap")
		b.ReportMetric(float64(after.HeapAlloc)/(1<<20), "HeapAlloc-MiB")
		b.ReportMetric(float64(after.HeapInuse)/(1<<20), "HeapInuse-MiB")
	}
	apimachinery, ours := serializers(true)
	for _, watched := range []bool{false, true} {
		name := "list"
		if watched {
			name = "watch"
		}
		b.Run(name+"/apimachinery", func(b *testing.B) { run(b, apimachinery, false, watched) })
		b.Run(name+"/jsondec", func(b *testing.B) { run(b, ours, true, watched) })
	}
}

// TestSharedNegotiatedSerializers: the clients of thousands of clusters share their JSON
// decoders, made once per setting, and each has its own protobuf decoder, which records
// the refusals of its cluster; a client's media types are not written over by the next
// client's.
func TestSharedNegotiatedSerializers(t *testing.T) {
	r1, r2 := new(refusals), new(refusals)
	s1 := sharedNegotiatedSerializer(decoders, r1, true, true, true, false)
	s2 := sharedNegotiatedSerializer(decoders, r2, true, true, true, false)
	other := sharedNegotiatedSerializer(decoders, r1, false, true, true, false)
	byType := func(s negotiatedSerializer, mediaType string) runtime.SerializerInfo {
		t.Helper()
		for _, info := range s.SupportedMediaTypes() {
			if info.MediaType == mediaType {
				return info
			}
		}
		t.Fatalf("no %s among %d media types", mediaType, len(s.SupportedMediaTypes()))
		return runtime.SerializerInfo{}
	}
	if len(s1.mediaTypes) != len(s2.mediaTypes) {
		t.Fatalf("%d media types, then %d", len(s1.mediaTypes), len(s2.mediaTypes))
	}
	if byType(s1, runtime.ContentTypeJSON).Serializer != byType(s2, runtime.ContentTypeJSON).Serializer {
		t.Error("two clients of the same settings have JSON decoders of their own")
	}
	if byType(s1, runtime.ContentTypeJSON).Serializer == byType(other, runtime.ContentTypeJSON).Serializer {
		t.Error("clients that keep and drop managedFields share a JSON decoder")
	}
	for _, c := range []struct {
		s    negotiatedSerializer
		want *refusals
	}{{s1, r1}, {s2, r2}} {
		p, ok := byType(c.s, contentTypeProtobuf).Serializer.(*unstructuredProtobuf)
		if !ok || p.refused != c.want {
			t.Errorf("protobuf decoder %T records the refusals of another client", byType(c.s, contentTypeProtobuf).Serializer)
		}
	}
}
