package search

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// podSpecPaths are where the pod spec of a resource is, for the resources whose
// images are indexed.
var podSpecPaths = map[schema.GroupResource][]string{
	{Resource: "pods"}:                        {"spec"},
	{Resource: "replicationcontrollers"}:      {"spec", "template", "spec"},
	{Resource: "podtemplates"}:                {"template", "spec"},
	{Group: "apps", Resource: "deployments"}:  {"spec", "template", "spec"},
	{Group: "apps", Resource: "statefulsets"}: {"spec", "template", "spec"},
	{Group: "apps", Resource: "daemonsets"}:   {"spec", "template", "spec"},
	{Group: "apps", Resource: "replicasets"}:  {"spec", "template", "spec"},
	{Group: "batch", Resource: "jobs"}:        {"spec", "template", "spec"},
	{Group: "batch", Resource: "cronjobs"}:    {"spec", "jobTemplate", "spec", "template", "spec"},
}

// containerLists are the lists of containers of a pod spec.
var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

// ImageLister is an object that keeps its images rather than its pod spec, such as the
// summary of an object that the HTTP server keeps beside its encoding: Images returns
// what ContainerImages returns, which must be what Images would read from the object's
// pod spec.
type ImageLister interface {
	runtime.Object
	ContainerImages() []string
}

// Images returns the distinct container images of obj, in the order of its pod spec
// (init containers, containers, ephemeral containers), if gr is a resource with a pod
// spec (Pods, and the pod templates of Deployments, StatefulSets, DaemonSets,
// ReplicaSets, Jobs, CronJobs, ReplicationControllers and PodTemplates) and obj is a
// full object (or an ImageLister); nil otherwise. It reads obj in place and does not modify it.
func Images(gr schema.GroupResource, obj runtime.Object) []string {
	path, ok := podSpecPaths[gr]
	if !ok {
		return nil
	}
	if il, ok := obj.(ImageLister); ok {
		return il.ContainerImages()
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil // metadata-only
	}
	spec, found, err := unstructured.NestedFieldNoCopy(u.Object, path...)
	if !found || err != nil {
		return nil
	}
	m, ok := spec.(map[string]any)
	if !ok {
		return nil
	}
	var out []string
	for _, list := range containerLists {
		cs, _ := m[list].([]any)
		for _, c := range cs {
			cm, _ := c.(map[string]any)
			img, _ := cm["image"].(string)
			if img == "" {
				continue
			}
			dup := false
			for _, o := range out {
				if o == img {
					dup = true
					break
				}
			}
			if !dup {
				out = append(out, img)
			}
		}
	}
	return out
}

// PodSpecPath returns where the pod spec of a resource of gr is, for the resources
// whose images Images reads; ok is false for the others.
func PodSpecPath(gr schema.GroupResource) (path []string, ok bool) {
	path, ok = podSpecPaths[gr]
	return path, ok
}
