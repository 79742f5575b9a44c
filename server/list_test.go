package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

func TestList(t *testing.T) {
	f := newFixture(t, nil)
	all := []string{
		edge + "|default/web-3",
		prod + "|default/web-1", prod + "|default/web-2", prod + "|kube-system/dns-1",
		staging + "|default/api-1", staging + "|default/web-1",
	}
	for _, tc := range []struct {
		name, path string
		want       []string
	}{
		{"every cluster", clusterPath(allClusters) + "/api/v1/pods", all},
		{"one cluster", clusterPath(prod) + "/api/v1/pods", all[1:4]},
		{"one namespace", clusterPath(prod) + "/api/v1/namespaces/default/pods", all[1:3]},
		{"namespace everywhere", clusterPath(allClusters) + "/api/v1/namespaces/kube-system/pods", all[3:4]},
		{"escaped cluster name", "/clusters/" + url.PathEscape(edge) + "/api/v1/pods", all[:1]},
		{"unescaped cluster name", "/clusters/" + edge + "/api/v1/pods", all[:1]},
		{"label selector", clusterPath(allClusters) + "/api/v1/pods?labelSelector=app%3Dweb", []string{all[0], all[1], all[2], all[5]}},
		{"set-based label selector", clusterPath(allClusters) + "/api/v1/pods?labelSelector=" + url.QueryEscape("app in (api,dns)"), []string{all[3], all[4]}},
		{"label selector without match", clusterPath(allClusters) + "/api/v1/pods?labelSelector=app%3Dnone", []string{}},
		{"field selector name", clusterPath(allClusters) + "/api/v1/pods?fieldSelector=metadata.name%3Dweb-1", []string{all[1], all[5]}},
		{"field selector namespace", clusterPath(allClusters) + "/api/v1/pods?fieldSelector=metadata.namespace%21%3Ddefault", all[3:4]},
		{"field selector of pods", clusterPath(prod) + "/api/v1/pods?fieldSelector=status.phase%3DRunning,spec.nodeName%3Dnode-1", all[1:4]},
		{"both selectors", clusterPath(allClusters) + "/api/v1/pods?labelSelector=app%3Dweb&fieldSelector=metadata.name%3Dweb-1", []string{all[1], all[5]}},
		{"cluster-scoped", clusterPath(allClusters) + "/api/v1/nodes", []string{prod + "|/node-1", staging + "|/node-1"}},
		{"group", clusterPath(allClusters) + "/apis/apps/v1/deployments", []string{prod + "|default/web"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l itemList
			f.getOK(tc.path, &l)
			if got := l.refs(); !slices.Equal(got, tc.want) {
				t.Errorf("items %q, want %q", got, tc.want)
			}
			gv := "v1"
			kind := "PodList"
			switch {
			case strings.Contains(tc.path, "/nodes"):
				kind = "NodeList"
			case strings.Contains(tc.path, "/deployments"):
				gv, kind = "apps/v1", "DeploymentList"
			}
			if l.Kind != kind || l.APIVersion != gv {
				t.Errorf("list is %s %s, want %s %s", l.APIVersion, l.Kind, gv, kind)
			}
			if _, err := parseCursor(l.Metadata.ResourceVersion); err != nil {
				t.Errorf("list resourceVersion %q is not a cursor: %v", l.Metadata.ResourceVersion, err)
			}
			for _, it := range l.Items {
				if it.GetKind() == "" || it.GetAPIVersion() != gv || it.GetResourceVersion() == "" {
					t.Errorf("item %s lacks its kind or own resourceVersion: %v", it.GetName(), it.Object)
				}
			}
		})
	}
}

// TestListDoesNotModifyCache checks that the annotation is added to copies.
func TestListDoesNotModifyCache(t *testing.T) {
	f := newFixture(t, nil)
	before := f.fleet.Indexer(podsGVR).List()
	copies := make([]string, len(before))
	for i, o := range before {
		copies[i] = mustJSON(o)
	}
	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l)
	f.getOK(clusterPath(prod)+"/api/v1/namespaces/default/pods/web-1", &unstructured.Unstructured{})
	w := f.watch(clusterPath(allClusters) + "/api/v1/pods?watch=1")
	for range before {
		w.next()
	}
	for i, o := range before {
		if got := mustJSON(o); got != copies[i] {
			t.Errorf("cached object changed:\n%s\nwas\n%s", got, copies[i])
		}
		if _, ok := o.(*unstructured.Unstructured).GetAnnotations()[ClusterAnnotation]; ok {
			t.Errorf("cached object got the cluster annotation")
		}
	}
}

func TestListPages(t *testing.T) {
	f := newFixture(t, nil)
	for i := range 17 {
		f.apply(staging, podsGVR, pod("batch", fmt.Sprintf("job-%02d", i), fmt.Sprint(300+i), nil))
	}
	f.sync()
	var whole itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &whole)
	for _, limit := range []int{1, 2, 5, 22, 23, 100} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			var got []string
			var rv string
			cont := ""
			for pages := 0; ; pages++ {
				if pages > len(whole.Items)+1 {
					t.Fatalf("more pages than items")
				}
				q := url.Values{"limit": {fmt.Sprint(limit)}}
				if cont != "" {
					q.Set("continue", cont)
				}
				var page itemList
				f.getOK(clusterPath(allClusters)+"/api/v1/pods?"+q.Encode(), &page)
				if len(page.Items) > limit {
					t.Fatalf("page of %d items, limit %d", len(page.Items), limit)
				}
				if rv == "" {
					rv = page.Metadata.ResourceVersion
				} else if page.Metadata.ResourceVersion != rv {
					t.Errorf("page resourceVersion %q, want the first page's %q", page.Metadata.ResourceVersion, rv)
				}
				got = append(got, page.refs()...)
				cont = page.Metadata.Continue
				if cont == "" {
					break
				}
			}
			if want := whole.refs(); !slices.Equal(got, want) {
				t.Errorf("pages hold %q,\nwant %q", got, want)
			}
		})
	}

	t.Run("changes between pages", func(t *testing.T) {
		var first itemList
		f.getOK(clusterPath(staging)+"/api/v1/namespaces/batch/pods?limit=5", &first)
		// Deleting a returned object and adding one before the cursor change nothing;
		// objects after it are still returned once.
		f.remove(staging, podsGVR, pod("batch", "job-00", "", nil))
		f.apply(staging, podsGVR, pod("batch", "job-00a", "400", nil))
		f.apply(staging, podsGVR, pod("batch", "job-99", "401", nil))
		f.sync()
		var rest itemList
		f.getOK(clusterPath(staging)+"/api/v1/namespaces/batch/pods?limit=100&continue="+url.QueryEscape(first.Metadata.Continue), &rest)
		got := append(first.refs(), rest.refs()...)
		var want []string
		for i := range 17 {
			want = append(want, fmt.Sprintf("%s|batch/job-%02d", staging, i))
		}
		want = append(want, staging+"|batch/job-99")
		if !slices.Equal(got, want) {
			t.Errorf("got %q,\nwant %q", got, want)
		}
	})
}

func TestGet(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		name, path    string
		wantCluster   string
		wantName      string
		wantNamespace string
	}{
		{"namespaced", clusterPath(prod) + "/api/v1/namespaces/default/pods/web-1", prod, "web-1", "default"},
		{"escaped cluster", clusterPath(edge) + "/api/v1/namespaces/default/pods/web-3", edge, "web-3", "default"},
		{"every cluster, found once", clusterPath(allClusters) + "/api/v1/namespaces/default/pods/web-3", edge, "web-3", "default"},
		{"cluster-scoped", clusterPath(staging) + "/api/v1/nodes/node-1", staging, "node-1", ""},
		{"group", clusterPath(prod) + "/apis/apps/v1/namespaces/default/deployments/web", prod, "web", "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u unstructured.Unstructured
			f.getOK(tc.path, &u.Object)
			if u.GetAnnotations()[ClusterAnnotation] != tc.wantCluster || u.GetName() != tc.wantName || u.GetNamespace() != tc.wantNamespace {
				t.Errorf("got %v", u.Object)
			}
			cached, _ := f.fleet.Indexer(gvrOf(u)).Get(aggregate.Key{Cluster: tc.wantCluster, Namespace: tc.wantNamespace, Name: tc.wantName})
			if u.GetResourceVersion() != cached.(*unstructured.Unstructured).GetResourceVersion() {
				t.Errorf("resourceVersion %q, want the object's own %q", u.GetResourceVersion(), cached.(*unstructured.Unstructured).GetResourceVersion())
			}
		})
	}

	t.Run("ambiguous", func(t *testing.T) {
		st := f.get(clusterPath(allClusters)+"/api/v1/namespaces/default/pods/web-1").status(t, http.StatusConflict)
		if st.Reason != metav1.StatusReasonConflict || !strings.Contains(st.Message, `"prod", "staging"`) ||
			!strings.Contains(st.Message, "/clusters/{cluster}/") || len(st.Details.Causes) != 2 {
			t.Errorf("Status %+v", st)
		}
	})

	t.Run("not found", func(t *testing.T) {
		for _, path := range []string{
			clusterPath(prod) + "/api/v1/namespaces/default/pods/web-3",
			clusterPath(allClusters) + "/api/v1/namespaces/other/pods/web-1",
			clusterPath(prod) + "/api/v1/pods/web-1", // namespaced, without namespace
		} {
			st := f.get(path).status(t, http.StatusNotFound)
			if st.Reason != metav1.StatusReasonNotFound || st.Details == nil || st.Details.Name == "" || st.Details.Kind != "pods" {
				t.Errorf("GET %s: Status %+v", path, st)
			}
		}
		for _, path := range []string{
			clusterPath(prod) + "/api/v1/namespaces/default/pods/web-1/log", // subresource
			clusterPath(prod) + "/api/v1/namespaces/default/nodes",          // cluster-scoped in a namespace
			clusterPath(prod) + "/api/v1/secrets",                           // not cached
			clusterPath(staging) + "/apis/apps/v1/deployments",              // not served in staging
			clusterPath(prod) + "/apis/apps/v1beta1/deployments",            // other version
			"/clusters/nowhere/api/v1/pods",
		} {
			f.get(path).status(t, http.StatusNotFound)
		}
	})
}

func gvrOf(u unstructured.Unstructured) schema.GroupVersionResource {
	gvk := u.GroupVersionKind()
	return gvk.GroupVersion().WithResource(strings.ToLower(gvk.Kind) + "s")
}

func TestWriteVerbs(t *testing.T) {
	f := newFixture(t, nil)
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		for _, path := range []string{
			clusterPath(prod) + "/api/v1/namespaces/default/pods",
			clusterPath(prod) + "/api/v1/namespaces/default/pods/web-1",
			"/apis/fleetwatch.io/v1alpha1/clusters/prod",
			"/healthz",
		} {
			r := f.do(method, path)
			st := r.status(t, http.StatusMethodNotAllowed)
			if st.Reason != metav1.StatusReasonMethodNotAllowed || !strings.Contains(st.Message, method) {
				t.Errorf("%s %s: Status %+v", method, path, st)
			}
			if r.header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", method, path, r.header.Get("Allow"))
			}
		}
	}
}

func TestListBadParameters(t *testing.T) {
	f := newFixture(t, nil)
	pods := clusterPath(allClusters) + "/api/v1/pods?"
	for _, tc := range []struct {
		query, param string
	}{
		{"labelSelector=app%3D%3D%3Dweb", "labelSelector"},
		{"labelSelector=" + url.QueryEscape("app in web"), "labelSelector"},
		{"fieldSelector=spec.containers%3Dx", "fieldSelector"},
		{"fieldSelector=status.phase", "fieldSelector"},
		{"limit=-1", "limit"},
		{"limit=ten", "limit"},
		{"continue=garbage", "continue"},
		{"continue=" + continueToken{resourceVersion: "1", after: aggregate.Key{Cluster: "a", Name: "b"}}.String(), "continue"},
		{"resourceVersion=%21%21", "resourceVersion"},
		{"resourceVersionMatch=Newest&resourceVersion=0", "resourceVersionMatch"},
		{"resourceVersionMatch=NotOlderThan", "resourceVersionMatch"},
		{"resourceVersionMatch=Exact&resourceVersion=0", "resourceVersionMatch"},
		{"watch=maybe", "watch"},
		{"watch=1&allowWatchBookmarks=perhaps", "allowWatchBookmarks"},
		{"watch=1&timeoutSeconds=-4", "timeoutSeconds"},
		{"watch=1&resourceVersionMatch=NotOlderThan", "resourceVersionMatch"},
		{"watch=1&sendInitialEvents=true", "resourceVersionMatch"},
		{"sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0", "sendInitialEvents"},
		{"includeObject=All", ""}, // not a Table request: ignored
	} {
		t.Run(tc.query, func(t *testing.T) {
			r := f.get(pods + tc.query)
			if tc.param == "" {
				if r.code != http.StatusOK {
					t.Errorf("%d %s", r.code, r.body)
				}
				return
			}
			st := r.status(t, http.StatusBadRequest)
			if st.Reason != metav1.StatusReasonBadRequest || !strings.HasPrefix(st.Message, tc.param+": ") ||
				st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.param {
				t.Errorf("Status %+v does not name %s", st, tc.param)
			}
		})
	}

	t.Run("continue with resourceVersion", func(t *testing.T) {
		var page itemList
		f.getOK(pods+"limit=1", &page)
		st := f.get(pods+"limit=1&resourceVersion="+url.QueryEscape(page.Metadata.ResourceVersion)+
			"&continue="+url.QueryEscape(page.Metadata.Continue)).status(t, http.StatusBadRequest)
		if !strings.HasPrefix(st.Message, "resourceVersion: ") {
			t.Errorf("Status %+v", st)
		}
	})
}

func TestListResourceVersion(t *testing.T) { cursorForms(t, testListResourceVersion) }

func testListResourceVersion(t *testing.T, opts func(*Options)) {
	f := newFixture(t, opts)
	pods := clusterPath(allClusters) + "/api/v1/pods"
	var l itemList
	f.getOK(pods, &l)
	rv := url.QueryEscape(l.Metadata.ResourceVersion)
	for _, tc := range []struct {
		query string
		code  int
	}{
		{"resourceVersion=0", http.StatusOK},
		{"resourceVersion=" + rv, http.StatusOK},
		{"resourceVersion=" + rv + "&resourceVersionMatch=NotOlderThan", http.StatusOK},
		{"resourceVersion=" + rv + "&resourceVersionMatch=Exact", http.StatusOK},
		// A cluster's own resourceVersion, which says nothing about the others.
		{"resourceVersion=101", http.StatusOK},
		{"resourceVersion=101&resourceVersionMatch=Exact", http.StatusGone},
		// A cursor of another server.
		{"resourceVersion=" + cursor{epoch: "other"}.String() + "&resourceVersionMatch=Exact", http.StatusGone},
	} {
		if r := f.get(pods + "?" + tc.query); r.code != tc.code {
			t.Errorf("?%s: %d %s, want %d", tc.query, r.code, r.body, tc.code)
		}
	}
	f.apply(prod, podsGVR, pod("default", "web-9", "150", web))
	f.sync()
	st := f.get(pods+"?resourceVersion="+rv+"&resourceVersionMatch=Exact").status(t, http.StatusGone)
	if st.Reason != metav1.StatusReasonExpired {
		t.Errorf("Status %+v", st)
	}
	// In one cluster, its own resourceVersion is a position.
	if r := f.get(clusterPath(edge) + "/api/v1/pods?resourceVersion=301&resourceVersionMatch=Exact"); r.code != http.StatusOK {
		t.Errorf("edge at its own resourceVersion: %d %s", r.code, r.body)
	}
}

// TestMetadataClient lists and gets through client-go's metadata client, which asks for
// PartialObjectMetadata.
func TestMetadataClient(t *testing.T) {
	f := newFixture(t, nil)
	mc := metadata.NewForConfigOrDie(&rest.Config{Host: f.http.URL + clusterPath(allClusters)})
	list, err := mc.Resource(podsGVR).Namespace("default").List(f.ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range list.Items {
		got = append(got, it.Annotations[ClusterAnnotation]+"|"+it.Name)
	}
	want := []string{edge + "|web-3", prod + "|web-1", prod + "|web-2", staging + "|web-1"}
	if !slices.Equal(got, want) {
		t.Errorf("metadata list %q, want %q", got, want)
	}
	one, err := metadata.NewForConfigOrDie(&rest.Config{Host: f.http.URL + clusterPath(prod)}).
		Resource(podsGVR).Namespace("kube-system").Get(f.ctx, "dns-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if one.Labels["app"] != "dns" || one.Annotations[ClusterAnnotation] != prod {
		t.Errorf("metadata get: %+v", one)
	}
}

func TestNotAcceptable(t *testing.T) {
	f := newFixture(t, nil)
	for _, accept := range []string{"application/vnd.kubernetes.protobuf", "application/yaml", "application/json;as=Table;v=v1beta1;g=meta.k8s.io"} {
		st := f.get(clusterPath(prod)+"/api/v1/pods", "Accept", accept).status(t, http.StatusNotAcceptable)
		if st.Reason != reasonNotAcceptable {
			t.Errorf("Accept %s: %+v", accept, st)
		}
	}
	for _, accept := range []string{"", "*/*", "application/json", "application/vnd.kubernetes.protobuf;q=0.9,application/json;q=0.5"} {
		var l itemList
		f.getOK(clusterPath(prod)+"/api/v1/pods", &l, "Accept", accept)
		if l.Kind != "PodList" {
			t.Errorf("Accept %q: %s", accept, l.Kind)
		}
	}
}

func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		accept string
		list   bool
		want   format
		ok     bool
	}{
		{"", true, formatJSON, true},
		{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", true, formatTable, true},
		{"application/json;as=Table;v=v1;g=meta.k8s.io;q=0.1,application/json", true, formatJSON, true},
		{"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json", true, formatPartial, true},
		{"application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", false, 0, false},
		{"application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", false, formatPartial, true},
		{"application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer,application/json", false, formatDiscoveryV2, true},
		{"application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", false, 0, false},
		{"text/html, application/*;q=0.2", false, formatJSON, true},
		{"application/json;q=0", false, 0, false},
		{";;;", false, 0, false},
	} {
		got, ok := negotiate(tc.accept, tc.list, formatTable, formatPartial, formatDiscoveryV2)
		if got != tc.want || ok != tc.ok {
			t.Errorf("negotiate(%q, list=%v) = %v, %v; want %v, %v", tc.accept, tc.list, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseRoute(t *testing.T) {
	for _, tc := range []struct {
		path string
		want route
	}{
		{"/api", route{kind: routeAPIVersions}},
		{"/clusters/prod/api/v1", route{kind: routeResourceList, cluster: "prod", version: "v1"}},
		{"/clusters/*/apis", route{kind: routeAPIGroupList, cluster: "*"}},
		{"/clusters/%2A/apis", route{kind: routeAPIGroupList, cluster: "*"}},
		{"/clusters/a%2Fb/apis/apps", route{kind: routeAPIGroup, cluster: "a/b", group: "apps"}},
		{"/clusters/a/b:c/api/v1/pods", route{kind: routeResource, cluster: "a/b:c", version: "v1", resource: "pods"}},
		{"/clusters/api/api/v1/pods", route{kind: routeResource, cluster: "api", version: "v1", resource: "pods"}},
		{"/clusters/p/api/v1/namespaces", route{kind: routeResource, cluster: "p", version: "v1", resource: "namespaces"}},
		{"/clusters/p/api/v1/namespaces/ns", route{kind: routeResource, cluster: "p", version: "v1", resource: "namespaces", name: "ns", hasName: true}},
		{"/clusters/p/api/v1/namespaces/ns/pods", route{kind: routeResource, cluster: "p", version: "v1", namespace: "ns", hasNamespace: true, resource: "pods"}},
		{"/clusters/p/apis/apps/v1/namespaces/ns/deployments/d/scale", route{kind: routeResource, cluster: "p", group: "apps", version: "v1",
			namespace: "ns", hasNamespace: true, resource: "deployments", name: "d", hasName: true, subresource: "scale"}},
		{"/clusters/p/version", route{kind: routeVersion, cluster: "p"}},
		{"/apis/fleetwatch.io/v1alpha1/clusters/a%2Fb", route{kind: routeResource, group: "fleetwatch.io", version: "v1alpha1", resource: "clusters", name: "a/b", hasName: true}},
		{"/clusters//api", route{}},
		{"/clusters/p", route{}},
		{"/clusters/p/foo", route{}},
		{"/clusters/p/api/v1/namespaces/ns//pods", route{}},
		{"/other", route{}},
	} {
		got, err := parseRoute(tc.path)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseRoute(%q) = %+v, %v; want %+v", tc.path, got, err, tc.want)
		}
	}
	if _, err := parseRoute("/clusters/%zz/api"); err == nil {
		t.Errorf("parseRoute accepted a bad escape")
	}
}

func TestHead(t *testing.T) {
	f := newFixture(t, nil)
	r := f.do(http.MethodHead, clusterPath(prod)+"/api/v1/pods")
	if r.code != http.StatusOK || len(r.body) != 0 {
		t.Errorf("HEAD: %d %q", r.code, r.body)
	}
	var v map[string][]string
	f.getOK("/", &v)
	if !slices.Contains(v["paths"], "/clusters/*/apis") {
		t.Errorf("/ = %v", v)
	}
	_ = json.Valid
}

// TestListStreamed checks that a list, streamed one item at a time, is byte for byte what
// json.Marshal makes of the whole list, in every format.
func TestListStreamed(t *testing.T) {
	f := newFixture(t, nil)
	// A Pod of its own kind, and one whose annotations need escaping.
	odd := pod("default", "odd", "110", nil)
	odd.SetAnnotations(map[string]string{"note": "<&> \u2028 \"quoted\""})
	f.apply(prod, podsGVR, odd)
	f.sync()
	sc := scope{cluster: allClusters}
	res := f.server.catalog(sc).get(podsGVR)
	const accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, tc := range []struct {
		name, query, accept string
		limit               int
	}{
		{"json", "", "", 0},
		{"json, a page", "?limit=2", "", 2},
		{"partial", "", "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", 0},
		{"table", "", accept, 0},
		{"table, includeObject=None", "?includeObject=None", accept, 0},
		{"table, includeObject=Object", "?includeObject=Object", accept, 0},
		{"table, includeObject=Object, a page", "?includeObject=Object&limit=3", accept, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.get(clusterPath(allClusters)+"/api/v1/pods"+tc.query, "Accept", tc.accept)
			if r.code != http.StatusOK {
				t.Fatalf("%d %s", r.code, r.body)
			}
			var head struct {
				Metadata metav1.ListMeta `json:"metadata"`
			}
			if err := json.Unmarshal(r.body, &head); err != nil {
				t.Fatalf("the streamed list is not JSON: %v\n%s", err, r.body)
			}
			rc := f.server.cache.resource(podsGVR)
			rc.mu.RLock()
			items, _ := rc.listLocked(&query{scope: sc}, nil, tc.limit).items()
			rc.mu.RUnlock()
			var whole any
			switch {
			case tc.accept == accept:
				q, _ := url.ParseQuery(strings.TrimPrefix(tc.query, "?"))
				opts, err := parseTableOptions(q)
				if err != nil {
					t.Fatal(err)
				}
				whole = f.server.table(t.Context(), res, items, opts, head.Metadata, true, "")
			default:
				l := struct {
					metav1.TypeMeta `json:",inline"`
					Metadata        metav1.ListMeta `json:"metadata"`
					Items           []any           `json:"items"`
				}{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}, Metadata: head.Metadata, Items: []any{}}
				if tc.accept != "" {
					l.Kind, l.APIVersion = "PartialObjectMetadataList", "meta.k8s.io/v1"
				}
				for _, o := range items {
					if tc.accept != "" {
						l.Items = append(l.Items, partial(o, ""))
					} else {
						l.Items = append(l.Items, served(res, o, ""))
					}
				}
				whole = l
			}
			want, err := json.Marshal(whole)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(r.body); got != string(want)+"\n" {
				t.Errorf("the streamed list differs from the whole list's JSON:\n got %s\nwant %s", got, want)
			}
			if tc.limit > 0 && head.Metadata.Continue == "" {
				t.Errorf("a page without continue")
			}
		})
	}
}
