package client

import (
	"net/url"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
)

// ConfigFor returns a copy of cfg, a rest.Config of fleetwatch's API, whose requests go
// to cluster: /clusters/{cluster}/... (the name path-escaped), or to every cluster with
// AllClusters. Clients made from it (dynamic, typed, metadata) read the fleet as they
// read a cluster.
func ConfigFor(cfg *rest.Config, cluster string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = strings.TrimRight(c.Host, "/") + clusterPrefix(cluster)
	return c
}

// clusterPrefix returns the path prefix of cluster's part of the API: /clusters/ and
// the name path-escaped, or /clusters/* for AllClusters.
func clusterPrefix(cluster string) string {
	if cluster == v1alpha1.AllClusters {
		return "/clusters/" + cluster
	}
	return "/clusters/" + url.PathEscape(cluster)
}
