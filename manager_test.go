package fleetwatch_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// The clusters of these tests are clustertest's fake servers: they answer the identity
// read and the health probe, and not discovery, so the informers of every cluster keep
// trying to start, and a cluster counts as Ready once its SyncTimeout has passed.

// fleetOf writes a kubeconfig with a context per name, each on its own fake server, and
// returns its path and the servers by name.
func fleetOf(t *testing.T, names ...string) (string, map[string]*clustertest.Server) {
	t.Helper()
	servers := map[string]*clustertest.Server{}
	var contexts []clustertest.Context
	for _, name := range names {
		s := clustertest.NewServer(t)
		servers[name] = s
		contexts = append(contexts, s.Context(name))
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	clustertest.WriteKubeconfig(t, path, contexts...)
	return path, servers
}

// options returns Options for the clusters of the kubeconfig at path, caching
// configmaps.
func options(path string) fleetwatch.Options {
	return fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{path}, ReloadDelay: 10 * time.Millisecond},
		Resources: []informer.Resource{{Name: "configmaps"}},
	}
}

// start runs m.Start and returns a func that stops it and returns Start's result.
func start(t *testing.T, m *fleetwatch.Manager) (stop func() error) {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	var err error
	stopped := false
	stop = func() error {
		t.Helper()
		if stopped {
			return err
		}
		stopped = true
		cancel()
		select {
		case err = <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("Start did not return after its context was cancelled")
		}
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// eventually polls cond until it returns "", failing the test with its last answer
// after 15 seconds.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// managerOnSnapshot flushes w, closes store and opens its file again, as a restart
// would, and returns the store opened again and a Manager of the clusters of kubeconfig
// on it, without GC tuning. The store is closed at the end of the test.
func managerOnSnapshot(t *testing.T, w *persist.Writer, store *persist.Store, snapshot, kubeconfig string) (*persist.Store, *fleetwatch.Manager) {
	t.Helper()
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := persist.Open(snapshot, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	opts := options(kubeconfig)
	opts.Snapshot = store
	opts.DisableGCTuning = true
	m, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	return store, m
}

func statusNames(m *fleetwatch.Manager) []string {
	var names []string
	for _, st := range m.Status() {
		names = append(names, st.Name)
	}
	return names
}

func configMap(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
	u.SetNamespace("default")
	u.SetName(name)
	u.SetResourceVersion("1")
	return u
}

func TestNewManagerValidates(t *testing.T) {
	path, _ := fleetOf(t, "a")
	for _, tt := range []struct {
		name   string
		change func(*fleetwatch.Options)
	}{
		{"no resource", func(o *fleetwatch.Options) { o.Resources = nil }},
		{"a resource without a name", func(o *fleetwatch.Options) { o.Resources = []informer.Resource{{}} }},
		{"a bad context glob", func(o *fleetwatch.Options) { o.Clusters.Include = []string{"["} }},
		{"a negative poll interval", func(o *fleetwatch.Options) { o.Clusters.PollInterval = -time.Second }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := options(path)
			tt.change(&opts)
			if m, err := fleetwatch.NewManager(opts); err == nil {
				t.Errorf("NewManager = %v, nil; want an error", m)
			}
		})
	}
	if _, err := fleetwatch.NewManager(options(path)); err != nil {
		t.Errorf("NewManager with valid options: %v", err)
	}
}

// TestSyncTimeoutCountsFromTheClustersTurn: with one sync at a time and two clusters
// whose apiservers hang, the first holds its slot for SyncTimeout, then the second has
// its turn and its own SyncTimeout: the Manager is not ready before both had theirs.
func TestSyncTimeoutCountsFromTheClustersTurn(t *testing.T) {
	path, servers := fleetOf(t, "a", "b")
	for _, s := range servers {
		s.SetHangDiscovery(true)
	}
	opts := options(path)
	const syncTimeout = 400 * time.Millisecond
	opts.SyncTimeout, opts.MaxConcurrentSyncs = syncTimeout, 1
	m, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	// A cluster's status follows its sync timeout a moment later than Ready does, so
	// Ready is read before the statuses, and the statuses are read on after Ready.
	timedOut := map[string]time.Time{}
	observe := func() {
		for _, st := range m.Status() {
			if len(st.Conditions) > 1 && st.Conditions[1].Reason == "SyncTimeout" && timedOut[st.Name].IsZero() {
				timedOut[st.Name] = time.Now()
			}
		}
	}
	var ready time.Time
	deadline := time.Now().Add(15 * time.Second)
	for ready.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %+v", m.Status())
		}
		if m.Ready() {
			ready = time.Now()
		}
		observe()
		time.Sleep(5 * time.Millisecond)
	}
	for len(timedOut) < 2 && time.Now().Before(deadline) {
		observe()
		time.Sleep(5 * time.Millisecond)
	}
	if len(timedOut) != 2 {
		t.Fatalf("ready, and the status shows the sync timeout of %v only", timedOut)
	}
	first, second := timedOut["a"], timedOut["b"]
	if second.Before(first) {
		first, second = second, first
	}
	if gap := second.Sub(first); gap < syncTimeout*3/4 {
		t.Errorf("the second cluster timed out %v after the first, while it waited for the first's slot: want about %v", gap, syncTimeout)
	}
	if gap := ready.Sub(first); gap < syncTimeout*3/4 {
		t.Errorf("ready %v after the first cluster's sync timeout, before the second had its own %v", gap, syncTimeout)
	}
}

// TestManagerEngagesAndDisengages: every selected cluster gets a status, with its
// identity; the Manager is Ready once each has synced or timed out; a cluster whose
// context goes leaves the status and the cache.
func TestManagerEngagesAndDisengages(t *testing.T) {
	path, servers := fleetOf(t, "a", "b")
	servers["b"].SetUID("uid-b")
	opts := options(path)
	opts.SyncTimeout = 300 * time.Millisecond
	m, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if m.Ready() || len(m.Status()) != 0 {
		t.Errorf("before Start: Ready %t, status %v; want not ready and none", m.Ready(), m.Status())
	}
	if _, err := m.RESTConfig("a"); !errors.Is(err, fleetwatch.ErrUnknownCluster) {
		t.Errorf("RESTConfig before Start: got %v, want ErrUnknownCluster", err)
	}
	start(t, m)

	eventually(t, "both clusters engaged and identified", func() string {
		st, ok := m.ClusterStatus("b")
		if names := statusNames(m); !slices.Equal(names, []string{"a", "b"}) || !ok || st.UID != "uid-b" {
			return fmt.Sprintf("status of %q; b: %+v", names, st)
		}
		return ""
	})
	if st, _ := m.ClusterStatus("a"); st.Server != servers["a"].URL || len(st.Resources) != 1 || st.Resources[0].Name != "configmaps" {
		t.Errorf("status of a: %+v; want its server and the configmaps", st)
	}
	for name, s := range servers {
		cfg, err := m.RESTConfig(name)
		if err != nil || cfg.Host != s.URL {
			t.Fatalf("RESTConfig(%s): %v, %v; want the config of %s", name, cfg, err, s.URL)
		}
		cfg.Host = "https://changed.invalid"
		if again, _ := m.RESTConfig(name); again.Host != s.URL {
			t.Errorf("RESTConfig(%s) after a change to the returned copy: host %s", name, again.Host)
		}
	}
	eventually(t, "ready once the sync timeout has passed", func() string {
		if !m.Ready() {
			return fmt.Sprintf("not ready: %+v", m.Status())
		}
		return ""
	})
	for _, st := range m.Status() {
		if c := st.Conditions[1]; c.Reason != "SyncTimeout" || st.Phase == aggregate.PhaseSynced {
			t.Errorf("cluster %s: phase %s, Synced condition %s; want unsynced and SyncTimeout", st.Name, st.Phase, c.Reason)
		}
	}

	// An object of b in the cache leaves with b.
	if err := m.Fleet().ClusterStore("b", configMaps).Apply(configMap("cm"), false); err != nil {
		t.Fatal(err)
	}
	clustertest.WriteKubeconfig(t, path, servers["a"].Context("a"))
	eventually(t, "b disengaged", func() string {
		if names := statusNames(m); !slices.Equal(names, []string{"a"}) {
			return fmt.Sprintf("status of %q", names)
		}
		if n := m.Fleet().Indexer(configMaps).ClusterLen("b"); n != 0 {
			return fmt.Sprintf("%d objects of b cached", n)
		}
		return ""
	})
	if _, ok := m.ClusterStatus("b"); ok {
		t.Error("ClusterStatus(b) found after b left")
	}
	if _, err := m.RESTConfig("b"); !errors.Is(err, fleetwatch.ErrUnknownCluster) {
		t.Errorf("RESTConfig(b) after b left: got %v, want ErrUnknownCluster", err)
	}
}

// TestManagerReconfigure: an invalid Reconfigure changes nothing; a valid one changes the
// resources of every cluster and the cluster selection.
func TestManagerReconfigure(t *testing.T) {
	path, _ := fleetOf(t, "a", "b")
	m, err := fleetwatch.NewManager(options(path))
	if err != nil {
		t.Fatal(err)
	}
	start(t, m)
	eventually(t, "both clusters engaged", func() string {
		if names := statusNames(m); !slices.Equal(names, []string{"a", "b"}) {
			return fmt.Sprintf("status of %q", names)
		}
		return ""
	})
	resources := func() string {
		var out []string
		for _, st := range m.Status() {
			var names []string
			for _, r := range st.Resources {
				names = append(names, r.Name)
			}
			out = append(out, st.Name+": "+strings.Join(names, ","))
		}
		return strings.Join(out, "; ")
	}

	for _, tt := range []struct {
		name   string
		change func(*fleetwatch.Options)
	}{
		{"no resource", func(o *fleetwatch.Options) { o.Resources = nil }},
		{"an invalid resource with a valid one", func(o *fleetwatch.Options) {
			o.Resources = []informer.Resource{{Name: "secrets"}, {}}
		}},
		{"a valid resource and a bad context glob", func(o *fleetwatch.Options) {
			o.Resources = []informer.Resource{{Name: "secrets"}}
			o.Clusters.Exclude = []string{"["}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := options(path)
			tt.change(&opts)
			if err := m.Reconfigure(opts); err == nil {
				t.Fatal("Reconfigure succeeded; want an error")
			}
			time.Sleep(100 * time.Millisecond) // what a partial change would have done by now
			if got, want := resources(), "a: configmaps; b: configmaps"; got != want {
				t.Errorf("after a failed Reconfigure: %s; want %s", got, want)
			}
		})
	}

	opts := options(path)
	opts.Resources = []informer.Resource{{Name: "configmaps"}, {Name: "secrets"}}
	opts.Clusters.Exclude = []string{"b"}
	if err := m.Reconfigure(opts); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new resources, b excluded", func() string {
		if got, want := resources(), "a: configmaps,secrets"; got != want {
			return got
		}
		return ""
	})
}

// TestManagerDropsSnapshotClustersNoLongerSelected: a cluster of the snapshot that the
// kubeconfig files no longer select leaves the cache and the snapshot when the Manager
// starts; the others stay, Stale, until their servers confirm them.
func TestManagerDropsSnapshotClustersNoLongerSelected(t *testing.T) {
	kubeconfig, servers := fleetOf(t, "a")
	snapshot := filepath.Join(t.TempDir(), "fleetwatch.db")
	store, err := persist.Open(snapshot, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := persist.ResourceKey(informer.Scope{Resource: configMaps, Spec: (&informer.Options{}).Spec(informer.Resource{Name: "configmaps"})}.String())
	w := store.NewWriter(persist.WriterOptions{})
	for _, name := range []string{"a", "gone"} {
		if err := store.SetIdentity(name, persist.Identity{UID: "other-uid", Server: "https://" + name}); err != nil {
			t.Fatal(err)
		}
		w.Upsert(name, key, configMap("cm"))
		w.Checkpoint(name, key, "1")
	}
	store, m := managerOnSnapshot(t, w, store, snapshot, kubeconfig)
	if names := statusNames(m); !slices.Equal(names, []string{"a", "gone"}) {
		t.Fatalf("after loading the snapshot: status of %q, want a and gone", names)
	}
	stop := start(t, m)
	eventually(t, "gone dropped", func() string {
		if names := statusNames(m); !slices.Equal(names, []string{"a"}) {
			return fmt.Sprintf("status of %q", names)
		}
		if n := m.Fleet().Indexer(configMaps).ClusterLen("gone"); n != 0 {
			return fmt.Sprintf("%d objects of gone cached", n)
		}
		return ""
	})
	// a's saved identity is not its server's: its saved objects go too, and it syncs cold.
	eventually(t, "a's identity confirmed", func() string {
		if st, _ := m.ClusterStatus("a"); st.UID != servers["a"].UID() {
			return fmt.Sprintf("UID %q", st.UID)
		}
		return ""
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	snap, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Clusters["gone"]; ok {
		t.Error("the snapshot still holds gone")
	}
}

// blockingHandler blocks in OnEvent until release is closed.
type blockingHandler struct {
	entered chan struct{}
	release chan struct{}
}

func (h *blockingHandler) OnEvent(aggregate.Event) {
	select {
	case h.entered <- struct{}{}:
	default:
	}
	<-h.release
}

// TestManagerShutdown: Start stops the clusters, the snapshot writer, the handlers and
// then the Runnables, in that order, within one GracefulShutdownTimeout shared by all;
// when a part is too slow, Start returns once the budget is spent, and the snapshot can
// be closed.
func TestManagerShutdown(t *testing.T) {
	newManager := func(t *testing.T, budget time.Duration) (*fleetwatch.Manager, *persist.Store) {
		path, _ := fleetOf(t, "a")
		store, err := persist.Open(filepath.Join(t.TempDir(), "fleetwatch.db"), persist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		opts := options(path)
		opts.Snapshot = store
		opts.DisableGCTuning = true
		opts.GracefulShutdownTimeout = budget
		m, err := fleetwatch.NewManager(opts)
		if err != nil {
			t.Fatal(err)
		}
		return m, store
	}
	engaged := func(t *testing.T, m *fleetwatch.Manager) {
		t.Helper()
		eventually(t, "a engaged", func() string {
			if _, ok := m.ClusterStatus("a"); !ok {
				return "no status"
			}
			return ""
		})
	}

	t.Run("in order", func(t *testing.T) {
		m, store := newManager(t, 10*time.Second)
		stoppedFirst := make(chan error, 1)
		if err := m.Add(fleetwatch.RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			// The handlers, stopped after the clusters and the writer, have stopped by now.
			_, err := m.Fleet().AddHandler(aggregate.HandlerFunc(func(aggregate.Event) {}), aggregate.HandlerOptions{})
			if !errors.Is(err, aggregate.ErrStopped) {
				err = fmt.Errorf("when the runnable stops, AddHandler = %v, want ErrStopped", err)
			} else {
				err = nil
			}
			stoppedFirst <- err
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		stop := start(t, m)
		engaged(t, m)
		if err := m.Add(fleetwatch.RunnableFunc(func(context.Context) error { return nil })); !errors.Is(err, fleetwatch.ErrAlreadyStarted) {
			t.Errorf("Add after Start = %v, want ErrAlreadyStarted", err)
		}
		if err := m.Start(context.Background()); !errors.Is(err, fleetwatch.ErrAlreadyStarted) {
			t.Errorf("a second Start = %v, want ErrAlreadyStarted", err)
		}
		if err := stop(); err != nil {
			t.Errorf("Start = %v, want nil", err)
		}
		if err := <-stoppedFirst; err != nil {
			t.Error(err)
		}
		if err := store.Close(); err != nil {
			t.Errorf("closing the snapshot: %v", err)
		}
	})

	t.Run("one budget for all", func(t *testing.T) {
		const budget = 500 * time.Millisecond
		m, store := newManager(t, budget)
		h := &blockingHandler{entered: make(chan struct{}, 1), release: make(chan struct{})}
		t.Cleanup(func() { close(h.release) })
		if _, err := m.Fleet().AddHandler(h, aggregate.HandlerOptions{Name: "stuck"}); err != nil {
			t.Fatal(err)
		}
		// The runnable would take longer than the budget too, but gets none of it: the
		// stuck handler spent it.
		runnableStopped := make(chan time.Time, 1)
		if err := m.Add(fleetwatch.RunnableFunc(func(ctx context.Context) error {
			<-ctx.Done()
			runnableStopped <- time.Now()
			time.Sleep(time.Minute)
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		stop := start(t, m)
		engaged(t, m)
		if err := m.Fleet().ClusterStore("a", configMaps).Apply(configMap("cm"), false); err != nil {
			t.Fatal(err)
		}
		<-h.entered
		began := time.Now()
		err := stop()
		took := time.Since(began)
		if !errors.Is(err, fleetwatch.ErrShutdownTimeout) || !strings.Contains(err.Error(), "fleet handlers") {
			t.Errorf("Start = %v, want ErrShutdownTimeout naming the fleet handlers", err)
		}
		// The runnable sleeps a minute: Start returning well before that is what counts
		// (a loaded machine can delay it by seconds).
		if took < budget || took > budget+20*time.Second {
			t.Errorf("Start returned %v after its context was cancelled, want the budget, %v", took, budget)
		}
		select {
		case at := <-runnableStopped:
			if at.Sub(began) < budget {
				t.Errorf("the runnable was stopped %v after the start of the shutdown, before the handlers", at.Sub(began))
			}
		case <-time.After(10 * time.Second):
			t.Error("the runnable was not stopped once the budget was spent")
		}
		closed := make(chan error, 1)
		go func() { closed <- store.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("closing the snapshot: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("closing the snapshot after a shutdown that timed out blocks")
		}
	})

	t.Run("a part that fails stops the rest", func(t *testing.T) {
		m, _ := newManager(t, 10*time.Second)
		failed := errors.New("listener closed")
		if err := m.Add(fleetwatch.RunnableFunc(func(context.Context) error { return failed })); err != nil {
			t.Fatal(err)
		}
		logger, _ := ktesting.NewTestContext(t)
		done := make(chan error, 1)
		go func() { done <- m.Start(klog.NewContext(t.Context(), logger)) }()
		select {
		case err := <-done:
			if !errors.Is(err, failed) {
				t.Errorf("Start = %v, want the runnable's error", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("Start did not return after a runnable failed")
		}
	})
}

// awareRecorder records the clusters it is told about, with their contexts.
type awareRecorder struct {
	mu       sync.Mutex
	engaged  map[string]context.Context
	order    []string
	failWith error
}

func (a *awareRecorder) Engage(ctx context.Context, c *cluster.Cluster) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engaged == nil {
		a.engaged = map[string]context.Context{}
	}
	a.engaged[c.Name] = ctx
	a.order = append(a.order, c.Name)
	return a.failWith
}

func (a *awareRecorder) ctx(name string) context.Context {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.engaged[name]
}

// TestManagerAddAware: an Aware added with AddAware is engaged with every cluster the
// Manager engages, after the Manager, and its context ends when the cluster leaves.
// ClusterHasSynced is true for a cluster loaded from the snapshot whose informers have
// not synced, false for a cold one; ClusterSynced is closed for the first, open for the
// second, nil for a cluster not engaged.
func TestManagerAddAware(t *testing.T) {
	kubeconfig, servers := fleetOf(t, "a", "b")
	snapshot := filepath.Join(t.TempDir(), "fleetwatch.db")
	store, err := persist.Open(snapshot, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := persist.ResourceKey(informer.Scope{Resource: configMaps, Spec: (&informer.Options{}).Spec(informer.Resource{Name: "configmaps"})}.String())
	if err := store.SetIdentity("a", persist.Identity{UID: servers["a"].UID(), Server: servers["a"].URL}); err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(persist.WriterOptions{})
	w.Upsert("a", key, configMap("cm"))
	w.Checkpoint("a", key, "1")
	_, m := managerOnSnapshot(t, w, store, snapshot, kubeconfig)
	rec := &awareRecorder{failWith: errors.New("refused")}
	if err := m.AddAware(rec); err != nil {
		t.Fatal(err)
	}
	start(t, m)
	eventually(t, "both clusters engaged with the Aware", func() string {
		if rec.ctx("a") == nil || rec.ctx("b") == nil {
			return "not yet"
		}
		return ""
	})
	if err := m.AddAware(rec); !errors.Is(err, fleetwatch.ErrAlreadyStarted) {
		t.Errorf("AddAware after Start: %v, want ErrAlreadyStarted", err)
	}
	// The error of the Aware leaves the clusters in the fleet.
	if _, err := m.RESTConfig("a"); err != nil {
		t.Errorf("RESTConfig(a) after the Aware refused it: %v", err)
	}
	eventually(t, "a's identity confirmed", func() string {
		if st, _ := m.ClusterStatus("a"); st.UID != servers["a"].UID() {
			return fmt.Sprintf("UID %q", st.UID)
		}
		return ""
	})
	if !m.ClusterHasSynced("a") || m.Fleet().Indexer(configMaps).ClusterLen("a") != 1 {
		t.Error("ClusterHasSynced(a) is false, or its object is gone; they were loaded from the snapshot")
	}
	if m.ClusterHasSynced("b") || m.ClusterHasSynced("unknown") {
		t.Error("ClusterHasSynced is true for a cold cluster whose informers did not sync, or for an unknown one")
	}
	select {
	case <-m.ClusterSynced("a"):
	default:
		t.Error("ClusterSynced(a) is open; a was loaded from the snapshot")
	}
	select {
	case <-m.ClusterSynced("b"):
		t.Error("ClusterSynced(b) is closed for a cold cluster whose informers did not sync")
	default:
	}
	if m.ClusterSynced("unknown") != nil {
		t.Error("ClusterSynced(unknown) is not nil")
	}

	clustertest.WriteKubeconfig(t, kubeconfig, servers["a"].Context("a"))
	eventually(t, "b's context ended with ErrClusterRemoved", func() string {
		if err := context.Cause(rec.ctx("b")); !errors.Is(err, cluster.ErrClusterRemoved) {
			return fmt.Sprintf("cause %v", err)
		}
		return ""
	})
	if rec.ctx("a").Err() != nil {
		t.Error("a's context ended")
	}
}

// TestManagerLogsAReplacedCluster: with the change log on, the objects loaded from the
// snapshot have a base in it that a watch resumes from, until their cluster's identity
// turns out changed: the log then records the cluster as replaced, not removed, and the
// base no longer resumes anything of an earlier run.
func TestManagerLogsAReplacedCluster(t *testing.T) {
	kubeconfig, servers := fleetOf(t, "a")
	snapshot := filepath.Join(t.TempDir(), "fleetwatch.db")
	store, err := persist.Open(snapshot, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := persist.ResourceKey(informer.Scope{Resource: configMaps, Spec: (&informer.Options{}).Spec(informer.Resource{Name: "configmaps"})}.String())
	history := persist.HistoryOptions{Enabled: true}
	w := store.NewWriter(persist.WriterOptions{History: history})
	if err := store.SetIdentity("a", persist.Identity{UID: "other-uid", Server: "https://a"}); err != nil {
		t.Fatal(err)
	}
	w.Upsert("a", key, configMap("cm"))
	w.Checkpoint("a", key, "7")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if store, err = persist.Open(snapshot, persist.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	opts := options(kubeconfig)
	opts.Snapshot = store
	opts.DisableGCTuning = true
	opts.SnapshotWriter.History = history
	m, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := store.ID(); err != nil || m.ChangeLogEpoch() != id {
		t.Errorf("ChangeLogEpoch %q, want the snapshot's ID %q (%v)", m.ChangeLogEpoch(), id, err)
	}
	if rv, n, _, ok := m.ChangeLogBase("a", configMaps); rv != 7 || n != 1 || !ok {
		t.Errorf("loaded: base %d, %d objects, %v; want 7, 1, true", rv, n, ok)
	}
	stop := start(t, m)
	eventually(t, "a's identity confirmed", func() string {
		if st, _ := m.ClusterStatus("a"); st.UID != servers["a"].UID() {
			return fmt.Sprintf("UID %q", st.UID)
		}
		return ""
	})
	// The loaded base is gone; the cluster, listed cold, may have the base of its
	// list, which resumes no watch of an earlier run (ChangeLogListed).
	if rv, _, _, ok := m.ChangeLogBase("a", configMaps); ok && (rv == 7 || !m.ChangeLogListed("a", configMaps)) {
		t.Error("a replaced cluster's base still resumes watches")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	changes, _, err := store.Changes(persist.ChangesQuery{Cluster: "a"})
	if err != nil {
		t.Fatal(err)
	}
	var types []persist.ChangeType
	for _, c := range changes {
		types = append(types, c.Type)
	}
	if !slices.Contains(types, persist.ChangeClusterReplaced) || slices.Contains(types, persist.ChangeClusterRemoved) {
		t.Errorf("the log of a: %v, want the cluster replaced", types)
	}
}
