package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestDaemonReloadsConfig runs `fleetwatch serve --config FILE` against two real
// clusters and edits the file while it runs: the cluster selection, the resources and the
// snapshot's timing change without a restart, without relisting what did not change, and
// a broken file changes nothing.
func TestDaemonReloadsConfig(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"alpha", "beta"}})
	ctx := t.Context()
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 2, Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		createConfigMap(t, c.Clientset(), "shop", "settings", c.Name)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	all := base + "/clusters/*"
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	// snapshotTiming is the snapshot section's interval and maxPending.
	snapshotTiming := "interval: 100ms"
	// writeConfig writes the config file with the given contexts and resources
	// sections, as an editor does: a new file renamed over the old one.
	writeConfig := func(contexts, resources string) {
		t.Helper()
		cfg := fmt.Sprintf("kubeconfig: [%q]\n%s\n%s\nsnapshot:\n  path: %q\n  %s\nserver:\n  address: 127.0.0.1:%d\n",
			kubeconfig, contexts, resources, filepath.Join(dir, "fleetwatch.db"), snapshotTiming, port)
		tmp := cfgPath + ".tmp"
		if err := os.WriteFile(tmp, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgPath); err != nil {
			t.Fatal(err)
		}
	}
	const podsOnly = "resources: [{name: pods}, {name: namespaces}]"
	writeConfig("", podsOnly)

	d := startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReady := func() {
		t.Helper()
		waitReadyz(t, http.DefaultClient, base)
	}
	waitReady()

	// clusters returns the names of /apis/fleetwatch.io/v1alpha1/clusters.
	clusters := func() []string {
		var names []string
		for _, item := range listItems(t, base+"/apis/fleetwatch.io/v1alpha1/clusters") {
			names = append(names, item.GetName())
		}
		sort.Strings(names)
		return names
	}
	// fleet returns the cluster/namespace/name keys of a list of the whole fleet, and
	// the truth: the same objects read from every cluster, under the given names.
	fleet := func(path string) []string {
		var keys []string
		for _, item := range listItems(t, all+path) {
			keys = append(keys, aggregate.KeyFor(item.GetAnnotations()["fleetwatch.io/cluster"], &item).String())
		}
		sort.Strings(keys)
		return keys
	}
	truth := func(gvr schema.GroupVersionResource, names map[string]string) []string {
		var keys []string
		for _, c := range env.Clusters {
			name, ok := names[c.Name]
			if !ok {
				continue
			}
			list, err := c.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, item := range list.Items {
				keys = append(keys, aggregate.KeyFor(name, &item).String())
			}
		}
		sort.Strings(keys)
		return keys
	}
	both := map[string]string{"alpha": "alpha", "beta": "beta"}
	expectFleet := func(what, path string, gvr schema.GroupVersionResource, names map[string]string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() string {
			if got, want := fleet(path), truth(gvr, names); !slices.Equal(got, want) {
				return fmt.Sprintf("got %v\nwant %v", got, want)
			}
			return ""
		})
	}
	expectFleet("pods of both clusters", "/api/v1/pods", podsGVR, both)

	t.Run("exclude a context", func(t *testing.T) {
		writeConfig("contexts: {exclude: [beta]}", podsOnly)
		eventually(t, 60*time.Second, "beta gone from the clusters", func() string {
			if got := clusters(); !slices.Equal(got, []string{"alpha"}) {
				return fmt.Sprint(got)
			}
			return ""
		})
		expectFleet("pods of alpha only", "/api/v1/pods", podsGVR, map[string]string{"alpha": "alpha"})
	})

	t.Run("include it again", func(t *testing.T) {
		writeConfig("", podsOnly)
		eventually(t, 60*time.Second, "beta back among the clusters", func() string {
			if got := clusters(); !slices.Equal(got, []string{"alpha", "beta"}) {
				return fmt.Sprint(got)
			}
			return ""
		})
		expectFleet("pods of both clusters again", "/api/v1/pods", podsGVR, both)
		waitReady()
	})

	t.Run("the snapshot's timing applies without a restart", func(t *testing.T) {
		// applied counts the lines that say the snapshot's timing was applied.
		applied := func() int {
			n := 0
			for _, l := range strings.Split(readLog(t, d), "\n") {
				if strings.Contains(l, "Applied the new configuration") && strings.Contains(l, `"snapshot.interval","snapshot.maxPending"`) {
					n++
				}
			}
			return n
		}
		for i, timing := range []string{"{interval: 2s, maxPending: 50}", "{interval: 100ms}"} {
			snapshotTiming = strings.NewReplacer("{", "", "}", "", ", ", "\n  ").Replace(timing)
			writeConfig("", podsOnly)
			eventually(t, 30*time.Second, "the timing applied", func() string {
				if n := applied(); n != i+1 {
					return fmt.Sprintf("applied %d times", n)
				}
				return ""
			})
		}
		for _, l := range strings.Split(readLog(t, d), "\n") {
			if strings.Contains(l, "restart fleetwatch to apply them") && strings.Contains(l, "snapshot.") {
				t.Errorf("the snapshot's timing was said to need a restart: %s", l)
			}
		}
		waitReady()
	})

	const withConfigMaps = "resources: [{name: pods}, {name: namespaces}, {name: configmaps}]"
	t.Run("add a resource without relisting the others", func(t *testing.T) {
		if code, _ := httpGet(t, all+"/api/v1/configmaps"); code != http.StatusNotFound {
			t.Fatalf("configmaps before they are configured: %d, want 404", code)
		}
		before := listedObjects(ctx, t, env)
		writeConfig("", withConfigMaps)
		expectFleet("configmaps of both clusters", "/api/v1/configmaps", configMapsGVR, both)
		waitReady()
		after := listedObjects(ctx, t, env)
		for _, c := range env.Clusters {
			if b, a := before[c.Name+" pods"], after[c.Name+" pods"]; a != b {
				t.Errorf("%s: %v pods listed when configmaps were added, want none", c.Name, a-b)
			}
			if b, a := before[c.Name+" configmaps"], after[c.Name+" configmaps"]; a <= b {
				t.Errorf("%s: no configmaps listed (%v before, %v after): the apiserver metrics do not show the new informer", c.Name, b, a)
			}
		}
		expectFleet("pods of both clusters still", "/api/v1/pods", podsGVR, both)
	})

	t.Run("a broken config is logged and changes nothing", func(t *testing.T) {
		broken := "resources: [{name: Pods}, {name: configmaps, labelSelector: 'a in ('}]\nsnapshot: {interval: soon}\n"
		if err := os.WriteFile(cfgPath, []byte(broken), 0o600); err != nil { // written in place this time
			t.Fatal(err)
		}
		const msg = "Reloading the configuration failed; keeping the current one"
		eventually(t, 30*time.Second, "the error in the log", func() string {
			if !strings.Contains(readLog(t, d), msg) {
				return "not logged"
			}
			return ""
		})
		time.Sleep(2 * time.Second) // time for more file events, which must not repeat it
		log := readLog(t, d)
		if n := strings.Count(log, msg); n != 1 {
			t.Errorf("the error was logged %d times, want once", n)
		}
		// The entry and its indented continuation lines.
		line := log[strings.Index(log, msg):]
		for i, l := range strings.Split(line, "\n") {
			if i > 0 && !strings.HasPrefix(l, "\t") && !strings.HasPrefix(l, " ") {
				line = strings.Join(strings.Split(line, "\n")[:i], "\n")
				break
			}
		}
		for _, key := range []string{"resources[0].name", "resources[1].labelSelector", "snapshot.interval"} {
			if !strings.Contains(line, key) {
				t.Errorf("the error does not name %s:\n%s", key, line)
			}
		}
		if d.cmd.ProcessState != nil {
			t.Fatalf("the daemon exited: %v", d.cmd.ProcessState)
		}
		if got := clusters(); !slices.Equal(got, []string{"alpha", "beta"}) {
			t.Errorf("clusters %v", got)
		}
		expectFleet("configmaps still served", "/api/v1/configmaps", configMapsGVR, both)
		expectFleet("pods still served", "/api/v1/pods", podsGVR, both)
	})

	t.Run("an alias renames a cluster", func(t *testing.T) {
		writeConfig("contexts: {aliases: {beta: bravo}}", withConfigMaps)
		eventually(t, 60*time.Second, "beta renamed bravo", func() string {
			if got := clusters(); !slices.Equal(got, []string{"alpha", "bravo"}) {
				return fmt.Sprint(got)
			}
			return ""
		})
		renamed := map[string]string{"alpha": "alpha", "beta": "bravo"}
		expectFleet("pods under the new name", "/api/v1/pods", podsGVR, renamed)
		expectFleet("configmaps under the new name", "/api/v1/configmaps", configMapsGVR, renamed)
		if code, _ := httpGet(t, base+"/clusters/beta/api/v1/pods"); code != http.StatusNotFound {
			t.Errorf("the old name still answers: %d", code)
		}
		waitReady()
	})

	t.Run("remove a resource; a key that needs a restart is logged, the rest applies", func(t *testing.T) {
		writeConfig("contexts: {aliases: {beta: bravo}}\nlog: {format: json}", podsOnly)
		eventually(t, 30*time.Second, "the restart notice", func() string {
			for _, l := range strings.Split(readLog(t, d), "\n") {
				if strings.Contains(l, "restart fleetwatch to apply them") && strings.Contains(l, `keys=["log.format"]`) {
					return ""
				}
			}
			return "not logged"
		})
		eventually(t, 30*time.Second, "configmaps gone", func() string {
			if items := listItems(t, all+"/api/v1/configmaps"); len(items) > 0 {
				return fmt.Sprintf("%d configmaps listed", len(items))
			}
			return ""
		})
		if got := clusters(); !slices.Equal(got, []string{"alpha", "bravo"}) {
			t.Errorf("clusters %v", got)
		}
		expectFleet("pods still served", "/api/v1/pods", podsGVR, map[string]string{"alpha": "alpha", "beta": "bravo"})
	})
}

// httpGet returns the status code and body of a GET of url.
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	r := get(t.Context(), t, http.DefaultClient, url, "")
	return r.code, r.body
}

// listItems returns the items of the list at url; none if it answers 404.
func listItems(t *testing.T, url string) []unstructured.Unstructured {
	t.Helper()
	code, body := httpGet(t, url)
	if code == http.StatusNotFound {
		return nil
	}
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	var list unstructured.UnstructuredList
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("GET %s: not a list: %v", url, err)
	}
	return list.Items
}

// listedObjects returns how many pods and configmaps each apiserver has handed out in
// lists, by "cluster resource".
func listedObjects(ctx context.Context, t *testing.T, env *testenv.Env) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, c := range env.Clusters {
		m, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []string{"pods", "configmaps"} {
			out[c.Name+" "+r] = m.ListedObjects("", r)
		}
	}
	return out
}

func readLog(t *testing.T, d *daemon) string {
	t.Helper()
	b, err := os.ReadFile(d.log.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
