package aggregate_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/persist"
)

// BenchmarkHeapPerObject measures the heap that a cache holds per object, after two
// collections, without clusters: the objects come as the JSON a kube-apiserver serves,
// with managedFields, over 3 clusters and 10 namespaces, and each cache takes them as it
// does in a process.
//
//   - clientgo-typed: what controller-runtime's cache holds, one client-go indexer with
//     the namespace index per cluster, of typed objects decoded by the scheme's
//     deserializer (a typed client's), managedFields stripped.
//   - fleetwatch: a plain fleet of the unstructured objects that its informers decode
//     (jsondec, strings interned, managedFields dropped).
//   - fleetwatch-compact: a compact fleet with the snapshot's codec, written as its
//     informers write it: the CBOR that jsondec writes while decoding, and of the object
//     only what files it (ClusterStore.ApplyPartial).
//   - fleetwatch-compressed, fleetwatch-compressed-dict: the same, compressed (without,
//     and with a dictionary per resource).
//
// B/object is the growth of the live heap over the build, per object; x-typed is its
// ratio to clientgo-typed's. What the decoders keep between objects (their tables of
// interned strings) is dropped before the measure: it is the informers', bounded, and not
// per object. The kinds are the bench ConfigMap (test/bench/load.go configMapApply: 3
// labels, 2 annotations, 3 data keys, about 1.2 KB of CBOR), 9,000 of them as in make
// bench's controllers phase; the same with a label of its own on each (no two objects
// then carry the same labels); and the realistic pod (aggregatetest.RealisticPod),
// 3,000.
//
//	go test -run '^$' -bench HeapPerObject -benchtime 1x ./aggregate/
func BenchmarkHeapPerObject(b *testing.B) {
	for _, kind := range []memKind{
		{name: "ConfigMap", n: 9000, resource: configMaps, json: benchConfigMapJSON},
		{name: "ConfigMapOwnLabel", n: 9000, resource: configMaps, json: ownLabelConfigMapJSON},
		{name: "Pod", n: 3000, resource: aggregatetest.Pods, json: realisticPodJSON},
	} {
		typed := sync.OnceValues(func() (float64, error) { return heapPerObject(kind, buildTyped) })
		for _, c := range []struct {
			name  string
			build func(memKind, func(yield func(cluster string, data []byte) error) error) (any, error)
		}{
			{"clientgo-typed", buildTyped},
			{"fleetwatch", buildPlain},
			{"fleetwatch-compact", buildCompact},
			{"fleetwatch-compressed", buildCompressed},
			{"fleetwatch-compressed-dict", buildCompressedDict},
		} {
			b.Run(kind.name+"/"+c.name, func(b *testing.B) {
				base, err := typed()
				if err != nil {
					b.Fatal(err)
				}
				var sum float64
				for range b.N {
					perObject, err := heapPerObject(kind, c.build)
					if err != nil {
						b.Fatal(err)
					}
					sum += perObject
				}
				b.ReportMetric(sum/float64(b.N), "B/object")
				b.ReportMetric(sum/float64(b.N)/base, "x-typed")
			})
		}
	}
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// memKind is a kind of object that BenchmarkHeapPerObject caches: n of them, the JSON of
// the i-th from json.
type memKind struct {
	name     string
	n        int
	resource schema.GroupVersionResource
	json     func(i int) []byte
}

// memClusters are the clusters of BenchmarkHeapPerObject, which spreads objects evenly
// over them.
var memClusters = []string{"kind-1", "kind-2", "kind-3"}

// heapPerObject returns the growth of the live heap per object over build, with every
// object of kind: build calls each with the cluster and the JSON of each object, and
// returns what holds the cache.
func heapPerObject(kind memKind, build func(memKind, func(yield func(cluster string, data []byte) error) error) (any, error)) (float64, error) {
	each := func(yield func(cluster string, data []byte) error) error {
		for i := range kind.n {
			if err := yield(memClusters[i%len(memClusters)], kind.json(i)); err != nil {
				return err
			}
		}
		return nil
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	kept, err := build(kind, each)
	if err != nil {
		return 0, err
	}
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(kept)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(kind.n), nil
}

func buildTyped(_ memKind, each func(yield func(cluster string, data []byte) error) error) (any, error) {
	indexers := map[string]cache.Indexer{}
	for _, c := range memClusters {
		indexers[c] = cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	decoder := scheme.Codecs.UniversalDeserializer()
	err := each(func(cluster string, data []byte) error {
		obj, _, err := decoder.Decode(data, nil, nil)
		if err != nil {
			return err
		}
		m := obj.(metav1.Object)
		m.SetManagedFields(nil)
		return indexers[cluster].Add(obj)
	})
	return indexers, err
}

func buildPlain(kind memKind, each func(yield func(cluster string, data []byte) error) error) (any, error) {
	f := aggregate.New(aggregate.Options{})
	d := &jsondec.Decoder{DropManagedFields: true}
	err := each(func(cluster string, data []byte) error {
		m, err := d.Object(data)
		if err != nil {
			return err
		}
		return f.ClusterStore(cluster, kind.resource).Apply(&unstructured.Unstructured{Object: m}, true)
	})
	return f, err
}

func buildCompact(kind memKind, each func(yield func(cluster string, data []byte) error) error) (any, error) {
	return buildEncoded(persist.Codec{}, kind, each)
}

func buildCompressed(kind memKind, each func(yield func(cluster string, data []byte) error) error) (any, error) {
	return buildEncoded(persist.Codec{Compress: true}, kind, each)
}

// buildCompressedDict's dictionaries are the process's: the first build of a kind makes
// its dictionary (64 KiB, and as much of sample until then), which the next ones reuse.
func buildCompressedDict(kind memKind, each func(yield func(cluster string, data []byte) error) error) (any, error) {
	return buildEncoded(persist.Codec{Compress: true, Dictionary: true}, kind, each)
}

func buildEncoded(codec persist.Codec, kind memKind, each func(yield func(cluster string, data []byte) error) error) (any, error) {
	f := aggregate.New(aggregate.Options{Codec: codec})
	d := &jsondec.Decoder{DropManagedFields: true}
	err := each(func(cluster string, data []byte) error {
		m, encoded, err := d.ObjectPartialCBOR(data)
		if err != nil {
			return err
		}
		return f.ClusterStore(cluster, kind.resource).ApplyPartial(&unstructured.Unstructured{Object: m}, encoded, true)
	})
	return f, err
}

// benchConfigMapJSON returns the i-th ConfigMap that make bench loads (test/bench/load.go
// configMapApply), as a kube-apiserver serves it, with the managedFields of its
// server-side apply.
func benchConfigMapJSON(i int) []byte {
	apps := []string{"checkout", "cart", "catalog", "payments", "search", "recommend", "frontend", "shipping"}
	app := apps[i%len(apps)]
	tier := map[string]string{"payments": "backend", "cart": "backend", "frontend": "web"}[app]
	if tier == "" {
		tier = "service"
	}
	ns := fmt.Sprintf("bench-%02d", i%10)
	var props strings.Builder
	for k := range 20 {
		fmt.Fprintf(&props, "%s.setting.%02d=value-%d-%d\n", app, k, i, k)
	}
	created := metav1.NewTime(time.Date(2026, 11, 23, 19, 15, 54, 0, time.UTC))
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              fmt.Sprintf("cm-%06d", i),
			Namespace:         ns,
			UID:               types.UID(fmt.Sprintf("5f0c%04x-1b2e-4c6d-9a7b-%012x", i%0x10000, i)),
			ResourceVersion:   fmt.Sprint(100_000 + i),
			CreationTimestamp: created,
			Labels:            map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "tier": tier},
			Annotations:       map[string]string{"meta.helm.sh/release-name": app, "meta.helm.sh/release-namespace": ns},
			ManagedFields: []metav1.ManagedFieldsEntry{{
				Manager:    "bench-controller",
				Operation:  metav1.ManagedFieldsOperationApply,
				APIVersion: "v1",
				Time:       &created,
				FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:application.properties":{},"f:features.json":{},"f:logging.yaml":{}},` +
					`"f:metadata":{"f:annotations":{"f:meta.helm.sh/release-name":{},"f:meta.helm.sh/release-namespace":{}},` +
					`"f:labels":{"f:app.kubernetes.io/name":{},"f:app.kubernetes.io/part-of":{},"f:tier":{}}}}`),
			}},
		},
		Data: map[string]string{
			"application.properties": props.String(),
			"logging.yaml":           "level: info\nformat: json\noutputs:\n  - stdout\n",
			"features.json":          fmt.Sprintf(`{"newCheckout":%t,"recommendations":true,"rollout":%d}`, i%2 == 0, i%100),
		},
	}
	data, err := json.Marshal(cm)
	if err != nil {
		panic(err)
	}
	return data
}

// ownLabelConfigMapJSON returns benchConfigMapJSON(i) with one more label, its own.
func ownLabelConfigMapJSON(i int) []byte {
	return bytes.Replace(benchConfigMapJSON(i), []byte(`"labels":{`), fmt.Appendf(nil, `"labels":{"instance":"cm-%06d",`, i), 1)
}

// realisticPodJSON returns the JSON of the i-th realistic pod.
func realisticPodJSON(i int) []byte {
	p := aggregatetest.RealisticPod(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%06d", i), fmt.Sprint(100_000+i),
		map[string]string{"app": fmt.Sprintf("app-%d", i%20)})
	data, err := p.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return data
}
