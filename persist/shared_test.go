package persist

import (
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// sameMap reports whether a and b are the same map, not only equal ones.
func sameMap(a, b any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// TestLoadSharesEqualMaps: the objects of a cluster that a load decodes share the maps
// and arrays that they hold alike (a pod's spec, its labels), and only those: each has
// its own root map and metadata, and every object still decodes to what it was stored
// as, over more than one chunk.
func TestLoadSharesEqualMaps(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	var stored []*unstructured.Unstructured
	for i := range loadChunk + 10 { // more than one chunk
		pod := testPod(t, "ns", fmt.Sprintf("pod-%04d", i))
		if i%2 == 1 {
			// Another spec: an image of its own.
			c := pod.Object["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["image"] = fmt.Sprintf("registry.example.com/app:%d", i)
		}
		stored = append(stored, pod)
		w.Upsert("a", pods, pod)
	}
	w.Checkpoint("a", pods, "100")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The table is a cache of one value per slot, hashed with the process's seed: a
	// value decoded later may take the slot of a shared one, and the next pod that
	// holds it decodes a copy, shared from then on; and two values whose slots collide
	// take it from each other at every pod (about one seed in three hundred here). So
	// a load is tried with up to three seeds, each checked whole, and one must share.
	defer func(seed maphash.Seed) { sharedSeed = seed }(sharedSeed)
	var tries []string
	for range 3 {
		specs, resources := loadShared(t, s, stored)
		if specs <= 8 && resources <= 8 {
			return
		}
		tries = append(tries, fmt.Sprintf("%d copies of the spec, %d of the container resources", specs, resources))
		sharedSeed = maphash.MakeSeed()
	}
	t.Errorf("the %d pods of a chunk that hold a spec alike, and the %d that hold container resources alike, hold (with three seeds) %q; with the table off, %d and %d", loadChunk/2, loadChunk, tries, loadChunk/2, loadChunk)
}

// loadShared loads the pods that TestLoadSharesEqualMaps stored, checks them, and
// returns how many copies of the spec the pods of the first chunk with the same spec
// hold, and of the container resources that all of them hold alike.
func loadShared(t *testing.T, s *Store, stored []*unstructured.Unstructured) (specs, resources int) {
	t.Helper()
	rs := resourceOf(mustLoad(t, s), "a", pods)
	if len(rs.Objects) != len(stored) {
		t.Fatalf("loaded %d objects, want %d", len(rs.Objects), len(stored))
	}
	field := func(i int, name string) any { return rs.Objects[i].(*unstructured.Unstructured).Object[name] }
	for i, obj := range rs.Objects {
		if !reflect.DeepEqual(obj.(*unstructured.Unstructured).Object, stored[i].Object) {
			t.Fatalf("object %d loaded as %v, stored as %v", i, obj, stored[i])
		}
	}
	// Each decoder has its table: pods of one chunk share, those of two may not.
	resourcesOf := func(i int) any {
		c := field(i, "spec").(map[string]any)["containers"].([]any)[0].(map[string]any)
		return c["resources"]
	}
	specMaps, resourceMaps := map[unsafe.Pointer]bool{}, map[unsafe.Pointer]bool{}
	for i := 0; i+1 < loadChunk; i += 2 {
		specMaps[reflect.ValueOf(field(i, "spec")).UnsafePointer()] = true
		// The spec of pod i+1 is its own, but what it holds like pod i is shared.
		for _, j := range []int{i, i + 1} {
			if resourcesOf(j) == nil {
				t.Fatalf("pod %d has no container resources", j)
			}
			resourceMaps[reflect.ValueOf(resourcesOf(j)).UnsafePointer()] = true
		}
		if sameMap(field(i, "spec"), field(i+1, "spec")) {
			t.Fatalf("pods %d and %d, with different specs, hold the same map", i, i+1)
		}
	}
	if sameMap(field(0, "metadata"), field(2, "metadata")) || sameMap(rs.Objects[0].(*unstructured.Unstructured).Object, rs.Objects[2].(*unstructured.Unstructured).Object) {
		t.Fatal("two objects share their metadata or their root map")
	}
	return len(specMaps), len(resourceMaps)
}

// TestSharedValuesIgnoreExpandedEncodings: the shared values are found by views of the
// values being decoded, which must stay put while the decoder holds them. A compressed
// value is expanded in the decoder's scratch space, which the next one overwrites, so
// the decoder keeps no view of it: a view there would, once the scratch holds another
// value, find the first value's map for the second's bytes at the same place.
func TestSharedValuesIgnoreExpandedEncodings(t *testing.T) {
	obj := map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"},
		"data": map[string]any{"k": "value " + string(make([]byte, 200))}}
	enc, err := direct.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	compressed := compress(enc)
	if !isCompressed(compressed[0]) {
		t.Fatal("the test's encoding is not compressed")
	}
	d := fastDecoder{shared: new(sharedValues)}
	views := func() (in, out int) {
		lo := uintptr(unsafe.Pointer(unsafe.SliceData(d.scratch)))
		hi := lo + uintptr(cap(d.scratch))
		for _, sv := range d.shared.slots {
			if sv.v == nil {
				continue
			}
			if p := uintptr(unsafe.Pointer(unsafe.StringData(sv.enc))); p >= lo && p < hi {
				in++
			} else {
				out++
			}
		}
		return in, out
	}
	for _, data := range [][]byte{compressed, enc, compressed} {
		got, err := d.decode(string(data))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.(*unstructured.Unstructured).Object, obj) {
			t.Fatalf("decoded %v, want %v", got, obj)
		}
		if in, out := views(); in > 0 || out == 0 && !isCompressed(data[0]) {
			t.Fatalf("after a value of format %d, the shared values hold %d views of the scratch space, %d of values", data[0], in, out)
		}
	}
}

// TestSharedValuesEndWithTheLoad: the shared values are found by views of the file's
// memory map, so they must not outlive the load that made them. Two loads of equal
// objects from two files, the first closed (unmapped) before the second: a table kept
// from the first load would, on the second's equal bytes, compare them with views of
// the unmapped file and fault, or hand the second load the first load's maps.
func TestSharedValuesEndWithTheLoad(t *testing.T) {
	var first *Snapshot
	for i := range 2 {
		s, err := Open(testPath(t), Options{})
		if err != nil {
			t.Fatal(err)
		}
		w := s.NewWriter(WriterOptions{})
		for j := range 50 {
			w.Upsert("a", pods, testPod(t, "ns", fmt.Sprintf("pod-%02d", j)))
		}
		w.Checkpoint("a", pods, "100")
		if err := w.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		snap := mustLoad(t, s)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		rs := resourceOf(snap, "a", pods)
		if len(rs.Objects) != 50 {
			t.Fatalf("load %d: %d objects, want 50", i, len(rs.Objects))
		}
		if i == 0 {
			first = snap
			continue
		}
		spec := func(snap *Snapshot) any {
			return resourceOf(snap, "a", pods).Objects[0].(*unstructured.Unstructured).Object["spec"]
		}
		if sameMap(spec(first), spec(snap)) {
			t.Error("the second load's objects hold the first load's maps")
		}
	}
}

// TestSharedValuesResetClearsEverySlot: a reset, at each cluster of a load, leaves no
// slot set, so that the table keeps no view of pages that the load then evicts; it
// clears only the slots set since the last reset, and the next cluster's values are
// shared again.
func TestSharedValuesResetClearsEverySlot(t *testing.T) {
	d := fastDecoder{shared: new(sharedValues)}
	set := func() int {
		n := 0
		for _, sv := range d.shared.slots {
			if sv.v != nil || sv.enc != "" {
				n++
			}
		}
		return n
	}
	for round := range 3 {
		for i := range 50 {
			obj := map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": fmt.Sprint("p", i)},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": fmt.Sprint("image-", round, "-", i%7)}}}}
			enc, err := direct.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.decode(string(enc)); err != nil {
				t.Fatal(err)
			}
		}
		if n := set(); n == 0 || n != len(d.shared.used) {
			t.Fatalf("round %d: %d slots set, %d recorded as used", round, n, len(d.shared.used))
		}
		d.shared.reset()
		if n := set(); n != 0 || len(d.shared.used) != 0 {
			t.Fatalf("round %d: after reset, %d slots set, %d recorded as used", round, n, len(d.shared.used))
		}
	}
}
