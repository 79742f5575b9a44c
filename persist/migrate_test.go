package persist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clocktesting "k8s.io/utils/clock/testing"
)

// Every migration of the package's list has a test here.

// TestMigrateToV1 lays out version 1 in a version 0 file: a bbolt file without any
// bucket, as bbolt creates it.
func TestMigrateToV1(t *testing.T) {
	path := testPath(t)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	created := time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)
	s := openTest(t, path, Options{Clock: clocktesting.NewFakePassiveClock(created), migrations: migrations[:1]})
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != 1 || !info.Created.Equal(created) {
		t.Errorf("after the migration: %+v", info)
	}
	if moved, _ := s.Recovered(); moved != "" {
		t.Error("a version 0 file was moved aside")
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// TestMigrateToV2 reads a version 1 file, whose unstructured objects have a format byte
// before their CBOR map: the migration records version 2 and changes nothing else, and
// the objects of both versions load.
func TestMigrateToV2(t *testing.T) {
	path := testPath(t)
	old := testPod(t, "shop", "old")
	md := testMetadata(t, "shop", "md")
	s, err := Open(path, Options{migrations: migrations[:1]})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	w.Upsert("prod", pods, old)
	w.Upsert("prod", deployments, md)
	w.Checkpoint("prod", pods, "5")
	w.Checkpoint("prod", deployments, "6")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Version 1 wrote a format byte before an unstructured object's map.
	objectsOf := func(tx *bolt.Tx, resource ResourceKey) *bolt.Bucket {
		return getBucket(tx, bucketClusters, []byte("prod"), bucketResources, []byte(resource), bucketObjects)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		v := objectsOf(tx, pods).Get([]byte("shop/old"))
		return objectsOf(tx, pods).Put([]byte("shop/old"), append([]byte{formatUnstructured}, v...))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = openTest(t, path, Options{migrations: migrations[:2]})
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != 2 {
		t.Errorf("schema version %d after the migration, want 2", info.SchemaVersion)
	}
	var stored []byte
	s.view(func(tx *bolt.Tx) error {
		stored = bytes.Clone(objectsOf(tx, pods).Get([]byte("shop/old")))
		return nil
	})
	if want, _ := encodeObject(old); !bytes.Equal(stored, append([]byte{formatUnstructured}, want...)) {
		t.Error("the migration rewrote an object")
	}

	// Objects of both versions load, and new ones are written as maps.
	w = s.NewWriter(WriterOptions{})
	fresh := testPod(t, "shop", "new")
	w.Upsert("prod", pods, fresh)
	w.Checkpoint("prod", pods, "7")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	snap := mustLoad(t, s)
	got := resourceOf(snap, "prod", pods).Objects
	if len(got) != 2 || !reflect.DeepEqual(got[0], fresh) || !reflect.DeepEqual(got[1], old) {
		t.Errorf("loaded %v", got)
	}
	if got := resourceOf(snap, "prod", deployments).Objects; len(got) != 1 || !reflect.DeepEqual(got[0], md) {
		t.Errorf("loaded %v", got)
	}
	s.view(func(tx *bolt.Tx) error {
		stored = bytes.Clone(objectsOf(tx, pods).Get([]byte("shop/new")))
		return nil
	})
	if len(stored) == 0 || !isMapHead(stored[0]) {
		t.Errorf("a new object is stored as % x..., not as a map", stored[:min(len(stored), 4)])
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// TestOlderLayoutIsRejected: a file with buckets but no meta bucket is not a snapshot of
// any version. Open refuses it and leaves it alone, rather than migrate or move it.
func TestMigrateToV3(t *testing.T) {
	path := testPath(t)
	pod, md := testPod(t, "shop", "pod"), testMetadata(t, "shop", "md")
	s, err := Open(path, Options{migrations: migrations[:2]})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	w.Upsert("prod", pods, pod)
	w.Upsert("prod", deployments, md)
	w.Checkpoint("prod", pods, "5")
	w.Checkpoint("prod", deployments, "6")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity("prod", Identity{UID: "uid", Server: "https://prod"}); err != nil {
		t.Fatal(err)
	}
	want := mustLoad(t, s)
	s.Close()

	s = openTest(t, path, Options{})
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != 3 {
		t.Errorf("schema version %d after the migration, want 3", info.SchemaVersion)
	}
	// Every value is sealed, and the meta bucket too.
	err = s.view(func(tx *bolt.Tx) error {
		if sum := tx.Bucket(bucketMeta).Get(keySum); !bytes.Equal(sum, metaSum(tx.Bucket(bucketMeta))) {
			t.Errorf("the meta bucket's seal is %x", sum)
		}
		cb := getBucket(tx, bucketClusters, []byte("prod"))
		values := [][]byte{cb.Get(keyIdentity)}
		for _, r := range []ResourceKey{pods, deployments} {
			rb := getBucket(tx, bucketClusters, []byte("prod"), bucketResources, []byte(r))
			values = append(values, rb.Get(keyRV))
			rb.Bucket(bucketObjects).ForEach(func(_, v []byte) error {
				values = append(values, v)
				return nil
			})
		}
		for _, v := range values {
			if len(v) < sealSize || v[0] != formatSealed {
				t.Errorf("a value is not sealed: % x", v[:min(len(v), 8)])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustLoad(t, s); !reflect.DeepEqual(got, want) {
		t.Errorf("the migration changed the snapshot:\n got %+v\nwant %+v", got, want)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

func TestOlderLayoutIsRejected(t *testing.T) {
	path := testPath(t)
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		b, _ := createBucketIfNotExists(tx, bucketClusters, []byte("prod"), bucketResources, []byte("/v1/pods"))
		return b.Put(keyRV, []byte("5"))
	})
	db.Close()
	before, _ := os.ReadFile(path)

	_, err = Open(path, Options{})
	if !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), `"clusters"`) {
		t.Fatalf("got %v, want ErrNotSnapshot naming the bucket", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("the file changed")
	}
}

// testMigrations is the list of migrations and two more, to versions
// len(migrations)+1 and +2, that record the order in which they ran.
func testMigrations(ran *[]int, failAt int) []migration {
	list := slices.Clone(migrations)
	for v := len(migrations); v < len(migrations)+2; v++ {
		list = append(list, migration{name: "test", migrate: func(tx *bolt.Tx, _ time.Time) error {
			*ran = append(*ran, v+1)
			if err := tx.Bucket(bucketMeta).Put([]byte("migrated-to"), []byte{byte(v + 1)}); err != nil {
				return err
			}
			if v+1 == failAt {
				return errors.New("migration failed")
			}
			return nil
		}})
	}
	return list
}

func TestMigrationMachinery(t *testing.T) {
	n := len(migrations)
	tests := []struct {
		name string
		// from is the version the file is at; failAt the migration that fails, or 0.
		from, failAt int
		wantRan      []int
		wantVersion  uint64
		wantErr      bool
	}{
		{name: "from version 0", from: 0, wantRan: []int{n + 1, n + 2}, wantVersion: uint64(n + 2)},
		{name: "from version 1", from: 1, wantRan: []int{n + 1, n + 2}, wantVersion: uint64(n + 2)},
		{name: "from this binary's version", from: n, wantRan: []int{n + 1, n + 2}, wantVersion: uint64(n + 2)},
		{name: "from the next version", from: n + 1, wantRan: []int{n + 2}, wantVersion: uint64(n + 2)},
		{name: "current", from: n + 2, wantRan: nil, wantVersion: uint64(n + 2)},
		{name: "a failed migration changes nothing", from: 1, failAt: n + 2, wantRan: []int{n + 1, n + 2}, wantVersion: 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := testPath(t)
			if tt.from > 0 {
				var ran []int
				s, err := Open(path, Options{migrations: testMigrations(&ran, 0)[:tt.from]})
				if err != nil {
					t.Fatal(err)
				}
				s.SetIdentity("a", Identity{UID: "u"})
				s.Close()
			}
			before, _ := os.ReadFile(path)

			var ran []int
			s, err := Open(path, Options{migrations: testMigrations(&ran, tt.failAt)})
			if tt.wantErr {
				if want := fmt.Sprintf("from version %d to %d", n+1, n+2); err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("got %v, want the error of the migration to version %d", err, n+2)
				}
				if after, _ := os.ReadFile(path); string(after) != string(before) {
					t.Error("a failed migration changed the file")
				}
				if errors.Is(err, ErrCorrupt) {
					t.Error("a failed migration counts as corruption")
				}
				if matches, _ := filepath.Glob(path + ".corrupt-*"); len(matches) > 0 {
					t.Error("moved aside")
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ran, tt.wantRan) {
				t.Errorf("ran migrations to %v, want %v", ran, tt.wantRan)
			}
			if s != nil {
				defer s.Close()
				if tt.from > 0 && mustLoad(t, s).Clusters["a"] == nil {
					t.Error("the migration lost data")
				}
			}
			if s == nil {
				s = openTest(t, path, Options{ReadOnly: true, migrations: testMigrations(new([]int), 0)[:1]})
			}
			info, err := s.Inspect()
			if err != nil {
				t.Fatal(err)
			}
			if info.SchemaVersion != tt.wantVersion {
				t.Errorf("schema version %d, want %d", info.SchemaVersion, tt.wantVersion)
			}
		})
	}
}

func TestReadOnlyDoesNotMigrate(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	s.Close()
	_, err := Open(path, Options{ReadOnly: true, migrations: testMigrations(new([]int), 0)})
	if !errors.Is(err, ErrSchemaTooOld) {
		t.Errorf("got %v, want ErrSchemaTooOld", err)
	}
	_, err = Open(path, Options{ReadOnly: true, migrations: migrations[:0]})
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprintf("version %d, this binary knows versions up to 0", len(migrations))) {
		t.Errorf("got %v, want ErrSchemaTooNew", err)
	}
}
