package aggregate_test

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// keysOf returns the sorted keys of objs, found by looking each object up in ix (objects
// do not carry their cluster).
func keysOf(t *testing.T, ix *aggregate.Indexer, objs []runtime.Object) []string {
	t.Helper()
	var out []string
	for _, o := range objs {
		found := ""
		for _, k := range ix.ListKeys() {
			if got, ok := ix.Get(k); ok && got == o {
				found = k.String()
				break
			}
		}
		if found == "" {
			t.Fatalf("object %v not in indexer", o)
		}
		out = append(out, found)
	}
	slices.Sort(out)
	return out
}

func sortedKeys(keys []aggregate.Key) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.String())
	}
	slices.Sort(out)
	return out
}

// newTestFleet returns a fleet with pods in two clusters ("a" and "b/x"), three namespaces
// and a few labels.
func newTestFleet(t *testing.T, opts aggregate.Options) (*aggregate.Fleet, *aggregate.Indexer) {
	t.Helper()
	f := aggregate.New(opts)
	a := f.ClusterStore("a", aggregatetest.Pods)
	b := f.ClusterStore("b/x", aggregatetest.Pods)
	mustApply(t, a, aggregatetest.Pod("default", "web-1", "1", map[string]string{"app": "web", "tier": "front"}), true)
	mustApply(t, a, aggregatetest.Pod("default", "db-1", "1", map[string]string{"app": "db"}), true)
	mustApply(t, a, aggregatetest.Pod("kube-system", "dns", "1", nil), true)
	mustApply(t, b, aggregatetest.Pod("default", "web-1", "1", map[string]string{"app": "web", "tier": "front"}), true)
	mustApply(t, b, aggregatetest.Pod("shop", "web-2", "1", map[string]string{"app": "web"}), true)
	return f, f.Indexer(aggregatetest.Pods)
}

func TestIndexerByIndex(t *testing.T) {
	_, ix := newTestFleet(t, aggregate.Options{})
	tests := []struct {
		index, value string
		want         []string
		wantErr      error
	}{
		{aggregate.IndexCluster, "a", []string{"a/default/db-1", "a/default/web-1", "a/kube-system/dns"}, nil},
		{aggregate.IndexCluster, "b/x", []string{"b%2Fx/default/web-1", "b%2Fx/shop/web-2"}, nil},
		{aggregate.IndexCluster, "nope", nil, nil},
		{aggregate.IndexNamespace, "default", []string{"a/default/db-1", "a/default/web-1", "b%2Fx/default/web-1"}, nil},
		{aggregate.IndexClusterNamespace, aggregate.ClusterNamespaceIndexValue("b/x", "default"), []string{"b%2Fx/default/web-1"}, nil},
		{aggregate.IndexClusterNamespace, "a/kube-system", []string{"a/kube-system/dns"}, nil},
		{aggregate.IndexLabel, "app=web", []string{"a/default/web-1", "b%2Fx/default/web-1", "b%2Fx/shop/web-2"}, nil},
		{aggregate.IndexLabel, aggregate.LabelIndexValue("tier", "front"), []string{"a/default/web-1", "b%2Fx/default/web-1"}, nil},
		{aggregate.IndexLabel, "app=none", nil, nil},
		{aggregate.IndexLabel, "app", nil, aggregate.ErrInvalidIndexValue},
		{aggregate.IndexClusterNamespace, "a", nil, aggregate.ErrInvalidIndexValue},
		{aggregate.IndexClusterNamespace, "a%zz/ns", nil, aggregate.ErrInvalidIndexValue},
		{"by-owner", "x", nil, aggregate.ErrUnknownIndex},
	}
	for _, tt := range tests {
		t.Run(tt.index+"="+tt.value, func(t *testing.T) {
			objs, err := ix.ByIndex(tt.index, tt.value)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ByIndex error = %v, want %v", err, tt.wantErr)
			}
			if got := keysOf(t, ix, objs); !slices.Equal(got, tt.want) {
				t.Errorf("ByIndex = %v, want %v", got, tt.want)
			}
			keys, err := ix.IndexKeys(tt.index, tt.value)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("IndexKeys error = %v, want %v", err, tt.wantErr)
			}
			if got := sortedKeys(keys); !slices.Equal(got, tt.want) {
				t.Errorf("IndexKeys = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestIndexerIndexValues(t *testing.T) {
	_, ix := newTestFleet(t, aggregate.Options{})
	tests := []struct {
		index string
		want  []string
	}{
		{aggregate.IndexCluster, []string{"a", "b/x"}},
		{aggregate.IndexNamespace, []string{"default", "kube-system", "shop"}},
		{aggregate.IndexClusterNamespace, []string{"a/default", "a/kube-system", "b%2Fx/default", "b%2Fx/shop"}},
		{aggregate.IndexLabel, []string{"app=db", "app=web", "tier=front"}},
	}
	for _, tt := range tests {
		t.Run(tt.index, func(t *testing.T) {
			got, err := ix.IndexValues(tt.index)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("IndexValues = %v, want %v", got, tt.want)
			}
			// Every value must be accepted by ByIndex and find something.
			for _, v := range got {
				if objs, err := ix.ByIndex(tt.index, v); err != nil || len(objs) == 0 {
					t.Errorf("ByIndex(%q, %q) = %d objects, %v", tt.index, v, len(objs), err)
				}
			}
		})
	}
	if _, err := ix.IndexValues("nope"); !errors.Is(err, aggregate.ErrUnknownIndex) {
		t.Errorf("IndexValues(nope) error = %v, want ErrUnknownIndex", err)
	}
}

func TestIndexerSelect(t *testing.T) {
	_, ix := newTestFleet(t, aggregate.Options{})
	all := []string{"a/default/db-1", "a/default/web-1", "a/kube-system/dns", "b%2Fx/default/web-1", "b%2Fx/shop/web-2"}
	tests := []struct {
		name     string
		selector labels.Selector
		want     []string
	}{
		{"nil", nil, all},
		{"everything", labels.Everything(), all},
		{"nothing", labels.Nothing(), nil},
		{"equals", labels.SelectorFromSet(labels.Set{"app": "web"}), []string{"a/default/web-1", "b%2Fx/default/web-1", "b%2Fx/shop/web-2"}},
		{"two equals", labels.SelectorFromSet(labels.Set{"app": "web", "tier": "front"}), []string{"a/default/web-1", "b%2Fx/default/web-1"}},
		{"in", mustSelector(t, "app in (web, db)"), []string{"a/default/db-1", "a/default/web-1", "b%2Fx/default/web-1", "b%2Fx/shop/web-2"}},
		{"in and not equals", mustSelector(t, "app in (web, db),tier!=front"), []string{"a/default/db-1", "b%2Fx/shop/web-2"}},
		{"not equals", mustSelector(t, "app!=web"), []string{"a/default/db-1", "a/kube-system/dns"}},
		{"exists", mustSelector(t, "tier"), []string{"a/default/web-1", "b%2Fx/default/web-1"}},
		{"does not exist", mustSelector(t, "!app"), []string{"a/kube-system/dns"}},
		{"no match", labels.SelectorFromSet(labels.Set{"app": "nope"}), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := keysOf(t, ix, ix.Select(tt.selector)); !slices.Equal(got, tt.want) {
				t.Errorf("Select(%v) = %v, want %v", tt.selector, got, tt.want)
			}
		})
	}
}

func mustSelector(t *testing.T, s string) labels.Selector {
	t.Helper()
	sel, err := labels.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel
}

// countingObject counts the calls to GetLabels, to show which objects a query examines.
type countingObject struct {
	metav1.PartialObjectMetadata
	calls *atomic.Int64
}

func (o *countingObject) GetLabels() map[string]string {
	o.calls.Add(1)
	return o.PartialObjectMetadata.GetLabels()
}

func TestIndexerSelectNarrowsByLabel(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	s := f.ClusterStore("a", aggregatetest.Pods)
	var calls atomic.Int64
	for i := range 1000 {
		app := "common"
		if i%100 == 0 {
			app = "rare"
		}
		o := &countingObject{calls: &calls}
		o.Namespace, o.Name, o.ResourceVersion = fmt.Sprintf("ns-%d", i%2), fmt.Sprintf("p-%d", i), "1"
		o.Labels = map[string]string{"app": app, "tier": "x"}
		mustApply(t, s, o, true)
	}
	ix := f.Indexer(aggregatetest.Pods)
	lister := f.Lister(aggregatetest.Pods)
	// The first read by label builds the label index, which reads every object's labels
	// once; the writes before it kept none (TestLabelIndexBuiltAtTheFirstLabelRead).
	calls.Store(0)
	if n := len(ix.Select(labels.SelectorFromSet(labels.Set{"app": "none"}))); n != 0 {
		t.Fatalf("got %d objects with app=none", n)
	}
	if got := calls.Load(); !aggregate.Compact(f) && got != 1000 {
		t.Errorf("building the label index examined %d objects, want 1000", got)
	}
	tests := []struct {
		name      string
		list      func() int
		want      int
		wantCalls int64
	}{
		{"fleet equals", func() int { return len(ix.Select(labels.SelectorFromSet(labels.Set{"app": "rare"}))) }, 10, 10},
		{"fleet equals, most selective chosen", func() int {
			return len(ix.Select(labels.SelectorFromSet(labels.Set{"tier": "x", "app": "rare"})))
		}, 10, 10},
		{"fleet not equals scans", func() int { return len(ix.Select(mustSelector(t, "app!=common"))) }, 10, 1000},
		{"cluster namespace equals", func() int {
			objs, _ := lister.Cluster("a").ByNamespace("ns-0").List(labels.SelectorFromSet(labels.Set{"app": "rare"}))
			return len(objs)
		}, 10, 10},
		{"cluster namespace not equals scans namespace", func() int {
			objs, _ := lister.Cluster("a").ByNamespace("ns-1").List(mustSelector(t, "app!=common"))
			return len(objs)
		}, 0, 500},
		{"everything reads no labels", func() int { return len(ix.Select(labels.Everything())) }, 1000, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls.Store(0)
			if got := tt.list(); got != tt.want {
				t.Errorf("got %d objects, want %d", got, tt.want)
			}
			if aggregate.Compact(f) {
				// A compact fleet reads the labels it keeps with each entry, and never
				// an object's GetLabels.
				tt.wantCalls = 0
			}
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("examined %d objects, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestIndexerUpdateMovesIndices(t *testing.T) {
	f, ix := newTestFleet(t, aggregate.Options{})
	a := f.ClusterStore("a", aggregatetest.Pods)
	mustApply(t, a, aggregatetest.Pod("default", "web-1", "2", map[string]string{"app": "db", "tier": "front"}), false)
	mustDelete(t, a, aggregatetest.Pod("default", "db-1", "1", nil), false)

	tests := []struct {
		value string
		want  []string
	}{
		{"app=web", []string{"b%2Fx/default/web-1", "b%2Fx/shop/web-2"}},
		{"app=db", []string{"a/default/web-1"}},
		{"tier=front", []string{"a/default/web-1", "b%2Fx/default/web-1"}},
	}
	for _, tt := range tests {
		keys, err := ix.IndexKeys(aggregate.IndexLabel, tt.value)
		if err != nil {
			t.Fatal(err)
		}
		if got := sortedKeys(keys); !slices.Equal(got, tt.want) {
			t.Errorf("IndexKeys(label, %q) = %v, want %v", tt.value, got, tt.want)
		}
	}
	if got, want := ix.Len(), 4; got != want {
		t.Errorf("Len = %d, want %d", got, want)
	}
	if got, want := ix.ClusterLen("a"), 2; got != want {
		t.Errorf("ClusterLen(a) = %d, want %d", got, want)
	}
	if got := ix.ClusterLen("nope"); got != 0 {
		t.Errorf("ClusterLen(nope) = %d, want 0", got)
	}
	if _, ok := ix.Get(aggregate.Key{Cluster: "a", Namespace: "default", Name: "db-1"}); ok {
		t.Error("deleted object still there")
	}
}

// byImage indexes pods by the image of their first container.
func byImage(obj any) ([]string, error) {
	u, ok := obj.(interface{ UnstructuredContent() map[string]any })
	if !ok {
		return nil, fmt.Errorf("not unstructured: %T", obj)
	}
	spec, _ := u.UnstructuredContent()["spec"].(map[string]any)
	containers, _ := spec["containers"].([]any)
	var out []string
	for _, c := range containers {
		if img, ok := c.(map[string]any)["image"].(string); ok {
			out = append(out, img)
		}
	}
	return out, nil
}

// byOwnerLabel indexes by the value of the "owner" label and fails for objects without.
func byOwnerLabel(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	owner, ok := m.GetLabels()["owner"]
	if !ok {
		return nil, errors.New("no owner")
	}
	return []string{owner}, nil
}

func TestIndexerUserIndexers(t *testing.T) {
	f, ix := newTestFleet(t, aggregate.Options{Indexers: cache.Indexers{"image": byImage}})
	a := f.ClusterStore("a", aggregatetest.Pods)

	keys, err := ix.IndexKeys("image", "registry.k8s.io/pause:3.10")
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 5 {
		t.Errorf("index from Options: %d keys, want 5", len(keys))
	}

	// Added after objects exist: existing objects are indexed.
	if err := ix.AddIndexers(cache.Indexers{"owner": byOwnerLabel}); err != nil {
		t.Fatal(err)
	}
	vals, _ := ix.IndexValues("owner")
	if len(vals) != 0 {
		t.Errorf("owner values = %v, want none (no object has the label)", vals)
	}
	p := aggregatetest.Pod("default", "web-1", "2", map[string]string{"app": "web", "owner": "team-a"})
	mustApply(t, a, p, false)
	keys, _ = ix.IndexKeys("owner", "team-a")
	if got := sortedKeys(keys); !slices.Equal(got, []string{"a/default/web-1"}) {
		t.Errorf("owner=team-a = %v", got)
	}
	mustApply(t, a, aggregatetest.Pod("default", "web-1", "3", map[string]string{"app": "web", "owner": "team-b"}), false)
	keys, _ = ix.IndexKeys("owner", "team-a")
	if len(keys) != 0 {
		t.Errorf("owner=team-a after change = %v, want none", keys)
	}
	// The index function fails for the old object: removal must still find the entry.
	mustApply(t, a, aggregatetest.Pod("default", "web-1", "4", map[string]string{"app": "web"}), false)
	vals, _ = ix.IndexValues("owner")
	if len(vals) != 0 {
		t.Errorf("owner values = %v after label removed, want none", vals)
	}

	for _, tt := range []struct {
		name     string
		indexers cache.Indexers
		wantErr  error
	}{
		{"existing user index", cache.Indexers{"image": byImage}, aggregate.ErrIndexExists},
		{"built-in", cache.Indexers{aggregate.IndexLabel: byImage}, aggregate.ErrIndexExists},
		{"nil function", cache.Indexers{"x": nil}, aggregate.ErrInvalidIndexer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := ix.AddIndexers(tt.indexers); !errors.Is(err, tt.wantErr) {
				t.Errorf("AddIndexers error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestNewPanicsOnBuiltinIndexer(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New did not panic")
		}
	}()
	aggregate.New(aggregate.Options{Indexers: cache.Indexers{aggregate.IndexNamespace: cache.MetaNamespaceIndexFunc}})
}

func TestIndexerReturnsFreshSlices(t *testing.T) {
	_, ix := newTestFleet(t, aggregate.Options{})
	a := ix.List()
	a[0] = nil
	for _, o := range ix.List() {
		if o == nil {
			t.Fatal("List shares its slice")
		}
	}
}

func TestApplyRejectsInvalidObjects(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	tests := []struct {
		name    string
		cluster string
		obj     runtime.Object
		wantErr error
	}{
		{"no metadata", "a", &metav1.Status{}, aggregate.ErrNoMetadata},
		{"empty name", "a", aggregatetest.Pod("default", "", "1", nil), aggregate.ErrInvalidKey},
		{"empty cluster", "", aggregatetest.Pod("default", "x", "1", nil), aggregate.ErrInvalidKey},
		{"slash in name", "a", aggregatetest.Pod("default", "x/y", "1", nil), aggregate.ErrInvalidKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := f.ClusterStore(tt.cluster, aggregatetest.Pods)
			if err := s.Apply(tt.obj, false); !errors.Is(err, tt.wantErr) {
				t.Errorf("Apply error = %v, want %v", err, tt.wantErr)
			}
			if err := s.Delete(tt.obj, false); !errors.Is(err, tt.wantErr) {
				t.Errorf("Delete error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}
