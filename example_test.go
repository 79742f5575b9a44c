package fleetwatch_test

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
)

// A handler that reads each ConfigMap event's object as a corev1.ConfigMap and writes a
// label back to the cluster the event came from. It needs real clusters, so it is not
// run.
func ExampleManager_RESTConfig() {
	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{"/path/to/kubeconfig"}},
		Resources: []informer.Resource{{Name: "configmaps"}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	configMaps, err := aggregate.NewTypedLister[corev1.ConfigMap](mgr.Fleet(), gvr, scheme.Scheme)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	_, _ = mgr.Fleet().AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
		if e.Type == aggregate.Deleted {
			return
		}
		k := e.Key()
		cm, err := configMaps.Cluster(k.Cluster).Namespace(k.Namespace).Get(k.Name)
		if err != nil || cm.Labels["seen-by"] == "example" {
			return
		}
		cfg, err := mgr.RESTConfig(e.Cluster) // the cluster the event came from
		if err != nil {
			return // it left the fleet
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return
		}
		if cm.Labels == nil {
			cm.Labels = map[string]string{}
		}
		cm.Labels["seen-by"] = "example" // cm is a fresh copy: the cache is untouched
		_, _ = cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	}), aggregate.HandlerOptions{Name: "labeller", Resources: []schema.GroupVersionResource{gvr}})
	_ = mgr.Start(ctx)
}
