package main

import (
	"cmp"
	"fmt"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/shard"
)

// podNamespaceFile holds the namespace of the pod the daemon runs in.
var podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// resolveShard fills in the shard keys that are left to the environment: the identity
// (the host name, which is the pod's name in a pod) and the namespace (the pod's). Every
// configuration loaded goes through it, so that a reload does not see them change.
func resolveShard(cfg *config.Config) error {
	if !cfg.Shard.Enabled {
		return nil
	}
	if cfg.Shard.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("shard.identity: empty, and the host name is unknown: %w", err)
		}
		if err := shard.ValidateIdentity(host); err != nil {
			return fmt.Errorf("shard.identity: empty, and the host name cannot stand for it: %w", err)
		}
		cfg.Shard.Identity = host
	}
	if cfg.Shard.Namespace == "" {
		b, err := os.ReadFile(podNamespaceFile)
		if err != nil || strings.TrimSpace(string(b)) == "" {
			return fmt.Errorf("shard.namespace: empty, and not running in a pod (%s)", podNamespaceFile)
		}
		cfg.Shard.Namespace = strings.TrimSpace(string(b))
	}
	return nil
}

// homeQPS and homeBurst bound the requests to the home cluster's Leases: a replica
// takes up to one Lease per cluster at once when it starts, or when another leaves.
const (
	homeQPS   = 50
	homeBurst = 100
)

// renewQPS and renewBurst bound the requests of the replica's own Lease: a get and an
// update per shard.retryPeriod.
const (
	renewQPS   = 5
	renewBurst = 10
)

// shardOptions returns the Manager's shard options for a configuration that
// resolveShard went through, or nil when sharding is off. The home cluster is reached
// through shard.homeKubeconfig, else server.auth.delegated.kubeconfig, else the pod's
// in-cluster config, which it returns too: its token is the replica's credential with
// the other replicas (see handoverOptions).
func shardOptions(cfg *config.Config) (*shard.Options, *rest.Config, error) {
	if !cfg.Shard.Enabled {
		return nil, nil, nil
	}
	var rc *rest.Config
	var err error
	switch kc := cmp.Or(cfg.Shard.HomeKubeconfig, cfg.Server.Auth.Delegated.Kubeconfig); {
	case kc != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", kc); err != nil {
			return nil, nil, fmt.Errorf("shard.homeKubeconfig: %w", err)
		}
	default:
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, nil, fmt.Errorf("shard.homeKubeconfig: empty, no server.auth.delegated.kubeconfig, and not in a cluster: %w", err)
		}
	}
	rc.UserAgent = userAgent(cfg) + " (shard)"
	rc.QPS, rc.Burst = homeQPS, homeBurst
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("shard.homeKubeconfig: %w", err)
	}
	// The replica's own Lease has a rate limiter of its own: its renewals never wait
	// behind the cluster Leases' requests.
	renew := rest.CopyConfig(rc)
	renew.QPS, renew.Burst = renewQPS, renewBurst
	renewClient, err := kubernetes.NewForConfig(renew)
	if err != nil {
		return nil, nil, fmt.Errorf("shard.homeKubeconfig: %w", err)
	}
	return &shard.Options{
		Identity:      cfg.Shard.Identity,
		Namespace:     cfg.Shard.Namespace,
		Client:        client,
		RenewClient:   renewClient,
		Address:       cfg.Shard.Address,
		LeaseDuration: cfg.Shard.LeaseDuration,
		RenewDeadline: cfg.Shard.RenewDeadline,
		RetryPeriod:   cfg.Shard.RetryPeriod,
		Replicas:      cfg.Shard.Replicas,
		StartTimeout:  cfg.Shard.StartTimeout,

		ParallelReceives: cfg.Shard.ParallelReceives,
		Balance:          shard.Balance(cfg.Shard.Balance),
	}, rc, nil
}

// userAgent is the User-Agent of the daemon's requests to the clusters. A replica of a
// sharded fleet names itself in it, so that an apiserver's audit log and its operator
// tell which replica watches.
func userAgent(cfg *config.Config) string {
	ua := "fleetwatch/" + buildVersion()
	if cfg.Shard.Enabled {
		ua += " replica=" + cfg.Shard.Identity
	}
	return ua
}

// replicaOf is the identity the API names in the resourceVersions it merges from the
// replicas (server.Options.Replica): none when sharding is off.
func replicaOf(cfg *config.Config) string {
	if !cfg.Shard.Enabled {
		return ""
	}
	return cfg.Shard.Identity
}
