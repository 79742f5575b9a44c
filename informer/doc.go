// Package informer runs one informer set per cluster.
//
// A Set resolves the configured resources (kubectl-style names such as "pods" or
// "deployments.apps") through its own cluster's discovery, read again at every
// reconcile; the RESTMapper built from what a cluster serves is shared, process-wide, by
// the Sets whose clusters serve the same, and a cluster whose documents of aggregated
// discovery the process holds already is asked for them on condition of their ETags,
// and answers 304 Not Modified (discovery.go). It runs one informer per resource and
// watched namespace: a loop of its own, one goroutine that lists, watches, reads each
// event from the watch's response and applies it to the store (loop.go), with
// transforms that strip what nobody queries. It keeps per-resource sync
// state and the last error, and it can start warm: the first list of an informer is then a
// snapshot at a saved resourceVersion, and the watch resumes from there. Reconfigure
// changes the resources of a running Set: only the informers of the resources that
// changed start or stop.
//
// ValidateResources is the one check of a list of Resources, made by New and
// Reconfigure, and by the packages that configure Sets (the Manager, the daemon's config)
// with the names their users know the fields by.
//
// The objects that a Set lists and watches come from the dynamic clients of package wire
// (internal/wire), which decode the apiservers' responses with their strings interned
// and without the managedFields that the transform would drop; with an EncodingSink,
// watched objects come with their encoding (wire.EncodedObject), which the loop hands to
// the EncodedStore; with a PartialSink, the objects of streaming lists come as their
// encodings and the few fields that file them, for PartialStores (encoded.go).
//
// A Set knows about one cluster only; the fleet is assembled by package aggregate. This
// package must not import aggregate, cluster, persist, config or server.
package informer
