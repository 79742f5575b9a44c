// Package cluster turns kubeconfig files into clusters and keeps the set of clusters in
// step with the files.
//
// Load reads the kubeconfig files named by Options (files, directories, $KUBECONFIG or
// ~/.kube/config) and returns a Cluster for every context that passes the include and
// exclude globs. A Cluster is named after its context or an alias, and carries a
// rest.Config and a Fingerprint of its connection settings. Each context is resolved
// within its own file; a context defined twice, or two contexts with one cluster name,
// are errors.
//
// A Provider does the same at runtime. Start loads the files, engages every cluster
// with an Aware, then follows the files (file events on their directories, and a poll):
//
//	files ──► Load ──► diff by name and Fingerprint ──► Aware.Engage(ctx, c)   new
//	                                                ──► cancel ctx, Disengage  gone
//	                                                ──► both, in that order    replaced
//
// The ctx given to Engage lives as long as the cluster is in the set. Its cause tells
// removal (ErrClusterRemoved, ErrClusterReplaced) from shutdown, and it carries the
// cluster's name (NameFromContext), by which package metrics labels the requests made
// with it. An Aware that is also a
// SelectionObserver learns the names that each read of the files selects, before the
// changes are applied, so that it can drop state it holds of clusters never engaged
// again. SetOptions changes the
// selection (files, globs, aliases) of a running Provider, which applies it as an edit
// of the files.
//
// For each engaged cluster, a consumer typically reads its Identity (the UID of the
// kube-system namespace, and the server) with ReadIdentity, to check persisted state
// against it, and runs RunHealth with the Engage ctx to learn when the cluster becomes
// unreachable or healthy again; RunHealth probes /readyz with capped, jittered backoff.
//
// This package knows nothing about resources or storage.
//
// Of fleetwatch it imports only internal/filewatch.
package cluster
