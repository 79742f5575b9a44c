package server

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// fakeLog is a change log of the pods of one cluster, prod unless cluster is set.
type fakeLog struct {
	epoch   string
	cluster string

	mu sync.Mutex
	// base and objects are what the fleet loaded of the pods; base 0 if nothing.
	base    uint64
	objects int
	// stale: what was loaded no longer stands for the log; loading: the snapshot is
	// being loaded (loaded, if not nil, is closed once it is).
	stale, loading bool
	loaded         chan struct{}
	// load is the number of the load (ChangeLogBase).
	load uint64
	// from is where the log's coverage starts: it holds every change after it, and
	// ChangesSince leaves out those at it, as the Manager does.
	from    uint64
	records []loggedChange
	// holds are the change logs of other replicas whose records of the cluster came
	// with it (ChangeLogHolds).
	holds []string
	// err, if not nil, is what ChangesSince fails with: a log that cannot be read.
	err error
}

var _ ChangeLogSource = (*logSource)(nil)

// logSource is a fakeSource with a change log.
type logSource struct {
	*fakeSource
	*fakeLog
}

func (l *fakeLog) ChangeLogEpoch() string { return l.epoch }

// loadedChan is closed: the fake fleet is loaded before its server starts.
var loadedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (l *fakeLog) SnapshotLoaded() <-chan struct{} {
	if l.loaded != nil {
		return l.loaded
	}
	return loadedChan
}

func (l *fakeLog) ChangeLogBase(cluster string, gvr schema.GroupVersionResource) (uint64, int, uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cluster != cmp.Or(l.cluster, prod) || gvr != podsGVR || l.base == 0 {
		return 0, 0, l.load, l.loading
	}
	return l.base, l.objects, l.load, !l.stale
}

func (l *fakeLog) ChangesSince(cluster string, gvr schema.GroupVersionResource, rv, upTo uint64, fn func(uint64, aggregate.Event)) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cluster != cmp.Or(l.cluster, prod) || gvr != podsGVR || rv < l.from {
		return false, errors.New("too old")
	}
	if l.err != nil {
		return false, l.err
	}
	for _, r := range l.records {
		if r.at >= rv && r.at <= upTo && r.at > l.from {
			fn(r.at, r.event)
		}
	}
	return rv > l.from, nil
}

func (l *fakeLog) ChangeLogHolds(cluster, logEpoch string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return cluster == cmp.Or(l.cluster, prod) && slices.Contains(l.holds, logEpoch)
}

// add appends a record at resourceVersion at.
func (l *fakeLog) add(at uint64, typ aggregate.EventType, obj *unstructured.Unstructured, vanished bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, loggedChange{at: at, event: aggregate.Event{Cluster: cmp.Or(l.cluster, prod), Resource: podsGVR, Type: typ, Object: obj, FinalStateUnknown: vanished}})
}

// newLogFixture starts a fleet of cluster prod whose pods are those that seed loads as
// from a snapshot (an initial list), and a server of it that resumes from log.
func newLogFixture(t *testing.T, log *fakeLog, seed ...*unstructured.Unstructured) *fixture {
	t.Helper()
	return newLogReplica(t, log, "", seed...)
}

// newLogReplica is newLogFixture of log's cluster, as the replica named replica ("" if
// not sharded).
func newLogReplica(t *testing.T, log *fakeLog, replica string, seed ...*unstructured.Unstructured) *fixture {
	t.Helper()
	return newSourceFixture(t, cmp.Or(log.cluster, prod), replica, func(src *fakeSource) Source { return logSource{src, log} }, seed...)
}

// newSourceFixture starts a fleet of cluster whose pods are those that seed loads as
// from a snapshot, and a server of it, of the Source that source makes of the fixture's
// (a change log with it), as the replica named replica.
func newSourceFixture(t *testing.T, cluster, replica string, source func(*fakeSource) Source, seed ...*unstructured.Unstructured) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fleet := aggregate.New(aggregate.Options{Codec: testCodec()})
	f := &fixture{t: t, ctx: ctx, fleet: fleet, src: &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}, ready: true}}
	st := clusterStatus(cluster, aggregate.PhaseSynced, false)
	st.Replica = replica
	f.src.setStatus(st)
	for _, obj := range seed {
		if err := fleet.ClusterStore(cluster, podsGVR).Apply(obj, true); err != nil {
			t.Fatal(err)
		}
	}
	fleet.ClusterStore(cluster, podsGVR).MarkSynced()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fleet.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	s, err := New(source(f.src), Options{Clock: clocktesting.NewFakePassiveClock(now), BookmarkInterval: 50 * time.Millisecond, Replica: replica})
	if err != nil {
		t.Fatal(err)
	}
	f.server = s
	f.http = httptest.NewServer(s.Handler())
	t.Cleanup(f.http.Close)
	t.Cleanup(s.stop)
	f.sync()
	return f
}

// events reads n events that are not bookmarks, as "TYPE name@resourceVersion in its
// cluster", and the cursor of the last.
func events(w *watcher, n int) (got []string, last string) {
	for range n {
		e := w.nextNot("BOOKMARK")
		got = append(got, e.Type+" "+e.Object.GetName()+"@"+e.Object.GetAnnotations()[ResourceVersionAnnotation])
		last = e.Object.GetResourceVersion()
	}
	return got, last
}

// TestWatchResumesAcrossARestart: a cursor of a run of the server resumes in the next
// run over the same change log, whether it is before the resourceVersion that the
// snapshot was loaded at (the changes in between are the log's), or after it (the
// changes after the last commit, lost in a crash, come again from the apiserver); a
// cursor that the log does not reach back to, or of another log, gets 410.
func TestWatchResumesAcrossARestart(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &fakeLog{epoch: "snap", from: 9}

	// The first run: a and b added, a modified; the log holds them all.
	run1 := newLogFixture(t, log)
	w := run1.watch(pods + "?watch=1&resourceVersion=0")
	changes := []struct {
		typ aggregate.EventType
		obj *unstructured.Unstructured
	}{
		{aggregate.Added, pod("default", "a", "10", web)},
		{aggregate.Added, pod("default", "b", "11", web)},
		{aggregate.Updated, pod("default", "a", "12", api)},
	}
	var cursors []string
	for _, c := range changes {
		run1.apply(prod, podsGVR, c.obj)
		log.add(resourceVersionOf(c.obj), c.typ, c.obj, false)
		_, last := events(w, 1)
		cursors = append(cursors, last)
	}
	// b modified at 13 was sent, but not committed: the run is killed.
	run1.apply(prod, podsGVR, pod("default", "b", "13", api))
	_, at13 := events(w, 1)
	w.stop()

	// The second run loads a@12 and b@11, stored at 12, and its informer receives b@13
	// again, then the changes after.
	log.mu.Lock()
	log.base, log.objects = 12, 2
	log.mu.Unlock()
	run2 := newLogFixture(t, log, pod("default", "a", "12", api), pod("default", "b", "11", web))
	var l itemList
	run2.getOK(pods, &l)
	run2.apply(prod, podsGVR, pod("default", "b", "13", api))
	run2.apply(prod, podsGVR, pod("default", "c", "14", nil))
	run2.remove(prod, podsGVR, pod("default", "a", "15", api))
	after := []string{"MODIFIED b@13", "ADDED c@14", "DELETED a@15"}

	for _, tc := range []struct {
		name, rv string
		want     []string
	}{
		{"after a added", cursors[0], append([]string{"ADDED b@11", "MODIFIED a@12"}, after...)},
		{"after b added", cursors[1], append([]string{"MODIFIED a@12"}, after...)},
		{"at the base", cursors[2], after},
		{"after the last commit", at13, after[1:]},
		{"the second run's list", l.Metadata.ResourceVersion, after},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(tc.rv))
			got, _ := events(w, len(tc.want))
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %q,\nwant %q", got, tc.want)
			}
			w.none(100 * time.Millisecond)
		})
	}

	// A cursor in the middle of what the log sent resumes in this run too.
	w = run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(cursors[0]))
	_, mid := events(w, 1)
	w.stop()
	w = run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(mid))
	if got, _ := events(w, 4); !slices.Equal(got, append([]string{"MODIFIED a@12"}, after...)) {
		t.Errorf("from the middle of the log's changes: %q", got)
	}

	log.mu.Lock()
	log.from = 11
	log.mu.Unlock()
	other := cursor{epoch: "other" + logEpochSep + "x", positions: map[string]position{prod: {rv: 12}}}.String()
	for name, rv := range map[string]string{"older than the log": cursors[0], "of another log": other} {
		if st := run2.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(rv)).status(t, http.StatusGone); st.Reason != metav1.StatusReasonExpired {
			t.Errorf("%s: Status %+v", name, st)
		}
	}

	// A log that cannot be read (persist.ErrCorrupt: a damaged record, or an index
	// entry that does not match its record) gets 410 too, never a stream without what
	// it could not read.
	log.mu.Lock()
	log.from, log.err = 9, errors.New("persist: snapshot is corrupt: change log index: entry does not match record 5")
	log.mu.Unlock()
	st := run2.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(cursors[1])).status(t, http.StatusGone)
	if st.Reason != metav1.StatusReasonExpired || !strings.Contains(st.Message, "does not match record 5") {
		t.Errorf("a damaged log: Status %+v", st)
	}
}

// TestWatchResumeWhereTheLogStarts: the log's coverage starts at the resourceVersion of
// a list, whose records it does not vouch for (persist.Store.ChangesSince), so a cursor
// that counts changes of that list cannot be placed: it gets 410, never a stream that
// skips changes after the list instead. A cursor after a watch event at the coverage's
// start resumes.
func TestWatchResumeWhereTheLogStarts(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &fakeLog{epoch: "snap", from: 20}

	// The first run receives a list at 20 (in key order, a at the list's
	// resourceVersion), then a modified at 21 and d added at 22.
	run1 := newLogFixture(t, log)
	w := run1.watch(pods + "?watch=1&resourceVersion=0")
	changes := []struct {
		at  uint64
		typ aggregate.EventType
		obj *unstructured.Unstructured
	}{
		{20, aggregate.Added, pod("default", "a", "20", web)},
		{20, aggregate.Added, pod("default", "b", "15", web)},
		{20, aggregate.Added, pod("default", "c", "16", web)},
		{21, aggregate.Updated, pod("default", "a", "21", api)},
		{22, aggregate.Added, pod("default", "d", "22", web)},
	}
	var cursors []string
	for _, c := range changes {
		run1.apply(prod, podsGVR, c.obj)
		log.add(c.at, c.typ, c.obj, false)
		_, last := events(w, 1)
		cursors = append(cursors, last)
	}
	w.stop()

	log.mu.Lock()
	log.base, log.objects = 22, 4
	log.mu.Unlock()
	run2 := newLogFixture(t, log, pod("default", "a", "21", api), pod("default", "b", "15", web), pod("default", "c", "16", web), pod("default", "d", "22", web))
	run2.apply(prod, podsGVR, pod("default", "e", "23", nil))

	for _, tc := range []struct {
		name, rv string
		from     uint64
		want     []string // nil: 410
	}{
		{"after b, in the list", cursors[1], 20, nil},
		{"after the list", cursors[2], 20, nil},
		// The retention dropped the records up to a's at 21.
		{"after a watch event at the coverage's start", cursors[3], 21, []string{"ADDED d@22", "ADDED e@23"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.mu.Lock()
			log.from = tc.from
			log.mu.Unlock()
			rv := url.QueryEscape(tc.rv)
			if tc.want == nil {
				// A stream that the server took ends in a second, with what it sent.
				if st := run2.get(pods+"?watch=1&timeoutSeconds=1&resourceVersion="+rv).status(t, http.StatusGone); st.Reason != metav1.StatusReasonExpired {
					t.Errorf("Status %+v", st)
				}
				return
			}
			w := run2.watch(pods + "?watch=1&resourceVersion=" + rv)
			got, _ := events(w, len(tc.want))
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %q,\nwant %q", got, tc.want)
			}
			w.none(100 * time.Millisecond)
		})
	}
}

// TestWatchResumeNeedsTheLog: without a change log, or for a cluster that the run did
// not load from it, a cursor of an earlier run gets 410, as before.
func TestWatchResumeNeedsTheLog(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &fakeLog{epoch: "snap"}
	run1 := newLogFixture(t, log)
	run1.apply(prod, podsGVR, pod("default", "a", "10", web))
	run1.sync()
	var l itemList
	run1.getOK(pods, &l)

	run2 := newLogFixture(t, log) // prod was not loaded from the log
	st := run2.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)).status(t, http.StatusGone)
	if !strings.Contains(st.Message, "earlier run") || !strings.Contains(st.Message, "did not load the cluster's pods") {
		t.Errorf("Status %+v", st)
	}
	// A position among the objects that an earlier run loaded counts them in key order,
	// and names neither their base nor which of them the client has.
	log.mu.Lock()
	log.base, log.objects = 10, 1
	log.mu.Unlock()
	run3 := newLogFixture(t, log, pod("default", "a", "10", web))
	loading := cursor{epoch: "snap" + logEpochSep + "run1", positions: map[string]position{prod: {n: 1}}}.String()
	st = run3.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(loading)).status(t, http.StatusGone)
	if !strings.Contains(st.Message, "among the objects that it loaded") {
		t.Errorf("a position among an earlier run's loaded objects: Status %+v", st)
	}
	plain := newFixture(t, nil)
	plain.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)).status(t, http.StatusGone)
}

// TestSettledCursor: once every object loaded from the snapshot came, the cursors say
// the base, which a later run places in the log; before, the position is of this run.
func TestSettledCursor(t *testing.T) {
	log := &fakeLog{epoch: "snap", base: 12, objects: 2}
	f := newLogFixture(t, log, pod("default", "a", "12", api), pod("default", "b", "11", web))
	rc := f.server.cache.lookup(podsGVR)
	rc.mu.RLock()
	c := rc.cursorLocked(f.server.cache, scope{cluster: allClusters})
	raw := rc.positions[prod]
	rc.mu.RUnlock()
	if want := (position{rv: 12}); c.positions[prod] != want || raw != (position{n: 2}) {
		t.Errorf("cursor %v (history at %v), want %v", c.positions[prod], raw, want)
	}
	rc.mu.RLock()
	half := rc.settledLocked(prod, position{n: 1})
	rc.mu.RUnlock()
	if p := half; p != (position{n: 1}) {
		t.Errorf("half-way: %v", p)
	}
	// The cluster's identity changed: its objects go, and the settled cursor of this
	// run still sees them go, in the next generation of the cluster's positions, whatever
	// their resourceVersions.
	log.mu.Lock()
	log.stale = true
	log.mu.Unlock()
	w := f.watch(clusterPath(allClusters) + "/api/v1/pods?watch=1&resourceVersion=" + url.QueryEscape(c.String()))
	if err := f.fleet.ClusterStore(prod, podsGVR).Delete(pod("default", "b", "11", web), true); err != nil {
		t.Fatal(err)
	}
	if got, _ := events(w, 1); !slices.Equal(got, []string{"DELETED b@11"}) {
		t.Errorf("after the cluster's identity changed: %q", got)
	}
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if p := rc.positions[prod]; p != (position{gen: 1, n: 1}) {
		t.Errorf("after a deletion found by a relist: %v", p)
	}
}

// TestWatchPastTheBaseSeesTheClusterReplaced: a watch resumed from a cursor of an
// earlier run past the base (changes that the restarted informer was to receive again)
// still gets the deletions of the loaded objects and the objects of a cluster of
// another identity, which it would skip if they were placed after the base; and a
// cursor after them is placed by a later run in the log of that cluster, from its own
// resourceVersions.
func TestWatchPastTheBaseSeesTheClusterReplaced(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &fakeLog{epoch: "snap", from: 9}
	run1 := newLogFixture(t, log)
	w := run1.watch(pods + "?watch=1&resourceVersion=0")
	for _, obj := range []*unstructured.Unstructured{pod("default", "a", "10", web), pod("default", "b", "11", web), pod("default", "a", "12", api)} {
		run1.apply(prod, podsGVR, obj)
		log.add(resourceVersionOf(obj), aggregate.Added, obj, false)
		events(w, 1)
	}
	// b@13 was sent, not committed: the run is killed.
	run1.apply(prod, podsGVR, pod("default", "b", "13", api))
	_, at13 := events(w, 1)
	w.stop()

	log.mu.Lock()
	log.base, log.objects, log.load = 12, 2, 1
	log.mu.Unlock()
	run2 := newLogFixture(t, log, pod("default", "a", "12", api), pod("default", "b", "11", web))
	w = run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(at13))
	w.none(100 * time.Millisecond)
	// Before the informer receives b@13 again, the cluster is found to be another one
	// (a new kube-system UID): its loaded objects go, and it lists cold, with
	// resourceVersions of its own.
	log.mu.Lock()
	log.stale = true
	log.mu.Unlock()
	run2.fleet.RemoveCluster(prod)
	store := run2.fleet.ClusterStore(prod, podsGVR)
	for _, obj := range []*unstructured.Unstructured{pod("default", "x", "3", web), pod("default", "a", "2", nil)} {
		if err := store.Apply(obj, true); err != nil {
			t.Fatal(err)
		}
	}
	store.MarkSynced()
	run2.apply(prod, podsGVR, pod("default", "x", "5", api))
	want := []string{"DELETED a@12", "DELETED b@11", "ADDED x@3", "ADDED a@2", "MODIFIED x@5"}
	got, last := events(w, len(want))
	// The fleet removes a cluster's objects in no particular order.
	slices.Sort(got[:2])
	if !slices.Equal(got, want) {
		t.Errorf("events %q,\nwant %q", got, want)
	}
	w.none(100 * time.Millisecond)
	w.stop()
	c, err := parseCursor(last)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.positions[prod]; p.rv != 5 {
		t.Errorf("the cursor after x@5 holds %v, not the new cluster's resourceVersion", p)
	}

	// A later run, loaded from the new cluster's log at 6, places that cursor there.
	log.mu.Lock()
	log.records, log.from = nil, 1
	log.stale, log.base, log.objects, log.load = false, 6, 2, 2
	log.mu.Unlock()
	log.add(6, aggregate.Added, pod("default", "y", "6", nil), false)
	run3 := newLogFixture(t, log, pod("default", "a", "2", nil), pod("default", "x", "5", api), pod("default", "y", "6", nil))
	w = run3.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(last))
	run3.apply(prod, podsGVR, pod("default", "y", "7", web))
	want = []string{"ADDED y@6", "MODIFIED y@7"}
	if got, _ := events(w, len(want)); !slices.Equal(got, want) {
		t.Errorf("a later run: events %q,\nwant %q", got, want)
	}
	w.none(100 * time.Millisecond)
}

// TestChangesAfter places positions among the changes that the log holds, with a
// relist (objects out of resourceVersion order, deletions with their last known
// resourceVersion) after a watch event.
func TestChangesAfter(t *testing.T) {
	obj := func(name, rv string) *unstructured.Unstructured { return pod("default", name, rv, nil) }
	logged := []loggedChange{
		{at: 100, event: aggregate.Event{Type: aggregate.Updated, Object: obj("w", "100")}},
		// A relist at 200: p2 is at the list's resourceVersion.
		{at: 200, event: aggregate.Event{Type: aggregate.Updated, Object: obj("p1", "150")}},
		{at: 200, event: aggregate.Event{Type: aggregate.Added, Object: obj("p2", "200")}},
		{at: 200, event: aggregate.Event{Type: aggregate.Updated, Object: obj("p3", "120")}},
		{at: 200, event: aggregate.Event{Type: aggregate.Deleted, Object: obj("gone", "90"), FinalStateUnknown: true}},
		{at: 210, event: aggregate.Event{Type: aggregate.Deleted, Object: obj("p1", "210")}},
	}
	// Where the history of the run that saw them put each, from (100, 0) on.
	pos := position{rv: 100}
	var positions []position
	for _, c := range logged[1:] {
		pos = pos.next(c.event.Object.(*unstructured.Unstructured).GetResourceVersion())
		positions = append(positions, pos)
	}
	names := func(es []aggregate.Event) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Object.(*unstructured.Unstructured).GetName())
		}
		return out
	}
	all := []string{"p1", "p2", "p3", "gone", "p1"}
	for i, p := range append([]position{{rv: 100}}, positions...) {
		t.Run(p.String(), func(t *testing.T) {
			var since []loggedChange
			for _, c := range logged {
				if c.at >= p.rv {
					since = append(since, c)
				}
			}
			got, err := changesAfter(p, since, true)
			if err != nil || !slices.Equal(names(got), all[i:]) {
				t.Errorf("after %s: %q, %v; want %q", p, names(got), err, all[i:])
			}
		})
	}
	if _, err := changesAfter(position{rv: 210, n: 1}, logged[5:], true); err == nil {
		t.Error("a position past the log's changes: no error")
	}
	if got, err := changesAfter(position{rv: 300}, nil, true); err != nil || len(got) != 0 {
		t.Errorf("after the log: %v, %v", got, err)
	}

	// Where the log's coverage starts at the position's resourceVersion, without the
	// changes at it.
	for _, tc := range []struct {
		p    position
		want []string // nil: refused
	}{
		// After the watch event at 100: the changes after 100.
		{position{rv: 100}, all},
		// After p1 of the list at 200, which is among the changes after 150.
		{positions[0], all[1:]},
		// n counts changes of the list at 200, which the log does not give.
		{positions[2], nil},
		{positions[3], nil},
	} {
		var after []loggedChange
		for _, c := range logged {
			if c.at > tc.p.rv {
				after = append(after, c)
			}
		}
		got, err := changesAfter(tc.p, after, false)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("after %s, without the changes at %d: %q, want an error", tc.p, tc.p.rv, names(got))
		case tc.want != nil && (err != nil || !slices.Equal(names(got), tc.want)):
			t.Errorf("after %s, without the changes at %d: %q, %v; want %q", tc.p, tc.p.rv, names(got), err, tc.want)
		}
	}
}

// TestFanOutWatchResumesAcrossARestart: in a sharded fleet, a merged cursor handed out
// before a replica restarted resumes after it, through that replica or another one:
// the restarted replica's part from its change log, up to where its snapshot was
// loaded, then from its history.
func TestFanOutWatchResumesAcrossARestart(t *testing.T) {
	all := clusterPath(allClusters) + "/api/v1/pods"
	log := &fakeLog{epoch: "snap", cluster: "far", from: 400}
	far := []*unstructured.Unstructured{pod("default", "far-1", "401", web), pod("default", "far-2", "402", web)}
	for _, p := range far {
		log.add(resourceVersionOf(p), aggregate.Added, p, false)
	}
	log.base, log.objects = 402, 2
	// replicas starts fleetwatch-1, which watches far, from the log, and points
	// fleetwatch-0 (local), which watches the fixture's clusters, at it and back.
	replicas := func(local *fixture, seed ...*unstructured.Unstructured) *fixture {
		peer := newLogReplica(t, log, "fleetwatch-1", seed...)
		for _, cl := range []string{prod, staging, edge} {
			peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
		}
		local.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})
		return peer
	}
	local := newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	peer := replicas(local, far...)
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(l.GetResourceVersion()))
	far3 := pod("default", "far-3", "403", web)
	peer.apply("far", podsGVR, far3)
	log.add(403, aggregate.Added, far3, false)
	_, last := events(w, 1)
	w.stop()

	// far-4 is committed, then fleetwatch-1 restarts from its snapshot (far-1 to far-4,
	// at 404), and its informer receives far-5.
	far4 := pod("default", "far-4", "404", web)
	peer.apply("far", podsGVR, far4)
	log.add(404, aggregate.Added, far4, false)
	log.mu.Lock()
	log.base, log.objects = 404, 4
	log.mu.Unlock()
	peer = replicas(local, append(far, far3, far4)...)
	peer.apply("far", podsGVR, pod("default", "far-5", "405", web))
	local.apply(prod, podsGVR, pod("default", "web-9", "109", web))
	peer.sync()
	local.sync()

	want := []string{"ADDED far-4@404", "ADDED far-5@405", "ADDED web-9@109"}
	for name, through := range map[string]*fixture{"through fleetwatch-0": local, "through the restarted fleetwatch-1": peer} {
		t.Run(name, func(t *testing.T) {
			w := through.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(last))
			got, _ := events(w, len(want))
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
			w.none(200 * time.Millisecond)
		})
	}
}

// TestFanOutWatchResumesAcrossAHandover: a fan-out watch that saw cluster far through
// its owner fleetwatch-1 resumes, through any replica, after far moved to fleetwatch-2
// by a warm handover that brought far's change log: fleetwatch-2 places
// fleetwatch-1's position of far in the log, and sends the change that the client had
// not seen before the move and those after it, once each. Moved cold (fleetwatch-2's
// log does not hold fleetwatch-1's records), the watch gets 410 Gone naming far.
func TestFanOutWatchResumesAcrossAHandover(t *testing.T) {
	all := clusterPath(allClusters) + "/api/v1/pods"
	logA := &fakeLog{epoch: "snapA", cluster: "far", from: 400}
	far := []*unstructured.Unstructured{pod("default", "far-1", "401", web), pod("default", "far-2", "402", web)}
	for _, p := range far {
		logA.add(resourceVersionOf(p), aggregate.Added, p, false)
	}
	logA.base, logA.objects = 402, 2
	local := newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	a := newLogReplica(t, logA, "fleetwatch-1", far...)
	for _, cl := range []string{prod, staging, edge} {
		a.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	local.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: a.http.URL})
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(l.GetResourceVersion()))
	far3 := pod("default", "far-3", "403", web)
	a.apply("far", podsGVR, far3)
	logA.add(403, aggregate.Added, far3, false)
	_, last := events(w, 1)
	w.stop()

	// far-4 is committed on fleetwatch-1, which hands far over with its log (far-1 to
	// far-4, at 404) to fleetwatch-2, whose informer then receives far-5.
	far4 := pod("default", "far-4", "404", web)
	a.apply("far", podsGVR, far4)
	logA.add(404, aggregate.Added, far4, false)
	logB := &fakeLog{epoch: "snapB", cluster: "far", from: logA.from, records: slices.Clone(logA.records), holds: []string{"snapA"}}
	logB.base, logB.objects = 404, 4
	b := newLogReplica(t, logB, "fleetwatch-2", append(far, far3, far4)...)
	moved := aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-2", ReplicaAddress: b.http.URL}
	local.src.setStatus(moved)
	a.src.setStatus(moved)
	for _, cl := range []string{prod, staging, edge} {
		b.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	b.apply("far", podsGVR, pod("default", "far-5", "405", web))
	local.apply(prod, podsGVR, pod("default", "web-9", "109", web))
	b.sync()
	local.sync()

	want := []string{"ADDED far-4@404", "ADDED far-5@405", "ADDED web-9@109"}
	for name, through := range map[string]*fixture{"through fleetwatch-0": local, "through the old owner": a, "through the new owner": b} {
		t.Run(name, func(t *testing.T) {
			w := through.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(last))
			got, _ := events(w, len(want))
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
			w.none(200 * time.Millisecond)
		})
	}

	logB.mu.Lock()
	logB.holds = nil
	logB.mu.Unlock()
	t.Run("moved cold", func(t *testing.T) {
		r := local.get(all + "?watch=true&timeoutSeconds=2&resourceVersion=" + url.QueryEscape(last))
		r.status(t, http.StatusGone)
		if !strings.Contains(string(r.body), `\"far\"`) {
			t.Errorf("the 410 does not name the cluster that moved: %s", r.body)
		}
	})
}

// watchesThrough watches path from cursor through each of replicas, in a subtest named
// prefix and its name, and fails unless each gets exactly want, in order, and nothing
// more.
func watchesThrough(t *testing.T, replicas map[string]*fixture, prefix, path, cursor string, want []string) {
	t.Helper()
	for name, through := range replicas {
		t.Run(prefix+name, func(t *testing.T) {
			w := through.watch(path + "?watch=true&resourceVersion=" + url.QueryEscape(cursor))
			if got, _ := events(w, len(want)); !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
			w.none(200 * time.Millisecond)
		})
	}
}

// farOwners moves cluster far among the replicas of a sharded fleet of fixtures, whose
// fleetwatch-0, local, owns the fixture's own clusters.
type farOwners struct {
	local    *fixture
	replicas []*fixture
}

// own makes r, as id, the owner of far in every replica met so far, and local that of
// the fixture's clusters in r.
func (o *farOwners) own(r *fixture, id string) {
	for _, cl := range []string{prod, staging, edge} {
		r.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: o.local.http.URL})
	}
	if len(o.replicas) == 0 {
		o.replicas = []*fixture{o.local}
	}
	if !slices.Contains(o.replicas, r) {
		o.replicas = append(o.replicas, r)
	}
	for _, other := range o.replicas {
		if other != r {
			other.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: id, ReplicaAddress: r.http.URL})
		}
	}
	st := clusterStatus("far", aggregate.PhaseSynced, false)
	st.Replica = id
	r.src.setStatus(st)
}

// TestWatchResumeWaitsForTheLoad: a cursor of an earlier run that comes while the
// snapshot loads waits for the load, rather than getting 410 for clusters that are not
// loaded yet.
func TestWatchResumeWaitsForTheLoad(t *testing.T) {
	log := &fakeLog{epoch: "snap", from: 9, loading: true, loaded: make(chan struct{})}
	log.add(10, aggregate.Added, pod("default", "a", "10", web), false)
	log.add(11, aggregate.Added, pod("default", "b", "11", web), false)
	log.add(12, aggregate.Updated, pod("default", "a", "12", api), false)
	f := newLogFixture(t, log, pod("default", "a", "12", api), pod("default", "b", "11", web))
	earlier := cursor{epoch: "snap" + logEpochSep + "earlier", positions: map[string]position{prod: {rv: 10}}}
	go func() {
		time.Sleep(100 * time.Millisecond)
		log.mu.Lock()
		log.loading, log.base, log.objects = false, 12, 2
		log.mu.Unlock()
		close(log.loaded)
	}()
	start := time.Now()
	w := f.watch(clusterPath(allClusters) + "/api/v1/pods?watch=1&resourceVersion=" + url.QueryEscape(earlier.String()))
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("the watch started after %v, before the load ended", waited)
	}
	if got, _ := events(w, 2); !slices.Equal(got, []string{"ADDED b@11", "MODIFIED a@12"}) {
		t.Errorf("events %q", got)
	}
}

// TestFanOutWatchResumesAfterTwoMoves: a fan-out watch resumes after cluster far moved
// from fleetwatch-1 to fleetwatch-2, where the client saw it change, and on to
// fleetwatch-3, each time warm with its change log: its cursor holds far in the parts of
// both earlier owners (fleetwatch-1 sent nothing since), and the newer position, of
// fleetwatch-2, is carried to fleetwatch-3, which holds both logs' records.
func TestFanOutWatchResumesAfterTwoMoves(t *testing.T) {
	all := clusterPath(allClusters) + "/api/v1/pods"
	logA := &fakeLog{epoch: "snapA", cluster: "far", from: 400}
	far := []*unstructured.Unstructured{pod("default", "far-1", "401", web), pod("default", "far-2", "402", web)}
	for _, p := range far {
		logA.add(resourceVersionOf(p), aggregate.Added, p, false)
	}
	logA.base, logA.objects = 402, 2
	local := newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	owner := (&farOwners{local: local}).own
	a := newLogReplica(t, logA, "fleetwatch-1", far...)
	owner(a, "fleetwatch-1")
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(l.GetResourceVersion()))
	add := func(r *fixture, log *fakeLog, name, rv string) *unstructured.Unstructured {
		p := pod("default", name, rv, web)
		r.apply("far", podsGVR, p)
		log.add(resourceVersionOf(p), aggregate.Added, p, false)
		far = append(far, p)
		return p
	}
	add(a, logA, "far-3", "403")
	_, last := events(w, 1)
	w.stop()

	// far-4 is committed on fleetwatch-1, which hands far over to fleetwatch-2.
	add(a, logA, "far-4", "404")
	logB := &fakeLog{epoch: "snapB", cluster: "far", from: logA.from, records: slices.Clone(logA.records), holds: []string{"snapA"}}
	logB.base, logB.objects = 404, 4
	b := newLogReplica(t, logB, "fleetwatch-2", far...)
	owner(b, "fleetwatch-2")
	add(b, logB, "far-5", "405")
	b.sync()
	w = local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(last))
	got, last := events(w, 2)
	if want := []string{"ADDED far-4@404", "ADDED far-5@405"}; !slices.Equal(got, want) {
		t.Fatalf("after the first move: %q, want %q", got, want)
	}
	w.stop()
	c, err := parseCursor(last)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"fleetwatch-1", "fleetwatch-2"} {
		if p, _ := parseCursor(c.peers[id]); p.positions["far"] == (position{}) {
			t.Fatalf("the part of %s holds no position of far: %s", id, c.peers[id])
		}
	}

	// far-6 is committed on fleetwatch-2, which hands far over to fleetwatch-3 with
	// its log, which holds fleetwatch-1's records too.
	add(b, logB, "far-6", "406")
	logC := &fakeLog{epoch: "snapC", cluster: "far", from: logB.from, records: slices.Clone(logB.records), holds: []string{"snapB", "snapA"}}
	logC.base, logC.objects = 406, 6
	cr := newLogReplica(t, logC, "fleetwatch-3", far...)
	owner(cr, "fleetwatch-3")
	cr.apply("far", podsGVR, pod("default", "far-7", "407", web))
	cr.sync()
	local.sync()

	want := []string{"ADDED far-6@406", "ADDED far-7@407"}
	watchesThrough(t, map[string]*fixture{"through fleetwatch-0": local, "through the first owner": a, "through the last owner": cr}, "", all, last, want)
}

// TestFanOutWatchResumesAfterComingBack: cluster far moves from fleetwatch-1 to
// fleetwatch-2, where the client sees it change, and back to fleetwatch-1 (A to B to
// A), each time warm with its change log. fleetwatch-1 loads far's objects again, in
// key order, where far-1 changed last: placed after the positions of far's first stay
// there, they would come again to a watch resumed from fleetwatch-2's position, which
// is after all of them. They take a new generation of far's positions, as a first load
// does, and the watch gets what changed after the client's position only: through any
// replica, from the merged cursor, and from far's own resourceVersion.
func TestFanOutWatchResumesAfterComingBack(t *testing.T) {
	all := clusterPath(allClusters) + "/api/v1/pods"
	logA := &fakeLog{epoch: "snapA", cluster: "far", from: 400, load: 1}
	far := map[string]*unstructured.Unstructured{}
	add := func(r *fixture, log *fakeLog, name, rv string, typ aggregate.EventType) {
		p := pod("default", name, rv, web)
		r.apply("far", podsGVR, p)
		log.add(resourceVersionOf(p), typ, p, false)
		far[name] = p
	}
	seed := func() []*unstructured.Unstructured {
		return slices.SortedFunc(maps.Values(far), func(a, b *unstructured.Unstructured) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	for _, p := range []*unstructured.Unstructured{pod("default", "far-1", "401", web), pod("default", "far-2", "402", web)} {
		logA.add(resourceVersionOf(p), aggregate.Added, p, false)
		far[p.GetName()] = p
	}
	logA.base, logA.objects = 402, 2
	local := newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	owner := (&farOwners{local: local}).own
	a := newLogReplica(t, logA, "fleetwatch-1", seed()...)
	owner(a, "fleetwatch-1")
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(l.GetResourceVersion()))
	add(a, logA, "far-3", "403", aggregate.Added)
	_, last := events(w, 1)
	w.stop()
	beforeMoves := last

	// far-4 is committed on fleetwatch-1, which hands far over to fleetwatch-2, where
	// far-5 is added and far-1 changes.
	add(a, logA, "far-4", "404", aggregate.Added)
	logB := &fakeLog{epoch: "snapB", cluster: "far", from: logA.from, records: slices.Clone(logA.records), holds: []string{"snapA"}, load: 1}
	logB.base, logB.objects = 404, 4
	b := newLogReplica(t, logB, "fleetwatch-2", seed()...)
	a.fleet.MoveCluster("far")
	logA.mu.Lock()
	logA.stale = true
	logA.mu.Unlock()
	a.sync()
	// far's objects leave fleetwatch-1's view without a watch event: fleetwatch-2's
	// part of a fleet watch goes on with its changes.
	rc := a.server.cache.lookup(podsGVR)
	rc.mu.RLock()
	for _, e := range rc.readLocked(rc.firstSeqLocked(), len(rc.ring), nil) {
		if e.cluster == "far" && e.typ == watch.Deleted {
			t.Errorf("fleetwatch-1's history has far's %s %v as it left", e.typ, e.pos)
		}
	}
	if p, n := rc.positions["far"], rc.clusters["far"]; p != (position{rv: 404}) || n != nil {
		t.Errorf("far stands at %v in fleetwatch-1's history with %v, want 404 without objects", p, n)
	}
	rc.mu.RUnlock()
	owner(b, "fleetwatch-2")
	add(b, logB, "far-5", "405", aggregate.Added)
	add(b, logB, "far-1", "406", aggregate.Updated)
	b.sync()
	w = local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(last))
	got, last := events(w, 3)
	if want := []string{"ADDED far-4@404", "ADDED far-5@405", "MODIFIED far-1@406"}; !slices.Equal(got, want) {
		t.Fatalf("after the first move: %q, want %q", got, want)
	}
	w.stop()

	// fleetwatch-2 hands far back to fleetwatch-1 with its log: fleetwatch-1 loads
	// far's five objects again, in key order (far-1, the newest, first), and its
	// informer then receives far-6.
	logA.mu.Lock()
	logA.records = slices.Clone(logB.records)
	logA.holds = []string{"snapB"}
	logA.base, logA.objects, logA.load, logA.stale = 406, 5, 2, false
	logA.mu.Unlock()
	for _, p := range seed() {
		if err := a.fleet.ClusterStore("far", podsGVR).Apply(p, true); err != nil {
			t.Fatal(err)
		}
	}
	a.fleet.ClusterStore("far", podsGVR).MarkSynced()
	owner(a, "fleetwatch-1")
	add(a, logA, "far-6", "407", aggregate.Added)
	a.sync()
	b.sync()
	local.sync()

	want := []string{"ADDED far-6@407"}
	replicas := map[string]*fixture{"through fleetwatch-0": local, "through the owner": a, "through the replica it left": b}
	watchesThrough(t, replicas, "", all, last, want)
	// A cursor of before the first move, whose position of far is of fleetwatch-1's
	// first stay (an older generation there): the change log places it, as one of an
	// earlier run, rather than the history, where far's objects went and came again.
	all4 := []string{"ADDED far-4@404", "ADDED far-5@405", "MODIFIED far-1@406", "ADDED far-6@407"}
	watchesThrough(t, replicas, "from before the moves, ", all, beforeMoves, all4)
	t.Run("from far's own resourceVersion", func(t *testing.T) {
		w := a.watch(clusterPath("far") + "/api/v1/pods?watch=true&resourceVersion=406")
		got, _ := events(w, len(want))
		if !slices.Equal(got, want) {
			t.Errorf("events %q, want %q", got, want)
		}
		w.none(200 * time.Millisecond)
	})
	t.Run("a list at far's own resourceVersion, exactly", func(t *testing.T) {
		a.getOK(clusterPath("far")+"/api/v1/pods?resourceVersionMatch=Exact&resourceVersion=407", &l)
		if len(l.Items) != 6 {
			t.Errorf("%d pods, want 6", len(l.Items))
		}
	})
	// The cursor that fleetwatch-1 hands out places far in the new generation.
	a.getOK(all, &l)
	c, err := parseCursor(l.GetResourceVersion())
	if err != nil {
		t.Fatal(err)
	}
	if p := c.positions["far"]; p != (position{gen: 1, rv: 407}) {
		t.Errorf("far's position in fleetwatch-1's list: %v, want 407~1", p)
	}
}

// TestPlacedBeforeLeaving checks the mark of where a cluster stood when its objects
// went without a watch event: a position up to the last change before is placed in the
// change log, one that counts the deletions is not, and neither is any once the
// cluster was emptied so twice in the same generation.
func TestPlacedBeforeLeaving(t *testing.T) {
	rc := newResourceCache(podsGVR, 100, nil)
	rc.log = &fakeLog{epoch: "snap"}
	apply := func(typ aggregate.EventType, name, rv string, vanished bool) {
		rc.apply(aggregate.Event{Cluster: prod, Resource: podsGVR, Type: typ, Object: pod("default", name, rv, web), FinalStateUnknown: vanished})
	}
	placed := func(p position) bool {
		rc.mu.RLock()
		defer rc.mu.RUnlock()
		return rc.placedBeforeLeaving(prod, p)
	}
	apply(aggregate.Added, "a", "10", false)
	apply(aggregate.Added, "b", "11", false)
	apply(aggregate.Deleted, "a", "10", true) // a relist's, before the cluster left
	if placed(position{rv: 11}) {
		t.Error("placed before the cluster was emptied")
	}
	apply(aggregate.Deleted, "b", "11", true)
	for _, tc := range []struct {
		p    position
		want bool
	}{
		{position{rv: 10}, true},
		{position{rv: 11}, true},
		{position{rv: 11, n: 1}, false}, // counts a deletion that no watch saw
		{position{gen: 1, rv: 11}, false},
	} {
		if got := placed(tc.p); got != tc.want {
			t.Errorf("placedBeforeLeaving(%v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	// Back cold, in the same generation, and emptied again: the log does not count
	// the deletions in between.
	apply(aggregate.Added, "c", "12", false)
	apply(aggregate.Deleted, "c", "12", true)
	if placed(position{rv: 10}) || placed(position{rv: 12}) {
		t.Error("placed after the cluster was emptied twice")
	}
}
