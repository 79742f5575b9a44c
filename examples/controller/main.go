// Command controller is a minimal multi-cluster controller built on fleetwatch: one
// cluster-aware work queue fed by fleet events, and workers that reconcile each
// cluster/namespace/name from the federated cache, read as appsv1.Deployments.
//
//	go run ./examples/controller --kubeconfig ~/.kube/config
//
// Every kubeconfig context is a cluster. For each deployment in any cluster, the
// reconciler prints its key and its desired replicas; for a deleted one, that it is gone.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
)

var deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

func main() {
	os.Exit(run())
}

func run() int {
	var kubeconfigs stringList
	flag.Var(&kubeconfigs, "kubeconfig", "kubeconfig file or directory (repeatable; default $KUBECONFIG, else ~/.kube/config)")
	workers := flag.Int("workers", 2, "reconcile workers")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: kubeconfigs},
		Resources: []informer.Resource{{Name: "deployments.apps"}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	fleet := mgr.Fleet()
	// Reconciles read the same Deployments again and again: a memo of typed objects
	// hands out copies of those read before and unchanged since, rather than decoding
	// them again.
	lister, err := aggregate.NewTypedListerWithOptions[appsv1.Deployment](fleet, deployments, scheme.Scheme,
		aggregate.TypedListerOptions{Memo: aggregate.NewTypedMemo(1024)})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}

	// One queue per resource; its keys carry the cluster.
	queue := aggregate.NewQueue("deployments")
	reg, err := fleet.AddHandler(aggregate.EnqueueHandler(queue), aggregate.HandlerOptions{
		Name:      "deployments-controller",
		Resources: []schema.GroupVersionResource{deployments},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}

	errc := make(chan error, 1)
	go func() { errc <- mgr.Start(ctx) }()

	// Wait until every cluster has synced (or timed out) and the handler has seen it all.
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced, mgr.Ready) {
		fmt.Fprintln(os.Stderr, "controller: stopped before the caches synced")
		return 1
	}
	fmt.Println("controller: caches synced")
	for range *workers {
		go func() {
			for processNext(lister, queue) {
			}
		}()
	}

	<-ctx.Done()
	queue.ShutDown()
	if err := <-errc; err != nil {
		fmt.Fprintln(os.Stderr, "controller:", err)
		return 1
	}
	return 0
}

// processNext reconciles one key; it returns false once the queue is shut down.
func processNext(lister *aggregate.TypedLister[appsv1.Deployment], queue workqueue.TypedRateLimitingInterface[aggregate.Key]) bool {
	key, shutdown := queue.Get()
	if shutdown {
		return false
	}
	defer queue.Done(key)
	if err := reconcile(lister, key); err != nil {
		fmt.Fprintf(os.Stderr, "reconcile %s: %v\n", key, err)
		queue.AddRateLimited(key)
		return true
	}
	queue.Forget(key)
	return true
}

// reconcile reads the object from the federated cache, as a controller reads its
// client-go lister. The Deployment is the reconciler's own copy: it could change it and
// write it back to key.Cluster with a clientset of mgr.RESTConfig(key.Cluster).
func reconcile(lister *aggregate.TypedLister[appsv1.Deployment], key aggregate.Key) error {
	d, err := lister.Cluster(key.Cluster).Namespace(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		fmt.Printf("%s: deleted\n", key)
		return nil
	}
	if err != nil {
		return err
	}
	var replicas int32
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	fmt.Printf("%s: replicas=%d generation=%d at %s\n", key, replicas, d.Generation, time.Now().Format(time.TimeOnly))
	return nil
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
