package fleetwatch

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
)

// TestClusterObjects: a replica's cost of a cluster is the objects it holds of it, every
// resource summed, and it is known only while the cluster is synced: a cluster still
// listing, or one not engaged, has no cost to publish.
func TestClusterObjects(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	m, err := NewManager(Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{t.TempDir()}},
		Resources: []informer.Resource{{Name: "pods"}, {Name: "configmaps"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	add := func(gvr schema.GroupVersionResource, kind string, n int) {
		for i := range n {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind}}
			u.SetNamespace("default")
			u.SetName(fmt.Sprintf("%s-%d", gvr.Resource, i))
			u.SetResourceVersion(fmt.Sprint(i + 1))
			if err := m.fleet.ClusterStore("prod", gvr).Apply(u, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(pods, "Pod", 30)
	add(configMaps, "ConfigMap", 12)
	if n, ok := m.clusterObjects("prod"); ok {
		t.Errorf("a cluster without a status: cost %d, known; want unknown", n)
	}
	resources := []aggregate.ResourceStatus{{Name: "pods", Resource: pods}, {Name: "configmaps", Resource: configMaps}}
	for _, phase := range []aggregate.Phase{aggregate.PhaseConnecting, aggregate.PhaseSyncing, aggregate.PhaseStale} {
		m.status.Set(aggregate.ClusterStatus{Name: "prod", Phase: phase, Resources: resources})
		if n, ok := m.clusterObjects("prod"); ok {
			t.Errorf("phase %s: cost %d, known; want unknown", phase, n)
		}
	}
	m.status.Set(aggregate.ClusterStatus{Name: "prod", Phase: aggregate.PhaseSynced, Resources: resources})
	if n, ok := m.clusterObjects("prod"); !ok || n != 42 {
		t.Errorf("synced: cost %d, known %v; want 42, known", n, ok)
	}
}
