// Package server is fleetwatch's read-only HTTP API: the fleet's cache served the way
// the Kubernetes API serves a cluster, under a cluster prefix (as kcp does), so that
// kubectl and client-go work against it unchanged.
//
//	/clusters/{cluster}/api/v1/namespaces/default/pods       one cluster (path-escaped name)
//	/clusters/*/apis/apps/v1/deployments                     every cluster
//	/apis/fleetwatch.io/v1alpha1/clusters[/{name}]           the clusters themselves
//	/apis/fleetwatch.io/v1alpha1/search?q=...                search across the fleet
//	/clusters/{cluster}/openapi/v2, /openapi/v3[/...]        that cluster's OpenAPI
//	/healthz /livez /readyz /metrics /version
//	/ (to browsers), /ui/...                                 the web page
//
// A Server reads a Source (a *fleetwatch.Manager): its Fleet, and the status of its
// clusters, from which discovery documents are built. Data flows through one fleet
// handler, the watch cache:
//
//	Fleet ──► watch cache (one handler) ──► per resource: current objects by cluster,
//	                                            namespace and name, and a bounded history
//	                                            of changes, in sequence, each at a position
//	                                            per cluster
//	list, get ◄── current objects, with a cursor: where the history stands
//	watch     ◄── current objects, or the history after a cursor, then new changes
//	search    ◄── the search.Index that the watch cache feeds with the same events
//
// The resourceVersion of a list or a watch event is such a cursor (opaque to clients): a
// watch from it resumes without missing or repeating a change, or gets 410 Gone once the
// history no longer reaches back to it, and the client lists again, as reflectors do. It
// is short, the sequence number of the history's changes, where it is resumed by this
// run only (no change log, not sharded) and the client may read every cluster;
// otherwise it names the position of every cluster the client may read, which a later
// run places in the change log and another replica takes over (cursor.go).
// Every object served carries the annotation fleetwatch.io/cluster. Tables (kubectl's
// server-side printing) start with a CLUSTER column; those of custom resources have the
// printer columns of their CRD (crdcolumns.go). What the fleet does not cache, a
// cluster's OpenAPI documents and CRDs, is fetched from that cluster when the Source
// offers ClusterConfigs, and kept (openapi.go). Write verbs get 405; errors are
// Kubernetes Status objects.
//
// Start serves on Options.Address: loopback by default, anything else only with TLS and
// authentication: bearer tokens from a file, or reviewed by a home cluster
// (DelegatedAuth). In front of every handler, a server without authentication answers
// only requests for loopback host names and Options.AcceptHosts (against DNS
// rebinding), then authentication establishes the client's principal, then the limits
// of Options.MaxRequestsInFlight, MaxWatches and MaxWatchesPerClient answer 429 beyond
// them (the probes and /metrics are exempt). What a client may read is decided before its request reads the cache, whose locks see only a filter that
// does no I/O. Lists and Tables are streamed one item at a time (writeList), so that the
// limits bound the memory that responses take.
//
// /metrics serves the server's own metrics (HTTP requests, watches, the limits, and the
// changes the watch cache received) next to the fleet's, whose collectors package
// metrics owns. The files are in rooms by concern: authentication and authorization
// (auth.go, tokenfile.go, delegated.go), TLS certificates (tls.go), panic recovery
// (recover.go), the status code recorder (status.go), the limits (limit.go), routing
// (route.go), and the watch cache (cache.go) with its reads (resource.go, watch.go).
// The token file and the TLS files are followed through internal/filewatch while the
// server runs: a change applies without a restart, and no request reads a file.
// Requests log through the logger of their context.
//
// The web page (page.go) is static files embedded from ui/: HTML, CSS and ES modules
// written by hand, which read the API as any client does. They hold no data, so they
// are served before authentication, behind the host check, with a strict
// Content-Security-Policy.
//
// server imports aggregate, cluster and metrics; it never imports the root package,
// whose Manager it reads through Source, nor informer or persist.
package server
