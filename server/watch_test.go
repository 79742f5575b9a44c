package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/persist"
)

func TestWatchInitialStateThenChanges(t *testing.T) {
	cursorForms(t, testWatchInitialStateThenChanges)
}

func testWatchInitialStateThenChanges(t *testing.T, opts func(*Options)) {
	f := newFixture(t, opts)
	w := f.watch(clusterPath(prod) + "/api/v1/pods?watch=true")
	var got []string
	var rvs []string
	for range 3 {
		e := w.next()
		got = append(got, e.ref())
		rvs = append(rvs, e.Object.GetResourceVersion())
	}
	want := []string{"ADDED prod|default/web-1", "ADDED prod|default/web-2", "ADDED prod|kube-system/dns-1"}
	if !slices.Equal(got, want) {
		t.Errorf("initial events %q, want %q", got, want)
	}
	if rvs[0] != rvs[2] {
		t.Errorf("initial events at different resourceVersions %q", rvs)
	}

	updated := pod("default", "web-1", "110", web)
	_ = unstructured.SetNestedField(updated.Object, "Pending", "status", "phase")
	f.apply(prod, podsGVR, updated)
	f.apply(prod, podsGVR, pod("default", "web-5", "111", web))
	f.remove(prod, podsGVR, pod("default", "web-2", "112", web))
	f.apply(staging, podsGVR, pod("default", "web-6", "210", web)) // another cluster

	e := w.next()
	if e.ref() != "MODIFIED prod|default/web-1" {
		t.Fatalf("got %s", e.ref())
	}
	if phase, _, _ := unstructured.NestedString(e.Object.Object, "status", "phase"); phase != "Pending" {
		t.Errorf("MODIFIED carries phase %q", phase)
	}
	if own := e.Object.GetAnnotations()[ResourceVersionAnnotation]; own != "110" {
		t.Errorf("object's own resourceVersion %q, want 110", own)
	}
	c, err := parseCursor(e.Object.GetResourceVersion())
	if err != nil || !c.short && (c.positions[prod] != (position{rv: 110}) || len(c.positions) != 1) || c.short && c.resource != "pods.v1" {
		t.Errorf("event resourceVersion %q = %#v, %v; want a cursor of prod at 110, or a short one of pods", e.Object.GetResourceVersion(), c, err)
	}
	if e := w.next(); e.ref() != "ADDED prod|default/web-5" {
		t.Errorf("got %s", e.ref())
	}
	if e := w.next(); e.ref() != "DELETED prod|default/web-2" {
		t.Errorf("got %s", e.ref())
	}
	w.none(200 * time.Millisecond)
}

func TestWatchFraming(t *testing.T) {
	f := newFixture(t, nil)
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.http.URL+clusterPath(edge)+"/api/v1/pods?watch=1&timeoutSeconds=1", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.Header.Get("Content-Type") != "application/json" {
		t.Errorf("Content-Type %q", res.Header.Get("Content-Type"))
	}
	start := time.Now()
	dec := json.NewDecoder(res.Body)
	var events []metav1.WatchEvent
	for {
		var e metav1.WatchEvent
		if err := dec.Decode(&e); err != nil {
			break
		}
		events = append(events, e)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 5*time.Second {
		t.Errorf("watch with timeoutSeconds=1 lasted %v", d)
	}
	if len(events) != 1 || events[0].Type != "ADDED" {
		t.Fatalf("events %+v", events)
	}
	var pod metav1.PartialObjectMetadata
	if err := json.Unmarshal(events[0].Object.Raw, &pod); err != nil || pod.Kind != "Pod" || pod.Name != "web-3" {
		t.Errorf("event object %s: %v", events[0].Object.Raw, err)
	}
}

func TestWatchBookmarks(t *testing.T) {
	cursorForms(t, testWatchBookmarks)
}

func testWatchBookmarks(t *testing.T, opts func(*Options)) {
	f := newFixture(t, func(o *Options) {
		opts(o)
		o.BookmarkInterval = 30 * time.Millisecond
	})
	w := f.watch(clusterPath(allClusters) + "/api/v1/pods?watch=1&allowWatchBookmarks=true&labelSelector=app%3Ddns")
	if e := w.next(); e.ref() != "ADDED prod|kube-system/dns-1" {
		t.Fatalf("got %s", e.ref())
	}
	b := w.next()
	if b.Type != "BOOKMARK" || b.Object.GetKind() != "Pod" || b.Object.GetAPIVersion() != "v1" {
		t.Fatalf("got %s %v", b.Type, b.Object.Object)
	}
	first, err := parseCursor(b.Object.GetResourceVersion())
	if err != nil || !first.short && len(first.positions) != 3 {
		t.Fatalf("bookmark resourceVersion %#v, %v", first, err)
	}
	// A change the selector does not match moves the bookmarks forward.
	f.apply(staging, podsGVR, pod("default", "api-1", "250", api))
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := w.next()
		if b.Type != "BOOKMARK" {
			t.Fatalf("got %s", b.ref())
		}
		c, _ := parseCursor(b.Object.GetResourceVersion())
		if c.short && c.seq == first.seq+1 || !c.short && c.positions[staging] == (position{rv: 250}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no bookmark after the change")
		}
	}
}

// TestWatchResume resumes watches from the resourceVersion of a list, of an event, and of
// a bookmark: every change in between arrives, once.
func TestWatchResume(t *testing.T) { cursorForms(t, testWatchResume) }

func testWatchResume(t *testing.T, opts func(*Options)) {
	f := newFixture(t, opts)
	pods := clusterPath(allClusters) + "/api/v1/pods"
	var l itemList
	f.getOK(pods, &l)

	f.apply(prod, podsGVR, pod("default", "a", "120", web))
	f.apply(staging, podsGVR, pod("default", "b", "220", web))
	f.remove(edge, podsGVR, pod("default", "web-3", "320", web))
	f.apply(prod, podsGVR, pod("default", "a", "121", api))

	want := []string{"ADDED prod|default/a", "ADDED staging|default/b", "DELETED " + edge + "|default/web-3", "MODIFIED prod|default/a"}
	w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
	var got []string
	var last string
	for range want {
		e := w.next()
		got = append(got, e.ref())
		last = e.Object.GetResourceVersion()
		if e.ref() == want[1] {
			// Stop after the second event; resume from it later.
			w.stop()
			break
		}
	}
	f.apply(edge, podsGVR, pod("default", "c", "330", nil))
	want = append(want, "ADDED "+edge+"|default/c")

	w = f.watch(pods + "?watch=1&allowWatchBookmarks=1&resourceVersion=" + url.QueryEscape(last))
	for len(got) < len(want) {
		got = append(got, w.nextNot("BOOKMARK").ref())
	}
	if !slices.Equal(got, want) {
		t.Errorf("events %q,\nwant %q", got, want)
	}
	w.none(100 * time.Millisecond)

	// From a bookmark: nothing again, then only what is new.
	var bookmark string
	for bookmark == "" {
		if e := w.next(); e.Type == "BOOKMARK" {
			bookmark = e.Object.GetResourceVersion()
		}
	}
	w.stop()
	f.apply(prod, podsGVR, pod("default", "d", "130", nil))
	w = f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(bookmark))
	if e := w.next(); e.ref() != "ADDED prod|default/d" {
		t.Errorf("after bookmark: %s", e.ref())
	}
	w.none(100 * time.Millisecond)
}

// TestWatchResumeOutOfOrder resumes inside a relist, whose objects do not arrive in
// resourceVersion order, and inside deletions detected by a relist, which carry old
// resourceVersions.
func TestWatchResumeOutOfOrder(t *testing.T) { cursorForms(t, testWatchResumeOutOfOrder) }

func testWatchResumeOutOfOrder(t *testing.T, opts func(*Options)) {
	f := newFixture(t, opts)
	pods := clusterPath(prod) + "/api/v1/pods"
	w := f.watch(pods + "?watch=1&resourceVersion=0")
	for range 3 {
		w.next()
	}
	f.apply(prod, podsGVR, pod("default", "r-1", "500", nil))
	f.apply(prod, podsGVR, pod("default", "r-2", "450", nil)) // listed after r-1, older
	if err := f.fleet.ClusterStore(prod, podsGVR).Delete(pod("default", "web-2", "102", web), true); err != nil {
		t.Fatal(err)
	}
	e1 := w.next()
	w.stop()
	w = f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(e1.Object.GetResourceVersion()))
	got := []string{e1.ref(), w.next().ref(), w.next().ref()}
	want := []string{"ADDED prod|default/r-1", "ADDED prod|default/r-2", "DELETED prod|default/web-2"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	w.none(100 * time.Millisecond)
}

// TestWatchEveryChangeBehindABacklog checks that a watch has every change, in order,
// when the server's view falls behind the fleet by more than the fleet's MaxBacklog,
// beyond which a handler's events are coalesced: changes of objects that have one
// waiting already, and an object added and deleted while the view waits.
func TestWatchEveryChangeBehindABacklog(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.HistorySize = 2 * aggregate.DefaultMaxBacklog })
	pods := clusterPath(prod) + "/api/v1/pods"
	var l itemList
	f.getOK(pods, &l)
	// The view's handler waits at the search index's lock after its next event.
	f.server.cache.indexMu.Lock()
	var want []string
	rv := 1000
	change := func(typ, name string) {
		rv++
		if typ == "DELETED" {
			f.remove(prod, podsGVR, pod("default", name, fmt.Sprint(rv), web))
		} else {
			f.apply(prod, podsGVR, pod("default", name, fmt.Sprint(rv), web))
		}
		want = append(want, fmt.Sprintf("%s prod|default/%s@%d", typ, name, rv))
	}
	for i := range aggregate.DefaultMaxBacklog + 100 {
		change("MODIFIED", []string{"web-1", "web-2"}[i%2])
		if i == aggregate.DefaultMaxBacklog/2 {
			change("ADDED", "brief")
			change("DELETED", "brief")
		}
	}
	f.server.cache.indexMu.Unlock()
	f.sync()
	if st := f.server.cache.reg.Load().Stats(); st.Coalesced != 0 {
		t.Errorf("the view's events were coalesced: %+v", st)
	}

	w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
	for k, wt := range want {
		e := w.next()
		got := e.ref() + "@" + e.Object.GetAnnotations()[ResourceVersionAnnotation]
		if got != wt {
			t.Fatalf("change %d of %d: %s, want %s", k+1, len(want), got, wt)
		}
	}
	w.none(100 * time.Millisecond)
}

func TestWatchGone(t *testing.T) { cursorForms(t, testWatchGone) }

func testWatchGone(t *testing.T, opts func(*Options)) {
	f := newFixture(t, func(o *Options) {
		opts(o)
		o.HistorySize = 4
	})
	pods := clusterPath(allClusters) + "/api/v1/pods"
	var l itemList
	f.getOK(pods, &l)
	for i := range 6 {
		f.apply(prod, podsGVR, pod("default", fmt.Sprint("n-", i), fmt.Sprint(600+i), nil))
	}
	f.sync()
	st := f.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)).status(t, http.StatusGone)
	if st.Reason != metav1.StatusReasonExpired {
		t.Errorf("Status %+v", st)
	}
	// Other clusters lost nothing: a watch of staging from the same cursor works.
	w := f.watch(clusterPath(staging) + "/api/v1/pods?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
	f.apply(staging, podsGVR, pod("default", "s", "260", nil))
	if e := w.next(); e.ref() != "ADDED staging|default/s" {
		t.Errorf("got %s", e.ref())
	}
	for _, rv := range []string{cursor{epoch: "other"}.String(), "101"} {
		st := f.get(pods+"?watch=1&resourceVersion="+rv).status(t, http.StatusGone)
		if st.Reason != metav1.StatusReasonExpired {
			t.Errorf("resourceVersion %s: Status %+v", rv, st)
		}
	}
}

func TestWatchSelectorTransitions(t *testing.T) {
	f := newFixture(t, nil)
	w := f.watch(clusterPath(prod) + "/api/v1/namespaces/default/pods?watch=1&labelSelector=app%3Dweb")
	w.next()
	w.next()
	f.apply(prod, podsGVR, pod("default", "web-1", "140", api)) // leaves the selection
	f.apply(prod, podsGVR, pod("default", "web-1", "141", api)) // outside: nothing
	f.apply(prod, podsGVR, pod("kube-system", "x", "142", web)) // other namespace
	f.apply(prod, podsGVR, pod("default", "web-1", "143", web)) // enters again
	f.apply(prod, podsGVR, pod("default", "web-1", "144", web))
	f.remove(prod, podsGVR, pod("default", "web-1", "145", web))
	var got []string
	for range 4 {
		got = append(got, w.next().ref())
	}
	want := []string{"DELETED prod|default/web-1", "ADDED prod|default/web-1", "MODIFIED prod|default/web-1", "DELETED prod|default/web-1"}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
	w.none(100 * time.Millisecond)
}

func TestWatchOneObject(t *testing.T) {
	f := newFixture(t, nil)
	for i, path := range []string{
		clusterPath(allClusters) + "/api/v1/namespaces/default/pods?watch=1&fieldSelector=metadata.name%3Dweb-2",
		clusterPath(prod) + "/api/v1/namespaces/default/pods/web-2?watch=1",
	} {
		w := f.watch(path)
		if e := w.next(); e.ref() != "ADDED prod|default/web-2" {
			t.Errorf("%s: %s", path, e.ref())
		}
		f.apply(prod, podsGVR, pod("default", "web-1", fmt.Sprint(150+2*i), nil))
		f.apply(prod, podsGVR, pod("default", "web-2", fmt.Sprint(151+2*i), nil))
		if e := w.next(); e.ref() != "MODIFIED prod|default/web-2" {
			t.Errorf("%s: %s", path, e.ref())
		}
		w.stop()
	}
}

// TestWatchList is the streaming list of client-go informers: the state, a bookmark that
// marks its end, then changes.
func TestWatchList(t *testing.T) {
	f := newFixture(t, nil)
	w := f.watch(clusterPath(staging) + "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
	got := []string{w.next().ref(), w.next().ref()}
	if want := []string{"ADDED staging|default/api-1", "ADDED staging|default/web-1"}; !slices.Equal(got, want) {
		t.Errorf("initial events %q, want %q", got, want)
	}
	b := w.next()
	if b.Type != "BOOKMARK" || b.Object.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("got %s %v", b.Type, b.Object.Object)
	}
	f.apply(staging, podsGVR, pod("default", "new", "290", nil))
	if e := w.next(); e.ref() != "ADDED staging|default/new" {
		t.Errorf("got %s", e.ref())
	}
	// From now on: no initial events.
	w = f.watch(clusterPath(staging) + "/api/v1/pods?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan")
	w.none(100 * time.Millisecond)
}

func TestWatchTable(t *testing.T) {
	f := newFixture(t, nil)
	w := f.watch(clusterPath(prod)+"/api/v1/namespaces/default/pods?watch=1", "Accept", acceptTable)
	var tables []decodedTable
	for range 2 {
		e := w.next()
		var tab decodedTable
		if err := json.Unmarshal(e.Raw, &tab); err != nil || tab.Kind != "Table" || len(tab.Rows) != 1 {
			t.Fatalf("event %s: %v", e.Raw, err)
		}
		tables = append(tables, tab)
	}
	if tables[0].columns()[0] != "Cluster" || len(tables[1].ColumnDefinitions) != 0 {
		t.Errorf("column definitions %v then %v; want them in the first event only", tables[0].columns(), tables[1].ColumnDefinitions)
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(tables[1].Rows[0].Object, &obj); err != nil || obj.Annotations[ClusterAnnotation] != prod {
		t.Errorf("row object %s", tables[1].Rows[0].Object)
	}
	if _, err := parseCursor(obj.ResourceVersion); err != nil {
		t.Errorf("row object resourceVersion %q: %v", obj.ResourceVersion, err)
	}
}

// TestWatchOutlivesServerTimeouts checks that neither the server's ReadTimeout nor its
// WriteTimeout ends a watch that waits longer for its next event.
func TestWatchOutlivesServerTimeouts(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.WriteTimeout = 200 * time.Millisecond
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- f.server.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	f.http.URL = "http://" + ln.Addr().String()
	w := f.watch(clusterPath(edge) + "/api/v1/pods?watch=1")
	w.next()
	time.Sleep(500 * time.Millisecond)
	f.apply(edge, podsGVR, pod("default", "late", "340", nil))
	if e := w.next(); e.ref() != "ADDED "+edge+"|default/late" {
		t.Errorf("got %s", e.ref())
	}
}

func TestWatchEndsOnShutdown(t *testing.T) {
	f := newFixture(t, nil)
	w := f.watch(clusterPath(prod) + "/api/v1/pods?watch=1")
	w.next()
	f.server.stop()
	if !w.ended(5 * time.Second) {
		t.Errorf("watch still open after shutdown")
	}
}

// TestInformer runs a client-go dynamic informer against one cluster, as a controller
// would: it syncs with a streaming list, follows changes, and resumes its watch each time
// the server ends it, without listing again.
func TestInformer(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.WatchTimeout = 300 * time.Millisecond })
	dyn := dynamic.NewForConfigOrDie(&rest.Config{Host: f.http.URL + clusterPath(staging)})
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := factory.ForResource(podsGVR).Informer()
	ctx, cancel := context.WithCancel(f.ctx)
	defer factory.Shutdown()
	defer cancel()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	if got := storeKeys(inf.GetStore()); !slices.Equal(got, []string{staging + "|default/api-1@202", staging + "|default/web-1@201"}) {
		t.Fatalf("informer holds %q", got)
	}
	want := changeAcrossWatchTimeouts(f)
	waitForKeys(t, inf.GetStore(), filterPrefix(want, staging+"|"))
	checkNoRelist(t, f, 0)
}

// TestReflectorEveryCluster runs a client-go reflector over every cluster. Objects of
// different clusters can share a namespace and name, so its store is keyed by the
// cluster annotation too, as any client of /clusters/*/ must do; client-go's streaming
// list would merge them, so the server refuses it there, and the reflector lists.
func TestReflectorEveryCluster(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.WatchTimeout = 300 * time.Millisecond })
	dyn := dynamic.NewForConfigOrDie(&rest.Config{Host: f.http.URL + clusterPath(allClusters)})
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return dyn.Resource(podsGVR).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return dyn.Resource(podsGVR).Watch(ctx, o)
		},
	}
	store := cache.NewStore(func(obj any) (string, error) {
		u := obj.(*unstructured.Unstructured)
		return u.GetAnnotations()[ClusterAnnotation] + "|" + u.GetNamespace() + "/" + u.GetName(), nil
	})
	r := cache.NewReflectorWithOptions(lw, &unstructured.Unstructured{}, store, cache.ReflectorOptions{})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.RunWithContext(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitForKeys(t, store, []string{
		edge + "|default/web-3@301", prod + "|default/web-1@101", prod + "|default/web-2@102", prod + "|kube-system/dns-1@103",
		staging + "|default/api-1@202", staging + "|default/web-1@201",
	})
	waitForKeys(t, store, changeAcrossWatchTimeouts(f))
	// The streaming list was refused, and the reflector listed instead, once.
	checkNoRelist(t, f, 1)
}

// changeAcrossWatchTimeouts changes pods over several watch timeouts of the server, and
// returns the pods there are then, as storeKeys lists them.
func changeAcrossWatchTimeouts(f *fixture) []string {
	for i := range 5 {
		f.apply(prod, podsGVR, pod("default", "web-1", fmt.Sprint(700+i), web))
		f.apply(staging, podsGVR, pod("default", fmt.Sprint("s-", i), fmt.Sprint(700+i), nil))
		time.Sleep(150 * time.Millisecond)
	}
	f.remove(edge, podsGVR, pod("default", "web-3", "800", web))
	f.remove(staging, podsGVR, pod("default", "s-0", "800", web))
	return []string{
		prod + "|default/web-1@704", prod + "|default/web-2@102", prod + "|kube-system/dns-1@103",
		staging + "|default/api-1@202", staging + "|default/s-1@701", staging + "|default/s-2@702",
		staging + "|default/s-3@703", staging + "|default/s-4@704", staging + "|default/web-1@201",
	}
}

// storeKeys lists the objects of a client-go store as cluster|namespace/name@rv, with
// the resourceVersion of each object in its cluster.
func storeKeys(s cache.Store) []string {
	var out []string
	for _, o := range s.List() {
		u := o.(*unstructured.Unstructured)
		rv, ok := u.GetAnnotations()[ResourceVersionAnnotation] // objects of watch events
		if !ok {
			rv = u.GetResourceVersion() // objects of lists
		}
		out = append(out, u.GetAnnotations()[ClusterAnnotation]+"|"+u.GetNamespace()+"/"+u.GetName()+"@"+rv)
	}
	slices.Sort(out)
	return out
}

func waitForKeys(t *testing.T, s cache.Store, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(storeKeys(s), want) {
		if time.Now().After(deadline) {
			t.Fatalf("store holds %q,\nwant %q", storeKeys(s), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func filterPrefix(ss []string, prefix string) []string {
	var out []string
	for _, s := range ss {
		if strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// checkNoRelist checks that watches were resumed: some ended, and no more than lists
// lists, and no 410, followed.
func checkNoRelist(t *testing.T, f *fixture, lists int) {
	t.Helper()
	body := f.get("/metrics").body
	if !containsMetric(body, `fleetwatch_http_requests_total{code="200",resource="pods",verb="watch"}`, func(v float64) bool { return v >= 2 }) {
		t.Errorf("fewer than 2 watches ended: the server's watch timeouts did not happen:\n%s", body)
	}
	listed := func(v float64) bool { return v > float64(lists) }
	if containsMetric(body, `fleetwatch_http_requests_total{code="200",resource="pods",verb="list"}`, listed) ||
		containsMetric(body, `fleetwatch_http_requests_total{code="410",resource="pods",verb="watch"}`, func(float64) bool { return true }) {
		t.Errorf("the client listed more than %d times or got 410:\n%s", lists, body)
	}
}

// TestWatchEventFrame: writeEvent writes an event as json.Marshal writes its
// metav1.WatchEvent, for objects of a plain fleet and of a compact one (written from
// their encoding), with strings that JSON escapes, and for an ERROR's Status.
func TestWatchEventFrame(t *testing.T) {
	p := pod("default", "web-1", "101", map[string]string{"app": "<web> & \u2028 \"q\""})
	p.SetAnnotations(map[string]string{"note": "a\\b\tc\xff"})
	encoded, err := persist.Codec{}.Encode(p)
	if err != nil {
		t.Fatal(err)
	}
	rv := cursor{epoch: "e", positions: map[string]position{"a<b>": {rv: 3}}}.String()
	for _, tc := range []struct {
		name string
		obj  any
	}{
		{"plain", served(cborTestResource, object{cluster: prod, obj: p}, rv)},
		{"compact", served(cborTestResource, object{cluster: prod, obj: newCompactObject(podsGVR.GroupResource(), p, encoded), codec: persist.Codec{}}, rv)},
		{"partial", partial(object{cluster: prod, obj: p}, rv)},
		{"status", statusOf(httptest.NewRequest(http.MethodGet, "/x", nil), expired("too old <&>"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			ws := &watchStream{w: bufio.NewWriter(&out)}
			if err := ws.writeEvent(watch.Modified, tc.obj); err != nil {
				t.Fatal(err)
			}
			_ = ws.w.Flush()
			raw, err := json.Marshal(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(metav1.WatchEvent{Type: string(watch.Modified), Object: runtime.RawExtension{Raw: raw}})
			if err != nil {
				t.Fatal(err)
			}
			if got := out.String(); got != string(want)+"\n" {
				t.Errorf("writeEvent wrote\n%s\nwant\n%s", got, want)
			}
		})
	}
}
