// Command multicluster-runtime is multicluster-runtime's uniform reconciler on
// fleetwatch's provider: one controller, built with mcbuilder, that reads the ConfigMaps
// of every cluster and writes back to the cluster each one lives in.
//
//	go run . --kubeconfigs ~/.kube/config --snapshot /tmp/fleet.db
//
// Every kubeconfig context is a cluster. Each ConfigMap labelled
// fleetwatch.io/reconcile=true gets the annotation fleetwatch.io/reconciled-in with the
// name of its cluster, written through that cluster's client; the others are read only.
// With --snapshot, a restart reconciles from the snapshot before any apiserver answers,
// each cluster as soon as the snapshot's load has it (LoadSnapshotInBackground).
// The fleet keeps its objects encoded and compressed with a dictionary per resource
// (--encoding compressed-dict, the default: persist.Codec{Compress: true, Dictionary:
// true}), and the provider's reads decode them; from the benchmark's numbers, that holds
// a controller's objects in about a third of the heap of --encoding compressed (without
// the dictionaries) for the same CPU, and that in about half the heap of --encoding
// objects (plain maps). --encoding compact keeps them encoded but not compressed. --max-concurrent-syncs bounds how many clusters list at
// once on a cold start (fleetwatch.Options.MaxConcurrentSyncs).
//
// With --resource pods, the same controller reads the Pods of every cluster instead, and
// writes nothing (the benchmark's memory figures at a size where the objects, not the
// process, weigh most).
//
// With --provider kubeconfig, the same controller runs on multicluster-runtime's own
// kubeconfig provider instead, which reads the clusters' kubeconfigs from the Secrets
// labelled sigs.k8s.io/multicluster-runtime-kubeconfig=true in --namespace of the cluster
// that --kubeconfig reaches, and gives each cluster a cache of its own (the benchmark's
// peer). Its caches drop each object's managedFields (controller-runtime's
// cache.TransformStripManagedFields), as fleetwatch's default transforms do, unless
// --strip-managed-fields=false keeps them as controller-runtime does by default.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/maphash"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"
	kubeconfigprovider "sigs.k8s.io/multicluster-runtime/providers/kubeconfig"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/mcprovider"
	"github.com/fleetwatch/fleetwatch/persist"
)

// Label and annotation of the ConfigMaps the controller writes back to.
const (
	reconcileLabel         = "fleetwatch.io/reconcile"
	reconciledInAnnotation = "fleetwatch.io/reconciled-in"
)

func main() {
	os.Exit(run())
}

func run() int {
	provider := flag.String("provider", "fleetwatch", "cluster provider: fleetwatch, or kubeconfig (multicluster-runtime's)")
	kubeconfigs := flag.String("kubeconfigs", "", "fleetwatch: kubeconfig files or directories, comma-separated; every context is a cluster (default $KUBECONFIG, else ~/.kube/config)")
	snapshot := flag.String("snapshot", "", "fleetwatch: snapshot file, for warm restarts; empty for none")
	snapshotInterval := flag.Duration("snapshot-interval", persist.DefaultInterval, "fleetwatch: how often the snapshot is committed")
	encoding := flag.String("encoding", "compressed-dict", "fleetwatch: how the fleet keeps its objects (fleetwatch.Options.Encoding): objects (decoded, as maps), compact (in the snapshot's encoding, decoded when read: the library's default), compressed (compact, and compressed where S2 shortens an encoding by an eighth: persist.Codec{Compress: true}), or compressed-dict (compressed with a dictionary per resource: persist.Codec{Compress: true, Dictionary: true}); docs/benchmarks.md has the trade-off")
	maxConcurrentSyncs := flag.Int("max-concurrent-syncs", fleetwatch.DefaultMaxConcurrentSyncs, "fleetwatch: how many clusters do their initial list at once (fleetwatch.Options.MaxConcurrentSyncs); 1 lists them one after another, which engages the first cluster sooner where the apiservers share the controller's CPU (docs/benchmarks.md, \"The Pod controller's cold start\")")
	namespace := flag.String("namespace", "default", "kubeconfig: namespace of the kubeconfig Secrets")
	stripManagedFields := flag.Bool("strip-managed-fields", true, "kubeconfig: drop managedFields from the objects in each cluster's cache (controller-runtime's cache.TransformStripManagedFields), as fleetwatch's default transforms do; false keeps them, controller-runtime's default")
	resource := flag.String("resource", "configmaps", "what the controller reconciles: configmaps (read, and written back when labelled), or pods (read only)")
	namespaces := flag.String("namespaces", "", "the namespaces whose objects the controller caches and reconciles, comma-separated; empty for all (fleetwatch: informer.Resource.Namespaces; kubeconfig: each cluster's cache.Options.DefaultNamespaces)")
	printRequests := flag.Bool("print-requests", false, "print each request as 'reconcile <cluster> <namespace>/<name>' on stdout")
	memstatsAfter := flag.Int("memstats-after", 0, "for benchmarks: once this many distinct objects were reconciled, collect garbage and print 'memstats <heap bytes> <RSS bytes>' on stdout")
	memProfile := flag.String("memprofile", "", "for benchmarks: with --memstats-after, write a heap profile here once it has measured")
	cpuProfile := flag.String("cpuprofile", "", "for benchmarks: write a CPU profile of the whole process here")
	probeAddr := flag.String("health-probe-bind-address", "0", "address of /healthz and /readyz (0 disables them)")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	if *memProfile != "" {
		// A finer sample than the default 512 KiB, so that the profile tells the
		// holders of a few hundred KiB apart. Allocations before this line (package
		// init) are sampled at the default rate.
		runtime.MemProfileRate = 4096
	}
	ctrllog.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrllog.Log.WithName("example")

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Error(err, "Creating the CPU profile")
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Error(err, "Starting the CPU profile")
			return 1
		}
		defer pprof.StopCPUProfile()
	}

	var obj client.Object
	switch *resource {
	case "configmaps":
		obj = &corev1.ConfigMap{}
	case "pods":
		obj = &corev1.Pod{}
	default:
		log.Error(nil, "Unknown --resource; want configmaps or pods", "resource", *resource)
		return 2
	}

	var cached []string
	if *namespaces != "" {
		cached = strings.Split(*namespaces, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	managerOpts := mcmanager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: *probeAddr,
	}
	var mgr mcmanager.Manager
	switch *provider {
	case "fleetwatch":
		var files []string
		if *kubeconfigs != "" {
			files = strings.Split(*kubeconfigs, ",")
		}
		fwOpts := fleetwatch.Options{
			Clusters:           cluster.Options{Kubeconfigs: files},
			Resources:          []informer.Resource{{Name: *resource, Namespaces: cached}},
			MaxConcurrentSyncs: *maxConcurrentSyncs,
			Encoding:           fleetwatch.Encoding(*encoding),
		}
		if _, err := fwOpts.Encoding.Codec(); err != nil {
			log.Error(err, "Unknown --encoding")
			return 2
		}
		if *snapshot != "" {
			store, err := persist.Open(*snapshot, persist.Options{})
			if err != nil {
				log.Error(err, "Opening the snapshot")
				return 1
			}
			defer store.Close()
			fwOpts.Snapshot = store
			// Each cluster is engaged, and its controller's source started, as soon as the
			// snapshot's load has it, rather than after the whole file.
			fwOpts.LoadSnapshotInBackground = true
			fwOpts.SnapshotWriter.Interval = *snapshotInterval
		}
		fleet, err := fleetwatch.NewManager(fwOpts)
		if err != nil {
			log.Error(err, "Creating the fleet")
			return 1
		}
		p, err := mcprovider.New(fleet, mcprovider.Options{})
		if err != nil {
			log.Error(err, "Creating the provider")
			return 1
		}
		// The local manager of multicluster-runtime needs a config; with fleetwatch it
		// never reaches it: no controller runs on the local cluster.
		if mgr, err = mcmanager.New(&rest.Config{Host: "https://local.invalid"}, p, managerOpts); err != nil {
			log.Error(err, "Creating the manager")
			return 1
		}
	case "kubeconfig":
		cfg, err := ctrl.GetConfig()
		if err != nil {
			log.Error(err, "Reading the host cluster's kubeconfig")
			return 1
		}
		kcOpts := kubeconfigprovider.Options{Namespace: *namespace}
		if *stripManagedFields {
			kcOpts.ClusterOptions = append(kcOpts.ClusterOptions, func(o *crcluster.Options) {
				o.Cache.DefaultTransform = crcache.TransformStripManagedFields()
			})
		}
		if len(cached) > 0 {
			kcOpts.ClusterOptions = append(kcOpts.ClusterOptions, func(o *crcluster.Options) {
				o.Cache.DefaultNamespaces = map[string]crcache.Config{}
				for _, ns := range cached {
					o.Cache.DefaultNamespaces[ns] = crcache.Config{}
				}
			})
		}
		p := kubeconfigprovider.New(kcOpts)
		if mgr, err = mcmanager.New(cfg, p, managerOpts); err != nil {
			log.Error(err, "Creating the manager")
			return 1
		}
		if err := p.SetupWithManager(ctx, mgr); err != nil {
			log.Error(err, "Setting up the kubeconfig provider")
			return 1
		}
	default:
		log.Error(nil, "Unknown --provider; want fleetwatch or kubeconfig", "provider", *provider)
		return 2
	}
	if *probeAddr != "0" {
		_ = mgr.AddHealthzCheck("ping", healthz.Ping)
		_ = mgr.AddReadyzCheck("ping", healthz.Ping)
	}

	var out sync.Mutex
	// seen counts the distinct requests for --memstats-after by a hash of each: a set of
	// the requests themselves would hold their strings, which a provider that decodes
	// its objects on each read hands out afresh, and be counted as the cache's memory.
	// Two of 10,000 requests share a 64-bit hash with odds of about 3 in 10^12.
	seen := map[uint64]struct{}{}
	seed := maphash.MakeSeed()
	err := mcbuilder.ControllerManagedBy(mgr).
		Named(*resource).
		For(obj).
		Complete(mcreconcile.Func(func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
			var res ctrl.Result
			var err error
			if *resource == "pods" {
				err = readPod(ctx, mgr, req)
			} else {
				res, err = reconcile(ctx, mgr, req)
			}
			out.Lock()
			defer out.Unlock()
			if *printRequests {
				fmt.Printf("reconcile %s %s\n", req.ClusterName, req.NamespacedName)
			}
			if *memstatsAfter > 0 && len(seen) < *memstatsAfter {
				seen[maphash.Comparable(seed, req)] = struct{}{}
				if len(seen) == *memstatsAfter {
					go printMemstats(&out, *memProfile)
				}
			}
			return res, err
		}))
	if err != nil {
		log.Error(err, "Creating the controller")
		return 1
	}
	if err := mgr.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Error(err, "Manager stopped")
		return 1
	}
	return 0
}

// reconcile reads the ConfigMap of req from its cluster's cache and, if it asks for it,
// writes the name of its cluster into it, through the same cluster's client.
func reconcile(ctx context.Context, mgr mcmanager.Manager, req mcreconcile.Request) (ctrl.Result, error) {
	cl, err := mgr.GetCluster(ctx, req.ClusterName)
	if errors.Is(err, multicluster.ErrClusterNotFound) {
		return ctrl.Result{}, nil // the cluster left
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	cm := &corev1.ConfigMap{}
	if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Labels[reconcileLabel] != "true" || cm.Annotations[reconciledInAnnotation] == req.ClusterName.String() {
		return ctrl.Result{}, nil
	}
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[reconciledInAnnotation] = req.ClusterName.String()
	if err := cl.GetClient().Update(ctx, cm); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

// readPod reads the Pod of req from its cluster's cache.
func readPod(ctx context.Context, mgr mcmanager.Manager, req mcreconcile.Request) error {
	cl, err := mgr.GetCluster(ctx, req.ClusterName)
	if errors.Is(err, multicluster.ErrClusterNotFound) {
		return nil // the cluster left
	}
	if err != nil {
		return err
	}
	return client.IgnoreNotFound(cl.GetClient().Get(ctx, req.NamespacedName, &corev1.Pod{}))
}

// printMemstats collects garbage until the heap is live objects only, and prints the
// live heap and the RSS, as the contenders of fleetwatch's benchmark measure themselves;
// with profile set, it writes a heap profile there first.
func printMemstats(out *sync.Mutex, profile string) {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	status := map[string]uint64{}
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (strings.HasPrefix(k, "Rss") || k == "VmRSS") {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				status[k] = kb << 10
			}
		}
	}
	rss := status["VmRSS"]
	// Where the RSS beyond the live heap is, for the benchmark's logs.
	ctrllog.Log.WithName("memstats").Info("Measured", "heapAlloc", ms.HeapAlloc, "heapInuse", ms.HeapInuse,
		"heapIdle", ms.HeapIdle, "heapReleased", ms.HeapReleased, "stacks", ms.StackInuse, "gcSys", ms.GCSys,
		"otherSys", ms.OtherSys, "rssAnon", status["RssAnon"], "rssFile", status["RssFile"], "rssShmem", status["RssShmem"])
	if profile != "" {
		if f, err := os.Create(profile); err == nil {
			_ = pprof.WriteHeapProfile(f)
			_ = f.Close()
		}
	}
	out.Lock()
	defer out.Unlock()
	fmt.Printf("memstats %d %d\n", ms.HeapAlloc, rss)
}
