package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// Field managers of the loader: a controller owns spec and metadata, a "kubelet" owns
// status, and the stamper owns the stamp annotation of the watch phase. So each object
// carries managedFields as the apiserver writes them for several managers.
const (
	managerController = "bench-controller"
	managerKubelet    = "bench-kubelet"
	managerStamper    = "bench-stamper"
)

// benchNamespaces is the number of namespaces per cluster the objects are spread over.
const benchNamespaces = 10

// datasetVersion names the shape of the loaded objects; a cluster directory loaded with
// another version is topped up object by object, since the marker does not match.
const datasetVersion = "3"

// markerName is the configmap in "default" that records a completed load.
const markerName = "fleetwatch-bench-loaded"

func benchNamespace(i int) string { return fmt.Sprintf("bench-%02d", i%benchNamespaces) }
func podName(i int) string        { return fmt.Sprintf("pod-%06d", i) }
func configMapName(i int) string  { return fmt.Sprintf("cm-%06d", i) }

// writeConfig is an admin rest.Config without client-side rate limit: the loader and
// the stamper decide their rate themselves.
func writeConfig(c *testenv.Cluster) *rest.Config {
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = "fleetwatch-bench"
	return cfg
}

// dataset is what load writes to each cluster: pods and configmaps objects, the pods
// large (testenv.ApplyLargePod) or small (testenv.SmallPod).
type dataset struct {
	pods, configMaps int
	smallPods        bool
}

// version is the dataset's in the load marker: datasetVersion, suffixed for small pods.
func (ds dataset) version() string {
	if ds.smallPods {
		return datasetVersion + "-small"
	}
	return datasetVersion
}

// load makes sure that every cluster holds the dataset's objects, with workers
// concurrent writers per cluster. A cluster whose marker says it is loaded already (a
// kept --dir) is skipped; otherwise only the missing objects are written.
func load(ctx context.Context, env *testenv.Env, ds dataset, workers int) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range env.Clusters {
		g.Go(func() error {
			if err := loadCluster(ctx, c, ds, workers); err != nil {
				return fmt.Errorf("loading %s: %w", c.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func loadCluster(ctx context.Context, c *testenv.Cluster, ds dataset, workers int) error {
	pods, configMaps := ds.pods, ds.configMaps
	cfg := writeConfig(c)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	want := map[string]string{"pods": strconv.Itoa(pods), "configmaps": strconv.Itoa(configMaps), "version": ds.version()}
	if m, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Get(ctx, markerName, metav1.GetOptions{}); err == nil {
		if fmt.Sprint(m.Data) == fmt.Sprint(want) {
			log.Printf("%s: already loaded (%d pods, %d configmaps)", c.Name, pods, configMaps)
			return nil
		}
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	for i := range benchNamespaces {
		ns := corev1ac.Namespace(benchNamespace(i)).WithLabels(map[string]string{"team": fmt.Sprintf("team-%d", i)})
		if _, err := cs.CoreV1().Namespaces().Apply(ctx, ns, metav1.ApplyOptions{FieldManager: managerController, Force: true}); err != nil {
			return err
		}
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	havePods, err := existing(ctx, md, "pods")
	if err != nil {
		return err
	}
	haveCMs, err := existing(ctx, md, "configmaps")
	if err != nil {
		return err
	}
	type job struct {
		pod bool
		i   int
	}
	jobs := make(chan job, workers)
	var done atomic.Int64
	start := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(jobs)
		for i := range max(pods, configMaps) {
			for _, j := range []job{{pod: true, i: i}, {pod: false, i: i}} {
				if j.pod && (i >= pods || havePods[benchNamespace(i)+"/"+podName(i)]) ||
					!j.pod && (i >= configMaps || haveCMs[benchNamespace(i)+"/"+configMapName(i)]) {
					continue
				}
				select {
				case jobs <- j:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
		}
		return nil
	})
	for range workers {
		g.Go(func() error {
			for j := range jobs {
				var err error
				switch {
				case j.pod && ds.smallPods:
					ns := benchNamespace(j.i)
					_, err = cs.CoreV1().Pods(ns).Apply(gctx, testenv.SmallPod(ns, podName(j.i), j.i),
						metav1.ApplyOptions{FieldManager: managerController, Force: true})
				case j.pod:
					err = testenv.ApplyLargePod(gctx, cs, benchNamespace(j.i), podName(j.i), j.i, managerController, managerKubelet)
				default:
					_, err = cs.CoreV1().ConfigMaps(benchNamespace(j.i)).Apply(gctx, configMapApply(j.i),
						metav1.ApplyOptions{FieldManager: managerController, Force: true})
				}
				if err != nil {
					return err
				}
				if n := done.Add(1); n%5000 == 0 {
					log.Printf("%s: %d objects written (%.0f/s)", c.Name, n, float64(n)/time.Since(start).Seconds())
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if n := done.Load(); n > 0 {
		log.Printf("%s: %d objects written in %v (%.0f/s)", c.Name, n, time.Since(start).Round(time.Second), float64(n)/time.Since(start).Seconds())
	}
	marker := corev1ac.ConfigMap(markerName, metav1.NamespaceDefault).WithData(want)
	_, err = cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Apply(ctx, marker, metav1.ApplyOptions{FieldManager: managerController, Force: true})
	return err
}

// existing returns the namespace/name of the resource's objects in the bench namespaces.
func existing(ctx context.Context, md metadata.Interface, resource string) (map[string]bool, error) {
	out := map[string]bool{}
	gvr := corev1.SchemeGroupVersion.WithResource(resource)
	opts := metav1.ListOptions{Limit: 5000}
	for {
		list, err := md.Resource(gvr).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, item := range list.Items {
			out[item.Namespace+"/"+item.Name] = true
		}
		if list.Continue == "" {
			return out, nil
		}
		opts.Continue = list.Continue
	}
}

func configMapApply(i int) *corev1ac.ConfigMapApplyConfiguration {
	app := testenv.BenchApps[i%len(testenv.BenchApps)]
	ns := benchNamespace(i)
	props := ""
	for k := range 20 {
		props += fmt.Sprintf("%s.setting.%02d=value-%d-%d\n", app, k, i, k)
	}
	return corev1ac.ConfigMap(configMapName(i), ns).
		WithLabels(map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "tier": testenv.BenchTier(app)}).
		WithAnnotations(map[string]string{"meta.helm.sh/release-name": app, "meta.helm.sh/release-namespace": ns}).
		WithData(map[string]string{
			"application.properties": props,
			"logging.yaml":           "level: info\nformat: json\noutputs:\n  - stdout\n",
			"features.json":          fmt.Sprintf(`{"newCheckout":%t,"recommendations":true,"rollout":%d}`, i%2 == 0, i%100),
		})
}

// stamper writes the stamp annotation on pods at a fixed total rate, spread round-robin
// over the clusters, for a duration. The stamp is the time just before the request.
type stamper struct {
	clients []kubernetes.Interface
	pods    int
}

func newStamper(env *testenv.Env, pods int) (*stamper, error) {
	s := &stamper{pods: pods}
	for _, c := range env.Clusters {
		cs, err := kubernetes.NewForConfig(writeConfig(c))
		if err != nil {
			return nil, err
		}
		s.clients = append(s.clients, cs)
	}
	return s, nil
}

// run writes at rate writes per second for d, open-loop: a slow answer does not delay
// the next write. It returns the number of writes that succeeded; offset picks the
// first pod, so that successive runs touch other pods.
func (s *stamper) run(ctx context.Context, rate float64, d time.Duration, offset int) (int, error) {
	total := int(rate * d.Seconds())
	type write struct{ cluster, pod int }
	writes := make(chan write, total)
	var ok atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for w := range writes {
				ns, name := benchNamespace(w.pod), podName(w.pod)
				patch, _ := json.Marshal(map[string]any{
					"apiVersion": "v1", "kind": "Pod",
					"metadata": map[string]any{"namespace": ns, "name": name,
						"annotations": map[string]string{stampAnnotation: strconv.FormatInt(time.Now().UnixNano(), 10)}},
				})
				_, err := s.clients[w.cluster].CoreV1().Pods(ns).Patch(ctx, name, types.ApplyPatchType, patch,
					metav1.PatchOptions{FieldManager: managerStamper, Force: new(true)})
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				ok.Add(1)
			}
		})
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for k := range total {
		if wait := time.Until(start.Add(time.Duration(k) * interval)); wait > 0 {
			time.Sleep(wait)
		}
		writes <- write{cluster: k % len(s.clients), pod: (offset + k/len(s.clients)) % s.pods}
	}
	close(writes)
	wg.Wait()
	return int(ok.Load()), firstErr
}
