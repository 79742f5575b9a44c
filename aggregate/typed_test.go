package aggregate_test

import (
	"errors"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
)

// typedFleet holds pods in clusters a and b, and nodes in a.
func typedFleet(t *testing.T) *aggregate.Fleet {
	t.Helper()
	f := aggregate.New(aggregate.Options{})
	for _, c := range []string{"a", "b"} {
		s := f.ClusterStore(c, aggregatetest.Pods)
		mustApply(t, s, aggregatetest.Pod("default", "web-0", "1"+c, map[string]string{"app": "web"}), true)
		mustApply(t, s, aggregatetest.Pod("default", "db-0", "2"+c, map[string]string{"app": "db"}), true)
		mustApply(t, s, aggregatetest.Pod("shop", "web-1", "3"+c, map[string]string{"app": "web"}), true)
	}
	mustApply(t, f.ClusterStore("a", aggregatetest.Nodes), aggregatetest.Node("node-1", "4", map[string]string{"zone": "z"}), true)
	return f
}

func newTyped[T any](t *testing.T, f *aggregate.Fleet, gvr schema.GroupVersionResource) *aggregate.TypedLister[T] {
	t.Helper()
	l, err := aggregate.NewTypedLister[T](f, gvr, scheme.Scheme)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func podKeys(cluster string, pods []*corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, aggregate.Key{Cluster: cluster, Namespace: p.Namespace, Name: p.Name}.String())
	}
	slices.Sort(out)
	return out
}

// TestTypedListerReads runs every read of a TypedLister: which objects each view returns,
// and that each is a complete conversion of the cached one.
func TestTypedListerReads(t *testing.T) {
	t.Run("without a memo", func(t *testing.T) { typedListerReads(t, nil) })
	// A memo smaller than what the lists read: they evict from it as they go.
	t.Run("with a memo", func(t *testing.T) { typedListerReads(t, aggregate.NewTypedMemo(2)) })
}

func typedListerReads(t *testing.T, memo *aggregate.TypedMemo) {
	f := typedFleet(t)
	pods, err := aggregate.NewTypedListerWithOptions[corev1.Pod](f, aggregatetest.Pods, scheme.Scheme, aggregate.TypedListerOptions{Memo: memo})
	if err != nil {
		t.Fatal(err)
	}
	web := labels.SelectorFromSet(labels.Set{"app": "web"})

	tests := []struct {
		name string
		list func() ([]*corev1.Pod, error)
		want []string
	}{
		{"cluster", func() ([]*corev1.Pod, error) { return pods.Cluster("a").List(nil) }, []string{"a/default/db-0", "a/default/web-0", "a/shop/web-1"}},
		{"cluster selector", func() ([]*corev1.Pod, error) { return pods.Cluster("a").List(web) }, []string{"a/default/web-0", "a/shop/web-1"}},
		{"namespace", func() ([]*corev1.Pod, error) { return pods.Cluster("b").Namespace("default").List(labels.Everything()) }, []string{"b/default/db-0", "b/default/web-0"}},
		{"namespace selector", func() ([]*corev1.Pod, error) { return pods.Cluster("b").Namespace("default").List(web) }, []string{"b/default/web-0"}},
		{"empty namespace lists all", func() ([]*corev1.Pod, error) { return pods.Cluster("b").Namespace("").List(web) }, []string{"b/default/web-0", "b/shop/web-1"}},
		{"selector that matches nothing", func() ([]*corev1.Pod, error) { return pods.Cluster("a").List(labels.Nothing()) }, nil},
		{"unknown cluster", func() ([]*corev1.Pod, error) { return pods.Cluster("c").List(nil) }, nil},
		{"missing namespace", func() ([]*corev1.Pod, error) { return pods.Cluster("a").Namespace("nope").List(nil) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.list()
			if err != nil {
				t.Fatal(err)
			}
			cluster := "a"
			if len(tt.want) > 0 {
				cluster = tt.want[0][:1]
			}
			if keys := podKeys(cluster, got); !slices.Equal(keys, tt.want) {
				t.Errorf("got %v, want %v", keys, tt.want)
			}
		})
	}

	t.Run("fleet list carries clusters", func(t *testing.T) {
		items, err := pods.List(web)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, it := range items {
			keys = append(keys, aggregate.Key{Cluster: it.Cluster, Namespace: it.Object.Namespace, Name: it.Object.Name}.String()+"@"+it.Object.ResourceVersion)
		}
		slices.Sort(keys)
		want := []string{"a/default/web-0@1a", "a/shop/web-1@3a", "b/default/web-0@1b", "b/shop/web-1@3b"}
		if !slices.Equal(keys, want) {
			t.Errorf("got %v, want %v", keys, want)
		}
	})

	t.Run("conversion", func(t *testing.T) {
		p, err := pods.Cluster("b").Namespace("shop").Get("web-1")
		if err != nil {
			t.Fatal(err)
		}
		if p.APIVersion != "v1" || p.Kind != "Pod" || p.ResourceVersion != "3b" || p.UID != "uid-shop-web-1" ||
			p.Labels["app"] != "web" || len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Image != "registry.k8s.io/pause:3.10" {
			t.Errorf("converted pod %+v", p)
		}
		byKey, err := pods.Get(aggregate.Key{Cluster: "b", Namespace: "shop", Name: "web-1"})
		if err != nil || byKey.ResourceVersion != "3b" {
			t.Errorf("Get by key: %v, %v", byKey, err)
		}
	})

	t.Run("returned objects belong to the caller", func(t *testing.T) {
		p, err := pods.Cluster("a").Namespace("default").Get("web-0")
		if err != nil {
			t.Fatal(err)
		}
		p.Labels["app"] = "changed"
		p.Spec.Containers[0].Image = "changed"
		cached, _ := f.Indexer(aggregatetest.Pods).Get(aggregate.Key{Cluster: "a", Namespace: "default", Name: "web-0"})
		again, _ := pods.Cluster("a").Namespace("default").Get("web-0")
		if again.Labels["app"] != "web" || again.Spec.Containers[0].Image == "changed" || aggregatetest.RV(cached) != "1a" {
			t.Errorf("a change to a returned pod reached the cache: %+v", again)
		}
	})

	t.Run("cluster-scoped", func(t *testing.T) {
		nodes, err := aggregate.NewTypedListerWithOptions[corev1.Node](f, aggregatetest.Nodes, scheme.Scheme, aggregate.TypedListerOptions{Memo: memo})
		if err != nil {
			t.Fatal(err)
		}
		n, err := nodes.Cluster("a").Get("node-1")
		if err != nil || n.Name != "node-1" || n.Labels["zone"] != "z" || n.Kind != "Node" {
			t.Errorf("Get node-1: %+v, %v", n, err)
		}
		list, err := nodes.Cluster("a").List(labels.SelectorFromSet(labels.Set{"zone": "z"}))
		if err != nil || len(list) != 1 {
			t.Errorf("List: %d nodes, %v", len(list), err)
		}
	})
}

// TestTypedListerNotFound checks that a missing object gives the NotFound error of
// client-go's listers: with the resource's GroupResource and the name.
func TestTypedListerNotFound(t *testing.T) {
	f := typedFleet(t)
	pods := newTyped[corev1.Pod](t, f, aggregatetest.Pods)
	nodes := newTyped[corev1.Node](t, f, aggregatetest.Nodes)
	tests := []struct {
		name string
		get  func() (any, error)
		gr   schema.GroupResource
		obj  string
	}{
		{"missing name", func() (any, error) { return pods.Cluster("a").Namespace("default").Get("nope") }, aggregatetest.Pods.GroupResource(), "nope"},
		{"wrong namespace", func() (any, error) { return pods.Cluster("a").Namespace("shop").Get("db-0") }, aggregatetest.Pods.GroupResource(), "db-0"},
		{"unknown cluster", func() (any, error) { return pods.Cluster("c").Namespace("default").Get("web-0") }, aggregatetest.Pods.GroupResource(), "web-0"},
		{"empty namespace", func() (any, error) { return pods.Cluster("a").Namespace("").Get("web-0") }, aggregatetest.Pods.GroupResource(), "web-0"},
		{"namespaced object from the cluster view", func() (any, error) { return pods.Cluster("a").Get("web-0") }, aggregatetest.Pods.GroupResource(), "web-0"},
		{"fleet key", func() (any, error) { return pods.Get(aggregate.Key{Cluster: "b", Namespace: "shop", Name: "db-0"}) }, aggregatetest.Pods.GroupResource(), "db-0"},
		{"cluster-scoped", func() (any, error) { return nodes.Cluster("b").Get("node-1") }, aggregatetest.Nodes.GroupResource(), "node-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.get()
			if want := apierrors.NewNotFound(tt.gr, tt.obj); !apierrors.IsNotFound(err) || err.Error() != want.Error() {
				t.Errorf("got %v, want %v", err, want)
			}
		})
	}
}

// TestTypedListerTypes checks which types a TypedLister accepts, at NewTypedLister and at
// the reads: the scheme's group and version, the kind of the cached objects, and
// metadata-only resources.
func TestTypedListerTypes(t *testing.T) {
	f := typedFleet(t)
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	partial := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings", ResourceVersion: "5", Labels: map[string]string{"app": "web"}},
	}
	mustApply(t, f.ClusterStore("a", configMaps), partial, true)

	t.Run("construction", func(t *testing.T) {
		tests := []struct {
			name string
			new  func() error
		}{
			{"group version of another resource", func() error {
				_, err := aggregate.NewTypedLister[appsv1.Deployment](f, aggregatetest.Pods, scheme.Scheme)
				return err
			}},
			{"type the scheme does not register", func() error {
				_, err := aggregate.NewTypedLister[corev1.Pod](f, aggregatetest.Pods, runtime.NewScheme())
				return err
			}},
			{"nil scheme", func() error {
				_, err := aggregate.NewTypedLister[corev1.Pod](f, aggregatetest.Pods, nil)
				return err
			}},
			{"not a runtime.Object", func() error {
				_, err := aggregate.NewTypedLister[corev1.PodSpec](f, aggregatetest.Pods, scheme.Scheme)
				return err
			}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if err := tt.new(); !errors.Is(err, aggregate.ErrTypeMismatch) {
					t.Errorf("got %v, want ErrTypeMismatch", err)
				}
			})
		}
		if _, err := aggregate.NewTypedLister[metav1.PartialObjectMetadata](f, aggregatetest.Pods, nil); err != nil {
			t.Errorf("PartialObjectMetadata needs no scheme: %v", err)
		}
	})

	t.Run("object of another kind", func(t *testing.T) {
		// Nodes are v1 as pods are: the scheme cannot tell; the read does.
		wrong := newTyped[corev1.Node](t, f, aggregatetest.Pods)
		if _, err := wrong.Cluster("a").Namespace("default").Get("web-0"); !errors.Is(err, aggregate.ErrTypeMismatch) {
			t.Errorf("Get: got %v, want ErrTypeMismatch", err)
		}
		if items, err := wrong.List(nil); !errors.Is(err, aggregate.ErrTypeMismatch) || items != nil {
			t.Errorf("List: got %d items and %v, want ErrTypeMismatch", len(items), err)
		}
	})

	t.Run("metadata-only resource as a full type", func(t *testing.T) {
		cms := newTyped[corev1.ConfigMap](t, f, configMaps)
		_, err := cms.Cluster("a").Namespace("default").Get("settings")
		if !errors.Is(err, aggregate.ErrTypeMismatch) {
			t.Fatalf("got %v, want ErrTypeMismatch", err)
		}
	})

	t.Run("metadata-only resource as PartialObjectMetadata", func(t *testing.T) {
		cms := newTyped[metav1.PartialObjectMetadata](t, f, configMaps)
		got, err := cms.Cluster("a").Namespace("default").Get("settings")
		if err != nil {
			t.Fatal(err)
		}
		if got == partial || got.ResourceVersion != "5" || got.Labels["app"] != "web" || got.Kind != "PartialObjectMetadata" {
			t.Errorf("got %+v", got)
		}
		got.Labels["app"] = "changed"
		if partial.Labels["app"] != "web" {
			t.Error("a change to a returned object reached the cache")
		}
	})

	t.Run("full resource as PartialObjectMetadata", func(t *testing.T) {
		meta := newTyped[metav1.PartialObjectMetadata](t, f, aggregatetest.Pods)
		list, err := meta.Cluster("b").Namespace("shop").List(nil)
		if err != nil || len(list) != 1 {
			t.Fatalf("List: %d objects, %v", len(list), err)
		}
		got := list[0]
		if got.Name != "web-1" || got.ResourceVersion != "3b" || got.UID != "uid-shop-web-1" || got.Labels["app"] != "web" || got.Kind != "Pod" || got.APIVersion != "v1" {
			t.Errorf("got %+v", got)
		}
		got.Labels["app"] = "changed"
		if again, _ := meta.Cluster("b").Namespace("shop").Get("web-1"); again.Labels["app"] != "web" {
			t.Error("a change to a returned object reached the cache")
		}
	})
}

// BenchmarkTypedListerGet measures what every typed read pays, next to the untyped read
// of the same object, a realistic pod: in a plain fleet, a conversion by reflection; in a
// compact one, a decode from the encoding straight into the type (TypedDecoder).
func BenchmarkTypedListerGet(b *testing.B) {
	key := aggregate.Key{Cluster: "a", Namespace: "default", Name: "web-0"}
	for _, fc := range []struct {
		name  string
		codec aggregate.Codec
	}{{"plain", nil}, {"compact", persist.Codec{}}} {
		f := aggregate.New(aggregate.Options{Codec: fc.codec})
		mustApply(b, f.ClusterStore("a", aggregatetest.Pods), aggregatetest.RealisticPod("default", "web-0", "1", map[string]string{"app": "web", "tier": "frontend"}), true)
		b.Run(fc.name+"/untyped", func(b *testing.B) {
			l := f.Lister(aggregatetest.Pods)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Get(key); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, typed := range []struct {
			name string
			memo *aggregate.TypedMemo
		}{{"typed", nil}, {"typed-memo", aggregate.NewTypedMemo(16)}} {
			b.Run(fc.name+"/"+typed.name, func(b *testing.B) {
				l, err := aggregate.NewTypedListerWithOptions[corev1.Pod](f, aggregatetest.Pods, scheme.Scheme, aggregate.TypedListerOptions{Memo: typed.memo})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := l.Get(key); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestTypedListerMemo: with a memo, over a plain and a compact fleet, a second read of
// an unchanged object copies the one the memo keeps (which the test marks to tell it
// apart), and the caller owns the copy; an update, a deletion and a re-creation with the
// same resourceVersion are read as the fleet holds them; metav1.PartialObjectMetadata is
// not kept.
func TestTypedListerMemo(t *testing.T) {
	key := aggregate.Key{Cluster: "a", Namespace: "default", Name: "web-0"}
	podKind := corev1.SchemeGroupVersion.WithKind("Pod")
	for _, fc := range []struct {
		name  string
		codec aggregate.Codec
	}{{"plain", nil}, {"compact", persist.Codec{}}} {
		t.Run(fc.name, func(t *testing.T) {
			f := aggregate.New(aggregate.Options{Codec: fc.codec})
			s := f.ClusterStore("a", aggregatetest.Pods)
			mustApply(t, s, aggregatetest.Pod("default", "web-0", "1", map[string]string{"app": "web"}), true)
			memo := aggregate.NewTypedMemo(8)
			pods, err := aggregate.NewTypedListerWithOptions[corev1.Pod](f, aggregatetest.Pods, scheme.Scheme, aggregate.TypedListerOptions{Memo: memo})
			if err != nil {
				t.Fatal(err)
			}
			read := func(what, rv, app string) {
				t.Helper()
				p, err := pods.Get(key)
				if err != nil || p.ResourceVersion != rv || p.Labels["app"] != app || p.Kind != "Pod" {
					t.Errorf("%s: Get: %v, %+v; want %s with app %s", what, err, p, rv, app)
					return
				}
				items, err := pods.List(nil)
				if err != nil || len(items) != 1 || items[0].Object.ResourceVersion != rv || items[0].Object.Labels["app"] != app || items[0].Cluster != "a" {
					t.Errorf("%s: List: %v, %+v; want %s with app %s", what, err, items, rv, app)
				}
				// The caller's to change.
				p.Labels["app"] = "changed by the caller"
			}
			read("a first read", "1", "web")
			kept, ok := memo.Kept(key, podKind)
			if !ok || memo.Len() != 1 {
				t.Fatalf("kept %v after a read, %d objects", ok, memo.Len())
			}
			kept.(*corev1.Pod).Labels["app"] = "kept"
			read("a second read", "1", "kept")
			read("a read after the caller changed its copy", "1", "kept")

			mustApply(t, s, aggregatetest.Pod("default", "web-0", "2", map[string]string{"app": "updated"}), false)
			read("after an update", "2", "updated")
			if err := s.Delete(aggregatetest.Pod("default", "web-0", "2", nil), false); err != nil {
				t.Fatal(err)
			}
			if _, err := pods.Get(key); !apierrors.IsNotFound(err) {
				t.Errorf("Get after a deletion: %v", err)
			}
			mustApply(t, s, aggregatetest.Pod("default", "web-0", "2", map[string]string{"app": "recreated"}), false)
			read("after a re-creation with the same resourceVersion", "2", "recreated")

			partial, err := aggregate.NewTypedListerWithOptions[metav1.PartialObjectMetadata](f, aggregatetest.Pods, nil, aggregate.TypedListerOptions{Memo: memo})
			if err != nil {
				t.Fatal(err)
			}
			n := memo.Len()
			if p, err := partial.Get(key); err != nil || p.Labels["app"] != "recreated" || memo.Len() != n {
				t.Errorf("partial Get: %v, %+v; %d objects kept, was %d", err, p, memo.Len(), n)
			}
		})
	}
}

// TestTypedListerDecodesEncodings: over a compact fleet whose encodings are CBOR maps,
// a TypedLister decodes each object from its encoding straight into the type
// (TypedDecoder), with no decode into a map, also of an object the fleet holds decoded
// (its hot set); what it returns equals what a plain fleet's TypedLister converts,
// compressed or with a dictionary too. Where the CBOR serializer does not decode (a
// float in an integer field), the object is decoded and converted, as in a plain fleet;
// an object of another kind fails as there.
func TestTypedListerDecodesEncodings(t *testing.T) {
	objs := []*unstructured.Unstructured{
		aggregatetest.RealisticPod("default", "web-0", "1", map[string]string{"app": "web"}),
		aggregatetest.ScheduledPod("default", "web-1", "2", map[string]string{"app": "web"}, 1),
		aggregatetest.ScheduledPod("shop", "web-2", "3", map[string]string{"app": "shop"}, 2),
		aggregatetest.Pod("shop", "plain", "4", nil),
	}
	float := aggregatetest.Pod("shop", "float", "5", nil)
	if err := unstructured.SetNestedField(float.Object, 30.0, "spec", "terminationGracePeriodSeconds"); err != nil {
		t.Fatal(err)
	}
	deployment := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "not-a-pod", "namespace": "other", "resourceVersion": "6"}}}
	fill := func(f *aggregate.Fleet) {
		for _, c := range []string{"a", "b"} {
			s := f.ClusterStore(c, aggregatetest.Pods)
			for _, o := range append(slices.Clone(objs), float, deployment) {
				mustApply(t, s, o.DeepCopy(), true)
			}
		}
	}
	// The reference: the package's default fleet (plain; with
	// FLEETWATCH_TEST_CACHE_ENCODING=compact, one whose Codec is not CBOR maps), which
	// converts.
	reference := aggregate.New(aggregate.Options{})
	fill(reference)
	want := newTyped[corev1.Pod](t, reference, aggregatetest.Pods)
	for name, codec := range map[string]persist.Codec{"compact": {}, "compressed": {Compress: true}, "compressed-dict": {Compress: true, Dictionary: true}} {
		t.Run(name, func(t *testing.T) {
			counting := &countingCodec{Codec: codec}
			var fc aggregate.Codec = counting
			if codec.Dictionary {
				fc = codec // its per-resource Codec decodes; nothing counts
			}
			f := aggregate.New(aggregate.Options{Codec: fc})
			fill(f)
			got := newTyped[corev1.Pod](t, f, aggregatetest.Pods)
			// One pod of each cluster is held decoded too.
			for _, c := range []string{"a", "b"} {
				if _, ok := f.Indexer(aggregatetest.Pods).Get(aggregate.Key{Cluster: c, Namespace: "default", Name: "web-0"}); !ok {
					t.Fatal("web-0 is missing")
				}
			}
			before := counting.decodes.Load()
			for _, c := range []string{"a", "b"} {
				for _, o := range objs {
					key := aggregate.Key{Cluster: c, Namespace: o.GetNamespace(), Name: o.GetName()}
					g, err := got.Get(key)
					if err != nil {
						t.Fatalf("Get %s: %v", key, err)
					}
					w, err := want.Get(key)
					if err != nil {
						t.Fatal(err)
					}
					if !equality.Semantic.DeepEqual(g, w) {
						t.Errorf("Get %s:\n got %#v\nwant %#v", key, g, w)
					}
				}
				ns, err := got.Cluster(c).Namespace("default").List(nil)
				if err != nil || len(ns) != 2 {
					t.Errorf("List of %s/default: %d pods, %v", c, len(ns), err)
				}
			}
			if n := counting.decodes.Load() - before; !codec.Dictionary && n != 0 {
				t.Errorf("%d objects were decoded into maps to be read typed; want none", n)
			}
			key := aggregate.Key{Cluster: "a", Namespace: "shop", Name: "float"}
			g, err := got.Get(key)
			if err != nil {
				t.Fatalf("the pod with a float in an integer field: %v", err)
			}
			if w, _ := want.Get(key); !equality.Semantic.DeepEqual(g, w) || g.Spec.TerminationGracePeriodSeconds == nil || *g.Spec.TerminationGracePeriodSeconds != 30 {
				t.Errorf("the pod with a float in an integer field:\n got %#v\nwant %#v", g, w)
			}
			if _, err := got.Get(aggregate.Key{Cluster: "a", Namespace: "other", Name: "not-a-pod"}); !errors.Is(err, aggregate.ErrTypeMismatch) {
				t.Errorf("a Deployment read as a Pod: %v, want ErrTypeMismatch", err)
			}
			if _, err := got.List(nil); !errors.Is(err, aggregate.ErrTypeMismatch) {
				t.Errorf("a List with a Deployment among the pods: %v, want ErrTypeMismatch", err)
			}
			items, err := got.List(labels.SelectorFromSet(labels.Set{"app": "web"}))
			if err != nil {
				t.Fatal(err)
			}
			wantItems, err := want.List(labels.SelectorFromSet(labels.Set{"app": "web"}))
			if err != nil {
				t.Fatal(err)
			}
			byKey := func(items []aggregate.Item[corev1.Pod]) map[string]*corev1.Pod {
				m := map[string]*corev1.Pod{}
				for _, it := range items {
					m[it.Cluster+"/"+it.Object.Namespace+"/"+it.Object.Name] = it.Object
				}
				return m
			}
			if g, w := byKey(items), byKey(wantItems); len(g) != 4 || !equality.Semantic.DeepEqual(g, w) {
				t.Errorf("List app=web: %d pods, want %d the same as the plain fleet's", len(g), len(w))
			}
		})
	}
}
