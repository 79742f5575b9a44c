package testenv

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WidgetGVR is the resource of the sample custom resource definition that
// InstallWidgetCRD installs: widgets.v1alpha1.example.com, namespaced.
var WidgetGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "widgets"}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallWidgetCRD installs the widgets.example.com CRD and waits until it is served.
func (c *Cluster) InstallWidgetCRD(ctx context.Context) error {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "widgets.example.com"},
		"spec": map[string]any{
			"group": "example.com",
			"scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1alpha1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type":                                 "object",
					"x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	dyn := c.Dynamic()
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD widgets.example.com in %s: %w", c.Name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(WidgetGVR).Namespace(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
}

// DeleteWidgetCRD deletes the widgets.example.com CRD (and so every widget).
func (c *Cluster) DeleteWidgetCRD(ctx context.Context) error {
	err := c.Dynamic().Resource(crdGVR).Delete(ctx, "widgets.example.com", metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Widget returns a Widget object.
func Widget(namespace, name string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1alpha1",
		"kind":       "Widget",
		"metadata":   map[string]any{"namespace": namespace, "name": name},
		"spec":       map[string]any{"size": int64(3), "color": "blue"},
	}}
	u.SetLabels(labels)
	return u
}

// SampleOptions say what Seed creates.
type SampleOptions struct {
	// Namespaces to create, each with the workloads below. Default: shop, payments.
	Namespaces []string
	// Deployments per namespace, each with a Service and Replicas pods. Default 2.
	Deployments int
	// Replicas is the number of pods created for each deployment. No controller-manager
	// runs in a test cluster, so the pods are created directly, owned by nobody, and stay
	// Pending. Default 2.
	Replicas int
	// Widgets per namespace; they need InstallWidgetCRD first. Default 0.
	Widgets int
}

// Seed creates sample workloads: namespaces, deployments, services, pods and widgets.
func (c *Cluster) Seed(ctx context.Context, opts SampleOptions) error {
	if len(opts.Namespaces) == 0 {
		opts.Namespaces = []string{"shop", "payments"}
	}
	if opts.Deployments == 0 {
		opts.Deployments = 2
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	cs := c.Clientset()
	dyn := c.Dynamic()
	apps := []string{"web", "api", "worker", "cache", "db"}
	for _, ns := range opts.Namespaces {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		for d := range opts.Deployments {
			app := apps[d%len(apps)]
			if d >= len(apps) {
				app = fmt.Sprintf("%s-%d", app, d)
			}
			labels := map[string]string{"app": app, "tier": tierOf(app)}
			if _, err := cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, app, labels, int32(opts.Replicas)), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			svc := &corev1.Service{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: app, Labels: labels},
				Spec: corev1.ServiceSpec{
					Selector: labels,
					Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
				},
			}
			if _, err := cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			for r := range opts.Replicas {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", app, r), Labels: labels},
					Spec:       podSpec(app),
				}
				if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
					return err
				}
			}
		}
		for w := range opts.Widgets {
			widget := Widget(ns, fmt.Sprintf("widget-%d", w), map[string]string{"app": "widgets"})
			if _, err := dyn.Resource(WidgetGVR).Namespace(ns).Create(ctx, widget, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		}
	}
	return nil
}

func tierOf(app string) string {
	switch app {
	case "db", "cache":
		return "data"
	case "worker":
		return "batch"
	default:
		return "frontend"
	}
}

func deployment(ns, name string, labels map[string]string, replicas int32) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(name),
			},
		},
	}
}

func podSpec(app string) corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{
		{Name: app, Image: "registry.example/" + app + ":1.0", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
		{Name: "sidecar", Image: "registry.example/proxy:2.3"},
	}}
}
