package persist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	clocktesting "k8s.io/utils/clock/testing"
)

// historyWriter returns a Store and its Writer on a fake clock, which commits at Flush.
func historyWriter(t *testing.T, path string, h HistoryOptions) (*Store, *Writer, *clocktesting.FakeClock) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := openTest(t, path, Options{})
	return s, s.NewWriter(WriterOptions{Interval: time.Hour, Clock: clock, History: h}), clock
}

func commitNow(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// allChanges returns every record of the log, page by page.
func allChanges(t *testing.T, s *Store, q ChangesQuery) []Change {
	t.Helper()
	var all []Change
	for {
		page, next, err := s.Changes(q)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if next == 0 {
			return all
		}
		q.After = next
	}
}

// describe returns "type cluster resource ns/name rv version" for each change, the
// version read from its object.
func describe(t *testing.T, changes []Change) []string {
	t.Helper()
	var out []string
	for _, c := range changes {
		version := "-"
		if c.Object != nil {
			obj, err := c.Decode()
			if err != nil {
				t.Fatal(err)
			}
			version = versionOf(t, obj)
		}
		key := ""
		if c.Name != "" {
			key = c.Namespace + "/" + c.Name
		}
		out = append(out, strings.Join([]string{c.Type.String(), c.Cluster, string(c.Resource), key, c.ResourceVersion, version}, " "))
	}
	return out
}

func TestHistoryRecordsEveryChange(t *testing.T) {
	s, w, clock := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	// Commit 1: a list.
	w.Upsert("prod", pods, object("a", "p1", "1"))
	w.Upsert("prod", pods, object("a", "p2", "1"))
	w.Upsert("prod", deployments, metadataObject("a", "d1", "1"))
	w.Checkpoint("prod", pods, "10")
	w.Checkpoint("prod", deployments, "11")
	commitNow(t, w)
	// Commit 2: two updates of p1 between commits are two records; a deletion; a
	// change not checkpointed yet waits.
	clock.Step(time.Second)
	w.Upsert("prod", pods, object("a", "p1", "2"))
	w.Checkpoint("prod", pods, "12")
	w.Upsert("prod", pods, object("a", "p1", "3"))
	w.Delete("prod", pods, "a", "p2")
	w.Checkpoint("prod", pods, "13")
	w.Upsert("prod", pods, object("a", "p3", "1"))
	commitNow(t, w)
	// Commit 3: the waiting change, a relist's vanished object, an encoded upsert.
	clock.Step(time.Second)
	w.DeleteVanished("prod", pods, "a", "p1")
	enc, err := encodeObject(object("a", "p4", "1"))
	if err != nil {
		t.Fatal(err)
	}
	w.UpsertEncoded("prod", pods, object("a", "p4", "1"), enc)
	w.Checkpoint("prod", pods, "14")
	commitNow(t, w)
	// Commit 4: a resource dropped and listed again; a cluster replaced.
	clock.Step(time.Second)
	w.DropResource("prod", deployments)
	w.Upsert("prod", deployments, metadataObject("a", "d2", "1"))
	w.Checkpoint("prod", deployments, "20")
	w.Upsert("dev", pods, object("", "n1", "1"))
	w.Checkpoint("dev", pods, "5")
	commitNow(t, w)
	clock.Step(time.Second)
	w.ReplaceCluster("dev")
	w.DropResource("prod", deployments) // two records in one commit, each its own
	w.DropCluster("gone")               // not stored: no record
	commitNow(t, w)
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}

	got := describe(t, allChanges(t, s, ChangesQuery{Limit: 3}))
	// Within a commit, resources come in any order; each resource's records in theirs.
	want := [][]string{
		{"Added prod /v1/pods a/p1 10 1", "Added prod /v1/pods a/p2 10 1"},
		{"Added prod apps/v1/deployments a/d1 11 1"},
		{"Modified prod /v1/pods a/p1 12 2", "Modified prod /v1/pods a/p1 13 3", "Deleted prod /v1/pods a/p2 13 -"},
		{"Added prod /v1/pods a/p3 14 1", "Vanished prod /v1/pods a/p1 14 -", "Added prod /v1/pods a/p4 14 1"},
		{"ResourceReset prod apps/v1/deployments   -", "Added prod apps/v1/deployments a/d2 20 1"},
		{"Added dev /v1/pods /n1 5 1"},
		{"ClusterReplaced dev    -"},
		{"ResourceReset prod apps/v1/deployments   -"},
	}
	if !sameRecords(got, want) {
		t.Fatalf("records:\n%s\nwant, each group in order:\n%v", strings.Join(got, "\n"), want)
	}

	all := allChanges(t, s, ChangesQuery{})
	for i, c := range all {
		if c.Seq != all[0].Seq+uint64(i) {
			t.Errorf("record %d has sequence number %d", i, c.Seq)
		}
		if i > 0 && c.Time.Before(all[i-1].Time) {
			t.Errorf("record %d is older than the one before", i)
		}
	}
	if h := describe(t, mustObjectHistory(t, s, "prod", pods, "a", "p1")); !slices.Equal(h, []string{
		"Added prod /v1/pods a/p1 10 1", "Modified prod /v1/pods a/p1 12 2", "Modified prod /v1/pods a/p1 13 3", "Vanished prod /v1/pods a/p1 14 -",
	}) {
		t.Errorf("history of p1: %q", h)
	}
	if c := all[0]; c.ObjectResourceVersion != "" || !c.Time.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("first record: %+v", c)
	}

	// The sequence goes on across a restart.
	last := all[len(all)-1].Seq
	s.Close()
	s2, w2, _ := historyWriter(t, s.Path(), HistoryOptions{Enabled: true})
	w2.Upsert("prod", pods, object("a", "p9", "1"))
	w2.Checkpoint("prod", pods, "30")
	commitNow(t, w2)
	page, _, err := s2.Changes(ChangesQuery{After: last})
	if err != nil || len(page) != 1 || page[0].Seq != last+1 || page[0].Type != ChangeAdded {
		t.Fatalf("after a restart: %+v, %v", page, err)
	}
}

// sameRecords reports whether got is the groups of want, in the order of want's
// groups within each commit, each group's records in their order and adjacent.
func sameRecords(got []string, want [][]string) bool {
	var flat []string
	for _, g := range want {
		flat = append(flat, g...)
	}
	if len(got) != len(flat) {
		return false
	}
	for _, g := range want {
		i := slices.Index(got, g[0])
		if i < 0 || i+len(g) > len(got) || !slices.Equal(got[i:i+len(g)], g) {
			return false
		}
	}
	return true
}

func mustObjectHistory(t *testing.T, s *Store, cluster string, resource ResourceKey, namespace, name string) []Change {
	t.Helper()
	h, err := s.ObjectHistory(cluster, resource, namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHistoryFilters(t *testing.T) {
	s, w, clock := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	start := clock.Now()
	for i := range 30 {
		cluster := fmt.Sprint("c", i%3)
		res := []ResourceKey{pods, deployments}[i%2]
		w.Upsert(cluster, res, object("ns", fmt.Sprint("o", i), "1"))
		w.Checkpoint(cluster, res, fmt.Sprint(100+i))
		if i%5 == 4 {
			commitNow(t, w)
			clock.Step(time.Minute)
		}
	}
	count := func(q ChangesQuery) int { return len(allChanges(t, s, q)) }
	for _, tc := range []struct {
		name string
		q    ChangesQuery
		want int
	}{
		{"all", ChangesQuery{}, 30},
		{"cluster", ChangesQuery{Cluster: "c1"}, 10},
		{"cluster and resource", ChangesQuery{Cluster: "c1", Resource: pods}, 5},
		{"resource alone", ChangesQuery{Resource: deployments}, 15},
		{"since", ChangesQuery{Since: start.Add(3 * time.Minute)}, 15},
		{"since, cluster", ChangesQuery{Since: start.Add(3 * time.Minute), Cluster: "c0", Limit: 2}, 5},
		{"since the future", ChangesQuery{Since: start.Add(time.Hour)}, 0},
		{"since, between commits", ChangesQuery{Since: start.Add(3*time.Minute + time.Second)}, 10},
		{"filter", ChangesQuery{Filter: func(c *Change) bool { return c.Name == "o7" }}, 1},
		{"filter without objects", ChangesQuery{Filter: func(c *Change) bool { return c.Object == nil }}, 30},
		{"filter with objects", ChangesQuery{FilterObject: true, Filter: func(c *Change) bool {
			obj, err := c.Decode()
			return err == nil && versionOf(t, obj) == "1"
		}}, 30},
		{"a page's reads bounded", ChangesQuery{MaxScan: 4, Limit: 3}, 30},
		{"a page's reads bounded, filtered", ChangesQuery{MaxScan: 4, Filter: func(c *Change) bool { return c.Name == "o29" }}, 1},
		{"a cluster's page's reads bounded", ChangesQuery{MaxScan: 1, Cluster: "c2"}, 10},
		{"unknown cluster", ChangesQuery{Cluster: "nope"}, 0},
		// Through the index of one cluster of three; through the log for two.
		{"clusters matched, few", ChangesQuery{MatchCluster: func(c string) bool { return c == "c1" }}, 10},
		{"clusters matched, few, paged", ChangesQuery{MatchCluster: func(c string) bool { return c == "c1" }, Limit: 3, MaxScan: 2}, 10},
		{"clusters matched, few, since", ChangesQuery{Since: start.Add(3 * time.Minute), MatchCluster: func(c string) bool { return c == "c0" }}, 5},
		{"clusters matched, many", ChangesQuery{MatchCluster: func(c string) bool { return c != "c2" }, Limit: 4}, 20},
		{"clusters matched, and a resource", ChangesQuery{MatchCluster: func(c string) bool { return c == "c1" }, Resource: pods}, 5},
		{"clusters matched, none", ChangesQuery{MatchCluster: func(string) bool { return false }}, 0},
	} {
		if got := count(tc.q); got != tc.want {
			t.Errorf("%s: %d records, want %d", tc.name, got, tc.want)
		}
	}
	// A page that reads MaxScan records without selecting any is empty, and says where
	// the next starts.
	page, next, err := s.Changes(ChangesQuery{MaxScan: 4, Filter: func(c *Change) bool { return c.Name == "o29" }})
	if err != nil || len(page) != 0 || next != 4 {
		t.Errorf("a bounded page that selects nothing: %d records, next %d, err %v; want 0, next 4", len(page), next, err)
	}
	if keys, err := s.HistoryResources("c1"); err != nil || !slices.Equal(keys, []ResourceKey{pods, deployments}) {
		t.Errorf("HistoryResources(c1) = %q, %v; want %q", keys, err, []ResourceKey{pods, deployments})
	}
	if keys, err := s.HistoryResources("nope"); err != nil || len(keys) != 0 {
		t.Errorf("HistoryResources(nope) = %q, %v; want none", keys, err)
	}
	got := allChanges(t, s, ChangesQuery{Cluster: "c2"})
	if !slices.IsSortedFunc(got, func(a, b Change) int { return int(a.Seq) - int(b.Seq) }) {
		t.Error("a cluster's records are not in order")
	}
	// The index's answer is the log's, with a cluster's own records.
	w.DropCluster("c1")
	commitNow(t, w)
	byIndex := describe(t, allChanges(t, s, ChangesQuery{MatchCluster: func(c string) bool { return c == "c1" }, Limit: 4}))
	byLog := describe(t, allChanges(t, s, ChangesQuery{Filter: func(c *Change) bool { return c.Cluster == "c1" }}))
	if !slices.Equal(byIndex, byLog) || len(byLog) != 11 {
		t.Errorf("c1's records from the index:\n%q\nfrom the log:\n%q", byIndex, byLog)
	}
}

func TestPrefixEnd(t *testing.T) {
	for _, tc := range []struct{ p, want []byte }{
		{[]byte("ab"), []byte("ac")},
		{[]byte{'a', 0xff}, []byte("b")},
		{[]byte{0xff, 0xff}, nil},
	} {
		if got := prefixEnd(tc.p); !bytes.Equal(got, tc.want) {
			t.Errorf("prefixEnd(%q) = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestHistoryChangesAfter(t *testing.T) {
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, object("a", "p1", "1"))
	w.Checkpoint("prod", pods, "10")
	commitNow(t, w)
	for rv := 11; rv <= 15; rv++ {
		w.Upsert("prod", pods, object("a", "p1", fmt.Sprint(rv)))
		w.Checkpoint("prod", pods, fmt.Sprint(rv))
		if rv%2 == 0 {
			commitNow(t, w)
		}
	}
	commitNow(t, w)
	versions := func(rv string) ([]string, error) {
		changes, err := s.ChangesAfter("prod", pods, rv)
		var out []string
		for _, c := range changes {
			out = append(out, c.ResourceVersion)
		}
		return out, err
	}
	for rv, want := range map[string][]string{"10": {"11", "12", "13", "14", "15"}, "13": {"14", "15"}, "15": nil, "99": nil} {
		if got, err := versions(rv); err != nil || !slices.Equal(got, want) {
			t.Errorf("after %s: %v, %v; want %v", rv, got, err, want)
		}
	}
	for _, rv := range []string{"9", "x", ""} {
		if _, err := versions(rv); !errors.Is(err, ErrTooOld) {
			t.Errorf("after %q: %v, want ErrTooOld", rv, err)
		}
	}
	if _, err := s.ChangesAfter("prod", deployments, "10"); !errors.Is(err, ErrTooOld) {
		t.Errorf("a resource never stored: %v, want ErrTooOld", err)
	}
	// A drop ends the coverage; the list after it starts a new one.
	w.DropResource("prod", pods)
	w.Upsert("prod", pods, object("a", "p1", "x"))
	w.Checkpoint("prod", pods, "40")
	commitNow(t, w)
	if _, err := versions("15"); !errors.Is(err, ErrTooOld) {
		t.Errorf("across a drop: %v, want ErrTooOld", err)
	}
	w.Upsert("prod", pods, object("a", "p1", "y"))
	w.Checkpoint("prod", pods, "41")
	commitNow(t, w)
	if got, err := versions("40"); err != nil || !slices.Equal(got, []string{"41"}) {
		t.Errorf("after the drop, from 40: %v, %v", got, err)
	}
	// So does a cluster replaced.
	w.ReplaceCluster("prod")
	commitNow(t, w)
	if _, err := versions("41"); !errors.Is(err, ErrTooOld) {
		t.Errorf("after the cluster was replaced: %v, want ErrTooOld", err)
	}
}

// TestHistoryChangesSince: the records at a list's resourceVersion come with those
// after it, so that a watcher who saw part of the list finds where it stands.
func TestHistoryChangesSince(t *testing.T) {
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, object("a", "p1", "5"))
	w.Checkpoint("prod", pods, "10")
	commitNow(t, w)
	// A list at 20, one of whose objects has the list's resourceVersion.
	w.Upsert("prod", pods, object("a", "p2", "20"))
	w.Upsert("prod", pods, object("a", "p3", "15"))
	w.DeleteVanished("prod", pods, "a", "p1")
	w.Checkpoint("prod", pods, "20")
	w.Upsert("prod", pods, object("a", "p2", "21"))
	w.Checkpoint("prod", pods, "21")
	commitNow(t, w)
	versions := func(since bool, rv string) ([]string, error) {
		get := s.ChangesAfter
		if since {
			get = s.ChangesSince
		}
		changes, err := get("prod", pods, rv)
		var out []string
		for _, c := range changes {
			out = append(out, c.Type.String()+" "+c.Name+" "+c.ResourceVersion)
		}
		return out, err
	}
	list := []string{"Added p2 20", "Added p3 20", "Vanished p1 20", "Modified p2 21"}
	for _, tc := range []struct {
		since bool
		rv    string
		want  []string
	}{
		{false, "10", list},
		{false, "20", list[3:]},
		{true, "20", list},
		{true, "15", list},
		{true, "21", list[3:]},
		{true, "22", nil},
	} {
		if got, err := versions(tc.since, tc.rv); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("since %v %s: %v, %v; want %v", tc.since, tc.rv, got, err, tc.want)
		}
	}
	// The log holds the changes after 10, not every one at 10.
	if _, err := versions(true, "10"); !errors.Is(err, ErrTooOld) {
		t.Errorf("since the coverage's start: %v, want ErrTooOld", err)
	}
}

func TestStoreID(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	id, err := s.ID()
	if err != nil || id == "" {
		t.Fatalf("ID: %q, %v", id, err)
	}
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	if again, err := s.ID(); err != nil || again != id {
		t.Errorf("after a compaction: %q, %v; want %q", again, err, id)
	}
	other := openTest(t, testPath(t), Options{})
	if o, err := other.ID(); err != nil || o == id {
		t.Errorf("another file: %q, %v; want other than %q", o, err, id)
	}
}

func TestHistoryRetention(t *testing.T) {
	t.Run("age", func(t *testing.T) {
		s, w, clock := historyWriter(t, testPath(t), HistoryOptions{Enabled: true, Retention: time.Hour})
		for i := range 10 {
			w.Upsert("prod", pods, object("a", fmt.Sprint("p", i), "1"))
			w.Checkpoint("prod", pods, fmt.Sprint(10+i))
			commitNow(t, w)
			clock.Step(10 * time.Minute)
		}
		// The last commit was 90 minutes after the first: the first 3 are older than
		// an hour.
		got := allChanges(t, s, ChangesQuery{})
		if len(got) != 7 || got[0].Name != "p3" {
			t.Fatalf("%d records, the first %+v", len(got), got[0])
		}
		if h := mustObjectHistory(t, s, "prod", pods, "a", "p0"); len(h) != 0 {
			t.Errorf("history of a dropped record: %v", h)
		}
		if _, err := s.ChangesAfter("prod", pods, "11"); !errors.Is(err, ErrTooOld) {
			t.Errorf("after a dropped record: %v, want ErrTooOld", err)
		}
		if c, err := s.ChangesAfter("prod", pods, "12"); err != nil || len(c) != 7 {
			t.Errorf("after the last dropped record: %d, %v", len(c), err)
		}
		checkIndex(t, s)
	})
	t.Run("bytes", func(t *testing.T) {
		s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true, MaxBytes: 20 << 10})
		for i := range 100 {
			w.Upsert("prod", pods, testPod(t, "a", fmt.Sprint("p", i%10)))
			w.Checkpoint("prod", pods, fmt.Sprint(10+i))
			commitNow(t, w)
		}
		got := allChanges(t, s, ChangesQuery{})
		size := logBytes(t, s)
		if size > 20<<10 || size < 12<<10 || got[len(got)-1].ResourceVersion != "109" {
			t.Fatalf("%d records, %d bytes, the last at %s", len(got), size, got[len(got)-1].ResourceVersion)
		}
		checkIndex(t, s)
	})
	t.Run("bounded per commit", func(t *testing.T) {
		path := testPath(t)
		s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
		for i := range 3000 {
			w.Upsert("prod", pods, object("a", fmt.Sprint("p", i), "1"))
		}
		w.Checkpoint("prod", pods, "10")
		commitNow(t, w)
		s.Close()
		// A retention of 1 byte: each commit drops at most pruneBudget records.
		s, w, _ = historyWriter(t, path, HistoryOptions{Enabled: true, MaxBytes: 1})
		w.Upsert("prod", pods, object("a", "x", "1"))
		w.Checkpoint("prod", pods, "11")
		commitNow(t, w)
		if n := len(allChanges(t, s, ChangesQuery{})); n != 3001-pruneBudget(1) {
			t.Fatalf("%d records after one commit", n)
		}
		w.Checkpoint("prod", pods, "12")
		commitNow(t, w)
		w.Checkpoint("prod", pods, "13")
		commitNow(t, w)
		if n := len(allChanges(t, s, ChangesQuery{})); n != 0 {
			t.Fatalf("%d records after three commits", n)
		}
		checkIndex(t, s)
	})
}

// logBytes returns the size of the log that the file records.
func logBytes(t *testing.T, s *Store) uint64 {
	var n uint64
	if err := s.view(func(tx *bolt.Tx) error {
		n, _ = getUint64(tx.Bucket(bucketHistory), keyBytes)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkIndex checks that the index keys are those of the records, and the size of the
// log what they take.
func checkIndex(t *testing.T, s *Store) {
	t.Helper()
	want := map[string]bool{}
	var size uint64
	err := s.view(func(tx *bolt.Tx) error {
		log, _ := historyBuckets(tx)
		return log.ForEach(func(k, v []byte) error {
			r, err := parseRecord(seqKey0(k), v)
			if err != nil {
				return err
			}
			size += uint64(len(k) + len(v))
			if len(r.key) > 0 {
				ok := string(append(indexPrefix(indexObject, string(r.cluster), string(r.resource), string(r.key)), k...))
				want[ok] = true
				size += uint64(len(ok))
			}
			rk := string(append(indexPrefix(indexResource, string(r.cluster), string(r.resource), ""), k...))
			want[rk] = true
			size += uint64(len(rk))
			if _, ok := parseRV(r.rv); ok {
				size += 8
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.view(func(tx *bolt.Tx) error {
		_, index := historyBuckets(tx)
		return index.ForEach(func(k, _ []byte) error {
			if k[0] != indexCoverage && k[0] != indexOrigins && !want[string(k)] {
				t.Errorf("index key %q of no record", k)
			}
			delete(want, string(k))
			return nil
		})
	})
	// The records of objects without an 'o' entry are named by their objects' lists,
	// which name no others, and are kept for stored objects only.
	_ = s.view(func(tx *bolt.Tx) error {
		log, _ := historyBuckets(tx)
		return forEachCluster(tx, func(cluster string, cb *bolt.Bucket, _ Identity) error {
			return forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
				objects := rb.Bucket(bucketObjects)
				return eachList(objects, func(k, v []byte) error {
					key := k[:len(k)-1]
					seqs, err := readList(nil, cluster, resource, k, v)
					if err != nil {
						t.Errorf("list of %s %s %s: %v", cluster, resource, key, err)
						return nil
					}
					if len(seqs) > maxListSeqs {
						t.Errorf("list of %s %s %s: %d sequence numbers", cluster, resource, key, len(seqs))
					}
					if objects.Get(key) == nil {
						t.Errorf("list of %s %s %s, which is not stored", cluster, resource, key)
					}
					err = listRecords(log, cluster, resource, k, v, func(seq uint64, _ *record) {
						ok := string(append(indexPrefix(indexObject, cluster, resource, string(key)), seqKey(seq)...))
						if !want[ok] {
							t.Errorf("list of %s %s %s names record %d twice, or it has an 'o' entry", cluster, resource, key, seq)
						}
						delete(want, ok)
					})
					if err != nil {
						t.Errorf("list of %s %s %s: %v", cluster, resource, key, err)
					}
					return nil
				})
			})
		})
	})
	if len(want) > 0 {
		t.Errorf("%d index keys missing", len(want))
	}
	if got := logBytes(t, s); got != size {
		t.Errorf("the log records %d bytes, its records and keys take %d", got, size)
	}
}

func seqKey0(k []byte) uint64 {
	var n uint64
	for _, b := range k {
		n = n<<8 | uint64(b)
	}
	return n
}

// TestHistoryNeverHoldsSecretValues stores a Secret with its values, as a fleet with
// cache.keepSecretData does: the snapshot keeps them, the log never.
func TestHistoryNeverHoldsSecretValues(t *testing.T) {
	secrets := ResourceKey("/v1/secrets?spec=keepSecretData%3Dtrue")
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	secret := testSecret("db", false)
	w.Upsert("prod", secrets, secret)
	w.Checkpoint("prod", secrets, "10")
	enc, err := encodeObject(secret)
	if err != nil {
		t.Fatal(err)
	}
	w.UpsertEncoded("prod", secrets, secret, enc)
	w.Checkpoint("prod", secrets, "11")
	commitNow(t, w)
	if !fileHoldsSecretValue(t, s.Path()) {
		t.Fatal("the test's Secret holds no value in the snapshot: it tests nothing")
	}
	w.Delete("prod", secrets, secret.GetNamespace(), secret.GetName())
	w.Checkpoint("prod", secrets, "12")
	commitNow(t, w)
	changes := allChanges(t, s, ChangesQuery{})
	if len(changes) != 3 || changes[0].Type != ChangeAdded || changes[1].Type != ChangeModified {
		t.Fatalf("records: %v", describe(t, changes))
	}
	for _, c := range changes {
		if c.Object != nil {
			t.Errorf("record %d of a Secret holds its object", c.Seq)
		}
	}
	_ = s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHistory).Bucket(bucketChanges).ForEach(func(_, v []byte) error {
			for _, value := range secretValueForms {
				if bytes.Contains(v, value) {
					t.Errorf("the log holds a value of the Secret: %q", v)
				}
			}
			return nil
		})
	})
	if !fileHoldsSecretValue(t, s.Path()) {
		t.Fatal("the test's Secret holds no value in the snapshot: it tests nothing")
	}
}

// TestHistoryReturnsNoMappedMemory reads changes, then closes the Store, which unmaps
// the file, and reads what was returned: a slice or string into the map would fault.
func TestHistoryReturnsNoMappedMemory(t *testing.T) {
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	for i := range 50 {
		w.Upsert("prod", pods, testPod(t, "a", fmt.Sprint("p", i%5)))
		w.Checkpoint("prod", pods, fmt.Sprint(10+i))
	}
	commitNow(t, w)
	changes := allChanges(t, s, ChangesQuery{})
	history := mustObjectHistory(t, s, "prod", pods, "a", "p1")
	after, err := s.ChangesAfter("prod", pods, "10")
	if err != nil {
		t.Fatal(err)
	}
	var copies [][]byte
	all := slices.Concat(changes, history, after)
	for _, c := range all {
		copies = append(copies, slices.Clone(c.Object))
	}
	// Rewrite the pages the changes came from, then unmap the file.
	w.DropResource("prod", pods)
	commitNow(t, w)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("a returned change points into the file's map: %v", r)
		}
	}()
	for i, c := range all {
		if !bytes.Equal(c.Object, copies[i]) || c.Cluster != "prod" || c.Resource != pods || c.Namespace != "a" {
			t.Fatalf("change %d changed after its transaction: %+v", c.Seq, c)
		}
	}
}

func TestHistoryDisabled(t *testing.T) {
	path := testPath(t)
	s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, object("a", "p1", "1"))
	w.Checkpoint("prod", pods, "10")
	commitNow(t, w)
	s.Close()
	s, w, _ = historyWriter(t, path, HistoryOptions{})
	w.Upsert("prod", pods, object("a", "p1", "2"))
	w.Checkpoint("prod", pods, "11")
	commitNow(t, w)
	if got := allChanges(t, s, ChangesQuery{}); len(got) != 0 {
		t.Fatalf("a disabled log holds %d records", len(got))
	}
	if _, err := s.ChangesAfter("prod", pods, "10"); !errors.Is(err, ErrTooOld) {
		t.Errorf("a disabled log: %v, want ErrTooOld", err)
	}
	if rs := resourceOf(mustLoad(t, s), "prod", pods); rs == nil || rs.ResourceVersion != "11" {
		t.Fatalf("the objects: %+v", rs)
	}
}

// TestHistoryFailedCommit fails commits the way a full disk does: their records are
// committed later, in order, none lost and none twice.
func TestHistoryFailedCommit(t *testing.T) {
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, object("a", "p1", "1"))
	w.Checkpoint("prod", pods, "10")
	commitNow(t, w)
	capAtUsed(t, s)
	for i := range 200 {
		w.Upsert("prod", pods, testPod(t, "a", fmt.Sprint("p", i%3)))
		w.Checkpoint("prod", pods, fmt.Sprint(11+i))
		if i == 100 {
			if err := w.Flush(t.Context()); !errors.Is(err, berrors.ErrMaxSizeReached) {
				t.Fatalf("commit on a full disk: %v", err)
			}
		}
	}
	if err := w.Flush(t.Context()); !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("commit on a full disk: %v", err)
	}
	s.db.MaxSize = 0
	commitNow(t, w)
	got := allChanges(t, s, ChangesQuery{})
	if len(got) != 201 {
		t.Fatalf("%d records, want 201", len(got))
	}
	for i, c := range got[1:] {
		if c.ResourceVersion != fmt.Sprint(11+i) || c.Name != fmt.Sprint("p", i%3) {
			t.Fatalf("record %d: %s %s at %s", i+1, c.Type, c.Name, c.ResourceVersion)
		}
	}
	checkIndex(t, s)
}

// TestHistoryCorruptRecord damages one record: the queries that read it fail with an
// error naming it, the others and the snapshot are not affected, Verify reports it, and
// the retention drops it.
func TestHistoryCorruptRecord(t *testing.T) {
	path := testPath(t)
	s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
	for i := range 3 {
		w.Upsert("prod", pods, object("a", fmt.Sprint("p", i), fmt.Sprint("marker-", i)))
		w.Checkpoint("prod", pods, fmt.Sprint(10+i))
		commitNow(t, w)
	}
	s.Close()
	// The snapshot's objects hold "marker-1" too: damage the record only.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var seqOf1 uint64
	s = openTest(t, path, Options{})
	_ = s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHistory).Bucket(bucketChanges).ForEach(func(k, v []byte) error {
			if bytes.Contains(v, []byte("marker-1")) {
				seqOf1 = seqKey0(k)
				// Every copy, free pages' included: the live one among them.
				for i := 0; ; {
					j := bytes.Index(data[i:], v)
					if j < 0 {
						break
					}
					data[i+j+len(v)-2] ^= 0x20
					i += j + len(v)
				}
			}
			return nil
		})
	})
	s.Close()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path, Options{})
	if movedTo, cause := s.Recovered(); cause != nil {
		t.Fatalf("the snapshot was moved to %s: %v", movedTo, cause)
	}
	if rs := resourceOf(mustLoad(t, s), "prod", pods); rs == nil || len(rs.Objects) != 3 {
		t.Fatal("the objects are lost")
	}
	_, _, err = s.Changes(ChangesQuery{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("record %d", seqOf1)) {
		t.Fatalf("reading a damaged record: %v", err)
	}
	if h := mustObjectHistory(t, s, "prod", pods, "a", "p2"); len(h) != 1 {
		t.Errorf("another object's history: %v", h)
	}
	if err := s.Verify(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Verify: %v", err)
	}
	// Dropped by the retention like any record.
	clock := clocktesting.NewFakeClock(time.Now().Add(48 * time.Hour))
	w = s.NewWriter(WriterOptions{Clock: clock})
	w.Checkpoint("prod", pods, "20")
	commitNow(t, w)
	if got, _, err := s.Changes(ChangesQuery{}); err != nil || len(got) != 0 {
		t.Fatalf("after the retention: %v, %v", got, err)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// TestHistoryLost holds more changes than the Writer keeps for the log.
func TestHistoryLost(t *testing.T) {
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.mu.Lock()
	w.state.logLen = maxPendingLog - 1 // as if as many were pending elsewhere
	w.mu.Unlock()
	w.Upsert("prod", pods, object("a", "p1", "1"))
	w.Upsert("prod", pods, object("a", "p2", "1"))
	w.Checkpoint("prod", pods, "10")
	commitNow(t, w)
	w.Upsert("prod", pods, object("a", "p3", "1"))
	w.Checkpoint("prod", pods, "11")
	commitNow(t, w)
	if got := describe(t, allChanges(t, s, ChangesQuery{})); !slices.Equal(got, []string{
		"Lost prod /v1/pods  10 -", "Added prod /v1/pods a/p3 11 1",
	}) {
		t.Errorf("records: %q", got)
	}
	if got, err := s.ChangesAfter("prod", pods, "10"); err != nil || len(got) != 1 {
		t.Errorf("after the loss: %v, %v", got, err)
	}
	if _, err := s.ChangesAfter("prod", pods, "9"); !errors.Is(err, ErrTooOld) {
		t.Errorf("across the loss: %v, want ErrTooOld", err)
	}
}

// FuzzDecodeChange decodes arbitrary bytes as a record, sealed so that the parser sees
// them: an error wrapping ErrCorrupt or a change, never a panic.
func FuzzDecodeChange(f *testing.F) {
	f.Add(appendRecord(nil, "prod", "/v1/pods", "a/p1", "10", "9", 1, []byte{0xa0})[sealSize:])
	f.Add(appendRecord(nil, "prod", "", "", "", "", 1, nil)[sealSize:])
	f.Add([]byte{})
	f.Add([]byte{recordFormat, byte(ChangeDeleted), 0, 0, 0, 0, 0, 0, 0, 0, 0xff})
	f.Fuzz(func(t *testing.T, value []byte) {
		stored := seal(changesSum, seqKey(7), value)
		c, err := decodeChange(7, stored)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not wrapping ErrCorrupt: %v", err)
			}
			return
		}
		if c.Seq != 7 || c.Cluster == "" {
			t.Fatalf("decoded %+v", c)
		}
		if c.Object != nil && len(value) > 0 && &c.Object[0] == &value[len(value)-len(c.Object)] {
			t.Fatal("the object aliases the stored value")
		}
	})
}

// TestHistoryImportCluster imports a cluster's state over the one a file holds: the log
// records the replacement and no longer covers the cluster's resources.
func TestHistoryImportCluster(t *testing.T) {
	src, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, object("a", "p1", "new"))
	w.Checkpoint("prod", pods, "900")
	commitNow(t, w)
	var state bytes.Buffer
	if err := src.ExportCluster("prod", &state, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	dst, w2, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w2.Upsert("prod", pods, object("a", "p1", "old"))
	w2.Checkpoint("prod", pods, "10")
	commitNow(t, w2)
	if _, err := dst.ImportCluster("prod", &state, ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.ChangesAfter("prod", pods, "10"); !errors.Is(err, ErrTooOld) {
		t.Errorf("after an import: %v, want ErrTooOld", err)
	}
	if got := describe(t, allChanges(t, dst, ChangesQuery{})); !slices.Equal(got, []string{
		"Added prod /v1/pods a/p1 10 old", "ClusterReplaced prod    -",
	}) {
		t.Errorf("records: %q", got)
	}
	checkIndex(t, dst)
}

// TestHistoryTimesInOrder commits the changes of several resources handed over a span
// of time together: the records are in the order of their times, so that a query by
// time finds exactly those since.
func TestHistoryTimesInOrder(t *testing.T) {
	s, w, clock := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	start := clock.Now()
	for i := range 1000 {
		c := fmt.Sprint("cluster-", i%10)
		w.Upsert(c, pods, object("ns", fmt.Sprint("o", i%100), "1"))
		w.Checkpoint(c, pods, fmt.Sprint(10+i))
		clock.Step(time.Minute)
		if i%200 == 199 {
			commitNow(t, w)
		}
	}
	since := start.Add(900 * time.Minute)
	if got := allChanges(t, s, ChangesQuery{Since: since}); len(got) != 100 || !got[0].Time.Equal(since) {
		t.Errorf("since minute 900: %d records, the first of %v", len(got), got[0].Time)
	}
	if got := allChanges(t, s, ChangesQuery{Since: since, Cluster: "cluster-3"}); len(got) != 10 {
		t.Errorf("since minute 900, one cluster: %d records", len(got))
	}
	checkIndex(t, s)
}

// TestHistoryRecordsCompressed checks that a record holds its object compressed where S2
// shortens it by an eighth, and as it is otherwise, and that each decodes to the object.
func TestHistoryRecordsCompressed(t *testing.T) {
	pod := testPod(t, "a", "big")
	plain, err := encodeObject(pod)
	if err != nil {
		t.Fatal(err)
	}
	other := testPod(t, "a", "shortened")
	otherPlain, err := encodeObject(other)
	if err != nil {
		t.Fatal(err)
	}
	shortened := Codec{Compress: true}.Shorten(otherPlain)
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, pod)
	w.Upsert("prod", pods, object("a", "small", "1"))
	w.UpsertEncoded("prod", pods, other, shortened)
	w.Checkpoint("prod", pods, "10")
	w.Upsert("prod", pods, object("a", "big", "2")) // pod's record is encoded for the log alone
	w.Checkpoint("prod", pods, "11")
	commitNow(t, w)
	for _, tc := range []struct {
		name       string
		compressed bool
		maxLen     int
	}{
		{"big", true, len(plain) - len(plain)/8},
		{"small", false, minCompressed},
		{"shortened", true, len(shortened)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustObjectHistory(t, s, "prod", pods, "a", tc.name)[0]
			if got := c.Object[0] == formatCompressed; got != tc.compressed || len(c.Object) > tc.maxLen {
				t.Fatalf("record of %d bytes, compressed %v; want compressed %v, at most %d bytes", len(c.Object), got, tc.compressed, tc.maxLen)
			}
			obj, err := c.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if name := obj.(interface{ GetName() string }).GetName(); name != tc.name {
				t.Fatalf("decoded %q", name)
			}
			if got, _ := encodeObject(obj); tc.name == "big" && !bytes.Equal(got, plain) {
				t.Fatal("the compressed record does not decode to the object")
			}
		})
	}
}
