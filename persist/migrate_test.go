package persist

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/internal/pbjson"
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

// secretValue is the value of the Secrets of testSecret, which the file must not hold
// in any form once they are scrubbed.
const secretValue = "migr4te-s3cr3t-v4lue-xyz"

// secretValueForms are the forms in which secretValue could be found in a file: plain,
// and in the base64 encodings that a Secret's data or a dump of it use.
var secretValueForms = [][]byte{
	[]byte(secretValue),
	[]byte(base64.StdEncoding.EncodeToString([]byte(secretValue))),
	[]byte(base64.RawURLEncoding.EncodeToString([]byte(secretValue))),
}

// fileHoldsSecretValue reports whether the file at path holds secretValue in one of its
// forms, in any page, free pages included.
func fileHoldsSecretValue(t *testing.T, path string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range secretValueForms {
		if bytes.Contains(data, v) {
			return true
		}
	}
	return false
}

// testSecret returns a Secret as a version 2 file stored it: made with kubectl apply, so
// with the last-applied annotation, and with data unless dropData (what fleetwatch
// kept of it by default).
func testSecret(name string, dropData bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Secret",
		"metadata": map[string]any{
			"namespace": "shop", "name": name, "resourceVersion": "41",
			"annotations": map[string]any{
				lastAppliedAnnotation: `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"` + name + `","namespace":"shop"},"stringData":{"password":"` + secretValue + `"}}`,
			},
		},
		"type": "Opaque",
	}}
	if !dropData {
		u.Object["data"] = map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(secretValue))}
	}
	return u
}

// TestMigrateToV3 reads a version 2 file whose Secrets hold their values in every form
// that version 2 stored: the migration drops the resources of Secrets that hold a value,
// keeps the others, and compacts the file, so that no page holds a value.
func TestMigrateToV3(t *testing.T) {
	var (
		secrets      = ResourceKey("/v1/secrets?spec=")
		secretsKept  = ResourceKey("/v1/secrets?spec=secretData%3Dtrue")
		secretsMeta  = ResourceKey("/v1/secrets?ns=shop&spec=metadataOnly%3Dtrue")
		secretsClean = ResourceKey("/v1/secrets?ns=clean")
		widgets      = ResourceKey("example.com/v1/secrets")
	)
	metadataSecret := &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "md", Annotations: map[string]string{lastAppliedAnnotation: testSecret("md", false).GetAnnotations()[lastAppliedAnnotation], "team": "a"}},
	}
	clean := testSecret("clean", true)
	clean.SetAnnotations(map[string]string{"team": "a"})
	clean.SetNamespace("clean")
	pod := testPod(t, "shop", "api")
	// A custom resource named secrets is not a Secret.
	widget := object("shop", "widget", "1")
	widget.SetAPIVersion("example.com/v1")
	widget.SetAnnotations(map[string]string{lastAppliedAnnotation: "{}"})

	path := testPath(t)
	s, err := Open(path, Options{migrations: migrations[:2]})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	w.Upsert("prod", secrets, testSecret("applied", true))
	w.Upsert("prod", secretsKept, testSecret("kept", false))
	w.Upsert("prod", secretsMeta, metadataSecret)
	w.Upsert("prod", secretsClean, clean)
	w.Upsert("prod", pods, pod)
	w.Upsert("prod", widgets, widget)
	for i, key := range []ResourceKey{secrets, secretsKept, secretsMeta, secretsClean, pods, widgets} {
		w.Checkpoint("prod", key, fmt.Sprint(50+i))
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity("prod", Identity{UID: "u", Server: "https://prod"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !fileHoldsSecretValue(t, path) {
		t.Fatal("the version 2 file holds no value to scrub")
	}

	s = openTest(t, path, Options{migrations: migrations[:3]})
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != 3 {
		t.Errorf("schema version %d after the migration, want 3", info.SchemaVersion)
	}
	var resources []ResourceKey
	for _, r := range info.Clusters[0].Resources {
		resources = append(resources, r.Resource)
	}
	// The custom resource "secrets" stays: it is not a Secret.
	if want := []ResourceKey{pods, secretsClean, widgets}; !reflect.DeepEqual(resources, want) {
		t.Errorf("resources after the migration: %v, want %v", resources, want)
	}
	snap := mustLoad(t, s)
	if cs := snap.Clusters["prod"]; cs == nil || cs.Identity.UID != "u" {
		t.Fatalf("the cluster or its identity is lost: %+v", cs)
	}
	if got := resourceOf(snap, "prod", secretsClean); got == nil || got.ResourceVersion != "53" || len(got.Objects) != 1 || !reflect.DeepEqual(got.Objects[0], clean) {
		t.Errorf("the Secret without values: %+v", got)
	}
	if got := resourceOf(snap, "prod", pods); got == nil || len(got.Objects) != 1 || !reflect.DeepEqual(got.Objects[0], pod) {
		t.Errorf("pods: %+v", got)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
	s.view(func(tx *bolt.Tx) error {
		if needsCompaction(tx) {
			t.Error("meta/compact is left")
		}
		return nil
	})
	s.Close()
	if fileHoldsSecretValue(t, path) {
		t.Error("the file holds a value after the migration")
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the compacted file is left: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the compacted file: %v, %v", fi.Mode(), err)
	}
}

// noMigration is a migration that changes nothing, to make a list one version longer.
var noMigration = migration{name: "nothing", migrate: func(*bolt.Tx, time.Time) error { return nil }}

// TestMigrateToV4 reads a version 3 file: the migration seals every value and the meta
// bucket, and the snapshot loads as it was.
func TestMigrateToV4(t *testing.T) {
	path := testPath(t)
	pod, md := testPod(t, "shop", "pod"), testMetadata(t, "shop", "md")
	s, err := Open(path, Options{migrations: migrations[:3]})
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

	s = openTest(t, path, Options{migrations: migrations[:4]})
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != 4 {
		t.Errorf("schema version %d after the migration, want 4", info.SchemaVersion)
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

// TestMigrateToV5 reads a version 4 file with StatefulSets, of any version and
// qualifier, and other resources: the migration drops those of StatefulSets, keeps the
// others as they were, and the cluster's identity.
func TestMigrateToV5(t *testing.T) {
	var (
		statefulSets     = ResourceKey("apps/v1/statefulsets?spec=")
		statefulSetsShop = ResourceKey("apps/v1/statefulsets?ns=shop")
		statefulSetsMeta = ResourceKey("apps/v1beta2/statefulsets?spec=metadataOnly%3Dtrue")
		widgets          = ResourceKey("example.com/v1/statefulsets")
	)
	sts := object("shop", "web", "7")
	sts.SetAPIVersion("apps/v1")
	sts.SetKind("StatefulSet")
	widget := object("shop", "widget", "8")
	widget.SetAPIVersion("example.com/v1")
	pod := testPod(t, "shop", "api")

	s, resources := migrateFile(t, 5, []storedObject{
		{statefulSets, sts}, {statefulSetsShop, sts}, {statefulSetsMeta, sts}, {pods, pod}, {widgets, widget},
	})
	// The custom resource "statefulsets" stays: it is not of apps.
	if want := []ResourceKey{pods, widgets}; !slices.Equal(resources, want) {
		t.Errorf("resources after the migration: %v, want %v", resources, want)
	}
	snap := mustLoad(t, s)
	if cs := snap.Clusters["prod"]; cs == nil || cs.Identity.UID != "u" {
		t.Fatalf("the cluster or its identity is lost: %+v", cs)
	}
	if got := resourceOf(snap, "prod", pods); got == nil || got.ResourceVersion != "53" || len(got.Objects) != 1 || !reflect.DeepEqual(got.Objects[0], pod) {
		t.Errorf("pods: %+v", got)
	}
	if got := resourceOf(snap, "prod", widgets); got == nil || got.ResourceVersion != "54" || len(got.Objects) != 1 || !reflect.DeepEqual(got.Objects[0], widget) {
		t.Errorf("widgets: %+v", got)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// TestMigrateToV6 reads a version 5 file with CSINodes, of any version and qualifier,
// and other resources: the migration drops those of CSINodes and keeps the others.
func TestMigrateToV6(t *testing.T) {
	var (
		csiNodes     = ResourceKey("storage.k8s.io/v1/csinodes?spec=")
		csiNodesMeta = ResourceKey("storage.k8s.io/v1/csinodes?spec=metadataOnly%3Dtrue")
		csiDrivers   = ResourceKey("storage.k8s.io/v1/csidrivers?spec=")
		widgets      = ResourceKey("example.com/v1/csinodes")
	)
	var stored []storedObject
	for i, key := range []ResourceKey{csiNodes, csiNodesMeta, csiDrivers, pods, widgets} {
		stored = append(stored, storedObject{key, object("", fmt.Sprint("o-", i), fmt.Sprint(10+i))})
	}
	s, resources := migrateFile(t, 6, stored)
	slices.Sort(resources)
	want := []ResourceKey{pods, widgets, csiDrivers}
	slices.Sort(want)
	if !slices.Equal(resources, want) {
		t.Errorf("resources after the migration: %v, want %v", resources, want)
	}
	if cs := mustLoad(t, s).Clusters["prod"]; cs == nil || cs.Identity.UID != "u" || cs.Resources[pods] == nil || cs.Resources[pods].ResourceVersion != "53" {
		t.Fatalf("the cluster, its identity or its pods are lost: %+v", cs)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}

// storedObject is an object stored under a resource's key.
type storedObject struct {
	key ResourceKey
	obj *unstructured.Unstructured
}

// migrateFile writes a file at schema version version−1 that holds, for cluster prod,
// each of stored under its key, checkpointed at resourceVersion 50, 51, ... in their
// order, and the identity of UID "u"; then opens it at version, which migrates it. It
// returns the Store and the resources the file holds of prod then.
func migrateFile(t *testing.T, version int, stored []storedObject) (*Store, []ResourceKey) {
	t.Helper()
	path := testPath(t)
	s, err := Open(path, Options{migrations: migrations[:version-1]})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	for i, o := range stored {
		w.Upsert("prod", o.key, o.obj)
		w.Checkpoint("prod", o.key, fmt.Sprint(50+i))
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetIdentity("prod", Identity{UID: "u", Server: "https://prod"}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	s = openTest(t, path, Options{migrations: migrations[:version]})
	info, err := s.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if info.SchemaVersion != uint64(version) {
		t.Errorf("schema version %d after the migration, want %d", info.SchemaVersion, version)
	}
	var resources []ResourceKey
	for _, r := range info.Clusters[0].Resources {
		resources = append(resources, r.Resource)
	}
	return s, resources
}

// TestLossyResource requires lossyResource to be the resources of the listable kinds
// whose protobuf loses members (pbjson.Lossy): if a new k8s.io/api makes another kind
// lossy, this fails, and the stored objects of that kind need a migration of their own
// (lossyResource itself must not change).
func TestLossyResource(t *testing.T) {
	kinds := scheme.Scheme.AllKnownTypes()
	got := map[schema.GroupResource]bool{}
	for gvk := range pbjson.Lossy() {
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		if _, listable := kinds[gvk.GroupVersion().WithKind(gvk.Kind+"List")]; !listable {
			continue // Eviction, a subresource
		}
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		if !lossyResource(ResourceKeyFor(gvr)) {
			t.Errorf("%v (%v) is lossy, and not a lossyResource", gvk, gvr)
		}
		got[gvr.GroupResource()] = true
	}
	if want := map[schema.GroupResource]bool{{Group: "apps", Resource: "statefulsets"}: true}; !reflect.DeepEqual(got, want) {
		t.Errorf("the resources of the lossy kinds: %v, want %v", got, want)
	}
	for _, key := range []ResourceKey{pods, deployments, "example.com/v1/statefulsets", "/v1/statefulsets"} {
		if lossyResource(key) {
			t.Errorf("%s is a lossyResource", key)
		}
	}
}

// TestOlderLayoutIsRejected: a file with buckets but no meta bucket is not a snapshot of
// any version. Open refuses it and leaves it alone, rather than migrate or move it.
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
	_, err := Open(path, Options{ReadOnly: true, migrations: append(slices.Clone(migrations), noMigration)})
	if !errors.Is(err, ErrSchemaTooOld) {
		t.Errorf("got %v, want ErrSchemaTooOld", err)
	}
	_, err = Open(path, Options{ReadOnly: true, migrations: migrations[:0]})
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), fmt.Sprintf("version %d, this binary knows versions up to 0", len(migrations))) {
		t.Errorf("got %v, want ErrSchemaTooNew", err)
	}
}

// TestMigrateToV7 creates an empty change log: the stored resources keep their objects,
// and the log records their changes from the first commit on, covering each resource
// from its stored resourceVersion.
func TestMigrateToV7(t *testing.T) {
	s, resources := migrateFile(t, 7, []storedObject{{pods, object("ns", "p1", "1")}})
	if !slices.Equal(resources, []ResourceKey{pods}) {
		t.Fatalf("resources after the migration: %v", resources)
	}
	if changes, _, err := s.Changes(ChangesQuery{}); err != nil || len(changes) != 0 {
		t.Fatalf("the log after the migration: %v, %v", changes, err)
	}
	w := s.NewWriter(WriterOptions{History: HistoryOptions{Enabled: true}})
	w.Upsert("prod", pods, object("ns", "p1", "2"))
	w.Checkpoint("prod", pods, "60")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	changes, err := s.ChangesAfter("prod", pods, "50")
	if err != nil || len(changes) != 1 || changes[0].Type != ChangeModified || changes[0].ResourceVersion != "60" {
		t.Fatalf("after the stored resourceVersion: %+v, %v", changes, err)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
}
