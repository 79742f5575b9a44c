package aggregatetest

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

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

// ScheduledPod returns RealisticPod with what sets the pods of one Deployment apart,
// from i, as make bench's large pods have it (testenv.LargePodStatus): a node of 200,
// its IP, the pod's IP, its containers' IDs and its start time in its status. A
// benchmark of what decodes a pod reads these: RealisticPods differ in their metadata
// only, so a decoder that shares what objects hold alike would find the rest.
func ScheduledPod(namespace, name, resourceVersion string, labels map[string]string, i int) *unstructured.Unstructured {
	u := RealisticPod(namespace, name, resourceVersion, labels)
	node := i % 200
	started := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second).Format(time.RFC3339)
	hostIP := fmt.Sprintf("10.0.%d.%d", node/250, node+1)
	podIP := fmt.Sprintf("10.%d.%d.%d", 64+i/65536, (i/256)%256, i%256)
	spec := u.Object["spec"].(map[string]any)
	spec["nodeName"] = fmt.Sprintf("node-%03d", node)
	status := u.Object["status"].(map[string]any)
	status["startTime"] = started
	status["hostIP"], status["hostIPs"] = hostIP, []any{map[string]any{"ip": hostIP}}
	status["podIP"], status["podIPs"] = podIP, []any{map[string]any{"ip": podIP}}
	for _, c := range status["conditions"].([]any) {
		c.(map[string]any)["lastTransitionTime"] = started
	}
	for _, c := range status["containerStatuses"].([]any) {
		cs := c.(map[string]any)
		sum := sha256.Sum256([]byte(namespace + name + cs["name"].(string)))
		cs["containerID"] = "containerd://" + hex.EncodeToString(sum[:])
		cs["state"] = map[string]any{"running": map[string]any{"startedAt": started}}
	}
	return u
}
