// Package history reads the fleet's change log, which the snapshot keeps (package
// persist, persist.HistoryOptions): what changed across the fleet, and how one object
// changed.
//
// A Log reads a persist.Store. Log.Changes returns a page of the changes across the
// fleet since a time or a sequence number, selected by a search query (package search:
// cluster:prod-* kind:Deployment ns:shop) and by the clusters the caller may read.
// Log.Object returns a page of one object's steps, each with its field diff (Diff) from
// the step before. Neither ever returns an object's contents whole, and nothing of a
// Secret's values: the log does not hold them, and Diff leaves them out besides.
//
//	persist.Store ──► Log.Changes(ChangesRequest) ──► ChangesPage (v1alpha1.Change)
//	              └─► Log.Object(ObjectRequest)   ──► ObjectPage  (v1alpha1.HistoryStep,
//	                                                               fields by Diff)
//
// The daemon serves them at /apis/fleetwatch.io/v1alpha1/changes and
// /clusters/{cluster}/apis/fleetwatch.io/v1alpha1/history (docs/history.md); a
// fleetwatch.Manager with a change log returns its Log (Manager.History).
package history
