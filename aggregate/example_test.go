package aggregate_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// A fleet with two clusters: each cluster's informer writes into its ClusterStore, a
// handler sees the merged stream, and a lister reads one cluster as client-go would.
func Example() {
	fleet := aggregate.New(aggregate.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- fleet.Start(ctx) }()

	// What the informer package does for each (cluster, resource): Apply every object
	// of the initial list, then MarkSynced, then Apply/Delete watch events.
	prod := fleet.ClusterStore("prod", aggregatetest.Pods)
	staging := fleet.ClusterStore("staging", aggregatetest.Pods)
	_ = prod.Apply(aggregatetest.Pod("default", "web-0", "10", map[string]string{"app": "web"}), true)
	_ = prod.Apply(aggregatetest.Pod("default", "db-0", "11", map[string]string{"app": "db"}), true)
	_ = staging.Apply(aggregatetest.Pod("default", "web-0", "7", map[string]string{"app": "web"}), true)
	prod.MarkSynced()
	staging.MarkSynced()

	// A handler added now first receives the current state, then every change.
	events := make(chan aggregate.Event, 10)
	reg, _ := fleet.AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) { events <- e }),
		aggregate.HandlerOptions{Name: "printer", Resources: []schema.GroupVersionResource{aggregatetest.Pods}})
	cache.WaitForCacheSync(ctx.Done(), reg.HasSynced)
	var initial []string
	for range 3 {
		e := <-events
		initial = append(initial, fmt.Sprintf("%s %s initial=%v", e.Type, e.Key(), e.InitialList))
	}
	slices.Sort(initial) // the current state comes in no particular order
	fmt.Println(initial)

	_ = prod.Delete(aggregatetest.Pod("default", "db-0", "12", nil), false)
	e := <-events
	fmt.Println(e.Type, e.Key())

	// One cluster, through client-go's GenericLister interface.
	var lister cache.GenericLister = fleet.Lister(aggregatetest.Pods).Cluster("prod")
	objs, _ := lister.ByNamespace("default").List(labels.Everything())
	for _, o := range objs {
		m, _ := meta.Accessor(o)
		fmt.Println("prod has", m.GetName())
	}

	cancel()
	fmt.Println("stopped:", <-stopped)
	// Output:
	// [Added prod/default/db-0 initial=true Added prod/default/web-0 initial=true Added staging/default/web-0 initial=true]
	// Deleted prod/default/db-0
	// prod has web-0
	// stopped: <nil>
}

func ExampleKey_String() {
	k := aggregate.Key{Cluster: "arn:aws:eks:eu-west-1:123:cluster/prod", Namespace: "default", Name: "web-0"}
	fmt.Println(k)
	fmt.Println(aggregate.Key{Cluster: "prod", Name: "node-1"})
	// Output:
	// arn:aws:eks:eu-west-1:123:cluster%2Fprod/default/web-0
	// prod//node-1
}

func ExampleParseKey() {
	k, err := aggregate.ParseKey("arn:aws:eks:eu-west-1:123:cluster%2Fprod/default/web-0")
	fmt.Printf("%q %q %q %v\n", k.Cluster, k.Namespace, k.Name, err)
	_, err = aggregate.ParseKey("prod/default/web-0/extra")
	fmt.Println(err)
	// Output:
	// "arn:aws:eks:eu-west-1:123:cluster/prod" "default" "web-0" <nil>
	// parse key "prod/default/web-0/extra": want cluster/namespace/name, found 4 segments (namespace and name cannot contain '/'): aggregate: invalid key
}

// Indices: built-in ones by cluster, namespace and label, and user-defined ones.
func ExampleIndexer_ByIndex() {
	fleet := aggregate.New(aggregate.Options{
		Indexers: cache.Indexers{"node": func(obj any) ([]string, error) {
			m, err := meta.Accessor(obj)
			if err != nil {
				return nil, err
			}
			return []string{m.GetAnnotations()["node"]}, nil
		}},
	})
	for _, c := range []string{"prod", "staging"} {
		p := aggregatetest.Pod("shop", "web-0", "1", map[string]string{"app": "web"})
		p.SetAnnotations(map[string]string{"node": c + "-node-1"})
		_ = fleet.ClusterStore(c, aggregatetest.Pods).Apply(p, true)
	}
	ix := fleet.Indexer(aggregatetest.Pods)
	show := func(index, value string) {
		keys, _ := ix.IndexKeys(index, value)
		var s []string
		for _, k := range keys {
			s = append(s, k.String())
		}
		slices.Sort(s)
		fmt.Println(index, value, s)
	}
	show(aggregate.IndexLabel, aggregate.LabelIndexValue("app", "web"))
	show(aggregate.IndexClusterNamespace, aggregate.ClusterNamespaceIndexValue("prod", "shop"))
	show("node", "staging-node-1")
	// Output:
	// label app=web [prod/shop/web-0 staging/shop/web-0]
	// cluster-namespace prod/shop [prod/shop/web-0]
	// node staging-node-1 [staging/shop/web-0]
}

// A controller's work queue fed by the fleet.
func ExampleEnqueueHandler() {
	fleet := aggregate.New(aggregate.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = fleet.Start(ctx) }()

	queue := aggregate.NewQueue("pods")
	defer queue.ShutDown()
	_, _ = fleet.AddHandler(aggregate.EnqueueHandler(queue), aggregate.HandlerOptions{
		Name:      "pod-controller",
		Resources: []schema.GroupVersionResource{aggregatetest.Pods},
	})
	_ = fleet.ClusterStore("prod", aggregatetest.Pods).Apply(aggregatetest.Pod("default", "web-0", "1", nil), true)

	key, _ := queue.Get()
	defer queue.Done(key)
	obj, err := fleet.Lister(aggregatetest.Pods).Get(key)
	m, _ := meta.Accessor(obj)
	fmt.Println(key, m.GetResourceVersion(), err)
	// Output:
	// prod/default/web-0 1 <nil>
}

// Typed reads: the fleet's pods as corev1.Pods, through client-go's scheme. Each object
// returned is a fresh conversion that the caller may modify, for example to write it back
// to its cluster with a clientset of fleetwatch.Manager.RESTConfig(cluster).
func ExampleNewTypedLister() {
	fleet := aggregate.New(aggregate.Options{})
	for _, c := range []string{"prod", "staging"} {
		_ = fleet.ClusterStore(c, aggregatetest.Pods).Apply(aggregatetest.Pod("shop", "web-0", "1", map[string]string{"app": "web"}), true)
	}

	pods, err := aggregate.NewTypedLister[corev1.Pod](fleet, aggregatetest.Pods, scheme.Scheme)
	if err != nil {
		fmt.Println(err)
		return
	}
	var pod *corev1.Pod
	pod, _ = pods.Cluster("prod").Namespace("shop").Get("web-0")
	fmt.Println(pod.Kind, pod.Name, pod.Spec.Containers[0].Image)

	// Across the fleet, each object with its cluster.
	items, _ := pods.List(labels.SelectorFromSet(labels.Set{"app": "web"}))
	slices.SortFunc(items, func(a, b aggregate.Item[corev1.Pod]) int { return strings.Compare(a.Cluster, b.Cluster) })
	for _, it := range items {
		fmt.Println(it.Cluster, it.Object.Namespace, it.Object.Name)
	}

	_, err = pods.Cluster("prod").Namespace("shop").Get("web-1")
	fmt.Println(apierrors.IsNotFound(err), err)
	// Output:
	// Pod web-0 registry.k8s.io/pause:3.10
	// prod shop web-0
	// staging shop web-0
	// true pods "web-1" not found
}
