package metaenc

// table is the static table of strings that an encoding may name by their index rather
// than spell out (as HPACK's static table does for HTTP/2 headers): label and annotation
// keys that Kubernetes, its common tools and conventions write (the well-known labels
// and annotations of the Kubernetes documentation, Helm's, Prometheus', Istio's, the
// cluster autoscaler's, Argo CD's), frequent values, and the apiVersions and kinds of
// owners. It is part of format 4: an entry may never change or move, and appending one
// makes encodings that a build without it cannot read, so it needs a new format byte.
var table = [...]string{
	// Well-known labels.
	"app", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
	"app.kubernetes.io/component", "app.kubernetes.io/part-of", "app.kubernetes.io/managed-by",
	"app.kubernetes.io/created-by", "helm.sh/chart", "pod-template-hash", "controller-revision-hash",
	"pod-template-generation", "statefulset.kubernetes.io/pod-name", "apps.kubernetes.io/pod-index",
	"batch.kubernetes.io/controller-uid", "batch.kubernetes.io/job-name", "controller-uid", "job-name",
	"kubernetes.io/metadata.name", "kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
	"topology.kubernetes.io/zone", "topology.kubernetes.io/region", "node.kubernetes.io/instance-type",
	"node-role.kubernetes.io/control-plane", "kubernetes.io/service-name",
	"endpointslice.kubernetes.io/managed-by", "service.kubernetes.io/headless",
	"k8s-app", "tier", "component", "release", "heritage", "chart", "name", "version", "env",
	"environment", "team", "security.istio.io/tlsMode", "service.istio.io/canonical-name",
	"service.istio.io/canonical-revision", "sidecar.istio.io/inject", "olm.managed",
	"argocd.argoproj.io/instance", "kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace",
	// Well-known annotations.
	"kubectl.kubernetes.io/last-applied-configuration", "kubectl.kubernetes.io/default-container",
	"kubectl.kubernetes.io/restartedAt", "deployment.kubernetes.io/revision",
	"deployment.kubernetes.io/desired-replicas", "deployment.kubernetes.io/max-replicas",
	"meta.helm.sh/release-name", "meta.helm.sh/release-namespace", "helm.sh/hook", "helm.sh/hook-weight",
	"helm.sh/hook-delete-policy", "helm.sh/resource-policy", "prometheus.io/scrape", "prometheus.io/port",
	"prometheus.io/path", "prometheus.io/scheme", "sidecar.istio.io/status", "sidecar.istio.io/rewriteAppHTTPProbers",
	"istio.io/rev", "cluster-autoscaler.kubernetes.io/safe-to-evict", "checksum/config", "checksum/secret",
	"kubernetes.io/config.seen", "kubernetes.io/config.source", "kubernetes.io/config.hash",
	"kubernetes.io/config.mirror", "kubernetes.io/psp", "seccomp.security.alpha.kubernetes.io/pod",
	"kubernetes.io/service-account.name", "kubernetes.io/service-account.uid", "kubernetes.io/description",
	"endpoints.kubernetes.io/last-change-trigger-time", "control-plane.alpha.kubernetes.io/leader",
	"kubernetes.io/change-cause", "argocd.argoproj.io/sync-wave", "argocd.argoproj.io/tracking-id",
	"argocd.argoproj.io/sync-options", "openshift.io/scc", "kubernetes.io/limit-ranger",
	// Frequent values.
	"true", "false", "Helm", "Tiller", "Kustomize", "default", "kube-system", "linux", "amd64", "arm64",
	"istio", "istio-proxy", "http", "https", "metrics", "8080", "9090", "/metrics", "1", "0",
	"api", "web", "backend", "frontend", "database", "cache", "worker", "server", "controller",
	"EndpointSlice", "endpointslice-controller.k8s.io",
	// Owners: apiVersions and kinds; finalizers.
	"v1", "apps/v1", "batch/v1", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet", "Job",
	"CronJob", "Node", "Pod", "Service", "Namespace", "ConfigMap", "Secret", "ServiceAccount",
	"kubernetes.io/pvc-protection", "kubernetes.io/pv-protection", "foregroundDeletion", "orphan",
	"batch.kubernetes.io/job-tracking", "service.kubernetes.io/load-balancer-cleanup",
}

// tableSlots finds the strings of table for Compact, in an open-addressing hash table
// of their indices plus one (0 is a free slot), hashed by slotOf, with linear
// probing. A Go map would hash every byte of every label and annotation of an object,
// some of them hundreds of bytes long; slotOf reads four, and a string longer than
// the table's longest, or of a length no string of the table has, is not looked for.
var tableSlots, tableLengths, tableProbes = func() (slots [1 << tableSlotBits]uint8, lengths uint64, probes int) {
	if len(table) >= 1<<8 {
		panic("metaenc: the table's indices do not fit its slots")
	}
	for i, s := range table {
		if len(s) == 0 || len(s) >= 64 {
			panic("metaenc: " + s + ": a string of the table must have 1 to 63 bytes")
		}
		lengths |= 1 << len(s)
		j, n := slotOf(s), 1
		for ; slots[j] != 0; j, n = (j+1)&(len(slots)-1), n+1 {
			if table[slots[j]-1] == s {
				panic("metaenc: " + s + " twice in the table")
			}
		}
		slots[j] = uint8(i + 1)
		probes = max(probes, n)
	}
	return slots, lengths, probes
}()

// tableSlotBits is the log2 of the number of tableSlots: about a quarter of them hold a
// string.
const tableSlotBits = 9

// slotOf hashes s, which has 1 to 63 bytes, for tableSlots.
func slotOf[S ~string | ~[]byte](s S) int {
	n := len(s)
	h := uint64(n) | uint64(s[0])<<8 | uint64(s[n-1])<<16 | uint64(s[n/2])<<24 | uint64(s[n/4])<<32 | uint64(s[n*3/4])<<40
	return int(h * 0x9e3779b97f4a7c15 >> (64 - tableSlotBits))
}

// tableIndex returns the index of s in table, if it is there.
func tableIndex[S ~string | ~[]byte](s S) (int, bool) {
	if len(s) >= 64 || tableLengths&(1<<len(s)) == 0 {
		return 0, false
	}
	for j := slotOf(s); tableSlots[j] != 0; j = (j + 1) & (len(tableSlots) - 1) {
		if i := int(tableSlots[j]) - 1; table[i] == string(s) {
			return i, true
		}
	}
	return 0, false
}
