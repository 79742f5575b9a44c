package mcprovider

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// configMap is a ConfigMap as the fleet caches it: unstructured, with its kind.
func configMap(ns, name, rv string, labels map[string]string, data map[string]string) *unstructured.Unstructured {
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv, Labels: labels},
		Data:       data,
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(cm)
	if err != nil {
		panic(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// newTestProvider returns a Provider over a Manager that is never started, whose fleet
// the test fills, and the caches of clusters a and b, both synced.
func newTestProvider(t *testing.T) (*Provider, map[string]*clusterCache) {
	return newTestProviderOf(t, nil)
}

// newTestProviderOf is newTestProvider over a fleet with codec (nil for a plain fleet),
// filled as its informers would fill it (applyAs).
func newTestProviderOf(t *testing.T, codec aggregate.Codec) (*Provider, map[string]*clusterCache) {
	t.Helper()
	return newTestProviderWith(t, codec, Options{})
}

// newTestProviderWith is newTestProviderOf of a Provider with opts.
func newTestProviderWith(t *testing.T, codec aggregate.Codec, opts Options) (*Provider, map[string]*clusterCache) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	clustertest.WriteKubeconfig(t, path, clustertest.Context{Name: "a", Server: "https://127.0.0.1:1"})
	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{path}},
		Resources: []informer.Resource{{Name: "configmaps"}},
		Fleet:     aggregate.Options{Codec: codec},
		Encoding:  encodingOf(codec),
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	views := map[string]*clusterCache{}
	for _, name := range []string{"a", "b"} {
		m := &member{ctx: t.Context(), synced: make(chan struct{})}
		close(m.synced)
		views[name] = &clusterCache{p: p, name: name, member: m}
	}
	for _, c := range []string{"a", "b"} {
		s := p.fleet.ClusterStore(c, configMaps)
		for _, obj := range []*unstructured.Unstructured{
			configMap("ns", "one", "1", map[string]string{"app": "x"}, map[string]string{"owner": c}),
			configMap("ns", "two", "2", map[string]string{"app": "y"}, map[string]string{"owner": c}),
			configMap("other", "three", "3", map[string]string{"app": "x"}, map[string]string{"owner": c}),
		} {
			applyAs(t, codec, s, obj, true)
		}
	}
	return p, views
}

// fleetCodecs are the fleets the cache's tests run over: a plain one, then compact ones.
var fleetCodecs = []struct {
	name  string
	codec aggregate.Codec
}{{"plain", nil}, {"compact", persist.Codec{}}, {"compressed", persist.Codec{Compress: true}}}

// encodingOf is the fleetwatch.Options.Encoding of a Manager whose fleet has codec: the
// plain fleet's for nil (the default is compact), else none, codec being set.
func encodingOf(codec aggregate.Codec) fleetwatch.Encoding {
	if codec == nil {
		return fleetwatch.EncodingObjects
	}
	return ""
}

// applyAs applies obj to s, of a fleet with codec, as the fleet's informers do: in a
// compact fleet its encoding, with a partial object that files it; in a plain one
// (codec nil), the object.
func applyAs(t *testing.T, codec aggregate.Codec, s *aggregate.ClusterStore, obj *unstructured.Unstructured, initialList bool) {
	t.Helper()
	if codec == nil {
		if err := s.Apply(obj, initialList); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := codec.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := aggregatetest.ApplyEncoded(s, obj, data, initialList); err != nil {
		t.Fatal(err)
	}
}

// TestClusterCacheReads checks a cluster's Get and List into typed, unstructured and
// metadata-only objects, over a plain fleet and over compact ones, whose typed reads
// decode the fleet's encodings straight into the Go type.
func TestClusterCacheReads(t *testing.T) {
	for _, tc := range fleetCodecs {
		t.Run(tc.name, func(t *testing.T) { testClusterCacheReads(t, tc.codec) })
	}
}

func testClusterCacheReads(t *testing.T, codec aggregate.Codec) {
	p, views := newTestProviderOf(t, codec)
	ctx := t.Context()
	if err := p.IndexField(ctx, &corev1.ConfigMap{}, "data.owner", func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["owner"]}
	}); err != nil {
		t.Fatal(err)
	}
	// Again, as each cluster's cache does: a no-op.
	if err := views["b"].IndexField(ctx, &corev1.ConfigMap{}, "data.owner", nil); err != nil {
		t.Fatal(err)
	}
	a := views["a"]

	t.Run("get", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := a.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "one"}, &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Data["owner"] != "a" || cm.Kind != "ConfigMap" || cm.APIVersion != "v1" || cm.ResourceVersion != "1" {
			t.Errorf("typed Get: %+v", cm)
		}
		// The object is the caller's: changing it changes nothing cached.
		cm.Data["owner"] = "changed"
		var again corev1.ConfigMap
		_ = a.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "one"}, &again)
		if again.Data["owner"] != "a" {
			t.Error("a change to a returned object reached the cache")
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := a.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "two"}, u); err != nil || u.GetResourceVersion() != "2" {
			t.Errorf("unstructured Get: %v, %v", err, u)
		}
		pm := &metav1.PartialObjectMetadata{}
		pm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
		if err := a.Get(ctx, client.ObjectKey{Namespace: "other", Name: "three"}, pm); err != nil || pm.Labels["app"] != "x" || pm.Kind != "ConfigMap" {
			t.Errorf("metadata Get: %v, %+v", err, pm)
		}
		err := a.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "missing"}, &corev1.ConfigMap{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("Get of a missing object: %v, want NotFound", err)
		}
		// A resource the fleet caches but holds no object of yet maps by the scheme's
		// kind: a read finds nothing, rather than failing.
		p.fleet.ClusterStore("a", schema.GroupVersionResource{Version: "v1", Resource: "pods"})
		if err := a.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "p"}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("Get of a Pod before any is cached: %v, want NotFound", err)
		}
		var notCached *cache.ErrResourceNotCached
		if err := a.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, &corev1.Secret{}); !errors.As(err, &notCached) {
			t.Errorf("Get of a Secret: %v, want ErrResourceNotCached", err)
		}
	})

	for _, tc := range []struct {
		name string
		opts []client.ListOption
		want []string
		err  bool
	}{
		{name: "every namespace", want: []string{"ns/one", "ns/two", "other/three"}},
		{name: "namespace", opts: []client.ListOption{client.InNamespace("ns")}, want: []string{"ns/one", "ns/two"}},
		{name: "labels", opts: []client.ListOption{client.MatchingLabels{"app": "x"}}, want: []string{"ns/one", "other/three"}},
		{name: "namespace and labels", opts: []client.ListOption{client.InNamespace("ns"), client.MatchingLabels{"app": "x"}}, want: []string{"ns/one"}},
		{name: "indexed field", opts: []client.ListOption{client.MatchingFields{"data.owner": "a"}}, want: []string{"ns/one", "ns/two", "other/three"}},
		{name: "indexed field of another cluster", opts: []client.ListOption{client.MatchingFields{"data.owner": "b"}}},
		{name: "indexed field, namespace and labels", opts: []client.ListOption{client.MatchingFields{"data.owner": "a"}, client.InNamespace("ns"), client.MatchingLabels{"app": "y"}}, want: []string{"ns/two"}},
		{name: "field not indexed", opts: []client.ListOption{client.MatchingFields{"data.other": "a"}}, err: true},
		{name: "limit", opts: []client.ListOption{client.InNamespace("ns"), client.Limit(1)}, want: []string{"*"}},
		{name: "continue", opts: []client.ListOption{client.Continue("x")}, err: true},
	} {
		t.Run("list "+tc.name, func(t *testing.T) {
			var typed corev1.ConfigMapList
			err := a.List(ctx, &typed, tc.opts...)
			if tc.err {
				if err == nil {
					t.Error("List did not fail")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cm := range typed.Items {
				if cm.Data["owner"] != "a" || cm.Kind != "ConfigMap" {
					t.Errorf("item %s/%s: owner %q, kind %q", cm.Namespace, cm.Name, cm.Data["owner"], cm.Kind)
				}
				got = append(got, cm.Namespace+"/"+cm.Name)
			}
			slices.Sort(got)
			if len(tc.want) == 1 && tc.want[0] == "*" {
				if len(got) != 1 {
					t.Errorf("got %v, want one item", got)
				}
				return
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("typed List: got %v, want %v", got, tc.want)
			}
			u := &unstructured.UnstructuredList{}
			u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
			if err := a.List(ctx, u, tc.opts...); err != nil || len(u.Items) != len(tc.want) {
				t.Errorf("unstructured List: %v, %d items, want %d", err, len(u.Items), len(tc.want))
			}
			pm := &metav1.PartialObjectMetadataList{}
			pm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
			if err := a.List(ctx, pm, tc.opts...); err != nil || len(pm.Items) != len(tc.want) {
				t.Errorf("metadata List: %v, %d items, want %d", err, len(pm.Items), len(tc.want))
			}
		})
	}
}

// TestTypedListOfEncodings checks that a typed List of a compact fleet decodes the
// encodings that the fleet holds straight into the Go type: the objects of cluster b,
// which nothing has decoded (with an index of the fleet, the fleet decodes each object
// it files, and keeps it decoded a while).
func TestTypedListOfEncodings(t *testing.T) {
	for _, tc := range fleetCodecs[1:] { // the compact ones
		t.Run(tc.name, func(t *testing.T) {
			_, views := newTestProviderOf(t, tc.codec)
			for _, opts := range [][]client.ListOption{nil, {client.InNamespace("ns"), client.MatchingLabels{"app": "y"}}} {
				var list corev1.ConfigMapList
				if err := views["b"].List(t.Context(), &list, opts...); err != nil {
					t.Fatal(err)
				}
				want := map[string]string{"ns/one": "1", "ns/two": "2", "other/three": "3"}
				if opts != nil {
					want = map[string]string{"ns/two": "2"}
				}
				got := map[string]string{}
				for _, cm := range list.Items {
					if cm.Data["owner"] != "b" || cm.Kind != "ConfigMap" || cm.Labels["app"] == "" {
						t.Errorf("%s/%s: owner %q, kind %q, labels %v", cm.Namespace, cm.Name, cm.Data["owner"], cm.Kind, cm.Labels)
					}
					got[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
				}
				if !maps.Equal(got, want) {
					t.Errorf("List %v: got %v, want %v", opts, got, want)
				}
			}
		})
	}
}

// TestTypedListReplacesItems lists, typed, into a list that holds items already, with a
// label selector that the objects of an indexed field are filtered by after their
// conversion, which the List converts into the list's own items: the list holds the
// matching objects only, and its items' slice keeps nothing of a rejected one past its
// length.
func TestTypedListReplacesItems(t *testing.T) {
	for _, tc := range fleetCodecs {
		t.Run(tc.name, func(t *testing.T) {
			p, views := newTestProviderOf(t, tc.codec)
			ctx := t.Context()
			if err := p.IndexField(ctx, &corev1.ConfigMap{}, "data.owner", func(o client.Object) []string {
				return []string{o.(*corev1.ConfigMap).Data["owner"]}
			}); err != nil {
				t.Fatal(err)
			}
			list := corev1.ConfigMapList{Items: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}}}
			for _, app := range []string{"y", "x", "none"} {
				err := views["a"].List(ctx, &list, client.MatchingFields{"data.owner": "a"}, client.MatchingLabels{"app": app})
				if err != nil {
					t.Fatal(err)
				}
				want := map[string][]string{"x": {"ns/one", "other/three"}, "y": {"ns/two"}}[app]
				var got []string
				for _, cm := range list.Items {
					if cm.Labels["app"] != app || cm.Data["owner"] != "a" || cm.Kind != "ConfigMap" {
						t.Errorf("app=%s: item %s/%s with labels %v, data %v, kind %q", app, cm.Namespace, cm.Name, cm.Labels, cm.Data, cm.Kind)
					}
					got = append(got, cm.Namespace+"/"+cm.Name)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("app=%s: listed %v, want %v", app, got, want)
				}
				for i, cm := range list.Items[len(list.Items):cap(list.Items)] {
					if cm.Name != "" {
						t.Errorf("app=%s: the items' slice keeps %s/%s past its length, at %d", app, cm.Namespace, cm.Name, len(list.Items)+i)
					}
				}
			}
		})
	}
}

// recorder is a client-go handler that records what it gets.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

func (r *recorder) OnAdd(obj any, initial bool) {
	cm := obj.(*corev1.ConfigMap)
	r.add("add " + cm.Namespace + "/" + cm.Name + map[bool]string{true: " initial"}[initial])
}

func (r *recorder) OnUpdate(old, obj any) {
	o, n := old.(*corev1.ConfigMap), obj.(*corev1.ConfigMap)
	r.add("update " + n.Name + " from " + o.ResourceVersion + " of " + o.Data["owner"] + " to " + n.ResourceVersion + " of " + n.Data["owner"])
}

func (r *recorder) OnDelete(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		r.add("delete unknown " + d.Key + " " + d.Obj.(*corev1.ConfigMap).Name)
		return
	}
	r.add("delete " + obj.(*corev1.ConfigMap).Name)
}

// TestClusterInformer checks the events of a cluster's informer, over a plain fleet
// and over compact ones, whose typed handlers get their objects, old ones included,
// decoded from the fleet's encodings (EncodedOnly).
func TestClusterInformer(t *testing.T) {
	for _, tc := range fleetCodecs {
		t.Run(tc.name, func(t *testing.T) { testClusterInformer(t, tc.codec) })
	}
}

func testClusterInformer(t *testing.T, codec aggregate.Codec) {
	p, views := newTestProviderOf(t, codec)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = p.fleet.Start(ctx) }()

	inf, err := views["a"].GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if !inf.HasSynced() || inf.IsStopped() {
		t.Errorf("HasSynced %t, IsStopped %t; want synced and running", inf.HasSynced(), inf.IsStopped())
	}
	if err := inf.AddIndexers(toolscache.Indexers{}); !errors.Is(err, ErrShared) {
		t.Errorf("AddIndexers: %v, want ErrShared", err)
	}
	if err := views["a"].RemoveInformer(ctx, &corev1.ConfigMap{}); !errors.Is(err, ErrShared) {
		t.Errorf("RemoveInformer: %v, want ErrShared", err)
	}
	rec := &recorder{}
	reg, err := inf.AddEventHandler(rec)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the registration did not sync")
	}
	sa, sb := p.fleet.ClusterStore("a", configMaps), p.fleet.ClusterStore("b", configMaps)
	applyAs(t, codec, sb, configMap("ns", "of-b", "9", nil, nil), false)
	// One was read decoded when the provider learnt the kind (a compact fleet keeps it
	// decoded a while), three was not: its old state comes encoded (Event.OldEncoded).
	applyAs(t, codec, sa, configMap("ns", "one", "4", nil, map[string]string{"owner": "a2"}), false)
	applyAs(t, codec, sa, configMap("other", "three", "5", nil, map[string]string{"owner": "a3"}), false)
	if err := sa.Delete(configMap("ns", "two", "2", nil, nil), false); err != nil {
		t.Fatal(err)
	}
	p.fleet.RemoveCluster("a")
	want := []string{
		"add ns/one initial", "add ns/two initial", "add other/three initial",
		"update one from 1 of a to 4 of a2", "update three from 3 of a to 5 of a3", "delete two", "delete unknown ns/one one", "delete unknown other/three three",
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec.mu.Lock()
		got := slices.Clone(rec.events)
		rec.mu.Unlock()
		// The initial adds and the removal's deletes come in no particular order.
		slices.Sort(got[:min(3, len(got))])
		if len(got) == len(want) {
			slices.Sort(got[6:])
			if !slices.Equal(got, want) {
				t.Fatalf("events:\n got %q\nwant %q", got, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("events: got %q, want %q", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := inf.RemoveEventHandler(reg); err != nil {
		t.Fatal(err)
	}
}

// TestControllerRuntimeKind runs controller-runtime's own source.Kind on a cluster's
// cache, as a controller of that cluster would: it syncs, and its queue gets a request
// for each object of the cluster and for each change, none of another cluster.
func TestControllerRuntimeKind(t *testing.T) {
	p, views := newTestProvider(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = p.fleet.Start(ctx) }()

	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	src := source.Kind(cache.Cache(views["a"]), &corev1.ConfigMap{}, &handler.TypedEnqueueRequestForObject[*corev1.ConfigMap]{})
	if err := src.Start(ctx, queue); err != nil {
		t.Fatal(err)
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, 10*time.Second)
	defer syncCancel()
	if err := src.WaitForSync(syncCtx); err != nil {
		t.Fatal(err)
	}
	if err := p.fleet.ClusterStore("b", configMaps).Apply(configMap("ns", "of-b", "9", nil, nil), false); err != nil {
		t.Fatal(err)
	}
	if err := p.fleet.ClusterStore("a", configMaps).Apply(configMap("ns", "new", "8", nil, nil), false); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 4 {
		req, shutdown := queue.Get()
		if shutdown {
			t.Fatal("queue shut down")
		}
		got = append(got, req.String())
		queue.Done(req)
	}
	slices.Sort(got)
	if want := []string{"ns/new", "ns/one", "ns/two", "other/three"}; !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	if n := queue.Len(); n != 0 {
		t.Errorf("%d more requests queued", n)
	}
}
