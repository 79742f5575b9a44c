// Package cluster turns kubeconfig files into clusters.
//
// Every context of the loaded kubeconfig files that passes the include and exclude globs
// becomes one cluster, named by its context (or by an alias). A cluster carries its
// rest.Config and its identity: the UID of its kube-system namespace and its server URL.
// The set of clusters changes at runtime when kubeconfig files change: clusters are added,
// removed, or replaced when their server or credentials change. Each cluster is probed for
// health and reconnected with capped, jittered backoff.
//
// This package knows nothing about resources or storage.
package cluster
