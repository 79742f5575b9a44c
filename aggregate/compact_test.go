package aggregate_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	t.Run("GetEncoded", func(t *testing.T) {
		hotBefore := aggregate.HotObjects(ix)
		encodedOnly := 0
		for key, p := range want {
			obj, encoded, ok := ix.GetEncoded(key)
			if !ok || (obj == nil) == (encoded == nil) {
				t.Fatalf("GetEncoded(%v) = %v, %d bytes, %v; want the object or its encoding", key, obj, len(encoded), ok)
			}
			if encoded != nil {
				encodedOnly++
				var err error
				if obj, err = (persist.Codec{}).Decode(encoded); err != nil {
					t.Fatalf("GetEncoded(%v): %v", key, err)
				}
			}
			if !equality.Semantic.DeepEqual(obj, p) {
				t.Fatalf("GetEncoded(%v) = %v; want the applied pod", key, obj)
			}
		}
		// At most the hot set's objects are at hand decoded, and reading the encodings
		// keeps none decoded.
		if encodedOnly < len(want)-hot {
			t.Errorf("%d of %d objects came encoded, want all but the %d hot ones", encodedOnly, len(want), hot)
		}
		if n := aggregate.HotObjects(ix); n != hotBefore {
			t.Errorf("%d objects held decoded after GetEncoded, want %d as before", n, hotBefore)
		}
		if _, _, ok := ix.GetEncoded(aggregate.Key{Cluster: "a", Namespace: "ns-0", Name: "missing"}); ok {
			t.Error("GetEncoded of a missing key found it")
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
	t.Run("no-op updates by resourceVersion", func(t *testing.T) {
		s := f.ClusterStore("a", aggregatetest.Pods)
		p := want[aggregate.Key{Cluster: "a", Namespace: "ns-2", Name: "pod-2"}]
		if rv, ok := s.ResourceVersionByKey("ns-2/pod-2"); !ok || rv != p.GetResourceVersion() {
			t.Errorf("ResourceVersionByKey = %q, %v; want %q", rv, ok, p.GetResourceVersion())
		}
		changed, err := s.ApplyChanged(p.DeepCopy(), false)
		if err != nil || changed {
			t.Errorf("applying the same resourceVersion again: changed %v, %v; want a no-op", changed, err)
		}
		changed, err = s.ApplyChanged(aggregatetest.WithRV(p, "2000"), false)
		if err != nil || !changed {
			t.Errorf("applying a new resourceVersion: changed %v, %v; want a change", changed, err)
		}
		if rv, _ := s.ResourceVersionByKey("ns-2/pod-2"); rv != "2000" {
			t.Errorf("ResourceVersionByKey after the update = %q, want 2000", rv)
		}
	})
}

// TestCompactEventEncoded checks Event.Encoded: in a compact fleet, the encoding the
// fleet holds, on Added and Updated events and on a late handler's replay, decoding to
// the event's object; nil on Deleted events, and in a plain fleet (which
// FLEETWATCH_TEST_CACHE_ENCODING=compact makes compact too).
func TestCompactEventEncoded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec aggregate.Codec
	}{{"compact", persist.Codec{}}, {"compressed", persist.Codec{Compress: true}}, {"plain", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			f := aggregate.New(aggregate.Options{Codec: tc.codec})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			go func() { _ = f.Start(ctx) }()
			early := aggregatetest.NewRecorder()
			if _, err := f.AddHandler(early, aggregate.HandlerOptions{}); err != nil {
				t.Fatal(err)
			}
			s := f.ClusterStore("a", aggregatetest.Pods)
			p := aggregatetest.RealisticPod("ns", "p", "1", map[string]string{"app": "x"})
			mustApply(t, s, p.DeepCopy(), true)
			p2 := p.DeepCopy()
			p2.SetResourceVersion("2")
			mustApply(t, s, p2.DeepCopy(), false)
			late := aggregatetest.NewRecorder()
			if _, err := f.AddHandler(late, aggregate.HandlerOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := late.WaitForLen(ctx, 1); err != nil {
				t.Fatal(err)
			}
			mustDelete(t, s, p2.DeepCopy(), false)
			if err := early.WaitForLen(ctx, 3); err != nil {
				t.Fatal(err)
			}
			events := append(early.Events(), late.Events()[0])
			for i, e := range events {
				switch {
				case f.Codec() == nil || e.Type == aggregate.Deleted:
					if e.Encoded != nil {
						t.Errorf("event %d (%s): Encoded set, want nil", i, e.Type)
					}
				case e.Encoded == nil:
					t.Errorf("event %d (%s): Encoded nil in a compact fleet", i, e.Type)
				default:
					got, err := f.Codec().Decode(e.Encoded)
					if err != nil || !equality.Semantic.DeepEqual(got, e.Object) {
						t.Errorf("event %d (%s): Encoded decodes to %v (%v), want the event's object", i, e.Type, got, err)
					}
				}
			}
		})
	}
}

// TestEncodedOnlyHandler checks HandlerOptions.EncodedOnly: in a compact fleet, the
// events of the objects that the fleet has only encoded come with their encoding alone
// (adds and updates applied as encodings, a late handler's replay, and the deletions of
// a removed cluster, whose last state the fleet held); the objects at hand decoded (a
// deletion watched from the cluster, a metadata-only object) come decoded. In a plain
// fleet, the option changes nothing.
func TestEncodedOnlyHandler(t *testing.T) {
	for _, tc := range []struct {
		name  string
		codec aggregate.Codec
	}{{"compact", persist.Codec{}}, {"compressed", persist.Codec{Compress: true}}, {"plain", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			f := aggregate.New(aggregate.Options{Codec: tc.codec})
			startFleet(t, f)
			ctx := waitCtx(t)
			early := aggregatetest.NewRecorder()
			if _, err := f.AddHandler(early, aggregate.HandlerOptions{EncodedOnly: true}); err != nil {
				t.Fatal(err)
			}
			pods := f.ClusterStore("a", aggregatetest.Pods)
			// As the informers of a compact fleet apply what they list and watch: the
			// encoding, and of the object only what files it (a plain fleet, whole).
			applyEncoded := func(u *unstructured.Unstructured, initialList bool) {
				t.Helper()
				if f.Codec() == nil {
					mustApply(t, pods, u.DeepCopy(), initialList)
					return
				}
				// The informers write the snapshot's encoding; a fleet of another Codec
				// (the package's tests with FLEETWATCH_TEST_CACHE_ENCODING=compact) its own.
				var enc aggregate.Codec = persist.Codec{}
				if _, ok := f.Codec().(persist.Codec); !ok {
					enc = f.Codec()
				}
				data, err := enc.Encode(u)
				if err != nil {
					t.Fatal(err)
				}
				if err := aggregatetest.ApplyEncoded(pods, u, data, initialList); err != nil {
					t.Fatal(err)
				}
			}
			p := aggregatetest.RealisticPod("ns", "p", "1", map[string]string{"app": "x"})
			applyEncoded(p, true)
			p2 := p.DeepCopy()
			p2.SetResourceVersion("2")
			applyEncoded(p2, false)
			applyEncoded(aggregatetest.RealisticPod("ns", "q", "3", nil), false)
			md := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", ResourceVersion: "4"}}
			mustApply(t, f.ClusterStore("a", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}), md, false)
			late := aggregatetest.NewRecorder()
			if _, err := f.AddHandler(late, aggregate.HandlerOptions{EncodedOnly: true, Resources: []schema.GroupVersionResource{aggregatetest.Pods}}); err != nil {
				t.Fatal(err)
			}
			if err := late.WaitForLen(ctx, 2); err != nil {
				t.Fatal(err)
			}
			mustDelete(t, pods, p2.DeepCopy(), false)
			f.RemoveCluster("a") // q and c
			if err := early.WaitForLen(ctx, 7); err != nil {
				t.Fatal(err)
			}
			compact := f.Codec() != nil
			for i, e := range append(early.Events(), late.Events()...) {
				what := fmt.Sprintf("event %d (%s %s, final state unknown %v)", i, e.Type, e.Resource.Resource, e.FinalStateUnknown)
				decoded := !compact || e.Resource.Resource == "configmaps" || e.Type == aggregate.Deleted && !e.FinalStateUnknown
				switch {
				case decoded && e.Object == nil:
					t.Errorf("%s: no Object, want it decoded", what)
				case decoded && e.OldEncoded != nil:
					t.Errorf("%s: %d bytes of OldEncoded, want the old object decoded", what, len(e.OldEncoded))
				case decoded && compact && e.Resource.Resource == "configmaps":
					if _, ok := e.Object.(*metav1.PartialObjectMetadata); !ok {
						t.Errorf("%s: Object %T, want the metadata-only object", what, e.Object)
					}
				case decoded:
				case e.Object != nil || e.OldObject != nil || e.Encoded == nil:
					t.Errorf("%s: Object %T, OldObject %T, %d bytes encoded; want the encoding alone", what, e.Object, e.OldObject, len(e.Encoded))
				default:
					got, err := f.Codec().Decode(e.Encoded)
					if u, ok := got.(*unstructured.Unstructured); err != nil || !ok || u.GetName() == "" {
						t.Errorf("%s: Encoded decodes to %T (%v)", what, got, err)
					}
					// The update of p from resourceVersion 1 to 2 carries the old state
					// encoded too; no other event has an old state.
					switch {
					case e.Type != aggregate.Updated && e.OldEncoded != nil:
						t.Errorf("%s: %d bytes of OldEncoded, want none", what, len(e.OldEncoded))
					case e.Type == aggregate.Updated:
						old, err := f.Codec().Decode(e.OldEncoded)
						if u, ok := old.(*unstructured.Unstructured); err != nil || !ok || u.GetName() != "p" || u.GetResourceVersion() != "1" {
							t.Errorf("%s: OldEncoded decodes to %v (%v), want p at resourceVersion 1", what, old, err)
						}
					}
					// The fleet keeps, and hands out, the informers' encodings as its
					// Codec shortens them (EncodingShortener).
					if _, ok := f.Codec().(persist.Codec); !ok {
						continue
					}
					if cbor, err := (persist.Codec{}).Expand(nil, e.Encoded); err != nil || (&cbor[0] != &e.Encoded[0]) != (tc.name == "compressed") {
						t.Errorf("%s: Encoded of %d bytes, %d expanded (%v)", what, len(e.Encoded), len(cbor), err)
					}
				}
			}
		})
	}
}

// TestCompactLabelSets: a compact fleet holds one copy of each set of labels that its
// objects carry, through adds, updates that change labels or keep them, deletions and
// the removal of a cluster, and none once the objects are gone; selectors still find
// the objects by their labels.
func TestCompactLabelSets(t *testing.T) {
	f := aggregate.New(aggregate.Options{Codec: persist.Codec{}})
	ix := f.Indexer(aggregatetest.Pods)
	a, b := f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("b", aggregatetest.Pods)
	pod := func(name, rv string, ls map[string]string) *unstructured.Unstructured {
		return aggregatetest.Pod("ns", name, rv, ls)
	}
	web := map[string]string{"app": "web", "tier": "front"}
	for i := range 10 {
		mustApply(t, a, pod(fmt.Sprint("web-", i), "1", web), true)
		mustApply(t, b, pod(fmt.Sprint("web-", i), "1", web), true)
		mustApply(t, a, pod(fmt.Sprint("own-", i), "1", map[string]string{"app": "web", "instance": fmt.Sprint(i)}), true)
	}
	mustApply(t, a, pod("bare", "1", nil), true)
	check := func(what string, sets, web int) {
		t.Helper()
		if n := aggregate.LabelSets(ix); n != sets {
			t.Errorf("%s: %d label sets held, want %d", what, n, sets)
		}
		if got := len(ix.Select(labels.SelectorFromSet(labels.Set{"tier": "front"}))); got != web {
			t.Errorf("%s: %d objects with tier=front, want %d", what, got, web)
		}
	}
	check("added", 11, 20)

	mustApply(t, a, pod("web-0", "2", web), false)
	check("labels kept", 11, 20)
	mustApply(t, a, pod("own-0", "2", web), false)
	check("labels changed to a held set", 10, 21)
	mustApply(t, a, pod("web-1", "2", map[string]string{"app": "web", "tier": "back"}), false)
	check("labels changed to a new set", 11, 20)
	mustDelete(t, a, pod("own-1", "2", nil), false)
	mustDelete(t, a, pod("web-1", "3", nil), false)
	check("deleted", 9, 20)
	f.RemoveCluster("b")
	check("a cluster removed", 9, 10)
	for _, key := range ix.ListKeys() {
		mustDelete(t, a, pod(key.Name, "9", nil), false)
	}
	check("every object deleted", 0, 0)
}

var _ aggregate.ResourceCodec = persist.Codec{}

// TestCompressedDictFleet checks a fleet whose Codec compresses with a dictionary per
// resource (aggregate.ResourceCodec): once a resource's first objects made its
// dictionary, the encodings the fleet holds and hands to handlers are in the
// dictionary's form, shorter, and every read decodes them, with the fleet's Codec too.
func TestCompressedDictFleet(t *testing.T) {
	f := aggregate.New(aggregate.Options{Codec: persist.Codec{Compress: true, Dictionary: true}})
	startFleet(t, f)
	ctx := waitCtx(t)
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	s := f.ClusterStore("a", aggregatetest.Pods)
	const n = 100
	var want []runtime.Object
	for i := range n {
		p := aggregatetest.RealisticPod("ns", fmt.Sprintf("p-%03d", i), "1", map[string]string{"app": "x"})
		want = append(want, p.DeepCopy())
		mustApply(t, s, p, true)
	}
	if err := rec.WaitForLen(ctx, n); err != nil {
		t.Fatal(err)
	}
	events := rec.Events()
	first, last := events[0].Encoded, events[n-1].Encoded
	if first[0] == last[0] || len(last) >= len(first) {
		t.Errorf("the first encoding (%d bytes, format %d) and the last (%d, format %d): want the last shorter, with the dictionary", len(first), first[0], len(last), last[0])
	}
	for i, e := range events {
		got, err := f.Codec().Decode(e.Encoded)
		if err != nil || !equality.Semantic.DeepEqual(got, want[i]) {
			t.Fatalf("event %d: the encoding decodes to another object (%v)", i, err)
		}
	}
	objs := f.Indexer(aggregatetest.Pods).List()
	if len(objs) != n {
		t.Fatalf("List: %d objects, want %d", len(objs), n)
	}
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); !ok || u.GetName() == "" {
			t.Fatalf("List: a %T without a name", obj)
		}
	}
}

// TestSelectEncoded checks Indexer.SelectEncoded: the objects of a cluster, a namespace
// and a selector, as the fleet holds them: in a compact fleet, the encodings of the
// objects it holds encoded only (the very bytes, decoded by no one) and the objects it
// has at hand decoded; in a plain fleet, the objects.
func TestSelectEncoded(t *testing.T) {
	for _, compact := range []bool{true, false} {
		t.Run(fmt.Sprintf("compact=%t", compact), func(t *testing.T) {
			var codec aggregate.Codec
			if compact {
				codec = persist.Codec{}
			}
			f := aggregate.New(aggregate.Options{Codec: codec})
			ix := f.Indexer(aggregatetest.Pods)
			for _, c := range []string{"a", "b"} {
				s := f.ClusterStore(c, aggregatetest.Pods)
				for _, p := range []*unstructured.Unstructured{
					aggregatetest.Pod("ns", "web", "1", map[string]string{"app": "web"}),
					aggregatetest.Pod("ns", "db", "2", map[string]string{"app": "db"}),
					aggregatetest.Pod("other", "web", "3", map[string]string{"app": "web"}),
				} {
					if compact {
						mustApplyPartial(t, s, p)
					} else {
						mustApply(t, s, p, false)
					}
				}
			}
			// One read decoded: a compact fleet has it at hand decoded from then on.
			if _, ok := ix.Get(aggregate.Key{Cluster: "a", Namespace: "other", Name: "web"}); !ok {
				t.Fatal("a/other/web not found")
			}
			for _, tc := range []struct {
				cluster, namespace string
				selector           labels.Selector
				want               []string
			}{
				{"a", "", nil, []string{"a/ns/db", "a/ns/web", "a/other/web"}},
				{"a", "ns", nil, []string{"a/ns/db", "a/ns/web"}},
				{"b", "", labels.SelectorFromSet(labels.Set{"app": "web"}), []string{"b/ns/web", "b/other/web"}},
				{"", "ns", labels.SelectorFromSet(labels.Set{"app": "db"}), []string{"a/ns/db", "b/ns/db"}},
				{"c", "", nil, nil},
			} {
				var got []string
				for _, h := range ix.SelectEncoded(tc.cluster, tc.namespace, tc.selector) {
					obj := h.Object
					switch {
					case h.Object != nil && h.Encoded != nil:
						t.Errorf("%v: both an object and %d bytes encoded", tc, len(h.Encoded))
					case h.Encoded != nil:
						if !compact {
							t.Errorf("%v: %d bytes encoded in a plain fleet", tc, len(h.Encoded))
						}
						var err error
						if obj, err = f.Codec().Decode(h.Encoded); err != nil {
							t.Fatalf("%v: %v", tc, err)
						}
					}
					u := obj.(*unstructured.Unstructured)
					// The object read decoded comes decoded, the others encoded.
					if hot := tc.cluster == "a" && u.GetNamespace() == "other"; compact && (h.Object != nil) != hot {
						t.Errorf("%v: %s/%s: decoded %t", tc, u.GetNamespace(), u.GetName(), h.Object != nil)
					}
					got = append(got, u.GetNamespace()+"/"+u.GetName())
				}
				slices.Sort(got)
				var want []string
				for _, k := range tc.want {
					want = append(want, k[2:])
				}
				if !slices.Equal(got, want) {
					t.Errorf("SelectEncoded(%q, %q, %v): %v, want %v", tc.cluster, tc.namespace, tc.selector, got, want)
				}
			}
		})
	}
}

// TestCompactFleetDecodesShared: a compact fleet whose Codec is a SharingDecoder decodes
// with DecodeShared everything it hands out (Gets, lists, events, what index functions
// get) and nothing with Decode, and what it hands out is what was applied. A
// ResourceCodec's Codecs are asked, not the fleet's (persist.Codec with Dictionary).
func TestCompactFleetDecodesShared(t *testing.T) {
	byNode := cache.Indexers{"node": func(obj any) ([]string, error) {
		node, _, err := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "spec", "nodeName")
		return []string{node}, err
	}}
	spy := &countingCodec{}
	f := aggregate.New(aggregate.Options{Codec: spy, HotObjects: 1, Indexers: byNode})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = f.Start(ctx) }()
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	s := f.ClusterStore("a", aggregatetest.Pods)
	want := map[string]*unstructured.Unstructured{}
	for i := range 20 {
		p := aggregatetest.RealisticPod("ns", fmt.Sprintf("pod-%02d", i), fmt.Sprint(10+i), nil)
		// Half as the informers hand them over, encoded with the filing fields only:
		// the index function gets them decoded.
		if i%2 == 0 {
			mustApply(t, s, p.DeepCopy(), true)
		} else {
			mustApplyPartial(t, s, p)
		}
		want[p.GetName()] = p
	}
	if err := rec.WaitForLen(ctx, len(want)); err != nil {
		t.Fatal(err)
	}
	for _, e := range rec.Events() {
		if u := e.Object.(*unstructured.Unstructured); !equality.Semantic.DeepEqual(u, want[u.GetName()]) {
			t.Fatalf("event of %s: %v", u.GetName(), u)
		}
	}
	ix := f.Indexer(aggregatetest.Pods)
	for range 2 {
		for name, p := range want {
			got, ok := ix.Get(aggregate.Key{Cluster: "a", Namespace: "ns", Name: name})
			if !ok || !equality.Semantic.DeepEqual(got, p) {
				t.Fatalf("Get(%s) = %v, %v", name, ok, got)
			}
		}
		objs, err := ix.ByIndex(aggregate.IndexNamespace, "ns")
		if err != nil || len(objs) != len(want) {
			t.Fatalf("ByIndex: %d objects, %v", len(objs), err)
		}
		for _, obj := range objs {
			if u := obj.(*unstructured.Unstructured); !equality.Semantic.DeepEqual(u, want[u.GetName()]) {
				t.Fatalf("listed %s: %v", u.GetName(), u)
			}
		}
	}
	if n := spy.plain.Load(); n != 0 {
		t.Errorf("%d objects decoded with Decode, want none", n)
	}
	if shared := spy.decodes.Load() - spy.plain.Load(); shared < 2*int64(len(want)) {
		t.Errorf("%d objects decoded with DecodeShared, want every one read", shared)
	}

	// With dictionaries, the Codec of the resource is the one that decodes.
	f = aggregate.New(aggregate.Options{Codec: persist.Codec{Dictionary: true}, HotObjects: 1})
	s = f.ClusterStore("a", aggregatetest.Pods)
	for _, p := range want {
		mustApply(t, s, p.DeepCopy(), true)
	}
	ix = f.Indexer(aggregatetest.Pods)
	if !aggregate.DecodesShared(ix) {
		t.Error("the indexer of a Codec with dictionaries decodes with Decode")
	}
	for name, p := range want {
		if got, ok := ix.Get(aggregate.Key{Cluster: "a", Namespace: "ns", Name: name}); !ok || !equality.Semantic.DeepEqual(got, p) {
			t.Fatalf("Get(%s) with dictionaries = %v, %v", name, ok, got)
		}
	}
}
