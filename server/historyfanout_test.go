package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/history"
	"github.com/fleetwatch/fleetwatch/persist"
)

// change is a change of the merge's tests: replica's seq, at second at of the day.
func change(replica string, seq uint64, at int) v1alpha1.Change {
	return v1alpha1.Change{Replica: replica, Seq: seq, Time: metav1.NewMicroTime(now.Add(time.Duration(at) * time.Second))}
}

func refs(items []v1alpha1.Change) string {
	var out []string
	for _, c := range items {
		out = append(out, fmt.Sprintf("%s:%d", c.Replica, c.Seq))
	}
	return strings.Join(out, " ")
}

func TestMergeChanges(t *testing.T) {
	a := func(seq uint64, at int) v1alpha1.Change { return change("a", seq, at) }
	b := func(seq uint64, at int) v1alpha1.Change { return change("b", seq, at) }
	for _, tc := range []struct {
		name  string
		parts []changesPart
		from  changesPosition
		limit int
		want  string
		to    changesPosition
		more  bool
	}{{
		name:  "interleaved by time",
		parts: []changesPart{{replica: "a", items: []v1alpha1.Change{a(1, 0), a(2, 2), a(5, 4)}}, {replica: "b", items: []v1alpha1.Change{b(7, 1), b(9, 3)}}},
		limit: 10,
		want:  "a:1 b:7 a:2 b:9 a:5",
		to:    changesPosition{"a": {Seq: 5}, "b": {Seq: 9}},
	}, {
		name:  "cut by the limit: each part where its last change in the page is",
		parts: []changesPart{{replica: "a", items: []v1alpha1.Change{a(1, 0), a(2, 2), a(5, 4)}}, {replica: "b", items: []v1alpha1.Change{b(7, 1), b(9, 3)}}},
		from:  changesPosition{"c": {Seq: 4}},
		limit: 3,
		want:  "a:1 b:7 a:2",
		to:    changesPosition{"a": {Seq: 2}, "b": {Seq: 7}, "c": {Seq: 4}},
		more:  true,
	}, {
		name: "a part with more than it returned ends the page when it has none left",
		parts: []changesPart{
			{replica: "a", items: []v1alpha1.Change{a(1, 0), a(2, 2)}, next: 2},
			{replica: "b", items: []v1alpha1.Change{b(7, 1), b(9, 3)}},
		},
		limit: 10,
		want:  "a:1 b:7 a:2",
		to:    changesPosition{"a": {Seq: 2}, "b": {Seq: 7}},
		more:  true,
	}, {
		name: "a part that read its records for a page and found none: an empty page, and its log read further next",
		parts: []changesPart{
			{replica: "a", next: 100_000},
			{replica: "b", items: []v1alpha1.Change{b(7, 1)}},
		},
		from:  changesPosition{"a": {Seq: 3}},
		limit: 10,
		want:  "",
		to:    changesPosition{"a": {Seq: 100_000}},
		more:  true,
	}, {
		name: "a part that failed keeps its position",
		parts: []changesPart{
			{replica: "a", err: errors.New("down")},
			{replica: "b", items: []v1alpha1.Change{b(7, 1)}},
		},
		from:  changesPosition{"a": {Seq: 3}, "b": {Seq: 6}},
		limit: 10,
		want:  "b:7",
		to:    changesPosition{"a": {Seq: 3}, "b": {Seq: 7}},
	}, {
		name:  "a part's order is its log's, whatever the times (changes that came with a cluster handed over)",
		parts: []changesPart{{replica: "a", items: []v1alpha1.Change{a(1, 5), a(2, 0)}}, {replica: "b", items: []v1alpha1.Change{b(7, 1), b(8, 6)}}},
		limit: 10,
		want:  "b:7 a:1 a:2 b:8",
		to:    changesPosition{"a": {Seq: 2}, "b": {Seq: 8}},
	}, {
		name:  "the same time: by replica, then sequence number",
		parts: []changesPart{{replica: "b", items: []v1alpha1.Change{b(1, 0)}}, {replica: "a", items: []v1alpha1.Change{a(1, 0), a(2, 0)}}},
		limit: 10,
		want:  "a:1 a:2 b:1",
		to:    changesPosition{"a": {Seq: 2}, "b": {Seq: 1}},
	}, {
		name:  "another log than the position's, none of its changes in the page: read from since again",
		parts: []changesPart{{replica: "a", log: "new", items: []v1alpha1.Change{a(1, 5)}}, {replica: "b", items: []v1alpha1.Change{b(7, 1)}, next: 7}},
		from:  changesPosition{"a": {Log: "old", Seq: 9}},
		limit: 10,
		want:  "b:7",
		to:    changesPosition{"b": {Seq: 7}},
		more:  true,
	}, {
		name:  "nothing after the position",
		parts: []changesPart{{replica: "a"}, {replica: "b"}},
		from:  changesPosition{"a": {Seq: 3}},
		limit: 10,
		to:    changesPosition{"a": {Seq: 3}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			items, to, more := mergeChanges(tc.parts, tc.from, tc.limit)
			if got := refs(items); got != tc.want || !mapsEqual(to, tc.to) || more != tc.more {
				t.Errorf("got %q to %v more %v, want %q to %v more %v", got, to, more, tc.want, tc.to, tc.more)
			}
		})
	}
}

func mapsEqual(a, b changesPosition) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// simLog is a replica's log for the merge's property test: read answers a page of its
// changes after a position as history.Log.Changes does, reading at most maxScan records.
type simLog struct {
	replica string
	records []v1alpha1.Change
	// keep selects the changes that the query selects.
	keep func(v1alpha1.Change) bool
}

func (l *simLog) read(after uint64, limit, maxScan int) changesPart {
	part := changesPart{replica: l.replica}
	scanned := 0
	for _, c := range l.records {
		if c.Seq <= after {
			continue
		}
		if len(part.items) == limit {
			part.next = part.items[len(part.items)-1].Seq
			return part
		}
		if scanned == maxScan {
			part.next = after
			if n := len(part.items); n > 0 {
				part.next = part.items[n-1].Seq
			}
			return part
		}
		scanned++
		after = c.Seq
		if l.keep(c) {
			part.items = append(part.items, c)
		}
	}
	if scanned == maxScan && len(part.items) < limit {
		part.next = after
	}
	return part
}

// TestMergeChangesPagesAnyLimit: the pages of a fleet's changes, read from each page's
// position, have every change of every replica's log once, in the same order whatever
// their limit, also when replicas read few records a page and the query selects few of
// them, and when a log's times go back (the import clamps the times of the changes that
// come with a cluster handed over, so they do not; the merge must not depend on it).
func TestMergeChangesPagesAnyLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 1))
	for round := range 20 {
		var logs []*simLog
		var want []string
		for r := range 1 + rng.IntN(3) {
			l := &simLog{replica: fmt.Sprintf("fleetwatch-%d", r)}
			seq, at := uint64(0), 0
			for range rng.IntN(40) {
				seq += 1 + uint64(rng.IntN(3))
				at += rng.IntN(3)
				if rng.IntN(8) == 0 {
					at -= rng.IntN(10) // imported: an older time
				}
				l.records = append(l.records, change(l.replica, seq, at))
			}
			mod := uint64(1 + rng.IntN(3))
			l.keep = func(c v1alpha1.Change) bool { return c.Seq%mod == 0 }
			for _, c := range l.records {
				if l.keep(c) {
					want = append(want, fmt.Sprintf("%s:%d", c.Replica, c.Seq))
				}
			}
			logs = append(logs, l)
		}
		maxScan := 1 + rng.IntN(10)
		var whole string
		for _, limit := range []int{1, 2, 3, 7, 500} {
			var pos changesPosition
			var got []v1alpha1.Change
			for pages := 0; ; pages++ {
				if pages > 10_000 {
					t.Fatalf("round %d, limit %d: no end", round, limit)
				}
				parts := make([]changesPart, len(logs))
				for i, l := range logs {
					parts[i] = l.read(pos[l.replica].Seq, limit, maxScan)
				}
				items, to, more := mergeChanges(parts, pos, limit)
				if len(items) > limit {
					t.Fatalf("round %d: %d items, limit %d", round, len(items), limit)
				}
				got, pos = append(got, items...), to
				if !more {
					break
				}
			}
			g := refs(got)
			sorted := strings.Fields(g)
			slices.Sort(sorted)
			w := slices.Clone(want)
			slices.Sort(w)
			if !slices.Equal(sorted, w) {
				t.Fatalf("round %d, limit %d, maxScan %d: %q, want every change once: %q", round, limit, maxScan, g, w)
			}
			if whole == "" {
				whole = g
			} else if g != whole {
				t.Fatalf("round %d, limit %d: %q, and with limit 1: %q", round, limit, g, whole)
			}
		}
	}
}

// changeLog gives f's source a change log whose changes are pods written one step apart
// from start, and returns add, which writes a pod of cluster Added (or Deleted, del).
func (f *fixture) changeLog(start time.Time, step time.Duration) (add func(cluster, name string, del bool)) {
	f.t.Helper()
	clock := clocktesting.NewFakeClock(start)
	store, err := persist.Open(filepath.Join(f.t.TempDir(), "snap.db"), persist.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { store.Close() })
	w := store.NewWriter(persist.WriterOptions{Interval: time.Hour, Clock: clock, History: persist.HistoryOptions{Enabled: true}})
	f.src.mu.Lock()
	f.src.log = history.New(store, history.Options{})
	f.src.mu.Unlock()
	rv := 5000
	return func(cluster, name string, del bool) {
		f.t.Helper()
		rv++
		key := persist.ResourceKeyFor(podsGVR)
		if del {
			w.Delete(cluster, key, "default", name)
		} else {
			w.Upsert(cluster, key, pod("default", name, fmt.Sprint(rv), web))
		}
		w.Checkpoint(cluster, key, fmt.Sprint(rv))
		if err := w.Flush(f.ctx); err != nil {
			f.t.Fatal(err)
		}
		clock.Step(step)
	}
}

// fleetChangesPair is fanOutPair with a change log on each replica, and each able to ask
// the other: local (fleetwatch-0) owns prod, staging and edge, peer (fleetwatch-1) far.
// Their changes alternate, one a second; each log also holds changes of a cluster the
// other owns now, which neither may return. It returns the fleet's changes in order,
// "replica cluster/name" each, and adders of more changes to each log.
func fleetChangesPair(t testing.TB) (local, peer *fixture, want []string, addLocal, addPeer func(cluster, name string, del bool)) {
	local, peer, _ = fanOutPair(t)
	for _, cl := range []string{prod, staging, edge} {
		peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	start := now.Add(-time.Hour)
	addLocal = local.changeLog(start, 2*time.Second)
	addPeer = peer.changeLog(start.Add(time.Second), 2*time.Second)
	for i := range 6 {
		cl := []string{prod, staging, edge, "far", prod, staging}[i]
		name := fmt.Sprintf("l-%d", i)
		addLocal(cl, name, false)
		if cl != "far" {
			want = append(want, "fleetwatch-0 "+cl+"/"+name)
		}
		pcl := []string{"far", "far", prod, "far", "far", "far"}[i]
		name = fmt.Sprintf("p-%d", i)
		addPeer(pcl, name, false)
		if pcl == "far" {
			want = append(want, "fleetwatch-1 "+pcl+"/"+name)
		}
	}
	return local, peer, want, addLocal, addPeer
}

// readChanges reads every page of the changes of query through f, limit a page, and
// returns "replica cluster/name" of each, the last page's resourceVersion and the
// Warnings.
func readChanges(t *testing.T, f *fixture, query string, limit int) (got []string, rv, warnings string) {
	t.Helper()
	next := ""
	for range 1000 {
		p := fmt.Sprintf("%s?%s&limit=%d", changesPath, query, limit)
		if next != "" {
			p += "&continue=" + url.QueryEscape(next)
		}
		r := f.get(p)
		var page v1alpha1.ChangeList
		if r.code != http.StatusOK || json.Unmarshal(r.body, &page) != nil {
			t.Fatalf("GET %s: %d %s", p, r.code, r.body)
		}
		if len(page.Items) > limit {
			t.Fatalf("GET %s: %d items", p, len(page.Items))
		}
		warnings += r.header.Get("Warning")
		for _, c := range page.Items {
			got = append(got, c.Replica+" "+c.Cluster+"/"+c.Name)
		}
		rv = page.Metadata.ResourceVersion
		if next = page.Metadata.Continue; next == "" {
			return got, rv, warnings
		}
	}
	t.Fatal("more than 1000 pages")
	return nil, "", ""
}

// TestFleetChanges: the changes of every cluster of a sharded fleet, through either
// replica, are both replicas' logs merged by time, each for the clusters it owns: the
// same sequence whatever the page size, each change once; a client that read up to a
// page's resourceVersion reads what came after with after=it; a replica that does not
// answer is named in a Warning, and what it missed comes once it answers again.
func TestFleetChanges(t *testing.T) {
	local, peer, want, addLocal, addPeer := fleetChangesPair(t)
	var rv string
	for _, via := range []*fixture{local, peer} {
		for _, limit := range []int{1, 2, 3, 500} {
			got, last, warn := readChanges(t, via, "", limit)
			if !slices.Equal(got, want) || warn != "" {
				t.Errorf("through %s, limit %d:\n%s\nwant:\n%s\nWarning %q", via.server.opts.Replica, limit, strings.Join(got, "\n"), strings.Join(want, "\n"), warn)
			}
			rv = last
		}
	}
	// A filter is applied by each replica to its own log.
	got, _, _ := readChanges(t, local, "q=-1", 1)
	if w := []string{"fleetwatch-0 staging/l-1", "fleetwatch-1 far/p-1"}; !slices.Equal(got, w) {
		t.Errorf("q=-1: %v, want %v", got, w)
	}

	// What came after a resourceVersion, through the other replica.
	addLocal(prod, "later-l", false)
	addPeer("far", "later-p", false)
	got, rv2, _ := readChanges(t, local, "after="+url.QueryEscape(rv), 1)
	if w := []string{"fleetwatch-0 prod/later-l", "fleetwatch-1 far/later-p"}; !slices.Equal(got, w) {
		t.Errorf("after the last resourceVersion: %v, want %v", got, w)
	}

	// The peer does not answer: its clusters are named, and its position kept.
	addLocal(prod, "down-l", false)
	addPeer("far", "down-p", false)
	far := clusterStatus("far", aggregate.PhaseRemote, false)
	far.Replica, far.ReplicaAddress = "fleetwatch-1", "http://127.0.0.1:1"
	local.src.setStatus(far)
	got, rv3, warn := readChanges(t, local, "after="+url.QueryEscape(rv2), 2)
	if w := []string{"fleetwatch-0 prod/down-l"}; !slices.Equal(got, w) || !strings.Contains(warn, `clusters not included: far (replica \"fleetwatch-1\" did not answer`) {
		t.Errorf("the peer down: %v, want %v; Warning %q", got, w, warn)
	}
	far.ReplicaAddress = peer.http.URL
	local.src.setStatus(far)
	got, rv4, warn := readChanges(t, local, "after="+url.QueryEscape(rv3), 2)
	if w := []string{"fleetwatch-1 far/down-p"}; !slices.Equal(got, w) || warn != "" {
		t.Errorf("the peer back: %v, want %v; Warning %q", got, w, warn)
	}

	// The peer's snapshot replaced: its new log, whose sequence numbers start again, is
	// read from its start, not after the old log's position.
	addNew := peer.changeLog(now.Add(-time.Minute), time.Second)
	addNew("far", "new-1", false)
	got, _, _ = readChanges(t, local, "after="+url.QueryEscape(rv4), 2)
	if w := []string{"fleetwatch-1 far/new-1"}; !slices.Equal(got, w) {
		t.Errorf("the peer's new log: %v, want %v", got, w)
	}

	// Positions are of every replica's log: a seq is refused, a forwarded request reads
	// one log.
	st := local.get(changesPath+"?after=3").status(t, http.StatusBadRequest)
	if st.Details.Causes[0].Field != "after" || !strings.Contains(st.Message, "metadata.resourceVersion") {
		t.Errorf("after=3 through a replica: %+v", st)
	}
	r := local.get(changesPath+"?after="+url.QueryEscape(rv), forwardedHeader, "1")
	if r.code != http.StatusBadRequest {
		t.Errorf("a position in a forwarded request: %d %s", r.code, r.body)
	}
	var one v1alpha1.ChangeList
	local.getOK(changesPath+"?after=3", &one, forwardedHeader, "1")
	for _, c := range one.Items {
		if c.Seq <= 3 || c.Replica != "fleetwatch-0" || c.Cluster == "far" {
			t.Errorf("forwarded, after=3: %+v", c)
		}
	}
	// A token is of its request, and of a fleet's changes.
	r = local.get(changesPath + "?limit=1")
	var first v1alpha1.ChangeList
	if err := json.Unmarshal(r.body, &first); err != nil || first.Metadata.Continue == "" {
		t.Fatalf("a first page: %s", r.body)
	}
	for _, p := range []string{
		changesPath + "?limit=1&q=api&continue=" + url.QueryEscape(first.Metadata.Continue),
		changesPath + "?limit=1&continue=" + url.QueryEscape(historyContinue{Digest: tokenDigest("changes", allClusters, "", "", "", ""), After: 3}.String()),
		changesPath + "?limit=1&after=" + url.QueryEscape(first.Metadata.Continue),
	} {
		st := local.get(p).status(t, http.StatusBadRequest)
		if f := st.Details.Causes[0].Field; f != "continue" && f != "after" {
			t.Errorf("%s: %+v", p, st)
		}
	}
}

// TestObjectHistoryThroughAnyReplica: an object's history is its cluster's owner's,
// through any replica; a continue token of another replica's log, once the cluster
// moved, is 410 Gone.
func TestObjectHistoryThroughAnyReplica(t *testing.T) {
	local, peer, _, _, addPeer := fleetChangesPair(t)
	addPeer("far", "p-0", true)
	var h v1alpha1.ObjectHistory
	const q = "?version=v1&resource=pods&namespace=default&name=p-0&limit=1"
	local.getOK(historyPath("far")+q, &h)
	if len(h.Items) != 1 || h.Items[0].Replica != "fleetwatch-1" || h.Items[0].Type != "Added" || h.Metadata.Continue == "" {
		t.Fatalf("far's p-0 through fleetwatch-0: %+v", h)
	}
	var next v1alpha1.ObjectHistory
	local.getOK(historyPath("far")+q+"&continue="+url.QueryEscape(h.Metadata.Continue), &next)
	if len(next.Items) != 1 || next.Items[0].Type != "Deleted" {
		t.Errorf("the next page: %+v", next)
	}
	// The cluster moved to fleetwatch-0, which has a token of fleetwatch-1's log.
	peer.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	local.src.setStatus(clusterStatus("far", aggregate.PhaseSynced, false))
	st := local.get(historyPath("far")+q+"&continue="+url.QueryEscape(h.Metadata.Continue)).status(t, http.StatusGone)
	if !strings.Contains(st.Message, "another change log") {
		t.Errorf("a token of another replica's log: %+v", st)
	}
}

// TestChangesPositionOfManyReplicas: a position, and a continue token that holds it, of
// a fleet of many replicas with long identities are taken back.
func TestChangesPositionOfManyReplicas(t *testing.T) {
	pos := changesPosition{}
	for i := range 300 {
		pos[fmt.Sprintf("%s-%03d", strings.Repeat("r", 59), i)] = logPosition{Log: "dnar6pm9nkwy", Seq: uint64(1_000_000_000 + i)}
	}
	got, err := parseChangesPosition(pos.String())
	if err != nil || !mapsEqual(got, pos) {
		t.Fatalf("a position of %d replicas: %v", len(pos), err)
	}
	tok := historyContinue{Digest: "0123456789abcdef", Parts: pos, Since: now.Format(time.RFC3339Nano)}
	back, err := parseHistoryContinue(tok.String(), "0123456789abcdef", true, "")
	if err != nil || !mapsEqual(back.Parts, pos) {
		t.Fatalf("a continue token of %d replicas, %d bytes: %v", len(pos), len(tok.String()), err)
	}
}

// BenchmarkChangesPage reads a page of 100 changes from one replica's log (a request
// that another replica forwarded) and from a sharded fleet of two (this replica's log
// merged with the other's, asked over loopback HTTP), each log of 1,000 changes.
func BenchmarkChangesPage(b *testing.B) {
	local, _, _, addLocal, addPeer := fleetChangesPair(b)
	for i := range 1000 {
		addLocal(prod, fmt.Sprintf("bench-%d", i), false)
		addPeer("far", fmt.Sprintf("bench-%d", i), false)
	}
	for _, bc := range []struct {
		name   string
		header []string
	}{
		{"one log", []string{forwardedHeader, "1"}},
		{"two replicas merged", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				r := local.get(changesPath+"?limit=100&q=bench", bc.header...)
				if r.code != http.StatusOK {
					b.Fatalf("%d %s", r.code, r.body)
				}
			}
		})
	}
}
