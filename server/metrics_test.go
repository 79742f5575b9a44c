package server

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// containsMetric reports whether the exposition body has the sample line (name and
// labels, as Prometheus prints them) with a value that ok accepts.
func containsMetric(body []byte, sample string, ok func(float64) bool) bool {
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, sample+" ")
		if !found {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err == nil && ok(v) {
			return true
		}
	}
	return false
}

func TestMetrics(t *testing.T) {
	extra := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetwatch_snapshot_lag_seconds", Help: "test"})
	extra.Set(1.5)
	f := newFixture(t, func(o *Options) {
		o.Collectors = []prometheus.Collector{extra}
		o.ClientGoMetrics = true
	})
	// client-go's metrics are process-wide: a queue name of this run only.
	queue := fmt.Sprint("test-queue-", time.Now().UnixNano())
	q := aggregate.NewQueue(queue)
	defer q.ShutDown()
	q.Add(aggregate.Key{Cluster: prod, Name: "x"})

	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l)
	f.get(clusterPath(prod) + "/api/v1/namespaces/default/pods/none")
	w := f.watch(clusterPath(prod) + "/api/v1/pods?watch=1")
	w.next()

	r := f.get("/metrics")
	if r.code != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", r.code, r.header.Get("Content-Type"))
	}
	for _, tc := range []struct {
		sample string
		ok     func(float64) bool
	}{
		{`fleetwatch_cluster_phase{cluster="prod",phase="Synced"}`, eq(1)},
		{`fleetwatch_cluster_phase{cluster="prod",phase="Syncing"}`, eq(0)},
		{`fleetwatch_cluster_last_sync_timestamp_seconds{cluster="staging"}`, eq(float64(now.Add(-5 * time.Minute).Unix()))},
		{`fleetwatch_objects{cluster="prod",resource="pods"}`, eq(3)},
		{`fleetwatch_objects{cluster="arn:aws:eks:eu-west-1:123:cluster/edge",resource="pods"}`, eq(1)},
		{`fleetwatch_store_synced{cluster="prod",resource="deployments.apps"}`, eq(1)},
		{`fleetwatch_events_total{cluster="staging",resource="pods"}`, eq(2)},
		{`fleetwatch_handler_backlog{handler="server"}`, eq(0)},
		{`fleetwatch_handler_delivered_total{handler="server"}`, atLeast(9)},
		{`fleetwatch_ready`, eq(1)},
		{`fleetwatch_http_requests_total{code="200",resource="pods",verb="list"}`, eq(1)},
		{`fleetwatch_http_requests_total{code="404",resource="pods",verb="get"}`, eq(1)},
		{`fleetwatch_http_request_duration_seconds_count{resource="pods",verb="list"}`, eq(1)},
		{`fleetwatch_http_watches{resource="pods"}`, eq(1)},
		{`fleetwatch_http_watch_events_total{resource="pods"}`, atLeast(1)},
		{`fleetwatch_snapshot_lag_seconds`, eq(1.5)},
		{`workqueue_adds_total{name="` + queue + `"}`, eq(1)},
		{`workqueue_depth{name="` + queue + `"}`, eq(1)},
		{`go_goroutines`, atLeast(1)},
	} {
		if !containsMetric(r.body, tc.sample, tc.ok) {
			t.Errorf("metrics lack %s with the expected value", tc.sample)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", r.body)
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }

func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }
