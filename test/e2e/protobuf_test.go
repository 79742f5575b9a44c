package e2e

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/internal/wire"
)

// contentTypes counts the media types of the responses through a transport.
type contentTypes struct {
	mu     sync.Mutex
	byPath map[string][]string
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.mu.Lock()
			ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
			c.byPath[req.URL.Path] = append(c.byPath[req.URL.Path], ct)
			c.mu.Unlock()
		}
		return resp, err
	})
}

func (c *contentTypes) of(path string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.byPath[path]...)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestProtobufWire: the informers' dynamic clients ask a real kube-apiserver for
// protobuf where it has it, and what they decode from it, lists and the events of
// streaming lists and watches, objects and their encodings, partial ones included,
// equals what they decode from the JSON the same server sends for the same objects, for
// every kind of object created here; a custom resource, which has no protobuf, comes in
// JSON through the same request, and so does a StatefulSet, whose protobuf loses
// members (pbjson.Lossy).
func TestProtobufWire(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 1})
	c := env.Clusters[0]
	ctx := t.Context()
	createProtobufObjects(ctx, t, c)
	installGadgetCRD(ctx, t, c)
	gadget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gadgets.example.test/v1", "kind": "Gadget",
		"metadata": map[string]any{"name": "g1", "namespace": "shop"},
		"spec":     map[string]any{"color": "red", "size": int64(3)},
	}}
	if _, err := c.Dynamic().Resource(gadgetsGVR).Namespace("shop").Create(ctx, gadget, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A StatefulSet's protobuf loses its volumeClaimTemplates' apiVersion and kind:
	// it is asked for in JSON (pbjson.Lossy), though the server has protobuf.
	labels := map[string]string{"app": "db"}
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example/db:1"}}}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "data"},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}},
		},
	}
	if _, err := c.Clientset().AppsV1().StatefulSets("shop").Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	seen := &contentTypes{byPath: map[string][]string{}}
	cfg := rest.CopyConfig(c.RESTConfig())
	cfg.Wrap(seen.wrap)
	drop, keep, err := wire.NewDynamicClients(cfg, true)
	if err != nil {
		t.Fatal(err)
	}
	partial, _, err := wire.NewPartialDynamicClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resources := []struct {
		gvr  schema.GroupVersionResource
		kind string
		path string
		// protobuf: the server has protobuf for it.
		protobuf bool
	}{
		{podsGVR, "Pod", "/api/v1/pods", true},
		{configMapsGVR, "ConfigMap", "/api/v1/configmaps", true},
		{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "Service", "/api/v1/services", true},
		{schema.GroupVersionResource{Version: "v1", Resource: "events"}, "Event", "/api/v1/events", true},
		{schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "Namespace", "/api/v1/namespaces", true},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "Deployment", "/apis/apps/v1/deployments", true},
		{schema.GroupVersionResource{Group: "batch", Version: "v1", Resource: "jobs"}, "Job", "/apis/batch/v1/jobs", true},
		{gadgetsGVR, "Gadget", "/apis/gadgets.example.test/v1/gadgets", false},
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}, "StatefulSet", "/apis/apps/v1/statefulsets", false},
	}
	for _, r := range resources {
		t.Run(r.gvr.Resource, func(t *testing.T) {
			gvk := r.gvr.GroupVersion().WithKind(r.kind)
			pbCtx := wire.WithProtobuf(ctx, gvk)
			for name, client := range map[string]dynamic.Interface{"drop": drop, "keep": keep} {
				viaJSON, err := client.Resource(r.gvr).List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				viaPB, err := client.Resource(r.gvr).List(pbCtx, metav1.ListOptions{ResourceVersion: viaJSON.GetResourceVersion(), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
				if err != nil {
					t.Fatalf("%s: list in protobuf: %v", name, err)
				}
				if len(viaJSON.Items) == 0 {
					t.Fatalf("%s: no %s", name, r.gvr.Resource)
				}
				if !reflect.DeepEqual(viaJSON.Items, viaPB.Items) {
					t.Errorf("%s: the list in protobuf differs from JSON's:\n%v\n%v", name, viaPB.Items, viaJSON.Items)
				}
				if name == "keep" {
					if _, ok := viaPB.Items[0].Object["metadata"].(map[string]any)["managedFields"]; !ok {
						t.Errorf("keep: no managedFields in %v", viaPB.Items[0].Object["metadata"])
					}
				}
			}
			for name, client := range map[string]dynamic.Interface{"encoded": drop, "partial": partial} {
				viaJSON := streamingList(ctx, t, client, r.gvr, ctx)
				viaPB := streamingList(ctx, t, client, r.gvr, pbCtx)
				if len(viaJSON) != len(viaPB) {
					t.Fatalf("%s: %d objects in protobuf, %d in JSON", name, len(viaPB), len(viaJSON))
				}
				for i := range viaJSON {
					j, p := viaJSON[i], viaPB[i]
					if !reflect.DeepEqual(j.Object, p.Object) || string(j.Encoded) != string(p.Encoded) || j.Partial != p.Partial {
						t.Errorf("%s: object %d differs:\nprotobuf %v (%d bytes encoded, partial %v)\n    JSON %v (%d bytes, partial %v)",
							name, i, p.Object, len(p.Encoded), p.Partial, j.Object, len(j.Encoded), j.Partial)
					}
					if len(p.Encoded) == 0 {
						t.Errorf("%s: object %d without its encoding", name, i)
					}
				}
			}
			types := seen.of(r.path)
			t.Logf("responses for %s: %v", r.path, types)
			want := "application/json"
			if r.protobuf {
				want = "application/vnd.kubernetes.protobuf"
			}
			var n int
			for _, ct := range types {
				if ct == want {
					n++
				}
			}
			// Each client's protobuf list and streaming list: at least the four.
			if n < 4 {
				t.Errorf("responses for %s: %v, want at least 4 of %s", r.path, types, want)
			}
		})
	}
}

// streamingList returns the objects of a streaming list of gvr, read through a watch
// with sendInitialEvents opened with reqCtx, in the order the server sent them.
func streamingList(ctx context.Context, t *testing.T, client dynamic.Interface, gvr schema.GroupVersionResource, reqCtx context.Context) []*wire.EncodedObject {
	t.Helper()
	reqCtx, cancel := context.WithTimeout(reqCtx, 30*time.Second)
	defer cancel()
	w, err := client.Resource(gvr).Watch(reqCtx, metav1.ListOptions{
		SendInitialEvents:    ptr.To(true),
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		t.Fatalf("streaming list of %s: %v", gvr.Resource, err)
	}
	defer w.Stop()
	var objects []*wire.EncodedObject
	for {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("streaming list of %s ended before its initial events did", gvr.Resource)
			}
			switch e.Type {
			case watch.Added:
				o, ok := e.Object.(*wire.EncodedObject)
				if !ok {
					t.Fatalf("streaming list of %s: an object %T", gvr.Resource, e.Object)
				}
				objects = append(objects, o)
			case watch.Bookmark:
				o, ok := e.Object.(*wire.EncodedObject)
				if !ok {
					t.Fatalf("streaming list of %s: a bookmark %T", gvr.Resource, e.Object)
				}
				if o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					return objects
				}
			default:
				t.Fatalf("streaming list of %s: event %s %v", gvr.Resource, e.Type, e.Object)
			}
		}
	}
}

// createProtobufObjects creates objects of several kinds with most of their fields set:
// times, quantities, int-or-strings, maps, byte data, nested and embedded structs.
func createProtobufObjects(ctx context.Context, t *testing.T, c *testenv.Cluster) {
	t.Helper()
	cs := c.Clientset()
	for _, ns := range []string{"shop", "batch"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	podSpec := corev1.PodSpec{
		Containers: []corev1.Container{{
			Name: "app", Image: "registry.example/app:1.2.3", Command: []string{"/app", "--port=8080"},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			Env: []corev1.EnvVar{{Name: "MODE", Value: "prod <&> \"quoted\" ✓"}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1.5"), corev1.ResourceMemory: resource.MustParse("1G")},
			},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
				PeriodSeconds: 5, FailureThreshold: 3},
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}},
			VolumeMounts:  []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app", ReadOnly: true}},
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
				AllowPrivilegeEscalation: ptr.To(false)},
		}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, DefaultMode: ptr.To[int32](0o644)}}}},
		Tolerations:                   []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "app", Effect: corev1.TaintEffectNoSchedule, TolerationSeconds: nil}},
		TerminationGracePeriodSeconds: ptr.To[int64](45),
		NodeSelector:                  map[string]string{"zone": "a", "disk": "ssd"},
	}
	for i := range 5 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%d", i), Namespace: "shop",
				Labels:      map[string]string{"app": "shop", "i": fmt.Sprint(i)},
				Annotations: map[string]string{"note": "<b>bold</b> & more", "empty": ""},
			},
			Spec: podSpec,
		}
		created, err := cs.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		created.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: fmt.Sprintf("10.0.0.%d", i+1), StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, RestartCount: int32(i), Image: "registry.example/app:1.2.3",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
		}
		if _, err := cs.CoreV1().Pods("shop").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app-config", Namespace: "shop"},
		Data:       map[string]string{"b": "two\nlines", "a": "one", "unicode": "é✓\u2028"},
		BinaryData: map[string][]byte{"blob": {0, 1, 2, 255}}}
	if _, err := cs.CoreV1().ConfigMaps("shop").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "shop"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "shop"}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}, {Name: "metrics", Port: 9090, TargetPort: intstr.FromInt32(9090)}}}}
	if _, err := cs.CoreV1().Services("shop").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "pod-0.1", Namespace: "shop"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "pod-0"},
		Reason:         "Started", Message: "Started container app", Type: corev1.EventTypeNormal,
		EventTime: metav1.NewMicroTime(time.Now()), ReportingController: "e2e", ReportingInstance: "e2e-1", Action: "Start",
		Source: corev1.EventSource{Component: "kubelet"}}
	if _, err := cs.CoreV1().Events("shop").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "shop"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "shop"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "i", Operator: metav1.LabelSelectorOpExists}}},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromString("25%")), MaxSurge: ptr.To(intstr.FromInt32(1))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "shop", "i": "x"}}, Spec: podSpec}}}
	if _, err := cs.AppsV1().Deployments("shop").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "migrate", Namespace: "batch"},
		Spec: batchv1.JobSpec{BackoffLimit: ptr.To[int32](2), Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, Containers: []corev1.Container{{Name: "m", Image: "registry.example/migrate:1"}}}}}}
	if _, err := cs.BatchV1().Jobs("batch").Create(ctx, job, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
