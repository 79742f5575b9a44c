package metrics_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/metrics"
)

// A Manager is what the collectors read.
var (
	_ metrics.Source         = (*fleetwatch.Manager)(nil)
	_ metrics.SnapshotSource = (*fleetwatch.Manager)(nil)
)

// Register the fleet's metrics on a registry of your own, without the HTTP server.
func Example() {
	dir, err := os.MkdirTemp("", "fleetwatch-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "config")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		panic(err)
	}
	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{kubeconfig}},
		Resources: []informer.Resource{{Name: "pods"}},
	})
	if err != nil {
		panic(err)
	}
	reg, err := mgr.Fleet().AddHandler(aggregate.HandlerFunc(func(aggregate.Event) {}), aggregate.HandlerOptions{Name: "inventory"})
	if err != nil {
		panic(err)
	}
	defer reg.Remove()

	r := prometheus.NewRegistry()
	r.MustRegister(metrics.NewFleetCollector(mgr), metrics.NewSnapshotCollector(mgr), metrics.ClientGo())
	// In a program: go mgr.Start(ctx), and serve r with promhttp.HandlerFor.
	families, err := r.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range families {
		switch mf.GetName() {
		case "fleetwatch_handler_backlog", "fleetwatch_ready":
			for _, m := range mf.GetMetric() {
				fmt.Println(mf.GetName(), labels(m.GetLabel()), m.GetGauge().GetValue())
			}
		}
	}
	// Output:
	// fleetwatch_handler_backlog handler=inventory 0
	// fleetwatch_ready  0
}
