package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/internal/wire"
	"github.com/fleetwatch/fleetwatch/persist"
)

// partialOf returns the partial form of p that an informer hands a compact fleet for a
// listed object, with its encoding.
func partialOf(t *testing.T, p *unstructured.Unstructured) (*unstructured.Unstructured, []byte) {
	t.Helper()
	encoded, err := persist.Codec{}.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	e := (&wire.EncodedObject{Unstructured: p.DeepCopy(), Encoded: encoded}).ToPartial()
	return e.Unstructured, e.Encoded
}

// TestCompactFleetPartial holds the objects that a compact fleet gets partial, as the
// objects of a streaming list, to the contracts of whole ones: reads, label selectors, a
// custom index, and events whose objects are whole and carry their cluster. A plain fleet
// refuses them.
func TestCompactFleetPartial(t *testing.T) {
	byNode := cache.Indexers{"node": func(obj any) ([]string, error) {
		node, _, err := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "spec", "nodeName")
		return []string{node}, err
	}}
	f := aggregate.New(aggregate.Options{Codec: persist.Codec{}, HotObjects: 4, Indexers: byNode})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.Start(ctx) }()
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	store := f.ClusterStore("a", aggregatetest.Pods)
	want := map[string]*unstructured.Unstructured{}
	for i := range 12 {
		p := aggregatetest.RealisticPod("ns", fmt.Sprintf("pod-%d", i), fmt.Sprint(10+i), map[string]string{"app": fmt.Sprintf("app-%d", i%3)})
		if err := unstructured.SetNestedField(p.Object, fmt.Sprintf("node-%d", i%2), "spec", "nodeName"); err != nil {
			t.Fatal(err)
		}
		partial, encoded := partialOf(t, p)
		if err := store.ApplyPartial(partial, encoded, true); err != nil {
			t.Fatal(err)
		}
		want[p.GetName()] = p
	}
	ix := f.Indexer(aggregatetest.Pods)
	if n := aggregate.HotObjects(ix); n > 4 {
		t.Errorf("%d objects held decoded, want at most 4", n)
	}
	for name, p := range want {
		got, ok := ix.Get(aggregate.Key{Cluster: "a", Namespace: "ns", Name: name})
		if !ok || !equality.Semantic.DeepEqual(got, p) {
			t.Fatalf("Get(%s) = %v, %v; want the whole pod", name, ok, got)
		}
	}
	if objs := ix.Select(labels.SelectorFromSet(labels.Set{"app": "app-1"})); len(objs) != 4 {
		t.Errorf("Select app=app-1: %d objects, want 4", len(objs))
	}
	if objs, err := ix.ByIndex("node", "node-1"); err != nil || len(objs) != 6 {
		t.Errorf("ByIndex node-1: %d objects, %v; want 6", len(objs), err)
	}

	// An update that comes partial moves the object in the custom index, and drops
	// the decoded object that a read kept.
	next := aggregatetest.WithRV(want["pod-1"], "1000")
	if err := unstructured.SetNestedField(next.Object, "node-9", "spec", "nodeName"); err != nil {
		t.Fatal(err)
	}
	partial, encoded := partialOf(t, next)
	if err := store.ApplyPartial(partial, encoded, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := ix.Get(aggregate.Key{Cluster: "a", Namespace: "ns", Name: "pod-1"}); !equality.Semantic.DeepEqual(got, next) {
		t.Errorf("Get after a partial update = %v, want the updated pod", got)
	}
	if objs, _ := ix.ByIndex("node", "node-9"); len(objs) != 1 {
		t.Errorf("the custom index has %d objects on node-9, want the updated pod", len(objs))
	}
	if objs, _ := ix.ByIndex("node", "node-1"); len(objs) != 5 {
		t.Errorf("the custom index has %d objects on node-1, want 5", len(objs))
	}

	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := rec.WaitForLen(wctx, 13); err != nil {
		t.Fatal(err)
	}
	for i, e := range rec.Events() {
		name := e.Object.(*unstructured.Unstructured).GetName()
		wantObj, wantType := want[name], aggregate.Added
		if i == 12 {
			wantObj, wantType = next, aggregate.Updated
			if !equality.Semantic.DeepEqual(e.OldObject, want[name]) {
				t.Errorf("event %d: old object %v, want the pod before the update", i, e.OldObject)
			}
		}
		if e.Type != wantType || e.Cluster != "a" || !equality.Semantic.DeepEqual(e.Object, wantObj) {
			t.Errorf("event %d: %s of %s, object %v; want %s of the whole pod", i, e.Type, e.Cluster, e.Object, wantType)
		}
	}

	// A plain fleet refuses them. (With FLEETWATCH_TEST_CACHE_ENCODING=compact, a fleet
	// without a Codec is compact, with a Codec of the tests whose format is not the
	// informers'.)
	if fleet := aggregate.New(aggregate.Options{}); !aggregate.Compact(fleet) {
		partial, encoded = partialOf(t, want["pod-0"])
		if err := fleet.ClusterStore("a", aggregatetest.Pods).ApplyPartial(partial, encoded, true); !errors.Is(err, aggregate.ErrPartialObject) {
			t.Errorf("ApplyPartial to a plain fleet: %v, want ErrPartialObject", err)
		}
	}
}

// TestCompactFleetPartialLazy: without handlers or index functions, a compact fleet
// keeps a partial object's encoding alone and decodes nothing until it is read; a
// handler added later gets the whole objects.
func TestCompactFleetPartialLazy(t *testing.T) {
	f := aggregate.New(aggregate.Options{Codec: persist.Codec{}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.Start(ctx) }()
	store := f.ClusterStore("a", aggregatetest.Pods)
	want := map[string]*unstructured.Unstructured{}
	for i := range 3 {
		p := aggregatetest.RealisticPod("ns", fmt.Sprintf("pod-%d", i), fmt.Sprint(10+i), map[string]string{"app": "x"})
		partial, encoded := partialOf(t, p)
		if err := store.ApplyPartial(partial, encoded, true); err != nil {
			t.Fatal(err)
		}
		want[p.GetName()] = p
	}
	store.MarkSynced()
	ix := f.Indexer(aggregatetest.Pods)
	if n := aggregate.HotObjects(ix); n != 0 {
		t.Errorf("%d objects held decoded before any read, want none", n)
	}
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := rec.WaitForLen(wctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.Events() {
		if got := e.Object.(*unstructured.Unstructured); e.Type != aggregate.Added || e.Cluster != "a" || !equality.Semantic.DeepEqual(got, want[got.GetName()]) {
			t.Errorf("%s of %s: %v, want Added of the whole pod", e.Type, e.Cluster, got)
		}
	}
}

// TestCompactFleetPartialFiled: the partial objects that an informer hands on are
// wire.EncodedObjects, which answer for their namespace, name, resourceVersion and
// labels from what they read when they were made. A fleet that takes them files them as
// it files their maps: the same keys, labels (a label whose value is not a string counts
// as none, as for the map) and no-op updates.
func TestCompactFleetPartialFiled(t *testing.T) {
	f := aggregate.New(aggregate.Options{Codec: persist.Codec{}})
	store := f.ClusterStore("a", aggregatetest.Pods)
	ix := f.Indexer(aggregatetest.Pods)
	for i := range 6 {
		p := aggregatetest.Pod("ns", fmt.Sprintf("pod-%d", i), fmt.Sprint(10+i), map[string]string{"app": fmt.Sprintf("app-%d", i%2)})
		if i == 5 {
			// Not a map of strings: no labels at all.
			p.Object["metadata"].(map[string]any)["labels"] = map[string]any{"app": "app-1", "n": int64(1)}
		}
		encoded, err := persist.Codec{}.Encode(p)
		if err != nil {
			t.Fatal(err)
		}
		e := (&wire.EncodedObject{Unstructured: p.DeepCopy(), Encoded: encoded}).ToPartial()
		if _, filed := e.RawLabels(); !filed {
			t.Fatal("ToPartial's object is not filed")
		}
		changed, _, err := store.ApplyPartialChanged(e, e.Encoded, true)
		if err != nil || !changed {
			t.Fatalf("ApplyPartialChanged(pod-%d) = %v, %v; want a change", i, changed, err)
		}
		// The same object again, as its map: a no-op update.
		changed, _, err = store.ApplyPartialChanged(e.Unstructured, e.Encoded, false)
		if err != nil || changed {
			t.Fatalf("ApplyPartialChanged(pod-%d) again as a map = %v, %v; want a no-op", i, changed, err)
		}
	}
	for i := range 6 {
		if _, ok := ix.Get(aggregate.Key{Cluster: "a", Namespace: "ns", Name: fmt.Sprintf("pod-%d", i)}); !ok {
			t.Errorf("pod-%d not filed under its key", i)
		}
	}
	for app, n := range map[string]int{"app-0": 3, "app-1": 2} {
		if objs := ix.Select(labels.SelectorFromSet(labels.Set{"app": app})); len(objs) != n {
			t.Errorf("Select app=%s: %d objects, want %d", app, len(objs), n)
		}
	}
}
