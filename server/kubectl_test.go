package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/internal/testcert"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// kubectl runs the real kubectl against a fixture.
type kubectl struct {
	path string
	dir  string
	// requests records the requests the server received, as "METHOD path?query".
	mu       sync.Mutex
	requests []string
}

// newKubectl finds the kubectl that hack/build-tools.sh builds from the same Kubernetes
// release as the test apiservers (FLEETWATCH_KUBECTL, or built on first use). The test
// fails without it: it is never skipped.
func newKubectl(t *testing.T) *kubectl {
	path, err := testenv.Kubectl()
	if err != nil {
		t.Fatalf("kubectl: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return &kubectl{path: path, dir: dir}
}

func (k *kubectl) cmd(ctx context.Context, server string, args ...string) *exec.Cmd {
	all := append([]string{
		"--kubeconfig", filepath.Join(k.dir, "kubeconfig"),
		"--cache-dir", filepath.Join(k.dir, "cache"),
		"--server", server,
		"--request-timeout", "20s",
	}, args...)
	cmd := exec.CommandContext(ctx, k.path, all...)
	cmd.Env = []string{"HOME=" + k.dir, "PATH=" + os.Getenv("PATH")}
	return cmd
}

// run runs kubectl to completion and returns its standard output.
func (k *kubectl) run(t *testing.T, server string, args ...string) string {
	t.Helper()
	out, stderr, err := k.tryRun(t, server, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

func (k *kubectl) tryRun(_ *testing.T, server string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := k.cmd(ctx, server, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// record records the requests of the fixture's server.
func (k *kubectl) record(f *fixture) {
	observe := func(r *http.Request) {
		k.mu.Lock()
		k.requests = append(k.requests, r.Method+" "+r.URL.RequestURI())
		k.mu.Unlock()
	}
	f.observe.Store(&observe)
}

func (k *kubectl) requested(substr string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.ContainsFunc(k.requests, func(r string) bool { return strings.Contains(r, substr) })
}

// table splits kubectl's table output into rows of fields.
func table(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1))
	}
	return rows
}

func TestKubectl(t *testing.T) {
	k := newKubectl(t)
	f := newFixture(t, nil)
	k.record(f)
	every := f.http.URL + "/clusters/*"

	t.Run("get pods -A", func(t *testing.T) {
		got := table(k.run(t, every, "get", "pods", "-A"))
		want := [][]string{
			{"NAMESPACE", "CLUSTER", "NAME", "READY", "STATUS", "RESTARTS", "AGE"},
			{"default", edge, "web-3", "1/1", "Running", "2", "60m"},
			{"default", prod, "web-1", "1/1", "Running", "2", "60m"},
			{"default", prod, "web-2", "1/1", "Running", "2", "60m"},
			{"kube-system", prod, "dns-1", "1/1", "Running", "2", "60m"},
			{"default", staging, "api-1", "1/1", "Running", "2", "60m"},
			{"default", staging, "web-1", "1/1", "Running", "2", "60m"},
		}
		if mustJSON(got) != mustJSON(want) {
			t.Errorf("got\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("get pods in a namespace, short name, label selector", func(t *testing.T) {
		got := table(k.run(t, every, "get", "po", "-n", "default", "-l", "app=web", "-o", "wide"))
		want := [][]string{
			{"CLUSTER", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"},
			{edge, "web-3", "1/1", "Running", "2", "60m", "10.0.0.1", "node-1"},
			{prod, "web-1", "1/1", "Running", "2", "60m", "10.0.0.1", "node-1"},
			{prod, "web-2", "1/1", "Running", "2", "60m", "10.0.0.1", "node-1"},
			{staging, "web-1", "1/1", "Running", "2", "60m", "10.0.0.1", "node-1"},
		}
		if mustJSON(got) != mustJSON(want) {
			t.Errorf("got\n%v\nwant\n%v", got, want)
		}
	})

	t.Run("-o json", func(t *testing.T) {
		var l unstructured.UnstructuredList
		if err := json.Unmarshal([]byte(k.run(t, every, "get", "pods", "-A", "-o", "json")), &l.Object); err != nil {
			t.Fatal(err)
		}
		items, _ := l.Object["items"].([]any)
		var got []string
		for _, it := range items {
			u := unstructured.Unstructured{Object: it.(map[string]any)}
			got = append(got, u.GetAnnotations()[ClusterAnnotation]+"|"+u.GetName())
		}
		want := []string{edge + "|web-3", prod + "|web-1", prod + "|web-2", prod + "|dns-1", staging + "|api-1", staging + "|web-1"}
		if !slices.Equal(got, want) {
			t.Errorf("items %q, want %q", got, want)
		}
	})

	t.Run("get one pod -o yaml", func(t *testing.T) {
		var u unstructured.Unstructured
		out := k.run(t, f.http.URL+clusterPath(prod), "get", "pod", "web-1", "-n", "default", "-o", "yaml")
		if err := yaml.Unmarshal([]byte(out), &u.Object); err != nil {
			t.Fatal(err)
		}
		if u.GetName() != "web-1" || u.GetKind() != "Pod" || u.GetAnnotations()[ClusterAnnotation] != prod || u.GetResourceVersion() != "101" {
			t.Errorf("got\n%s", out)
		}
		// In every cluster: found in one, or ambiguous.
		if out := k.run(t, every, "get", "pod", "web-3", "-n", "default", "-o", "name"); strings.TrimSpace(out) != "pod/web-3" {
			t.Errorf("web-3 in every cluster: %q", out)
		}
		_, stderr, err := k.tryRun(t, every, "get", "pod", "web-1", "-n", "default")
		if err == nil || !strings.Contains(stderr, "Conflict") || !strings.Contains(stderr, "/clusters/{cluster}/") {
			t.Errorf("ambiguous get: %v\n%s", err, stderr)
		}
		_, stderr, err = k.tryRun(t, every, "get", "pod", "nope", "-n", "default")
		if err == nil || !strings.Contains(stderr, `pods "nope" not found`) {
			t.Errorf("missing pod: %v\n%s", err, stderr)
		}
	})

	t.Run("cluster name with a slash", func(t *testing.T) {
		// kubectl sends the path unescaped; the server finds the cluster name anyway.
		got := table(k.run(t, f.http.URL+clusterPath(edge), "get", "pods", "-n", "default"))
		if len(got) != 2 || got[1][0] != edge || got[1][1] != "web-3" {
			t.Errorf("got %v", got)
		}
	})

	t.Run("deployments and nodes", func(t *testing.T) {
		got := table(k.run(t, every, "get", "deploy", "-A"))
		want := [][]string{{"NAMESPACE", "CLUSTER", "NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"}, {"default", prod, "web", "2/2", "2", "2", "120m"}}
		if mustJSON(got) != mustJSON(want) {
			t.Errorf("deployments: %v", got)
		}
		got = table(k.run(t, every, "get", "nodes"))
		want = [][]string{{"CLUSTER", "NAME", "STATUS", "ROLES", "AGE", "VERSION"},
			{prod, "node-1", "Ready", "control-plane", "2d", "v1.33.1"}, {staging, "node-1", "Ready", "control-plane", "2d", "v1.33.1"}}
		if mustJSON(got) != mustJSON(want) {
			t.Errorf("nodes: %v", got)
		}
	})

	t.Run("get clusters.fleetwatch.io", func(t *testing.T) {
		got := table(k.run(t, f.http.URL, "get", "clusters.fleetwatch.io"))
		want := [][]string{
			{"NAME", "PHASE", "SERVER", "OBJECTS", "RESOURCES", "LAST SYNC"},
			{edge, "Synced", "https://arn-aws-eks-eu-west-1-123-cluster-edge.example.com", "1", "2/3", "5m"},
			{prod, "Synced", "https://prod.example.com", "5", "3/3", "5m"},
			{staging, "Synced", "https://staging.example.com", "3", "2/3", "5m"},
		}
		if mustJSON(got) != mustJSON(want) {
			t.Errorf("got\n%v\nwant\n%v", got, want)
		}
		var c Cluster
		if err := json.Unmarshal([]byte(k.run(t, f.http.URL, "get", "clusters.fleetwatch.io", "prod", "-o", "json")), &c); err != nil || c.Status.Objects != 5 {
			t.Errorf("get cluster prod: %+v, %v", c, err)
		}
	})

	t.Run("api-resources", func(t *testing.T) {
		out := k.run(t, every, "api-resources")
		for _, want := range []string{"pods  +po  +v1  +true  +Pod", "deployments  +deploy  +apps/v1  +true  +Deployment", "clusters  +fleetwatch.io/v1alpha1  +false  +Cluster"} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("api-resources lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("write verbs", func(t *testing.T) {
		_, stderr, err := k.tryRun(t, f.http.URL+clusterPath(prod), "delete", "pod", "web-1", "-n", "default")
		if err == nil || !strings.Contains(stderr, "MethodNotAllowed") && !strings.Contains(stderr, "not allowed") {
			t.Errorf("delete: %v\n%s", err, stderr)
		}
	})

	t.Run("watch", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := k.cmd(ctx, every, "get", "pods", "-A", "-w")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cancel()
			_ = cmd.Wait()
		}()
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		read := func(n int) []string {
			var out []string
			for len(out) < n {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("kubectl ended after %q: %s", out, stderr.String())
					}
					out = append(out, l)
				case <-ctx.Done():
					t.Fatalf("kubectl printed %q only: %s", out, stderr.String())
				}
			}
			return out
		}
		initial := read(7)
		if !strings.HasPrefix(initial[0], "NAMESPACE") {
			t.Errorf("header %q", initial[0])
		}
		// The watch starts from the list: only changes follow.
		deadline := time.Now().Add(10 * time.Second)
		for !k.requested("watch=true") {
			if time.Now().After(deadline) {
				t.Fatalf("kubectl did not start watching")
			}
			time.Sleep(10 * time.Millisecond)
		}
		f.apply(staging, podsGVR, pod("default", "new-1", "270", nil))
		f.remove(prod, podsGVR, pod("default", "web-2", "170", web))
		got := table(strings.Join(read(2), "\n"))
		if len(got) != 2 || mustJSON(got[0][:3]) != mustJSON([]string{"default", staging, "new-1"}) || mustJSON(got[1][:3]) != mustJSON([]string{"default", prod, "web-2"}) {
			t.Errorf("watch printed %v", got)
		}
	})

	t.Run("TLS and token", func(t *testing.T) {
		// kubectl sends credentials over TLS only (and without any, it prompts for them).
		dir := t.TempDir()
		cert, key := testcert.Write(t, dir, "kubectl")
		tokens := writeFile(t, dir, "tokens", "kubectl-token\n")
		g := newFixture(t, func(o *Options) { o.TLSCertFile, o.TLSKeyFile, o.TokenFile = cert, key, tokens })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.server.Serve(ctx, ln) }()
		defer func() {
			cancel()
			<-done
		}()
		server := "https://" + ln.Addr().String() + "/clusters/*"
		_, stderr, err := k.tryRun(t, server, "--certificate-authority", cert, "--token", "wrong-token", "get", "pods", "-A")
		if err == nil || !strings.Contains(stderr, "You must be logged in") {
			t.Errorf("wrong token: %v\n%s", err, stderr)
		}
		if got := table(k.run(t, server, "--certificate-authority", cert, "--token", "kubectl-token", "get", "pods", "-A")); len(got) != 7 {
			t.Errorf("with token: %v", got)
		}
	})

	if k.requested("/openapi/") {
		t.Logf("kubectl asked for OpenAPI documents, which are not served (404)")
	}
}
