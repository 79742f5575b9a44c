package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwatch/fleetwatch/persist"
)

// SnapshotSource is what NewSnapshotCollector reads: a *fleetwatch.Manager.
type SnapshotSource interface {
	// SnapshotStats returns the snapshot writer's statistics; ok is false without a
	// snapshot.
	SnapshotStats() (stats persist.Stats, ok bool)
}

var (
	snapshotLagDesc = prometheus.NewDesc("fleetwatch_snapshot_lag_seconds",
		"Age of the oldest checkpointed change not yet committed to the snapshot: how far the snapshot is behind the cache.", nil, nil)
	snapshotOldestDesc = prometheus.NewDesc("fleetwatch_snapshot_oldest_pending_seconds",
		"Age of the oldest change not yet committed to the snapshot, checkpointed or not (a relist in progress holds its changes back).", nil, nil)
	snapshotPendingDesc = prometheus.NewDesc("fleetwatch_snapshot_pending_changes",
		"Changes not yet committed to the snapshot, counted per object.", nil, nil)
	snapshotCommitsDesc = prometheus.NewDesc("fleetwatch_snapshot_commits_total",
		"Snapshot commits, by result.", []string{"result"}, nil)
	snapshotRejectedDesc = prometheus.NewDesc("fleetwatch_snapshot_rejected_changes_total",
		"Changes that could not be stored in the snapshot.", nil, nil)
	snapshotCommitSecondsDesc = prometheus.NewDesc("fleetwatch_snapshot_last_commit_duration_seconds",
		"Duration of the last successful snapshot commit.", nil, nil)
	snapshotSizeDesc = prometheus.NewDesc("fleetwatch_snapshot_file_size_bytes",
		"Size of the snapshot file.", nil, nil)
)

// NewSnapshotCollector returns a collector of the snapshot writer of src: lag, pending
// changes, commits and file size. Without a snapshot it collects nothing.
func NewSnapshotCollector(src SnapshotSource) prometheus.Collector { return snapshotCollector{src} }

type snapshotCollector struct{ src SnapshotSource }

var _ prometheus.Collector = snapshotCollector{}

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{snapshotLagDesc, snapshotOldestDesc, snapshotPendingDesc, snapshotCommitsDesc, snapshotRejectedDesc, snapshotCommitSecondsDesc, snapshotSizeDesc} {
		ch <- d
	}
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	st, ok := c.src.SnapshotStats()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(snapshotLagDesc, prometheus.GaugeValue, st.Lag.Seconds())
	ch <- prometheus.MustNewConstMetric(snapshotOldestDesc, prometheus.GaugeValue, st.OldestPending.Seconds())
	ch <- prometheus.MustNewConstMetric(snapshotPendingDesc, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(snapshotCommitsDesc, prometheus.CounterValue, float64(st.Commits), "success")
	ch <- prometheus.MustNewConstMetric(snapshotCommitsDesc, prometheus.CounterValue, float64(st.CommitErrors), "error")
	ch <- prometheus.MustNewConstMetric(snapshotRejectedDesc, prometheus.CounterValue, float64(st.Rejected))
	ch <- prometheus.MustNewConstMetric(snapshotCommitSecondsDesc, prometheus.GaugeValue, st.LastCommitDuration.Seconds())
	ch <- prometheus.MustNewConstMetric(snapshotSizeDesc, prometheus.GaugeValue, float64(st.FileSize))
}
