package helm_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/deploy/helm"
)

// chartDir is the chart, and valuesDir its values for each kind of install, as
// chart-testing (ct) finds them.
const (
	chartDir  = "fleetwatch"
	valuesDir = "fleetwatch/ci"
)

// installs are the kinds of install the tests render: the defaults, and each file of
// valuesDir, which the end-to-end suite applies too.
func installs(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(valuesDir, "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no values in %s: %v", valuesDir, err)
	}
	out := map[string]map[string]any{"defaults": nil}
	for _, f := range files {
		out[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = readValues(t, f)
	}
	return out
}

func readValues(t *testing.T, file string) map[string]any {
	t.Helper()
	v, err := chartutil.ReadValuesFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return v.AsMap()
}

// TestLint is `helm lint --strict` with each install's values: the chart, its
// templates and values.schema.json pass Helm's linter with nothing above INFO (an icon
// is only recommended).
func TestLint(t *testing.T) {
	for name, values := range installs(t) {
		t.Run(name, func(t *testing.T) {
			for _, m := range lint.All(chartDir, values, "fleetwatch", true).Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestChartVersion checks that the chart is versioned with fleetwatch's modules: version
// X.Y.Z is the last release of hack/release/releases.txt or a later one (which
// hack/release/prepare.sh writes before the release is recorded), and appVersion, the
// image's default tag, is vX.Y.Z.
func TestChartVersion(t *testing.T) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join("..", "..", "hack", "release", "releases.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var last string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if tag, _, _ := strings.Cut(sc.Text(), " "); semver.IsValid(tag) {
			last = tag
		}
	}
	v := "v" + chart.Version
	if !semver.IsValid(v) || semver.Prerelease(v) != "" || semver.Compare(v, last) < 0 {
		t.Errorf("Chart.yaml version %q: want the last release's %s or a later release", chart.Version, strings.TrimPrefix(last, "v"))
	}
	if chart.AppVersion != v {
		t.Errorf("Chart.yaml appVersion %q, want %s, the tag of version %s", chart.AppVersion, v, chart.Version)
	}
}

// TestRender renders each install and checks the objects it makes, and that the
// configuration its pod reads, the ConfigMap's file with the container's environment,
// is one the daemon accepts (config.Load, as the daemon loads it) and says what the
// values ask for.
func TestRender(t *testing.T) {
	common := []string{"ConfigMap/fleetwatch-config", "Service/fleetwatch", "ServiceAccount/fleetwatch", "NetworkPolicy/fleetwatch"}
	sharded := []string{"StatefulSet/fleetwatch", "Service/fleetwatch-peers", "PodDisruptionBudget/fleetwatch",
		"Role/fleetwatch-shard", "RoleBinding/fleetwatch-shard", "ClusterRoleBinding/fleetwatch-auth-delegator"}
	for _, tc := range []struct {
		install string
		// namespace, when set, is the release's, else fleetwatch.
		namespace string
		want      []string
		check     func(t *testing.T, m objects, c *config.Config)
	}{
		{install: "defaults", want: []string{"Deployment/fleetwatch", "PersistentVolumeClaim/fleetwatch-data"}, check: func(t *testing.T, m objects, c *config.Config) {
			if c.Shard.Enabled || c.Server.Auth.Delegated.Enabled {
				t.Errorf("sharding %t, delegated authentication %t: want neither", c.Shard.Enabled, c.Server.Auth.Delegated.Enabled)
			}
		}},
		{install: "sharded", want: sharded, check: func(t *testing.T, m objects, c *config.Config) {
			if on, lacking := c.WarmHandover(); !on {
				t.Errorf("warm handover off, lacking %q", lacking)
			}
			if want := "https://fleetwatch-0.fleetwatch-peers.fleetwatch.svc:8443"; c.Shard.Address != want {
				t.Errorf("shard.address %q, want %s", c.Shard.Address, want)
			}
		}},
		// In another namespace, which the certificate must name.
		{install: "sharded-cert-manager", namespace: "fleet-shards", want: append(slices.Clone(sharded),
			"Issuer/fleetwatch-selfsigned", "Certificate/fleetwatch-ca", "Issuer/fleetwatch-ca", "Certificate/fleetwatch-tls"),
			check: func(t *testing.T, m objects, c *config.Config) {
				var names []string
				for _, n := range m["Certificate/fleetwatch-tls"]["spec"].(map[string]any)["dnsNames"].([]any) {
					names = append(names, n.(string))
				}
				want := []string{"fleetwatch.fleet-shards.svc", "fleetwatch.fleet-shards.svc.cluster.local", "*.fleetwatch-peers.fleet-shards.svc"}
				if !slices.Equal(names, want) {
					t.Errorf("Certificate dnsNames %q, want %q", names, want)
				}
				if want := "https://fleetwatch-0.fleetwatch-peers.fleet-shards.svc:8443"; c.Shard.Address != want {
					t.Errorf("shard.address %q, want %s", c.Shard.Address, want)
				}
			}},
		{install: "home-delegated", want: []string{"Deployment/fleetwatch", "PersistentVolumeClaim/fleetwatch-data",
			"ClusterRole/fleetwatch", "ClusterRoleBinding/fleetwatch", "ClusterRoleBinding/fleetwatch-auth-delegator"},
			check: func(t *testing.T, m objects, c *config.Config) {
				if !c.Server.Auth.Delegated.Enabled || c.Shard.Enabled || len(c.Resources) != 9 || c.Contexts.Aliases["home"] != "management" {
					t.Errorf("config %+v: want delegated authentication, no sharding, and the values' contexts and resources", c)
				}
			}},
	} {
		t.Run(tc.install, func(t *testing.T) {
			namespace := tc.namespace
			if namespace == "" {
				namespace = "fleetwatch"
			}
			m := render(t, installs(t)[tc.install], namespace)
			want := append(slices.Clone(common), tc.want...)
			slices.Sort(want)
			if got := m.keys(); !slices.Equal(got, want) {
				t.Errorf("objects:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			for key, o := range m {
				if ns := nested[string](o, "metadata", "namespace"); !strings.HasPrefix(key, "Cluster") && ns != namespace {
					t.Errorf("%s in namespace %q, want %s", key, ns, namespace)
				}
			}
			tc.check(t, m, m.config(t))
		})
	}

	t.Run("without NetworkPolicy", func(t *testing.T) {
		m := render(t, map[string]any{"networkPolicy": map[string]any{"enabled": false}}, "fleetwatch")
		if _, ok := m["NetworkPolicy/fleetwatch"]; ok {
			t.Error("networkPolicy.enabled false renders a NetworkPolicy")
		}
	})
}

// TestBadValues checks that values the chart cannot install are refused by `helm
// install` and `helm template` with an error that names the value, by the schema or, for
// the configuration's keys that the chart sets, by the templates.
func TestBadValues(t *testing.T) {
	for _, tc := range []struct {
		values string
		// want are in the error, in this order.
		want []string
	}{
		{"sharding: {replicas: 0}", []string{"/sharding/replicas", "minimum"}},
		{`sharding: {replicas: "3"}`, []string{"/sharding/replicas", "integer"}},
		{"replicas: 3", []string{"additional properties 'replicas' not allowed"}},
		{"sharding: {enabled: yes please}", []string{"/sharding/enabled", "boolean"}},
		{"goMemLimit: 1G", []string{"/goMemLimit", "does not match pattern"}},
		{"persistence: {size: lots}", []string{"/persistence/size", "does not match pattern"}},
		{"resources: {limits: {memory: 1 GB}}", []string{"/resources/limits/memory", "does not match pattern"}},
		{"networkPolicy: {apiserverPorts: [70000]}", []string{"/networkPolicy/apiserverPorts/0", "maximum"}},
		{"tls: {secretName: My_TLS}", []string{"/tls/secretName", "does not match pattern"}},
		{"image: {pullPolicy: Sometimes}", []string{"/image/pullPolicy"}},
		{"config: {resourcs: []}", []string{"/config", "additional properties 'resourcs' not allowed"}},
		{"config: {server: {address: ':9443'}}", []string{"config.server.address: the chart sets it"}},
		{"config: {kubeconfig: [/kc]}", []string{"config.kubeconfig: the chart sets it; set kubeconfigs instead"}},
		{"config: {shard: {enabled: false}}", []string{"config.shard.enabled: the chart sets it; set sharding.enabled instead"}},
		{"config: {server: {auth: {delegated: {enabled: true}}}}", []string{"config.server.auth.delegated.enabled", "set auth.delegated instead"}},
	} {
		t.Run(tc.values, func(t *testing.T) {
			var values map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &values); err != nil {
				t.Fatal(err)
			}
			_, err := helm.Render(chartDir, helm.Options{Values: values})
			if err == nil {
				t.Fatalf("values %s: rendered, want an error", tc.values)
			}
			msg, i := err.Error(), 0
			for _, w := range tc.want {
				j := strings.Index(msg[i:], w)
				if j < 0 {
					t.Fatalf("values %s: error\n%s\nwant %q in it, after %q", tc.values, msg, w, msg[:i])
				}
				i += j + len(w)
			}
		})
	}
}

// objects are a rendering's objects by "Kind/name".
type objects map[string]map[string]any

// render renders the chart with values in namespace, with the release fleetwatch.
func render(t *testing.T, values map[string]any, namespace string) objects {
	t.Helper()
	out, err := helm.Render(chartDir, helm.Options{Namespace: namespace, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	return parseObjects(t, out)
}

// parseObjects parses a YAML stream of objects.
func parseObjects(t *testing.T, stream string) objects {
	t.Helper()
	m := objects{}
	for doc := range strings.SplitSeq("\n"+stream, "\n---") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if o == nil {
			continue
		}
		key := fmt.Sprintf("%s/%s", o["kind"], nested[string](o, "metadata", "name"))
		if _, dup := m[key]; dup {
			t.Fatalf("%s twice", key)
		}
		m[key] = o
	}
	return m
}

func (m objects) keys() []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// nested returns the value at path in o, or T's zero value.
func nested[T any](o map[string]any, path ...string) T {
	var cur any = o
	for _, p := range path {
		mm, _ := cur.(map[string]any)
		cur = mm[p]
	}
	v, _ := cur.(T)
	return v
}

// config returns the configuration that replica 0 of the rendering's workload reads: the
// file in the ConfigMap that --config names, with the container's environment as the
// kubelet sets it, loaded as the daemon loads it.
func (m objects) config(t *testing.T) *config.Config {
	t.Helper()
	w := m["Deployment/fleetwatch"]
	if w == nil {
		w = m["StatefulSet/fleetwatch"]
	}
	containers := nested[[]any](w, "spec", "template", "spec", "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0].(map[string]any)
	if args := fmt.Sprint(c["args"]); args != "[serve --config=/etc/fleetwatch/config.yaml]" {
		t.Fatalf("args %s, want serve with the mounted config.yaml", args)
	}
	file := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(file, []byte(nested[string](m["ConfigMap/fleetwatch-config"], "data", "config.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	// The pod's name and namespace from the downward API, and every $(NAME) of an
	// entry before expanded.
	env := map[string]string{}
	var refs []string
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		v, _ := e["value"].(string)
		v = strings.NewReplacer(refs...).Replace(v)
		switch nested[string](e, "valueFrom", "fieldRef", "fieldPath") {
		case "metadata.name":
			v = "fleetwatch-0"
		case "metadata.namespace":
			v = nested[string](w, "metadata", "namespace")
		}
		env[e["name"].(string)] = v
		refs = append(refs, "$("+e["name"].(string)+")", v)
	}
	cfg, err := config.Load(config.LoadOptions{File: file, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if err != nil {
		t.Fatalf("the rendered configuration does not load:\n%v", err)
	}
	return cfg
}
