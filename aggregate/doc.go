// Package aggregate is the fleet: one federated, indexed cache over many clusters.
//
// Objects are keyed cluster/namespace/name. The Fleet holds them once, indexes them by
// cluster, namespace, cluster and namespace, label, and by user-defined index functions,
// and fans out every change as a cluster-tagged Event to the registered handlers, each of
// which gets its own ordered, bounded stream.
//
// This package does no I/O of its own.
package aggregate
