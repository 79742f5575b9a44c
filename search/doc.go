// Package search finds objects across the resources and clusters of a fleet, from
// indexes rather than by reading every object.
//
// An Index is an aggregate.Handler: it follows a fleet's events (the replay of its
// current state, every change, and the Deleted events of a relist or of a cluster that
// leaves) and keeps, over the objects, a set of documents per cluster, resource,
// namespace and label, and a trigram index over the distinct names and container
// images. Parse turns a query such as "pay* kind:Deployment ns:shop image:nginx" into a
// Query; Index.Search answers a Request (a Query, the clusters the caller may read, a
// page) with the items of the page in Key order, the total, and the counts by cluster
// and kind.
//
//	fleet events ──► Index.OnEvent ──► sets (cluster, resource, namespace, label),
//	                                   texts (names, images) with their trigrams
//	Parse(q) ──► Query ──► Index.Search(Request) ──► Result
//	                  └──► Query.MatchCluster, MatchKind, MatchObject: one at a time
//	                       (the change log's records, package history)
//
// The server serves it at /apis/fleetwatch.io/v1alpha1/search (docs/search.md).
package search
