package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// daemon runs the fleetwatch binary with a config file.
type daemon struct {
	bin, config string
	cmd         *exec.Cmd
	done        chan error
	// log collects the output of every run.
	log *os.File
}

// startDaemon runs `bin serve --config config`; the test's cleanup kills it if it is
// still running then.
func startDaemon(t *testing.T, bin, config string) *daemon {
	t.Helper()
	d := &daemon{bin: bin, config: config}
	d.start(t)
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.signal(t, syscall.SIGKILL)
		}
	})
	return d
}

func (d *daemon) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.bin, "serve", "--config", d.config, "--log-verbosity", "4")
	if d.log == nil {
		d.log = logFile(t, "fleetwatch.log")
	}
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan error, 1)
	go func() { d.done <- d.cmd.Wait() }()
}

func (d *daemon) signal(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.done:
		return err
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Fatalf("fleetwatch did not exit within 60s of %v", sig)
		return nil
	}
}

var logFiles sync.Map

// logFile returns a file in the test's directory that collects a process's output, and
// prints its path if the test fails.
func logFile(t *testing.T, name string) *os.File {
	t.Helper()
	if f, ok := logFiles.Load(t.Name() + name); ok {
		return f.(*os.File)
	}
	dir := os.Getenv("FLEETWATCH_TEST_LOGS")
	if dir == "" {
		dir = t.TempDir()
	}
	f, err := os.Create(filepath.Join(dir, filepath.Base(t.Name())+"-"+name))
	if err != nil {
		t.Fatal(err)
	}
	logFiles.Store(t.Name()+name, f)
	t.Cleanup(func() {
		// A later run of the same test (-count) has a log of its own.
		logFiles.Delete(t.Name() + name)
		if t.Failed() {
			t.Logf("fleetwatch log: %s", f.Name())
		}
	})
	return f
}

// checkSnapshot opens the snapshot and checks that every stored scope holds exactly the
// objects its cluster had at the stored resourceVersion. It returns the number of
// objects checked.
func checkSnapshot(ctx context.Context, t *testing.T, env *testenv.Env, path string) int {
	t.Helper()
	store, err := persist.Open(path, persist.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("reopening the snapshot after kill -9: %v", err)
	}
	defer store.Close()
	if moved, _ := store.Recovered(); moved != "" {
		t.Fatalf("the snapshot was corrupt after kill -9 (moved to %s)", moved)
	}
	snap, err := store.Load()
	if err != nil {
		t.Fatalf("loading the snapshot after kill -9: %v", err)
	}
	checked := 0
	for name, cs := range snap.Clusters {
		c := env.Cluster(name)
		for key, rs := range cs.Resources {
			scope, err := informer.ParseScope(string(key))
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, obj := range rs.Objects {
				k, _ := cache.MetaNamespaceKeyFunc(obj)
				got[k] = rvOf(obj)
			}
			want := serverTruth(ctx, t, c, scope.Resource, metav1.ListOptions{
				ResourceVersion:      rs.ResourceVersion,
				ResourceVersionMatch: metav1.ResourceVersionMatchExact,
			})
			if d := diffRVs(want, got); d != "" {
				t.Errorf("%s %s at resourceVersion %s: the snapshot is not the server's state: %s", name, key, rs.ResourceVersion, d)
			}
			checked += len(got)
		}
	}
	return checked
}

// TestDaemonKill9DuringChurn kills the daemon with SIGKILL at random moments while the
// clusters change fast, 20 times. Every time the snapshot must load and hold, for each
// scope, exactly the server's state at its stored resourceVersion. The runs alternate
// between cache.encoding compact and compressed, so the snapshot holds both forms. In the
// end, a graceful run converges to the servers' truth.
func TestDaemonKill9DuringChurn(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 3})
	ctx := t.Context()
	dir := t.TempDir()
	snapshot := filepath.Join(dir, "fleetwatch.db")
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	configure := func(encoding string) {
		t.Helper()
		cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: configmaps
  - name: pods
cache:
  encoding: %s
snapshot:
  path: %q
  interval: 50ms
server:
  address: 127.0.0.1:0
`, env.Kubeconfig, encoding, snapshot)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	configure("compressed")
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 2, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
	}
	d := &daemon{bin: buildBinary(t, "./cmd/fleetwatch"), config: cfgPath}

	churnCtx, stopChurn := context.WithCancel(ctx)
	var churnWG sync.WaitGroup
	for _, c := range env.Clusters {
		churnWG.Go(func() { churnConfigMaps(churnCtx, t, c) })
	}

	rng := rand.New(rand.NewPCG(1, 2))
	total := 0
	for i := range 20 {
		configure([]string{"compact", "compressed"}[i%2])
		d.start(t)
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		_ = d.signal(t, syscall.SIGKILL)
		total += checkSnapshot(ctx, t, env, snapshot)
		if t.Failed() {
			t.Fatalf("after kill %d", i+1)
		}
	}
	stopChurn()
	churnWG.Wait()
	t.Logf("20 kills; %d stored objects checked against the servers", total)

	// A graceful run converges to the truth, warm from the last snapshot.
	eventually(t, 120*time.Second, "snapshot equals the servers after a graceful run", func() string {
		d.start(t)
		time.Sleep(3 * time.Second)
		if err := d.signal(t, syscall.SIGTERM); err != nil {
			return fmt.Sprintf("graceful exit: %v", err)
		}
		store, err := persist.Open(snapshot, persist.Options{ReadOnly: true})
		if err != nil {
			return err.Error()
		}
		defer store.Close()
		snap, err := store.Load()
		if err != nil {
			return err.Error()
		}
		for _, c := range env.Clusters {
			cs := snap.Clusters[c.Name]
			if cs == nil {
				return "no snapshot of " + c.Name
			}
			for key, rs := range cs.Resources {
				scope, _ := informer.ParseScope(string(key))
				got := map[string]string{}
				for _, obj := range rs.Objects {
					k, _ := cache.MetaNamespaceKeyFunc(obj)
					got[k] = rvOf(obj)
				}
				if diff := diffRVs(serverTruth(ctx, t, c, scope.Resource, metav1.ListOptions{}), got); diff != "" {
					return fmt.Sprintf("%s %s: %s", c.Name, key, diff)
				}
			}
		}
		return ""
	})
}

// churnConfigMaps creates, updates and deletes configmaps in c until ctx is done.
func churnConfigMaps(ctx context.Context, t *testing.T, c *testenv.Cluster) {
	cms := c.Clientset().CoreV1().ConfigMaps("shop")
	rng := rand.New(rand.NewPCG(uint64(len(c.Name)), 3))
	var live []string
	for i := 0; ctx.Err() == nil; i++ {
		switch op := rng.IntN(10); {
		case len(live) < 5 || op < 4:
			name := fmt.Sprintf("crash-%d", i)
			if _, err := cms.Create(ctx, configMap("shop", name, c.Name), metav1.CreateOptions{}); err != nil {
				if ctx.Err() == nil {
					t.Errorf("create: %v", err)
				}
				return
			}
			live = append(live, name)
		case op < 8:
			cm := configMap("shop", live[rng.IntN(len(live))], c.Name)
			cm.Data["i"] = fmt.Sprint(i)
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
				t.Errorf("update: %v", err)
				return
			}
		default:
			j := rng.IntN(len(live))
			if err := cms.Delete(ctx, live[j], metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				t.Errorf("delete: %v", err)
				return
			}
			live = append(live[:j], live[j+1:]...)
		}
	}
}
