package aggregate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestCompactFleet holds a compact fleet, with the snapshot's codec, to the contracts of
// a plain one: reads, indices and a custom indexer, events with their cluster and old
// object, and objects that a reader may not change the cache through. The hot set stays
// within its bound.
func TestCompactFleet(t *testing.T) {
	const hot = 8
	byNode := cache.Indexers{"node": func(obj any) ([]string, error) {
		node, _, err := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "spec", "nodeName")
		return []string{node}, err
	}}
	f := aggregate.New(aggregate.Options{Codec: persist.Codec{}, HotObjects: hot, Indexers: byNode})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.Start(ctx) }()
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}

	want := map[aggregate.Key]*unstructured.Unstructured{}
	for i := range 40 {
		cluster := []string{"a", "b"}[i%2]
		p := aggregatetest.RealisticPod(fmt.Sprintf("ns-%d", i%4), fmt.Sprintf("pod-%d", i), fmt.Sprint(10+i), map[string]string{"app": fmt.Sprintf("app-%d", i%5)})
		if err := unstructured.SetNestedField(p.Object, fmt.Sprintf("node-%d", i%3), "spec", "nodeName"); err != nil {
			t.Fatal(err)
		}
		mustApply(t, f.ClusterStore(cluster, aggregatetest.Pods), p.DeepCopy(), true)
		want[aggregate.Key{Cluster: cluster, Namespace: p.GetNamespace(), Name: p.GetName()}] = p
	}
	ix := f.Indexer(aggregatetest.Pods)
	if n := aggregate.HotObjects(ix); n > hot {
		t.Errorf("%d objects held decoded, want at most %d", n, hot)
	}

	t.Run("Get", func(t *testing.T) {
		for key, p := range want {
			got, ok := ix.Get(key)
			if !ok || !equality.Semantic.DeepEqual(got, p) {
				t.Fatalf("Get(%v) = %v, %v; want the applied pod", key, ok, got)
			}
		}
		if n := aggregate.HotObjects(ix); n > hot {
			t.Errorf("%d objects held decoded after reads, want at most %d", n, hot)
		}
	})
	t.Run("a changed object does not reach the cache", func(t *testing.T) {
		key := aggregate.Key{Cluster: "a", Namespace: "ns-0", Name: "pod-0"}
		got, _ := ix.Get(key)
		got.(*unstructured.Unstructured).SetLabels(map[string]string{"app": "changed"})
		// Push the key out of the hot set, so that it is decoded again.
		for k := range want {
			ix.Get(k)
		}
		again, _ := ix.Get(key)
		if again.(*unstructured.Unstructured).GetLabels()["app"] != "app-0" {
			t.Error("a change to a returned object reached the cache")
		}
	})
	t.Run("List, Select, ByIndex and the custom index", func(t *testing.T) {
		check := func(what string, objs []runtime.Object, n int) {
			t.Helper()
			if len(objs) != n {
				t.Fatalf("%s: %d objects, want %d", what, len(objs), n)
			}
			for _, o := range objs {
				m, _ := meta.Accessor(o)
				for key, p := range want {
					if key.Namespace == m.GetNamespace() && key.Name == m.GetName() && !equality.Semantic.DeepEqual(o, p) {
						t.Fatalf("%s: %s/%s differs from the applied pod", what, key.Namespace, key.Name)
					}
				}
			}
		}
		check("List", ix.List(), 40)
		check("Select", ix.Select(labels.SelectorFromSet(labels.Set{"app": "app-1"})), 8)
		objs, err := ix.ByIndex(aggregate.IndexNamespace, "ns-2")
		if err != nil {
			t.Fatal(err)
		}
		check("ByIndex namespace", objs, 10)
		if objs, err = ix.ByIndex("node", "node-1"); err != nil {
			t.Fatal(err)
		}
		check("ByIndex node", objs, 13)
		l, err := f.Lister(aggregatetest.Pods).Cluster("b").ByNamespace("ns-1").List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		check("namespace lister", l, 10)
	})
	t.Run("events", func(t *testing.T) {
		key := aggregate.Key{Cluster: "b", Namespace: "ns-3", Name: "pod-3"}
		next := aggregatetest.WithRV(want[key], "1000")
		if err := unstructured.SetNestedField(next.Object, "node-9", "spec", "nodeName"); err != nil {
			t.Fatal(err)
		}
		mustApply(t, f.ClusterStore("b", aggregatetest.Pods), next.DeepCopy(), false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rec.WaitForLen(ctx, 41); err != nil {
			t.Fatal(err)
		}
		e := rec.Events()[40]
		if e.Type != aggregate.Updated || e.Cluster != "b" || !equality.Semantic.DeepEqual(e.Object, next) || !equality.Semantic.DeepEqual(e.OldObject, want[key]) {
			t.Errorf("got %s of %s, object %v, old %v", e.Type, e.Cluster, e.Object, e.OldObject)
		}
		objs, _ := ix.ByIndex("node", "node-9")
		if len(objs) != 1 {
			t.Errorf("the custom index has %d objects on node-9, want the updated pod", len(objs))
		}
		if objs, _ := ix.ByIndex("node", "node-0"); len(objs) != 13 {
			t.Errorf("the custom index has %d objects on node-0, want 13", len(objs))
		}
	})
}
