package mcprovider_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	fwcluster "github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/mcprovider"
	"github.com/fleetwatch/fleetwatch/persist"
)

// BenchmarkRead measures the reads of issue #37's goals against their peers, on the same
// pods read by every cache from the same real apiservers (internal/testenv): a cluster
// "large" of readPods large pods (testenv.LargePod, the pods of make bench) and a cluster
// "small" of readPods small pods (testenv.SmallPod), over 10 namespaces. Every cache
// drops managedFields, as the fleet does by default, so that each holds the same
// objects; setup checks that a Get of each gives equal pods.
//
// Get/<shape>/<reader> reads the pods one after the other; List/<shape>/<reader> reads a
// namespace (readPods/10 pods) after another. The readers:
//   - controller-runtime: its cache's Get and List of *corev1.Pod, each object deep-copied
//     (the default); controller-runtime-nocopy: the same with client.UnsafeDisableDeepCopy,
//     which is what cache.Options.DefaultUnsafeDisableDeepCopy sets for every read;
//   - clientgo: a typed informer's lister, each object deep-copied, as a controller that
//     modifies what it reads must;
//   - fleetwatch-untyped: the fleet's Lister (the cached *unstructured.Unstructured, not
//     a copy), over a plain fleet and a compact one (persist.Codec{}); the compact fleet's
//     Get reads its keys in turn (cold: nearly every Get decodes) and, as -hot, among 100
//     keys that its hot set keeps decoded;
//   - fleetwatch-typed: aggregate.TypedLister[corev1.Pod], a fresh *corev1.Pod per object;
//     -typed-memo: the same with a memo of typed objects (TypedListerOptions.Memo) that
//     keeps every pod read, each read a copy of the one kept after the first pass;
//   - mcprovider: the cache of the cluster that a multicluster-runtime controller reads,
//     Get and List of *corev1.Pod, with Options.TypedObjects large enough to keep every
//     pod read typed.
//
// Beside ns/op, each Get reports the p50 and p99 of single calls (p50-ns, p99-ns). The
// apiservers are started once for the test binary, by the first BenchmarkRead, and
// stopped by TestMain; hack/build-tools.sh provides their binaries.
func BenchmarkRead(b *testing.B) {
	env := readEnvironment(b)
	for _, shape := range readShapes {
		for _, r := range env.readers(shape) {
			b.Run("Get/"+shape+"/"+r.name, func(b *testing.B) {
				timeEach(b, func(i int) {
					if err := r.get(podKey(i % r.keys)); err != nil {
						b.Fatal(err)
					}
				})
			})
		}
		for _, r := range env.readers(shape) {
			if r.list == nil {
				continue
			}
			b.Run("List/"+shape+"/"+r.name, func(b *testing.B) {
				timeEach(b, func(i int) {
					n, err := r.list(namespace(i))
					if err != nil {
						b.Fatal(err)
					}
					if n != readPods/readNamespaces {
						b.Fatalf("listed %d pods of %s, want %d", n, namespace(i), readPods/readNamespaces)
					}
				})
			})
		}
	}
}

// TestMain stops the apiservers that BenchmarkRead started.
func TestMain(m *testing.M) {
	// controller-runtime's caches log through it, and warn with a stack trace without one.
	ctrllog.SetLogger(klog.NewKlogr())
	code := m.Run()
	if readEnvClose != nil {
		if err := readEnvClose(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the read benchmarks' clusters:", err)
		}
	}
	os.Exit(code)
}

const (
	// readPods is the number of pods of each cluster of BenchmarkRead.
	readPods = 3000
	// readNamespaces spreads them, as make bench does.
	readNamespaces = 10
	// hotKeys is the number of keys that a -hot reader reads in turn, fewer than a
	// compact fleet's hot set (aggregate.DefaultHotObjects).
	hotKeys = 100
)

// readShapes are the clusters of BenchmarkRead, named after the pods they hold.
var readShapes = []string{"large", "small"}

func namespace(i int) string { return fmt.Sprintf("bench-%02d", i%readNamespaces) }

// podKey is the key of pod i, in the namespace in which it is loaded.
func podKey(i int) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace(i), Name: fmt.Sprintf("pod-%06d", i)}
}

// reader is one way to read the pods of one cluster.
type reader struct {
	name string
	// keys is the number of keys that Get reads in turn.
	keys int
	get  func(key client.ObjectKey) error
	// list reads the pods of a namespace and returns how many; nil for a reader whose
	// List another reader measures already.
	list func(namespace string) (int, error)
}

// readEnv holds the caches of BenchmarkRead, each synced with both clusters.
type readEnv struct {
	// cr and clientgo are controller-runtime's cache and a client-go informer of each
	// cluster, by its name.
	cr       map[string]cache.Cache
	clientgo map[string]corelisters.PodLister
	// plain and compact are Providers over a plain and a compact fleet, each with its
	// engaged clusters.
	plain, compact *fleetReader
}

// fleetReader is a Provider over a fleet of both clusters.
type fleetReader struct {
	fleet    *aggregate.Fleet
	typed    *aggregate.TypedLister[corev1.Pod]
	memo     *aggregate.TypedLister[corev1.Pod]
	clusters map[string]cluster.Cluster
}

var (
	readEnvOnce = sync.OnceValues(startReadEnv)
	// readEnvClose stops what startReadEnv started; nil if it did not run.
	readEnvClose func() error
)

func readEnvironment(b *testing.B) *readEnv {
	env, err := readEnvOnce()
	if err != nil {
		b.Fatal(err)
	}
	return env
}

// readers returns the readers of the cluster shape.
func (e *readEnv) readers(shape string) []reader {
	ctx := context.Background()
	cr, lister := e.cr[shape], e.clientgo[shape]
	crGet := func(opts ...client.GetOption) func(client.ObjectKey) error {
		return func(key client.ObjectKey) error { return cr.Get(ctx, key, &corev1.Pod{}, opts...) }
	}
	crList := func(opts ...client.ListOption) func(string) (int, error) {
		return func(ns string) (int, error) {
			var l corev1.PodList
			err := cr.List(ctx, &l, append(opts, client.InNamespace(ns))...)
			return len(l.Items), err
		}
	}
	out := []reader{
		{name: "controller-runtime", keys: readPods, get: crGet(), list: crList()},
		{name: "controller-runtime-nocopy", keys: readPods, get: crGet(client.UnsafeDisableDeepCopy), list: crList(client.UnsafeDisableDeepCopy)},
		{name: "clientgo", keys: readPods,
			get: func(key client.ObjectKey) error {
				p, err := lister.Pods(key.Namespace).Get(key.Name)
				if err == nil {
					_ = p.DeepCopy()
				}
				return err
			},
			list: func(ns string) (int, error) {
				pods, err := lister.Pods(ns).List(labels.Everything())
				for _, p := range pods {
					_ = p.DeepCopy()
				}
				return len(pods), err
			}},
	}
	for _, f := range []struct {
		name string
		r    *fleetReader
	}{{"fleetwatch", e.plain}, {"fleetwatch-compact", e.compact}} {
		untyped := f.r.fleet.Lister(podsGVR).Cluster(shape)
		typed, memo := f.r.typed.Cluster(shape), f.r.memo.Cluster(shape)
		cl := f.r.clusters[shape].GetCache()
		get := func(key client.ObjectKey) error {
			_, err := untyped.ByNamespace(key.Namespace).Get(key.Name)
			return err
		}
		out = append(out, reader{name: f.name + "-untyped", keys: readPods, get: get,
			list: func(ns string) (int, error) {
				objs, err := untyped.ByNamespace(ns).List(labels.Everything())
				return len(objs), err
			}})
		if f.r == e.compact {
			out = append(out, reader{name: f.name + "-untyped-hot", keys: hotKeys, get: get})
		}
		out = append(out,
			reader{name: f.name + "-typed", keys: readPods,
				get: func(key client.ObjectKey) error {
					_, err := typed.Namespace(key.Namespace).Get(key.Name)
					return err
				},
				list: func(ns string) (int, error) {
					pods, err := typed.Namespace(ns).List(labels.Everything())
					return len(pods), err
				}},
			reader{name: f.name + "-typed-memo", keys: readPods,
				get: func(key client.ObjectKey) error {
					_, err := memo.Namespace(key.Namespace).Get(key.Name)
					return err
				},
				list: func(ns string) (int, error) {
					pods, err := memo.Namespace(ns).List(labels.Everything())
					return len(pods), err
				}},
			reader{name: "mcprovider-" + f.name, keys: readPods,
				get: func(key client.ObjectKey) error { return cl.Get(ctx, key, &corev1.Pod{}) },
				list: func(ns string) (int, error) {
					var l corev1.PodList
					err := cl.List(ctx, &l, client.InNamespace(ns))
					return len(l.Items), err
				}},
		)
	}
	return out
}

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// startReadEnv starts the clusters, loads them, starts every cache, waits until each
// has synced, and checks that they hold the same pods.
func startReadEnv() (_ *readEnv, err error) {
	ctx, cancel := context.WithCancel(context.Background())
	tenv, err := testenv.Start(ctx, testenv.Options{Names: readShapes})
	if err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	var runErrs []error
	var errMu sync.Mutex
	run := func(name string, start func(context.Context) error) {
		wg.Go(func() {
			if err := start(ctx); err != nil && ctx.Err() == nil {
				errMu.Lock()
				runErrs = append(runErrs, fmt.Errorf("%s: %w", name, err))
				errMu.Unlock()
			}
		})
	}
	readEnvClose = func() error {
		cancel()
		wg.Wait()
		return errors.Join(append(runErrs, tenv.Close())...)
	}
	defer func() {
		if err != nil {
			_ = readEnvClose()
			readEnvClose = nil
		}
	}()

	g, gctx := errgroup.WithContext(ctx)
	for _, c := range tenv.Clusters {
		g.Go(func() error { return loadPods(gctx, c) })
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("loading the pods: %w", err)
	}

	e := &readEnv{cr: map[string]cache.Cache{}, clientgo: map[string]corelisters.PodLister{}}
	for _, c := range tenv.Clusters {
		cr, err := cache.New(c.RESTConfig(), cache.Options{Scheme: scheme.Scheme, DefaultTransform: cache.TransformStripManagedFields()})
		if err != nil {
			return nil, err
		}
		if _, err := cr.GetInformer(ctx, &corev1.Pod{}); err != nil {
			return nil, err
		}
		run("controller-runtime cache of "+c.Name, cr.Start)
		factory := informers.NewSharedInformerFactoryWithOptions(kubernetes.NewForConfigOrDie(c.RESTConfig()), 0,
			informers.WithTransform(cache.TransformStripManagedFields()))
		pods := factory.Core().V1().Pods()
		pods.Informer()
		factory.Start(ctx.Done())
		e.cr[c.Name], e.clientgo[c.Name] = cr, pods.Lister()
	}
	if e.plain, err = startFleet(ctx, tenv, aggregate.Options{}, run); err != nil {
		return nil, err
	}
	if e.compact, err = startFleet(ctx, tenv, aggregate.Options{Codec: persist.Codec{}}, run); err != nil {
		return nil, err
	}
	syncCtx, syncCancel := context.WithTimeout(ctx, 5*time.Minute)
	defer syncCancel()
	for name, cr := range e.cr {
		if !cr.WaitForCacheSync(syncCtx) {
			return nil, fmt.Errorf("controller-runtime's cache of %s did not sync", name)
		}
	}
	for name, l := range e.clientgo {
		if err := waitFor(syncCtx, func() bool {
			pods, _ := l.List(labels.Everything())
			return len(pods) >= readPods
		}); err != nil {
			return nil, fmt.Errorf("the client-go informer of %s: %w", name, err)
		}
	}
	return e, e.check(ctx)
}

// startFleet starts a Provider over a fleet of the clusters of tenv with opts, and waits
// until it has engaged each of them.
func startFleet(ctx context.Context, tenv *testenv.Env, opts aggregate.Options, run func(string, func(context.Context) error)) (*fleetReader, error) {
	fwOpts := fleetwatch.Options{
		Clusters:        fwcluster.Options{Kubeconfigs: []string{tenv.Kubeconfig}},
		Resources:       []informer.Resource{{Name: "pods"}},
		Fleet:           opts,
		DisableGCTuning: true,
	}
	if opts.Codec == nil {
		fwOpts.Encoding = fleetwatch.EncodingObjects // a plain fleet
	}
	mgr, err := fleetwatch.NewManager(fwOpts)
	if err != nil {
		return nil, err
	}
	// Every key that a Get reads in turn fits among the typed objects kept, so that after
	// the first pass every typed read of mcprovider copies one (the default keeps
	// fewer: a Get of more distinct keys in turn than it keeps converts every time).
	p, err := mcprovider.New(mgr, mcprovider.Options{TypedObjects: len(readShapes) * readPods})
	if err != nil {
		return nil, err
	}
	typed, err := aggregate.NewTypedLister[corev1.Pod](mgr.Fleet(), podsGVR, scheme.Scheme)
	if err != nil {
		return nil, err
	}
	memo, err := aggregate.NewTypedListerWithOptions[corev1.Pod](mgr.Fleet(), podsGVR, scheme.Scheme,
		aggregate.TypedListerOptions{Memo: aggregate.NewTypedMemo(len(readShapes) * readPods)})
	if err != nil {
		return nil, err
	}
	engage := awareFunc(func(context.Context, multicluster.ClusterName, cluster.Cluster) error { return nil })
	run("provider", func(ctx context.Context) error { return p.Start(ctx, engage) })
	fr := &fleetReader{fleet: mgr.Fleet(), typed: typed, memo: memo, clusters: map[string]cluster.Cluster{}}
	syncCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for _, c := range tenv.Clusters {
		if err := waitFor(syncCtx, func() bool {
			cl, err := p.Get(ctx, multicluster.ClusterName(c.Name))
			fr.clusters[c.Name] = cl
			return err == nil
		}); err != nil {
			return nil, fmt.Errorf("cluster %s not engaged: %w", c.Name, err)
		}
	}
	return fr, nil
}

// check reads pods of each cluster through every reader that returns a typed pod, and
// fails unless they are equal.
func (e *readEnv) check(ctx context.Context) error {
	for _, shape := range readShapes {
		for _, i := range []int{0, readPods / 2, readPods - 1} {
			key := podKey(i)
			var want corev1.Pod
			if err := e.cr[shape].Get(ctx, key, &want); err != nil {
				return err
			}
			got := map[string]*corev1.Pod{}
			p, err := e.clientgo[shape].Pods(key.Namespace).Get(key.Name)
			if err != nil {
				return err
			}
			got["clientgo"] = p
			for name, f := range map[string]*fleetReader{"fleetwatch": e.plain, "fleetwatch-compact": e.compact} {
				if got[name+"-typed"], err = f.typed.Cluster(shape).Namespace(key.Namespace).Get(key.Name); err != nil {
					return err
				}
				for range 2 { // the second from the memo
					if got[name+"-typed-memo"], err = f.memo.Cluster(shape).Namespace(key.Namespace).Get(key.Name); err != nil {
						return err
					}
				}
				var p corev1.Pod
				if err := f.clusters[shape].GetCache().Get(ctx, key, &p); err != nil {
					return err
				}
				got["mcprovider-"+name] = &p
			}
			want.TypeMeta = metav1.TypeMeta{}
			for name, p := range got {
				p = p.DeepCopy()
				p.TypeMeta = metav1.TypeMeta{}
				if !equality.Semantic.DeepEqual(&want, p) {
					return fmt.Errorf("%s %s: %s's pod differs from controller-runtime's: %s", shape, key, name, diff.Diff(&want, p))
				}
			}
		}
	}
	return nil
}

// loadPods writes the pods of c, large or small after its name, where they are missing.
func loadPods(ctx context.Context, c *testenv.Cluster) error {
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for i := range readNamespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace(i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	const workers = 16
	g, gctx := errgroup.WithContext(ctx)
	for w := range workers {
		g.Go(func() error {
			for i := w; i < readPods; i += workers {
				key := podKey(i)
				var err error
				if c.Name == "large" {
					err = testenv.ApplyLargePod(gctx, cs, key.Namespace, key.Name, i, "bench-controller", "bench-kubelet")
				} else {
					_, err = cs.CoreV1().Pods(key.Namespace).Apply(gctx, testenv.SmallPod(key.Namespace, key.Name, i),
						metav1.ApplyOptions{FieldManager: "bench-controller", Force: true})
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// awareFunc is a multicluster.Aware of a function.
type awareFunc func(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error

func (f awareFunc) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	return f(ctx, name, cl)
}

// maxSamples bounds the latencies that timeEach keeps.
const maxSamples = 1 << 20

// timeEach runs op(i) for i in [0, b.N), times single calls (every call, or evenly
// spread ones when b.N is large), and reports their p50 and p99 in nanoseconds next to
// ns/op, as aggregate's BenchmarkRead does. The clock reads add about 2 × 20–40 ns to
// each sample, not to ns/op.
func timeEach(b *testing.B, op func(i int)) {
	stride := b.N/maxSamples + 1
	samples := make([]time.Duration, 0, b.N/stride+1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%stride != 0 {
			op(i)
			continue
		}
		t := time.Now()
		op(i)
		samples = append(samples, time.Since(t))
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds()), "p99-ns")
}
