// Package metrics owns fleetwatch's Prometheus collectors of the fleet, so that a
// program that embeds a fleetwatch.Manager can register them on a registry of its own,
// with or without the HTTP server:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics.NewFleetCollector(mgr), metrics.NewSnapshotCollector(mgr), metrics.ClientGo())
//
// NewFleetCollector reads the fleet at each scrape: the phase and last sync of each
// cluster, the objects and sync state of each cluster and resource, the backlog,
// deliveries, coalesced events and panics of each fleet handler, and readiness.
// NewSnapshotCollector reads the snapshot writer: lag, pending changes, commits and file
// size. ClientGo is client-go's process-wide metrics: work queues, informers, and the
// REST client's requests by cluster (as the request's context carries it: the Provider
// gives each cluster's context its name, see cluster.NameFromContext) and host.
//
// The collectors read through the small interfaces Source and SnapshotSource, which a
// *fleetwatch.Manager satisfies; the package imports aggregate, cluster and persist for
// their types, and never the root package or server. Package server serves these collectors
// at /metrics next to its own HTTP and watch metrics, among which
// fleetwatch_events_total: the changes that its watch cache received. No collector reads an object's
// contents: Secret values and credentials never reach a metric.
package metrics
