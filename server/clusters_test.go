package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
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
		if got := mustJSON(tab.Rows[1].Cells); got != `["down","Unreachable","https://down.example.com",0,"3/3","10m","dial tcp: connection refused"]` {
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
		st := f.get("/apis/fleetwatch.io/v1alpha1/clusters?watch=true").status(t, http.StatusMethodNotAllowed)
		if st.Reason != metav1.StatusReasonMethodNotAllowed {
			t.Errorf("watch: %+v", st)
		}
		f.get("/apis/fleetwatch.io/v1alpha1/widgets").status(t, http.StatusNotFound)
		f.get("/apis/fleetwatch.io/v1alpha1/clusters/prod/status").status(t, http.StatusNotFound)
		f.get("/apis/fleetwatch.io/v1alpha1/namespaces/x/clusters").status(t, http.StatusNotFound)
	})
}
