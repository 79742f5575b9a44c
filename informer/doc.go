// Package informer runs one informer set per cluster.
//
// A Set resolves the configured resources (kubectl-style names such as "pods" or
// "deployments.apps") through its own cluster's discovery, and runs one client-go informer
// per resource, with transforms that strip what nobody queries. It keeps per-resource sync
// state and the last error, and it can start warm: the first list of an informer is then a
// snapshot at a saved resourceVersion, and the watch resumes from there. Reconfigure
// changes the resources of a running Set: only the informers of the resources that
// changed start or stop.
//
// The objects that a Set lists and watches are decoded by package jsondec rather than
// apimachinery (decode.go): to the same objects, but with their strings interned and
// without the managedFields that the transform would drop, so that the memory freed
// after decoding is not scattered among the objects that the informers keep. The
// frames of a watch stream are split, and their envelopes read, in one pass each
// (watchdecode.go) instead of the six scans of client-go's framer and envelope decoder.
//
// A Set knows about one cluster only; the fleet is assembled by package aggregate.
package informer
