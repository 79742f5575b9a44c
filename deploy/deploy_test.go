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
