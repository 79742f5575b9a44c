package server

import (
	"testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/search"
)

// TestSearchIndexBuiltOncePrimed: the watch cache leaves the search index alone while it
// takes the fleet's replay, builds it from its view once primed, off the path to
// readiness, and then keeps it with every event, so that a search still sees what a
// list sees.
func TestSearchIndexBuiltOncePrimed(t *testing.T) {
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
	select {
	case <-wc.indexed:
		t.Fatal("the index was built before the view was primed")
	default:
	}
	if n := total(); n != 0 {
		t.Fatalf("before the view is primed, the index has %d objects, want 0", n)
	}

	wc.prime()
	wc.buildIndex()
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
