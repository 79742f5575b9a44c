package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// kubectl runs the real kubectl and returns its stdout.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// kubectlWatch starts the real kubectl with args, a watch, and returns the lines of its
// stdout. kubectl is killed when the test ends or ctx is done.
func kubectlWatch(ctx context.Context, t *testing.T, args ...string) <-chan string {
	t.Helper()
	bin, err := testenv.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines
}

// waitLine returns the next line of lines that contains every one of words, failing
// the test if lines ends or ctx is done first.
func waitLine(ctx context.Context, t *testing.T, lines <-chan string, what string, words ...string) string {
	t.Helper()
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("%s: kubectl -w ended", what)
			}
			if !slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(l, w) }) {
				return l
			}
		case <-ctx.Done():
			t.Fatalf("%s: not seen", what)
		}
	}
}

// itemKeys returns cluster/namespace/name of the items of a kubectl -o json list.
func itemKeys(t *testing.T, out string) []string {
	t.Helper()
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON([]byte(out)); err != nil {
		t.Fatalf("not a list: %v\n%.500s", err, out)
	}
	var keys []string
	for _, item := range list.Items {
		c := item.GetAnnotations()["fleetwatch.io/cluster"]
		if c == "" {
			t.Fatalf("item %s/%s has no fleetwatch.io/cluster annotation", item.GetNamespace(), item.GetName())
		}
		keys = append(keys, aggregate.KeyFor(c, &item).String()+"@"+item.GetResourceVersion())
	}
	sort.Strings(keys)
	return keys
}

func truthKeys(ctx context.Context, t *testing.T, clusters []*testenv.Cluster, filter func(*unstructured.Unstructured) bool) []string {
	t.Helper()
	var keys []string
	for _, c := range clusters {
		list, err := c.Dynamic().Resource(podsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range list.Items {
			if filter == nil || filter(&item) {
				keys = append(keys, aggregate.KeyFor(c.Name, &item).String()+"@"+item.GetResourceVersion())
			}
		}
	}
	sort.Strings(keys)
	return keys
}

// TestDaemonWithKubectl runs `fleetwatch serve` against three real clusters and uses the
// real kubectl as its client.
func TestDaemonWithKubectl(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"prod-eu", "prod-us", "staging"}})
	ctx := t.Context()
	for i, c := range env.Clusters {
		opts := testenv.SampleOptions{Deployments: 2 + i, Replicas: 2}
		if i < 2 {
			if err := c.InstallWidgetCRD(ctx); err != nil {
				t.Fatal(err)
			}
			opts.Widgets = 2
		}
		if err := c.Seed(ctx, opts); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	snapshot := filepath.Join(dir, "fleetwatch.db")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: pods
  - name: deployments.apps
  - name: services
  - name: namespaces
  - name: widgets.v1alpha1.example.com
health:
  interval: 1s
  timeout: 1s
snapshot:
  path: %q
  interval: 100ms
server:
  address: 127.0.0.1:%d
`, kubeconfig, snapshot, port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReady := func() {
		t.Helper()
		waitReadyz(t, http.DefaultClient, base)
	}
	waitReady()

	all := base + "/clusters/*"
	t.Run("get pods -A across the fleet, with a CLUSTER column", func(t *testing.T) {
		out := kubectl(t, "--server", all, "get", "pods", "-A")
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		if len(header) < 3 || header[0] != "NAMESPACE" && header[0] != "CLUSTER" {
			t.Fatalf("header %v", header)
		}
		if !slices.Contains(header, "CLUSTER") {
			t.Fatalf("no CLUSTER column: %v", header)
		}
		for _, c := range env.Clusters {
			if !strings.Contains(out, c.Name) {
				t.Errorf("no pod of %s in:\n%s", c.Name, out)
			}
		}
		if got, want := itemKeys(t, kubectl(t, "--server", all, "get", "pods", "-A", "-o", "json")), truthKeys(ctx, t, env.Clusters, nil); !slices.Equal(got, want) {
			t.Errorf("pods of the fleet:\n got %v\nwant %v", got, want)
		}
	})
	t.Run("one cluster, label selectors, get -o yaml", func(t *testing.T) {
		c := env.Clusters[1]
		got := itemKeys(t, kubectl(t, "--server", base+"/clusters/"+c.Name, "get", "pods", "-A", "-o", "json"))
		if want := truthKeys(ctx, t, env.Clusters[1:2], nil); !slices.Equal(got, want) {
			t.Errorf("pods of %s:\n got %v\nwant %v", c.Name, got, want)
		}
		got = itemKeys(t, kubectl(t, "--server", all, "get", "deployments.apps", "-l", "app=web", "-A", "-o", "json"))
		if len(got) != len(env.Clusters)*2 { // web in shop and payments of every cluster
			t.Errorf("deployments -l app=web: %v", got)
		}
		out := kubectl(t, "--server", base+"/clusters/"+c.Name, "get", "pod", "web-0", "-n", "shop", "-o", "yaml")
		if !strings.Contains(out, "name: web-0") || !strings.Contains(out, "fleetwatch.io/cluster: "+c.Name) {
			t.Errorf("get pod -o yaml:\n%s", out)
		}
		out = kubectl(t, "--server", all, "get", "widgets", "-A")
		if strings.Contains(out, "staging") || !strings.Contains(out, "prod-eu") {
			t.Errorf("widgets exist in prod-eu and prod-us only:\n%s", out)
		}
	})
	t.Run("clusters.fleetwatch.io", func(t *testing.T) {
		out := kubectl(t, "--server", base, "get", "clusters.fleetwatch.io")
		for _, c := range env.Clusters {
			if !strings.Contains(out, c.Name) {
				t.Errorf("cluster %s missing:\n%s", c.Name, out)
			}
		}
	})
	t.Run("kubectl -w sees a new pod", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		lines := kubectlWatch(wctx, t, "--server", all, "get", "pods", "-A", "-w", "--output-watch-events")
		time.Sleep(2 * time.Second)
		createPod(t, env.Clusters[2], "shop", "watched")
		waitLine(wctx, t, lines, "the new pod ADDED", "watched", "ADDED", env.Clusters[2].Name)
	})
	t.Run("kubectl get clusters -w sees a paused cluster turn Unreachable and come back", func(t *testing.T) {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		lines := kubectlWatch(wctx, t, "--server", base, "get", "clusters.fleetwatch.io", "-w", "--output-watch-events")
		staging := env.Clusters[2]
		// The list, then nothing more: the watch starts at the list's resourceVersion.
		var initial []string
		for len(initial) < 4 {
			initial = append(initial, waitLine(wctx, t, lines, "the list", ""))
		}
		if got := strings.Count(strings.Join(initial, "\n"), "Synced"); got != 3 {
			t.Fatalf("the list:\n%s", strings.Join(initial, "\n"))
		}
		if err := staging.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = staging.ResumeAPIServer()
			}
		}()
		// health.interval is 1s above.
		if l := waitLine(wctx, t, lines, "staging Unreachable", staging.Name); !strings.Contains(l, "MODIFIED") || !strings.Contains(l, "Unreachable") {
			t.Fatalf("the first line of %s after its pause: %q", staging.Name, l)
		}
		resumed = true
		if err := staging.ResumeAPIServer(); err != nil {
			t.Fatal(err)
		}
		waitLine(wctx, t, lines, "staging Synced again", "MODIFIED", staging.Name, "Synced")
	})
	t.Run("a watch resumed from a list's resourceVersion loses and repeats nothing", func(t *testing.T) {
		resp, err := http.Get(all + "/api/v1/pods")
		if err != nil {
			t.Fatal(err)
		}
		var list metav1.List
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, c := range env.Clusters {
			name := "resume-" + c.Name
			createPod(t, c, "shop", name)
			want = append(want, aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: name}.String())
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(wctx, http.MethodGet, all+"/api/v1/pods?watch=true&resourceVersion="+list.ResourceVersion, nil)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("watch: %d %s", resp.StatusCode, b)
		}
		dec := json.NewDecoder(resp.Body)
		var got []string
		for len(got) < len(want) {
			var ev struct {
				Type   string                    `json:"type"`
				Object unstructured.Unstructured `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			if ev.Type == "BOOKMARK" {
				continue
			}
			key := aggregate.KeyFor(ev.Object.GetAnnotations()["fleetwatch.io/cluster"], &ev.Object).String()
			if !strings.Contains(key, "resume-") {
				t.Fatalf("event for %s (%s) that happened before the resourceVersion", key, ev.Type)
			}
			got = append(got, key)
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("events %v, want %v", got, want)
		}
	})
	t.Run("write verbs get 405, bad parameters 400", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodDelete, all+"/api/v1/namespaces/shop/pods/web-0", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("DELETE: %d", resp.StatusCode)
		}
		resp, err = http.Get(all + "/api/v1/pods?labelSelector=app+in+(")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "labelSelector") {
			t.Errorf("bad labelSelector: %d %s", resp.StatusCode, body)
		}
	})
	t.Run("kubeconfig edited while running", func(t *testing.T) {
		clusters := func() []string {
			out := kubectl(t, "--server", base, "get", "clusters.fleetwatch.io", "-o", "name")
			return strings.Fields(out)
		}
		if err := env.WriteKubeconfig(kubeconfig, env.Clusters[:2]...); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "cluster removed", func() string {
			if got := clusters(); len(got) != 2 {
				return fmt.Sprint(got)
			}
			if out := kubectl(t, "--server", all, "get", "pods", "-A"); strings.Contains(out, "staging") {
				return "pods of staging still listed"
			}
			return ""
		})
		if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "cluster back", func() string {
			if got := clusters(); len(got) != 3 {
				return fmt.Sprint(got)
			}
			return ""
		})
		waitReady()
	})
	t.Run("SIGTERM during churn: bounded exit, flushed snapshot, warm restart", func(t *testing.T) {
		churnCtx, stopChurn := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			churnConfigMaps(churnCtx, t, env.Clusters[0])
		}()
		time.Sleep(2 * time.Second)
		start := time.Now()
		if err := d.signal(t, syscall.SIGTERM); err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
		if took := time.Since(start); took > 30*time.Second {
			t.Errorf("shutdown took %v", took)
		}
		stopChurn()
		<-done
		// The pods did not change: a restart lists none of them.
		before := listCounters(ctx, t, env)
		d.start(t)
		waitReady()
		after := listCounters(ctx, t, env)
		for k, b := range before {
			if strings.HasSuffix(k, " pods") && after[k][0] != b[0] {
				t.Errorf("%s: %v LIST requests after a graceful restart", k, after[k][0]-b[0])
			}
		}
		if got, want := itemKeys(t, kubectl(t, "--server", all, "get", "pods", "-A", "-o", "json")), truthKeys(ctx, t, env.Clusters, nil); !slices.Equal(got, want) {
			t.Errorf("pods after restart:\n got %v\nwant %v", got, want)
		}
	})
	t.Run("no credential in logs or metrics", func(t *testing.T) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		logs, err := os.ReadFile(d.log.Name())
		if err != nil {
			t.Fatal(err)
		}
		if len(logs) == 0 || !strings.Contains(string(metrics), "fleetwatch_") {
			t.Fatalf("nothing to check: %d bytes of logs, metrics %.200s", len(logs), metrics)
		}
		for what, data := range map[string][]byte{"logs": logs, "/metrics": metrics} {
			if strings.Contains(string(data), env.Token()) {
				t.Errorf("the clusters' bearer token appears in the daemon's %s", what)
			}
		}
		// client-go's requests to each apiserver are counted, by cluster and host.
		for _, c := range env.Clusters {
			sample := fmt.Sprintf(`rest_client_requests_total{cluster=%q,code="200",host=%q,method="GET"}`, c.Name, strings.TrimPrefix(c.Server(), "https://"))
			if !strings.Contains(string(metrics), sample) {
				t.Errorf("/metrics lack %s", sample)
			}
		}
	})
	t.Run("serving speed: fleet list vs the apiservers' own", func(t *testing.T) {
		const rounds = 20
		start := time.Now()
		for range rounds {
			resp, err := http.Get(all + "/api/v1/pods")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		fw := time.Since(start)
		// The same request to each apiserver, body read and discarded alike;
		// resourceVersion=0 is served from the apiserver's watch cache.
		clients := make([]*http.Client, len(env.Clusters))
		for i, c := range env.Clusters {
			hc, err := rest.HTTPClientFor(c.RESTConfig())
			if err != nil {
				t.Fatal(err)
			}
			clients[i] = hc
		}
		start = time.Now()
		for range rounds {
			for i, c := range env.Clusters {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Server()+"/api/v1/pods?resourceVersion=0", nil)
				req.Header.Set("Accept", "application/json")
				resp, err := clients[i].Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		direct := time.Since(start)
		t.Logf("listing every pod of the fleet %d times: fleetwatch %v, the 3 apiservers' watch caches %v, ratio %.2f", rounds, fw, direct, fw.Seconds()/direct.Seconds())
	})
}

func createPod(t *testing.T, c *testenv.Cluster, ns, name string) {
	t.Helper()
	pod := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "x"}}},
	}}
	if _, err := c.Dynamic().Resource(podsGVR).Namespace(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitReadyz waits until the daemon at base answers /readyz with 200 and, where client
// may read the clusters, no cluster is still served from the snapshot unconfirmed
// (Synced reason ServingSnapshot): /readyz passes at once on a warm start, and the
// tests that compare the cache with the servers want the watches resumed.
func waitReadyz(t *testing.T, client *http.Client, base string) {
	t.Helper()
	eventually(t, 90*time.Second, "/readyz and every cluster confirmed", func() string {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		return unconfirmedClusters(client, base)
	})
}

// unconfirmedClusters names the clusters of the daemon at base that are served from the
// snapshot while their identity is verified and their watches resume, if client may
// read them; "" if there are none, or client may not read them.
func unconfirmedClusters(client *http.Client, base string) string {
	resp, err := client.Get(base + "/apis/fleetwatch.io/v1alpha1/clusters")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string } `json:"metadata"`
			Status   struct {
				Conditions []metav1.Condition `json:"conditions"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return err.Error()
	}
	var names []string
	for _, c := range list.Items {
		for _, cond := range c.Status.Conditions {
			if cond.Type == aggregate.ConditionSynced && cond.Reason == fleetwatch.ReasonServingSnapshot {
				names = append(names, c.Metadata.Name)
			}
		}
	}
	if len(names) > 0 {
		return "served from the snapshot, unconfirmed: " + strings.Join(names, ", ")
	}
	return ""
}
