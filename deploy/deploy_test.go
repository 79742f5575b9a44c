package deploy_test

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/config"
)

// configMapName is the ConfigMap whose key configKey the Deployment mounts as
// /etc/fleetwatch/config.yaml.
const (
	configMapName = "fleetwatch-config"
	configKey     = "config.yaml"
)

// kustomization is the part of a kustomization.yaml that the tests read.
type kustomization struct {
	Namespace          string   `json:"namespace"`
	Resources          []string `json:"resources"`
	Components         []string `json:"components"`
	Patches            []patch  `json:"patches"`
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
}

type patch struct {
	Path string `json:"path"`
}

// configFiles returns, for every kustomization under the working directory that generates
// the ConfigMap configMapName, the file behind its key configKey.
func configFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var k kustomization
		if err := yaml.Unmarshal(data, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		dir := filepath.Dir(path)
		for _, g := range k.ConfigMapGenerator {
			if g.Name != configMapName {
				continue
			}
			for _, f := range g.Files {
				// A file is "path" (the key is its base name) or "key=path".
				key, file, ok := strings.Cut(f, "=")
				if !ok {
					key, file = filepath.Base(f), f
				}
				if key == configKey {
					files[dir] = filepath.Join(dir, file)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestConfig loads the configuration that every kustomization generates the way the
// daemon does, strictly: an unknown key, a value of the wrong type, or a non-loopback
// address without TLS and a token file fails here, rather than in a pod that crash-loops.
// config.Load opens none of the paths that the configuration names (docs/config.md,
// Paths), so the mounted files need not exist here and nothing is left unchecked for
// their absence.
func TestConfig(t *testing.T) {
	files := configFiles(t)
	for _, dir := range []string{"base", filepath.Join("overlays", "example")} {
		if files[dir] == "" {
			t.Errorf("%s: no configMapGenerator %s with the key %s", dir, configMapName, configKey)
		}
	}
	noEnv := func(string) (string, bool) { return "", false }
	for dir, file := range files {
		t.Run(dir, func(t *testing.T) {
			c, err := config.Load(config.LoadOptions{File: file, LookupEnv: noEnv})
			if err != nil {
				t.Fatalf("%s is not a valid configuration:\n%v", file, err)
			}
			// Relative paths would be resolved against the directory of the file, which
			// is another one in the pod.
			abs, err := filepath.Abs(dir)
			if err != nil {
				t.Fatal(err)
			}
			paths := append([]string{c.Snapshot.Path, c.Server.TLS.CertFile, c.Server.TLS.KeyFile, c.Server.Auth.TokenFile}, c.Kubeconfig...)
			for _, p := range paths {
				if p == "" || strings.HasPrefix(p, abs) {
					t.Errorf("%s: path %q is empty or relative", file, p)
				}
			}
		})
	}
}

// TestShardedComponent checks components/sharded without rendering it (the end-to-end
// suite renders and applies it): the settings its pod patch puts in the environment turn
// sharding on in a configuration the daemon accepts, with the address of the replica
// under the headless Service; the Service is headless; and the RBAC is a Role on Leases
// only, with no verb beyond those package shard uses.
func TestShardedComponent(t *testing.T) {
	dir := filepath.Join("components", "sharded")
	read := func(name string, into any) {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}

	var pod struct {
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Env []struct {
							Name  string `json:"name"`
							Value string `json:"value"`
						} `json:"env"`
					} `json:"containers"`
				} `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	read("pod-patch.yaml", &pod)
	env := map[string]string{}
	for _, e := range pod.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	// The kubelet expands $(POD_NAME) and $(POD_NAMESPACE) from the entries before.
	expand := strings.NewReplacer("$(POD_NAME)", "fleetwatch-1", "$(POD_NAMESPACE)", "fleetwatch")
	c, err := config.Load(config.LoadOptions{File: filepath.Join("base", configKey), LookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return expand.Replace(v), ok && strings.HasPrefix(k, config.EnvPrefix)
	}})
	if err != nil {
		t.Fatalf("the base's configuration with the component's environment: %v", err)
	}
	if !c.Shard.Enabled || c.Shard.Address != "https://fleetwatch-1.fleetwatch-peers.fleetwatch.svc:8443" {
		t.Errorf("shard %+v: want it enabled, with the address of the pod under fleetwatch-peers", c.Shard)
	}
	// Identity and namespace come from the pod: its host name and its ServiceAccount.
	if c.Shard.Identity != "" || c.Shard.Namespace != "" || c.Shard.HomeKubeconfig != "" {
		t.Errorf("shard %+v: want the identity, the namespace and the home cluster left to the pod", c.Shard)
	}

	var svc struct {
		Metadata struct{ Name string } `json:"metadata"`
		Spec     struct {
			ClusterIP                string `json:"clusterIP"`
			PublishNotReadyAddresses bool   `json:"publishNotReadyAddresses"`
		} `json:"spec"`
	}
	read("service-peers.yaml", &svc)
	if svc.Metadata.Name != "fleetwatch-peers" || svc.Spec.ClusterIP != "None" || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("peers Service %+v: want fleetwatch-peers, headless, listing pods that are not ready", svc)
	}

	var role struct {
		Kind  string `json:"kind"`
		Rules []struct {
			APIGroups     []string `json:"apiGroups"`
			Resources     []string `json:"resources"`
			Verbs         []string `json:"verbs"`
			ResourceNames []string `json:"resourceNames"`
		} `json:"rules"`
	}
	read("role.yaml", &role)
	if role.Kind != "Role" || len(role.Rules) != 2 {
		t.Fatalf("RBAC %+v: want two rules of a Role (namespaced, not a ClusterRole)", role)
	}
	if s := role.Rules[1]; fmt.Sprint(s.APIGroups, s.Resources, s.Verbs) != "[fleetwatch.io] [clusters/state] [get]" {
		t.Errorf("Role rule %+v: want get on clusters/state of fleetwatch.io, the handed-over states, only", s)
	}
	r := role.Rules[0]
	if fmt.Sprint(r.APIGroups) != "[coordination.k8s.io]" || fmt.Sprint(r.Resources) != "[leases]" {
		t.Errorf("Role rule %+v: want leases of coordination.k8s.io only", r)
	}
	for _, v := range r.Verbs {
		if v != "get" && v != "list" && v != "watch" && v != "create" && v != "update" {
			t.Errorf("Role grants %q on leases; package shard needs only get, list, watch, create and update", v)
		}
	}
}

// TestShardedOverlay checks that overlays/sharded has the warm handover on, without
// rendering it (the end-to-end suite renders and applies it): the base's configuration,
// with the environment that components/sharded and the overlay's patch give the pod,
// hands moved clusters over warm; the files it reads for that are on the Secret volume
// that the pod mounts; and the ClusterRoleBinding to system:auth-delegator, which
// delegated authentication needs, binds the pod's ServiceAccount.
func TestShardedOverlay(t *testing.T) {
	dir := filepath.Join("overlays", "sharded")
	var k kustomization
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	for _, want := range []string{"../../base", "clusterrolebinding-auth-delegator.yaml"} {
		if !slices.Contains(k.Resources, want) {
			t.Errorf("%s: resources %q, want %s among them", dir, k.Resources, want)
		}
	}
	if !slices.Contains(k.Components, "../../components/sharded") || !slices.ContainsFunc(k.Patches, func(p patch) bool { return p.Path == "handover-patch.yaml" }) {
		t.Errorf("%s: components %q and patches %+v, want components/sharded and handover-patch.yaml", dir, k.Components, k.Patches)
	}

	var base appsv1.Deployment
	readYAML(t, filepath.Join("base", "deployment.yaml"), &base)
	c := shardedConfig(t, k.Namespace, "fleetwatch-1")
	if on, lacking := c.WarmHandover(); !on {
		t.Errorf("overlays/sharded: warm handover off, lacking %q", lacking)
	}
	if c.Server.Auth.Delegated.Kubeconfig != "" || c.Shard.HomeKubeconfig != "" {
		t.Errorf("home cluster %q, %q: want the pod's in-cluster config, whose ServiceAccount token the replicas present to each other", c.Server.Auth.Delegated.Kubeconfig, c.Shard.HomeKubeconfig)
	}
	// The replicas trust the CA of the Secret they serve from: the key ca.crt, which
	// cert-manager writes (TestCertManagerComponent) and docs/deploy.md has users create.
	secret := tlsSecret(t, base)
	for key, path := range map[string]string{
		"server.tls.certFile": c.Server.TLS.CertFile,
		"server.tls.keyFile":  c.Server.TLS.KeyFile,
		"shard.peerCaFile":    c.Shard.PeerCAFile,
	} {
		v := mountedVolume(t, base, path)
		if v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("%s %q: on volume %s, want one of the Secret %s", key, path, v.Name, secret)
		}
	}
	if filepath.Base(c.Shard.PeerCAFile) != "ca.crt" || filepath.Dir(c.Shard.PeerCAFile) != filepath.Dir(c.Server.TLS.CertFile) {
		t.Errorf("shard.peerCaFile %q: want ca.crt next to server.tls.certFile %q", c.Shard.PeerCAFile, c.Server.TLS.CertFile)
	}

	var crb rbacv1.ClusterRoleBinding
	readYAML(t, filepath.Join(dir, "clusterrolebinding-auth-delegator.yaml"), &crb)
	want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: base.Spec.Template.Spec.ServiceAccountName, Namespace: k.Namespace}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "system:auth-delegator" || !slices.Equal(crb.Subjects, []rbacv1.Subject{want}) {
		t.Errorf("ClusterRoleBinding %s: roleRef %+v, subjects %+v; want system:auth-delegator for %+v only", crb.Name, crb.RoleRef, crb.Subjects, want)
	}
}

// TestCertManagerComponent checks the Certificate of components/cert-manager against the
// pod and overlays/sharded, without rendering it (the end-to-end suite renders it into a
// copy of the overlay in another namespace): it writes the Secret that the pod mounts
// for server.tls.certFile, names the Service and every replica's address, and more
// replicas than the StatefulSet starts with, for server auth, and is issued by a CA
// Issuer whose CA is a Certificate of its own, self-signed, so that the Secret holds it
// as ca.crt.
func TestCertManagerComponent(t *testing.T) {
	dir := filepath.Join("components", "cert-manager")
	var k kustomization
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	certs := map[string]certificate{}
	issuers := map[string]issuer{}
	for _, r := range k.Resources {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		path := filepath.Join(dir, r)
		readYAML(t, path, &o)
		switch o.Kind {
		case "Certificate":
			var c certificate
			readYAML(t, path, &c)
			certs[o.Metadata.Name] = c
		case "Issuer":
			var i issuer
			readYAML(t, path, &i)
			issuers[o.Metadata.Name] = i
		default:
			t.Errorf("%s: kind %s, want Certificates and Issuers only", path, o.Kind)
		}
	}

	var base appsv1.Deployment
	readYAML(t, filepath.Join("base", "deployment.yaml"), &base)
	secret := tlsSecret(t, base)
	var serving *certificate
	for _, c := range certs {
		if c.Spec.SecretName == secret {
			serving = &c
		}
	}
	if serving == nil {
		t.Fatalf("no Certificate writes the Secret %s that the pod mounts for its certificate", secret)
	}

	// Every replica's address, as the pod publishes it in the namespace of
	// overlays/sharded, and the Service's name.
	var overlay kustomization
	readYAML(t, filepath.Join("overlays", "sharded", "kustomization.yaml"), &overlay)
	names := []string{fmt.Sprintf("%s.%s.svc", base.Name, overlay.Namespace)}
	for i := range 2 * shardedReplicas(t) {
		c := shardedConfig(t, overlay.Namespace, fmt.Sprintf("%s-%d", base.Name, i))
		u, err := url.Parse(c.Shard.Address)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, u.Hostname())
	}
	for _, n := range names {
		if !slices.ContainsFunc(serving.Spec.DNSNames, func(p string) bool { return dnsNameMatches(p, n) }) {
			t.Errorf("Certificate dnsNames %q: %s is not among them", serving.Spec.DNSNames, n)
		}
	}
	if !slices.Contains(serving.Spec.Usages, "server auth") {
		t.Errorf("Certificate usages %q: want server auth", serving.Spec.Usages)
	}

	// serving ← a CA Issuer ← the CA's Certificate ← a self-signed Issuer.
	ref := serving.Spec.IssuerRef
	caIssuer, ok := issuers[ref.Name]
	if ref.Kind != "Issuer" || !ok || caIssuer.Spec.CA == nil {
		t.Fatalf("Certificate issuerRef %+v: want a CA Issuer of the component", ref)
	}
	var ca *certificate
	for _, c := range certs {
		if c.Spec.SecretName == caIssuer.Spec.CA.SecretName {
			ca = &c
		}
	}
	if ca == nil || !ca.Spec.IsCA {
		t.Fatalf("Issuer %s signs with the Secret %s: want it written by a Certificate with isCA", ref.Name, caIssuer.Spec.CA.SecretName)
	}
	if i, ok := issuers[ca.Spec.IssuerRef.Name]; ca.Spec.IssuerRef.Kind != "Issuer" || !ok || i.Spec.SelfSigned == nil {
		t.Errorf("the CA's issuerRef %+v: want a self-signed Issuer of the component", ca.Spec.IssuerRef)
	}
}

// certificate and issuer are the parts of cert-manager's Certificate and Issuer
// (cert-manager.io/v1) that the tests read.
type certificate struct {
	Spec struct {
		SecretName string   `json:"secretName"`
		DNSNames   []string `json:"dnsNames"`
		Usages     []string `json:"usages"`
		IsCA       bool     `json:"isCA"`
		IssuerRef  struct {
			Kind string `json:"kind"`
			Name string `json:"name"`
		} `json:"issuerRef"`
	} `json:"spec"`
}

type issuer struct {
	Spec struct {
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
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

// shardedConfig returns the configuration of the pod named pod of overlays/sharded in
// namespace: the base's file, with the environment of components/sharded's pod patch
// and of the overlay's handover patch, expanded as the kubelet does.
func shardedConfig(t *testing.T, namespace, pod string) *config.Config {
	t.Helper()
	env := map[string]string{}
	expand := strings.NewReplacer("$(POD_NAME)", pod, "$(POD_NAMESPACE)", namespace)
	for _, file := range []string{
		filepath.Join("components", "sharded", "pod-patch.yaml"),
		filepath.Join("overlays", "sharded", "handover-patch.yaml"),
	} {
		var p appsv1.Deployment
		readYAML(t, file, &p)
		for _, e := range p.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom == nil {
				env[e.Name] = expand.Replace(e.Value)
			}
		}
	}
	c, err := config.Load(config.LoadOptions{File: filepath.Join("base", configKey), LookupEnv: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	if err != nil {
		t.Fatalf("the base's configuration with the sharded pod's environment: %v", err)
	}
	return c
}

// shardedReplicas returns the replicas of the StatefulSet of components/sharded.
func shardedReplicas(t *testing.T) int {
	t.Helper()
	var ops []struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	readYAML(t, filepath.Join("components", "sharded", "statefulset.json-patch.yaml"), &ops)
	for _, op := range ops {
		if n, ok := op.Value.(float64); ok && op.Path == "/spec/replicas" {
			return int(n)
		}
	}
	t.Fatal("components/sharded sets no /spec/replicas")
	return 0
}

// tlsSecret returns the Secret of the volume that d mounts for the base's
// server.tls.certFile.
func tlsSecret(t *testing.T, d appsv1.Deployment) string {
	t.Helper()
	c, err := config.Load(config.LoadOptions{File: filepath.Join("base", configKey), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	v := mountedVolume(t, d, c.Server.TLS.CertFile)
	if v.Secret == nil {
		t.Fatalf("server.tls.certFile %q is on volume %s, not one of a Secret", c.Server.TLS.CertFile, v.Name)
	}
	return v.Secret.SecretName
}

// mountedVolume returns the volume of d's container mounted where path is.
func mountedVolume(t *testing.T, d appsv1.Deployment, path string) corev1.Volume {
	t.Helper()
	pod := d.Spec.Template.Spec
	for _, vm := range pod.Containers[0].VolumeMounts {
		if path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/") {
			if i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vm.Name }); i >= 0 {
				return pod.Volumes[i]
			}
		}
	}
	t.Fatalf("%q is on no volume of Deployment %s", path, d.Name)
	return corev1.Volume{}
}

// readYAML unmarshals the YAML file at path into v.
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
