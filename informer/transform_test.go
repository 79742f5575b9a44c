package informer

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

var podsMapping = Mapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespaced: true}

// podJSON is a realistic pod as the API server sends it, with managedFields: the one
// that package jsondec's tests decode.
var podJSON = func() []byte {
	data, err := os.ReadFile("../internal/jsondec/testdata/pod.json")
	if err != nil {
		panic(err)
	}
	return data
}()

// decodePod decodes podJSON the way the dynamic client does, under another name.
func decodePod(tb testing.TB, name string) *unstructured.Unstructured {
	tb.Helper()
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode(podJSON, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	u := obj.(*unstructured.Unstructured)
	u.SetName(name)
	return u
}

func TestTransform(t *testing.T) {
	known := cache.NewStore(cache.MetaNamespaceKeyFunc)
	tf := transform(Options{}, podsMapping, known, false)

	want := decodePod(t, "a")
	want.SetManagedFields(nil)
	a, err := tf(decodePod(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, want) {
		t.Fatalf("transformed pod differs from the pod without managedFields:\n%v\n%v", a, want)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(a.(*unstructured.Unstructured).Object, "metadata", "managedFields"); found {
		t.Error("managedFields kept")
	}

	b, err := tf(decodePod(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	image := func(obj any) string {
		containers, _, _ := unstructured.NestedSlice(obj.(*unstructured.Unstructured).Object, "spec", "containers")
		return containers[0].(map[string]any)["image"].(string)
	}
	if ia, ib := image(a), image(b); unsafe.StringData(ia) != unsafe.StringData(ib) {
		t.Error("the same image of two pods is not one string")
	}

	// An object stored at the same resourceVersion is handed out as stored.
	if err := known.Add(a); err != nil {
		t.Fatal(err)
	}
	again, err := tf(decodePod(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if again != a {
		t.Error("the stored object at the same resourceVersion was not reused")
	}
}

// versionedStore is a store that tells resourceVersions without handing out its
// objects (as aggregate.ClusterStore does without decoding), and counts the objects it
// hands out.
type versionedStore struct {
	cache.Store
	gets int
}

func (s *versionedStore) GetByKey(key string) (any, bool, error) {
	s.gets++
	return s.Store.GetByKey(key)
}

func (s *versionedStore) ResourceVersionByKey(key string) (string, bool) {
	obj, ok, _ := s.Store.GetByKey(key)
	if !ok {
		return "", false
	}
	return obj.(*unstructured.Unstructured).GetResourceVersion(), true
}

// TestTransformAsksVersion checks that the transform of a watched change, at a new
// resourceVersion, does not take the stored object from a store that tells
// resourceVersions (a compact fleet decodes it to hand it out), and that an object at
// the stored resourceVersion is still handed out as stored.
func TestTransformAsksVersion(t *testing.T) {
	known := &versionedStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	tf := transform(Options{}, podsMapping, known, false)
	a, err := tf(decodePod(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := known.Add(a); err != nil {
		t.Fatal(err)
	}
	changed := decodePod(t, "a")
	changed.SetResourceVersion(changed.GetResourceVersion() + "1")
	if _, err := tf(changed); err != nil {
		t.Fatal(err)
	}
	if known.gets != 0 {
		t.Errorf("the transform of a change at a new resourceVersion took the stored object %d times", known.gets)
	}
	again, err := tf(decodePod(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	if again != a {
		t.Error("the stored object at the same resourceVersion was not reused")
	}
}

// TestTransformOfInterned checks that the transform of a Set whose decoder interns
// interns only what a user Transform returns.
func TestTransformOfInterned(t *testing.T) {
	team := func(obj any) string { return obj.(*unstructured.Unstructured).GetLabels()["team"] }
	plain := transform(Options{}, podsMapping, cache.NewStore(cache.MetaNamespaceKeyFunc), true)
	a, err := plain(decodePod(t, "a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := plain(decodePod(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.StringData(team(a)) == unsafe.StringData(team(b)) {
		t.Error("the transform interned objects that the decoder interns")
	}
	if a.(*unstructured.Unstructured).GetManagedFields() != nil {
		t.Error("managedFields kept")
	}

	relabel := transform(Options{Transform: func(obj any) (any, error) {
		u := obj.(*unstructured.Unstructured)
		labels := u.GetLabels()
		labels["team"] = strings.ToUpper(labels["team"])
		u.SetLabels(labels)
		return u, nil
	}}, podsMapping, cache.NewStore(cache.MetaNamespaceKeyFunc), true)
	if a, err = relabel(decodePod(t, "a")); err != nil {
		t.Fatal(err)
	}
	if b, err = relabel(decodePod(t, "b")); err != nil {
		t.Fatal(err)
	}
	if team(a) != "PAYMENTS" || unsafe.StringData(team(a)) != unsafe.StringData(team(b)) {
		t.Errorf("what the user Transform returned (%q) is not interned", team(a))
	}
}

// BenchmarkTransform measures the transform of a freshly decoded realistic pod. It
// reports the heap that a pod holds once transformed (heap-B/pod), with only its
// managedFields stripped (stripped-heap-B/pod), and as decoded (decoded-heap-B/pod).
func BenchmarkTransform(b *testing.B) {
	const n = 1000
	tf := transform(Options{}, podsMapping, cache.NewStore(cache.MetaNamespaceKeyFunc), false)
	batch := make([]*unstructured.Unstructured, n)
	i := 0
	for b.Loop() {
		if i%n == 0 {
			b.StopTimer()
			for j := range batch {
				batch[j] = decodePod(b, fmt.Sprint("pod-", i+j))
			}
			b.StartTimer()
		}
		if _, err := tf(batch[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.StopTimer()
	batch = nil

	heapPerPod := func(tf cache.TransformFunc) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := make([]any, n)
		for j := range kept {
			var err error
			if kept[j], err = tf(decodePod(b, fmt.Sprint("kept-", j))); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(kept)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	b.ReportMetric(heapPerPod(transform(Options{}, podsMapping, cache.NewStore(cache.MetaNamespaceKeyFunc), false)), "heap-B/pod")
	b.ReportMetric(heapPerPod(func(obj any) (any, error) {
		obj.(*unstructured.Unstructured).SetManagedFields(nil)
		return obj, nil
	}), "stripped-heap-B/pod")
	b.ReportMetric(heapPerPod(func(obj any) (any, error) { return obj, nil }), "decoded-heap-B/pod")
}
