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
	segment := cluster
	if cluster != v1alpha1.AllClusters {
		segment = url.PathEscape(cluster)
	}
	c.Host = strings.TrimRight(c.Host, "/") + "/clusters/" + segment
	return c
}
