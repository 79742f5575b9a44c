package mcprovider_test

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/mcprovider"
	"github.com/fleetwatch/fleetwatch/persist"
)

// A controller over every cluster of the kubeconfig files, with one cache for the fleet,
// warm from the snapshot at restart: it reads each ConfigMap from its cluster's cache
// and writes back to the same cluster.
func Example() {
	ctx := ctrl.SetupSignalHandler()
	store, err := persist.Open("fleet.db", persist.Options{})
	if err != nil {
		panic(err)
	}
	defer store.Close()
	fleet, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{"/path/to/kubeconfig"}},
		Resources: []informer.Resource{{Name: "configmaps"}},
		Snapshot:  store,
		// The kubeconfig is read, and the API served, while the snapshot loads.
		LoadSnapshotInBackground: true,
	})
	if err != nil {
		panic(err)
	}
	provider, err := mcprovider.New(fleet, mcprovider.Options{})
	if err != nil {
		panic(err)
	}
	// No controller runs on the local cluster: its config is never used.
	mgr, err := mcmanager.New(&rest.Config{Host: "https://local.invalid"}, provider, mcmanager.Options{})
	if err != nil {
		panic(err)
	}
	err = mcbuilder.ControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(mcreconcile.Func(
		func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
			cl, err := mgr.GetCluster(ctx, req.ClusterName)
			if err != nil {
				return ctrl.Result{}, err
			}
			cm := &corev1.ConfigMap{}
			if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(err) // read from the fleet
			}
			if cm.Labels["seen"] == "yes" {
				return ctrl.Result{}, nil
			}
			if cm.Labels == nil {
				cm.Labels = map[string]string{}
			}
			cm.Labels["seen"] = "yes"
			return ctrl.Result{}, cl.GetClient().Update(ctx, cm) // written to req.ClusterName
		}))
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(ctx) // starts the provider, which runs the fleet
}
