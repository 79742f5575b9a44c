package persist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleetwatch/fleetwatch/persist/persisttest"
	bolt "go.etcd.io/bbolt"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestOpenCreatesFile(t *testing.T) {
	path := testPath(t)
	created := time.Date(2026, 11, 21, 19, 32, 0, 0, time.UTC)
	s := openTest(t, path, Options{Clock: clocktesting.NewFakePassiveClock(created)})

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode %v, want 0600", got)
	}
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != uint64(len(migrations)) || !info.Created.Equal(created) || len(info.Clusters) != 0 {
		t.Errorf("Inspect of a new file: %+v", info)
	}
	if moved, cause := s.Recovered(); moved != "" || cause != nil {
		t.Errorf("Recovered() = %q, %v for a new file", moved, cause)
	}
	if snap := mustLoad(t, s); len(snap.Clusters) != 0 {
		t.Errorf("Load of a new file: %d clusters", len(snap.Clusters))
	}
}

func TestOpenLocked(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})

	for _, readOnly := range []bool{false, true} {
		start := time.Now()
		_, err := Open(path, Options{LockTimeout: 200 * time.Millisecond, ReadOnly: readOnly})
		elapsed := time.Since(start)
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("second Open (read-only %v): got %v, want ErrLocked", readOnly, err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name the path", err)
		}
		if elapsed < 150*time.Millisecond || elapsed > 2*time.Second {
			t.Errorf("second Open gave up after %v, want about 200ms", elapsed)
		}
	}
	// The file was left alone: still readable, nothing moved aside.
	if matches, _ := filepath.Glob(path + ".corrupt-*"); len(matches) > 0 {
		t.Errorf("a locked file was moved aside: %v", matches)
	}
	if err := s.SetIdentity("a", Identity{UID: "u"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openTest(t, path, Options{LockTimeout: 200 * time.Millisecond})
	if id := mustLoad(t, s2).Clusters["a"].Identity; id.UID != "u" {
		t.Errorf("identity after reopening: %+v", id)
	}
}

func TestReadOnlyStoresShareTheFile(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	if err := s.SetIdentity("a", Identity{UID: "u"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	r1 := openTest(t, path, Options{ReadOnly: true})
	r2 := openTest(t, path, Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond})
	for _, r := range []*Store{r1, r2} {
		if mustLoad(t, r).Clusters["a"] == nil {
			t.Error("read-only Load misses cluster a")
		}
		if err := r.SetIdentity("b", Identity{}); !errors.Is(err, ErrReadOnly) {
			t.Errorf("SetIdentity on a read-only Store: got %v, want ErrReadOnly", err)
		}
	}
	if _, err := Open(path, Options{LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("writable Open next to read-only ones: got %v, want ErrLocked", err)
	}
	if _, err := Open(testPath(t), Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only Open of a missing file: got %v, want ErrNotExist", err)
	}
}

// writeSample writes a snapshot with cluster "marker-cluster", whose pods include
// "marker-object", in one commit, and closes it.
func writeSample(t *testing.T, path string) {
	t.Helper()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	for i := range 60 {
		w.Upsert("marker-cluster", pods, testPod(t, "ns", "pod-"+string(rune('a'+i%26))+strings.Repeat("x", i)))
	}
	w.Upsert("marker-cluster", pods, object("ns", "marker-object", "1"))
	w.Checkpoint("marker-cluster", pods, "100")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity("marker-cluster", Identity{UID: "uid", Server: "https://example.com"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptFileIsMovedAside(t *testing.T) {
	tests := []struct {
		name string
		// damage damages the file at path, which holds writeSample's snapshot.
		damage func(t *testing.T, path string)
		// atLoad: the damage is found by Load, not by Open.
		atLoad bool
	}{
		{name: "empty", damage: func(t *testing.T, path string) { os.Truncate(path, 0) }},
		{name: "garbage, short", damage: func(t *testing.T, path string) {
			os.WriteFile(path, []byte("this is not a bbolt file"), 0o600)
		}},
		{name: "garbage, long", damage: func(t *testing.T, path string) {
			data := make([]byte, 1<<20)
			rand.NewChaCha8([32]byte{1}).Read(data)
			os.WriteFile(path, data, 0o600)
		}},
		{name: "meta pages zeroed", damage: func(t *testing.T, path string) {
			f, _ := os.OpenFile(path, os.O_RDWR, 0)
			f.WriteAt(make([]byte, 2*os.Getpagesize()), 0)
			f.Close()
		}},
		{name: "truncated to half", damage: func(t *testing.T, path string) {
			os.Truncate(path, dataSize(t, path)/2)
		}},
		{name: "truncated by a page", damage: func(t *testing.T, path string) {
			os.Truncate(path, dataSize(t, path)-int64(os.Getpagesize()))
		}},
		{name: "bad page in the bucket tree", damage: func(t *testing.T, path string) {
			corruptPagesContaining(t, path, []byte("marker-cluster"))
		}},
		{name: "bad page among the objects", damage: func(t *testing.T, path string) {
			corruptPagesContaining(t, path, []byte("marker-object"))
		}},
		{name: "garbled object key", damage: func(t *testing.T, path string) {
			data, _ := os.ReadFile(path)
			// The key in the objects bucket, before its sealed value, and its copies
			// in free pages; not the change log's index keys.
			key := []byte("marker-object\x03")
			for i := bytes.Index(data, key); i >= 0; i = bytes.Index(data, key) {
				copy(data[i:], "MARKER")
			}
			os.WriteFile(path, data, 0o600)
		}},
		{name: "schema version damaged", damage: func(t *testing.T, path string) {
			db, _ := bolt.Open(path, 0o600, nil)
			db.Update(func(tx *bolt.Tx) error { return putUint64(tx.Bucket(bucketMeta), keyVersion, 2) })
			db.Close()
		}},
		{name: "meta bucket renamed", damage: func(t *testing.T, path string) {
			renameKey(t, path, "meta", "mexa")
		}},
		{name: "resources bucket renamed", damage: func(t *testing.T, path string) {
			renameKey(t, path, "resources", "resourcez")
		}},
		{name: "resourceVersion changed", damage: func(t *testing.T, path string) {
			db, _ := bolt.Open(path, 0o600, nil)
			db.Update(func(tx *bolt.Tx) error {
				rb := getBucket(tx, bucketClusters, []byte("marker-cluster"), bucketResources, []byte(pods))
				rv := bytes.Clone(rb.Get(keyRV))
				rv[len(rv)-1]++
				return rb.Put(keyRV, rv)
			})
			db.Close()
		}},
		{name: "garbled object", atLoad: true, damage: func(t *testing.T, path string) {
			garbleObjectName(t, path)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := testPath(t)
			writeSample(t, path)
			tt.damage(t, path)
			damaged, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}

			// A read-only Store reports the damage and moves nothing.
			if r, err := Open(path, Options{ReadOnly: true}); err == nil {
				_, err = r.Load()
				r.Close()
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("read-only Load: got %v, want ErrCorrupt", err)
				}
			} else if !errors.Is(err, ErrCorrupt) {
				t.Errorf("read-only Open: got %v, want ErrCorrupt", err)
			}

			now := time.Date(2026, 11, 21, 19, 32, 0, 0, time.UTC)
			s := openTest(t, path, Options{Clock: clocktesting.NewFakePassiveClock(now)})
			moved, cause := s.Recovered()
			if tt.atLoad {
				if moved != "" {
					t.Fatalf("Open moved the file aside (%v); this damage is for Load to find", cause)
				}
				snap, err := s.Load()
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if len(snap.Clusters) != 0 {
					t.Errorf("Load after a recovery returned %d clusters", len(snap.Clusters))
				}
				moved, cause = s.Recovered()
			}
			if want := path + ".corrupt-20261121T193200Z"; moved != want {
				t.Fatalf("Recovered() = %q, %v; want %q", moved, cause, want)
			}
			if !errors.Is(cause, ErrCorrupt) || !strings.Contains(cause.Error(), path) {
				t.Errorf("cause %v does not wrap ErrCorrupt and name the path", cause)
			}
			t.Logf("cause: %v", cause)
			if kept, err := os.ReadFile(moved); err != nil || !bytes.Equal(kept, damaged) {
				t.Errorf("the file moved aside is not the damaged file (err %v)", err)
			}

			// The new snapshot is empty, 0600 and works.
			if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("new file: %v, %v", fi, err)
			}
			if err := s.SetIdentity("a", Identity{UID: "u"}); err != nil {
				t.Fatal(err)
			}
			if err := s.Verify(); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openTest(t, path, Options{})
			if snap := mustLoad(t, s2); len(snap.Clusters) != 1 || snap.Clusters["a"] == nil {
				t.Errorf("reopened new snapshot: %+v", snap.Clusters)
			}
		})
	}
}

// renameKey overwrites the keys old of the file's live leaf pages with new, of the same
// length, as a damage of a byte would.
func renameKey(t *testing.T, path, old, new string) {
	t.Helper()
	layout, err := persisttest.ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	inValue := func(i int64) bool {
		for _, v := range layout.Of(persisttest.Value) {
			if i >= v.Off && i < v.Off+v.Len {
				return true
			}
		}
		return false
	}
	n := 0
	for _, leaf := range layout.Of(persisttest.Leaf) {
		page := data[leaf.Off : leaf.Off+leaf.Len]
		for i := 0; ; {
			j := bytes.Index(page[i:], []byte(old))
			if j < 0 {
				break
			}
			if at := i + j; !inValue(leaf.Off + int64(at)) {
				copy(page[at:], new)
				n++
			}
			i += j + 1
		}
	}
	if n == 0 {
		t.Fatalf("no key %q", old)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestMovedAsideNamesDoNotCollide(t *testing.T) {
	path := testPath(t)
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 21, 19, 32, 0, 0, time.UTC))
	var moved []string
	for range 3 {
		if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, Options{Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		m, _ := s.Recovered()
		moved = append(moved, m)
		s.Close()
	}
	want := []string{path + ".corrupt-20261121T193200Z", path + ".corrupt-20261121T193200Z-2", path + ".corrupt-20261121T193200Z-3"}
	if strings.Join(moved, " ") != strings.Join(want, " ") {
		t.Errorf("moved to %v, want %v", moved, want)
	}
}

func TestOpenLeavesOtherFilesAlone(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  error
		// message must appear in the error.
		message string
	}{
		{name: "another bbolt database", want: ErrNotSnapshot, message: `"jobs"`, setup: func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			db.Update(func(tx *bolt.Tx) error {
				b, _ := tx.CreateBucket([]byte("jobs"))
				return b.Put([]byte("k"), []byte("v"))
			})
			db.Close()
		}},
		{name: "newer schema", want: ErrSchemaTooNew, message: fmt.Sprintf("version %d, this binary knows versions up to %d", len(migrations)+1, len(migrations)), setup: func(t *testing.T, path string) {
			writeSample(t, path)
			setVersion(t, path, uint64(len(migrations)+1))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := testPath(t)
			tt.setup(t, path)
			before, _ := os.ReadFile(path)
			for _, readOnly := range []bool{false, true} {
				_, err := Open(path, Options{ReadOnly: readOnly})
				if !errors.Is(err, tt.want) || errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open (read-only %v): got %v, want %v", readOnly, err, tt.want)
				}
				if !strings.Contains(err.Error(), tt.message) || !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not say %q and name the path", err, tt.message)
				}
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(before, after) {
				t.Error("Open changed the file")
			}
			if matches, _ := filepath.Glob(path + ".corrupt-*"); len(matches) > 0 {
				t.Errorf("moved aside: %v", matches)
			}
		})
	}

	t.Run("missing directory", func(t *testing.T) {
		_, err := Open(filepath.Join(t.TempDir(), "missing", "fleetwatch.db"), Options{})
		if !errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrCorrupt) {
			t.Errorf("got %v, want ErrNotExist", err)
		}
	})
}

// dataSize returns the size of the database in the file at path, which the file may
// exceed.
func dataSize(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var size int64
	db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	return size
}

// setVersion overwrites the schema version of the file at path.
func setVersion(t *testing.T, path string, v uint64) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := putUint64(meta, keyVersion, v); err != nil {
			return err
		}
		// As a newer binary does.
		return meta.Put(keySum, metaSum(meta))
	}); err != nil {
		t.Fatal(err)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open(testPath(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Load(); !errors.Is(err, ErrClosed) {
		t.Errorf("Load: got %v, want ErrClosed", err)
	}
	if err := s.SetIdentity("a", Identity{}); !errors.Is(err, ErrClosed) {
		t.Errorf("SetIdentity: got %v, want ErrClosed", err)
	}
}

func TestCorruptSuffixFormat(t *testing.T) {
	path := testPath(t)
	os.WriteFile(path, []byte("garbage"), 0o600)
	s := openTest(t, path, Options{})
	moved, _ := s.Recovered()
	if !regexp.MustCompile(`\.corrupt-\d{8}T\d{6}Z$`).MatchString(moved) {
		t.Errorf("moved to %q", moved)
	}
}

// TestOpenFollowsAFileMovedWhileWaiting: a second Open waits for the lock; meanwhile the
// holder moves the file aside (as a recovery does) and lets go. The waiting Open must
// not work on the moved file, but on the file at the path.
func TestOpenFollowsAFileMovedWhileWaiting(t *testing.T) {
	path := testPath(t)
	s1 := openTest(t, path, Options{})
	if err := s1.SetIdentity("old", Identity{UID: "u"}); err != nil {
		t.Fatal(err)
	}
	opened := make(chan *Store)
	go func() {
		s2, err := Open(path, Options{LockTimeout: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		opened <- s2
	}()
	time.Sleep(100 * time.Millisecond) // s2 waits for the lock
	if err := os.Rename(path, path+".moved"); err != nil {
		t.Fatal(err)
	}
	s1.Close()
	s2 := <-opened
	if s2 == nil {
		return
	}
	defer s2.Close()
	if snap := mustLoad(t, s2); len(snap.Clusters) != 0 {
		t.Errorf("the second Open works on the moved file: %v", snap.Clusters)
	}
	s3 := openTest(t, path+".moved", Options{ReadOnly: true})
	if mustLoad(t, s3).Clusters["old"] == nil {
		t.Error("the moved file lost its content")
	}
}

// TestOpenTightensTheMode: a writable Store takes from an existing file the permissions
// beyond 0600; a read-only one changes nothing.
func TestOpenTightensTheMode(t *testing.T) {
	for _, tt := range []struct {
		mode     os.FileMode
		readOnly bool
		want     os.FileMode
	}{
		{0o644, false, 0o600},
		{0o666, false, 0o600},
		{0o755, false, 0o600},
		{0o600, false, 0o600},
		{0o644, true, 0o644},
	} {
		t.Run(fmt.Sprintf("%v read-only %v", tt.mode, tt.readOnly), func(t *testing.T) {
			path := testPath(t)
			writeSample(t, path)
			if err := os.Chmod(path, tt.mode); err != nil {
				t.Fatal(err)
			}
			s := openTest(t, path, Options{ReadOnly: tt.readOnly})
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != tt.want {
				t.Errorf("mode %v after Open, want %v", got, tt.want)
			}
			mustLoad(t, s)
		})
	}
}

// TestCorruptFilesAreBounded: the files moved aside are 0600, and only the newest
// KeepCorrupt of them are kept; a negative KeepCorrupt keeps none.
func TestCorruptFilesAreBounded(t *testing.T) {
	path := testPath(t)
	other := path + ".corrupt-not-a-time" // not one of ours: left alone
	if err := os.WriteFile(other, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 21, 19, 32, 0, 0, time.UTC))
	recoverOnce := func(opts Options) (string, error) {
		t.Helper()
		if err := os.WriteFile(path, []byte("garbage"), 0o644); err != nil {
			t.Fatal(err)
		}
		opts.Clock = clock
		s, err := Open(path, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Recovered()
	}
	var moved []string
	for i := range 12 {
		// Twice a second, so that names get counters, up to -10 (which sorts before -2).
		if i%2 == 0 {
			clock.SetTime(clock.Now().Add(time.Second))
		}
		m, _ := recoverOnce(Options{KeepCorrupt: 3})
		moved = append(moved, m)
		fi, err := os.Stat(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s: mode %v, want 0600", m, got)
		}
	}
	// More in the same second: the counters go on above those deleted.
	for i := range 6 {
		m, _ := recoverOnce(Options{KeepCorrupt: 3})
		moved = append(moved, m)
		if want := fmt.Sprintf("-%d", i+3); !strings.HasSuffix(m, want) {
			t.Fatalf("moved to %s, want the counter %s", m, want)
		}
	}
	left, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{other, moved[len(moved)-3], moved[len(moved)-2], moved[len(moved)-1]}
	if !sameSet(left, want) {
		t.Errorf("files left: %v, want %v", left, want)
	}
	if fi, err := os.Stat(other); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("a file that is not one of ours: %v, %v; want it as it was", fi, err)
	}

	// One left by an older fleetwatch, with the mode of the snapshot, is made 0600.
	if err := os.Chmod(moved[len(moved)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	clock.SetTime(clock.Now().Add(time.Second))
	if m, _ := recoverOnce(Options{KeepCorrupt: 3}); m == "" {
		t.Fatal("not moved aside")
	}
	if fi, err := os.Stat(moved[len(moved)-1]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("a file kept: %v, %v; want it 0600", fi, err)
	}

	// None kept: the file is deleted, and the older ones with it.
	m, cause := recoverOnce(Options{KeepCorrupt: -1})
	if m != "" || !errors.Is(cause, ErrCorrupt) {
		t.Errorf("Recovered() = %q, %v; want nothing moved, and the cause", m, cause)
	}
	if left, _ := filepath.Glob(path + ".corrupt-*"); !sameSet(left, []string{other}) {
		t.Errorf("files left: %v, want only %s", left, other)
	}
}

func sameSet(a, b []string) bool {
	return strings.Join(sorted(a), "\n") == strings.Join(sorted(b), "\n")
}
