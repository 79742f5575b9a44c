package mcprovider

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
)

var pods = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// BenchmarkEventThenGet measures what a controller's usual round costs the Provider: an
// update of a realistic pod (aggregatetest.RealisticPod) applied to the fleet, the
// event that a typed informer's handler gets for it, and the Get of that pod that the
// reconcile it triggers makes; over a plain fleet and compact ones. The updates
// alternate between two objects applied as they are, encoded once (applyAs would encode
// each time), so that a round measures the event and the Get rather than an encoding.
func BenchmarkEventThenGet(b *testing.B) {
	for _, tc := range fleetCodecs {
		b.Run(tc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "kubeconfig")
			clustertest.WriteKubeconfig(b, path, clustertest.Context{Name: "a", Server: "https://127.0.0.1:1"})
			mgr, err := fleetwatch.NewManager(fleetwatch.Options{
				Clusters:  cluster.Options{Kubeconfigs: []string{path}},
				Resources: []informer.Resource{{Name: "pods"}},
				Fleet:     aggregate.Options{Codec: tc.codec},
				Encoding:  encodingOf(tc.codec),
			})
			if err != nil {
				b.Fatal(err)
			}
			p, err := New(mgr, Options{})
			if err != nil {
				b.Fatal(err)
			}
			s := p.fleet.ClusterStore("a", pods)
			versions := make([]*unstructured.Unstructured, 2)
			encodings := make([][]byte, 2)
			for i := range versions {
				versions[i] = aggregatetest.RealisticPod("ns", "web", []string{"1", "2"}[i], nil)
				if tc.codec != nil {
					if encodings[i], err = tc.codec.Encode(versions[i]); err != nil {
						b.Fatal(err)
					}
				}
			}
			apply := func(i int) {
				var err error
				if tc.codec == nil {
					err = s.Apply(versions[i%2], false)
				} else {
					err = aggregatetest.ApplyEncoded(s, versions[i%2], encodings[i%2], false)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			apply(0)
			m := &member{ctx: b.Context(), synced: make(chan struct{})}
			close(m.synced)
			a := &clusterCache{p: p, name: "a", member: m}
			go func() { _ = p.fleet.Start(b.Context()) }()
			inf, err := a.GetInformer(b.Context(), &corev1.Pod{})
			if err != nil {
				b.Fatal(err)
			}
			updated := make(chan struct{}, 1)
			if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				UpdateFunc: func(_, _ any) { updated <- struct{}{} },
			}); err != nil {
				b.Fatal(err)
			}
			key := client.ObjectKey{Namespace: "ns", Name: "web"}
			b.ReportAllocs()
			i := 1
			for b.Loop() {
				apply(i)
				<-updated
				var pod corev1.Pod
				if err := a.Get(b.Context(), key, &pod); err != nil {
					b.Fatal(err)
				}
				if pod.ResourceVersion != versions[i%2].GetResourceVersion() {
					b.Fatalf("Get read %s, want %s", pod.ResourceVersion, versions[i%2].GetResourceVersion())
				}
				i++
			}
		})
	}
}
