package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

var warmResources = []schema.GroupVersionResource{podsGVR, configMapsGVR, deploymentsGVR}

// changeLog records the events of a handler that are not part of an initial list.
type changeLog struct {
	mu      sync.Mutex
	initial map[aggregate.Key]int
	changes map[aggregate.Key][]string
}

func newChangeLog() *changeLog {
	return &changeLog{initial: map[aggregate.Key]int{}, changes: map[aggregate.Key][]string{}}
}

func (l *changeLog) OnEvent(e aggregate.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.InitialList {
		l.initial[e.Key()]++
		return
	}
	entry := string(e.Type)
	if e.FinalStateUnknown {
		entry += "(relist)"
	}
	l.changes[e.Key()] = append(l.changes[e.Key()], entry)
}

// runWarm starts a Manager on env's kubeconfig with a snapshot at path, registers log
// before Start, and waits until it is ready and log has synced.
func runWarm(t *testing.T, env *testenv.Env, path string, log *changeLog, before func(*fleetwatch.Manager)) (*fleetwatch.Manager, func()) {
	t.Helper()
	return startWithSnapshot(t, path, fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{env.Kubeconfig}},
		Resources: []informer.Resource{{Name: "pods"}, {Name: "configmaps"}, {Name: "deployments.apps"}},
	}, log, before)
}

// startWithSnapshot starts a Manager with opts and the snapshot at path, with a short
// health interval, a snapshot committed every 100ms, and handler registered before Start
// (after before, if set), and waits until it is ready and handler has synced. stop
// stops it and closes the snapshot; it runs at the test's end if not called before.
func startWithSnapshot(t *testing.T, path string, opts fleetwatch.Options, handler aggregate.Handler, before func(*fleetwatch.Manager)) (mgr *fleetwatch.Manager, stop func()) {
	t.Helper()
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Health = cluster.HealthOptions{Interval: time.Second, Timeout: time.Second}
	opts.SyncTimeout = 60 * time.Second
	opts.Snapshot = store
	opts.SnapshotWriter = persist.WriterOptions{Interval: 100 * time.Millisecond}
	var reg *aggregate.Registration
	mgr, stopManager := startManager(t, opts, func(mgr *fleetwatch.Manager) {
		if before != nil {
			before(mgr)
		}
		var err error
		if reg, err = mgr.Fleet().AddHandler(handler, aggregate.HandlerOptions{Name: "test"}); err != nil {
			t.Fatal(err)
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			stopManager()
			if err := store.Close(); err != nil {
				t.Errorf("closing the snapshot: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	eventually(t, 90*time.Second, "ready and synced", func() string {
		if !mgr.HasSynced() || !reg.HasSynced() {
			return fmt.Sprintf("synced=%v handler synced=%v %+v", mgr.HasSynced(), reg.HasSynced(), mgr.Status())
		}
		return ""
	})
	return mgr, stop
}

func cacheEqualsServers(ctx context.Context, t *testing.T, env *testenv.Env, fleet *aggregate.Fleet) string {
	for _, gvr := range warmResources {
		if d := diffRVs(fleetTruth(ctx, t, env.Clusters, gvr), fleetCache(t, fleet, gvr)); d != "" {
			return gvr.Resource + ": " + d
		}
	}
	return ""
}

// loadSnapshot loads the snapshot at path, which no process has open, read-only.
func loadSnapshot(t *testing.T, path string) *persist.Snapshot {
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
	return snap
}

// snapshotEqualsCache checks that the snapshot at path holds exactly the objects of
// fleet's cache, field by field: what the informers wrote, from encodings made while
// decoding watch events or by encoding the objects, loads as the objects they cached.
// fleet's informers must have stopped, and the snapshot must be closed.
func snapshotEqualsCache(t *testing.T, path string, fleet *aggregate.Fleet) {
	t.Helper()
	snap := loadSnapshot(t, path)
	stored := map[aggregate.Key]runtime.Object{}
	for name, cs := range snap.Clusters {
		for _, rs := range cs.Resources {
			for _, obj := range rs.Objects {
				a, err := meta.Accessor(obj)
				if err != nil {
					t.Fatal(err)
				}
				stored[aggregate.Key{Cluster: name, Namespace: a.GetNamespace(), Name: a.GetName()}] = obj
			}
		}
	}
	n := 0
	for _, gvr := range warmResources {
		for _, key := range fleet.Indexer(gvr).ListKeys() {
			n++
			cached, _ := fleet.Indexer(gvr).Get(key)
			if !equality.Semantic.DeepEqual(stored[key], cached) {
				t.Errorf("%v: the snapshot holds %v, the cache %v", key, stored[key], cached)
			}
		}
	}
	if n != len(stored) {
		t.Errorf("the snapshot holds %d objects, the cache %d", len(stored), n)
	}
}

// changeWhileDown makes three changes to configmaps in every cluster: a create, an
// update and a delete, and returns the expected change events.
func changeWhileDown(t *testing.T, env *testenv.Env, round string) map[aggregate.Key][]string {
	t.Helper()
	ctx := t.Context()
	want := map[aggregate.Key][]string{}
	for _, c := range env.Clusters {
		cms := c.Clientset().CoreV1().ConfigMaps("shop")
		createConfigMap(t, c.Clientset(), "shop", "new-"+round, c.Name)
		want[aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "new-" + round}] = []string{"Added"}
		cm, err := cms.Get(ctx, "upd", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["round"] = round
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want[aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "upd"}] = []string{"Updated"}
		if err := cms.Delete(ctx, "del-"+round, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		want[aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "del-" + round}] = []string{"Deleted"}
	}
	return want
}

func checkChanges(t *testing.T, log *changeLog, want map[aggregate.Key][]string, relist bool) {
	t.Helper()
	eventually(t, 30*time.Second, "changes delivered", func() string {
		log.mu.Lock()
		defer log.mu.Unlock()
		for k := range want {
			if len(log.changes[k]) == 0 {
				return fmt.Sprintf("nothing yet for %v", k)
			}
		}
		return ""
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	for k, got := range log.changes {
		w, ok := want[k]
		if !ok {
			t.Errorf("event for an object that did not change: %v %v", k, got)
			continue
		}
		if relist && w[0] == "Deleted" {
			w = []string{"Deleted(relist)"}
		}
		if strings.Join(got, ",") != strings.Join(w, ",") {
			t.Errorf("%v: got %v, want %v", k, got, w)
		}
	}
}

func listCounters(ctx context.Context, t *testing.T, env *testenv.Env) map[string][2]float64 {
	t.Helper()
	out := map[string][2]float64{}
	for _, c := range env.Clusters {
		m, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, gvr := range warmResources {
			out[c.Name+" "+gvr.Resource] = [2]float64{m.Requests("LIST", gvr.Resource), m.ListedObjects(gvr.Group, gvr.Resource)}
		}
	}
	return out
}

// TestWarmRestart restarts an embedded fleet on its snapshot: within the watch window,
// after compaction, after a cluster was recreated, and from a corrupt file.
func TestWarmRestart(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 3})
	ctx := t.Context()
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Namespaces: []string{"shop", "payments", "ops"}, Deployments: 4, Replicas: 5}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"upd", "del-1", "del-2"} {
			createConfigMap(t, c.Clientset(), "shop", name, c.Name)
		}
	}
	path := filepath.Join(t.TempDir(), "fleetwatch.db")

	// A cold first run fills the snapshot.
	mgr, stop := runWarm(t, env, path, newChangeLog(), nil)
	if d := cacheEqualsServers(ctx, t, env, mgr.Fleet()); d != "" {
		t.Fatal(d)
	}
	stop()
	snapshotEqualsCache(t, path, mgr.Fleet())
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}

	cold := mgr.Fleet()
	t.Run("within the watch window: no list, only the changes", func(t *testing.T) {
		want := changeWhileDown(t, env, "1")
		before := listCounters(ctx, t, env)
		log := newChangeLog()
		var seeded int
		mgr, stop := runWarm(t, env, path, log, func(mgr *fleetwatch.Manager) {
			// Reads are served before Start, from the snapshot, and the clusters are Stale.
			for _, gvr := range warmResources {
				seeded += len(mgr.Fleet().Indexer(gvr).ListKeys())
			}
			// Typed reads of the objects decoded from the snapshot equal those of the
			// cold run's cache, which equalled the servers (pods and deployments did
			// not change meanwhile).
			if d := typedReadsEqual(t, env.Clusters, cold, mgr.Fleet()); d != "" {
				t.Errorf("typed reads from the snapshot: %s", d)
			}
			for _, st := range mgr.Status() {
				if st.Phase != aggregate.PhaseStale {
					t.Errorf("%s: phase %s before start, want Stale", st.Name, st.Phase)
				}
			}
		})
		defer stop()
		if seeded == 0 {
			t.Fatal("nothing served from the snapshot before start")
		}
		checkChanges(t, log, want, false)
		after := listCounters(ctx, t, env)
		for k, b := range before {
			a := after[k]
			if a[0] != b[0] {
				t.Errorf("%s: %v LIST requests during a warm restart", k, a[0]-b[0])
			}
			// Resumed watches are first sent the events since their resourceVersion:
			// at most the 3 changes per cluster, to configmaps.
			if limit := map[bool]float64{true: 3, false: 0}[strings.HasSuffix(k, " configmaps")]; a[1]-b[1] > limit {
				t.Errorf("%s: %v objects handed out as lists or replayed, want at most %v", k, a[1]-b[1], limit)
			}
		}
		log.mu.Lock()
		for k, n := range log.initial {
			if n != 1 {
				t.Errorf("%v: %d initial Added events", k, n)
			}
		}
		log.mu.Unlock()
		if d := cacheEqualsServers(ctx, t, env, mgr.Fleet()); d != "" {
			t.Error(d)
		}
		// The changes came as watch events, with their encodings.
		stop()
		snapshotEqualsCache(t, path, mgr.Fleet())
	})

	t.Run("after compaction: a relist diffed against the snapshot", func(t *testing.T) {
		want := changeWhileDown(t, env, "2")
		for _, c := range env.Clusters {
			if _, err := c.Compact(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.KillAPIServer(); err != nil {
				t.Fatal(err)
			}
			if err := c.StartAPIServer(ctx); err != nil {
				t.Fatal(err)
			}
		}
		log := newChangeLog()
		mgr, stop := runWarm(t, env, path, log, nil)
		defer stop()
		checkChanges(t, log, want, true)
		if d := cacheEqualsServers(ctx, t, env, mgr.Fleet()); d != "" {
			t.Error(d)
		}
	})

	t.Run("a cluster recreated while down leaves no ghost", func(t *testing.T) {
		c := env.Clusters[2]
		if err := c.Recreate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.Seed(ctx, testenv.SampleOptions{Namespaces: []string{"fresh"}, Deployments: 1, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
		mgr, stop := runWarm(t, env, path, newChangeLog(), nil)
		defer stop()
		eventually(t, 30*time.Second, "cache equals servers", func() string {
			return cacheEqualsServers(ctx, t, env, mgr.Fleet())
		})
		for _, gvr := range warmResources {
			for _, k := range mgr.Fleet().Indexer(gvr).ListKeys() {
				if k.Cluster == c.Name && k.Namespace == "shop" {
					t.Errorf("ghost from the old %s: %v", c.Name, k)
				}
			}
		}
	})

	t.Run("a corrupt snapshot is moved aside and the start is cold", func(t *testing.T) {
		if err := os.WriteFile(path, []byte("this is not a bbolt file, just garbage of some length........."), 0o600); err != nil {
			t.Fatal(err)
		}
		store, err := persist.Open(path, persist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		moved, cause := store.Recovered()
		if moved == "" || cause == nil {
			t.Errorf("Recovered() = %q, %v; want the file moved aside", moved, cause)
		}
		if _, err := os.Stat(moved); err != nil {
			t.Errorf("moved-aside file: %v", err)
		}
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		mgr, stop := runWarm(t, env, path, newChangeLog(), nil)
		defer stop()
		if d := cacheEqualsServers(ctx, t, env, mgr.Fleet()); d != "" {
			t.Error(d)
		}
	})
}
