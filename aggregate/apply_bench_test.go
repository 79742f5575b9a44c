package aggregate_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/internal/wire"
	"github.com/fleetwatch/fleetwatch/persist"
)

// BenchmarkApplyPartialList applies a list of partial objects to a compact fleet, as an
// informer's queue hands on a streaming list after its end: 3 clusters × 13,000 pods
// (make bench's count of objects), made before and then pushed out of the CPU's caches,
// as a list's objects are by the time the last of them has come. "filed" hands the
// store the informer's wire.EncodedObjects, which read what files them when they were
// made; "map" their maps, which the store then reads; "meta" a
// *metav1.PartialObjectMetadata of the same members, as a snapshot's partial load
// (persist.LoadOptions.Partial) makes them.
//
//	go test -run '^$' -bench ApplyPartialList -count 6 ./aggregate/
func BenchmarkApplyPartialList(b *testing.B) {
	const clusters, perCluster = 3, 13000
	objs := make([][]*wire.EncodedObject, clusters)
	for c := range objs {
		for i := range perCluster {
			p := aggregatetest.Pod(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%d", i), fmt.Sprint(i+1),
				map[string]string{"app": fmt.Sprintf("app-%d", i%50), "pod-template-hash": fmt.Sprintf("h%d", i/4)})
			encoded, err := persist.Codec{}.Encode(p)
			if err != nil {
				b.Fatal(err)
			}
			objs[c] = append(objs[c], (&wire.EncodedObject{Unstructured: p, Encoded: encoded}).ToPartial())
		}
	}
	evict := make([]byte, 64<<20)
	metas := make([][]*metav1.PartialObjectMetadata, clusters)
	for c, list := range objs {
		for _, e := range list {
			u := e.Unstructured
			p := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: u.GetAPIVersion(), Kind: u.GetKind()}}
			p.Name, p.Namespace, p.UID, p.ResourceVersion, p.Labels = u.GetName(), u.GetNamespace(), u.GetUID(), u.GetResourceVersion(), u.GetLabels()
			metas[c] = append(metas[c], p)
		}
	}
	for _, mode := range []string{"filed", "map", "meta"} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				f := aggregate.New(aggregate.Options{Codec: persist.Codec{}})
				for i := range evict {
					evict[i]++
				}
				b.StartTimer()
				for c, list := range objs {
					s := f.ClusterStore(fmt.Sprintf("c%d", c), aggregatetest.Pods)
					for i, e := range list {
						var partial runtime.Object = e
						switch mode {
						case "map":
							partial = e.Unstructured
						case "meta":
							partial = metas[c][i]
						}
						if err := s.ApplyPartial(partial, e.Encoded, true); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*clusters*perCluster), "ns/object")
		})
	}
}
