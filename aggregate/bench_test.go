package aggregate_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// The benchmarks come in pairs, .../fleetwatch and .../clientgo, doing the same work on
// the same 10,000 unstructured pods spread over 3 clusters: fleetwatch through its
// public API, client-go through cache.NewIndexer with a namespace and a label index.
// Pod names are unique across clusters so that client-go's namespace/name keys hold all
// of them too.

const benchPods = 10_000

var benchClusters = []string{"prod-eu", "prod-us", "staging"}

type benchPod struct {
	cluster   string
	v1, v2    *unstructured.Unstructured // same labels, different resourceVersions
	key       aggregate.Key
	clientKey string
}

var benchData = sync.OnceValue(func() []benchPod {
	out := make([]benchPod, benchPods)
	for i := range out {
		c := benchClusters[i%len(benchClusters)]
		v1 := aggregatetest.Pod(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%05d", i), strconv.Itoa(1000+i),
			map[string]string{"app": fmt.Sprintf("app-%d", i%20), "tier": fmt.Sprintf("tier-%d", i%3)})
		_ = unstructured.SetNestedField(v1.Object, fmt.Sprintf("node-%d", i%50), "spec", "nodeName")
		v2 := aggregatetest.WithRV(v1, strconv.Itoa(1_000_000+i))
		v2.SetAnnotations(map[string]string{"updated": "true"})
		out[i] = benchPod{
			cluster:   c,
			v1:        v1,
			v2:        v2,
			key:       aggregate.Key{Cluster: c, Namespace: v1.GetNamespace(), Name: v1.GetName()},
			clientKey: v1.GetNamespace() + "/" + v1.GetName(),
		}
	}
	return out
})

// labelIndexFunc is the client-go equivalent of the built-in label index.
func labelIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	ls := m.GetLabels()
	out := make([]string, 0, len(ls))
	for k, v := range ls {
		out = append(out, k+"="+v)
	}
	return out, nil
}

func newClientGoIndexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"label":              labelIndexFunc,
	})
}

// benchFleet returns a fleet and its pod stores by cluster, filled with v1 if fill.
func benchFleet(b *testing.B, fill bool) (*aggregate.Fleet, map[string]*aggregate.ClusterStore) {
	f := aggregate.New(aggregate.Options{})
	stores := make(map[string]*aggregate.ClusterStore)
	for _, c := range benchClusters {
		stores[c] = f.ClusterStore(c, aggregatetest.Pods)
	}
	if fill {
		for _, p := range benchData() {
			if err := stores[p.cluster].Apply(p.v1, true); err != nil {
				b.Fatal(err)
			}
		}
		for _, s := range stores {
			s.MarkSynced()
		}
	}
	return f, stores
}

func benchClientGo(b *testing.B, fill bool) cache.Indexer {
	ix := newClientGoIndexer()
	if fill {
		for _, p := range benchData() {
			if err := ix.Add(p.v1); err != nil {
				b.Fatal(err)
			}
		}
	}
	return ix
}

func BenchmarkIndexer(b *testing.B) {
	pods := benchData()

	b.Run("Add/fleetwatch", func(b *testing.B) {
		b.ReportAllocs()
		var stores map[string]*aggregate.ClusterStore
		for i := 0; i < b.N; i++ {
			if i%benchPods == 0 {
				b.StopTimer()
				_, stores = benchFleet(b, false)
				b.StartTimer()
			}
			p := &pods[i%benchPods]
			if err := stores[p.cluster].Apply(p.v1, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Add/clientgo", func(b *testing.B) {
		b.ReportAllocs()
		var ix cache.Indexer
		for i := 0; i < b.N; i++ {
			if i%benchPods == 0 {
				b.StopTimer()
				ix = benchClientGo(b, false)
				b.StartTimer()
			}
			if err := ix.Add(pods[i%benchPods].v1); err != nil {
				b.Fatal(err)
			}
		}
	})

	// Update alternates every pod between v2 and v1: a real change of resourceVersion
	// and annotations, with the same labels.
	version := func(p *benchPod, i int) *unstructured.Unstructured {
		if (i/benchPods)%2 == 0 {
			return p.v2
		}
		return p.v1
	}
	b.Run("Update/fleetwatch", func(b *testing.B) {
		_, stores := benchFleet(b, true)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p := &pods[i%benchPods]
			if err := stores[p.cluster].Apply(version(p, i), false); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Update/clientgo", func(b *testing.B) {
		ix := benchClientGo(b, true)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := ix.Update(version(&pods[i%benchPods], i)); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("Get/fleetwatch", func(b *testing.B) {
		f, _ := benchFleet(b, true)
		ix := f.Indexer(aggregatetest.Pods)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, ok := ix.Get(pods[i%benchPods].key); !ok {
				b.Fatal("missing")
			}
		}
	})
	b.Run("Get/clientgo", func(b *testing.B) {
		ix := benchClientGo(b, true)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, ok, _ := ix.GetByKey(pods[i%benchPods].clientKey); !ok {
				b.Fatal("missing")
			}
		}
	})

	// Get through a lister of one namespace, the way controllers read: client-go's
	// lister builds the namespace/name key on every call.
	b.Run("ListerGet/fleetwatch", func(b *testing.B) {
		f, _ := benchFleet(b, true)
		l := f.Lister(aggregatetest.Pods)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p := &pods[i%benchPods]
			if _, err := l.Cluster(p.cluster).ByNamespace(p.key.Namespace).Get(p.key.Name); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListerGet/clientgo", func(b *testing.B) {
		l := cache.NewGenericLister(benchClientGo(b, true), aggregatetest.Pods.GroupResource())
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			p := &pods[i%benchPods]
			if _, err := l.ByNamespace(p.key.Namespace).Get(p.key.Name); err != nil {
				b.Fatal(err)
			}
		}
	})

	byIndex := []struct {
		name, fleetIndex, clientIndex, value string
		want                                 int
	}{
		{"ByNamespace", aggregate.IndexNamespace, cache.NamespaceIndex, "ns-3", benchPods / 10},
		{"ByLabel", aggregate.IndexLabel, "label", "app=app-7", benchPods / 20},
	}
	for _, bi := range byIndex {
		b.Run(bi.name+"/fleetwatch", func(b *testing.B) {
			f, _ := benchFleet(b, true)
			ix := f.Indexer(aggregatetest.Pods)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				objs, err := ix.ByIndex(bi.fleetIndex, bi.value)
				if err != nil || len(objs) != bi.want {
					b.Fatalf("got %d, %v", len(objs), err)
				}
			}
		})
		b.Run(bi.name+"/clientgo", func(b *testing.B) {
			ix := benchClientGo(b, true)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				objs, err := ix.ByIndex(bi.clientIndex, bi.value)
				if err != nil || len(objs) != bi.want {
					b.Fatalf("got %d, %v", len(objs), err)
				}
			}
		})
	}

	// A lister List with a label selector: client-go's lister scans every object.
	selector := labels.SelectorFromSet(labels.Set{"app": "app-7"})
	b.Run("ListSelector/fleetwatch", func(b *testing.B) {
		f, _ := benchFleet(b, true)
		l := f.Lister(aggregatetest.Pods)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			objs, err := l.List(selector)
			if err != nil || len(objs) != benchPods/20 {
				b.Fatalf("got %d, %v", len(objs), err)
			}
		}
	})
	b.Run("ListSelector/clientgo", func(b *testing.B) {
		l := cache.NewGenericLister(benchClientGo(b, true), aggregatetest.Pods.GroupResource())
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			objs, err := l.List(selector)
			if err != nil || len(objs) != benchPods/20 {
				b.Fatalf("got %d, %v", len(objs), err)
			}
		}
	})
}

// listThenWatch is a ListWatch that tells the reflector to list, then watch, rather than
// expect a streaming list (the fake watch sends no initial-events bookmark).
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// BenchmarkFanOut measures an update delivered to every handler: from the write until
// each handler's OnEvent has seen it. The client-go side is a SharedIndexInformer fed
// by a fake watch, its standard way to fan events out to handlers; it also pays for the
// reflector and the DeltaFIFO, which fleetwatch's informers pay before ClusterStore.
func BenchmarkFanOut(b *testing.B) {
	pods := benchData()
	version := func(p *benchPod, i int) *unstructured.Unstructured {
		if (i/benchPods)%2 == 0 {
			return p.v2
		}
		return p.v1
	}
	for _, handlers := range []int{1, 4} {
		b.Run(fmt.Sprintf("handlers=%d/fleetwatch", handlers), func(b *testing.B) {
			f, stores := benchFleet(b, true)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = f.Start(ctx) }()
			var target atomic.Int64
			target.Store(-1)
			counts := make([]atomic.Int64, handlers)
			done := make(chan struct{}, handlers)
			for h := range handlers {
				reg, err := f.AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
					if e.InitialList {
						return
					}
					if counts[h].Add(1) == target.Load() {
						done <- struct{}{}
					}
				}), aggregate.HandlerOptions{MaxBacklog: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				<-reg.HasSyncedChecker().Done()
			}
			target.Store(int64(b.N))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := &pods[i%benchPods]
				if err := stores[p.cluster].Apply(version(p, i), false); err != nil {
					b.Fatal(err)
				}
			}
			for range handlers {
				<-done
			}
		})
		b.Run(fmt.Sprintf("handlers=%d/clientgo", handlers), func(b *testing.B) {
			watcher := watch.NewFakeWithChanSize(1024, false)
			list := &unstructured.UnstructuredList{}
			list.SetResourceVersion("1")
			for _, p := range pods {
				list.Items = append(list.Items, *p.v1)
			}
			informer := cache.NewSharedIndexInformerWithOptions(listThenWatch{&cache.ListWatch{
				ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					return list.DeepCopy(), nil
				},
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
					return watcher, nil
				},
			}}, &unstructured.Unstructured{}, cache.SharedIndexInformerOptions{
				Indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "label": labelIndexFunc},
			})
			var target atomic.Int64
			target.Store(-1)
			counts := make([]atomic.Int64, handlers)
			done := make(chan struct{}, handlers)
			var regs []cache.ResourceEventHandlerRegistration
			for h := range handlers {
				reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
					UpdateFunc: func(any, any) {
						if counts[h].Add(1) == target.Load() {
							done <- struct{}{}
						}
					},
				})
				if err != nil {
					b.Fatal(err)
				}
				regs = append(regs, reg)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go informer.RunWithContext(ctx)
			for _, reg := range regs {
				for !reg.HasSynced() {
					time.Sleep(time.Millisecond)
				}
			}
			target.Store(int64(b.N))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p := &pods[i%benchPods]
				watcher.Modify(version(p, i))
			}
			for range handlers {
				<-done
			}
		})
	}
}
