package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// buildBinary builds a command of this module into the test's temporary directory.
func buildBinary(t *testing.T, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return out
}

// lineWatcher collects the lines a process prints and waits for expected ones.
type lineWatcher struct {
	mu    sync.Mutex
	lines []string
}

func (w *lineWatcher) read(r *bufio.Scanner) {
	for r.Scan() {
		w.mu.Lock()
		w.lines = append(w.lines, r.Text())
		w.mu.Unlock()
	}
}

func (w *lineWatcher) waitFor(t *testing.T, substr string) {
	t.Helper()
	eventually(t, 60*time.Second, "output line containing "+substr, func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, l := range w.lines {
			if strings.Contains(l, substr) {
				return ""
			}
		}
		return fmt.Sprintf("not among %d lines:\n%s", len(w.lines), strings.Join(w.lines, "\n"))
	})
}

// TestControllerExample runs examples/controller against real clusters: it reconciles
// every deployment of every cluster, then new and deleted ones.
func TestControllerExample(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"east", "west"}})
	ctx := t.Context()
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Namespaces: []string{"shop"}, Deployments: 1, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildBinary(t, "./examples/controller")
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", env.Kubeconfig)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out lineWatcher
	go out.read(bufio.NewScanner(stdout))

	out.waitFor(t, "caches synced")
	for _, c := range env.Clusters {
		out.waitFor(t, aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "web"}.String()+": replicas=1")
	}
	west := env.Cluster("west").Clientset()
	d, err := west.AppsV1().Deployments("shop").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replicas := int32(5)
	d.Spec.Replicas = &replicas
	if _, err := west.AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "west/shop/web: replicas=5")
	if err := west.AppsV1().Deployments("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "west/shop/web: deleted")

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("controller exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("controller did not exit within 30s of SIGINT")
	}
}
