package metrics_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/metrics"
	"github.com/fleetwatch/fleetwatch/persist"
)

// labels prints the labels of a metric as name=value, separated by commas.
func labels(pairs []*dto.LabelPair) string {
	var s []string
	for _, p := range pairs {
		s = append(s, p.GetName()+"="+p.GetValue())
	}
	return strings.Join(s, ",")
}

// gather returns the samples of reg, each as "name{labels}" with its value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	samples := make(map[string]float64)
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var v float64
			switch {
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Histogram != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			samples[mf.GetName()+"{"+labels(m.GetLabel())+"}"] = v
		}
	}
	return samples
}

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// source is a Source and SnapshotSource of a test.
type source struct {
	fleet    *aggregate.Fleet
	statuses []aggregate.ClusterStatus
	snapshot *persist.Stats
}

func (s source) Fleet() *aggregate.Fleet           { return s.fleet }
func (s source) Status() []aggregate.ClusterStatus { return s.statuses }
func (s source) Ready() bool                       { return true }
func (s source) SnapshotStats() (persist.Stats, bool) {
	if s.snapshot == nil {
		return persist.Stats{}, false
	}
	return *s.snapshot, true
}

func TestFleetAndSnapshotCollectors(t *testing.T) {
	pods := aggregatetest.Pod("default", "web-1", "7", nil)
	fleet := aggregate.New(aggregate.Options{})
	store := fleet.ClusterStore("prod", podsGVR)
	if err := store.Apply(pods, true); err != nil {
		t.Fatal(err)
	}
	store.MarkSynced()
	synced := time.Unix(1700000000, 0)
	src := source{
		fleet:    fleet,
		statuses: []aggregate.ClusterStatus{{Name: "prod", Phase: aggregate.PhaseSynced, LastSyncTime: synced}},
		snapshot: &persist.Stats{Pending: 3, Commits: 5, CommitErrors: 1, Lag: 2 * time.Second, FileSize: 4096},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewFleetCollector(src), metrics.NewSnapshotCollector(src))
	got := gather(t, reg)
	for sample, want := range map[string]float64{
		"fleetwatch_cluster_phase{cluster=prod,phase=Synced}":          1,
		"fleetwatch_cluster_phase{cluster=prod,phase=Stale}":           0,
		"fleetwatch_cluster_last_sync_timestamp_seconds{cluster=prod}": 1700000000,
		"fleetwatch_objects{cluster=prod,resource=pods}":               1,
		"fleetwatch_store_synced{cluster=prod,resource=pods}":          1,
		"fleetwatch_ready{}":                                1,
		"fleetwatch_snapshot_pending_changes{}":             3,
		"fleetwatch_snapshot_commits_total{result=success}": 5,
		"fleetwatch_snapshot_commits_total{result=error}":   1,
		"fleetwatch_snapshot_lag_seconds{}":                 2,
		"fleetwatch_snapshot_file_size_bytes{}":             4096,
	} {
		if v, ok := got[sample]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", sample, v, ok, want)
		}
	}

	// Without a snapshot, the snapshot collector collects nothing.
	reg = prometheus.NewRegistry()
	reg.MustRegister(metrics.NewSnapshotCollector(source{}))
	if got := gather(t, reg); len(got) != 0 {
		t.Errorf("without a snapshot: %v", got)
	}
}

// TestClientGoRESTMetrics makes requests with a client-go client: their results are
// counted by the cluster of their context and by host, their latencies by verb only
// (no series per cluster), and nothing of their path, query or credentials shows.
func TestClientGoRESTMetrics(t *testing.T) {
	collector := metrics.ClientGo()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"s3cret-ns"}}`))
	}))
	defer ts.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: ts.URL, BearerToken: "s3cret-token"})
	if err != nil {
		t.Fatal(err)
	}
	// A request of a cluster's context, and one without.
	if _, err := cs.CoreV1().Namespaces().Get(cluster.NewContext(t.Context(), "prod"), "s3cret-ns", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "s3cret-ns", metav1.GetOptions{}); err != nil {
		t.Fatalf("GET: %v", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector)
	got := gather(t, reg)
	host := mustHost(t, ts.URL)
	for _, sample := range []string{
		"rest_client_requests_total{cluster=prod,code=200,host=" + host + ",method=GET}",
		"rest_client_requests_total{cluster=,code=200,host=" + host + ",method=GET}",
		"rest_client_request_duration_seconds{verb=GET}",
		"rest_client_rate_limiter_duration_seconds{verb=GET}",
	} {
		if got[sample] < 1 {
			t.Errorf("%s = %v, want at least 1", sample, got[sample])
		}
	}
	if n := got["rest_client_request_duration_seconds{verb=GET}"]; n < 2 {
		t.Errorf("rest_client_request_duration_seconds{verb=GET} = %v, want both requests in it", n)
	}
	for sample := range got {
		if strings.Contains(sample, "s3cret") {
			t.Errorf("a metric shows a name or credential: %s", sample)
		}
	}
	if metrics.ClientGo() != collector {
		t.Error("ClientGo returned another collector")
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
