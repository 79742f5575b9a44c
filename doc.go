// Package fleetwatch assembles the fleet: it follows the kubeconfig files (package
// cluster), runs one informer set per cluster (package informer), and feeds them all into
// one federated cache with cluster-tagged event handlers (package aggregate).
//
// A Manager is the entry point for programs that embed fleetwatch:
//
//	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
//		Clusters:  cluster.Options{Kubeconfigs: []string{"~/.kube/config"}},
//		Resources: []informer.Resource{{Name: "pods"}, {Name: "deployments.apps"}},
//	})
//	...
//	mgr.Fleet().AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) { ... }), aggregate.HandlerOptions{})
//	err = mgr.Start(ctx) // blocks until ctx is done
//
// Listers, indices and handlers are those of the aggregate.Fleet returned by Fleet; the
// state of every cluster is in Status, and RESTConfig gives the rest.Config of each engaged
// cluster, to write back to the cluster an event came from. Reconfigure changes the cluster selection and the
// resources of a running Manager in place: what did not change is not listed again. Add
// runs a program's own Runnables, such as an HTTP server, with the Manager; Start stops
// everything in order within one Options.GracefulShutdownTimeout. With Options.Shard, a
// Manager is one replica of a sharded fleet: it engages only the clusters it owns
// (package shard).
//
// This package only assembles: the rules live in the packages it wires together, the
// tuning of the garbage collector while a snapshot loads in internal/gctune. It does not
// import server or config, which build on it.
package fleetwatch
