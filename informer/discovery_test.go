package informer

import (
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// discoveryServer serves the aggregated discovery of a kube-apiserver v1.36
// (testdata/discovery, its /api and /apis), with the groups of extra after the others,
// and the versions of stale marked Stale, as an aggregated apiserver that does not
// answer is. It answers as a kube-apiserver does (k8s.io/apiserver's
// endpoints/discovery/aggregated): with the ETag of each document, and 304 Not Modified
// to an If-None-Match that is that ETag.
func discoveryServer(t testing.TB, stale []string, extra ...apidiscoveryv2.APIGroupDiscovery) *httptest.Server {
	return newFakeDiscovery(t, stale, extra...).Server
}

// fakeDiscovery is the server of discoveryServer, which counts its answers and whose
// documents can change.
type fakeDiscovery struct {
	*httptest.Server
	// full and notModified count the answers with a document and the 304s.
	full, notModified atomic.Int64

	// mu guards docs, etags and noETag.
	mu    sync.Mutex
	docs  map[string][]byte
	etags map[string]string
	// noETag serves no ETag, and ignores If-None-Match.
	noETag bool
}

func newFakeDiscovery(t testing.TB, stale []string, extra ...apidiscoveryv2.APIGroupDiscovery) *fakeDiscovery {
	t.Helper()
	f := &fakeDiscovery{}
	f.serve(t, stale, extra...)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		doc, ok := f.docs[r.URL.Path]
		etag, noETag := f.etags[r.URL.Path], f.noETag
		f.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		if !noETag {
			w.Header().Set("ETag", etag)
			if r.Header.Get("If-None-Match") == etag {
				f.notModified.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
		}
		f.full.Add(1)
		w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		_, _ = w.Write(doc)
	}))
	t.Cleanup(f.Close)
	return f
}

// serve has f serve the documents of testdata/discovery, changed as discoveryServer says.
func (f *fakeDiscovery) serve(t testing.TB, stale []string, extra ...apidiscoveryv2.APIGroupDiscovery) {
	t.Helper()
	docs, etags := map[string][]byte{}, map[string]string{}
	for path, file := range map[string]string{"/api": "api.json", "/apis": "apis.json"} {
		data, err := os.ReadFile("testdata/discovery/" + file)
		if err != nil {
			t.Fatal(err)
		}
		if path == "/apis" {
			var list apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(data, &list); err != nil {
				t.Fatal(err)
			}
			list.Items = append(list.Items, extra...)
			for i, g := range list.Items {
				for j, v := range g.Versions {
					for _, gv := range stale {
						if gv == g.Name+"/"+v.Version {
							list.Items[i].Versions[j].Freshness = apidiscoveryv2.DiscoveryFreshnessStale
						}
					}
				}
			}
			if data, err = json.Marshal(list); err != nil {
				t.Fatal(err)
			}
		}
		docs[path] = data
		etags[path] = fmt.Sprintf("%q", fmt.Sprintf("%X", sha512.Sum512(data)))
	}
	f.mu.Lock()
	f.docs, f.etags = docs, etags
	f.mu.Unlock()
}

// counts returns the numbers of answers with a document and of 304s so far.
func (f *fakeDiscovery) counts() (full, notModified int64) {
	return f.full.Load(), f.notModified.Load()
}

// widgetGroup is the discovery of a CRD: widgets.example.com, served in v1 (preferred)
// and v1beta1, short name wd, in the category all.
func widgetGroup(group string) apidiscoveryv2.APIGroupDiscovery {
	version := func(v string) apidiscoveryv2.APIVersionDiscovery {
		return apidiscoveryv2.APIVersionDiscovery{
			Version: v,
			Resources: []apidiscoveryv2.APIResourceDiscovery{{
				Resource:         "widgets",
				ResponseKind:     &metav1.GroupVersionKind{Group: group, Version: v, Kind: "Widget"},
				Scope:            apidiscoveryv2.ScopeNamespace,
				SingularResource: "widget",
				Verbs:            []string{"get", "list", "watch"},
				ShortNames:       []string{"wd"},
				Categories:       []string{"all"},
				Subresources: []apidiscoveryv2.APISubresourceDiscovery{{
					Subresource:  "status",
					ResponseKind: &metav1.GroupVersionKind{Group: group, Version: v, Kind: "Widget"},
					Verbs:        []string{"get", "patch", "update"},
				}},
			}},
			Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		}
	}
	return apidiscoveryv2.APIGroupDiscovery{
		ObjectMeta: metav1.ObjectMeta{Name: group},
		Versions:   []apidiscoveryv2.APIVersionDiscovery{version("v1"), version("v1beta1")},
	}
}

// newDiscoveringSet returns a Set of the cluster at srv, which has discovered what it
// serves.
func newDiscoveringSet(t testing.TB, srv *httptest.Server) *Set {
	t.Helper()
	s, err := New(Options{
		Cluster:   srv.URL,
		Config:    &rest.Config{Host: srv.URL},
		Resources: []Resource{{Name: "pods"}},
		Sink:      nopSink{},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.discover(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSetsShareTheMapperOfTheSameDiscovery(t *testing.T) {
	a := newDiscoveringSet(t, discoveryServer(t, nil))
	b := newDiscoveringSet(t, discoveryServer(t, nil))
	if a.mapper != b.mapper {
		t.Error("two clusters that serve the same discovery have mappers of their own")
	}
	// A CRD installed: a mapper of its own, which resolves it.
	crd := newDiscoveringSet(t, discoveryServer(t, nil, widgetGroup("example.com")))
	if crd.mapper == a.mapper {
		t.Fatal("a cluster with a CRD more shares the mapper of one without")
	}
	if m, err := resolve(crd.mapper.mapper, "widgets"); err != nil || m.Kind.Kind != "Widget" {
		t.Errorf("widgets with the CRD: %+v, %v", m, err)
	}
	if _, err := resolve(a.mapper.mapper, "widgets"); !errors.Is(err, ErrResourceNotFound) {
		t.Errorf("widgets without the CRD: %v, want ErrResourceNotFound", err)
	}
	// Read again, the same discovery gives the same mapper.
	before := a.mapper
	if _, err := a.discover(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if a.mapper != before {
		t.Error("a second read of the same discovery gave another mapper")
	}
}

// TestDiscoveryOnCondition: a cluster that serves documents that the process holds
// answers 304s, the first time (a second cluster) and at every later reconcile, and its
// Set holds the mapper of the first; a document that changed (a CRD installed) is read
// again, and resolved.
func TestDiscoveryOnCondition(t *testing.T) {
	// A group of this test's own, so that no other test's documents are asked for.
	f := newFakeDiscovery(t, nil, widgetGroup("condition.example.com"))
	a := newDiscoveringSet(t, f.Server)
	full, notModified := f.counts()
	if full+notModified != 2 || full < 1 {
		t.Fatalf("the first cluster: %d documents and %d 304s, want its /apis at least", full, notModified)
	}
	check := func(what string, s *Set, wantFull, wantNotModified int64) {
		t.Helper()
		full0, notModified0 := f.counts()
		if _, err := s.discover(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		full, notModified := f.counts()
		if full-full0 != wantFull || notModified-notModified0 != wantNotModified {
			t.Errorf("%s: %d documents and %d 304s, want %d and %d", what, full-full0, notModified-notModified0, wantFull, wantNotModified)
		}
	}
	b, err := New(Options{Cluster: "b", Config: &rest.Config{Host: f.URL}, Resources: []Resource{{Name: "pods"}}, Sink: nopSink{}})
	if err != nil {
		t.Fatal(err)
	}
	check("a second cluster", b, 0, 2)
	if b.mapper != a.mapper {
		t.Error("a second cluster of the same documents has a mapper of its own")
	}
	for range 3 {
		before := a.mapper
		check("a reconcile", a, 0, 2)
		check("a reconcile", b, 0, 2)
		if a.mapper != before || b.mapper != before {
			t.Fatal("a reconcile of the same documents gave another mapper")
		}
	}

	// A CRD installed: /apis changes, /api does not.
	f.serve(t, nil, widgetGroup("condition.example.com"), widgetGroup("more.condition.example.com"))
	before := a.mapper
	check("a changed /apis", a, 1, 1)
	if a.mapper == before {
		t.Fatal("a changed /apis gave the same mapper")
	}
	if m, err := resolve(a.mapper.mapper, "widgets.more.condition.example.com"); err != nil || m.Kind.Kind != "Widget" {
		t.Errorf("the new CRD's widgets: %+v, %v", m, err)
	}
	// Another cluster reads the change too, whose documents are its own until it has.
	check("a changed /apis, again", b, 1, 1)
	if b.mapper != a.mapper {
		t.Error("the second cluster of the changed documents has a mapper of its own")
	}
	check("a reconcile after the change", a, 0, 2)
	check("a reconcile after the change", b, 0, 2)
}

// TestDiscoveryOfCoreResourcesReadsCoreOnly: a Set of the core group's resources by
// their plural names reads /api alone, and resolves them as a read of both documents
// does; a singular name, a name with a group, or a name that the core group does not
// serve reads /apis too.
func TestDiscoveryOfCoreResourcesReadsCoreOnly(t *testing.T) {
	f := newFakeDiscovery(t, nil, widgetGroup("core.example.com"))
	full := newDiscoveringSet(t, f.Server)
	for _, tc := range []struct {
		names    []string
		requests int64
	}{
		{[]string{"pods"}, 1},
		{[]string{"pods", "configmaps"}, 1},
		{[]string{"pod"}, 2},
		{[]string{"pods", "widgets"}, 2},
		{[]string{"deployments.apps"}, 2},
		{[]string{"widgets.core.example.com"}, 2},
		{nil, 2},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			s, err := New(Options{Cluster: "c", Config: &rest.Config{Host: f.URL}, Resources: []Resource{{Name: "pods"}}, Sink: nopSink{}})
			if err != nil {
				t.Fatal(err)
			}
			full0, notModified0 := f.counts()
			mapper, err := s.discover(t.Context(), tc.names)
			if err != nil {
				t.Fatal(err)
			}
			full1, notModified1 := f.counts()
			if got := full1 - full0 + notModified1 - notModified0; got != tc.requests {
				t.Errorf("%d discovery requests, want %d", got, tc.requests)
			}
			for _, name := range tc.names {
				got, gotErr := resolve(mapper, name)
				want, wantErr := resolve(full.mapper.mapper, name)
				if got != want || (gotErr == nil) != (wantErr == nil) {
					t.Errorf("%s resolves to %+v, %v; with both documents to %+v, %v", name, got, gotErr, want, wantErr)
				}
			}
		})
	}
}

// TestDiscoveryWithoutETags: a server that sends no ETags, or that serves no aggregated
// discovery, is read as it always was, and its Sets share a mapper.
func TestDiscoveryWithoutETags(t *testing.T) {
	t.Run("no ETag", func(t *testing.T) {
		f := newFakeDiscovery(t, nil)
		f.mu.Lock()
		f.noETag = true
		f.mu.Unlock()
		a, b := newDiscoveringSet(t, f.Server), newDiscoveringSet(t, f.Server)
		if _, err := a.discover(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		if full, notModified := f.counts(); full != 6 || notModified != 0 {
			t.Errorf("%d documents and %d 304s, want 6 and none", full, notModified)
		}
		if a.mapper != b.mapper {
			t.Error("two clusters that serve the same discovery have mappers of their own")
		}
		if a.docs != [len(discoveryPaths)]*discoveryDoc{} {
			t.Error("a Set holds documents that no one can ask for")
		}
		if m, err := resolve(a.mapper.mapper, "deploy"); err != nil || m.Kind.Kind != "Deployment" {
			t.Errorf("deploy: %+v, %v", m, err)
		}
	})
	t.Run("legacy discovery", func(t *testing.T) {
		docs := map[string]any{
			"/api":  metav1.APIVersions{Versions: []string{"v1"}},
			"/apis": metav1.APIGroupList{Groups: []metav1.APIGroup{{Name: "apps", Versions: []metav1.GroupVersionForDiscovery{{GroupVersion: "apps/v1", Version: "v1"}}, PreferredVersion: metav1.GroupVersionForDiscovery{GroupVersion: "apps/v1", Version: "v1"}}}},
			"/api/v1": metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
				{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", ShortNames: []string{"po"}, Verbs: []string{"list", "watch"}},
			}},
			"/apis/apps/v1": metav1.APIResourceList{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
				{Name: "deployments", SingularName: "deployment", Namespaced: true, Kind: "Deployment", ShortNames: []string{"deploy"}, Verbs: []string{"list", "watch"}},
			}},
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			doc, ok := docs[r.URL.Path]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(doc)
		}))
		t.Cleanup(srv.Close)
		s := newDiscoveringSet(t, srv)
		for name, kind := range map[string]string{"po": "Pod", "deploy": "Deployment", "deployments.v1.apps": "Deployment"} {
			if m, err := resolve(s.mapper.mapper, name); err != nil || m.Kind.Kind != kind {
				t.Errorf("%s: %+v, %v", name, m, err)
			}
		}
	})
	t.Run("error", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no", http.StatusForbidden)
		}))
		t.Cleanup(srv.Close)
		s, err := New(Options{Cluster: "forbidden", Config: &rest.Config{Host: srv.URL}, Resources: []Resource{{Name: "pods"}}, Sink: nopSink{}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.discover(t.Context(), nil); !apierrors.IsForbidden(err) {
			t.Errorf("discovery of a server that forbids it: %v, want Forbidden", err)
		}
	})
}

func TestSharedETag(t *testing.T) {
	hash := fmt.Sprintf("%X", sha512.Sum512([]byte("{}")))
	for _, tc := range []struct {
		etag string
		want bool
	}{
		{etag: `"` + hash + `"`, want: true},
		{etag: `"0123456789abcdef0123456789abcdef"`, want: true},
		{etag: ""},
		{etag: `"1"`},
		{etag: `W/"` + hash + `"`},
		{etag: hash},
	} {
		if got := sharedETag(tc.etag); got != tc.want {
			t.Errorf("sharedETag(%s) = %v, want %v", tc.etag, got, tc.want)
		}
	}
}

// TestSharedMapperResolvesAsDeferredDiscovery: the names that a Set resolves through the
// shared mapper resolve as they did through the cached discovery and deferred mapper of
// each Set before, complete or partial (an aggregated API that does not answer).
func TestSharedMapperResolvesAsDeferredDiscovery(t *testing.T) {
	names := []string{
		"pods", "pod", "po", "pods.v1", "configmaps", "cm", "namespaces", "ns", "nodes",
		"services.v1.", "svc", "deploy", "deployments", "deployment", "deployments.apps",
		"deployments.v1.apps", "deploy.apps", "rs", "sts", "statefulsets.apps",
		"hpa", "horizontalpodautoscalers", "horizontalpodautoscalers.autoscaling",
		"horizontalpodautoscalers.v1.autoscaling", "horizontalpodautoscalers.v2.autoscaling",
		"events.events.k8s.io", "events.v1.events.k8s.io", "crd", "crds",
		"customresourcedefinitions.apiextensions.k8s.io", "netpol", "ing",
		"ingresses.networking.k8s.io", "leases.coordination.k8s.io", "pc", "csr",
		"widgets", "widget", "wd", "widgets.example.com", "widgets.v1beta1.example.com",
		"wd.example.com", "widgets.v2.example.com", "gadgets", "gadgets.example.com",
		"deployments.v1beta1.apps", "pods.apps",
	}
	for _, tc := range []struct {
		name  string
		stale []string
	}{
		{name: "complete"},
		{name: "partial", stale: []string{"example.com/v1", "networking.k8s.io/v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := discoveryServer(t, tc.stale, widgetGroup("example.com"))
			s := newDiscoveringSet(t, srv)
			dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			cached := memory.NewMemCacheClient(dc)
			old := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
			for _, name := range names {
				want, wantErr := resolve(old, name)
				got, err := resolve(s.mapper.mapper, name)
				if got != want || errors.Is(err, ErrResourceNotFound) != errors.Is(wantErr, ErrResourceNotFound) || (err == nil) != (wantErr == nil) {
					t.Errorf("%s: %+v, %v; the deferred mapper: %+v, %v", name, got, err, want, wantErr)
				}
			}
		})
	}
}

// TestSharedMapperPrefersTheFirstGroupOfAShortName: of two resources with one short
// name, the expander takes the one of the group first in discovery, whatever the order
// of aggregated discovery's resource lists.
func TestSharedMapperPrefersTheFirstGroupOfAShortName(t *testing.T) {
	s := newDiscoveringSet(t, discoveryServer(t, nil))
	for range 20 {
		m, err := resolve(s.mapper.mapper, "ev")
		if err != nil || m.Resource.Group != "" || m.Resource.Resource != "events" {
			t.Fatalf("ev: %+v, %v, want the core group's events", m, err)
		}
		before := s.mapper
		if _, err := s.discover(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		if s.mapper != before {
			t.Fatal("a second read of the same discovery gave another mapper")
		}
	}
}

// TestSharedMapperReleased: a mapper stays in the table while a Set holds it, and leaves
// it once none does, as do its entry by ETags and the documents it was read from; one
// replaced (a CRD installed) leaves it too.
func TestSharedMapperReleased(t *testing.T) {
	// A group of this test's own, so that no other test holds the same mapper.
	srv := discoveryServer(t, nil, widgetGroup("released.example.com"))
	a, b := newDiscoveringSet(t, srv), newDiscoveringSet(t, srv)
	d := a.mapper.view.digest()
	pair := etagPair{a.docs[0].etag, a.docs[1].etag}
	apis := docKey{path: 1, etag: pair[1]}
	// The mapper of d is held, or its documents, or the index of their ETags.
	held := func() bool {
		return mappers.entries.Has(d) || mappers.byETags.Has(pair) || docs.entries.Has(apis)
	}
	gone := func() bool {
		for range 100 {
			runtime.GC()
			if !held() {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	a = nil
	runtime.GC()
	runtime.GC()
	if !held() {
		t.Fatal("the mapper left the table while a Set holds it")
	}
	if _, err := resolve(b.mapper.mapper, "widgets.released.example.com"); err != nil {
		t.Fatal(err)
	}
	b = nil
	if !gone() {
		t.Fatal("the mapper stayed in the table once no Set held it")
	}

	// Asked for again, it is built again.
	c := newDiscoveringSet(t, srv)
	if !held() {
		t.Fatal("a mapper built again is not in the table")
	}
	// Its cluster's discovery changes: the mapper it held is released.
	other := discoveryServer(t, nil, widgetGroup("released.example.com"), widgetGroup("more.example.com"))
	c.discovery = newDiscoveringSet(t, other).discovery
	if _, err := c.discover(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if !gone() {
		t.Fatal("the mapper of a discovery that changed stayed in the table")
	}
	runtime.KeepAlive(c)
}

// TestSharedMapperConcurrentUse: Sets of many clusters read and resolve through one
// mapper at once (go test -race).
func TestSharedMapperConcurrentUse(t *testing.T) {
	srv := discoveryServer(t, nil, widgetGroup("example.com"))
	sets := make([]*Set, 8)
	for i := range sets {
		s, err := New(Options{Cluster: fmt.Sprint(i), Config: &rest.Config{Host: srv.URL}, Resources: []Resource{{Name: "pods"}}, Sink: nopSink{}})
		if err != nil {
			t.Fatal(err)
		}
		sets[i] = s
	}
	var wg sync.WaitGroup
	for _, s := range sets {
		wg.Go(func() {
			for range 5 {
				mapper, err := s.discover(t.Context(), nil)
				if err != nil {
					t.Error(err)
					return
				}
				for _, name := range []string{"po", "deploy", "wd", "widgets.v1beta1.example.com", "ev", "nothing"} {
					if _, err := resolve(mapper, name); err != nil && !errors.Is(err, ErrResourceNotFound) {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	for _, s := range sets[1:] {
		if s.mapper != sets[0].mapper {
			t.Fatal("Sets of one discovery read at once have mappers of their own")
		}
	}
}

// BenchmarkDiscoveryHeap reports the heap that the discovery of a cluster holds, for 200
// clusters that serve the same discovery: a cached discovery client and deferred mapper
// each (before), or a discovery client each and one shared mapper (now).
func BenchmarkDiscoveryHeap(b *testing.B) {
	const clusters = 200
	srv := discoveryServer(b, nil)
	cfg := &rest.Config{Host: srv.URL}
	measure := func(b *testing.B, discover func() any) {
		for b.Loop() {
			held := make([]any, clusters)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for i := range held {
				held[i] = discover()
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/clusters, "B/cluster")
			runtime.KeepAlive(held)
		}
	}
	b.Run("deferred", func(b *testing.B) {
		measure(b, func() any {
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			cached := memory.NewMemCacheClient(dc)
			mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
			if _, err := resolve(mapper, "pods"); err != nil {
				b.Fatal(err)
			}
			return mapper
		})
	})
	b.Run("shared", func(b *testing.B) {
		measure(b, func() any {
			dc, err := discovery.NewDiscoveryClientForConfig(cfg)
			if err != nil {
				b.Fatal(err)
			}
			s := &Set{discovery: dc}
			mapper, err := s.discover(b.Context(), nil)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := resolve(mapper, "pods"); err != nil {
				b.Fatal(err)
			}
			return s
		})
	})
}

// BenchmarkDiscoveryCPU reports the cost of a reconcile's discovery of one cluster, in a
// fleet of 200 clusters that serve the same discovery, once each has read it already:
// the time and the CPU time of the process per discovery (client and test server, which share the process and whose
// part, writing a document or a 304, is small), its allocations, and the share of the
// answers that were documents rather than 304s.
func BenchmarkDiscoveryCPU(b *testing.B) {
	const clusters = 200
	f := newFakeDiscovery(b, nil)
	sets := make([]*Set, clusters)
	for i := range sets {
		s, err := New(Options{Cluster: fmt.Sprint(i), Config: &rest.Config{Host: f.URL}, Resources: []Resource{{Name: "pods"}}, Sink: nopSink{}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.discover(b.Context(), nil); err != nil {
			b.Fatal(err)
		}
		sets[i] = s
	}
	full0, notModified0 := f.counts()
	cpu0 := processCPU(b)
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range sets {
			if _, err := s.discover(b.Context(), nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	full, notModified := f.counts()
	full, notModified = full-full0, notModified-notModified0
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*clusters), "ns/discovery")
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N*clusters), "cpu-ns/discovery")
	b.ReportMetric(float64(full)/float64(full+notModified), "full/answer")
}

// processCPU returns the user and system CPU time that the process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
