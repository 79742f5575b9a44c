package deploy_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/config"
)

// configMapName is the ConfigMap whose key configKey the Deployment mounts as
// /etc/fleetwatch/config.yaml.
const (
	configMapName = "fleetwatch-config"
	configKey     = "config.yaml"
)

// kustomization is the part of a kustomization.yaml that generates the configuration.
type kustomization struct {
	ConfigMapGenerator []struct {
		Name  string   `json:"name"`
		Files []string `json:"files"`
	} `json:"configMapGenerator"`
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
		if v != "get" && v != "list" && v != "create" && v != "update" {
			t.Errorf("Role grants %q on leases; package shard needs only get, list, create and update", v)
		}
	}
}
