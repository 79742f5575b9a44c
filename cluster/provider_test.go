package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
)

// recorder is an Aware and Disengager that records every call.
type recorder struct {
	t *testing.T

	// mu guards all fields below.
	mu         sync.Mutex
	engaged    map[string]engagement // by cluster name
	calls      []string              // not yet taken by expect
	failEngage map[string]error      // by cluster name
}

type engagement struct {
	c   *Cluster
	ctx context.Context
}

var (
	_ Aware      = (*recorder)(nil)
	_ Disengager = (*recorder)(nil)
)

func newRecorder(t *testing.T) *recorder {
	return &recorder{t: t, engaged: map[string]engagement{}, failEngage: map[string]error{}}
}

func (r *recorder) Engage(ctx context.Context, c *Cluster) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.failEngage[c.Name]; err != nil {
		r.calls = append(r.calls, "engage failed "+c.Name)
		return err
	}
	if name, ok := NameFromContext(ctx); !ok || name != c.Name {
		r.t.Errorf("cluster %q engaged with a context of cluster %q (%v)", c.Name, name, ok)
	}
	if old, ok := r.engaged[c.Name]; ok && old.ctx.Err() == nil {
		r.t.Errorf("cluster %q engaged while its previous engagement is live", c.Name)
	}
	r.engaged[c.Name] = engagement{c, ctx}
	r.calls = append(r.calls, "engage "+c.Name)
	return nil
}

func (r *recorder) Disengage(_ context.Context, c *Cluster, cause error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.engaged[c.Name]
	switch {
	case !ok || e.c != c:
		r.t.Errorf("Disengage(%q) of a cluster that was not engaged", c.Name)
	case e.ctx.Err() == nil:
		r.t.Errorf("Disengage(%q) before its context was cancelled", c.Name)
	case context.Cause(e.ctx) != cause:
		r.t.Errorf("Disengage(%q, %v), but the context's cause is %v", c.Name, cause, context.Cause(e.ctx))
	}
	r.calls = append(r.calls, fmt.Sprintf("disengage %s: %v", c.Name, cause))
	return nil
}

// expect waits for the next calls and checks them.
func (r *recorder) expect(want ...string) {
	r.t.Helper()
	waitFor(r.t, fmt.Sprintf("calls %q", want), func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.calls) >= len(want)
	})
	r.mu.Lock()
	got := r.calls[:len(want)]
	r.calls = r.calls[len(want):]
	r.mu.Unlock()
	if !slices.Equal(got, want) {
		r.t.Fatalf("calls = %q, want %q", got, want)
	}
}

// none checks that no call is pending.
func (r *recorder) none() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) > 0 {
		r.t.Fatalf("unexpected calls %q", r.calls)
	}
}

func (r *recorder) engagement(name string) engagement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engaged[name]
}

// startProvider starts p and returns a func that stops it and returns Start's result.
func startProvider(t *testing.T, p *Provider) (stop func() error) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("Start did not return after cancel")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func clusterNames(cs []*Cluster) []string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return names
}

func TestProviderFollowsKubeconfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	a, b, c := kctx("a"), kctx("b"), kctx("c")
	clustertest.WriteKubeconfig(t, path, a, b)

	rec := newRecorder(t)
	p, err := NewProvider(Options{Kubeconfigs: []string{path}, ReloadDelay: 20 * time.Millisecond, PollInterval: time.Hour}, rec)
	if err != nil {
		t.Fatal(err)
	}
	reloads := make(chan error, 100)
	p.afterReload = func(err error) { reloads <- err }
	// failedReload waits for a reload that fails. Only garbage makes one fail, so, unlike
	// a successful reload, it cannot be a reload of an earlier write.
	failedReload := func() {
		t.Helper()
		waitFor(t, "a failed reload", func() bool {
			select {
			case err := <-reloads:
				return err != nil
			default:
				return false
			}
		})
	}
	stop := startProvider(t, p)

	rec.expect("engage a", "engage b")
	if got := clusterNames(p.Clusters()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Clusters() = %q", got)
	}

	t.Log("add a context")
	clustertest.WriteKubeconfig(t, path, a, b, c)
	rec.expect("engage c")

	t.Log("remove a context")
	engagedA, engagedB := rec.engagement("a"), rec.engagement("b")
	clustertest.WriteKubeconfig(t, path, a, c)
	rec.expect("disengage b: cluster removed")
	if cause := context.Cause(engagedB.ctx); cause != ErrClusterRemoved {
		t.Errorf("cause of the removed cluster's context = %v, want ErrClusterRemoved", cause)
	}
	if engagedA.ctx.Err() != nil {
		t.Error("the context of an unchanged cluster was cancelled")
	}
	if _, ok := p.Get("b"); ok {
		t.Error("Get(b) found the removed cluster")
	}

	t.Log("change a server")
	a2 := a
	a2.Server = "https://a-moved.example:6443"
	clustertest.WriteKubeconfig(t, path, a2, c)
	rec.expect("disengage a: cluster replaced: cluster removed", "engage a")
	if cause := context.Cause(engagedA.ctx); cause != ErrClusterReplaced || !errors.Is(cause, ErrClusterRemoved) {
		t.Errorf("cause of the replaced cluster's context = %v, want ErrClusterReplaced", cause)
	}
	if got, _ := p.Get("a"); got.Config.Host != a2.Server || got.Fingerprint == engagedA.c.Fingerprint {
		t.Errorf("Get(a) = %s, %s; want the new server and fingerprint", got.Config.Host, got.Fingerprint)
	}

	t.Log("write garbage")
	clustertest.WriteFile(t, path, []byte("clusters: [garbage"))
	failedReload()
	rec.none()
	if got := clusterNames(p.Clusters()); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("Clusters() after a failed reload = %q, want the clusters from before", got)
	}

	t.Log("fix it")
	a2.Namespace = "other" // not a new connection
	d := kctx("d")
	clustertest.WriteKubeconfig(t, path, a2, c, d)
	rec.expect("engage d")

	t.Log("shut down")
	live := []engagement{rec.engagement("a"), rec.engagement("c"), rec.engagement("d")}
	if err := stop(); err != nil {
		t.Fatalf("Start() = %v, want nil after cancel", err)
	}
	for _, e := range live {
		if cause := context.Cause(e.ctx); cause != context.Canceled || errors.Is(cause, ErrClusterRemoved) {
			t.Errorf("cause of %q's context on shutdown = %v, want context.Canceled", e.c.Name, cause)
		}
	}
	rec.none() // no Disengage on shutdown
	if got := p.Clusters(); len(got) != 0 {
		t.Errorf("Clusters() after shutdown = %q", clusterNames(got))
	}
}

func TestProviderFollowsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kubeconfigs")
	clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))

	rec := newRecorder(t)
	p, err := NewProvider(Options{Kubeconfigs: []string{dir}, ReloadDelay: 20 * time.Millisecond, PollInterval: time.Hour}, rec)
	if err != nil {
		t.Fatal(err)
	}
	startProvider(t, p)
	rec.expect("engage a")

	clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx("b"))
	rec.expect("engage b")

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	rec.expect("disengage a: cluster removed")
}

// TestProviderFollowsSecretVolume updates a kubeconfig the way the kubelet updates a
// mounted Secret: the file is a symbolic link through "..data", a symbolic link to a
// timestamped directory that is swapped by rename.
func TestProviderFollowsSecretVolume(t *testing.T) {
	dir := t.TempDir()
	publish := func(version string, contexts ...clustertest.Context) {
		t.Helper()
		clustertest.WriteKubeconfig(t, filepath.Join(dir, version, "config"), contexts...)
		if err := os.Symlink(version, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish("..v1", kctx("a"))
	if err := os.Symlink(filepath.Join("..data", "config"), filepath.Join(dir, "config")); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder(t)
	p, err := NewProvider(Options{Kubeconfigs: []string{filepath.Join(dir, "config")}, ReloadDelay: 20 * time.Millisecond, PollInterval: time.Hour}, rec)
	if err != nil {
		t.Fatal(err)
	}
	startProvider(t, p)
	rec.expect("engage a")

	publish("..v2", kctx("a"), kctx("b"))
	rec.expect("engage b")
}

// TestProviderPollsAndRetries covers the fallback poll, with file watching off, and an
// Engage that fails and is retried at the next reload. Reloads happen only when the test
// moves the clock, so it can also check that a reload did nothing.
func TestProviderPollsAndRetries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	clustertest.WriteKubeconfig(t, path, kctx("a"))
	clk := testingclock.NewFakeClock(time.Now())
	const poll = time.Minute

	rec := newRecorder(t)
	rec.failEngage["b"] = errors.New("informers cannot start")
	p, err := NewProvider(Options{Kubeconfigs: []string{path}, PollInterval: poll, Clock: clk}, rec)
	if err != nil {
		t.Fatal(err)
	}
	p.noWatch = true
	reloads := make(chan error, 100)
	p.afterReload = func(err error) { reloads <- err }
	startProvider(t, p)
	rec.expect("engage a")

	// tick moves the clock to the next poll and waits for the reload.
	tick := func(wantErr bool) {
		t.Helper()
		waitFor(t, "the poll ticker", clk.HasWaiters)
		clk.Step(poll)
		select {
		case err := <-reloads:
			if (err != nil) != wantErr {
				t.Fatalf("reload error = %v, want error: %v", err, wantErr)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no reload after a poll interval")
		}
	}

	clustertest.WriteKubeconfig(t, path, kctx("a"), kctx("b"))
	tick(false)
	rec.expect("engage failed b")
	if got := clusterNames(p.Clusters()); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Clusters() = %q; a cluster whose Engage failed must not be in the set", got)
	}
	if e := rec.engagement("b"); e.ctx != nil {
		t.Fatal("recorder kept a failed engagement")
	}

	tick(false)
	rec.expect("engage failed b")

	rec.mu.Lock()
	delete(rec.failEngage, "b")
	rec.mu.Unlock()
	tick(false)
	rec.expect("engage b")

	tick(false)
	rec.none()

	t.Log("change only a namespace")
	a := kctx("a")
	a.Namespace = "other"
	clustertest.WriteKubeconfig(t, path, a, kctx("b"))
	tick(false)
	rec.none()

	t.Log("garbage, then a fix")
	clustertest.WriteFile(t, path, []byte("\x00garbage"))
	tick(true)
	rec.none()
	if got := clusterNames(p.Clusters()); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Clusters() after a failed reload = %q, want the clusters from before", got)
	}
	clustertest.WriteKubeconfig(t, path, a)
	tick(false)
	rec.expect("disengage b: cluster removed")
}

// awareFunc is an Aware without Disengage.
type awareFunc func(context.Context, *Cluster) error

func (f awareFunc) Engage(ctx context.Context, c *Cluster) error { return f(ctx, c) }

func TestProviderWithoutDisengager(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	clustertest.WriteKubeconfig(t, path, kctx("a"), kctx("b"))
	engaged := make(chan context.Context, 10)
	p, err := NewProvider(Options{Kubeconfigs: []string{path}, ReloadDelay: 10 * time.Millisecond}, awareFunc(func(ctx context.Context, c *Cluster) error {
		if c.Name == "b" {
			engaged <- ctx
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	startProvider(t, p)
	ctx := <-engaged
	clustertest.WriteKubeconfig(t, path, kctx("a"))
	select {
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), ErrClusterRemoved) {
			t.Errorf("cause = %v, want ErrClusterRemoved", context.Cause(ctx))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the removed cluster's context was not cancelled")
	}
}

func TestProviderStartErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	clustertest.WriteKubeconfig(t, path, kctx("a"))

	t.Run("missing file", func(t *testing.T) {
		p, err := NewProvider(Options{Kubeconfigs: []string{filepath.Join(dir, "nope")}}, newRecorder(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(t.Context()); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Start() = %v, want ErrNotExist", err)
		}
	})
	t.Run("no cluster selected", func(t *testing.T) {
		rec := newRecorder(t)
		p, err := NewProvider(Options{Kubeconfigs: []string{path}, Include: []string{"prod"}}, rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(t.Context()); !errors.Is(err, ErrNoClusters) {
			t.Errorf("Start() = %v, want ErrNoClusters", err)
		}
		rec.none()
	})
	t.Run("started twice", func(t *testing.T) {
		rec := newRecorder(t)
		p, err := NewProvider(Options{Kubeconfigs: []string{path}}, rec)
		if err != nil {
			t.Fatal(err)
		}
		startProvider(t, p)
		rec.expect("engage a")
		if err := p.Start(t.Context()); !errors.Is(err, ErrAlreadyStarted) {
			t.Errorf("second Start() = %v, want ErrAlreadyStarted", err)
		}
	})
}

func TestNewProviderErrors(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		aware Aware
		is    error
	}{
		{"nil aware", Options{}, nil, ErrInvalidOptions},
		{"negative poll interval", Options{PollInterval: -time.Second}, newRecorder(t), ErrInvalidOptions},
		{"negative reload delay", Options{ReloadDelay: -time.Second}, newRecorder(t), ErrInvalidOptions},
		{"negative burst", Options{Burst: -1}, newRecorder(t), ErrInvalidOptions},
		{"bad glob", Options{Exclude: []string{"["}}, newRecorder(t), ErrInvalidGlob},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Kubeconfigs = []string{"/dev/null"}
			if _, err := NewProvider(tt.opts, tt.aware); !errors.Is(err, tt.is) {
				t.Errorf("NewProvider() = %v, want %v", err, tt.is)
			}
		})
	}
}

func TestProviderSetOptions(t *testing.T) {
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first"), filepath.Join(dir, "second")
	clustertest.WriteKubeconfig(t, first, kctx("a"), kctx("b"), kctx("c"))
	clustertest.WriteKubeconfig(t, second, kctx("d"))

	rec := newRecorder(t)
	opts := Options{Kubeconfigs: []string{first}, PollInterval: time.Hour}
	p, err := NewProvider(opts, rec)
	if err != nil {
		t.Fatal(err)
	}
	reloadErrs := make(chan error, 100)
	p.afterReload = func(err error) {
		if err != nil {
			reloadErrs <- err
		}
	}
	startProvider(t, p)
	rec.expect("engage a", "engage b", "engage c")
	engagedA := rec.engagement("a")

	t.Log("exclude a context")
	opts.Exclude = []string{"b"}
	if err := p.SetOptions(opts); err != nil {
		t.Fatal(err)
	}
	rec.expect("disengage b: cluster removed")

	t.Log("include it again, and alias another")
	opts.Exclude = nil
	opts.Aliases = map[string]string{"c": "prod"}
	if err := p.SetOptions(opts); err != nil {
		t.Fatal(err)
	}
	rec.expect("disengage c: cluster removed", "engage b", "engage prod")
	if got, _ := p.Get("prod"); got == nil || got.Context != "c" {
		t.Errorf("Get(prod) = %v, want the cluster of context c", got)
	}

	t.Log("invalid options change nothing")
	bad := opts
	bad.Include = []string{"["}
	if err := p.SetOptions(bad); !errors.Is(err, ErrInvalidGlob) {
		t.Fatalf("SetOptions(bad glob) = %v, want ErrInvalidGlob", err)
	}

	t.Log("add a kubeconfig file, which is then followed")
	opts.Kubeconfigs = []string{first, second}
	if err := p.SetOptions(opts); err != nil {
		t.Fatal(err)
	}
	rec.expect("engage d")
	clustertest.WriteKubeconfig(t, second, kctx("d"), kctx("e"))
	rec.expect("engage e")

	t.Log("a missing file keeps the clusters")
	opts.Kubeconfigs = []string{filepath.Join(dir, "missing")}
	if err := p.SetOptions(opts); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reloadErrs:
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("reload error %v, want a missing file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no failed reload")
	}
	rec.none()
	if got := clusterNames(p.Clusters()); !slices.Equal(got, []string{"a", "b", "d", "e", "prod"}) {
		t.Errorf("Clusters() = %q", got)
	}
	if engagedA.ctx.Err() != nil {
		t.Error("the context of a cluster that no change concerned was cancelled")
	}
}

// selectionRecorder is a recorder that is also a SelectionObserver.
type selectionRecorder struct{ *recorder }

var _ SelectionObserver = selectionRecorder{}

func (r selectionRecorder) Selected(_ context.Context, names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("selected %q", names))
}

func TestProviderTellsTheSelection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	clustertest.WriteKubeconfig(t, path, kctx("b"), kctx("a"))
	rec := selectionRecorder{newRecorder(t)}
	rec.failEngage["b"] = errors.New("refused")
	p, err := NewProvider(Options{Kubeconfigs: []string{path}, ReloadDelay: 10 * time.Millisecond, PollInterval: time.Hour}, rec)
	if err != nil {
		t.Fatal(err)
	}
	startProvider(t, p)
	// A cluster that is selected counts, engaged or not.
	rec.expect(`selected ["a" "b"]`, "engage a", "engage failed b")

	clustertest.WriteKubeconfig(t, path, kctx("c"))
	rec.expect(`selected ["c"]`, "disengage a: "+ErrClusterRemoved.Error(), "engage c")

	rec.none()
}
