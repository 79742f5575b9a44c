package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// logSample writes, with the change log on, cluster "a"'s pods through a list and
// watch events (an update, a deletion, an update of two objects in one commit), and
// another cluster's, and returns the Store and a's exported state.
func logSample(t *testing.T, opts ExportOptions) (*Store, []byte) {
	t.Helper()
	src, w, clock := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("a", pods, object("ns", "p1", "1"))
	w.Upsert("a", pods, object("ns", "p2", "1"))
	w.Checkpoint("a", pods, "100")
	w.Upsert("b", pods, object("ns", "other", "1"))
	w.Checkpoint("b", pods, "7")
	commitNow(t, w)
	for i, step := range []func(){
		func() { w.Upsert("a", pods, object("ns", "p1", "2")); w.Checkpoint("a", pods, "101") },
		func() { w.Delete("a", pods, "ns", "p2"); w.Checkpoint("a", pods, "102") },
		func() {
			w.Upsert("a", pods, object("ns", "p1", "3"))
			w.Checkpoint("a", pods, "103")
			w.Upsert("a", pods, object("ns", "p3", "1"))
			w.Checkpoint("a", pods, "104")
		},
	} {
		clock.Step(time.Minute)
		step()
		if i != 1 {
			commitNow(t, w)
		}
	}
	var buf bytes.Buffer
	if err := src.ExportCluster("a", &buf, opts); err != nil {
		t.Fatalf("ExportCluster: %v", err)
	}
	return src, buf.Bytes()
}

// TestExportImportClusterLog hands a cluster over with its change log: the importer's
// log gives the same changes after each resourceVersion as the exporter's, names the
// exporter's log among its origins, and goes on with the changes its own Writer
// commits after the import.
func TestExportImportClusterLog(t *testing.T) {
	src, state := logSample(t, ExportOptions{LogOrigins: []string{"earlier"}})
	srcID, err := src.ID()
	if err != nil {
		t.Fatal(err)
	}
	// The importer's log has records of its own, so that the sequence numbers differ.
	dst, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	w.Upsert("c", pods, object("ns", "mine", "1"))
	w.Checkpoint("c", pods, "40")
	w.Upsert("a", pods, object("ns", "stale", "1"))
	w.Checkpoint("a", pods, "5")
	commitNow(t, w)
	cs, err := dst.ImportCluster("a", bytes.NewReader(state), ImportOptions{Log: true})
	if err != nil {
		t.Fatalf("ImportCluster: %v", err)
	}
	if want := []string{srcID, "earlier"}; !slices.Equal(cs.LogOrigins, want) {
		t.Errorf("LogOrigins %q, want %q", cs.LogOrigins, want)
	}
	for rv := 100; rv <= 104; rv++ {
		want, err := src.ChangesAfter("a", pods, strconv.Itoa(rv))
		if err != nil {
			t.Fatal(err)
		}
		got, err := dst.ChangesAfter("a", pods, strconv.Itoa(rv))
		if err != nil {
			t.Fatalf("after %d: %v", rv, err)
		}
		if g, w := describe(t, got), describe(t, want); !slices.Equal(g, w) {
			t.Errorf("after %d: %q, want %q", rv, g, w)
		}
	}
	if _, err := dst.ChangesAfter("a", pods, "5"); !errors.Is(err, ErrTooOld) {
		t.Errorf("after the importer's own earlier state: %v, want ErrTooOld", err)
	}
	if got := describe(t, allChanges(t, dst, ChangesQuery{Cluster: "a"})); !slices.Equal(got[:2], []string{
		"Added a /v1/pods ns/stale 5 1", "ClusterReplaced a    -",
	}) {
		t.Errorf("the importer's records of a: %q", got)
	}
	w.Upsert("a", pods, object("ns", "p1", "4"))
	w.Checkpoint("a", pods, "105")
	commitNow(t, w)
	got, err := dst.ChangesAfter("a", pods, "103")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Added a /v1/pods ns/p3 104 1", "Modified a /v1/pods ns/p1 105 4"}; !slices.Equal(describe(t, got), want) {
		t.Errorf("after the import's commits: %q, want %q", describe(t, got), want)
	}
	checkIndex(t, dst)

	// Without ImportOptions.Log, the log no longer covers the cluster.
	other, _, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	cs, err = other.ImportCluster("a", bytes.NewReader(state), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs.LogOrigins != nil {
		t.Errorf("LogOrigins %q without the log", cs.LogOrigins)
	}
	if _, err := other.ChangesAfter("a", pods, "101"); !errors.Is(err, ErrTooOld) {
		t.Errorf("imported without the log: %v, want ErrTooOld", err)
	}
}

// TestExportClusterLogBound exports a cluster's log within a bound: the newest records
// go, and the importer's log covers the resource from the last of those left out.
func TestExportClusterLogBound(t *testing.T) {
	_, whole := logSample(t, ExportOptions{})
	_, noLog := logSample(t, ExportOptions{LogMaxBytes: -1})
	// Room for about the last two records.
	src, state := logSample(t, ExportOptions{LogMaxBytes: int64(len(whole)-len(noLog)) / 2})
	dst, _, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	if _, err := dst.ImportCluster("a", bytes.NewReader(state), ImportOptions{Log: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.ChangesAfter("a", pods, "100"); !errors.Is(err, ErrTooOld) {
		t.Errorf("after 100: %v, want ErrTooOld", err)
	}
	want, _ := src.ChangesAfter("a", pods, "102")
	got, err := dst.ChangesAfter("a", pods, "102")
	if err != nil || !slices.Equal(describe(t, got), describe(t, want)) {
		t.Errorf("after 102: %q, %v; want %q", describe(t, got), err, describe(t, want))
	}
	cs, err := dst.ImportCluster("a", bytes.NewReader(noLog), ImportOptions{Log: true})
	if err != nil || cs.LogOrigins != nil {
		t.Fatalf("a state without records: %v, LogOrigins %q", err, cs.LogOrigins)
	}
	checkIndex(t, dst)
}

// TestImportClusterLogOlderVersion imports a state of a build before the log's frames:
// its objects, and no log (a watch of the cluster gets 410 on its new owner).
func TestImportClusterLogOlderVersion(t *testing.T) {
	_, state := logSample(t, ExportOptions{LogMaxBytes: -1})
	b := slices.Clone(state)
	b[len(stateMagic)] = stateVersionLog - 1
	end := bytes.LastIndexByte(b[:len(b)-4], frameEnd)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:end], castagnoli))
	dst, _, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	cs, err := dst.ImportCluster("a", bytes.NewReader(b), ImportOptions{Log: true})
	if err != nil {
		t.Fatal(err)
	}
	if rs := cs.Resources[pods]; rs == nil || rs.ResourceVersion != "104" || cs.LogOrigins != nil {
		t.Errorf("imported %+v, LogOrigins %q", rs, cs.LogOrigins)
	}
	if _, err := dst.ChangesAfter("a", pods, "103"); !errors.Is(err, ErrTooOld) {
		t.Errorf("%v, want ErrTooOld", err)
	}
	// A state of that version with the log's frames is refused.
	_, state = logSample(t, ExportOptions{})
	b = slices.Clone(state)
	b[len(stateMagic)] = stateVersionLog - 1
	end = bytes.LastIndexByte(b[:len(b)-4], frameEnd)
	binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:end], castagnoli))
	if _, err := dst.ImportCluster("a", bytes.NewReader(b), ImportOptions{Log: true}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("version %d with a log: %v, want ErrCorrupt", stateVersionLog-1, err)
	}
}

// TestImportClusterRejectsBadLog imports states whose log is truncated, damaged, or
// well framed but not the cluster's: each is refused whole, and the Store keeps what it
// had, its log too.
func TestImportClusterRejectsBadLog(t *testing.T) {
	_, state := logSample(t, ExportOptions{})
	first := bytes.IndexByte(state[bytes.Index(state, []byte{frameLogID}):], frameRecord)
	if first < 0 {
		t.Fatal("the state has no record")
	}
	first += bytes.Index(state, []byte{frameLogID})
	end := bytes.LastIndexByte(state[:len(state)-4], frameEnd)
	// resum makes b's checksum right again, as a state made so by a build would be.
	resum := func(b []byte) []byte {
		e := bytes.LastIndexByte(b[:len(b)-4], frameEnd)
		binary.BigEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[:e], castagnoli))
		return b
	}
	replace := func(old, new string) []byte {
		b := bytes.Replace(slices.Clone(state), []byte(old), []byte(new), -1)
		if bytes.Equal(b, state) {
			t.Fatalf("the state holds no %q", old)
		}
		return resum(b)
	}
	flip := func(i int) []byte {
		b := slices.Clone(state)
		b[i] ^= 0x40
		return b
	}
	tests := []struct {
		name  string
		state []byte
	}{
		{"truncated in the first record", state[:first+8]},
		{"truncated in the log", state[:(first+end)/2]},
		{"truncated before the end", state[:end]},
		{"a byte changed in a record", flip((first + end) / 2)},
		{"the log of a resource it does not hold", replace("l\x08/v1/pods", "l\x08/v1/podz")},
		{"a record of another cluster", resum(bytes.Replace(slices.Clone(state), []byte("\x01a\x08/v1/pods\x05ns/p3"), []byte("\x01b\x08/v1/pods\x05ns/p3"), 1))},
		{"a record of an unknown type", func() []byte {
			b := slices.Clone(state)
			b[first+2+1] = 0x7f // 'c', a length of one byte, the format, the type
			return resum(b)
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst, w, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
			w.Upsert("a", pods, object("ns", "kept", "1"))
			w.Checkpoint("a", pods, "5")
			w.Upsert("a", pods, object("ns", "kept", "2"))
			w.Checkpoint("a", pods, "6")
			commitNow(t, w)
			if _, err := dst.ImportCluster("a", bytes.NewReader(tt.state), ImportOptions{Log: true}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
			if rs := resourceOf(mustLoad(t, dst), "a", pods); rs == nil || rs.ResourceVersion != "6" {
				t.Errorf("the Store changed: %+v", rs)
			}
			got, err := dst.ChangesAfter("a", pods, "5")
			if err != nil || !slices.Equal(describe(t, got), []string{"Modified a /v1/pods ns/kept 6 2"}) {
				t.Errorf("the log changed: %q, %v", describe(t, got), err)
			}
		})
	}
}

// TestExportClusterLogDamagedIndex: a resource whose index entries do not match its
// records (here one entry's resourceVersion) is left out of the exported log, as one
// whose records are not whole: the importer's log does not cover it, so that a watch
// resumed there gets 410 rather than the changes that the damage would misplace. The
// objects are handed over.
func TestExportClusterLogDamagedIndex(t *testing.T) {
	src, _ := logSample(t, ExportOptions{})
	if err := src.update(func(tx *bolt.Tx) error {
		k, _ := sampleEntry(t, tx, indexResource, "a", pods, "", "102")
		_, index := historyBuckets(tx)
		return index.Put(k, binary.BigEndian.AppendUint64(nil, 109))
	}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := src.ExportCluster("a", &buf, ExportOptions{}); err != nil {
		t.Fatalf("ExportCluster: %v", err)
	}
	dst, _, _ := historyWriter(t, testPath(t), HistoryOptions{Enabled: true})
	if _, err := dst.ImportCluster("a", &buf, ImportOptions{Log: true}); err != nil {
		t.Fatalf("ImportCluster: %v", err)
	}
	if _, err := dst.ChangesAfter("a", pods, "101"); !errors.Is(err, ErrTooOld) {
		t.Errorf("a resource exported from a damaged index: %v, want ErrTooOld", err)
	}
	if rs := resourceOf(mustLoad(t, dst), "a", pods); rs == nil || rs.ResourceVersion != "104" || len(rs.Objects) != 2 {
		t.Errorf("the objects handed over: %+v", rs)
	}
}
