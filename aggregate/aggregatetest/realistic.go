package aggregatetest

import (
	_ "embed"
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// podJSON is a pod as make bench loads it and a kube-apiserver serves it, without its
// managedFields (as fleetwatch caches it by default): 3 containers with ports, env,
// resources, probes and mounts, 6 labels, 6 annotations, an owner reference, and the
// status of a running pod. About 5.7 KB as compact JSON.
//
//go:embed pod.json
var podJSON []byte

// RealisticPod returns a copy of a realistic pod (see podJSON) with the given namespace,
// name and resourceVersion, a UID derived from them, and labels added to its own. It is
// what benchmarks measure, where the size and shape of an object matter.
func RealisticPod(namespace, name, resourceVersion string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(podJSON); err != nil {
		panic(fmt.Sprintf("aggregatetest: pod.json: %v", err))
	}
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetResourceVersion(resourceVersion)
	u.SetUID(types.UID("uid-" + namespace + "-" + name))
	if len(labels) > 0 {
		all := u.GetLabels()
		maps.Copy(all, labels)
		u.SetLabels(all)
	}
	return u
}
