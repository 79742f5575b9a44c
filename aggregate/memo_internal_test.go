package aggregate

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var memoConfigMaps = corev1.SchemeGroupVersion.WithResource("configmaps")

// memoConfigMap returns ConfigMap ns/name at resourceVersion rv.
func memoConfigMap(name, rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetResourceVersion(rv)
	return u
}

// TestTypedMemoClock checks the memo's bound and its CLOCK eviction: a full memo evicts
// the first entry from the hand on that no read marked since the hand last passed it,
// unmarking the marked ones it passes; a new version of a key kept takes its entry's
// slot, and only the version kept is found.
func TestTypedMemoClock(t *testing.T) {
	f := New(Options{})
	s := f.ClusterStore("a", memoConfigMaps)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	held := func(i int, rv string) (memoKey, Held) {
		t.Helper()
		name := fmt.Sprintf("cm-%d", i)
		if err := s.Apply(memoConfigMap(name, rv), false); err != nil {
			t.Fatal(err)
		}
		h, ok := f.Indexer(memoConfigMaps).GetHeld(Key{Cluster: "a", Namespace: "ns", Name: name})
		if !ok {
			t.Fatalf("%s not held", name)
		}
		return memoKey{key: h.Key(), gvk: gvk}, h
	}
	var keys []memoKey
	var helds []Held
	for i := range 6 {
		k, h := held(i, "1")
		keys, helds = append(keys, k), append(helds, h)
	}
	m := NewTypedMemo(3)
	add := func(i int) {
		m.add(keys[i], helds[i].Version(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}})
	}
	for _, step := range []struct {
		add, get []int
		// update is the object updated before the step, whose kept version then is not
		// the fleet's.
		update int
		want   []int
	}{
		{update: -1, add: []int{0, 1, 2}, want: []int{0, 1, 2}},
		// 0 is marked: the hand unmarks it and evicts 1.
		{update: -1, get: []int{0}, add: []int{3}, want: []int{0, 2, 3}},
		// The hand is at 2, unmarked.
		{update: -1, add: []int{4}, want: []int{0, 3, 4}},
		// 0 was unmarked when the hand passed it.
		{update: -1, add: []int{5}, want: []int{3, 4, 5}},
		// Every entry marked: the hand goes round once, unmarking them, and evicts 3.
		{update: -1, get: []int{3, 4, 5}, add: []int{0}, want: []int{0, 4, 5}},
		// 4 is updated: its kept version is not found, and the new one takes its slot.
		{update: 4, want: []int{0, 5}},
		{update: -1, add: []int{4}, want: []int{0, 4, 5}},
	} {
		if step.update >= 0 {
			keys[step.update], helds[step.update] = held(step.update, "2")
		}
		for _, i := range step.get {
			if m.get(keys[i]) == nil {
				t.Fatalf("cm-%d is not kept", i)
			}
		}
		for _, i := range step.add {
			add(i)
		}
		var got []int
		for i, k := range keys {
			if e := m.get(k); e != nil && helds[i].Is(e.version) {
				if name := e.obj.(*corev1.ConfigMap).Name; name != fmt.Sprintf("cm-%d", i) {
					t.Errorf("cm-%d keeps %s", i, name)
				}
				got = append(got, i)
			}
		}
		// The reads above marked every entry: unmark them as the step left them.
		for _, e := range m.ring {
			e.marked.Store(false)
		}
		if !slices.Equal(got, step.want) || m.Len() > m.size {
			t.Fatalf("after get %v, add %v: kept %v (%d entries), want %v", step.get, step.add, got, m.Len(), step.want)
		}
	}
}
