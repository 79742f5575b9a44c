package testenv

// The pods that fleetwatch's benchmarks cache, as apply configurations: the large pods
// of make bench (LargePod, LargePodStatus, ApplyLargePod), which carry what a
// Deployment's pod with a service-mesh sidecar does, and the small pods of its
// many-clusters rows and small-pods section (SmallPod). The harness (test/bench) loads
// them into real clusters, and mcprovider's read micro-benchmarks read them back through
// each cache, so that every figure is of the same objects.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// BenchApps are the applications whose pods the generators write, pod i being of
// BenchApps[i%len(BenchApps)].
var BenchApps = []string{"checkout", "cart", "catalog", "payments", "search", "recommend", "frontend", "shipping"}

// BenchTier is the tier label of app's objects.
func BenchTier(app string) string {
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

// ApplyLargePod writes the large pod i as a controller and a kubelet would: LargePod
// with the field manager controller, then LargePodStatus through the status subresource
// with the field manager kubelet, so that the pod carries managedFields of both.
func ApplyLargePod(ctx context.Context, cs kubernetes.Interface, ns, name string, i int, controller, kubelet string) error {
	opts := metav1.ApplyOptions{FieldManager: controller, Force: true}
	if _, err := cs.CoreV1().Pods(ns).Apply(ctx, LargePod(ns, name, i), opts); err != nil {
		return err
	}
	opts.FieldManager = kubelet
	_, err := cs.CoreV1().Pods(ns).ApplyStatus(ctx, LargePodStatus(ns, name, i), opts)
	return err
}

// LargePod is the spec and metadata of the large pod i, about 9.3 KB of JSON as served
// once LargePodStatus is applied too, 5.7 KB without its managedFields: three containers
// (an application, an Istio sidecar, a log shipper) with probes, resources and
// environment, six labels, six annotations, an owner, volumes and tolerations.
func LargePod(ns, name string, i int) *corev1ac.PodApplyConfiguration {
	app := BenchApps[i%len(BenchApps)]
	hash := templateHash(app)
	labels := map[string]string{
		"app.kubernetes.io/name":     app,
		"app.kubernetes.io/instance": app + "-" + ns,
		"app.kubernetes.io/version":  "1.14.2",
		"app.kubernetes.io/part-of":  "shop",
		"tier":                       BenchTier(app),
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
			WithUID(types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i%len(BenchApps), i%len(BenchApps)))).
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

// LargePodStatus is the status of the large pod i as a kubelet reports a running pod.
func LargePodStatus(ns, name string, i int) *corev1ac.PodApplyConfiguration {
	app := BenchApps[i%len(BenchApps)]
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

// SmallPod is the small pod i, about 1.7 KB of JSON as served, 1.2 KB without its
// managedFields: one container with an image, a port and resources, and three labels;
// no node, no status.
func SmallPod(ns, name string, i int) *corev1ac.PodApplyConfiguration {
	app := BenchApps[i%len(BenchApps)]
	return corev1ac.Pod(name, ns).
		WithLabels(map[string]string{
			"app.kubernetes.io/name":    app,
			"app.kubernetes.io/part-of": "shop",
			"tier":                      BenchTier(app),
		}).
		WithSpec(corev1ac.PodSpec().WithContainers(corev1ac.Container().WithName(app).
			WithImage("registry.example.com/shop/" + app + ":1.14.2").
			WithPorts(corev1ac.ContainerPort().WithName("http").WithContainerPort(8080)).
			WithResources(corev1ac.ResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}).
				WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")}))))
}
