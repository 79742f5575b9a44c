package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// writeIndexSample writes a change log of two clusters with the records of objects, of
// a resource's drop and of a cluster's, and returns the file's bytes.
func writeIndexSample(t *testing.T, path string) []byte {
	t.Helper()
	s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
	w.Upsert("prod", pods, object("a", "p1", "1"))
	w.Upsert("prod", pods, object("a", "p2", "1"))
	w.Checkpoint("prod", pods, "10")
	w.Upsert("dev", pods, object("a", "q1", "1"))
	w.Checkpoint("dev", pods, "10")
	commitNow(t, w)
	w.Upsert("prod", pods, object("a", "p1", "2"))
	w.Checkpoint("prod", pods, "11")
	commitNow(t, w)
	w.Upsert("prod", pods, object("a", "p2", "2"))
	w.Checkpoint("prod", pods, "12")
	w.Upsert("dev", pods, object("a", "q1", "2"))
	w.Checkpoint("dev", pods, "11")
	commitNow(t, w)
	w.Delete("prod", pods, "a", "p1")
	w.Checkpoint("prod", pods, "13")
	w.Upsert("dev", deployments, object("a", "d1", "1"))
	w.Checkpoint("dev", deployments, "5")
	w.Upsert("old", pods, object("a", "o1", "1"))
	w.Checkpoint("old", pods, "3")
	commitNow(t, w)
	w.DropResource("dev", deployments)
	w.DropCluster("old")
	commitNow(t, w)
	checkIndex(t, s)
	if err := s.Verify(); err != nil {
		t.Fatalf("Verify of the sample: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// sampleEntry returns the 'r' entry (kind indexResource) or the 'o' entry of the record
// of cluster and resource at resourceVersion rv (of the object key, if not empty), and
// the record's sequence number.
func sampleEntry(t *testing.T, tx *bolt.Tx, kind byte, cluster string, resource ResourceKey, key, rv string) ([]byte, uint64) {
	t.Helper()
	log, _ := historyBuckets(tx)
	var found []byte
	var seq uint64
	_ = log.ForEach(func(k, v []byte) error {
		r, err := parseRecord(seqKey0(k), v)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.cluster) == cluster && string(r.resource) == string(resource) && string(r.rv) == rv && (key == "" || string(r.key) == key) {
			found = append(indexPrefix(kind, cluster, string(resource), string(r.key)), k...)
			seq = seqKey0(k)
		}
		return nil
	})
	if found == nil {
		t.Fatalf("no record of %s %s %s at %s", cluster, resource, key, rv)
	}
	return found, seq
}

// withSeq returns index key k with sequence number seq.
func withSeq(k []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(bytes.Clone(k[:len(k)-8]), seq)
}

// TestIndexDamage damages the change log's index, which is not sealed, one entry at a
// time, as a flipped byte, a lost entry or an added one would: Verify reports each; a
// resume (ChangesAfter) fails with ErrCorrupt rather than returning a wrong sequence,
// wherever the entries it reads are damaged; the queries that read a damaged entry
// (Changes of a cluster, ObjectHistory) fail with ErrCorrupt naming it, and the others
// answer as before; the snapshot's objects load, and the file is not moved aside.
// An entry lost from a resource or object (or moved to another) is seen by Verify
// only: a read would have to scan the log for it.
func TestIndexDamage(t *testing.T) {
	dir := t.TempDir()
	data := writeIndexSample(t, filepath.Join(dir, "sample.db"))
	type damage func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error
	// put replaces the entry k by k2 with value v.
	move := func(t *testing.T, index *bolt.Bucket, k, k2, v []byte) error {
		if err := index.Delete(k); err != nil {
			return err
		}
		return index.Put(k2, v)
	}
	rv := func(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }
	for _, tc := range []struct {
		name   string
		damage damage
		// resume is what ChangesAfter("prod", pods, "10") fails with, nil if it
		// answers as before (the damage is not in what it reads).
		resume error
		// changes: Changes of cluster prod fails with ErrCorrupt.
		changes bool
		// object is the object of prod's pods whose ObjectHistory fails.
		object string
		// lost: the entry is lost to the reads of its resource or object, which
		// answer without its record; Verify only can see it.
		lost bool
	}{
		{name: "'r' value lowered before the range", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "12")
			return index.Put(k, rv(9))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' value raised", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "11")
			return index.Put(k, rv(99))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' value emptied", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "13")
			return index.Put(k, []byte{})
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' value a byte longer", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "13")
			return index.Put(k, append(rv(13), 0))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' key's seq moved to another cluster's record", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "12")
			_, other := sampleEntry(t, tx, indexResource, "dev", pods, "", "11")
			return move(t, index, k, withSeq(k, other), rv(12))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' key's seq past the log", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, seq := sampleEntry(t, tx, indexResource, "prod", pods, "", "13")
			return move(t, index, k, withSeq(k, seq+100), rv(13))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' key's resource flipped", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "12")
			k2 := bytes.Replace(k, []byte("pods"), []byte("podz"), 1)
			return move(t, index, k, k2, rv(12))
		}, changes: true, lost: true},
		{name: "'r' key's cluster flipped", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "dev", pods, "", "11")
			k2 := bytes.Replace(k, []byte("dev"), []byte("ded"), 1)
			return move(t, index, k, k2, rv(11))
		}, lost: true},
		{name: "'r' key malformed", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "12")
			return move(t, index, k, append(bytes.Clone(k), 0), rv(12))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' entry added, of another cluster's record", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "13")
			_, other := sampleEntry(t, tx, indexResource, "dev", pods, "", "11")
			return index.Put(withSeq(k, other), rv(11))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' entry added, of no record", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, seq := sampleEntry(t, tx, indexResource, "prod", pods, "", "13")
			return index.Put(withSeq(k, seq+1000), rv(14))
		}, resume: ErrCorrupt, changes: true},
		{name: "'r' entry lost", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "prod", pods, "", "12")
			return index.Delete(k)
		}, lost: true},
		{name: "'r' entry of a cluster's drop lost", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexResource, "old", "", "", "")
			return index.Delete(k)
		}, lost: true},
		// p1 was deleted: its records have 'o' entries. p2's are named by its list.
		{name: "'o' entry lost", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexObject, "prod", pods, "a/p1", "11")
			if index.Get(k) == nil {
				t.Fatalf("no entry %q", k)
			}
			return index.Delete(k)
		}, lost: true},
		{name: "'o' key's seq moved to another object's record", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexObject, "prod", pods, "a/p1", "11")
			_, other := sampleEntry(t, tx, indexObject, "prod", pods, "a/p2", "12")
			return move(t, index, k, withSeq(k, other), []byte{})
		}, object: "p1"},
		{name: "'o' key's name flipped", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexObject, "prod", pods, "a/p1", "11")
			return move(t, index, k, bytes.Replace(k, []byte("a/p1"), []byte("a/p7"), 1), []byte{})
		}, object: "p7", lost: true},
		{name: "'o' entry added, of no record", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, seq := sampleEntry(t, tx, indexObject, "prod", pods, "a/p2", "12")
			return index.Put(withSeq(k, seq+1000), []byte{})
		}, object: "p2"},
		{name: "'o' entry given a value", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexObject, "prod", pods, "a/p1", "11")
			return index.Put(k, []byte{0})
		}, object: "p1"},
		{name: "'o' entry added, of a record that p2's list names", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k, _ := sampleEntry(t, tx, indexObject, "prod", pods, "a/p2", "12")
			return index.Put(k, []byte{})
		}, object: "p2"},
		{name: "list lost", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return sampleObjects(tx).Delete(listKey([]byte("a/p2")))
		}, lost: true},
		{name: "list's record lost", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return damageList(t, tx, func(seqs []uint64) []uint64 { return seqs[1:] })
		}, lost: true},
		{name: "list names another object's record", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			_, other := sampleEntry(t, tx, indexObject, "prod", pods, "a/p1", "11")
			return damageList(t, tx, func(seqs []uint64) []uint64 { return []uint64{other, seqs[1]} })
		}, object: "p2"},
		{name: "list names a record past the log", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return damageList(t, tx, func(seqs []uint64) []uint64 { return append(seqs, seqs[len(seqs)-1]+1000) })
		}, object: "p2"},
		{name: "list's sequence numbers out of order", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return damageList(t, tx, func(seqs []uint64) []uint64 { return []uint64{seqs[1], seqs[0]} })
		}, object: "p2"},
		{name: "list a byte short, sealed", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			lk := listKey([]byte("a/p2"))
			v := bytes.Clone(sampleObjects(tx).Get(lk))
			v = v[:len(v)-1]
			sealHead(v, listSum("prod", string(pods)), lk)
			return sampleObjects(tx).Put(lk, v)
		}, object: "p2"},
		{name: "list's seal broken", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			lk := listKey([]byte("a/p2"))
			v := bytes.Clone(sampleObjects(tx).Get(lk))
			v[len(v)-1] ^= 1
			return sampleObjects(tx).Put(lk, v)
		}, object: "p2"},
		{name: "'o' entry for a record of no object", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			_, seq := sampleEntry(t, tx, indexResource, "dev", deployments, "", "")
			return index.Put(append(indexPrefix(indexObject, "prod", string(pods), "a/p2"), seqKey(seq)...), []byte{})
		}, object: "p2"},
		{name: "coverage malformed", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			k := indexPrefix(indexCoverage, "prod", string(pods), "")
			return index.Put(k, index.Get(k)[:15])
		}, resume: ErrCorrupt},
		// A coverage that still parses but says what the log does not hold: a resume
		// from before its real start would miss the changes in between, one from
		// after its real start would be refused. Its seal tells.
		{name: "coverage's resourceVersion lowered", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return damageCoverage(index, "prod", pods, func(v []byte) { binary.BigEndian.PutUint64(v, binary.BigEndian.Uint64(v)-5) })
		}, resume: ErrCorrupt},
		{name: "coverage's seq raised", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return damageCoverage(index, "prod", pods, func(v []byte) { binary.BigEndian.PutUint64(v[8:], binary.BigEndian.Uint64(v[8:])+2) })
		}, resume: ErrCorrupt},
		{name: "unknown kind of entry", damage: func(t *testing.T, tx *bolt.Tx, index *bolt.Bucket) error {
			return index.Put([]byte("zzz"), nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.NewReplacer(" ", "-", "'", "", ",", "").Replace(tc.name)+".db")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			s := openTest(t, path, Options{})
			want := struct {
				resume  []string
				changes int
				objects map[string][]string
			}{objects: map[string][]string{}}
			// What the undamaged log answers.
			versions := func(changes []Change) []string {
				var out []string
				for _, c := range changes {
					out = append(out, fmt.Sprint(c.Seq, " ", c.Type, " ", c.Name, " ", c.ResourceVersion))
				}
				return out
			}
			after, err := s.ChangesAfter("prod", pods, "10")
			if err != nil {
				t.Fatal(err)
			}
			want.resume = versions(after)
			want.changes = len(allChanges(t, s, ChangesQuery{Cluster: "prod"}))
			for _, name := range []string{"p1", "p2", "p7"} {
				want.objects[name] = versions(mustObjectHistory(t, s, "prod", pods, "a", name))
			}
			if err := s.update(func(tx *bolt.Tx) error {
				_, index := historyBuckets(tx)
				return tc.damage(t, tx, index)
			}); err != nil {
				t.Fatal(err)
			}
			// The errors name what they found in the mapped pages: each error of their
			// chains is read again once the map is gone (one that kept a view of the
			// pages faults there, or reads something else).
			var failures []error
			defer func() {
				before := errorTexts(failures)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if after := errorTexts(failures); !slices.Equal(after, before) {
					t.Errorf("the errors read %q once the snapshot is closed, %q before", after, before)
				}
			}()
			if err := s.Verify(); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Verify: %v, want ErrCorrupt", err)
			} else {
				failures = append(failures, err)
				t.Logf("Verify: %v", err)
			}
			after, err = s.ChangesAfter("prod", pods, "10")
			if err != nil {
				failures = append(failures, err)
			}
			switch {
			case tc.lost:
			case tc.resume == nil && (err != nil || !slices.Equal(versions(after), want.resume)):
				t.Errorf("ChangesAfter: %q, %v; want %q", versions(after), err, want.resume)
			case tc.resume != nil && !errors.Is(err, tc.resume):
				t.Errorf("ChangesAfter: %q, %v; want %v", versions(after), err, tc.resume)
			}
			if _, err := s.ChangesSince("prod", pods, "11"); (tc.resume == ErrCorrupt) != errors.Is(err, ErrCorrupt) {
				t.Errorf("ChangesSince: %v", err)
			}
			_, _, err = s.Changes(ChangesQuery{Cluster: "prod", Limit: 1000})
			if err != nil {
				failures = append(failures, err)
			}
			if tc.changes != errors.Is(err, ErrCorrupt) {
				t.Errorf("Changes of cluster prod: %v, want ErrCorrupt: %v", err, tc.changes)
			}
			if _, _, err := s.Changes(ChangesQuery{MatchCluster: func(c string) bool { return c == "prod" }}); tc.changes != errors.Is(err, ErrCorrupt) {
				t.Errorf("Changes of the clusters that match prod: %v, want ErrCorrupt: %v", err, tc.changes)
			}
			if got := allChanges(t, s, ChangesQuery{}); len(got) == 0 {
				t.Error("the whole log reads as empty")
			}
			for name, want := range want.objects {
				h, err := s.ObjectHistory("prod", pods, "a", name)
				if err != nil {
					failures = append(failures, err)
				}
				if name == tc.object {
					if !errors.Is(err, ErrCorrupt) {
						t.Errorf("ObjectHistory of %s: %q, %v; want ErrCorrupt", name, versions(h), err)
					}
					continue
				}
				if !tc.lost && (err != nil || !slices.Equal(versions(h), want)) {
					t.Errorf("ObjectHistory of %s: %q, want %q", name, versions(h), want)
				}
			}
			if movedTo, cause := s.Recovered(); cause != nil {
				t.Fatalf("the snapshot was moved to %s: %v", movedTo, cause)
			}
			if rs := resourceOf(mustLoad(t, s), "prod", pods); rs == nil || len(rs.Objects) != 1 || rs.ResourceVersion != "13" {
				t.Errorf("the objects: %+v", rs)
			}
		})
	}
}

// TestLegacyCoverage: a coverage of a build before they were sealed (its 16 bytes alone)
// is read as it is, passes Verify, and is sealed by the next commit of its resource.
func TestLegacyCoverage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "legacy.db")
	if err := os.WriteFile(path, writeIndexSample(t, filepath.Join(t.TempDir(), "sample.db")), 0o600); err != nil {
		t.Fatal(err)
	}
	s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
	want, err := s.ChangesAfter("prod", pods, "10")
	if err != nil {
		t.Fatal(err)
	}
	key := indexPrefix(indexCoverage, "prod", string(pods), "")
	stored := func() []byte {
		var v []byte
		if err := s.view(func(tx *bolt.Tx) error {
			_, index := historyBuckets(tx)
			v = bytes.Clone(index.Get(key))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return v
	}
	sealed := stored()
	if len(sealed) != sealSize+16 {
		t.Fatalf("the coverage is %x, want a sealed value", sealed)
	}
	if err := s.update(func(tx *bolt.Tx) error {
		_, index := historyBuckets(tx)
		return index.Put(key, sealed[sealSize:])
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(); err != nil {
		t.Errorf("Verify of a log with a legacy coverage: %v", err)
	}
	got, err := s.ChangesAfter("prod", pods, "10")
	if err != nil || !slices.EqualFunc(got, want, func(a, b Change) bool { return a.Seq == b.Seq }) {
		t.Errorf("ChangesAfter over a legacy coverage: %d changes, %v; want %d", len(got), err, len(want))
	}
	if _, err := s.ChangesAfter("prod", pods, "9"); !errors.Is(err, ErrTooOld) {
		t.Errorf("ChangesAfter from before a legacy coverage: %v, want ErrTooOld", err)
	}
	w.Upsert("prod", pods, object("a", "p2", "3"))
	w.Checkpoint("prod", pods, "14")
	commitNow(t, w)
	if v := stored(); !bytes.Equal(v, sealed) {
		t.Errorf("after a commit of its resource, the coverage is %x, want %x (sealed, as it was)", v, sealed)
	}
	if got, err := s.ChangesAfter("prod", pods, "10"); err != nil || len(got) != len(want)+1 {
		t.Errorf("ChangesAfter once sealed again: %d changes, %v; want %d", len(got), err, len(want)+1)
	}
}

// damageCoverage changes the value of the coverage of (cluster, resource) with change,
// given its 16 bytes, and leaves its seal as it was.
func damageCoverage(index *bolt.Bucket, cluster string, resource ResourceKey, change func(v []byte)) error {
	k := indexPrefix(indexCoverage, cluster, string(resource), "")
	v := bytes.Clone(index.Get(k))
	if len(v) != sealSize+16 {
		return fmt.Errorf("coverage %q is %d bytes, want a sealed one", k, len(v))
	}
	change(v[sealSize:])
	return index.Put(k, v)
}

// errorTexts returns the message of every error in the chains of errs, in the order
// errors.Is walks them.
func errorTexts(errs []error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		out = append(out, err.Error())
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		}
	}
	for _, err := range errs {
		walk(err)
	}
	return out
}

// TestParseRV: parseRV accepts what strconv.ParseUint in base 10 does, of at most 20
// bytes, as builds before it parsed the resourceVersions of the index.
func TestParseRV(t *testing.T) {
	for _, rv := range []string{"", "0", "7", "007", "12345", "-1", "+1", "1_000", " 1", "1 ", "1a", "a",
		"18446744073709551615", "18446744073709551616", "99999999999999999999", "184467440737095516150", "0x10", "1e3", "１"} {
		n, ok := parseRV([]byte(rv))
		want, err := strconv.ParseUint(rv, 10, 64)
		if ok != (err == nil && len(rv) <= 20) || ok && n != want {
			t.Errorf("parseRV(%q) = %d, %v; strconv: %d, %v", rv, n, ok, want, err)
		}
	}
}

// FuzzParseRV compares parseRV with strconv.ParseUint in base 10, of at most 20 bytes.
func FuzzParseRV(f *testing.F) {
	f.Add("18446744073709551615")
	f.Add("007")
	f.Fuzz(func(t *testing.T, rv string) {
		n, ok := parseRV([]byte(rv))
		want, err := strconv.ParseUint(rv, 10, 64)
		if ok != (err == nil && len(rv) <= 20) || ok && n != want {
			t.Errorf("parseRV(%q) = %d, %v; strconv: %d, %v", rv, n, ok, want, err)
		}
	})
}

// FuzzReadCoverage: readCoverage reads back what coverageValue wrote, for its key only,
// accepts the 16 bytes alone of an earlier build, and refuses anything else with
// ErrCorrupt rather than read past the value or panic.
func FuzzReadCoverage(f *testing.F) {
	key := indexPrefix(indexCoverage, "prod", string(pods), "")
	f.Add(uint64(10), uint64(3), []byte{})
	f.Add(uint64(0), uint64(0), []byte{0})
	f.Add(uint64(1<<63), uint64(7), coverageValue(key, 9, 9)[:20])
	f.Fuzz(func(t *testing.T, from, seq uint64, raw []byte) {
		v := coverageValue(key, from, seq)
		if f2, s2, err := readCoverage(key, v); err != nil || f2 != from || s2 != seq {
			t.Fatalf("readCoverage(coverageValue(%d, %d)) = %d, %d, %v", from, seq, f2, s2, err)
		}
		if _, _, err := readCoverage(indexPrefix(indexCoverage, "dev", string(pods), ""), v); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("another resource's key read the value: %v", err)
		}
		f2, s2, err := readCoverage(key, raw)
		switch {
		case len(raw) == legacyCoverage:
			if err != nil || f2 != binary.BigEndian.Uint64(raw) || s2 != binary.BigEndian.Uint64(raw[8:]) {
				t.Fatalf("a legacy coverage %x: %d, %d, %v", raw, f2, s2, err)
			}
		case err == nil:
			if !bytes.Equal(raw, coverageValue(key, f2, s2)) {
				t.Fatalf("%x read as %d, %d, which is not what it holds", raw, f2, s2)
			}
		case !errors.Is(err, ErrCorrupt):
			t.Fatalf("%x: %v, want ErrCorrupt", raw, err)
		}
	})
}

// sampleObjects returns the objects bucket of prod's pods in writeIndexSample's file.
func sampleObjects(tx *bolt.Tx) *bolt.Bucket {
	return getBucket(tx, bucketClusters, []byte("prod"), bucketResources, []byte(pods), bucketObjects)
}

// damageList replaces the list of prod's pod a/p2 in writeIndexSample's file, two
// records (added, modified), by what damage returns of it, sealed.
func damageList(t *testing.T, tx *bolt.Tx, damage func([]uint64) []uint64) error {
	t.Helper()
	lk := listKey([]byte("a/p2"))
	seqs, err := readList(nil, "prod", string(pods), lk, sampleObjects(tx).Get(lk))
	if err != nil || len(seqs) != 2 {
		t.Fatalf("the list of a/p2: %v, %v", seqs, err)
	}
	return sampleObjects(tx).Put(lk, encodeList("prod", string(pods), lk, damage(seqs)))
}
