package server

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// scopedLog is a change log of the pods of one cluster, prod unless cluster is set,
// which one informer per namespace watches: a log and a base per namespace
// (ScopedChangeLog).
type scopedLog struct {
	epoch   string
	cluster string
	// holds are the change logs of other replicas whose records of the cluster came
	// with it (ChangeLogHolds).
	holds []string

	mu sync.Mutex
	// namespaces are the namespaces' logs and bases, by name.
	namespaces map[string]*namespaceLog
	// load is the number of the load; stale: what was loaded no longer stands for the
	// log; listed: the bases are of this run's first lists (ListedChangeLog).
	load          uint64
	stale, listed bool
}

// namespaceLog is the log and the base of one namespace of a scopedLog.
type namespaceLog struct {
	// base and objects are what the fleet loaded of the namespace; base 0 if nothing.
	base    uint64
	objects int
	// from is where the namespace's coverage starts, as fakeLog's.
	from    uint64
	records []loggedChange
}

var (
	_ ScopedChangeLog = (*scopedSource)(nil)
	_ ListedChangeLog = (*scopedSource)(nil)
)

// scopedSource is a fakeSource with a scopedLog.
type scopedSource struct {
	*fakeSource
	*scopedLog
}

func (l *scopedLog) ChangeLogEpoch() string { return l.epoch }

func (l *scopedLog) SnapshotLoaded() <-chan struct{} { return loadedChan }

func (l *scopedLog) ChangeLogHolds(cluster, logEpoch string) bool {
	return cluster == cmp.Or(l.cluster, prod) && slices.Contains(l.holds, logEpoch)
}

func (l *scopedLog) ChangeLogListed(cluster string, gvr schema.GroupVersionResource) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.listed && l.ChangeLogScoped(cluster, gvr)
}

func (l *scopedLog) ChangeLogScoped(cluster string, gvr schema.GroupVersionResource) bool {
	return cluster == cmp.Or(l.cluster, prod) && gvr == podsGVR
}

func (l *scopedLog) ChangeLogBase(cluster string, gvr schema.GroupVersionResource) (uint64, int, uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rv uint64
	var objects, loaded int
	for _, n := range l.namespaces {
		if n.base > 0 {
			rv, objects, loaded = max(rv, n.base), objects+n.objects, loaded+1
		}
	}
	if !l.ChangeLogScoped(cluster, gvr) || loaded == 0 && !l.listed {
		return 0, 0, l.load, false
	}
	if loaded < len(l.namespaces) && l.listed {
		rv = 0 // not every list has ended
	}
	return rv, objects, l.load, !l.stale
}

func (l *scopedLog) ChangeLogScopeBases(cluster string, gvr schema.GroupVersionResource, fn func(string, uint64, int)) bool {
	_, _, _, ok := l.ChangeLogBase(cluster, gvr)
	if !ok {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for ns, n := range l.namespaces {
		if n.base > 0 || l.listed {
			fn(ns, n.base, n.objects)
		}
	}
	return true
}

func (l *scopedLog) ChangesSince(string, schema.GroupVersionResource, uint64, uint64, func(uint64, aggregate.Event)) (bool, error) {
	return false, fmt.Errorf("loaded in more than one scope")
}

func (l *scopedLog) ScopeChangesSince(cluster string, gvr schema.GroupVersionResource, namespace string, rv, upTo uint64, fn func(uint64, aggregate.Event)) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.namespaces[namespace]
	if !l.ChangeLogScoped(cluster, gvr) || n == nil || rv < n.from {
		return false, fmt.Errorf("too old")
	}
	for _, r := range n.records {
		if r.at >= rv && r.at <= upTo && r.at > n.from {
			fn(r.at, r.event)
		}
	}
	return rv > n.from, nil
}

// add appends a record at the object's resourceVersion to its namespace's log.
func (l *scopedLog) add(typ aggregate.EventType, obj *unstructured.Unstructured) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.namespaces[obj.GetNamespace()]
	if n == nil {
		n = &namespaceLog{from: 1}
		l.namespaces[obj.GetNamespace()] = n
	}
	n.records = append(n.records, loggedChange{at: resourceVersionOf(obj), event: aggregate.Event{Cluster: cmp.Or(l.cluster, prod), Resource: podsGVR, Type: typ, Object: obj}})
}

// byNamespace reads n events that are not bookmarks, as "TYPE name@resourceVersion in
// its cluster" by namespace, and the cursor of the last.
func byNamespace(w *watcher, n int) (got map[string][]string, last string) {
	got = map[string][]string{}
	for range n {
		e := w.nextNot("BOOKMARK")
		ns := e.Object.GetNamespace()
		got[ns] = append(got[ns], e.Type+" "+e.Object.GetName()+"@"+e.Object.GetAnnotations()[ResourceVersionAnnotation])
		last = e.Object.GetResourceVersion()
	}
	return got, last
}

// count returns how many events want holds.
func count(want map[string][]string) int {
	n := 0
	for _, e := range want {
		n += len(e)
	}
	return n
}

// TestWatchResumesByNamespace: a resource that one informer per namespace watches is
// resumed across a restart namespace by namespace. The informers' streams interleave
// in one order in the first run and in another in the second, which receives again
// the changes after the last commit, in each namespace after its own base: a cursor of
// the first run, wherever it stands, gets every change after it once, in each
// namespace in its order, and none again.
func TestWatchResumesByNamespace(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &scopedLog{epoch: "snap", namespaces: map[string]*namespaceLog{"a": {from: 9}, "b": {from: 9}}}
	source := func(src *fakeSource) Source { return scopedSource{src, log} }

	// The first run: b's informer is ahead of a's.
	run1 := newSourceFixture(t, prod, "", source)
	w := run1.watch(pods + "?watch=1&resourceVersion=0")
	first := []struct {
		typ aggregate.EventType
		obj *unstructured.Unstructured
	}{
		{aggregate.Added, pod("b", "y", "11", web)},
		{aggregate.Added, pod("a", "x", "10", web)},
		{aggregate.Updated, pod("a", "x", "12", api)},
		// Sent, not committed: the run is killed.
		{aggregate.Updated, pod("b", "y", "14", api)},
		{aggregate.Added, pod("a", "z", "13", nil)},
	}
	var cursors []string
	for i, c := range first {
		run1.apply(prod, podsGVR, c.obj)
		if i < 3 {
			log.add(c.typ, c.obj)
		}
		_, last := byNamespace(w, 1)
		cursors = append(cursors, last)
	}
	w.stop()
	c, err := parseCursor(cursors[4])
	if err != nil {
		t.Fatal(err)
	}
	if p := c.positions[prod]; p.scopes != "a=13,b=14" {
		t.Errorf("the last cursor of the first run holds %v, want the namespaces' positions a=13,b=14", p)
	}

	// The second run loads a at 12 and b at 11; its informers receive the changes
	// after them again, a's first, then the changes after.
	log.mu.Lock()
	log.namespaces["a"].base, log.namespaces["a"].objects = 12, 1
	log.namespaces["b"].base, log.namespaces["b"].objects = 11, 1
	log.load = 1
	log.mu.Unlock()
	run2 := newSourceFixture(t, prod, "", source, pod("a", "x", "12", api), pod("b", "y", "11", web))
	var l itemList
	run2.getOK(pods, &l)
	run2.apply(prod, podsGVR, pod("a", "z", "13", nil))
	run2.apply(prod, podsGVR, pod("b", "y", "14", api))
	run2.apply(prod, podsGVR, pod("b", "w", "15", nil))
	run2.remove(prod, podsGVR, pod("a", "x", "16", api))
	run2.sync()

	for _, tc := range []struct {
		name, rv string
		want     map[string][]string
	}{
		// a had sent nothing: its loaded objects come as they are now.
		{"after b's first", cursors[0], map[string][]string{"a": {"ADDED x@12", "ADDED z@13", "DELETED x@16"}, "b": {"MODIFIED y@14", "ADDED w@15"}}},
		{"after a's first", cursors[1], map[string][]string{"a": {"MODIFIED x@12", "ADDED z@13", "DELETED x@16"}, "b": {"MODIFIED y@14", "ADDED w@15"}}},
		{"at the bases", cursors[2], map[string][]string{"a": {"ADDED z@13", "DELETED x@16"}, "b": {"MODIFIED y@14", "ADDED w@15"}}},
		{"past b's base", cursors[3], map[string][]string{"a": {"ADDED z@13", "DELETED x@16"}, "b": {"ADDED w@15"}}},
		{"past both", cursors[4], map[string][]string{"a": {"DELETED x@16"}, "b": {"ADDED w@15"}}},
		{"the second run's list", l.Metadata.ResourceVersion, map[string][]string{"a": {"ADDED z@13", "DELETED x@16"}, "b": {"MODIFIED y@14", "ADDED w@15"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(tc.rv))
			got, last := byNamespace(w, count(tc.want))
			if !maps.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("events %q,\nwant %q", got, tc.want)
			}
			w.none(100 * time.Millisecond)
			w.stop()
			// The cursor of the last resumes in this run with nothing more, and so
			// does one of every namespace alone.
			w = run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(last))
			w.none(100 * time.Millisecond)
			w.stop()
			w = run2.watch(clusterPath(allClusters) + "/api/v1/namespaces/a/pods?watch=1&resourceVersion=" + url.QueryEscape(tc.rv))
			if got, _ := byNamespace(w, len(tc.want["a"])); !slices.Equal(got["a"], tc.want["a"]) {
				t.Errorf("namespace a alone: %q, want %q", got, tc.want["a"])
			}
			w.none(100 * time.Millisecond)
			w.stop()
		})
	}

	// A cursor handed out half-way through what a resumed watch read from the log
	// resumes in this run from there.
	w = run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(cursors[1]) + "&fieldSelector=" + url.QueryEscape("metadata.name=x"))
	_, mid := byNamespace(w, 1) // MODIFIED x@12, from the log
	w.stop()
	w = run2.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(mid))
	want := map[string][]string{"a": {"ADDED z@13", "DELETED x@16"}, "b": {"MODIFIED y@14", "ADDED w@15"}}
	if got, _ := byNamespace(w, count(want)); !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("from the middle of the log's changes: %q, want %q", got, want)
	}
	w.none(100 * time.Millisecond)

	// A cursor of the first run without positions by namespace (an earlier build), a
	// namespace that this run did not load, and a position among a namespace's loaded
	// objects cannot be placed.
	c, err = parseCursor(cursors[0])
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		p    position
		want string
	}{
		"without namespaces":   {position{rv: 12}, "kept no position per namespace"},
		"namespace not loaded": {position{rv: 12, scopes: "a=12,c=3"}, `namespace "c"`},
		"among loaded objects": {position{rv: 12, scopes: "a=0.1,b=11"}, `among the objects of namespace "a"`},
	} {
		rv := cursor{epoch: c.epoch, positions: map[string]position{prod: tc.p}}.String()
		if st := run2.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(rv)).status(t, 410); !strings.Contains(st.Message, tc.want) {
			t.Errorf("%s: %s", name, st.Message)
		}
	}
}

// TestParseScopes: a cluster position's namespace positions are taken in their
// canonical form only, so that equal cursors are equal strings.
func TestParseScopes(t *testing.T) {
	p, err := parsePosition("14.1~2;shop=12.1,web=14")
	if err != nil || p != (position{gen: 2, rv: 14, n: 1, scopes: "shop=12.1,web=14"}) {
		t.Fatalf("parsePosition: %+v, %v", p, err)
	}
	at, err := parseScopes(p.scopes, p.gen)
	if want := map[string]position{"shop": {gen: 2, rv: 12, n: 1}, "web": {gen: 2, rv: 14}}; err != nil || !maps.Equal(at, want) {
		t.Errorf("parseScopes: %v, %v; want %v", at, err, want)
	}
	if s := encodeScopes(at); s != p.scopes {
		t.Errorf("encodeScopes: %q, want %q", s, p.scopes)
	}
	for _, bad := range []string{
		"14;", "14;shop", "14;shop=", "14;=3", "14;web=1,shop=2", "14;shop=1,shop=2",
		"14;Shop=1", "14;shop=1~2", "14;shop=1.0", "14;shop=x", "14;shop=1,", "14;-a=1",
	} {
		if p, err := parsePosition(bad); err == nil {
			t.Errorf("parsePosition(%q) = %+v, want an error", bad, p)
		}
	}
}

// TestWatchResumesOneNamespaceWithoutScopes: a cursor of an earlier build, which kept no
// positions by namespace, of a resource restricted to one namespace, is the position
// in that namespace: it resumes.
func TestWatchResumesOneNamespaceWithoutScopes(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &scopedLog{epoch: "snap", namespaces: map[string]*namespaceLog{"a": {from: 9, base: 12, objects: 1}}, load: 1}
	log.add(aggregate.Added, pod("a", "x", "10", web))
	log.add(aggregate.Updated, pod("a", "x", "12", api))
	f := newSourceFixture(t, prod, "", func(src *fakeSource) Source { return scopedSource{src, log} }, pod("a", "x", "12", api))
	f.apply(prod, podsGVR, pod("a", "z", "13", nil))
	f.apply(prod, podsGVR, pod("a", "z", "14", web))
	f.sync()
	for _, tc := range []struct {
		p    position
		want []string
	}{
		{position{rv: 10}, []string{"MODIFIED x@12", "ADDED z@13", "MODIFIED z@14"}},
		{position{rv: 13}, []string{"MODIFIED z@14"}},
	} {
		rv := cursor{epoch: "snap" + logEpochSep + "earlier", positions: map[string]position{prod: tc.p}}.String()
		w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(rv))
		got, last := byNamespace(w, len(tc.want))
		if !slices.Equal(got["a"], tc.want) {
			t.Errorf("from %v: %q, want %q", tc.p, got["a"], tc.want)
		}
		w.none(100 * time.Millisecond)
		w.stop()
		if c, err := parseCursor(last); err != nil || c.positions[prod].scopes != "a=14" {
			t.Errorf("the cursor after them: %+v, %v", c.positions[prod], err)
		}
	}
}

// clone returns a copy of l's namespaces, records and bases, as a warm handover brings
// them to another replica's log.
func (l *scopedLog) clone(epoch string, holds ...string) *scopedLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &scopedLog{epoch: epoch, cluster: l.cluster, holds: holds, namespaces: map[string]*namespaceLog{}}
	for ns, n := range l.namespaces {
		cn := *n
		cn.records = slices.Clone(n.records)
		c.namespaces[ns] = &cn
	}
	return c
}

// TestFanOutWatchResumesByNamespaceAcrossAHandover: a fan-out watch that saw cluster
// far, whose pods one informer per namespace watches, through its owner fleetwatch-1,
// resumes through any replica after far moved to fleetwatch-2 by a warm handover that
// brought its change log: fleetwatch-2 places fleetwatch-1's positions of far
// namespace by namespace, and sends what the client had not seen, once each, though
// its informers interleave the namespaces in another order.
func TestFanOutWatchResumesByNamespaceAcrossAHandover(t *testing.T) {
	all := clusterPath(allClusters) + "/api/v1/pods"
	logA := &scopedLog{epoch: "snapA", cluster: "far", namespaces: map[string]*namespaceLog{"a": {from: 400}, "b": {from: 400}}}
	seed := []*unstructured.Unstructured{pod("a", "x", "401", web), pod("b", "y", "402", web)}
	for _, p := range seed {
		logA.add(aggregate.Added, p)
	}
	logA.namespaces["a"].base, logA.namespaces["a"].objects = 401, 1
	logA.namespaces["b"].base, logA.namespaces["b"].objects = 402, 1
	logA.load = 1
	local := newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	a := newSourceFixture(t, "far", "fleetwatch-1", func(src *fakeSource) Source { return scopedSource{src, logA} }, seed...)
	for _, cl := range []string{prod, staging, edge} {
		a.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	local.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: a.http.URL})
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(l.GetResourceVersion()))
	// b's informer is ahead of a's on fleetwatch-1: y@404 comes before z@403.
	y404, z403 := pod("b", "y", "404", api), pod("a", "z", "403", nil)
	a.apply("far", podsGVR, y404)
	logA.add(aggregate.Updated, y404)
	a.apply("far", podsGVR, z403)
	logA.add(aggregate.Added, z403)
	_, last := byNamespace(w, 2)
	w.stop()

	// fleetwatch-1 commits x@405 in a, then hands far over with its log to
	// fleetwatch-2 (a at 405, b at 402: y@404 is not in it), whose informers receive
	// y@404 again, then y@406 and w@407.
	x405 := pod("a", "x", "405", api)
	a.apply("far", podsGVR, x405)
	logA.add(aggregate.Updated, x405)
	logB := logA.clone("snapB", "snapA")
	logB.namespaces["a"].base, logB.namespaces["a"].objects = 405, 2
	logB.namespaces["b"].base, logB.namespaces["b"].objects = 402, 1
	logB.namespaces["b"].records = logB.namespaces["b"].records[:1]
	logB.load = 1
	b := newSourceFixture(t, "far", "fleetwatch-2", func(src *fakeSource) Source { return scopedSource{src, logB} }, x405, z403, seed[1])
	b.apply("far", podsGVR, y404)
	moved := aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-2", ReplicaAddress: b.http.URL}
	local.src.setStatus(moved)
	a.src.setStatus(moved)
	for _, cl := range []string{prod, staging, edge} {
		b.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	b.apply("far", podsGVR, pod("b", "y", "406", web))
	b.apply("far", podsGVR, pod("a", "w", "407", nil))
	b.sync()

	want := map[string][]string{"a": {"MODIFIED x@405", "ADDED w@407"}, "b": {"MODIFIED y@406"}}
	for name, through := range map[string]*fixture{"through fleetwatch-0": local, "through the old owner": a, "through the new owner": b} {
		t.Run(name, func(t *testing.T) {
			w := through.watch(all + "?watch=true&resourceVersion=" + url.QueryEscape(last))
			got, _ := byNamespace(w, count(want))
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("events %q, want %q", got, want)
			}
			w.none(200 * time.Millisecond)
		})
	}
}

// listedLog is a fakeLog whose base is of the first list of this run
// (ListedChangeLog).
type listedLog struct {
	*fakeLog
}

func (l listedLog) ChangeLogListed(cluster string, gvr schema.GroupVersionResource) bool {
	return cluster == prod && gvr == podsGVR
}

// TestListedBase: the objects of a first list of a resource that the fleet watches cold
// take positions (0, n) and then stand at the list's resourceVersion, as loaded ones
// do: a cursor after the list names it (a later run places it in the log, where its
// coverage starts), and resumes in this run from the history, never from the log,
// which may not hold the list yet; a cursor of an earlier run gets 410.
func TestListedBase(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &fakeLog{epoch: "snap", loading: true, load: 1}
	f := newSourceFixture(t, prod, "", func(src *fakeSource) Source {
		return struct {
			*fakeSource
			listedLog
		}{src, listedLog{log}}
	}, pod("default", "a", "12", web), pod("default", "b", "7", web))
	rc := f.server.cache.lookup(podsGVR)
	rc.mu.RLock()
	raw := rc.positions[prod]
	rc.mu.RUnlock()
	if raw != (position{n: 2}) {
		t.Errorf("after the list: %v, want 0.2", raw)
	}
	// The list's checkpoint: its resourceVersion is known.
	log.mu.Lock()
	log.loading, log.base, log.objects = false, 13, 2
	log.err = errors.New("the log was read")
	log.mu.Unlock()
	var l itemList
	f.getOK(pods, &l)
	c, err := parseCursor(l.Metadata.ResourceVersion)
	if err != nil || c.positions[prod] != (position{rv: 13}) {
		t.Fatalf("the list's cursor: %v, %v; want the list's resourceVersion 13", c.positions[prod], err)
	}
	f.apply(prod, podsGVR, pod("default", "b", "14", api))
	w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
	if got, _ := events(w, 1); !slices.Equal(got, []string{"MODIFIED b@14"}) {
		t.Errorf("from the list's cursor: %q", got)
	}
	w.none(100 * time.Millisecond)
	earlier := cursor{epoch: "snap" + logEpochSep + "earlier", positions: map[string]position{prod: {rv: 13}}}.String()
	if st := f.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(earlier)).status(t, 410); !strings.Contains(st.Message, "did not load") {
		t.Errorf("a cursor of an earlier run: %s", st.Message)
	}
}

// TestScopedListedBase: the first lists of a resource watched cold, namespace by
// namespace, are its base: a cursor after them stands at each namespace's list, but for
// a namespace whose list was empty, which it leaves out (the log's coverage of it may
// start later); it resumes in this run from the history.
func TestScopedListedBase(t *testing.T) {
	pods := clusterPath(allClusters) + "/api/v1/pods"
	log := &scopedLog{epoch: "snap", listed: true, load: 1, namespaces: map[string]*namespaceLog{"a": {}, "b": {}}}
	f := newSourceFixture(t, prod, "", func(src *fakeSource) Source { return scopedSource{src, log} }, pod("a", "x", "12", web))
	log.mu.Lock()
	log.namespaces["a"].base, log.namespaces["a"].objects = 13, 1
	log.namespaces["b"].base = 14
	log.mu.Unlock()
	listed := make(chan string, 1)
	go func() {
		var l itemList
		f.getOK(pods, &l)
		listed <- l.Metadata.ResourceVersion
	}()
	var rv string
	select {
	case rv = <-listed:
	case <-time.After(10 * time.Second):
		t.Fatal("no list within 10s: the cursor's positions by namespace ask the log under its own lock")
	}
	c, err := parseCursor(rv)
	if err != nil || c.positions[prod] != (position{rv: 14, scopes: "a=13"}) {
		t.Fatalf("the list's cursor: %+v, %v; want 14;a=13", c.positions[prod], err)
	}
	f.apply(prod, podsGVR, pod("b", "y", "15", nil))
	w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(rv))
	if got, _ := byNamespace(w, 1); !slices.Equal(got["b"], []string{"ADDED y@15"}) {
		t.Errorf("from the list's cursor: %q", got)
	}
	w.none(100 * time.Millisecond)
}
