package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
)

func ExampleLoad() {
	dir, err := os.MkdirTemp("", "kubeconfigs")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := clustertest.Config(
		clustertest.Context{Name: "arn:aws:eks:eu-west-1:123:cluster/prod", Server: "https://prod.example"},
		clustertest.Context{Name: "arn:aws:eks:eu-west-1:123:cluster/staging", Server: "https://staging.example"},
		clustertest.Context{Name: "kind-dev", Server: "https://127.0.0.1:6443"},
	)
	if err := clientcmd.WriteToFile(cfg, filepath.Join(dir, "config")); err != nil {
		panic(err)
	}

	clusters, err := cluster.Load(cluster.Options{
		Kubeconfigs: []string{dir},
		Include:     []string{"arn:aws:eks:*", "kind-*"},
		Exclude:     []string{"*/staging"},
		Aliases:     map[string]string{"arn:aws:eks:eu-west-1:123:cluster/prod": "prod"},
	})
	if err != nil {
		panic(err)
	}
	for _, c := range clusters {
		fmt.Println(c.Name, c.Context, c.Config.Host)
	}
	// Output:
	// kind-dev kind-dev https://127.0.0.1:6443
	// prod arn:aws:eks:eu-west-1:123:cluster/prod https://prod.example
}

// fleet is an Aware: it starts the work of each cluster in Engage, and stops it when the
// cluster's context is cancelled.
type fleet struct{}

func (fleet) Engage(ctx context.Context, c *cluster.Cluster) error {
	logger := klog.FromContext(ctx) // names the cluster
	go func() {
		id, err := cluster.ReadIdentity(ctx, c.Config)
		if err != nil {
			logger.Error(err, "Identity unknown")
		} else {
			logger.Info("Connected", "identity", id)
		}
	}()
	go func() {
		_ = cluster.RunHealth(ctx, c, cluster.HealthOptions{}, func(h cluster.Health) {
			logger.Info("Health", "healthy", h.Healthy, "since", h.Since, "err", h.Err)
		})
	}()
	go func() {
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), cluster.ErrClusterRemoved) {
			logger.Info("Cluster left the fleet; dropping its objects")
			return
		}
		logger.Info("Shutting down; keeping the cluster's objects for a warm restart")
	}()
	return nil
}

func ExampleProvider() {
	p, err := cluster.NewProvider(cluster.Options{Exclude: []string{"docker-desktop"}}, fleet{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Start blocks until ctx is done.
	if err := p.Start(ctx); err != nil {
		fmt.Println(err)
	}
}
