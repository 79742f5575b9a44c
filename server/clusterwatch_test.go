package server

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

const clustersPath = "/apis/fleetwatch.io/v1alpha1/clusters"

// clusterEvent decodes a watch event of a Cluster.
func clusterEvent(t *testing.T, e watchEvent) (string, Cluster) {
	t.Helper()
	var c Cluster
	if err := json.Unmarshal(e.Raw, &c); err != nil {
		t.Fatalf("%s event: %v\n%s", e.Type, err, e.Raw)
	}
	return e.Type, c
}

// nextCluster returns the next event that is not a BOOKMARK, as type, name and phase.
func nextCluster(t *testing.T, w *watcher) (string, Cluster) {
	t.Helper()
	return clusterEvent(t, w.nextNot("BOOKMARK"))
}

func (f *fakeSource) removeStatus(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.statuses, name)
}

// TestClustersWatch: clusters.fleetwatch.io has resourceVersions, and its watches send
// the changes of the clusters' statuses after them, as kubectl get -w expects.
func TestClustersWatch(t *testing.T) {
	f := newFixture(t, nil)
	var l ClusterList
	f.getOK(clustersPath, &l)
	if l.ResourceVersion == "" || len(l.Items) != 3 {
		t.Fatalf("list: %s", mustJSON(l))
	}
	for _, c := range l.Items {
		if c.ResourceVersion == "" || c.ResourceVersion > l.ResourceVersion {
			t.Errorf("%s: resourceVersion %q, the list's %q", c.Name, c.ResourceVersion, l.ResourceVersion)
		}
	}
	// Unchanged statuses keep their resourceVersions.
	var again ClusterList
	f.getOK(clustersPath, &again)
	if again.ResourceVersion != l.ResourceVersion || again.Items[1].ResourceVersion != l.Items[1].ResourceVersion {
		t.Errorf("a second list: %q (%q), the first %q (%q)", again.ResourceVersion, again.Items[1].ResourceVersion, l.ResourceVersion, l.Items[1].ResourceVersion)
	}

	fromList := f.watch(clustersPath + "?watch=true&resourceVersion=" + url.QueryEscape(l.ResourceVersion))
	fromNow := f.watch(clustersPath + "?watch=true")
	for _, want := range []string{edge, prod, staging} {
		if typ, c := nextCluster(t, fromNow); typ != "ADDED" || c.Name != want || c.Status.Phase != "Synced" {
			t.Fatalf("initial event %s %s %s, want ADDED %s", typ, c.Name, c.Status.Phase, want)
		}
	}
	fromList.none(300 * time.Millisecond)

	f.src.setStatus(clusterStatus(prod, aggregate.PhaseUnreachable, true))
	var unreachableRV string
	for _, w := range []*watcher{fromList, fromNow} {
		typ, c := nextCluster(t, w)
		if typ != "MODIFIED" || c.Name != prod || c.Status.Phase != "Unreachable" || c.ResourceVersion <= l.ResourceVersion {
			t.Fatalf("event %s %s %s %s after the list's %s", typ, c.Name, c.Status.Phase, c.ResourceVersion, l.ResourceVersion)
		}
		unreachableRV = c.ResourceVersion
	}
	f.src.setStatus(clusterStatus("new", aggregate.PhaseConnecting, false))
	if typ, c := nextCluster(t, fromList); typ != "ADDED" || c.Name != "new" || c.Status.Phase != "Connecting" {
		t.Fatalf("event %s %s %s, want ADDED new", typ, c.Name, c.Status.Phase)
	}
	f.src.removeStatus(edge)
	if typ, c := nextCluster(t, fromList); typ != "DELETED" || c.Name != edge {
		t.Fatalf("event %s %s, want DELETED %s", typ, c.Name, edge)
	}

	// A watch resumed from an event sends what came after it.
	resumed := f.watch(clustersPath + "?watch=true&resourceVersion=" + url.QueryEscape(unreachableRV))
	if typ, c := nextCluster(t, resumed); typ != "ADDED" || c.Name != "new" {
		t.Fatalf("resumed: %s %s, want ADDED new", typ, c.Name)
	}
	if typ, c := nextCluster(t, resumed); typ != "DELETED" || c.Name != edge {
		t.Fatalf("resumed: %s %s, want DELETED %s", typ, c.Name, edge)
	}

	t.Run("one cluster, by field selector and by scope", func(t *testing.T) {
		byName := f.watch(clustersPath + "?watch=true&fieldSelector=metadata.name%3D" + staging)
		scoped := f.watch("/clusters/" + staging + clustersPath + "?watch=true")
		for _, w := range []*watcher{byName, scoped} {
			if typ, c := nextCluster(t, w); typ != "ADDED" || c.Name != staging {
				t.Fatalf("%s %s, want ADDED %s", typ, c.Name, staging)
			}
		}
		f.src.setStatus(clusterStatus(prod, aggregate.PhaseSynced, true))
		st := clusterStatus(staging, aggregate.PhaseStale, false)
		f.src.setStatus(st)
		for _, w := range []*watcher{byName, scoped} {
			if typ, c := nextCluster(t, w); typ != "MODIFIED" || c.Name != staging || c.Status.Phase != "Stale" {
				t.Fatalf("%s %s %s, want MODIFIED %s Stale", typ, c.Name, c.Status.Phase, staging)
			}
		}
		var one ClusterList
		f.getOK(clustersPath+"?fieldSelector=metadata.name!%3D"+staging, &one)
		for _, c := range one.Items {
			if c.Name == staging {
				t.Errorf("metadata.name!=%s listed it", staging)
			}
		}
	})

	t.Run("Tables", func(t *testing.T) {
		w := f.watch(clustersPath+"?watch=true&fieldSelector=metadata.name%3D"+prod, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		var first metav1.Table
		if e := w.nextNot("BOOKMARK"); e.Type != "ADDED" || json.Unmarshal(e.Raw, &first) != nil || len(first.ColumnDefinitions) == 0 || len(first.Rows) != 1 || first.Rows[0].Cells[0] != prod {
			t.Fatalf("first event %s %s", e.Type, e.Raw)
		}
		f.src.setStatus(clusterStatus(prod, aggregate.PhaseUnreachable, true))
		var next metav1.Table
		if e := w.nextNot("BOOKMARK"); e.Type != "MODIFIED" || json.Unmarshal(e.Raw, &next) != nil || len(next.ColumnDefinitions) != 0 || len(next.Rows) != 1 || next.Rows[0].Cells[1] != "Unreachable" {
			t.Fatalf("next event %s %s", e.Type, e.Raw)
		}
	})

	t.Run("streaming list and bookmarks", func(t *testing.T) {
		w := f.watch(clustersPath + "?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true")
		var names []string
		for {
			e := w.next()
			if e.Type == "BOOKMARK" {
				if e.Object.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" || e.Object.GetResourceVersion() == "" {
					t.Fatalf("bookmark %s", e.Raw)
				}
				break
			}
			names = append(names, e.Object.GetName())
		}
		if strings.Join(names, ",") != "new,"+prod+","+staging {
			t.Errorf("initial events of %v", names)
		}
		if e := w.next(); e.Type != "BOOKMARK" {
			t.Errorf("%s, want a BOOKMARK (every 50ms)", e.Type)
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, rv := range []string{"12", "abc.1", l.ResourceVersion + "0000"} {
			st := f.get(clustersPath+"?watch=true&resourceVersion="+url.QueryEscape(rv)).status(t, http.StatusGone)
			if st.Reason != metav1.StatusReasonExpired {
				t.Errorf("resourceVersion %q: %+v", rv, st)
			}
		}
		f.get(clustersPath+"?watch=true&fieldSelector=spec.server%3Dx").status(t, http.StatusBadRequest)
		f.get(clustersPath+"?labelSelector=a%20in%20(").status(t, http.StatusBadRequest)
		f.get(clustersPath+"?watch=maybe").status(t, http.StatusBadRequest)
		f.get(clustersPath+"?watch=true", "Accept", "application/yaml").status(t, http.StatusNotAcceptable)
	})
}

// TestClustersWatchTokenScope: a token limited to some clusters sees the changes of
// those only, and learns nothing of the others.
func TestClustersWatchTokenScope(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "admin-s3cret\nlimited-s3cret user=ci clusters=prod\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	w := f.watch(clustersPath+"?watch=true", "Authorization", "Bearer limited-s3cret")
	if typ, c := nextCluster(t, w); typ != "ADDED" || c.Name != prod {
		t.Fatalf("%s %s, want ADDED %s", typ, c.Name, prod)
	}
	f.src.setStatus(clusterStatus(staging, aggregate.PhaseUnreachable, false))
	f.src.setStatus(clusterStatus("prod-2", aggregate.PhaseConnecting, false))
	f.src.setStatus(clusterStatus(prod, aggregate.PhaseStale, true))
	if typ, c := nextCluster(t, w); typ != "MODIFIED" || c.Name != prod {
		t.Fatalf("%s %s, want MODIFIED %s only", typ, c.Name, prod)
	}
	w.none(300 * time.Millisecond)
	// A field selector does not widen the scope: staging is not sent, changed or not.
	other := f.watch(clustersPath+"?watch=true&fieldSelector=metadata.name%3D"+staging, "Authorization", "Bearer limited-s3cret")
	f.src.setStatus(clusterStatus(staging, aggregate.PhaseSynced, false))
	other.none(300 * time.Millisecond)
	f.get("/clusters/"+staging+clustersPath+"?watch=true", "Authorization", "Bearer limited-s3cret").status(t, http.StatusForbidden)
	f.get(clustersPath+"?watch=true").status(t, http.StatusUnauthorized)
}

// TestClusterFeed: the snapshot lag alone is no change, and a watch that falls behind
// the history is told so.
func TestClusterFeed(t *testing.T) {
	feed := newClusterFeed("e")
	items := func(lag time.Duration, phase string) []Cluster {
		return []Cluster{{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Status: ClusterStatus{Phase: phase, SnapshotLag: &metav1.Duration{Duration: lag}}}}
	}
	gen, got := feed.observe(items(time.Second, "Synced"))
	if gen != 1 || got[0].ResourceVersion != "e.1" {
		t.Fatalf("first look: %d %q", gen, got[0].ResourceVersion)
	}
	if gen, got = feed.observe(items(2*time.Second, "Synced")); gen != 1 || got[0].ResourceVersion != "e.1" {
		t.Errorf("the lag changed: %d %q", gen, got[0].ResourceVersion)
	}
	for i := range clusterHistory + 2 { // the first changes nothing: Synced again
		feed.observe(items(0, []string{"Synced", "Stale"}[i%2]))
	}
	if _, _, lost := feed.since(1); !lost {
		t.Error("since(1) after more changes than the history holds: not lost")
	}
	if changes, _, lost := feed.since(feed.gen - 1); lost || len(changes) != 1 {
		t.Errorf("since the last but one: %d changes, lost %v", len(changes), lost)
	}
	// Past twice the history, it still reaches back exactly clusterHistory changes.
	for i := range 2 * clusterHistory {
		feed.observe(items(0, []string{"Synced", "Stale"}[i%2]))
	}
	changes, _, lost := feed.since(feed.gen - clusterHistory)
	if lost || len(changes) != clusterHistory {
		t.Fatalf("since the history's start: %d changes, lost %v", len(changes), lost)
	}
	for i, c := range changes {
		if want := feed.gen - clusterHistory + uint64(i) + 1; c.gen != want {
			t.Fatalf("change %d is %d, want %d", i, c.gen, want)
		}
	}
	if _, _, lost := feed.since(feed.gen - clusterHistory - 1); !lost {
		t.Error("since one change before the history's start: not lost")
	}
	if _, ok := feed.parseRV("x.1"); ok {
		t.Error("parseRV of another epoch")
	}
}
