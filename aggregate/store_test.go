package aggregate_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// op is one write to the "a" store of pods.
type op struct {
	delete            bool
	obj               *unstructured.Unstructured
	initialList       bool
	finalStateUnknown bool
}

func apply(obj *unstructured.Unstructured) op        { return op{obj: obj} }
func applyInitial(obj *unstructured.Unstructured) op { return op{obj: obj, initialList: true} }
func del(obj *unstructured.Unstructured) op          { return op{delete: true, obj: obj} }
func delUnknown(obj *unstructured.Unstructured) op {
	return op{delete: true, obj: obj, finalStateUnknown: true}
}

func pod(name, rv string) *unstructured.Unstructured {
	return aggregatetest.Pod("default", name, rv, map[string]string{"app": name})
}

func TestClusterStoreEvents(t *testing.T) {
	tests := []struct {
		name   string
		noOps  bool
		before []op // applied before the handler is added
		after  []op // applied after
		want   []string
	}{
		{
			name:  "add",
			after: []op{apply(pod("p", "1"))},
			want:  []string{"Added a/default/p@1"},
		},
		{
			name:  "update carries the old object",
			after: []op{apply(pod("p", "1")), apply(pod("p", "2"))},
			want:  []string{"Added a/default/p@1", "Updated a/default/p@2 old@1"},
		},
		{
			name:  "same resourceVersion is not delivered",
			after: []op{apply(pod("p", "1")), apply(pod("p", "1")), applyInitial(pod("p", "1"))},
			want:  []string{"Added a/default/p@1"},
		},
		{
			name:  "same resourceVersion is delivered on request, with the stored object",
			noOps: true,
			after: []op{apply(pod("p", "1")), apply(pod("p", "1"))},
			want:  []string{"Added a/default/p@1", "Updated a/default/p@1 old@1"},
		},
		{
			name:  "empty resourceVersions are never the same",
			after: []op{apply(pod("p", "")), apply(pod("p", ""))},
			want:  []string{"Added a/default/p@", "Updated a/default/p@ old@"},
		},
		{
			name:   "seeded before the handler, then listed with the same resourceVersion",
			before: []op{apply(pod("p", "5")), apply(pod("q", "7"))},
			after:  []op{applyInitial(pod("p", "5")), applyInitial(pod("q", "8"))},
			want: []string{
				"Added a/default/p@5 initial", "Added a/default/q@7 initial", // the late handler's snapshot
				"Updated a/default/q@8 old@7 initial",
			},
		},
		{
			name:  "seeded after the handler, then listed with the same resourceVersion",
			after: []op{apply(pod("p", "5")), applyInitial(pod("p", "5"))},
			want:  []string{"Added a/default/p@5"},
		},
		{
			name:  "initial list",
			after: []op{applyInitial(pod("p", "1")), applyInitial(pod("p", "2"))},
			want:  []string{"Added a/default/p@1 initial", "Updated a/default/p@2 old@1 initial"},
		},
		{
			name:  "watched delete delivers the final state",
			after: []op{apply(pod("p", "1")), del(pod("p", "2"))},
			want:  []string{"Added a/default/p@1", "Deleted a/default/p@2"},
		},
		{
			name:  "relist delete delivers the last known state",
			after: []op{apply(pod("p", "1")), delUnknown(pod("p", "1"))},
			want:  []string{"Added a/default/p@1", "Deleted a/default/p@1 unknown"},
		},
		{
			name:  "delete of a missing key does nothing",
			after: []op{del(pod("p", "1")), apply(pod("q", "1")), del(pod("p", "1"))},
			want:  []string{"Added a/default/q@1"},
		},
		{
			name:  "re-create after delete is Added",
			after: []op{apply(pod("p", "1")), del(pod("p", "1")), apply(pod("p", "3"))},
			want:  []string{"Added a/default/p@1", "Deleted a/default/p@1", "Added a/default/p@3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := aggregate.New(aggregate.Options{})
			startFleet(t, f)
			s := f.ClusterStore("a", aggregatetest.Pods)
			run := func(ops []op) {
				for _, o := range ops {
					if o.delete {
						mustDelete(t, s, o.obj, o.finalStateUnknown)
					} else {
						mustApply(t, s, o.obj, o.initialList)
					}
				}
			}
			run(tt.before)
			rec := aggregatetest.NewRecorder()
			if _, err := f.AddHandler(rec, aggregate.HandlerOptions{DeliverNoOpUpdates: tt.noOps}); err != nil {
				t.Fatal(err)
			}
			run(tt.after)
			barrier(t, f, rec, "end")
			got := summary(withoutCluster(rec.Events(), "barrier"))
			slices.Sort(got[:min(len(got), len(tt.before))]) // the snapshot has no order
			if !slices.Equal(got, tt.want) {
				t.Errorf("events:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestClusterStoreKeepsSeededObjectOnSameResourceVersion(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	s := f.ClusterStore("a", aggregatetest.Pods)
	seed := pod("p", "5")
	mustApply(t, s, seed, false)
	mustApply(t, s, pod("p", "5"), true)
	got, _ := f.Indexer(aggregatetest.Pods).Get(aggregate.Key{Cluster: "a", Namespace: "default", Name: "p"})
	if got != runtime.Object(seed) {
		t.Error("a same-resourceVersion Apply replaced the stored object")
	}
}

func TestClusterStoreApplyChanged(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	s := f.ClusterStore("a", aggregatetest.Pods)
	for _, step := range []struct {
		obj  runtime.Object
		want bool
	}{
		{pod("p", "5"), true},  // added
		{pod("p", "5"), false}, // same resourceVersion
		{pod("p", "6"), true},  // updated
		{pod("p", ""), true},   // no resourceVersion to compare
		{pod("p", ""), true},
	} {
		changed, err := s.ApplyChanged(step.obj, false)
		if err != nil {
			t.Fatal(err)
		}
		if changed != step.want {
			t.Errorf("ApplyChanged(rv %q) = %v, want %v", step.obj.(*unstructured.Unstructured).GetResourceVersion(), changed, step.want)
		}
	}
}

func TestClusterStoreAsDeltaFIFOKnownObjects(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	s := f.ClusterStore("a", aggregatetest.Pods)
	nodes := f.ClusterStore("a", aggregatetest.Nodes)
	// Seeded state: p, q and r; another cluster has a pod with the same name.
	for _, name := range []string{"p", "q", "r"} {
		mustApply(t, s, pod(name, "1"), false)
	}
	mustApply(t, f.ClusterStore("b", aggregatetest.Pods), pod("other", "1"), false)
	mustApply(t, nodes, aggregatetest.Node("node-1", "1", nil), false)

	keys := s.ListKeys()
	slices.Sort(keys)
	if want := []string{"default/p", "default/q", "default/r"}; !slices.Equal(keys, want) {
		t.Errorf("ListKeys = %v, want %v", keys, want)
	}
	if got := nodes.ListKeys(); !slices.Equal(got, []string{"node-1"}) {
		t.Errorf("cluster-scoped ListKeys = %v, want [node-1]", got)
	}
	for _, tt := range []struct {
		store  *aggregate.ClusterStore
		key    string
		exists bool
	}{
		{s, "default/p", true},
		{s, "default/other", false},
		{s, "p", false},
		{s, "a/b/c", false},
		{nodes, "node-1", true},
		{nodes, "/node-1", false},
	} {
		obj, exists, err := tt.store.GetByKey(tt.key)
		if err != nil || exists != tt.exists || (exists && obj == nil) {
			t.Errorf("GetByKey(%q) = %v, %v, %v; want exists=%v", tt.key, obj, exists, err, tt.exists)
		}
	}

	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{Resources: []schema.GroupVersionResource{aggregatetest.Pods}}); err != nil {
		t.Fatal(err)
	}
	// The informer's first list: p unchanged, q changed, r gone, s new.
	fifo := cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{KnownObjects: s, EmitDeltaTypeReplaced: true})
	list := []any{pod("p", "1"), pod("q", "2"), pod("s", "1")}
	if err := fifo.Replace(list, "10"); err != nil {
		t.Fatal(err)
	}
	process := func(obj any, isInInitialList bool) error {
		for _, d := range obj.(cache.Deltas) {
			switch d.Type {
			case cache.Deleted:
				if u, ok := d.Object.(cache.DeletedFinalStateUnknown); ok {
					if err := s.Delete(u.Obj.(runtime.Object), true); err != nil {
						return err
					}
					continue
				}
				if err := s.Delete(d.Object.(runtime.Object), false); err != nil {
					return err
				}
			default:
				if err := s.Apply(d.Object.(runtime.Object), isInInitialList); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for range 4 {
		if _, err := fifo.Pop(process); err != nil {
			t.Fatal(err)
		}
	}
	s.MarkSynced()
	barrier(t, f, rec, "end")
	got := summary(withoutCluster(rec.Events(), "barrier"))
	snapshot := got[:4] // a/default/p, q, r and b/default/other, in any order
	slices.Sort(snapshot)
	want := []string{
		"Added a/default/p@1 initial", "Added a/default/q@1 initial", "Added a/default/r@1 initial", "Added b/default/other@1 initial",
		"Updated a/default/q@2 old@1 initial",
		"Deleted a/default/r@1 unknown",
		"Added a/default/s@1 initial",
	}
	// q, r and s are popped in FIFO order: q, s (list order), then r (deleted last).
	rest := got[4:]
	slices.Sort(rest)
	wantRest := slices.Clone(want[4:])
	slices.Sort(wantRest)
	if !slices.Equal(snapshot, want[:4]) || !slices.Equal(rest, wantRest) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
}

func TestRemoveCluster(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	pa, pb := f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("b", aggregatetest.Pods)
	na := f.ClusterStore("a", aggregatetest.Nodes)
	mustApply(t, pa, pod("p", "1"), true)
	mustApply(t, pa, pod("q", "1"), true)
	mustApply(t, pb, pod("p", "1"), true)
	mustApply(t, na, aggregatetest.Node("n", "1", nil), true)
	barrier(t, f, rec, "before")
	before := len(rec.Events())

	f.RemoveCluster("a")
	barrier(t, f, rec, "after")
	got := summary(withoutCluster(rec.Events()[before:], "barrier"))
	slices.Sort(got)
	want := []string{"Deleted a//n@1 unknown", "Deleted a/default/p@1 unknown", "Deleted a/default/q@1 unknown"}
	if !slices.Equal(got, want) {
		t.Errorf("events after RemoveCluster: %q, want %q", got, want)
	}
	if n := f.Indexer(aggregatetest.Pods).ClusterLen("b"); n != 1 {
		t.Errorf("pods left in b: %d, want 1", n)
	}
	if n := f.Indexer(aggregatetest.Pods).ClusterLen("a"); n != 0 {
		t.Errorf("ClusterLen(a) = %d after removal", n)
	}
	if err := pa.Apply(pod("r", "1"), false); !errors.Is(err, aggregate.ErrStoreRemoved) {
		t.Errorf("Apply to removed store: error = %v, want ErrStoreRemoved", err)
	}
	if err := pa.Delete(pod("p", "1"), false); !errors.Is(err, aggregate.ErrStoreRemoved) {
		t.Errorf("Delete from removed store: error = %v, want ErrStoreRemoved", err)
	}
	if pa.Len() != 0 || pa.ListKeys() != nil {
		t.Error("removed store still lists objects")
	}
	if slices.Contains(f.Clusters(), "a") {
		t.Errorf("Clusters() = %v still has a", f.Clusters())
	}

	// The cluster can come back with new stores.
	pa2 := f.ClusterStore("a", aggregatetest.Pods)
	if pa2 == pa {
		t.Fatal("ClusterStore returned the removed store")
	}
	mustApply(t, pa2, pod("p", "2"), true)
	if n := f.Indexer(aggregatetest.Pods).ClusterLen("a"); n != 1 {
		t.Errorf("ClusterLen(a) = %d after re-adding", n)
	}
}

// TestMoveCluster: a cluster that moves to another fleet leaves as with RemoveCluster,
// with Deleted events that say it moved; RemoveCluster's do not.
func TestMoveCluster(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("p", "1"), true)
	mustApply(t, f.ClusterStore("b", aggregatetest.Pods), pod("p", "1"), true)
	barrier(t, f, rec, "before")
	before := len(rec.Events())
	f.MoveCluster("a")
	f.RemoveCluster("b")
	barrier(t, f, rec, "after")
	var got []string
	for _, e := range withoutCluster(rec.Events()[before:], "barrier") {
		got = append(got, fmt.Sprintf("%s %s unknown=%v moved=%v", e.Type, e.Cluster, e.FinalStateUnknown, e.Moved))
	}
	if want := []string{"Deleted a unknown=true moved=true", "Deleted b unknown=true moved=false"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	if n := f.Indexer(aggregatetest.Pods).ClusterLen("a"); n != 0 {
		t.Errorf("ClusterLen(a) = %d after the move", n)
	}
}

func TestRemoveClusterResource(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	pa, na := f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("a", aggregatetest.Nodes)
	mustApply(t, pa, pod("p", "1"), true)
	mustApply(t, na, aggregatetest.Node("n", "1", nil), true)
	f.RemoveClusterResource("a", aggregatetest.Nodes)
	f.RemoveClusterResource("a", schema.GroupVersionResource{Resource: "unknown"}) // no-op
	barrier(t, f, rec, "end")
	got := summary(withoutCluster(rec.Events(), "barrier"))
	want := []string{"Added a/default/p@1 initial", "Added a//n@1 initial", "Deleted a//n@1 unknown"}
	if !slices.Equal(got, want) {
		t.Errorf("events: %q, want %q", got, want)
	}
	if pa.Len() != 1 {
		t.Errorf("pods of a: %d, want 1", pa.Len())
	}
	if err := na.Apply(aggregatetest.Node("n", "2", nil), false); !errors.Is(err, aggregate.ErrStoreRemoved) {
		t.Errorf("Apply to removed store: %v", err)
	}
}

func TestFleetStats(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	f := aggregate.New(aggregate.Options{Clock: clock})
	pb := f.ClusterStore("b", aggregatetest.Pods)
	pa := f.ClusterStore("a", aggregatetest.Pods)
	na := f.ClusterStore("a", aggregatetest.Nodes)
	mustApply(t, pa, pod("p", "1"), true)
	mustApply(t, pa, pod("q", "1"), true)
	mustApply(t, pb, pod("p", "1"), true)
	pa.MarkSynced()
	clock.SetTime(clock.Now().Add(time.Minute))
	pa.MarkSynced() // later calls change nothing
	reg, err := f.AddHandler(aggregate.HandlerFunc(func(aggregate.Event) {}), aggregate.HandlerOptions{Name: "idle"})
	if err != nil {
		t.Fatal(err)
	}

	st := f.Stats()
	want := []aggregate.StoreStats{
		{Cluster: "a", Resource: aggregatetest.Nodes, Objects: 0},
		{Cluster: "a", Resource: aggregatetest.Pods, Objects: 2, Synced: true, SyncedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
		{Cluster: "b", Resource: aggregatetest.Pods, Objects: 1},
	}
	if !slices.Equal(st.Stores, want) {
		t.Errorf("Stores:\n got %+v\nwant %+v", st.Stores, want)
	}
	if len(st.Handlers) != 1 || st.Handlers[0].Name != "idle" || st.Handlers[0].Backlog != 3 {
		t.Errorf("Handlers = %+v, want idle with backlog 3 (not started)", st.Handlers)
	}
	if reg.Backlog() != 3 {
		t.Errorf("Backlog = %d, want 3", reg.Backlog())
	}
	if !pa.Synced() || pb.Synced() || na.Synced() {
		t.Error("Synced() wrong")
	}
	if got := f.Resources(); !slices.Equal(got, []schema.GroupVersionResource{aggregatetest.Nodes, aggregatetest.Pods}) {
		t.Errorf("Resources = %v", got)
	}
	if got := f.Clusters(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Clusters = %v", got)
	}
	if pa.Cluster() != "a" || pa.Resource() != aggregatetest.Pods {
		t.Error("Cluster/Resource accessors wrong")
	}
}
