package mcprovider

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// countingCodec is the snapshot's codec, counting its decodes.
type countingCodec struct {
	persist.Codec
	decodes atomic.Int64
}

func (c *countingCodec) Decode(data []byte) (runtime.Object, error) {
	c.decodes.Add(1)
	return c.Codec.Decode(data)
}

// DecodeShared is the one the fleet decodes with (aggregate.SharingDecoder).
func (c *countingCodec) DecodeShared(data []byte) (runtime.Object, error) {
	c.decodes.Add(1)
	return c.Codec.DecodeShared(data)
}

var _ aggregate.Codec = (*countingCodec)(nil)

// TestMapperLearnsAKindFromOneObject: before any cluster's discovery answers (a warm
// start), the kind of a cached resource is learnt from one of its objects: a compact
// fleet decodes one, not every object, on the way of the first request.
func TestMapperLearnsAKindFromOneObject(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	clustertest.WriteKubeconfig(t, path, clustertest.Context{Name: "a", Server: "https://127.0.0.1:1"})
	codec := &countingCodec{}
	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{path}},
		Resources: []informer.Resource{{Name: "configmaps"}},
		Fleet:     aggregate.Options{Codec: codec},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := mgr.Fleet().ClusterStore("a", configMaps)
	for i := range 500 {
		if err := s.Apply(configMap("ns", fmt.Sprintf("cm-%03d", i), "1", nil, nil), true); err != nil {
			t.Fatal(err)
		}
	}
	codec.decodes.Store(0)
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	m := newFleetMapper(mgr, scheme.Scheme).mapping(gvk)
	if m == nil || m.Resource != configMaps || m.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Fatalf("mapping of %s: %+v, want namespaced %s", gvk, m, configMaps)
	}
	if n := codec.decodes.Load(); n > 1 {
		t.Errorf("learning the kind decoded %d objects, want 1", n)
	}
}
