// Package aggregate is the fleet: one federated, indexed cache over many clusters, and
// the fan-out of its changes to handlers. It does no I/O of its own.
//
// A Fleet holds, for each resource (a GroupVersionResource), one Indexer with the objects
// of every cluster, keyed by Key (cluster/namespace/name). Each object is held once. The
// Indexer has built-in indices by cluster, namespace, cluster and namespace, and label,
// and user-defined ones (client-go cache.Indexers).
//
// Data flows in one direction:
//
//	informer of (cluster, resource) ──► ClusterStore.Apply/Delete ──► Indexer ──► one backlog
//	                                                                   │        per handler
//	                              Lister, Lister.Cluster (client-go) ◄─┘           │
//	                                                                               ▼
//	                                                              Handler.OnEvent(Event)
//
// One ClusterStore per cluster and resource is written by that cluster's informer; it is
// also the informer's KnownObjects (cache.KeyListerGetter), so relists are diffed against
// the cache. A write updates the Indexer and queues an Event for every handler under the
// same lock, which is what lets a handler added late receive the current state and then
// every change, exactly once. Each handler has its own goroutine and bounded backlog, so
// a slow handler delays no one else; beyond its MaxBacklog its pending events are
// coalesced per object. Writes that repeat an object's resourceVersion (a warm restart
// from a snapshot, a relist) change nothing and are not delivered unless asked for.
//
// Listers read the Indexer: Lister across the fleet, and Lister.Cluster, a
// cache.GenericLister of one cluster for code written against client-go. NewTypedLister
// reads them as Go types of a scheme (corev1.Pod), converting each object it returns, in
// the shape of client-go's generated listers. NewQueue and
// EnqueueHandler connect events to a client-go work queue of keys.
//
// It imports no fleetwatch package: clusters, informers, the snapshot and the server
// all feed or read the fleet from outside.
package aggregate
