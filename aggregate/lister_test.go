package aggregate_test

import (
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// TestClusterListerMatchesClientGo runs the same calls against Lister.Cluster and against
// client-go's GenericLister over an indexer holding the same cluster's objects.
func TestClusterListerMatchesClientGo(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	objects := map[schema.GroupVersionResource][]runtime.Object{
		aggregatetest.Pods: {
			aggregatetest.Pod("default", "web-1", "1", map[string]string{"app": "web"}),
			aggregatetest.Pod("default", "db-1", "1", map[string]string{"app": "db"}),
			aggregatetest.Pod("shop", "web-2", "1", map[string]string{"app": "web"}),
		},
		aggregatetest.Nodes: {
			aggregatetest.Node("node-1", "1", map[string]string{"zone": "a"}),
			aggregatetest.Node("node-2", "1", map[string]string{"zone": "b"}),
		},
	}
	// Another cluster with the same names must not leak into the view.
	for gvr, objs := range objects {
		ours := f.ClusterStore("a", gvr)
		other := f.ClusterStore("b", gvr)
		for _, o := range objs {
			mustApply(t, ours, o, true)
			mustApply(t, other, o.DeepCopyObject(), true)
		}
	}
	mustApply(t, f.ClusterStore("b", aggregatetest.Pods), aggregatetest.Pod("default", "only-in-b", "1", nil), true)

	type call func(l cache.GenericLister) (any, error)
	list := func(sel labels.Selector) call {
		return func(l cache.GenericLister) (any, error) { return l.List(sel) }
	}
	listNS := func(ns string, sel labels.Selector) call {
		return func(l cache.GenericLister) (any, error) { return l.ByNamespace(ns).List(sel) }
	}
	get := func(name string) call {
		return func(l cache.GenericLister) (any, error) { return l.Get(name) }
	}
	getNS := func(ns, name string) call {
		return func(l cache.GenericLister) (any, error) { return l.ByNamespace(ns).Get(name) }
	}
	tests := []struct {
		name     string
		resource schema.GroupVersionResource
		call     call
	}{
		{"list all", aggregatetest.Pods, list(labels.Everything())},
		{"list selector", aggregatetest.Pods, list(labels.SelectorFromSet(labels.Set{"app": "web"}))},
		{"list nothing", aggregatetest.Pods, list(labels.Nothing())},
		{"namespace list", aggregatetest.Pods, listNS("default", labels.Everything())},
		{"namespace list selector", aggregatetest.Pods, listNS("default", labels.SelectorFromSet(labels.Set{"app": "web"}))},
		{"empty namespace lists all", aggregatetest.Pods, listNS("", labels.Everything())},
		{"missing namespace", aggregatetest.Pods, listNS("nope", labels.Everything())},
		{"get by namespace/name", aggregatetest.Pods, get("default/web-1")},
		{"get by name alone misses namespaced", aggregatetest.Pods, get("web-1")},
		{"get other cluster's object", aggregatetest.Pods, get("default/only-in-b")},
		{"get malformed", aggregatetest.Pods, get("a/b/c")},
		{"get with empty namespace", aggregatetest.Nodes, get("/node-1")},
		{"namespace get", aggregatetest.Pods, getNS("shop", "web-2")},
		{"namespace get wrong namespace", aggregatetest.Pods, getNS("default", "web-2")},
		{"empty namespace get", aggregatetest.Pods, getNS("", "web-1")},
		{"cluster-scoped list", aggregatetest.Nodes, list(labels.SelectorFromSet(labels.Set{"zone": "a"}))},
		{"cluster-scoped get", aggregatetest.Nodes, get("node-2")},
		{"cluster-scoped get missing", aggregatetest.Nodes, get("node-3")},
		{"cluster-scoped empty namespace get", aggregatetest.Nodes, getNS("", "node-1")},
		{"cluster-scoped empty namespace list", aggregatetest.Nodes, listNS("", labels.Everything())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, o := range objects[tt.resource] {
				if err := indexer.Add(o); err != nil {
					t.Fatal(err)
				}
			}
			want, wantErr := tt.call(cache.NewGenericLister(indexer, tt.resource.GroupResource()))
			got, gotErr := tt.call(f.Lister(tt.resource).Cluster("a"))
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("error = %v, client-go gives %v", gotErr, wantErr)
			}
			if gotErr != nil && apierrors.IsNotFound(gotErr) != apierrors.IsNotFound(wantErr) {
				t.Fatalf("IsNotFound(%v) differs from client-go", gotErr)
			}
			if g, w := names(t, got), names(t, want); !slices.Equal(g, w) {
				t.Errorf("got %v, client-go gives %v", g, w)
			}
		})
	}
}

// names returns the sorted client-go keys of a List or Get result.
func names(t *testing.T, v any) []string {
	t.Helper()
	var objs []runtime.Object
	switch v := v.(type) {
	case []runtime.Object:
		objs = v
	case runtime.Object:
		if v != nil {
			objs = []runtime.Object{v}
		}
	}
	var out []string
	for _, o := range objs {
		k, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestFleetLister(t *testing.T) {
	f, _ := newTestFleet(t, aggregate.Options{})
	l := f.Lister(aggregatetest.Pods)
	if l.Resource() != aggregatetest.Pods {
		t.Errorf("Resource = %v", l.Resource())
	}

	obj, err := l.Get(aggregate.Key{Cluster: "b/x", Namespace: "shop", Name: "web-2"})
	if err != nil || aggregatetest.RV(obj) != "1" {
		t.Errorf("Get = %v, %v", obj, err)
	}
	_, err = l.Get(aggregate.Key{Cluster: "a", Namespace: "shop", Name: "web-2"})
	if !apierrors.IsNotFound(err) {
		t.Errorf("Get missing: error = %v, want NotFound", err)
	}
	if want := `pods "web-2" not found`; err == nil || err.Error() != want {
		t.Errorf("Get missing: error %q, want %q", err, want)
	}

	objs, err := l.List(labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil || len(objs) != 3 {
		t.Errorf("List(app=web) = %d objects, %v; want 3", len(objs), err)
	}
	objs, err = l.ByIndex(aggregate.IndexNamespace, "kube-system")
	if err != nil || len(objs) != 1 {
		t.Errorf("ByIndex(namespace, kube-system) = %d objects, %v; want 1", len(objs), err)
	}

	// A lister of a resource the fleet does not know yet works, and sees later objects.
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	wl := f.Lister(gvr)
	if objs, _ := wl.List(nil); len(objs) != 0 {
		t.Errorf("new resource lists %d objects", len(objs))
	}
	mustApply(t, f.ClusterStore("a", gvr), aggregatetest.Pod("default", "w", "1", nil), true)
	if objs, _ := wl.List(nil); len(objs) != 1 {
		t.Errorf("lister does not see later objects: %d", len(objs))
	}
}
