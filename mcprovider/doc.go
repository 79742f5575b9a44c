// Package mcprovider is a multicluster-runtime provider backed by fleetwatch: the
// clusters of a fleetwatch.Manager are the clusters of a multicluster-runtime manager,
// and the cache of each is a view of the fleet's one federated cache.
//
// A Provider implements multicluster.Provider and multicluster.ProviderRunnable. Its
// Start runs the fleetwatch.Manager, which follows the kubeconfig files (files and
// directories, include and exclude globs, aliases, clusters added, removed and replaced
// at runtime), and engages each cluster the Manager engages with the multicluster-runtime
// manager once the cluster's objects are complete in the fleet: loaded from the snapshot
// or listed. A cluster that leaves the fleet is disengaged: the context given to Engage
// ends, and the controllers' sources stop. Over a Manager whose snapshot loads in the
// background (fleetwatch.Options.LoadSnapshotInBackground), the clusters of the snapshot
// are engaged once the load has ended, before any apiserver answers, each with a
// complete cache.
//
//	kubeconfig files ─► fleetwatch.Manager ─► aggregate.Fleet (one copy of each object)
//	                          │ AddAware                  ▲ Get, List, handlers
//	                          ▼                           │ (one view per cluster)
//	                     Provider ──Engage(name, cluster.Cluster)──► mcmanager, controllers
//
// Each engaged cluster is a controller-runtime cluster.Cluster (cluster.New) whose cache
// reads the fleet: Get and List convert the cached objects into the Go types of the
// scheme (*corev1.Pod), or into unstructured or metadata-only objects, with label and
// field selectors and namespaces as controller-runtime's cache has them. The Provider
// keeps the typed objects converted last (Options.TypedObjects), each under the version
// of the fleet's object it was converted from, so that a typed read of an unchanged
// object is a DeepCopy of the kept one, as in controller-runtime's cache, and a changed
// one is converted anew. Its informers are fleet handlers limited to the cluster, so
// controller-runtime's and multicluster-runtime's source.Kind turn the fleet's events
// into requests of the right cluster; a typed informer's add or update is converted
// through the same kept objects, so that the Get of the reconcile it triggers copies
// the object its handler's conversion kept. Indices added with IndexField are added once to
// the fleet, for every cluster. Its client reads from the view and writes to the
// cluster's apiserver.
//
// A Manager's fleet is compact by default (fleetwatch.Options.Encoding): it keeps each
// object encoded and decodes it when the view reads it, and the view converts the
// decoded object as above; what a controller reads is the same over a plain fleet
// (fleetwatch.EncodingObjects). With fleetwatch.EncodingCompressed the encodings are
// compressed too: for controllers, that was about half the heap of a plain fleet for
// the same times (docs/benchmarks.md, measured before the typed objects kept above,
// which add the same heap to either); with fleetwatch.EncodingCompressedDict they are
// compressed with a dictionary per resource, a third of that heap again for about the
// same CPU, which is what examples/multicluster-runtime uses.
//
// The resources a controller reads or watches must be among the fleetwatch Manager's
// Options.Resources: the view starts no informer of its own, and reads of another
// resource fail with controller-runtime's cache.ErrResourceNotCached.
//
// This package lives in a Go module of its own, so that controller-runtime and
// multicluster-runtime never enter the dependencies of fleetwatch itself.
package mcprovider
