package fleetwatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestChangesSinceFromTheLog: the changes that the persisting stores hand the snapshot's
// writer come back from its change log as the fleet's events, with the states before
// them; a deletion that a relist found is Vanished in the log, and FinalStateUnknown
// again.
func TestChangesSinceFromTheLog(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	sc := informer.Scope{Resource: pods}
	key := persist.ResourceKey(sc.String())
	store, w := openLogged(t)
	fleet := aggregate.New(aggregate.Options{})
	ps := &persistingStore{ClusterStore: fleet.ClusterStore("prod", pods), writer: w, cluster: "prod", key: key}
	obj := func(name, rv, app string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
		u.SetNamespace("shop")
		u.SetName(name)
		u.SetResourceVersion(rv)
		u.SetLabels(map[string]string{"app": app})
		return u
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Watch events from 10 to 13, then a relist at 20.
	must(ps.Apply(obj("a", "10", "one"), false))
	ps.Checkpoint("10")
	must(w.Flush(t.Context()))
	must(ps.Apply(obj("b", "11", "one"), false))
	ps.Checkpoint("11")
	must(ps.Apply(obj("a", "12", "two"), false))
	ps.Checkpoint("12")
	must(ps.Delete(obj("b", "13", "one"), false))
	ps.Checkpoint("13")
	must(ps.Apply(obj("c", "14", "one"), false))
	must(ps.Delete(obj("a", "12", "two"), true))
	ps.Checkpoint("20")
	must(w.Flush(t.Context()))

	m := &Manager{opts: Options{Snapshot: store}, logEpoch: "e", logBases: &logBases{}}
	m.logBases.loading("prod", sc, key)
	m.logBases.loaded("prod", sc, key, "20", 1)
	rv, n, load, ok := m.ChangeLogBase("prod", pods)
	if rv != 20 || n != 1 || load == 0 || !ok {
		t.Errorf("ChangeLogBase: %d, %d, load %d, %v", rv, n, load, ok)
	}
	describe := func(o runtime.Object) string {
		if o == nil {
			return "-"
		}
		a, _ := meta.Accessor(o)
		return a.GetName() + "@" + a.GetResourceVersion() + "/" + a.GetLabels()["app"]
	}
	since := func(rv, upTo uint64) ([]string, bool, error) {
		var out []string
		withRV, err := m.ChangesSince("prod", pods, rv, upTo, func(at uint64, e aggregate.Event) {
			out = append(out, fmt.Sprintf("%d %s %s old %s unknown %v", at, e.Type, describe(e.Object), describe(e.OldObject), e.FinalStateUnknown))
		})
		return out, withRV, err
	}
	all := []string{
		"11 Added b@11/one old - unknown false",
		"12 Updated a@12/two old a@10/one unknown false",
		"13 Deleted b@13/one old - unknown false",
		"20 Added c@14/one old - unknown false",
		"20 Deleted a@12/two old - unknown true",
	}
	for _, tc := range []struct {
		rv, upTo uint64
		want     []string
		withRV   bool
	}{
		// Where the coverage starts: the changes after it, not those at it (a@10).
		{10, 20, all, false},
		{11, 20, all, true},
		{12, 20, all[1:], true},
		{14, 20, all[3:], true},
		{11, 12, all[:2], true},
	} {
		got, withRV, err := since(tc.rv, tc.upTo)
		if err != nil || !slices.Equal(got, tc.want) || withRV != tc.withRV {
			t.Errorf("since %d up to %d: %v, with the changes at it %v\n%q,\nwant %q, %v", tc.rv, tc.upTo, err, withRV, got, tc.want, tc.withRV)
		}
	}
	if _, _, err := since(9, 20); !errors.Is(err, persist.ErrTooOld) {
		t.Errorf("before the log: %v, want ErrTooOld", err)
	}
	m.logBases.forget("prod", schema.GroupVersionResource{})
	if _, _, _, ok := m.ChangeLogBase("prod", pods); ok {
		t.Error("a forgotten cluster has a base")
	}
	if _, _, err := since(11, 20); !errors.Is(err, errNotInLog) {
		t.Errorf("a forgotten cluster: %v, want errNotInLog", err)
	}
	// The cluster comes back (a warm handover from the replica it went to): its
	// load has another number, from which the server counts a new generation of
	// its positions.
	m.logBases.loading("prod", sc, key)
	if _, _, again, ok := m.ChangeLogBase("prod", pods); again == load || !ok {
		t.Errorf("the load of a cluster that came back: %d, %v; the first one's was %d", again, ok, load)
	}
}

// TestLogBases: a resource saved in more than one scope (one informer per namespace)
// is one load, whose base is the greatest of its namespaces' once every one is known,
// with the objects of all, and each namespace has its own (ChangeLogScopeBases); it is
// watched namespace by namespace (ChangeLogScoped) from its first scope on, loaded or
// watched. A resource saved at a resourceVersion that is not an integer has no base.
func TestLogBases(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	m := &Manager{logEpoch: "e", logBases: &logBases{}}
	b := m.logBases
	scopes := map[string]informer.Scope{}
	for _, ns := range []string{"a", "b"} {
		scopes[ns] = informer.Scope{Resource: pods, Namespace: ns}
		b.loading("prod", scopes[ns], persist.ResourceKey(scopes[ns].String()))
	}
	if !m.ChangeLogScoped("prod", pods) {
		t.Error("pods loaded by namespace: not scoped")
	}
	b.loaded("prod", scopes["a"], persist.ResourceKey(scopes["a"].String()), "7", 2)
	if rv, n, _, ok := m.ChangeLogBase("prod", pods); rv != 0 || n != 2 || !ok {
		t.Errorf("while b loads: %d, %d, %v", rv, n, ok)
	}
	b.loaded("prod", scopes["b"], persist.ResourceKey(scopes["b"].String()), "5", 1)
	rv, n, load, ok := m.ChangeLogBase("prod", pods)
	if rv != 7 || n != 3 || !ok {
		t.Errorf("loaded: %d, %d, %v", rv, n, ok)
	}
	if got, want := scopeBases(m, pods), map[string]string{"a": "7/2", "b": "5/1"}; !maps.Equal(got, want) {
		t.Errorf("bases by namespace %v, want %v", got, want)
	}
	if _, err := m.ChangesSince("prod", pods, 5, 7, func(uint64, aggregate.Event) {}); !errors.Is(err, errNotInLog) {
		t.Errorf("ChangesSince of a resource loaded by namespace: %v", err)
	}
	// Loaded again (a cluster that came back): another load.
	b.forget("prod", pods)
	b.loading("prod", scopes["a"], persist.ResourceKey(scopes["a"].String()))
	if _, _, again, _ := m.ChangeLogBase("prod", pods); again == load {
		t.Error("a load after a forget has the number of the one before")
	}
	// Watched in every namespace now: not scoped.
	all := informer.Scope{Resource: pods}
	b.watching("prod", all, persist.ResourceKey(all.String()))
	if m.ChangeLogScoped("prod", pods) {
		t.Error("pods watched in every namespace: scoped")
	}
	b.watching("prod", scopes["b"], persist.ResourceKey(scopes["b"].String()))
	if !m.ChangeLogScoped("prod", pods) || m.ChangeLogScoped("other", pods) {
		t.Error("ChangeLogScoped of watched scopes")
	}

	sc := informer.Scope{Resource: nodes}
	b.loading("prod", sc, persist.ResourceKey(sc.String()))
	if rv, _, _, ok := m.ChangeLogBase("prod", nodes); !ok || rv != 0 {
		t.Errorf("while loading: %d, %v", rv, ok)
	}
	b.loaded("prod", sc, persist.ResourceKey(sc.String()), "x", 1)
	if _, _, _, ok := m.ChangeLogBase("prod", nodes); ok {
		t.Error("a resourceVersion that is not an integer: a base")
	}
	var none *logBases
	none.loading("prod", sc, "k")
	none.watching("prod", sc, "k")
	if _, ok := none.get("prod", nodes, nil); ok {
		t.Error("no change log, a base")
	}
}

// TestLogOriginsAfterARestart: a new owner that imported a cluster with its old owner's
// change log, and restarts, still places the old owner's positions: the load of its
// snapshot gives the logs the cluster's records came from (ChangeLogHolds), until the
// cluster is forgotten.
func TestLogOriginsAfterARestart(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	sc := informer.Scope{Resource: pods}
	key := persist.ResourceKey(sc.String())
	open := func() *persist.Store {
		s, err := persist.Open(filepath.Join(t.TempDir(), "snapshot.db"), persist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	old := open()
	w := old.NewWriter(persist.WriterOptions{Interval: time.Hour, History: persist.HistoryOptions{Enabled: true}})
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	u.SetNamespace("shop")
	u.SetName("a")
	u.SetResourceVersion("10")
	w.Upsert("prod", key, u)
	w.Checkpoint("prod", key, "10")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	oldID, err := old.ID()
	if err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := old.ExportCluster("prod", &state, persist.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	store := open()
	if _, err := store.ImportCluster("prod", &state, persist.ImportOptions{Log: true}); err != nil {
		t.Fatal(err)
	}

	// The restart: the snapshot loaded into a new fleet.
	snap, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]bool{sc.Spec: true}
	m := &Manager{opts: Options{Snapshot: store}, logEpoch: "e", logBases: &logBases{}}
	seed(t.Context(), aggregate.New(aggregate.Options{}), snap, specs, store, m.logBases)
	if !m.ChangeLogHolds("prod", oldID) {
		t.Errorf("after the restart, the log does not hold the records of %q", oldID)
	}
	if rv, _, _, ok := m.ChangeLogBase("prod", pods); rv != 10 || !ok {
		t.Errorf("ChangeLogBase: %d, %v", rv, ok)
	}
	m.logBases.forget("prod", schema.GroupVersionResource{})
	if m.ChangeLogHolds("prod", oldID) {
		t.Error("the cluster was forgotten, its imported log is still held")
	}
}

// TestChangesSinceDamagedIndex: a resume from a change log whose index is damaged (its
// entries are not sealed; here the resourceVersion of one record's entry is lowered
// before the resume's, which would end the range early) fails with persist.ErrCorrupt,
// rather than handing the server a stream without the changes it skipped: the server
// answers 410 to any error of ChangesSince (server.TestWatchResumesAcrossARestart).
func TestChangesSinceDamagedIndex(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	sc := informer.Scope{Resource: pods}
	key := persist.ResourceKey(sc.String())
	path := filepath.Join(t.TempDir(), "snapshot.db")
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(persist.WriterOptions{Interval: time.Hour, History: persist.HistoryOptions{Enabled: true}})
	for rv := 10; rv <= 13; rv++ {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
		u.SetNamespace("shop")
		u.SetName(fmt.Sprint("p", rv))
		u.SetResourceVersion(fmt.Sprint(rv))
		w.Upsert("prod", key, u)
		w.Checkpoint("prod", key, fmt.Sprint(rv))
		if err := w.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	// The index entry of the record at 12 says 9.
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		index := tx.Bucket([]byte("history")).Bucket([]byte("index"))
		c := index.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if k[0] == 'r' && bytes.Equal(v, binary.BigEndian.AppendUint64(nil, 12)) {
				return index.Put(bytes.Clone(k), binary.BigEndian.AppendUint64(nil, 9))
			}
		}
		return errors.New("no index entry at 12")
	})
	if err == nil {
		err = db.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	store, err = persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	m := &Manager{opts: Options{Snapshot: store}, logEpoch: "e", logBases: &logBases{}}
	m.logBases.loading("prod", sc, key)
	m.logBases.loaded("prod", sc, key, "13", 4)
	var got []uint64
	_, err = m.ChangesSince("prod", pods, 11, 13, func(at uint64, _ aggregate.Event) { got = append(got, at) })
	if !errors.Is(err, persist.ErrCorrupt) {
		t.Errorf("ChangesSince over a damaged index entry: %v, %v; want persist.ErrCorrupt", got, err)
	}
	if err := store.Verify(); !errors.Is(err, persist.ErrCorrupt) {
		t.Errorf("Verify: %v", err)
	}
}

// TestListedBase: a resource that the fleet did not load is watched cold, and the first
// lists of its informers are its base, as a load is: each scope's at the list's
// resourceVersion with the list's objects, known at the list's checkpoint, the
// resource's once every scope's is; a later list, or a resource that was loaded, is
// no base of this kind.
func TestListedBase(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	store, w := openLogged(t)
	fleet := aggregate.New(aggregate.Options{})
	m := &Manager{opts: Options{Snapshot: store}, logEpoch: "e", logBases: &logBases{}}
	s := &sink{fleet: fleet, cluster: "prod", snapshot: store, bases: m.logBases, writer: w}
	obj := func(ns, name, rv string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
		u.SetNamespace(ns)
		u.SetName(name)
		u.SetResourceVersion(rv)
		return u
	}
	stores := map[string]informer.Store{}
	for _, ns := range []string{"a", "b"} {
		stores[ns] = s.Store(informer.Scope{Resource: pods, Namespace: ns})
	}
	if !m.ChangeLogListed("prod", pods) || !m.ChangeLogScoped("prod", pods) {
		t.Fatal("pods watched cold, by namespace: not listed, or not scoped")
	}
	for _, o := range []*unstructured.Unstructured{obj("a", "x", "5"), obj("a", "y", "8")} {
		if err := stores["a"].Apply(o, true); err != nil {
			t.Fatal(err)
		}
	}
	stores["a"].(informer.Checkpointer).Checkpoint("9")
	if rv, n, _, ok := m.ChangeLogBase("prod", pods); rv != 0 || n != 2 || !ok {
		t.Errorf("a listed, b not: %d, %d, %v", rv, n, ok)
	}
	// b's list is empty; a's watch events and relists that follow change no base.
	stores["b"].(informer.Checkpointer).Checkpoint("10")
	if err := stores["a"].Apply(obj("a", "z", "11"), false); err != nil {
		t.Fatal(err)
	}
	stores["a"].(informer.Checkpointer).Checkpoint("11")
	rv, n, load, ok := m.ChangeLogBase("prod", pods)
	if rv != 10 || n != 2 || !ok {
		t.Errorf("both listed: %d, %d, %v; want 10, 2, true", rv, n, ok)
	}
	if got, want := scopeBases(m, pods), map[string]string{"a": "9/2", "b": "10/0"}; !maps.Equal(got, want) {
		t.Errorf("bases by namespace %v, want %v", got, want)
	}
	// The informers start again (the resource came back): a new base, of their lists.
	s.RemoveResource(pods)
	again := s.Store(informer.Scope{Resource: pods, Namespace: "a"})
	if _, _, l, _ := m.ChangeLogBase("prod", pods); l == load || !m.ChangeLogListed("prod", pods) {
		t.Errorf("the resource watched again: load %d (was %d), listed %v", l, load, m.ChangeLogListed("prod", pods))
	}
	if err := again.Apply(obj("a", "x", "12"), true); err != nil {
		t.Fatal(err)
	}
	again.(informer.Checkpointer).Checkpoint("12")
	if rv, n, _, ok := m.ChangeLogBase("prod", pods); rv != 12 || n != 1 || !ok {
		t.Errorf("listed again: %d, %d, %v", rv, n, ok)
	}

	// A loaded resource keeps its load's base when its informer starts.
	nodes := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	sc := informer.Scope{Resource: nodes}
	m.logBases.loading("prod", sc, persist.ResourceKey(sc.String()))
	m.logBases.loaded("prod", sc, persist.ResourceKey(sc.String()), "20", 3)
	st := s.Store(sc)
	if err := st.Apply(obj("", "n1", "21"), true); err != nil {
		t.Fatal(err)
	}
	st.(informer.Checkpointer).Checkpoint("21")
	if rv, n, _, ok := m.ChangeLogBase("prod", nodes); rv != 20 || n != 3 || !ok || m.ChangeLogListed("prod", nodes) {
		t.Errorf("a loaded resource: %d, %d, %v, listed %v", rv, n, ok, m.ChangeLogListed("prod", nodes))
	}
}

// scopeBases returns the bases of prod's gvr by namespace, as "rv/objects".
func scopeBases(m *Manager, gvr schema.GroupVersionResource) map[string]string {
	got := map[string]string{}
	m.ChangeLogScopeBases("prod", gvr, func(ns string, rv uint64, objects int) { got[ns] = fmt.Sprint(rv, "/", objects) })
	return got
}

// openLogged opens a new snapshot and a writer of it that keeps the change log and
// commits when flushed.
func openLogged(t *testing.T) (*persist.Store, *persist.Writer) {
	t.Helper()
	store, err := persist.Open(filepath.Join(t.TempDir(), "snapshot.db"), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store, store.NewWriter(persist.WriterOptions{Interval: time.Hour, History: persist.HistoryOptions{Enabled: true}})
}
