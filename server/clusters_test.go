package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/persist"
)

// withSnapshot is a Source with a snapshot writer's statistics, as *fleetwatch.Manager.
type withSnapshot struct {
	*fakeSource
	stats persist.Stats
}

func (w withSnapshot) SnapshotStats() (persist.Stats, bool) { return w.stats, true }

func TestClusters(t *testing.T) {
	f := newFixture(t, nil)
	st := clusterStatus("down", aggregate.PhaseUnreachable, true)
	st.LastSyncTime = now.Add(-10 * 1e9 * 60)
	st.LastError = "dial tcp: connection refused"
	f.src.setStatus(st)

	t.Run("list", func(t *testing.T) {
		var l ClusterList
		f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &l)
		var names []string
		for _, c := range l.Items {
			names = append(names, c.Name)
		}
		if l.Kind != "ClusterList" || l.APIVersion != "fleetwatch.io/v1alpha1" || !slices.Equal(names, []string{edge, "down", prod, staging}) {
			t.Fatalf("list %s", mustJSON(l))
		}
		p := l.Items[2]
		if p.Kind != "Cluster" || p.UID != "uid-prod" || p.Status.Phase != "Synced" || p.Status.Objects != 5 ||
			p.Status.Server != "https://prod.example.com" || len(p.Status.Resources) != 3 || p.Status.Resources[0].Count != 3 ||
			p.Status.Resources[0].Kind != "Pod" || p.Status.LastSyncTime == nil || len(p.Status.Conditions) != 1 {
			t.Errorf("prod %s", mustJSON(p))
		}
	})

	t.Run("get", func(t *testing.T) {
		var c Cluster
		f.getOK("/apis/fleetwatch.io/v1alpha1/clusters/"+url.PathEscape(edge), &c)
		if c.Name != edge || c.Status.Objects != 1 {
			t.Errorf("edge %s", mustJSON(c))
		}
		st := f.get("/apis/fleetwatch.io/v1alpha1/clusters/nowhere").status(t, http.StatusNotFound)
		if st.Details.Name != "nowhere" || st.Details.Kind != "clusters" || st.Details.Group != GroupName {
			t.Errorf("Status %+v", st)
		}
	})

	t.Run("under a cluster prefix", func(t *testing.T) {
		var l ClusterList
		f.getOK(clusterPath(prod)+"/apis/fleetwatch.io/v1alpha1/clusters", &l)
		if len(l.Items) != 1 || l.Items[0].Name != prod {
			t.Errorf("list under prod %s", mustJSON(l))
		}
		f.get(clusterPath(prod)+"/apis/fleetwatch.io/v1alpha1/clusters/staging").status(t, http.StatusNotFound)
		f.getOK(clusterPath(allClusters)+"/apis/fleetwatch.io/v1alpha1/clusters", &l)
		if len(l.Items) != 4 {
			t.Errorf("list under * has %d clusters", len(l.Items))
		}
	})

	t.Run("table", func(t *testing.T) {
		var tab decodedTable
		f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &tab, "Accept", acceptTable)
		if want := []string{"Name", "Phase", "Server", "Objects", "Resources", "Last Sync"}; !slices.Equal(tab.columns(), want) {
			t.Errorf("columns %q, want %q", tab.columns(), want)
		}
		if got := mustJSON(tab.Rows[1].Cells); got != `["down","Unreachable","https://down.example.com",0,"3/3","10m","dial tcp: connection refused","\u003cnone\u003e"]` {
			t.Errorf("row of down: %s", got)
		}
	})

	t.Run("snapshot lag", func(t *testing.T) {
		var l ClusterList
		f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &l)
		if l.Items[0].Status.SnapshotLag != nil {
			t.Errorf("a source without a snapshot: lag %v", l.Items[0].Status.SnapshotLag)
		}
		s, err := New(withSnapshot{f.src, persist.Stats{Lag: 1234567 * time.Microsecond}}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.reg.Remove)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/apis/fleetwatch.io/v1alpha1/clusters/"+prod, nil)
		req.Host = "localhost"
		s.Handler().ServeHTTP(rec, req)
		var c Cluster
		if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || c.Status.SnapshotLag == nil || c.Status.SnapshotLag.Duration != 1235*time.Millisecond {
			t.Errorf("a source with a snapshot: %d %s", rec.Code, rec.Body)
		}
	})

	t.Run("not served", func(t *testing.T) {
		f.get("/apis/fleetwatch.io/v1alpha1/widgets").status(t, http.StatusNotFound)
		f.get("/apis/fleetwatch.io/v1alpha1/clusters/prod/status").status(t, http.StatusNotFound)
		f.get("/apis/fleetwatch.io/v1alpha1/namespaces/x/clusters").status(t, http.StatusNotFound)
	})
}

// TestClustersOfOtherReplicas: in a sharded fleet, a cluster that another replica
// watches, or none does now, is in the list with where it is watched, and a read of its
// objects that its owner cannot answer (it cannot be reached, or there is none) fails
// with 503 saying so, rather than an empty answer.
func TestClustersOfOtherReplicas(t *testing.T) {
	f := newFixture(t, nil)
	const unreachable = "https://127.0.0.1:1" // nothing listens on port 1
	f.src.setStatus(aggregate.ClusterStatus{Name: "remote", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-2", ReplicaAddress: unreachable})
	f.src.setStatus(aggregate.ClusterStatus{Name: "moving", Phase: aggregate.PhaseMoving})

	var c Cluster
	// Its owner cannot be asked: it keeps this replica's view, and says so.
	if r := f.get("/apis/fleetwatch.io/v1alpha1/clusters/remote"); r.code != http.StatusOK || !strings.Contains(r.header.Get("Warning"), "the status of remote is this replica's view") {
		t.Errorf("remote: %d %s, Warning %q", r.code, r.body, r.header.Get("Warning"))
	}
	f.getOK("/apis/fleetwatch.io/v1alpha1/clusters/remote", &c)
	if c.Status.Phase != "Remote" || c.Status.Replica != "fleetwatch-2" || c.Status.ReplicaAddress != unreachable {
		t.Errorf("remote %s", mustJSON(c))
	}
	for _, tc := range []struct{ path, message string }{
		{clusterPath("remote") + "/api/v1/pods", `cluster "remote" is watched by replica "fleetwatch-2", at ` + unreachable + `, which cannot be reached: `},
		{clusterPath("remote") + "/api/v1", `cluster "remote" is watched by replica "fleetwatch-2", at ` + unreachable + `, which cannot be reached: `},
		{clusterPath("remote") + "/apis/fleetwatch.io/v1alpha1/clusters/remote", `cluster "remote" is watched by replica "fleetwatch-2", at ` + unreachable + `, which cannot be reached: `},
		{clusterPath("moving") + "/api/v1/namespaces/default/pods/web", `cluster "moving" is not watched by this replica: no replica watches it now; it is moving`},
	} {
		st := f.get(tc.path).status(t, http.StatusServiceUnavailable)
		if !strings.HasPrefix(st.Message, tc.message) || st.Reason != metav1.StatusReasonServiceUnavailable {
			t.Errorf("%s: %+v, want the message %q", tc.path, st, tc.message)
		}
	}
	// They do not hold readiness back: another replica is to watch them.
	if got := notReadyReason(f.src.Status(), nil); got != "clusters are synced, but the fleet is not ready yet" {
		t.Errorf("notReadyReason = %q", got)
	}
}

// TestOtherReplicasOfATokenLimitedToSomeClusters: a token limited to some clusters learns
// nothing of a cluster outside them that another replica watches, neither that it
// exists nor where it is watched: the answer is the one for a cluster that does not
// exist, and it is not in the list. Inside them, it learns where its cluster is watched.
func TestOtherReplicasOfATokenLimitedToSomeClusters(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "limited-s3cret user=ci clusters=prod,remote-ok\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	f.src.setStatus(aggregate.ClusterStatus{Name: "remote-ok", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: "https://fleetwatch-1.fleetwatch-peers:8443"})
	f.src.setStatus(aggregate.ClusterStatus{Name: "remote-secret", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-2", ReplicaAddress: "https://fleetwatch-2.fleetwatch-peers:8443"})
	auth := []string{"Authorization", "Bearer limited-s3cret"}

	for _, path := range []func(cluster string) string{
		func(c string) string { return clusterPath(c) + "/api/v1/pods" },
		func(c string) string { return clusterPath(c) + "/api/v1" },
		func(c string) string { return "/apis/fleetwatch.io/v1alpha1/clusters/" + c },
	} {
		r, none := f.get(path("remote-secret"), auth...), f.get(path("nowhere"), auth...)
		if r.code != none.code || strings.Contains(string(r.body), "fleetwatch-2") {
			t.Errorf("%s: %d %s, want %d as for a cluster that does not exist, without the replica", path("remote-secret"), r.code, r.body, none.code)
		}
	}
	var l ClusterList
	f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &l, auth...)
	for _, c := range l.Items {
		if c.Name == "remote-secret" {
			t.Errorf("the list shows %s to a token without it", c.Name)
		}
	}
	st := f.get(clusterPath("remote-ok")+"/api/v1/pods", auth...).status(t, http.StatusServiceUnavailable)
	if !strings.Contains(st.Message, `replica "fleetwatch-1"`) {
		t.Errorf("remote-ok: %+v, want the replica that watches it", st)
	}
}

// TestNotReadyReasonNamesTheFirst: a fleet of thousands starting cold is named by its
// first clusters and a count, not cluster by cluster, and the clusters a client may not
// read are still only mentioned.
func TestNotReadyReasonNamesTheFirst(t *testing.T) {
	var statuses []aggregate.ClusterStatus
	for i := range 5000 {
		statuses = append(statuses, aggregate.ClusterStatus{Name: fmt.Sprintf("c-%04d", i), Phase: aggregate.PhaseSyncing})
	}
	statuses = append(statuses, aggregate.ClusterStatus{Name: "secret", Phase: aggregate.PhaseConnecting})
	got := notReadyReason(statuses, func(name string) bool { return name != "secret" })
	want := `clusters not synced: "c-0000" (Syncing), "c-0001" (Syncing), "c-0002" (Syncing), "c-0003" (Syncing), "c-0004" (Syncing), "c-0005" (Syncing), "c-0006" (Syncing), "c-0007" (Syncing), "c-0008" (Syncing), "c-0009" (Syncing), and 4990 more, and clusters that you may not read`
	if got != want {
		t.Errorf("notReadyReason =\n%s\nwant\n%s", got, want)
	}
}
