package e2e

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
)

// TestDeployManifests renders every kustomization of deploy/ with the kustomize built into
// the real kubectl, checks that the rendered objects fit together (the configuration that
// the Deployment mounts loads, with the pod's environment, and names only mounted paths;
// the probes and the Service use the named port; the binding binds the ServiceAccount the
// pod runs as), and applies them to a real apiserver: first with --dry-run=server, which
// validates every object server-side, including the pod template against the restricted
// Pod Security Standard of the namespace, then for real, to check with
// SubjectAccessReviews that the ServiceAccount may read every resource that the
// configuration caches, and write none, in the home cluster when it is watched, and may
// read nothing cluster-wide there when it is not. The sharded overlay runs the same pod
// as a StatefulSet that hands moved clusters over warm, whose ServiceAccount may also work
// the Leases of its own namespace, read the states handed over there, and have the home
// cluster review tokens and access, and nothing more. It is also applied as a copy in
// another namespace with components/cert-manager, whose Certificate must name the
// replicas there.
func TestDeployManifests(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 1})
	for _, tc := range []struct {
		dir string
		// watchesHome is whether the configuration watches the home cluster, the one
		// the manifests are applied to: the example overlay's context "home".
		watchesHome bool
		// handover is whether the replicas hand the clusters that move over warm.
		handover bool
		// namespace, when set, renders a copy of dir in that namespace with components
		// (directories of deploy/) added, as a user makes an overlay of their own.
		namespace  string
		components []string
		// crds are applied first, for kinds that the apiserver does not serve.
		crds string
	}{
		{dir: "."},
		{dir: "base"},
		{dir: "overlays/example", watchesHome: true},
		{dir: "overlays/sharded", handover: true},
		// cert-manager is not installed: crds gives the apiserver its kinds.
		{dir: "overlays/sharded", handover: true, namespace: "fleet-shards", components: []string{"components/cert-manager"}, crds: filepath.Join("testdata", "cert-manager-crds.yaml")},
	} {
		dir, name := tc.dir, tc.dir
		if tc.namespace != "" {
			name = fmt.Sprintf("%s in %s with %s", dir, tc.namespace, strings.Join(tc.components, ","))
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "..", "deploy", filepath.FromSlash(dir))
			if tc.namespace != "" {
				var components []string
				for _, c := range tc.components {
					components = append(components, filepath.Join("..", "..", "deploy", filepath.FromSlash(c)))
				}
				path = copyOverlay(t, path, tc.namespace, components)
			}
			out := kubectl(t, "kustomize", path)
			if again := kubectl(t, "kustomize", path); again != out {
				t.Fatalf("kubectl kustomize %s is not stable: two runs differ", dir)
			}
			m := parseManifests(t, out)

			for _, s := range m.of("Secret") {
				// Credentials are created next to the manifests, never kept in them.
				_, hasData := s.Object["data"]
				_, hasStringData := s.Object["stringData"]
				if dir != "overlays/example" || hasData || hasStringData {
					t.Errorf("%s renders Secret %s/%s; the Secrets are only referenced", dir, s.GetNamespace(), s.GetName())
				}
			}
			checkManifests(t, env, dir, out, m, deployWant{watchesHome: tc.watchesHome, handover: tc.handover, certificates: slices.Contains(tc.components, "components/cert-manager"), crds: tc.crds})
		})
	}
}

// deployWant is what a rendering of the manifests, kustomize's or the Helm chart's, is to
// install.
type deployWant struct {
	// watchesHome is whether the configuration watches the home cluster, the one the
	// manifests are applied to.
	watchesHome bool
	// handover is whether the replicas hand the clusters that move over warm.
	handover bool
	// certificates is whether cert-manager issues the serving certificate.
	certificates bool
	// crds are applied first, for kinds that the apiserver does not serve.
	crds string
}

// checkManifests checks that the objects m of the rendering out, named name, fit
// together, and applies out to env's cluster, with --dry-run=server first and then for
// real, to check what its ServiceAccount may do there (TestDeployManifests).
func checkManifests(t *testing.T, env *testenv.Env, name, out string, m manifests, want deployWant) {
	t.Helper()
	cs := env.Clusters[0].Clientset()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(cs.Discovery()))
	deploy, sts := m.workload(t)
	cfg := m.config(t, deploy)
	checkDeployment(t, m, deploy, sts, cfg)
	if on, lacking := cfg.WarmHandover(); on != want.handover {
		t.Errorf("%s: warm handover on: %t (lacking %q), want %t", name, on, lacking, want.handover)
	}
	if certs := m.of("Certificate"); len(certs) > 0 || want.certificates {
		checkCertificates(t, m, deploy, sts, cfg)
	}
	if want.crds != "" {
		kubectlIn(t, nil, "--kubeconfig", env.Kubeconfig, "apply", "-f", want.crds)
		kubectlIn(t, nil, "--kubeconfig", env.Kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "-f", want.crds)
	}

	// With --dry-run=server the Namespace is not created, and every namespaced
	// object in it would fail with "namespaces not found". So the Namespace is
	// created for real first, from the rendered manifests, or, when they have none
	// (a Helm chart's release namespace), as docs/deploy.md has it created, and then
	// everything is applied with --dry-run=server. The namespace warns on the
	// restricted Pod Security Standard, so a pod template that breaks it shows as a
	// warning.
	namespaces := m.of("Namespace")
	if len(namespaces) == 0 {
		ns := &unstructured.Unstructured{}
		ns.SetAPIVersion("v1")
		ns.SetKind("Namespace")
		ns.SetName(deploy.Namespace)
		ns.SetLabels(map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"})
		namespaces = append(namespaces, ns)
	}
	var ns bytes.Buffer
	for _, o := range namespaces {
		b, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		ns.Write(b)
	}
	kubectlIn(t, &ns, "--kubeconfig", env.Kubeconfig, "apply", "-f", "-")
	stderr := kubectlIn(t, strings.NewReader(out), "--kubeconfig", env.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
	if strings.Contains(stderr, "Warning") {
		t.Errorf("kubectl apply --dry-run=server of %s warned:\n%s", name, stderr)
	}

	// Bound for real, the ServiceAccount may read every resource cached on the
	// home cluster when it is one of the watched ones, else none, and write none.
	// Only components/home-cluster grants cluster-wide reads, and only delegated
	// authentication binds system:auth-delegator.
	if !want.watchesHome && len(m.of("ClusterRole")) > 0 {
		t.Errorf("%s renders a ClusterRole, but does not watch the home cluster", name)
	}
	for _, o := range m.of("ClusterRoleBinding") {
		role, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		if delegator := role == "system:auth-delegator"; delegator && !cfg.Server.Auth.Delegated.Enabled || !delegator && !want.watchesHome {
			t.Errorf("ClusterRoleBinding %s binds %s; want system:auth-delegator only with server.auth.delegated.enabled, and others only when the home cluster is watched", o.GetName(), role)
		}
	}
	kubectlIn(t, strings.NewReader(out), "--kubeconfig", env.Kubeconfig, "apply", "-f", "-")
	sa := "system:serviceaccount:" + deploy.Namespace + ":" + deploy.Spec.Template.Spec.ServiceAccountName
	for _, r := range cfg.Resources {
		gvr, err := resourceFor(mapper, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			want := want.watchesHome && (verb == "get" || verb == "list" || verb == "watch")
			if got := allowed(t, cs, sa, deploy.Namespace, authorizationv1.ResourceAttributes{Verb: verb, Group: gvr.Group, Resource: gvr.Resource}); got != want {
				t.Errorf("%s may %s %s: %t, want %t", sa, verb, r.Name, got, want)
			}
		}
	}
	// Delegated authentication reviews tokens and access in the home cluster.
	for _, r := range []string{"tokenreviews", "subjectaccessreviews"} {
		group := "authentication.k8s.io"
		if r == "subjectaccessreviews" {
			group = "authorization.k8s.io"
		}
		if got := allowed(t, cs, sa, deploy.Namespace, authorizationv1.ResourceAttributes{Verb: "create", Group: group, Resource: r}); got != cfg.Server.Auth.Delegated.Enabled {
			t.Errorf("%s may create %s: %t, want %t (server.auth.delegated.enabled)", sa, r, got, cfg.Server.Auth.Delegated.Enabled)
		}
	}
	// A replica of a sharded fleet works the Leases of its own namespace, and of
	// no other; without sharding there is no Lease to work.
	for _, verb := range []string{"get", "list", "create", "update", "watch", "patch", "delete"} {
		for _, ns := range []string{deploy.Namespace, metav1.NamespaceDefault} {
			want := sts != nil && ns == deploy.Namespace && verb != "patch" && verb != "delete"
			attrs := authorizationv1.ResourceAttributes{Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Namespace: ns}
			if got := allowed(t, cs, sa, deploy.Namespace, attrs); got != want {
				t.Errorf("%s may %s leases in %s: %t, want %t", sa, verb, ns, got, want)
			}
		}
	}
	// A replica reads the states handed over to it from the other replicas,
	// which authorize it as get on clusters/state in their namespace (its
	// acknowledgement, a DELETE, too), and may do nothing else with them.
	for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
		for _, ns := range []string{deploy.Namespace, metav1.NamespaceDefault} {
			want := sts != nil && ns == deploy.Namespace && verb == "get"
			attrs := authorizationv1.ResourceAttributes{Verb: verb, Group: server.GroupName, Resource: "clusters", Subresource: server.StateSubresource, Name: "prod-eu", Namespace: ns}
			if got := allowed(t, cs, sa, deploy.Namespace, attrs); got != want {
				t.Errorf("%s may %s clusters/%s in %s: %t, want %t", sa, verb, server.StateSubresource, ns, got, want)
			}
		}
	}
	// cluster.ReadIdentity reads the UID of kube-system.
	if got := allowed(t, cs, sa, deploy.Namespace, authorizationv1.ResourceAttributes{Verb: "get", Resource: "namespaces", Name: metav1.NamespaceSystem}); got != want.watchesHome {
		t.Errorf("%s may get namespace %s: %t, want %t", sa, metav1.NamespaceSystem, got, want.watchesHome)
	}
	// And nothing more: what RBAC lists for the ServiceAccount in its namespace
	// (cluster-wide grants included) beyond what it lists for any
	// ServiceAccount. With the home cluster watched, components/home-cluster
	// adds its reads, which the checks above cover.
	if !want.watchesHome {
		var want []string
		if sts != nil {
			want = append(want, "create coordination.k8s.io/leases", "get coordination.k8s.io/leases", "list coordination.k8s.io/leases", "update coordination.k8s.io/leases", "watch coordination.k8s.io/leases",
				"get "+server.GroupName+"/clusters/"+server.StateSubresource)
		}
		if cfg.Server.Auth.Delegated.Enabled {
			want = append(want, "create authentication.k8s.io/tokenreviews", "create authorization.k8s.io/subjectaccessreviews")
		}
		slices.Sort(want)
		if got := grantedRules(t, env.Clusters[0].RESTConfig(), deploy.Namespace, deploy.Spec.Template.Spec.ServiceAccountName); !slices.Equal(got, want) {
			t.Errorf("%s may, beyond any ServiceAccount:\n  %s\nwant:\n  %s", sa, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// copyOverlay writes a copy of the overlay in dir, in namespace and with components
// added, to a temporary directory, and returns that directory: the overlay's own files
// are copied, and the kustomizations it refers to are referred to where they are, by
// relative paths, the only ones kustomize takes.
func copyOverlay(t *testing.T, dir, namespace string, components []string) string {
	t.Helper()
	dst := t.TempDir()
	rel := func(path string) string {
		a, err := filepath.Abs(path)
		if err == nil {
			a, err = filepath.Rel(dst, a)
		}
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]any
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		switch {
		case e.IsDir():
			continue
		case err != nil:
			t.Fatal(err)
		case e.Name() == "kustomization.yaml":
			if err := yaml.Unmarshal(b, &k); err != nil {
				t.Fatalf("%s: %v", filepath.Join(dir, e.Name()), err)
			}
		default:
			if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, key := range []string{"resources", "components"} {
		refs, _ := k[key].([]any)
		for i, r := range refs {
			if fi, err := os.Stat(filepath.Join(dir, fmt.Sprint(r))); err == nil && fi.IsDir() {
				refs[i] = rel(filepath.Join(dir, fmt.Sprint(r)))
			}
		}
	}
	refs, _ := k["components"].([]any)
	for _, c := range components {
		refs = append(refs, rel(c))
	}
	k["components"], k["namespace"] = refs, namespace
	b, err := yaml.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "kustomization.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// grantedRules returns what RBAC lets the ServiceAccount name of namespace do there,
// cluster-wide grants included, beyond what it lets a ServiceAccount bound to nothing
// do: the rules of a SelfSubjectRulesReview made as one and not as the other, as "verb
// group/resource" (group "core" for the core group), with "/name" when limited to names,
// or as "verb URL", sorted.
func grantedRules(t *testing.T, admin *rest.Config, namespace, name string) []string {
	t.Helper()
	rules := func(user string) map[string]bool {
		rc := rest.CopyConfig(admin)
		rc.Impersonate = rest.ImpersonationConfig{UserName: user}
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(t.Context(), &authorizationv1.SelfSubjectRulesReview{
			Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: namespace},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Incomplete {
			t.Fatalf("the rules of %s are incomplete: %s", user, r.Status.EvaluationError)
		}
		out := map[string]bool{}
		for _, rr := range r.Status.ResourceRules {
			names := rr.ResourceNames
			if len(names) == 0 {
				names = []string{""}
			}
			for _, verb := range rr.Verbs {
				for _, group := range rr.APIGroups {
					for _, resource := range rr.Resources {
						for _, n := range names {
							rule := fmt.Sprintf("%s %s/%s", verb, cmp.Or(group, "core"), resource)
							if n != "" {
								rule += "/" + n
							}
							out[rule] = true
						}
					}
				}
			}
		}
		for _, nr := range r.Status.NonResourceRules {
			for _, verb := range nr.Verbs {
				for _, u := range nr.NonResourceURLs {
					out[verb+" "+u] = true
				}
			}
		}
		return out
	}
	unbound := rules("system:serviceaccount:" + namespace + ":fleetwatch-e2e-unbound")
	var granted []string
	for rule := range rules("system:serviceaccount:" + namespace + ":" + name) {
		if !unbound[rule] {
			granted = append(granted, rule)
		}
	}
	slices.Sort(granted)
	return granted
}

// checkCertificates checks the cert-manager Certificates of the manifests against the
// pod: one writes the Secret that the pod mounts for server.tls.certFile, and names the
// Service fleetwatch and every replica at its shard.address, for server auth. Its
// issuer is a CA Issuer of the manifests, whose CA a Certificate of theirs, issued by a
// self-signed Issuer of theirs, writes; the CA Issuer writes that CA as ca.crt in the
// Secret, which shard.peerCaFile names.
func checkCertificates(t *testing.T, m manifests, d *appsv1.Deployment, sts *appsv1.StatefulSet, cfg *config.Config) {
	t.Helper()
	type certificate struct {
		name, secret, issuer, issuerKind string
		isCA                             bool
		dnsNames, usages                 []string
	}
	var certs []certificate
	for _, o := range m.of("Certificate") {
		c := certificate{name: o.GetName()}
		c.secret, _, _ = unstructured.NestedString(o.Object, "spec", "secretName")
		c.issuer, _, _ = unstructured.NestedString(o.Object, "spec", "issuerRef", "name")
		c.issuerKind, _, _ = unstructured.NestedString(o.Object, "spec", "issuerRef", "kind")
		c.isCA, _, _ = unstructured.NestedBool(o.Object, "spec", "isCA")
		c.dnsNames, _, _ = unstructured.NestedStringSlice(o.Object, "spec", "dnsNames")
		c.usages, _, _ = unstructured.NestedStringSlice(o.Object, "spec", "usages")
		if o.GetNamespace() != d.Namespace {
			t.Errorf("Certificate %s is in namespace %q, want %s", c.name, o.GetNamespace(), d.Namespace)
		}
		certs = append(certs, c)
	}
	bySecret := func(secret string) *certificate {
		i := slices.IndexFunc(certs, func(c certificate) bool { return c.secret == secret })
		if i < 0 {
			return nil
		}
		return &certs[i]
	}

	secret := secretOf(t, d, cfg.Server.TLS.CertFile)
	serving := bySecret(secret)
	if serving == nil {
		t.Fatalf("no Certificate writes the Secret %s that the pod mounts for server.tls.certFile", secret)
	}
	hosts := []string{fmt.Sprintf("%s.%s.svc", d.Name, d.Namespace)}
	if sts != nil {
		for i := range int(*sts.Spec.Replicas) {
			hosts = append(hosts, fmt.Sprintf("%s-%d.%s.%s.svc", sts.Name, i, sts.Spec.ServiceName, sts.Namespace))
		}
	}
	for _, h := range hosts {
		if !slices.ContainsFunc(serving.dnsNames, func(p string) bool { return dnsNameMatches(p, h) }) {
			t.Errorf("Certificate %s dnsNames %q: %s is not among them", serving.name, serving.dnsNames, h)
		}
	}
	if !slices.Contains(serving.usages, "server auth") {
		t.Errorf("Certificate %s usages %q: want server auth", serving.name, serving.usages)
	}
	if want := filepath.Join(filepath.Dir(cfg.Server.TLS.CertFile), "ca.crt"); cfg.Shard.PeerCAFile != "" && cfg.Shard.PeerCAFile != want {
		t.Errorf("shard.peerCaFile %q: want %s, the CA that cert-manager writes next to the certificate", cfg.Shard.PeerCAFile, want)
	}

	issuer := func(kind, name string) map[string]any {
		o := m.get("Issuer", name)
		if kind != "Issuer" || o == nil || o.GetNamespace() != d.Namespace {
			return nil
		}
		spec, _, _ := unstructured.NestedMap(o.Object, "spec")
		return spec
	}
	caSecret, _, _ := unstructured.NestedString(issuer(serving.issuerKind, serving.issuer), "ca", "secretName")
	if caSecret == "" {
		t.Fatalf("Certificate %s issuerRef %s %s: want a CA Issuer of the manifests", serving.name, serving.issuerKind, serving.issuer)
	}
	caCert := bySecret(caSecret)
	if caCert == nil || !caCert.isCA {
		t.Fatalf("Issuer %s signs with the Secret %s: want it written by a Certificate with isCA", serving.issuer, caSecret)
	}
	if _, selfSigned, _ := unstructured.NestedMap(issuer(caCert.issuerKind, caCert.issuer), "selfSigned"); !selfSigned {
		t.Errorf("Certificate %s issuerRef %s %s: want a self-signed Issuer of the manifests", caCert.name, caCert.issuerKind, caCert.issuer)
	}
}

// dnsNameMatches reports whether a certificate's DNS name pattern, which may start with
// the wildcard "*." for one label, matches host, as crypto/x509 verifies it.
func dnsNameMatches(pattern, host string) bool {
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		label, domain, found := strings.Cut(host, ".")
		return found && label != "" && domain == rest
	}
	return pattern == host
}

// secretOf returns the Secret of the volume that d's container mounts where path is.
func secretOf(t *testing.T, d *appsv1.Deployment, path string) string {
	t.Helper()
	pod := d.Spec.Template.Spec
	for _, vm := range pod.Containers[0].VolumeMounts {
		if path != vm.MountPath && !strings.HasPrefix(path, vm.MountPath+"/") {
			continue
		}
		if i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }); i >= 0 && pod.Volumes[i].Secret != nil {
			return pod.Volumes[i].Secret.SecretName
		}
	}
	t.Fatalf("%q is on no Secret volume of %s", path, d.Name)
	return ""
}

// checkDeployment checks that the Deployment runs the daemon the way docs/deploy.md says,
// and that the rendered objects and the configuration cfg agree with it. With sts, d is
// a view of the StatefulSet of a sharded fleet, whose own parts checkStatefulSet checks.
func checkDeployment(t *testing.T, m manifests, d *appsv1.Deployment, sts *appsv1.StatefulSet, cfg *config.Config) {
	t.Helper()
	if sts != nil {
		checkStatefulSet(t, m, sts, cfg)
	} else if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("Deployment: want 1 replica and the Recreate strategy, as one process locks the snapshot")
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]

	// The probes and the Service use the named port that the daemon listens on.
	_, port, err := net.SplitHostPort(cfg.Server.Address)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "https" })
	if i < 0 || strconv.Itoa(int(c.Ports[i].ContainerPort)) != port {
		t.Errorf("container ports %v: want https on %s, the port of server.address", c.Ports, port)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "https" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
			t.Errorf("%s probe %+v: want an HTTPS GET on the port named https", name, p)
			continue
		}
		// The server accepts a loopback Host whatever server.acceptHosts says; the
		// pod's IP, which the kubelet sends by default, it may not.
		if !slices.Contains(p.HTTPGet.HTTPHeaders, corev1.HTTPHeader{Name: "Host", Value: "localhost"}) {
			t.Errorf("%s probe headers %v: want Host: localhost", name, p.HTTPGet.HTTPHeaders)
		}
	}
	checkMemoryLimit(t, c)
	checkNetworkPolicy(t, m, d, sts != nil)
	if c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path != "/livez" {
		t.Errorf("liveness probe path %q, want /livez", c.LivenessProbe.HTTPGet.Path)
	}
	if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("readiness probe path %q, want /readyz", c.ReadinessProbe.HTTPGet.Path)
	}
	for _, o := range m.of("Service") {
		var svc corev1.Service
		m.convert(t, o, &svc)
		for _, p := range svc.Spec.Ports {
			if p.Name != "https" || p.TargetPort.StrVal != "https" {
				t.Errorf("Service %s port %+v: want the name https and the target port https", svc.Name, p)
			}
		}
	}

	// Every path of the configuration is on a volume of the right kind.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	mountOf := func(key, path string) (corev1.VolumeMount, corev1.Volume) {
		for _, vm := range c.VolumeMounts {
			if path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/") {
				return vm, volumes[vm.Name]
			}
		}
		t.Errorf("%s %q is on no volume of the container", key, path)
		return corev1.VolumeMount{}, corev1.Volume{}
	}
	credential := func(key, path string) {
		if _, v := mountOf(key, path); v.Secret == nil && v.Projected == nil {
			t.Errorf("%s %q: want it on a Secret or projected volume, got %+v", key, path, v.VolumeSource)
		}
	}
	for i, kc := range cfg.Kubeconfig {
		credential(fmt.Sprintf("kubeconfig[%d]", i), kc)
	}
	credential("server.tls.certFile", cfg.Server.TLS.CertFile)
	credential("server.tls.keyFile", cfg.Server.TLS.KeyFile)
	credential("server.auth.tokenFile", cfg.Server.Auth.TokenFile)
	// The replicas trust the CA that comes with the certificate they serve.
	if cfg.Shard.PeerCAFile != "" && secretOf(t, d, cfg.Shard.PeerCAFile) != secretOf(t, d, cfg.Server.TLS.CertFile) {
		t.Errorf("shard.peerCaFile %q: want it in the Secret of server.tls.certFile %q", cfg.Shard.PeerCAFile, cfg.Server.TLS.CertFile)
	}
	vm, v := mountOf("snapshot.path", cfg.Snapshot.Path)
	switch {
	case sts != nil:
		// Each replica's own claim, from the StatefulSet's template.
		if vm.ReadOnly || v.Name != "" || !slices.ContainsFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name == vm.Name }) {
			t.Errorf("snapshot.path %q: want it on a writable mount of a volumeClaimTemplate, not a volume %+v", cfg.Snapshot.Path, v)
		}
	case v.PersistentVolumeClaim == nil || vm.ReadOnly || m.get("PersistentVolumeClaim", v.PersistentVolumeClaim.ClaimName) == nil:
		t.Errorf("snapshot.path %q: want it on a writable mount of a PersistentVolumeClaim of the manifests", cfg.Snapshot.Path)
	}

	// The binding binds the ServiceAccount that the pod runs as, in its namespace.
	if m.get("ServiceAccount", pod.ServiceAccountName) == nil {
		t.Errorf("ServiceAccount %s of the pod is not in the manifests", pod.ServiceAccountName)
	}
	for _, o := range append(m.of("ClusterRoleBinding"), m.of("RoleBinding")...) {
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		want := map[string]any{"kind": "ServiceAccount", "name": pod.ServiceAccountName, "namespace": d.Namespace}
		if !slices.ContainsFunc(subjects, func(s any) bool { return fmt.Sprint(s) == fmt.Sprint(want) }) {
			t.Errorf("%s %s subjects %v: want %v", o.GetKind(), o.GetName(), subjects, want)
		}
	}
}

// checkStatefulSet checks the parts of a sharded fleet: replicas started in parallel,
// each named under the headless Service that its address names, with sharding on, a
// claim for its snapshot, and a PodDisruptionBudget that lets a drain take one at a time.
func checkStatefulSet(t *testing.T, m manifests, sts *appsv1.StatefulSet, cfg *config.Config) {
	t.Helper()
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas < 2 || sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("StatefulSet: want replicas, started in parallel, with one volumeClaimTemplate; got %+v", sts.Spec)
	}
	var peers corev1.Service
	if o := m.get("Service", sts.Spec.ServiceName); o == nil {
		t.Fatalf("StatefulSet serviceName %q is not a Service of the manifests", sts.Spec.ServiceName)
	} else {
		m.convert(t, o, &peers)
	}
	sel := labels.SelectorFromSet(peers.Spec.Selector)
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || sel.Empty() || !sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
		t.Errorf("Service %s: want it headless, selecting the replicas", peers.Name)
	}
	// The configuration with replica 0's environment: sharding on, the address under
	// the headless Service.
	wantAddress := fmt.Sprintf("https://%s-0.%s.%s.svc:%d", sts.Name, peers.Name, sts.Namespace, peers.Spec.Ports[0].Port)
	if !cfg.Shard.Enabled || cfg.Shard.Address != wantAddress {
		t.Errorf("shard %+v: want it enabled, with the address %s", cfg.Shard, wantAddress)
	}
	pdbs := m.of("PodDisruptionBudget")
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets, want 1", len(pdbs))
	}
	var pdb policyv1.PodDisruptionBudget
	m.convert(t, pdbs[0], &pdb)
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !pdbSel.Matches(labels.Set(sts.Spec.Template.Labels)) || pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1 over the replicas, got %+v", pdb.Name, pdb.Spec)
	}
}

// checkMemoryLimit checks that the container sets GOMEMLIMIT to at most 90% of its
// memory limit, leaving room for what the Go runtime does not count, and to more than
// 80%, so that the runtime does use the memory.
func checkMemoryLimit(t *testing.T, c corev1.Container) {
	t.Helper()
	limit := c.Resources.Limits.Memory().Value()
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "GOMEMLIMIT" })
	if limit == 0 || i < 0 {
		t.Errorf("want limits.memory and GOMEMLIMIT, got limits %v and env %v", c.Resources.Limits, c.Env)
		return
	}
	// GOMEMLIMIT is a number of bytes with an optional unit: B, KiB, MiB, GiB or TiB.
	value := c.Env[i].Value
	num, mult := value, int64(1)
	for j, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		if n, ok := strings.CutSuffix(value, unit); ok {
			num, mult = n, int64(1)<<(10*(j+1))
		}
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(num, "B"), 10, 64)
	if err != nil || c.Env[i].ValueFrom != nil {
		t.Errorf("GOMEMLIMIT %+v: want a literal value such as 920MiB", c.Env[i])
		return
	}
	if ratio := float64(n*mult) / float64(limit); ratio > 0.9 || ratio <= 0.8 {
		t.Errorf("GOMEMLIMIT %s is %.1f%% of limits.memory %s, want more than 80%% and at most 90%%", value, 100*ratio, c.Resources.Limits.Memory())
	}
}

// checkNetworkPolicy checks that one NetworkPolicy selects the daemon's pod and lets in
// only its port https, and out only the apiservers' ports and DNS, and, sharded, the
// other replicas' port https.
func checkNetworkPolicy(t *testing.T, m manifests, d *appsv1.Deployment, sharded bool) {
	t.Helper()
	objs := m.of("NetworkPolicy")
	if len(objs) != 1 {
		t.Errorf("%d NetworkPolicies, want 1", len(objs))
		return
	}
	var np networkingv1.NetworkPolicy
	m.convert(t, objs[0], &np)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy %s selects %v, want the pods of Deployment %s only (%v)", np.Name, np.Spec.PodSelector, d.Name, d.Spec.Template.Labels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("NetworkPolicy %s policyTypes %v, want Ingress and Egress", np.Name, np.Spec.PolicyTypes)
	}
	// A rule without ports admits every port.
	portsOf := func(rules [][]networkingv1.NetworkPolicyPort) []string {
		var out []string
		for _, ports := range rules {
			if len(ports) == 0 {
				out = append(out, "every port")
			}
			for _, p := range ports {
				out = append(out, fmt.Sprintf("%s/%s", p.Port, *p.Protocol))
			}
		}
		slices.Sort(out)
		return out
	}
	var in, out [][]networkingv1.NetworkPolicyPort
	for _, r := range np.Spec.Ingress {
		in = append(in, r.Ports)
	}
	for _, r := range np.Spec.Egress {
		out = append(out, r.Ports)
	}
	if got, want := portsOf(in), []string{"https/TCP"}; !slices.Equal(got, want) {
		t.Errorf("NetworkPolicy %s lets in %v, want %v", np.Name, got, want)
	}
	want := []string{"443/TCP", "53/TCP", "53/UDP", "6443/TCP"}
	if sharded {
		// The replicas reach each other's API.
		want = []string{"443/TCP", "53/TCP", "53/UDP", "6443/TCP", "https/TCP"}
	}
	if got := portsOf(out); !slices.Equal(got, want) {
		t.Errorf("NetworkPolicy %s lets out %v, want %v", np.Name, got, want)
	}
}

// manifests are the objects of a kustomize build.
type manifests []*unstructured.Unstructured

func parseManifests(t *testing.T, out string) manifests {
	t.Helper()
	var m manifests
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("parsing the kustomize output: %v", err)
		}
		if o.Object != nil {
			m = append(m, &o)
		}
	}
	if len(m) == 0 {
		t.Fatal("kustomize rendered no object")
	}
	return m
}

func (m manifests) of(kind string) []*unstructured.Unstructured {
	var objs []*unstructured.Unstructured
	for _, o := range m {
		if o.GetKind() == kind {
			objs = append(objs, o)
		}
	}
	return objs
}

func (m manifests) get(kind, name string) *unstructured.Unstructured {
	for _, o := range m.of(kind) {
		if o.GetName() == name {
			return o
		}
	}
	return nil
}

func (manifests) convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}

// workload returns the one Deployment, or the one StatefulSet of a sharded fleet with a
// Deployment of its pod template as a view of it, which runs the daemon in one
// container.
func (m manifests) workload(t *testing.T) (*appsv1.Deployment, *appsv1.StatefulSet) {
	t.Helper()
	objs, sets := m.of("Deployment"), m.of("StatefulSet")
	if len(objs)+len(sets) != 1 {
		t.Fatalf("%d Deployments and %d StatefulSets, want one of them", len(objs), len(sets))
	}
	var d appsv1.Deployment
	var sts *appsv1.StatefulSet
	if len(sets) == 1 {
		sts = &appsv1.StatefulSet{}
		m.convert(t, sets[0], sts)
		d = appsv1.Deployment{ObjectMeta: sts.ObjectMeta, Spec: appsv1.DeploymentSpec{Replicas: sts.Spec.Replicas, Selector: sts.Spec.Selector, Template: sts.Spec.Template}}
	} else {
		m.convert(t, objs[0], &d)
	}
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("Deployment %s has %d containers, want 1", d.Name, n)
	}
	return &d, sts
}

// config returns the configuration that the daemon of d reads: the file named by its
// --config argument, from the ConfigMap mounted there, with its container's environment
// (podEnv), loaded as the daemon loads it.
func (m manifests) config(t *testing.T, d *appsv1.Deployment) *config.Config {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	var file string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--"+config.ConfigFlag+"="); ok {
			file = v
		}
	}
	i := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == file })
	if file == "" || i < 0 || c.VolumeMounts[i].SubPath == "" {
		t.Fatalf("args %q: want --%s=FILE, with FILE a subPath mount", c.Args, config.ConfigFlag)
	}
	vm := c.VolumeMounts[i]
	j := slices.IndexFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name })
	if j < 0 || d.Spec.Template.Spec.Volumes[j].ConfigMap == nil {
		t.Fatalf("%s is not mounted from a ConfigMap", file)
	}
	cm := m.get("ConfigMap", d.Spec.Template.Spec.Volumes[j].ConfigMap.Name)
	if cm == nil {
		t.Fatalf("ConfigMap %s is not in the manifests", d.Spec.Template.Spec.Volumes[j].ConfigMap.Name)
	}
	data, ok, _ := unstructured.NestedString(cm.Object, "data", vm.SubPath)
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.GetName(), vm.SubPath)
	}
	local := filepath.Join(t.TempDir(), vm.SubPath)
	if err := os.WriteFile(local, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	env := podEnv(d)
	cfg, err := config.Load(config.LoadOptions{File: local, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("the configuration in ConfigMap %s, with the environment %v, does not load:\n%v", cm.GetName(), env, err)
	}
	return cfg
}

// podEnv returns the environment of d's container as the kubelet sets it in the pod
// named d's name and "-0" (replica 0 of a StatefulSet): the pod's name and namespace
// from the downward API, and every $(NAME) of an entry before expanded.
func podEnv(d *appsv1.Deployment) map[string]string {
	env := map[string]string{}
	var refs []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		v := strings.NewReplacer(refs...).Replace(e.Value)
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			switch f.FieldRef.FieldPath {
			case "metadata.name":
				v = d.Name + "-0"
			case "metadata.namespace":
				v = d.Namespace
			}
		}
		env[e.Name] = v
		refs = append(refs, "$("+e.Name+")", v)
	}
	return env
}

// kubectlIn runs the real kubectl with stdin and returns its stderr, which holds the
// apiserver's warnings.
func kubectlIn(t *testing.T, stdin io.Reader, args ...string) string {
	t.Helper()
	bin, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stderr.String()
}

// resourceFor resolves a kubectl-style resource name the way the informer package does:
// resource.version.group first, then resource.group.
func resourceFor(mapper *restmapper.DeferredDiscoveryRESTMapper, name string) (schema.GroupVersionResource, error) {
	full, gr := schema.ParseResourceArg(name)
	if full != nil {
		if gvr, err := mapper.ResourceFor(*full); err == nil {
			return gvr, nil
		}
	}
	return mapper.ResourceFor(gr.WithVersion(""))
}

// allowed asks the apiserver whether the ServiceAccount user may do attrs.
func allowed(t *testing.T, cs kubernetes.Interface, user, namespace string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &attrs,
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}
