package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// Source is what NewFleetCollector reads: a *fleetwatch.Manager, or the Source of a
// server.Server.
type Source interface {
	// Fleet returns the federated cache.
	Fleet() *aggregate.Fleet
	// Status returns the status of every cluster.
	Status() []aggregate.ClusterStatus
	// Ready reports whether the fleet is ready, as /readyz reports it.
	Ready() bool
}

var (
	clusterPhaseDesc = prometheus.NewDesc("fleetwatch_cluster_phase",
		"The phase of each cluster: 1 for its current phase, 0 for the others.", []string{"cluster", "phase"}, nil)
	clusterLastSyncDesc = prometheus.NewDesc("fleetwatch_cluster_last_sync_timestamp_seconds",
		"When each cluster last completed its initial sync, in seconds since the epoch.", []string{"cluster"}, nil)
	objectsDesc = prometheus.NewDesc("fleetwatch_objects",
		"Objects in the cache, by cluster and resource.", []string{"cluster", "resource"}, nil)
	storeSyncedDesc = prometheus.NewDesc("fleetwatch_store_synced",
		"Whether the informer of each cluster and resource has completed its initial list (1) or not (0).", []string{"cluster", "resource"}, nil)
	backlogDesc = prometheus.NewDesc("fleetwatch_handler_backlog",
		"Events waiting for each fleet handler.", []string{"handler"}, nil)
	deliveredDesc = prometheus.NewDesc("fleetwatch_handler_delivered_total",
		"Events delivered to each fleet handler.", []string{"handler"}, nil)
	coalescedDesc = prometheus.NewDesc("fleetwatch_handler_coalesced_total",
		"Events merged away while each fleet handler was behind by more than its maximum backlog.", []string{"handler"}, nil)
	panicsDesc = prometheus.NewDesc("fleetwatch_handler_panics_total",
		"Panics of each fleet handler.", []string{"handler"}, nil)
	readyDesc = prometheus.NewDesc("fleetwatch_ready",
		"Whether the fleet is ready (1) or not (0), as /readyz reports it.", nil, nil)
)

// phases are the phases that fleetwatch_cluster_phase reports for every cluster.
var phases = []aggregate.Phase{aggregate.PhaseConnecting, aggregate.PhaseSyncing, aggregate.PhaseSynced, aggregate.PhaseUnreachable, aggregate.PhaseStale, aggregate.PhaseRemote, aggregate.PhaseMoving}

// NewFleetCollector returns a collector that reads the state of src's fleet at each
// scrape: the phase of each cluster, the objects of each cluster and resource, the
// backlog of each handler, and readiness. It holds no state of its own.
func NewFleetCollector(src Source) prometheus.Collector { return fleetCollector{src} }

type fleetCollector struct{ src Source }

var _ prometheus.Collector = fleetCollector{}

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterPhaseDesc, clusterLastSyncDesc, objectsDesc, storeSyncedDesc,
		backlogDesc, deliveredDesc, coalescedDesc, panicsDesc, readyDesc} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.src.Status() {
		for _, p := range phases {
			ch <- prometheus.MustNewConstMetric(clusterPhaseDesc, prometheus.GaugeValue, boolValue(st.Phase == p), st.Name, string(p))
		}
		if !st.LastSyncTime.IsZero() {
			ch <- prometheus.MustNewConstMetric(clusterLastSyncDesc, prometheus.GaugeValue, float64(st.LastSyncTime.UnixNano())/1e9, st.Name)
		}
	}
	stats := c.src.Fleet().Stats()
	for _, st := range stats.Stores {
		gr := st.Resource.GroupResource().String()
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(st.Objects), st.Cluster, gr)
		ch <- prometheus.MustNewConstMetric(storeSyncedDesc, prometheus.GaugeValue, boolValue(st.Synced), st.Cluster, gr)
	}
	for _, h := range stats.Handlers {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(h.Backlog), h.Name)
		ch <- prometheus.MustNewConstMetric(deliveredDesc, prometheus.CounterValue, float64(h.Delivered), h.Name)
		ch <- prometheus.MustNewConstMetric(coalescedDesc, prometheus.CounterValue, float64(h.Coalesced), h.Name)
		ch <- prometheus.MustNewConstMetric(panicsDesc, prometheus.CounterValue, float64(h.Panics), h.Name)
	}
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, boolValue(c.src.Ready()))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
