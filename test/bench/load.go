package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
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
// large (applyPod) or small (smallPodApply).
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
					_, err = cs.CoreV1().Pods(ns).Apply(gctx, smallPodApply(ns, podName(j.i), j.i),
						metav1.ApplyOptions{FieldManager: managerController, Force: true})
				case j.pod:
					err = applyPod(gctx, cs, j.i)
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

var apps = []string{"checkout", "cart", "catalog", "payments", "search", "recommend", "frontend", "shipping"}

func tierOf(app string) string {
	switch app {
	case "payments", "cart":
		return "backend"
	case "frontend":
		return "web"
	default:
		return "service"
	}
}

// templateHash is a stable fake pod-template-hash of an app.
func templateHash(app string) string {
	sum := sha256.Sum256([]byte(app))
	return hex.EncodeToString(sum[:])[:10]
}

// applyPod writes pod i as a controller and a kubelet would: spec and metadata, then
// status through the status subresource.
func applyPod(ctx context.Context, cs kubernetes.Interface, i int) error {
	ns, name := benchNamespace(i), podName(i)
	opts := metav1.ApplyOptions{FieldManager: managerController, Force: true}
	if _, err := cs.CoreV1().Pods(ns).Apply(ctx, podApply(ns, name, i), opts); err != nil {
		return err
	}
	opts.FieldManager = managerKubelet
	_, err := cs.CoreV1().Pods(ns).ApplyStatus(ctx, podStatusApply(ns, name, i), opts)
	return err
}

func podApply(ns, name string, i int) *corev1ac.PodApplyConfiguration {
	app := apps[i%len(apps)]
	hash := templateHash(app)
	labels := map[string]string{
		"app.kubernetes.io/name":     app,
		"app.kubernetes.io/instance": app + "-" + ns,
		"app.kubernetes.io/version":  "1.14.2",
		"app.kubernetes.io/part-of":  "shop",
		"tier":                       tierOf(app),
		"pod-template-hash":          hash,
	}
	sum := sha256.Sum256([]byte(ns + name))
	annotations := map[string]string{
		"prometheus.io/scrape":                           "true",
		"prometheus.io/port":                             "9090",
		"kubectl.kubernetes.io/default-container":        app,
		"checksum/config":                                hex.EncodeToString(sum[:]),
		"sidecar.istio.io/status":                        `{"initContainers":null,"containers":["istio-proxy"],"volumes":["istio-envoy","istio-data"],"imagePullSecrets":null,"revision":"default"}`,
		"cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
	}
	env := func(kv ...string) []*corev1ac.EnvVarApplyConfiguration {
		var out []*corev1ac.EnvVarApplyConfiguration
		for j := 0; j+1 < len(kv); j += 2 {
			out = append(out, corev1ac.EnvVar().WithName(kv[j]).WithValue(kv[j+1]))
		}
		return out
	}
	resources := func(cpu, mem, cpuLimit, memLimit string) *corev1ac.ResourceRequirementsApplyConfiguration {
		return corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}).
			WithLimits(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpuLimit), corev1.ResourceMemory: resource.MustParse(memLimit)})
	}
	probe := func(path string, port int32) *corev1ac.ProbeApplyConfiguration {
		return corev1ac.Probe().
			WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromInt32(port))).
			WithPeriodSeconds(10).WithTimeoutSeconds(2).WithFailureThreshold(3)
	}
	return corev1ac.Pod(name, ns).
		WithLabels(labels).
		WithAnnotations(annotations).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion("apps/v1").WithKind("ReplicaSet").WithName(app + "-" + hash).
			WithUID(types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i%len(apps), i%len(apps)))).
			WithController(true).WithBlockOwnerDeletion(true)).
		WithSpec(corev1ac.PodSpec().
			WithNodeName(fmt.Sprintf("node-%03d", i%200)).
			WithContainers(
				corev1ac.Container().WithName(app).
					WithImage("registry.example.com/shop/"+app+":1.14.2").
					WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(8080),
						corev1ac.ContainerPort().WithName("metrics").WithContainerPort(9090)).
					WithEnv(env("APP_NAME", app, "LOG_LEVEL", "info", "GOMAXPROCS", "2", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel-collector.observability:4317")...).
					WithResources(resources("250m", "256Mi", "1", "512Mi")).
					WithReadinessProbe(probe("/readyz", 8080)).
					WithLivenessProbe(probe("/healthz", 8080)).
					WithVolumeMounts(corev1ac.VolumeMount().WithName("config").WithMountPath("/etc/"+app).WithReadOnly(true)),
				corev1ac.Container().WithName("istio-proxy").
					WithImage("docker.io/istio/proxyv2:1.22.3").
					WithArgs("proxy", "sidecar", "--domain", ns+".svc.cluster.local", "--proxyLogLevel=warning").
					WithPorts(corev1ac.ContainerPort().WithName("http-envoy-prom").WithContainerPort(15090)).
					WithEnv(env("ISTIO_META_WORKLOAD_NAME", app, "ISTIO_META_MESH_ID", "cluster.local", "PROXY_CONFIG", "{}")...).
					WithResources(resources("100m", "128Mi", "2", "1Gi")).
					WithReadinessProbe(probe("/healthz/ready", 15021)),
				corev1ac.Container().WithName("log-shipper").
					WithImage("fluent/fluent-bit:3.1.4").
					WithResources(resources("50m", "64Mi", "200m", "128Mi")).
					WithVolumeMounts(corev1ac.VolumeMount().WithName("varlog").WithMountPath("/var/log")),
			).
			WithVolumes(
				corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().WithName(app+"-config")),
				corev1ac.Volume().WithName("varlog").WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			).
			WithTolerations(
				corev1ac.Toleration().WithKey("node.kubernetes.io/not-ready").WithOperator(corev1.TolerationOpExists).WithEffect(corev1.TaintEffectNoExecute).WithTolerationSeconds(300),
				corev1ac.Toleration().WithKey("node.kubernetes.io/unreachable").WithOperator(corev1.TolerationOpExists).WithEffect(corev1.TaintEffectNoExecute).WithTolerationSeconds(300),
			))
}

func podStatusApply(ns, name string, i int) *corev1ac.PodApplyConfiguration {
	app := apps[i%len(apps)]
	started := metav1.NewTime(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second))
	hostIP := fmt.Sprintf("10.0.%d.%d", (i%200)/250, i%200+1)
	podIP := fmt.Sprintf("10.%d.%d.%d", 64+i/65536, (i/256)%256, i%256)
	cond := func(t corev1.PodConditionType) *corev1ac.PodConditionApplyConfiguration {
		return corev1ac.PodCondition().WithType(t).WithStatus(corev1.ConditionTrue).WithLastTransitionTime(started)
	}
	running := func(c, image string) *corev1ac.ContainerStatusApplyConfiguration {
		sum := sha256.Sum256([]byte(ns + name + c))
		digest := sha256.Sum256([]byte(image))
		return corev1ac.ContainerStatus().WithName(c).WithImage(image).
			WithImageID(image + "@sha256:" + hex.EncodeToString(digest[:])).
			WithContainerID("containerd://" + hex.EncodeToString(sum[:])).
			WithReady(true).WithStarted(true).WithRestartCount(0).
			WithState(corev1ac.ContainerState().WithRunning(corev1ac.ContainerStateRunning().WithStartedAt(started)))
	}
	return corev1ac.Pod(name, ns).WithStatus(corev1ac.PodStatus().
		WithPhase(corev1.PodRunning).
		WithConditions(cond(corev1.PodReadyToStartContainers), cond(corev1.PodInitialized), cond(corev1.PodReady),
			cond(corev1.ContainersReady), cond(corev1.PodScheduled)).
		WithHostIP(hostIP).WithHostIPs(corev1ac.HostIP().WithIP(hostIP)).
		WithPodIP(podIP).WithPodIPs(corev1ac.PodIP().WithIP(podIP)).
		WithStartTime(started).
		WithContainerStatuses(
			running(app, "registry.example.com/shop/"+app+":1.14.2"),
			running("istio-proxy", "docker.io/istio/proxyv2:1.22.3"),
			running("log-shipper", "fluent/fluent-bit:3.1.4"),
		))
}

func configMapApply(i int) *corev1ac.ConfigMapApplyConfiguration {
	app := apps[i%len(apps)]
	ns := benchNamespace(i)
	props := ""
	for k := range 20 {
		props += fmt.Sprintf("%s.setting.%02d=value-%d-%d\n", app, k, i, k)
	}
	return corev1ac.ConfigMap(configMapName(i), ns).
		WithLabels(map[string]string{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "tier": tierOf(app)}).
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
