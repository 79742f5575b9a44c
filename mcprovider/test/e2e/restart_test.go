package e2e

import (
	"bufio"
	"context"
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
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// buildExample builds examples/multicluster-runtime, in its own module.
func buildExample(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "multicluster-runtime")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = "../../../examples/multicluster-runtime"
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/multicluster-runtime: %v\n%s", err, b)
	}
	return out
}

// controllerProcess is a run of the example controller, whose requests it records.
type controllerProcess struct {
	cmd  *exec.Cmd
	done chan error

	mu sync.Mutex
	// requests counts the requests printed, by "cluster namespace/name".
	requests map[string]int
	first    time.Duration
}

func startProcess(t *testing.T, bin string, args ...string) *controllerProcess {
	t.Helper()
	p := &controllerProcess{requests: map[string]int{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"--print-requests"}, args...)...)
	logPath := filepath.Join(t.TempDir(), "controller.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stderr = logFile
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			req, ok := strings.CutPrefix(sc.Text(), "reconcile ")
			if !ok {
				continue
			}
			p.mu.Lock()
			if len(p.requests) == 0 {
				p.first = time.Since(start)
			}
			p.requests[req]++
			p.mu.Unlock()
		}
	}()
	go func() {
		<-scanned
		p.done <- p.cmd.Wait()
		_ = logFile.Close()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("controller log (tail):\n%s", tail(string(b), 40))
			}
		}
	})
	return p
}

func (p *controllerProcess) count(req string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[req]
}

// stop sends sig and waits for the process to exit.
func (p *controllerProcess) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Fatalf("the controller did not exit within 60s of %v", sig)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// TestControllerWarmRestartAfterKill9 kills the example controller, on fleetwatch's
// provider with a snapshot, with SIGKILL, pauses every apiserver (SIGSTOP), and starts it
// again: every object is reconciled from the snapshot while no request to an apiserver
// can complete. Once the apiservers resume, the watches go on from the saved
// resourceVersions: a new object is reconciled and written back, and the apiservers
// hand out no object again in a list (docs/design.md, "Measuring 'no object downloaded
// again'"). Last, the snapshot of a graceful stop equals the servers' state. It runs
// over a plain fleet (--encoding objects) and over a compressed one (the example's
// default), each on clusters of its own.
func TestControllerWarmRestartAfterKill9(t *testing.T) {
	bin := buildExample(t)
	for _, encoding := range []string{"objects", "compressed"} {
		t.Run("encoding="+encoding, func(t *testing.T) { warmRestartAfterKill9(t, bin, encoding) })
	}
}

func warmRestartAfterKill9(t *testing.T, bin string, encoding string) {
	env := testenv.New(t, testenv.Options{Clusters: 3})
	ctx := t.Context()
	for _, c := range env.Clusters {
		seed(t, c)
	}
	snapshot := filepath.Join(t.TempDir(), "fleet.db")
	args := []string{"--kubeconfigs", env.Kubeconfig, "--snapshot", snapshot, "--snapshot-interval", "100ms", "--encoding", encoding}

	run1 := startProcess(t, bin, args...)
	eventually(t, convergeTimeout, "cold run: every labelled ConfigMap annotated", func() string {
		for _, c := range env.Clusters {
			if bad := unreconciled(ctx, c); bad != "" {
				return bad
			}
		}
		return ""
	})
	// The request that follows each write comes from the watch event of the write, so
	// the process's cache holds the written objects; once the writer, which commits what
	// is pending every 100ms, has gone quiet, so does the snapshot.
	eventually(t, convergeTimeout, "cold run: the event of each write reconciled", func() string {
		for _, c := range env.Clusters {
			for i := range perCluster {
				if req := fmt.Sprintf("%s %s/cm-%d", c.Name, demoNamespace, i); run1.count(req) < 2 {
					return req + " reconciled fewer than twice"
				}
			}
		}
		return ""
	})
	waitQuiet(t, snapshot, time.Now())
	run1.stop(t, syscall.SIGKILL)
	checkAnnotated(t, snapshot, env)
	eventually(t, convergeTimeout, "the killed controller's watches ended", func() string {
		for _, c := range env.Clusters {
			if n := configMapWatches(t, c); n != 0 {
				return fmt.Sprintf("%s: %v watches of every ConfigMap", c.Name, n)
			}
		}
		return ""
	})

	listed := map[string]float64{}
	for _, c := range env.Clusters {
		listed[c.Name] = listedConfigMaps(t, c)
		if err := c.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	paused := true
	resume := func() {
		if !paused {
			return
		}
		paused = false
		for _, c := range env.Clusters {
			if err := c.ResumeAPIServer(); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()

	run2 := startProcess(t, bin, args...)
	eventually(t, convergeTimeout, "warm run, apiservers paused: every ConfigMap reconciled from the snapshot", func() string {
		for _, c := range env.Clusters {
			for i := range perCluster {
				if req := fmt.Sprintf("%s %s/cm-%d", c.Name, demoNamespace, i); run2.count(req) == 0 {
					return req + " not reconciled"
				}
			}
		}
		return ""
	})
	run2.mu.Lock()
	t.Logf("warm run: first request %v after start, with every apiserver paused", run2.first)
	run2.mu.Unlock()
	resume()
	// A change made before the watch resumes would come as an event replayed from the
	// saved resourceVersion, which apiserver_init_events_total counts too: wait for it.
	eventually(t, convergeTimeout, "warm run: the watches resumed", func() string {
		for _, c := range env.Clusters {
			if n := configMapWatches(t, c); n < 1 {
				return fmt.Sprintf("%s: %v watches of every ConfigMap", c.Name, n)
			}
		}
		return ""
	})

	for _, c := range env.Clusters {
		createConfigMap(t, c.Clientset(), "after-restart", c.Name)
	}
	// Checked by GETs: a LIST of the test's own would count as objects handed out.
	eventually(t, convergeTimeout, "warm run: the new ConfigMaps annotated", func() string {
		for _, c := range env.Clusters {
			cm, err := c.Clientset().CoreV1().ConfigMaps(demoNamespace).Get(ctx, "after-restart", metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			if got := cm.Annotations[reconciledIn]; got != c.Name {
				return fmt.Sprintf("%s/after-restart: %q", c.Name, got)
			}
		}
		return ""
	})
	for _, c := range env.Clusters {
		if n := listedConfigMaps(t, c) - listed[c.Name]; n != 0 {
			t.Errorf("%s: the apiserver handed out %v ConfigMaps in lists after the kill -9; want 0", c.Name, n)
		}
	}

	run2.stop(t, syscall.SIGTERM)
	checkSnapshot(t, env, snapshot)
}

// waitQuiet waits until the snapshot file has not been written for 10 commit intervals
// of the controller (--snapshot-interval 100ms), the last write after since: a change
// that was pending at since has been committed.
func waitQuiet(t *testing.T, path string, since time.Time) {
	t.Helper()
	const quiet = time.Second
	eventually(t, 30*time.Second, "the snapshot writer quiet", func() string {
		st, err := os.Stat(path)
		if err != nil {
			return err.Error()
		}
		if now := time.Now(); now.Sub(since) < quiet || now.Sub(st.ModTime()) < quiet {
			return "written at " + st.ModTime().String()
		}
		return ""
	})
}

// checkAnnotated checks that the snapshot, after the kill, holds every labelled
// ConfigMap as the controller wrote it, so that the warm run needs no write.
func checkAnnotated(t *testing.T, path string, env *testenv.Env) {
	t.Helper()
	store, err := persist.Open(path, persist.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snap, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range env.Clusters {
		annotated := 0
		for _, rs := range snap.Clusters[c.Name].Resources {
			for _, obj := range rs.Objects {
				if a, ok := obj.(metav1.Object); ok && a.GetNamespace() == demoNamespace && a.GetAnnotations()[reconciledIn] == c.Name {
					annotated++
				}
			}
		}
		if annotated != perCluster {
			t.Fatalf("%s: the snapshot after kill -9 holds %d annotated ConfigMaps, want %d", c.Name, annotated, perCluster)
		}
	}
}

// configMapWatches is the number of watches of the ConfigMaps of every namespace that c
// serves: the controller's (the apiserver's own watch single namespaces).
func configMapWatches(t *testing.T, c *testenv.Cluster) float64 {
	t.Helper()
	m, err := c.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum("apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": "configmaps", "scope": "cluster"})
}

func listedConfigMaps(t *testing.T, c *testenv.Cluster) float64 {
	t.Helper()
	m, err := c.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return m.ListedObjects("", "configmaps")
}

// checkSnapshot checks that the snapshot holds, for every stored scope, exactly the
// objects its cluster has at the stored resourceVersion.
func checkSnapshot(t *testing.T, env *testenv.Env, path string) {
	t.Helper()
	store, err := persist.Open(path, persist.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snap, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Clusters) != len(env.Clusters) {
		t.Errorf("the snapshot holds %d clusters, want %d", len(snap.Clusters), len(env.Clusters))
	}
	for name, cs := range snap.Clusters {
		c := env.Cluster(name)
		for key, rs := range cs.Resources {
			scope, err := informer.ParseScope(string(key))
			if err != nil {
				t.Fatal(err)
			}
			list, err := c.Dynamic().Resource(scope.Resource).List(context.Background(), metav1.ListOptions{
				ResourceVersion: rs.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact,
			})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, o := range list.Items {
				k, _ := cache.MetaNamespaceKeyFunc(&o)
				want[k] = o.GetResourceVersion()
			}
			got := map[string]string{}
			for _, obj := range rs.Objects {
				k, _ := cache.MetaNamespaceKeyFunc(obj)
				a, _ := obj.(metav1.Object)
				got[k] = a.GetResourceVersion()
			}
			if fmt.Sprint(want) != fmt.Sprint(got) {
				t.Errorf("%s %s at %s: snapshot %v, server %v", name, key, rs.ResourceVersion, got, want)
			}
		}
	}
}
