package helm_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestParity keeps the chart and the kustomize manifests in step: it renders each
// kustomization with kustomize's Go module (the one built into kubectl) and the chart
// with the values of the same install, and compares them object by object, after
// normalising the differences that are meant, each listed in differences with its
// reason. Anything else that differs, a field, an object, a label, fails.
func TestParity(t *testing.T) {
	for _, tc := range []struct {
		name string
		// dir is the kustomization, under deploy/; edit, when set, changes deploy/'s
		// files first, as a user's overlay would.
		dir    string
		edit   func(t *testing.T, fs filesys.FileSystem)
		values map[string]any
	}{
		{name: "base", dir: "base"},
		{name: "sharded", dir: "overlays/sharded", values: readValues(t, filepath.Join(valuesDir, "sharded-values.yaml"))},
		// The overlay with its components/cert-manager line uncommented, as it says.
		{name: "sharded with cert-manager", dir: "overlays/sharded", values: readValues(t, filepath.Join(valuesDir, "sharded-cert-manager-values.yaml")),
			edit: func(t *testing.T, fs filesys.FileSystem) {
				edit(t, fs, "overlays/sharded/kustomization.yaml", "# - ../../components/cert-manager", "- ../../components/cert-manager")
			}},
		{name: "home cluster", dir: "overlays/home", values: map[string]any{"homeCluster": map[string]any{"enabled": true}},
			edit: func(t *testing.T, fs filesys.FileSystem) {
				write(t, fs, "overlays/home/kustomization.yaml", "resources: [../../base]\ncomponents: [../../components/home-cluster]\n")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := deployFS(t)
			if tc.edit != nil {
				tc.edit(t, fs)
			}
			k := kustomize(t, fs, tc.dir)
			h := render(t, tc.values, "fleetwatch")
			for _, d := range differences {
				d.normalise(k, h)
			}
			for _, key := range union(k.keys(), h.keys()) {
				if diff := cmp.Diff(k[key], h[key]); diff != "" {
					t.Errorf("%s differs (-kustomize +chart):\n%s", key, diff)
				}
			}
		})
	}
}

// differences are what the chart renders otherwise than kustomize does, on purpose.
var differences = []struct {
	what, why string
	normalise func(k, h objects)
}{
	{
		what: "the Namespace",
		why: "kustomize renders the namespace it installs into; a chart is installed into the release's namespace, " +
			"which exists before it (helm install --create-namespace, or kubectl create namespace; docs/deploy.md)",
		normalise: func(k, h objects) {
			for key := range k {
				if strings.HasPrefix(key, "Namespace/") {
					delete(k, key)
				}
			}
		},
	},
	{
		what: "Helm's standard labels",
		why:  "helm.sh/chart, app.kubernetes.io/managed-by and app.kubernetes.io/version on every object, as Helm's charts label them",
		normalise: func(k, h objects) {
			for _, o := range h {
				labels := nested[map[string]any](o, "metadata", "labels")
				delete(labels, "helm.sh/chart")
				delete(labels, "app.kubernetes.io/managed-by")
				delete(labels, "app.kubernetes.io/version")
			}
		},
	},
	{
		what: "the labels and selectors of the components' objects",
		why: "kustomize's base labels (instance, component) reach neither the objects of components/ nor their patches, " +
			"which select the pods by app.kubernetes.io/name alone; the chart labels every object alike and selects the " +
			"release's pods by name and instance, so that two releases in one namespace stay apart",
		normalise: func(k, h objects) {
			for key, ko := range k {
				ho := h[key]
				if _, ok := nested[map[string]any](ko, "metadata", "labels")["app.kubernetes.io/instance"]; !ok && ho != nil {
					labels := nested[map[string]any](ho, "metadata", "labels")
					delete(labels, "app.kubernetes.io/instance")
					delete(labels, "app.kubernetes.io/component")
					delete(nested[map[string]any](ho, "spec", "selector"), "app.kubernetes.io/instance")
					delete(nested[map[string]any](ho, "spec", "selector", "matchLabels"), "app.kubernetes.io/instance")
				}
				// components/sharded's egress rule to the other replicas.
				for i, r := range nested[[]any](ko, "spec", "egress") {
					for j, to := range nested[[]any](r.(map[string]any), "to") {
						kl := nested[map[string]any](to.(map[string]any), "podSelector", "matchLabels")
						if _, ok := kl["app.kubernetes.io/instance"]; ok {
							continue
						}
						hr := nested[[]any](ho, "spec", "egress")
						if i < len(hr) {
							if hto := nested[[]any](hr[i].(map[string]any), "to"); j < len(hto) {
								delete(nested[map[string]any](hto[j].(map[string]any), "podSelector", "matchLabels"), "app.kubernetes.io/instance")
							}
						}
					}
				}
			}
		},
	},
	{
		what: "the ConfigMap's name",
		why: "kustomize's configMapGenerator appends a hash of the content, so that a change rolls the pods; the chart's " +
			"name is fixed, and the pod template's annotation checksum/config rolls them",
		normalise: func(k, h objects) {
			for key, o := range k {
				name := nested[string](o, "metadata", "name")
				if base, _, ok := cutLast(name, "-"); ok && strings.HasPrefix(key, "ConfigMap/") && base == "fleetwatch-config" {
					o["metadata"].(map[string]any)["name"] = base
					delete(k, key)
					k["ConfigMap/"+base] = o
					for _, w := range workloads(k) {
						for _, v := range nested[[]any](w, "spec", "template", "spec", "volumes") {
							if cm := nested[map[string]any](v.(map[string]any), "configMap"); cm["name"] == name {
								cm["name"] = base
							}
						}
					}
				}
			}
			for _, w := range workloads(h) {
				meta := nested[map[string]any](w, "spec", "template", "metadata")
				annotations := nested[map[string]any](meta, "annotations")
				delete(annotations, "checksum/config")
				if len(annotations) == 0 {
					delete(meta, "annotations")
				}
			}
		},
	},
	{
		what: "the text of config.yaml",
		why: "kustomize's is deploy/base/config.yaml, with its comments; the chart's is rendered from the values; " +
			"the configurations, parsed, are compared",
		normalise: func(k, h objects) {
			for _, m := range []objects{k, h} {
				if data := nested[map[string]any](m["ConfigMap/fleetwatch-config"], "data"); data != nil {
					var c map[string]any
					if err := yaml.Unmarshal([]byte(data["config.yaml"].(string)), &c); err == nil {
						data["config.yaml"] = c
					}
				}
			}
		},
	},
	{
		what: "the image's tag",
		why:  "the base runs :latest, which overlays pin (images:); the chart pins the release it belongs to, its appVersion",
		normalise: func(k, h objects) {
			for _, m := range []objects{k, h} {
				for _, w := range workloads(m) {
					for _, c := range nested[[]any](w, "spec", "template", "spec", "containers") {
						c := c.(map[string]any)
						c["image"], _, _ = cutLast(c["image"].(string), ":")
					}
				}
			}
		},
	},
}

// deployFS returns an in-memory copy of deploy/'s kustomizations, at the root.
func deployFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	root := filepath.Join("..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "helm":
			return filepath.SkipDir
		case d.IsDir() || strings.HasSuffix(path, ".go"):
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return mem.WriteFile("/"+filepath.ToSlash(rel), b)
	})
	if err != nil {
		t.Fatal(err)
	}
	return mem
}

// edit replaces old, which must be there, with new in the file of fs.
func edit(t *testing.T, fs filesys.FileSystem, file, old, new string) {
	t.Helper()
	b, err := fs.ReadFile("/" + file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s: no %q to replace", file, old)
	}
	write(t, fs, file, strings.Replace(string(b), old, new, 1))
}

func write(t *testing.T, fs filesys.FileSystem, file, content string) {
	t.Helper()
	if err := fs.WriteFile("/"+file, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

// kustomize renders the kustomization dir of fs, as `kubectl kustomize` does.
func kustomize(t *testing.T, fs filesys.FileSystem, dir string) objects {
	t.Helper()
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/"+dir)
	if err != nil {
		t.Fatalf("kustomize %s: %v", dir, err)
	}
	out, err := res.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, string(out))
}

// workloads returns the Deployments and StatefulSets of m.
func workloads(m objects) []map[string]any {
	var out []map[string]any
	for key, o := range m {
		if strings.HasPrefix(key, "Deployment/") || strings.HasPrefix(key, "StatefulSet/") {
			out = append(out, o)
		}
	}
	return out
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func union(a, b []string) []string {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}
