package search

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
)

var (
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	cronJobsGVR    = schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "cronjobs"}
	secretsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	widgetsGVR     = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
)

func object(gvr schema.GroupVersionResource, kind, namespace, name string, labels map[string]string, images ...string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	u.SetAPIVersion(gvr.GroupVersion().String())
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetLabels(labels)
	u.SetResourceVersion("1")
	var containers []any
	for _, img := range images {
		containers = append(containers, map[string]any{"name": "c", "image": img})
	}
	if len(containers) > 0 {
		path := podSpecPaths[gvr.GroupResource()]
		_ = unstructured.SetNestedSlice(u.Object, containers, append(slices.Clone(path), "containers")...)
	}
	return u
}

func put(x *Index, cluster string, gvr schema.GroupVersionResource, obj runtime.Object) {
	x.OnEvent(aggregate.Event{Cluster: cluster, Resource: gvr, Type: aggregate.Added, Object: obj})
}

func del(x *Index, cluster string, gvr schema.GroupVersionResource, obj runtime.Object) {
	x.OnEvent(aggregate.Event{Cluster: cluster, Resource: gvr, Type: aggregate.Deleted, Object: obj})
}

// testIndex holds:
//
//	east: pods shop/payments-7d9 (app=payments, tier=backend, image registry/pay:1.2),
//	      shop/web-1 (app=web, nginx:1.27); deployments shop/payments (registry/pay:1.2);
//	      secrets shop/payments-db
//	west: pods shop/payments-x1 (app=payments, image registry/pay:1.3, init busybox);
//	      cronjobs ops/PayReport (registry/report:2); widgets (metadata-only) shop/w1
func testIndex() *Index {
	x := New(Options{ShortNames: map[schema.GroupResource][]string{deploymentsGVR.GroupResource(): {"deploy"}}})
	put(x, "east", podsGVR, object(podsGVR, "Pod", "shop", "payments-7d9", map[string]string{"app": "payments", "tier": "backend"}, "registry/pay:1.2"))
	put(x, "east", podsGVR, object(podsGVR, "Pod", "shop", "web-1", map[string]string{"app": "web"}, "nginx:1.27"))
	put(x, "east", deploymentsGVR, object(deploymentsGVR, "Deployment", "shop", "payments", map[string]string{"app": "payments"}, "registry/pay:1.2"))
	put(x, "east", secretsGVR, object(secretsGVR, "Secret", "shop", "payments-db", nil))
	west := object(podsGVR, "Pod", "shop", "payments-x1", map[string]string{"app": "payments"}, "registry/pay:1.3")
	_ = unstructured.SetNestedSlice(west.Object, []any{map[string]any{"name": "i", "image": "busybox"}}, "spec", "initContainers")
	put(x, "west", podsGVR, west)
	put(x, "west", cronJobsGVR, object(cronJobsGVR, "CronJob", "ops", "PayReport", nil, "registry/report:2"))
	put(x, "west", widgetsGVR, &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "w1", Labels: map[string]string{"app": "payments"}},
	})
	return x
}

func refs(items []Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.Cluster + "/" + it.Kind + "/" + it.Namespace + "/" + it.Name
	}
	return out
}

func TestSearch(t *testing.T) {
	x := testIndex()
	for _, tc := range []struct {
		name, q string
		// selector is a labelSelector parameter, for selectors with spaces.
		selector        string
		allow           func(string) bool
		want            []string
		clusters, kinds map[string]int
	}{
		{name: "substring", q: "pay", want: []string{
			"east/Deployment/shop/payments", "east/Pod/shop/payments-7d9", "east/Secret/shop/payments-db",
			"west/CronJob/ops/PayReport", "west/Pod/shop/payments-x1",
		}, clusters: map[string]int{"east": 3, "west": 2}, kinds: map[string]int{"Deployment.apps": 1, "Pod": 2, "Secret": 1, "CronJob.batch": 1}},
		{name: "substring in the middle, any case", q: "MENTS-7", want: []string{"east/Pod/shop/payments-7d9"}},
		{name: "short substring", q: "x1", want: []string{"west/Pod/shop/payments-x1"}},
		{name: "prefix", q: "web*", want: []string{"east/Pod/shop/web-1"}},
		{name: "prefix is not a substring", q: "ments*", want: nil},
		{name: "short prefix", q: "w*", want: []string{"east/Pod/shop/web-1", "west/widgets/shop/w1"}},
		{name: "no trigram", q: "zzz", want: nil},
		{name: "trigrams but no substring", q: "paymentsx", want: nil},
		{name: "kind", q: "kind:Deployment", want: []string{"east/Deployment/shop/payments"}},
		{name: "kind by resource", q: "kind:deployments.apps", want: []string{"east/Deployment/shop/payments"}},
		{name: "kind by short name", q: "kind:deploy", want: []string{"east/Deployment/shop/payments"}},
		{name: "kind.group", q: "kind:cronjob.batch", want: []string{"west/CronJob/ops/PayReport"}},
		{name: "kind of another group", q: "kind:Deployment.example.com", want: nil},
		{name: "kind unknown", q: "kind:Gadget", want: nil},
		{name: "two kinds", q: "kind:Pod kind:Deployment", want: nil},
		{name: "namespace", q: "ns:ops", want: []string{"west/CronJob/ops/PayReport"}},
		{name: "namespace unknown", q: "namespace:nope", want: nil},
		{name: "cluster glob", q: "cluster:w* pay", want: []string{"west/CronJob/ops/PayReport", "west/Pod/shop/payments-x1"}},
		{name: "label", q: "label:app=payments,tier!=backend kind:pods", want: []string{"west/Pod/shop/payments-x1"}},
		{name: "label set", q: "ns:shop kind:Pod", selector: "app in (web,payments)", want: []string{"east/Pod/shop/payments-7d9", "east/Pod/shop/web-1", "west/Pod/shop/payments-x1"}},
		{name: "label exists", q: "l:tier", want: []string{"east/Pod/shop/payments-7d9"}},
		{name: "label does not exist", q: "l:!app", want: []string{"east/Secret/shop/payments-db", "west/CronJob/ops/PayReport"}},
		{name: "label notin", q: "kind:pod", selector: "app notin (payments)", want: []string{"east/Pod/shop/web-1"}},
		{name: "metadata-only objects have labels", q: "l:app=payments w1", want: []string{"west/widgets/shop/w1"}},
		{name: "image", q: "image:pay", want: []string{"east/Deployment/shop/payments", "east/Pod/shop/payments-7d9", "west/Pod/shop/payments-x1"}},
		{name: "image of an init container", q: "image:busy", want: []string{"west/Pod/shop/payments-x1"}},
		{name: "image of a cronjob's template", q: "image:report", want: []string{"west/CronJob/ops/PayReport"}},
		{name: "image version", q: "image:pay:1.3", want: []string{"west/Pod/shop/payments-x1"}},
		{name: "everything AND", q: "pay* kind:Pod ns:shop cluster:east l:app=payments image:registry", want: []string{"east/Pod/shop/payments-7d9"}},
		{name: "allowed clusters only", q: "pay", allow: func(c string) bool { return c == "west" },
			want: []string{"west/CronJob/ops/PayReport", "west/Pod/shop/payments-x1"}, clusters: map[string]int{"west": 2}, kinds: map[string]int{"Pod": 1, "CronJob.batch": 1}},
		{name: "a glob cannot widen the allowed clusters", q: "cluster:* pay", allow: func(c string) bool { return c == "west" },
			want: []string{"west/CronJob/ops/PayReport", "west/Pod/shop/payments-x1"}},
		{name: "no cluster allowed", q: "", allow: func(string) bool { return false }, want: nil, clusters: map[string]int{}, kinds: map[string]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if tc.selector != "" {
				if err := q.Add("labelSelector", tc.selector); err != nil {
					t.Fatal(err)
				}
			}
			res := x.Search(Request{Query: q, Allow: tc.allow})
			if got := refs(res.Items); !slices.Equal(got, tc.want) && len(got)+len(tc.want) > 0 {
				t.Errorf("items\n got %q\nwant %q", got, tc.want)
			}
			if res.Total != len(tc.want) || res.More {
				t.Errorf("total %d, more %v; want %d, false", res.Total, res.More, len(tc.want))
			}
			if tc.clusters != nil && !maps.Equal(res.Clusters, tc.clusters) {
				t.Errorf("clusters = %v, want %v", res.Clusters, tc.clusters)
			}
			if tc.kinds != nil && !maps.Equal(res.Kinds, tc.kinds) {
				t.Errorf("kinds = %v, want %v", res.Kinds, tc.kinds)
			}
		})
	}
}

func TestSearchItem(t *testing.T) {
	x := testIndex()
	q, _ := Parse("payments-x1")
	res := x.Search(Request{Query: q})
	if len(res.Items) != 1 {
		t.Fatalf("items = %q", refs(res.Items))
	}
	it := res.Items[0]
	want := Key{Cluster: "west", Kind: "Pod", Version: "v1", Resource: "pods", Namespace: "shop", Name: "payments-x1"}
	if it.Key != want {
		t.Errorf("key = %+v, want %+v", it.Key, want)
	}
	if !slices.Equal(it.Images, []string{"busybox", "registry/pay:1.3"}) {
		t.Errorf("images = %q", it.Images)
	}
	if it.Object == nil {
		t.Error("no object")
	}
}

// TestSearchKinds: the caller's kinds name the metadata-only resources, and limit the
// search to the resources it serves.
func TestSearchKinds(t *testing.T) {
	x := testIndex()
	q, _ := Parse("kind:Widget")
	res := x.Search(Request{Query: q, Kinds: map[schema.GroupVersionResource]string{widgetsGVR: "Widget"}})
	if got := refs(res.Items); !slices.Equal(got, []string{"west/Widget/shop/w1"}) || !maps.Equal(res.Kinds, map[string]int{"Widget.example.com": 1}) {
		t.Errorf("items %q, kinds %v", got, res.Kinds)
	}
	res = x.Search(Request{Kinds: map[schema.GroupVersionResource]string{podsGVR: "Pod"}})
	if res.Total != 3 || !maps.Equal(res.Kinds, map[string]int{"Pod": 3}) {
		t.Errorf("only pods: total %d, kinds %v", res.Total, res.Kinds)
	}
}

// TestSearchFollowsEvents: updates move an object between the label and image sets,
// deletes take it out of every set, and a deleted name is found no more.
func TestSearchFollowsEvents(t *testing.T) {
	x := testIndex()
	find := func(q string) []string {
		t.Helper()
		pq, err := Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		return refs(x.Search(Request{Query: pq}).Items)
	}
	updated := object(podsGVR, "Pod", "shop", "web-1", map[string]string{"app": "web", "tier": "frontend"}, "nginx:1.28")
	x.OnEvent(aggregate.Event{Cluster: "east", Resource: podsGVR, Type: aggregate.Updated, Object: updated})
	if got := find("image:nginx:1.27"); len(got) != 0 {
		t.Errorf("old image still found: %q", got)
	}
	if got := find("image:nginx:1.28 l:tier=frontend"); !slices.Equal(got, []string{"east/Pod/shop/web-1"}) {
		t.Errorf("new image and label: %q", got)
	}
	del(x, "east", podsGVR, updated)
	for _, q := range []string{"web", "image:nginx", "l:tier=frontend", "kind:Pod cluster:east ns:shop"} {
		if got := find(q); slices.Contains(got, "east/Pod/shop/web-1") {
			t.Errorf("%s: deleted object found: %q", q, got)
		}
	}
	// The deleted number is reused by a new object, which is found, and the old is not.
	put(x, "west", podsGVR, object(podsGVR, "Pod", "other", "fresh", nil))
	if got := find("fresh"); !slices.Equal(got, []string{"west/Pod/other/fresh"}) {
		t.Errorf("fresh: %q", got)
	}
	if got := find("web"); len(got) != 0 {
		t.Errorf("web: %q", got)
	}
	// A cluster that leaves (a Deleted event for each object) leaves nothing behind.
	for _, it := range x.Search(Request{Query: &Query{clusterGlobs: mustGlobs(t, "east")}, Limit: MaxLimit}).Items {
		gvr := schema.GroupVersionResource{Group: it.Group, Version: it.Version, Resource: it.Resource}
		del(x, "east", gvr, it.Object)
	}
	if res := x.Search(Request{}); res.Clusters["east"] != 0 || res.Total != 4 {
		t.Errorf("after east left: total %d, clusters %v", res.Total, res.Clusters)
	}
	// A deleted object that the index does not hold changes nothing.
	del(x, "east", podsGVR, object(podsGVR, "Pod", "shop", "never", nil))
	if x.Len() != 4 {
		t.Errorf("Len = %d, want 4", x.Len())
	}
	if n := len(x.names.ids); n != 4 {
		t.Errorf("%d distinct names kept, want 4", n)
	}
}

func mustGlobs(t *testing.T, g string) []cluster.Globs {
	t.Helper()
	q, err := Parse("cluster:" + g)
	if err != nil {
		t.Fatal(err)
	}
	return q.clusterGlobs
}

// TestSearchPages: pages of any size, each after the last key of the one before, give
// every object once, in Key order.
func TestSearchPages(t *testing.T) {
	x := New(Options{})
	var want []string
	for _, cl := range []string{"a", "b", "c"} {
		for i := range 50 {
			name := fmt.Sprintf("obj-%03d", i)
			put(x, cl, podsGVR, object(podsGVR, "Pod", "ns", name, nil))
			want = append(want, cl+"/Pod/ns/"+name)
		}
	}
	for _, limit := range []int{1, 7, 50, 149, 150, 500} {
		var got []string
		var after *Key
		for pages := 0; ; pages++ {
			if pages > 150 {
				t.Fatal("no end of pages")
			}
			res := x.Search(Request{After: after, Limit: limit})
			if res.Total != 150 {
				t.Fatalf("limit %d: total %d", limit, res.Total)
			}
			got = append(got, refs(res.Items)...)
			if !res.More {
				break
			}
			after = &res.Items[len(res.Items)-1].Key
		}
		if !slices.Equal(got, want) {
			t.Errorf("limit %d: %d items, first %q", limit, len(got), got[:min(3, len(got))])
		}
	}
	if res := x.Search(Request{Limit: 10_000}); len(res.Items) != 150 {
		t.Errorf("a limit over MaxLimit: %d items", len(res.Items))
	}
	if res := x.Search(Request{}); len(res.Items) != DefaultLimit || !res.More {
		t.Errorf("default limit: %d items", len(res.Items))
	}
	// A key after every object (a forged continue token) gives an empty page.
	if res := x.Search(Request{After: &Key{Cluster: strings.Repeat("z", 100)}}); len(res.Items) != 0 || res.More || res.Total != 150 {
		t.Errorf("after the end: %d items, more %v, total %d", len(res.Items), res.More, res.Total)
	}
}
