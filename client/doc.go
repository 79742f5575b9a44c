// Package client is what a Go program needs to read fleetwatch's inventory API
// correctly: the objects of every cluster under /clusters/*, and the search.
//
// A client-go informer pointed at /clusters/* lists and watches as against a cluster,
// but its store keys objects by namespace and name, so the objects of two clusters with
// the same namespace and name collapse into one. The objects fleetwatch serves carry
// their cluster in the annotation fleetwatch.io/cluster (ClusterOf); KeyFunc keys them
// by cluster, namespace and name, as the fleet does (cluster/namespace/name, the
// cluster path-escaped), and NewInformer runs client-go's list and watch machinery (a
// DeltaFIFO and a controller) over a store keyed so, indexed by cluster (ClusterIndex).
// ConfigFor points a rest.Config at one cluster, or at every cluster (AllClusters), for
// the clients that the ListerWatcher is made from (dynamic, typed, metadata).
//
// Search asks the search API (docs/search.md) and returns its answer as the types of
// package api/v1alpha1.
package client
