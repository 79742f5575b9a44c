package persist

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// objectVersions returns "type rv" of each record of ObjectHistory.
func objectVersions(t *testing.T, s *Store, cluster string, resource ResourceKey, namespace, name string) []string {
	t.Helper()
	var out []string
	for _, c := range mustObjectHistory(t, s, cluster, resource, namespace, name) {
		out = append(out, fmt.Sprint(c.Type, " ", c.ResourceVersion))
	}
	return out
}

// listOf returns the sequence numbers of the list of cluster's pod ns/name, nil if it
// has none.
func listOf(t *testing.T, s *Store, cluster, namespace, name string) []uint64 {
	t.Helper()
	var seqs []uint64
	err := s.view(func(tx *bolt.Tx) error {
		objects := getBucket(tx, bucketClusters, []byte(cluster), bucketResources, []byte(pods), bucketObjects)
		if objects == nil {
			return nil
		}
		lk := listKey([]byte(objectKey(namespace, name)))
		if v := objects.Get(lk); v != nil {
			var err error
			seqs, err = readList(nil, cluster, string(pods), lk, v)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// objectEntries counts the 'o' entries of cluster's pod ns/name.
func objectEntries(t *testing.T, s *Store, cluster, namespace, name string) int {
	t.Helper()
	n := 0
	_ = s.view(func(tx *bolt.Tx) error {
		_, index := historyBuckets(tx)
		prefix := indexPrefix(indexObject, cluster, string(pods), objectKey(namespace, name))
		c := index.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			n++
		}
		return nil
	})
	return n
}

// TestObjectLists follows one object's records through what moves them between its
// list and 'o' entries: changes past the list's bound, in one commit and one a commit,
// its deletion and re-creation, its resource's and its cluster's drop, a handover
// import over its cluster, and the log switched off and on. At each step ObjectHistory
// returns every record of the object in order, the index and the lists name each
// record once (checkIndex), Verify passes, and Load returns the objects without the
// lists.
func TestObjectLists(t *testing.T) {
	path := testPath(t)
	s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
	rv := 0
	var want []string
	change := func(typ ChangeType, version int) {
		t.Helper()
		rv++
		switch typ {
		case ChangeDeleted:
			w.Delete("prod", pods, "ns", "p")
		default:
			w.Upsert("prod", pods, object("ns", "p", strconv.Itoa(version)))
		}
		w.Checkpoint("prod", pods, strconv.Itoa(rv))
		want = append(want, fmt.Sprint(typ, " ", rv))
	}
	check := func(step string, stored bool) {
		t.Helper()
		if got := objectVersions(t, s, "prod", pods, "ns", "p"); !slices.Equal(got, want) {
			t.Fatalf("%s: ObjectHistory %q, want %q", step, got, want)
		}
		checkIndex(t, s)
		if err := s.Verify(); err != nil {
			t.Fatalf("%s: Verify: %v", step, err)
		}
		rs := resourceOf(mustLoad(t, s), "prod", pods)
		if n := 0; rs != nil {
			n = len(rs.Objects)
			if stored && n != 2 || !stored && n != 1 {
				t.Fatalf("%s: Load returns %d objects", step, n)
			}
		}
	}
	// Another object beside it all along, whose history nothing here touches.
	w.Upsert("prod", pods, object("ns", "q", "1"))
	change(ChangeAdded, 0)
	commitNow(t, w)
	check("added", true)
	if got := listOf(t, s, "prod", "ns", "p"); len(got) != 1 || objectEntries(t, s, "prod", "ns", "p") != 0 {
		t.Fatalf("after one change: list %v, %d 'o' entries", got, objectEntries(t, s, "prod", "ns", "p"))
	}

	// Past the bound, a commit each: the oldest go to 'o' entries, the list keeps at
	// most maxListSeqs.
	for i := range maxListSeqs + 5 {
		change(ChangeModified, i+1)
		commitNow(t, w)
	}
	check("modified one a commit", true)
	list, entries := len(listOf(t, s, "prod", "ns", "p")), objectEntries(t, s, "prod", "ns", "p")
	if list > maxListSeqs || list < listKeep || entries == 0 || list+entries != len(want) {
		t.Fatalf("list of %d, %d 'o' entries, for %d records", list, entries, len(want))
	}
	// Many in one commit: a Writer keeps each change of the log (the pending state
	// coalesces the objects, not the records).
	for i := range 3 * maxListSeqs {
		rv++
		w.Upsert("prod", pods, object("ns", "p", strconv.Itoa(100+i)))
		want = append(want, fmt.Sprint(ChangeModified, " ", rv))
	}
	w.Checkpoint("prod", pods, strconv.Itoa(rv))
	commitNow(t, w)
	for i := range want[len(want)-3*maxListSeqs:] {
		want[len(want)-3*maxListSeqs+i] = fmt.Sprint(ChangeModified, " ", rv)
	}
	check("modified in one commit", true)

	// Deleted: the list goes to 'o' entries; re-created: a new list.
	change(ChangeDeleted, 0)
	commitNow(t, w)
	check("deleted", false)
	if got := listOf(t, s, "prod", "ns", "p"); got != nil {
		t.Fatalf("the list of a deleted object: %v", got)
	}
	change(ChangeAdded, 1)
	commitNow(t, w)
	check("added again", true)
	if got := listOf(t, s, "prod", "ns", "p"); len(got) != 1 {
		t.Fatalf("the list of an object added again: %v", got)
	}
	// Deleted and added again in one commit.
	change(ChangeDeleted, 0)
	change(ChangeAdded, 2)
	commitNow(t, w)
	check("deleted and added in one commit", true)

	// The resource dropped (a relist's reset) and listed again: the records before it
	// stay the object's, after the reset's own record (which ObjectHistory leaves out).
	w.DropResource("prod", pods)
	commitNow(t, w)
	w.Upsert("prod", pods, object("ns", "q", "1"))
	change(ChangeAdded, 3)
	commitNow(t, w)
	check("resource dropped and listed again", true)

	// The cluster dropped, and added again.
	w.DropCluster("prod")
	commitNow(t, w)
	w.Upsert("prod", pods, object("ns", "q", "1"))
	change(ChangeAdded, 4)
	commitNow(t, w)
	check("cluster dropped and added again", true)

	// The log off: a Writer without it clears it; its lists stay in the objects
	// buckets, and name records before the next log's first.
	last := allChanges(t, s, ChangesQuery{})
	lastSeq := last[len(last)-1].Seq
	s.Close()
	s, w, _ = historyWriter(t, path, HistoryOptions{})
	w.Upsert("prod", pods, object("ns", "q", "2"))
	w.Checkpoint("prod", pods, strconv.Itoa(rv+1))
	commitNow(t, w)
	if got := allChanges(t, s, ChangesQuery{}); len(got) != 0 {
		t.Fatalf("a Writer without the log left %d records", len(got))
	}
	if got := listOf(t, s, "prod", "ns", "p"); len(got) == 0 {
		t.Fatal("the list went with the log: this test no longer covers a list that outlives its log")
	}
	s.Close()
	s, w, _ = historyWriter(t, path, HistoryOptions{Enabled: true})
	want = nil
	rv++
	change(ChangeModified, 5)
	commitNow(t, w)
	check("the log off and on", true)
	if got := allChanges(t, s, ChangesQuery{}); len(got) == 0 || got[0].Seq <= lastSeq {
		t.Fatalf("the next log's records start at %v, the last log's ended at %d", got, lastSeq)
	}
	if got := listOf(t, s, "prod", "ns", "p"); len(got) != 1 {
		t.Fatalf("the list after the log was off: %v", got)
	}

	// Imported over: the cluster's records before the import stay its objects'.
	src, sw, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	sw.Upsert("prod", pods, object("ns", "x", "1"))
	sw.Checkpoint("prod", pods, "1000")
	commitNow(t, sw)
	var state bytes.Buffer
	if err := src.ExportCluster("prod", &state, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportCluster("prod", &state, ImportOptions{Log: true}); err != nil {
		t.Fatalf("ImportCluster: %v", err)
	}
	if got := objectVersions(t, s, "prod", pods, "ns", "p"); !slices.Equal(got, want) {
		t.Fatalf("imported over: ObjectHistory %q, want %q", got, want)
	}
	checkIndex(t, s)
	if err := s.Verify(); err != nil {
		t.Fatalf("imported over: Verify: %v", err)
	}
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range info.Clusters {
		for _, r := range c.Resources {
			if want := len(resourceOf(mustLoad(t, s), c.Name, r.Resource).Objects); r.Objects != want {
				t.Errorf("Inspect: %s %s holds %d objects, Load returns %d", c.Name, r.Resource, r.Objects, want)
			}
		}
	}
}

// TestObjectListsRetention: the records that the retention drops leave the lists that
// name them when the lists are written again, and are skipped until then.
func TestObjectListsRetention(t *testing.T) {
	s, w, clock := historyWriter(t, testPath(t), HistoryOptions{Enabled: true, Retention: time.Hour})
	for i := range 5 {
		w.Upsert("prod", pods, object("ns", "p", strconv.Itoa(i)))
		w.Upsert("prod", pods, object("ns", "q", strconv.Itoa(i)))
		w.Checkpoint("prod", pods, strconv.Itoa(i+1))
		commitNow(t, w)
		clock.Step(20 * time.Minute)
	}
	// Two hours on, a change of q drops the records older than an hour: p's list
	// names them until p changes again.
	clock.Step(time.Hour)
	w.Upsert("prod", pods, object("ns", "q", "9"))
	w.Checkpoint("prod", pods, "9")
	commitNow(t, w)
	if got := objectVersions(t, s, "prod", pods, "ns", "p"); len(got) != 0 {
		t.Errorf("ObjectHistory of p: %q, want none", got)
	}
	if got := listOf(t, s, "prod", "ns", "p"); len(got) != 5 {
		t.Errorf("p's list, not written since: %v", got)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	w.Upsert("prod", pods, object("ns", "p", "9"))
	w.Checkpoint("prod", pods, "10")
	commitNow(t, w)
	if got := listOf(t, s, "prod", "ns", "p"); len(got) != 1 {
		t.Errorf("p's list, written again: %v", got)
	}
	if got := objectVersions(t, s, "prod", pods, "ns", "p"); !slices.Equal(got, []string{"Modified 10"}) {
		t.Errorf("ObjectHistory of p: %q", got)
	}
	checkIndex(t, s)
}

// TestObjectKeyWithZero: a key with a 0 byte, which no Kubernetes object has, would be
// taken for a list: the Writer refuses it, and ImportCluster refuses a state with one.
func TestObjectKeyWithZero(t *testing.T) {
	s, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	// As an object without a name: the resource is not stored until relisted.
	w.Upsert("prod", deployments, object("ns", "p\x00", "1"))
	w.Checkpoint("prod", deployments, "1")
	if st := w.Stats(); st.Rejected != 1 || !errors.Is(st.LastError, ErrInvalid) {
		t.Fatalf("Upsert: %d rejected, %v; want ErrInvalid", st.Rejected, st.LastError)
	}
	w.Delete("prod", pods, "ns", "q\x00")
	if st := w.Stats(); st.Rejected != 2 || !errors.Is(st.LastError, ErrInvalid) {
		t.Fatalf("Delete: %d rejected, %v; want ErrInvalid", st.Rejected, st.LastError)
	}
	w.Upsert("prod", pods, object("ns", "p", "1"))
	w.Checkpoint("prod", pods, "1")
	commitNow(t, w)
	if rs := resourceOf(mustLoad(t, s), "prod", pods); rs == nil || len(rs.Objects) != 1 {
		t.Fatalf("stored: %+v", rs)
	}
	if rs := resourceOf(mustLoad(t, s), "prod", deployments); rs != nil {
		t.Fatalf("stored: %+v", rs)
	}
	// A file that holds one anyway (written by hand here), exported: the state
	// carries it, sealed, and the importer refuses it.
	if err := s.update(func(tx *bolt.Tx) error {
		objects := getBucket(tx, bucketClusters, []byte("prod"), bucketResources, []byte(pods), bucketObjects)
		v, err := unsealBytes(objectsSum("prod", string(pods)), "ns/p", objects.Get([]byte("ns/p")))
		if err != nil {
			return err
		}
		return objects.Put([]byte("ns/p\x00q"), seal(objectsSum("prod", string(pods)), []byte("ns/p\x00q"), v))
	}); err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := s.ExportCluster("prod", &state, ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(state.Bytes(), []byte("ns/p\x00q")) {
		t.Fatal("the state does not carry the key")
	}
	dst := openTest(t, testPath(t), Options{})
	if _, err := dst.ImportCluster("prod", bytes.NewReader(state.Bytes()), ImportOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ImportCluster of a state with a key with a 0 byte: %v, want ErrCorrupt", err)
	}
}

// FuzzReadList: readList reads what encodeList wrote, and of any other value either
// returns what encodeList would have written it from, or fails with ErrCorrupt; a
// value of another object, resource or cluster fails its seal.
func FuzzReadList(f *testing.F) {
	lk := listKey([]byte("ns/p"))
	f.Add([]byte{1, 2, 3}, []byte{})
	f.Add([]byte{}, encodeList("prod", string(pods), lk, []uint64{1, 2}))
	f.Add([]byte{0}, encodeList("prod", string(pods), lk, []uint64{7})[:12])
	f.Fuzz(func(t *testing.T, steps, raw []byte) {
		var seqs []uint64
		var s uint64
		for _, b := range steps {
			s += uint64(b) + 1
			seqs = append(seqs, s)
		}
		v := encodeList("prod", string(pods), lk, seqs)
		got, err := readList(nil, "prod", string(pods), lk, v)
		if err != nil || !slices.Equal(got, seqs) {
			t.Fatalf("readList(encodeList(%v)) = %v, %v", seqs, got, err)
		}
		for _, other := range [][3]string{{"dev", string(pods), "ns/p"}, {"prod", string(deployments), "ns/p"}, {"prod", string(pods), "ns/q"}} {
			if _, err := readList(nil, other[0], other[1], listKey([]byte(other[2])), v); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("the list read as %v's: %v", other, err)
			}
		}
		// An exact copy, so that a read past the value would fail the bounds check.
		raw = slices.Clip(slices.Clone(raw))
		got, err = readList(nil, "prod", string(pods), lk, raw)
		switch {
		case err == nil:
			if !bytes.Equal(raw, encodeList("prod", string(pods), lk, got)) {
				t.Fatalf("%x read as %v, which is not what it holds", raw, got)
			}
		case !errors.Is(err, ErrCorrupt):
			t.Fatalf("%x: %v, want ErrCorrupt", raw, err)
		}
	})
}
