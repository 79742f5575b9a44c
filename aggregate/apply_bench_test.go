package aggregate_test

import (
	"fmt"
	"testing"

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
// made; "map" their maps, which the store then reads.
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
	for _, mode := range []string{"filed", "map"} {
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
					for _, e := range list {
						var partial runtime.Object = e
						if mode == "map" {
							partial = e.Unstructured
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
