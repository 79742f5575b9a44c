package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/search"
)

// TestSearchIndexBuiltOnceReady: the watch cache leaves the search index alone while it
// takes the fleet's replay, also once primed (a warm start's replay catches up again and
// again while the snapshot loads), builds it from its view once the view has caught up
// with the ready fleet, off the path to readiness, and then keeps it with every event, so that a search still sees
// what a list sees.
func TestSearchIndexBuiltOnceReady(t *testing.T) {
	defer func(d time.Duration) { indexPoll = d }(indexPoll)
	indexPoll = 20 * time.Millisecond
	wc := newWatchCache(100, nil, nil)
	total := func() int { return wc.index.Search(search.Request{}).Total }
	for _, e := range []aggregate.Event{
		{Type: aggregate.Added, Cluster: prod, Resource: podsGVR, Object: pod("default", "web-1", "101", web)},
		{Type: aggregate.Added, Cluster: prod, Resource: podsGVR, Object: pod("default", "web-2", "102", web)},
		{Type: aggregate.Added, Cluster: staging, Resource: podsGVR, Object: pod("default", "api-1", "201", api)},
		{Type: aggregate.Deleted, Cluster: prod, Resource: podsGVR, Object: pod("default", "web-2", "102", web)},
	} {
		// No registration: the view is never primed by the events themselves.
		wc.OnEvent(e)
	}
	// caughtUp is nil until the fleet is ready, then up, closed once the view has
	// caught up with the ready fleet.
	var ready atomic.Bool
	up := make(chan struct{})
	caughtUp := func() <-chan struct{} {
		if !ready.Load() {
			return nil
		}
		return up
	}
	stop := make(chan struct{})
	defer close(stop)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wc.indexWhenReady(nil, caughtUp, stop)
	}()
	notBuilt := func(when string) {
		t.Helper()
		time.Sleep(3 * indexPoll)
		select {
		case <-wc.indexed:
			t.Fatalf("the index was built %s", when)
		default:
		}
		if n := total(); n != 0 {
			t.Fatalf("%s, the index has %d objects, want 0", when, n)
		}
	}
	notBuilt("before the view was primed")
	wc.prime()
	notBuilt("once the view was primed but the fleet not ready")

	ready.Store(true)
	notBuilt("once the fleet was ready but before the view caught up with it")
	close(up)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the index was not built once the fleet was ready")
	}
	<-wc.indexed
	if n := total(); n != 2 {
		t.Fatalf("built from the view, the index has %d objects, want 2", n)
	}
	wc.buildIndex() // a second call builds nothing more
	if n := total(); n != 2 {
		t.Fatalf("after a second build, the index has %d objects, want 2", n)
	}

	wc.OnEvent(aggregate.Event{Type: aggregate.Added, Cluster: edge, Resource: podsGVR, Object: pod("default", "web-3", "301", web)})
	wc.OnEvent(aggregate.Event{Type: aggregate.Deleted, Cluster: staging, Resource: podsGVR, Object: pod("default", "api-1", "201", api)})
	res := wc.index.Search(search.Request{})
	if res.Total != 2 || res.Clusters[prod] != 1 || res.Clusters[edge] != 1 {
		t.Errorf("after the build, events give %d objects by cluster %v, want web-1 of %s and web-3 of %s", res.Total, res.Clusters, prod, edge)
	}
}

// TestSearchBeforeReady: a search that comes before the fleet is ready builds the index
// from the primed view, rather than waiting for readiness or answering 503, and the
// index keeps up with the events after it.
func TestSearchBeforeReady(t *testing.T) {
	defer func(d time.Duration) { indexPoll = d }(indexPoll)
	indexPoll = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fleet := aggregate.New(aggregate.Options{Codec: testCodec()})
	src := &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}}
	src.setStatus(clusterStatus(prod, aggregate.PhaseSyncing, false))
	store := fleet.ClusterStore(prod, podsGVR)
	if err := store.Apply(pod("default", "web-1", "101", web), true); err != nil {
		t.Fatal(err)
	}
	go func() { _ = fleet.Start(ctx) }()
	s, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	search := func(q string) SearchResult {
		t.Helper()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, searchPath+"?q="+q, nil)
		req.Host = "localhost"
		s.Handler().ServeHTTP(rec, req)
		var res SearchResult
		if rec.Code != http.StatusOK {
			t.Fatalf("search %q: %d %s", q, rec.Code, rec.Body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	<-s.cache.primed
	time.Sleep(3 * indexPoll)
	select {
	case <-s.cache.indexed:
		t.Fatal("the index was built from the replay before the fleet was ready and before a search")
	default:
	}
	if res := search("web"); res.Total != 1 {
		t.Fatalf("a search before ready found %q, want web-1 of %s", searchRefs(res), prod)
	}
	if err := store.Apply(pod("default", "web-2", "102", web), false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for search("web-2").Total != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("after a change, a search found %q, want web-2 of %s", searchRefs(search("web-2")), prod)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadyzWaitsForTheCacheToHoldTheReadyFleet: the server's view primes whenever it
// catches up with the fleet, which a warm start's does at once, before the snapshot has
// loaded anything. /readyz passes only once the view holds what the fleet held when it
// was first ready, so that a list right after it misses nothing.
func TestReadyzWaitsForTheCacheToHoldTheReadyFleet(t *testing.T) {
	fleet := aggregate.New(aggregate.Options{Codec: testCodec()})
	src := &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}}
	src.setStatus(clusterStatus(prod, aggregate.PhaseSynced, false))
	s, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Host = "localhost"
		s.Handler().ServeHTTP(rec, req)
		return rec
	}
	<-s.cache.primed // an empty fleet: primed at once, as at a warm start
	// The fleet is loaded and ready, and its events are queued for the server's view,
	// which has not been delivered them yet (the fleet is not started).
	store := fleet.ClusterStore(prod, podsGVR)
	for _, name := range []string{"web-1", "web-2"} {
		if err := store.Apply(pod("default", name, "101", web), true); err != nil {
			t.Fatal(err)
		}
	}
	store.MarkSynced()
	src.setReady(true)
	if rec := get("/readyz?verbose"); rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "[-]cache failed") {
		t.Fatalf("readyz before the view holds the ready fleet: %d %s", rec.Code, rec.Body)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = fleet.Start(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for get("/readyz").Code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("readyz once the view caught up: %s", get("/readyz?verbose").Body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var list struct{ Items []json.RawMessage }
	if err := json.Unmarshal(get("/clusters/prod/api/v1/pods").Body.Bytes(), &list); err != nil || len(list.Items) != 2 {
		t.Errorf("a list once ready has %d pods (%v), want 2", len(list.Items), err)
	}
}

// TestSearchIndexBuiltOnceSynced: with the Manager's hold on the fleet, the registration's
// sync tells when the view holds the ready fleet, without asking the source.
func TestSearchIndexBuiltOnceSynced(t *testing.T) {
	wc := newWatchCache(100, nil, nil)
	wc.OnEvent(aggregate.Event{Type: aggregate.Added, Cluster: prod, Resource: podsGVR, Object: pod("default", "web-1", "101", web)})
	wc.prime()
	synced := make(chan struct{})
	close(synced)
	done := make(chan struct{})
	go func() {
		defer close(done)
		wc.indexWhenReady(synced, func() <-chan struct{} { return nil }, nil)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the index was not built once the registration synced")
	}
	if n := wc.index.Search(search.Request{}).Total; n != 1 {
		t.Errorf("the index has %d objects, want 1", n)
	}
}
