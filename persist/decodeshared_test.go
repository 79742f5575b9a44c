package persist

import (
	"fmt"
	"hash/maphash"
	"reflect"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// sharedPods returns n pods of testdata/pod.json, each with a name of its own and every
// other one with a container image of its own, and their encodings in codec.
func sharedPods(t *testing.T, codec Codec, n int) ([]*unstructured.Unstructured, [][]byte) {
	t.Helper()
	var pods []*unstructured.Unstructured
	var encs [][]byte
	for i := range n {
		pod := testPod(t, "ns", fmt.Sprintf("pod-%04d", i))
		if i%2 == 1 {
			c := pod.Object["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
			c["image"] = fmt.Sprintf("registry.example.com/app:%04d", i)
		}
		enc, err := codec.Encode(pod)
		if err != nil {
			t.Fatal(err)
		}
		pods, encs = append(pods, pod), append(encs, enc)
	}
	return pods, encs
}

// container returns the container i of pod's spec.
func container(pod map[string]any, i int) any {
	return pod["spec"].(map[string]any)["containers"].([]any)[i]
}

// TestDecodeShared: DecodeShared decodes each object to what it was encoded from, in
// every encoding, and the objects share the maps and arrays that they hold alike once
// their encodings have been met twice, and only those: each has its own root map and
// metadata, and an object's containers of its own image are its own.
func TestDecodeShared(t *testing.T) {
	// The table is a cache of one value per slot, hashed with the process's seed: two
	// values whose slots collide take it from each other at every pod (about one seed
	// in sixty here), and the pods that hold one of them hold copies. So the pods are
	// decoded with up to three seeds, each checked whole, and one must share.
	defer func(seed maphash.Seed) { sharedSeed = seed }(sharedSeed)
	for _, codec := range []Codec{{}, {Compress: true}} {
		t.Run(fmt.Sprintf("compress=%v", codec.Compress), func(t *testing.T) {
			var tries [][]string
			for range 3 {
				wrong := decodeShared(t, codec)
				if len(wrong) == 0 {
					return
				}
				tries = append(tries, wrong)
				sharedSeed = maphash.MakeSeed()
			}
			t.Errorf("with three seeds: %q", tries)
		})
	}
}

// decodeShared decodes TestDecodeShared's pods three times over with codec, checks
// each, and returns what the objects share that they should not, and do not that they
// should.
func decodeShared(t *testing.T, codec Codec) (wrong []string) {
	t.Helper()
	pods, encs := sharedPods(t, codec, 8)
	var d fastDecoder
	tab := new(keptValues)
	var got []map[string]any
	for round := range 3 {
		got = got[:0]
		for i, enc := range encs {
			obj, err := d.decodeKept(string(enc), tab)
			if err != nil {
				t.Fatal(err)
			}
			m := obj.(*unstructured.Unstructured).Object
			if !reflect.DeepEqual(m, pods[i].Object) {
				t.Fatalf("round %d: pod %d decoded as %v, encoded as %v", round, i, m, pods[i].Object)
			}
			got = append(got, m)
		}
	}
	field := func(i int, path ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(got[i], path...)
		return v
	}
	// The first container (about 1.5 KB) is shared, not the spec (beyond
	// maxKeptEncoding).
	if !sameMap(container(got[0], 0), container(got[2], 0)) {
		wrong = append(wrong, "pods with the same container hold copies of it")
	}
	if sameMap(container(got[0], 0), container(got[1], 0)) {
		t.Error("pods with different containers hold the same map")
	}
	if !sameMap(container(got[0], 1), container(got[1], 1)) {
		wrong = append(wrong, "pods with the same second container hold copies of it")
	}
	if !sameMap(field(0, "spec", "volumes"), field(1, "spec", "volumes")) {
		wrong = append(wrong, "pods with the same volumes hold copies of them")
	}
	if sameMap(got[0], got[2]) || sameMap(field(0, "metadata"), field(2, "metadata")) {
		t.Error("two pods share their root map or their metadata")
	}
	if !sameMap(field(0, "metadata", "labels"), field(2, "metadata", "labels")) {
		wrong = append(wrong, "pods with the same labels hold copies of them")
	}
	// Nothing shared reached the objects that DecodeShared did not decode.
	obj, err := codec.Decode(encs[0])
	if err != nil {
		t.Fatal(err)
	}
	if sameMap(container(obj.(*unstructured.Unstructured).Object, 0), container(got[0], 0)) {
		t.Error("Decode handed out a map of DecodeShared")
	}
	return wrong
}

// TestDecodeSharedKeepsOnlyWhatRepeats: an encoding met once in its slot is not kept
// (the table holds its tag only), so a value of one object neither costs a copy nor
// pushes out a shared one; met twice in a row, it is kept.
func TestDecodeSharedKeepsOnlyWhatRepeats(t *testing.T) {
	// An object whose maps and arrays are all different.
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns", "labels": map[string]any{"app": "x"}},
		"data":     map[string]any{"a": "1"},
		"binary":   []any{"b", int64(2)},
	}}
	enc, err := Codec{}.Encode(cm)
	if err != nil {
		t.Fatal(err)
	}
	encs := [][]byte{enc}
	var d fastDecoder
	tab := new(keptValues)
	held := func() int {
		n := 0
		for i := range tab.slots {
			if tab.slots[i].Load() != nil {
				n++
			}
		}
		return n
	}
	if _, err := d.decodeKept(string(encs[0]), tab); err != nil {
		t.Fatal(err)
	}
	if n := held(); n != 0 {
		t.Fatalf("after one decode, %d values held, want none", n)
	}
	if _, err := d.decodeKept(string(encs[0]), tab); err != nil {
		t.Fatal(err)
	}
	if held() == 0 { // labels, data and binary, but where two of them met in a slot
		t.Fatal("after two decodes of one object, no value held")
	}
}

// TestDecodeSharedOwnsItsKeys: the table of DecodeShared outlives the call, so it keeps
// copies of the encodings, never views of data: the caller may reuse its buffer, and
// data may be memory that goes away (a bbolt value, which the next remap unmaps). Here
// the buffer decoded from is scribbled over after each call; every later decode still
// finds the shared values, and decodes to what was encoded.
func TestDecodeSharedOwnsItsKeys(t *testing.T) {
	pods, encs := sharedPods(t, Codec{}, 4)
	var d fastDecoder
	tab := new(keptValues)
	for round := range 3 {
		for i, enc := range encs {
			buf := []byte(string(enc))
			// A view of buf, as Codec.DecodeShared takes data.
			obj, err := d.decodeKept(unsafe.String(unsafe.SliceData(buf), len(buf)), tab)
			for j := range buf {
				buf[j] = 0xff
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(obj.(*unstructured.Unstructured).Object, pods[i].Object) {
				t.Fatalf("round %d: pod %d decoded as %v", round, i, obj)
			}
		}
	}
	for i := range tab.slots {
		if sv := tab.slots[i].Load(); sv != nil && strings.Contains(sv.enc, "\xff\xff\xff\xff") {
			t.Fatal("the table holds a view of a buffer decoded from")
		}
	}
	a, err := d.decodeKept(string(encs[0]), tab)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.decodeKept(string(encs[2]), tab)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMap(container(a.(*unstructured.Unstructured).Object, 1), container(b.(*unstructured.Unstructured).Object, 1)) {
		t.Error("the shared values were not found after their buffers were reused")
	}
}

// TestDecodeSharedKeepsNoLargeValue: a map or slice whose encoding is longer than
// maxKeptEncoding (a big ConfigMap's data) is not kept, however often it is met, so that
// the table's memory stays bounded; what it holds that is short is.
func TestDecodeSharedKeepsNoLargeValue(t *testing.T) {
	data := map[string]any{}
	for i := range 64 {
		data[fmt.Sprintf("key-%02d", i)] = strings.Repeat("v", 64)
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cm", "namespace": "ns"},
		"data":     data,
		"binary":   []any{"b"},
	}}
	enc, err := Codec{}.Encode(cm)
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) <= maxKeptEncoding {
		t.Fatalf("the ConfigMap's encoding is %d bytes, not beyond %d", len(enc), maxKeptEncoding)
	}
	var d fastDecoder
	tab := new(keptValues)
	var got []map[string]any
	for range 4 {
		obj, err := d.decodeKept(string(enc), tab)
		if err != nil {
			t.Fatal(err)
		}
		m := obj.(*unstructured.Unstructured).Object
		if !reflect.DeepEqual(m, cm.Object) {
			t.Fatalf("decoded %v", m)
		}
		got = append(got, m)
	}
	if sameMap(got[2]["data"], got[3]["data"]) {
		t.Error("a map beyond maxKeptEncoding was kept")
	}
	if !sameMap(got[2]["binary"], got[3]["binary"]) {
		t.Error("a short slice met twice was not kept")
	}
	for i := range tab.slots {
		if sv := tab.slots[i].Load(); sv != nil && len(sv.enc) > maxKeptEncoding {
			t.Fatalf("the table holds an encoding of %d bytes", len(sv.enc))
		}
	}
}

// TestDecodeSharedKeepsAtMostItsBudget: the encodings that a table keeps are at most
// maxKeptBytes in all, however many distinct ones repeat, and it counts them exactly;
// a table that would keep more starts over, so that it keeps what repeats last.
func TestDecodeSharedKeepsAtMostItsBudget(t *testing.T) {
	var d fastDecoder
	tab := new(keptValues)
	value := strings.Repeat("v", maxKeptEncoding/2)
	n := 2 * maxKeptBytes / len(value) // twice what the budget holds
	var last []any
	for i := range n {
		cm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "cm", "namespace": "ns"},
			"data":     map[string]any{fmt.Sprintf("key-%05d", i): value},
		}}
		enc, err := Codec{}.Encode(cm)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			obj, err := d.decodeKept(string(enc), tab)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(obj.(*unstructured.Unstructured).Object, cm.Object) {
				t.Fatalf("decoded %v", obj)
			}
			last = append(last, obj.(*unstructured.Unstructured).Object["data"])
		}
		if i == n-1 {
			obj, err := d.decodeKept(string(enc), tab)
			if err != nil {
				t.Fatal(err)
			}
			if !sameMap(obj.(*unstructured.Unstructured).Object["data"], last[len(last)-1]) {
				t.Error("the value that repeated last is not kept")
			}
		}
	}
	held, sum := 0, 0
	for i := range tab.slots {
		if sv := tab.slots[i].Load(); sv != nil {
			held++
			sum += len(sv.enc)
		}
	}
	if int64(sum) != tab.bytes.Load() || sum > maxKeptBytes {
		t.Errorf("the table keeps %d bytes of encodings, counts %d, may keep %d", sum, tab.bytes.Load(), maxKeptBytes)
	}
	if held == 0 {
		t.Error("the table keeps nothing")
	}
}

// TestDecodeSharedConcurrently: decoders on several goroutines share one table, as the
// pool's do, while it fills past its budget and starts over; every object decodes to
// what was encoded, and the table's count of its bytes stays exact (run with -race).
func TestDecodeSharedConcurrently(t *testing.T) {
	value := strings.Repeat("v", maxKeptEncoding/2)
	n := 3 * maxKeptBytes / len(value) / 2 // one and a half times what the budget holds
	objs := make([]*unstructured.Unstructured, n)
	encs := make([][]byte, n)
	for i := range n {
		objs[i] = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": "ns"},
			"data":     map[string]any{fmt.Sprintf("key-%05d", i): value},
			"binary":   []any{"shared"},
		}}
		var err error
		if encs[i], err = (Codec{}).Encode(objs[i]); err != nil {
			t.Fatal(err)
		}
	}
	tab := new(keptValues)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			var d fastDecoder
			for k := range 2 * n {
				i := (k/2 + g*n/4) % n // each object twice in a row, from a place of its own
				obj, err := d.decodeKept(string(encs[i]), tab)
				if err == nil && !reflect.DeepEqual(obj.(*unstructured.Unstructured).Object, objs[i].Object) {
					err = fmt.Errorf("object %d decoded as %v", i, obj)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sum := 0
	for i := range tab.slots {
		if sv := tab.slots[i].Load(); sv != nil {
			sum += len(sv.enc)
		}
	}
	if int64(sum) != tab.bytes.Load() || sum > maxKeptBytes+maxKeptEncoding*4 {
		t.Errorf("the table keeps %d bytes of encodings, counts %d, may keep %d", sum, tab.bytes.Load(), maxKeptBytes)
	}
}
