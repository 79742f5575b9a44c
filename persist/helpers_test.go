package persist

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	pods        = ResourceKeyFor(schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	deployments = ResourceKeyFor(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"})
	// dictPods is a store of pods whose values the tests compress with a dictionary.
	dictPods = pods + "?dict"
)

// testPath returns the path of a snapshot file in a new temporary directory.
func testPath(t testing.TB) string {
	return filepath.Join(t.TempDir(), "fleetwatch.db")
}

// openTest opens a Store that the test closes at its end.
func openTest(t testing.TB, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// object returns a small unstructured object with one field that tells its version.
func object(namespace, name, version string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": name, "uid": "uid-" + name},
		"data":       map[string]any{"version": version},
	}}
	if namespace != "" {
		u.SetNamespace(namespace)
	}
	return u
}

// metadataObject returns a metadata-only object with a label that tells its version.
func metadataObject(namespace, name, version string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"version": version}},
	}
}

// versionOf returns what object or metadataObject was given as version.
func versionOf(t testing.TB, obj runtime.Object) string {
	t.Helper()
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		v, _, _ := unstructured.NestedString(o.Object, "data", "version")
		return v
	case *metav1.PartialObjectMetadata:
		return o.Labels["version"]
	}
	t.Fatalf("unexpected object %T", obj)
	return ""
}

// contents returns "namespace/name=version" for each object of a resource.
func contents(t testing.TB, rs *ResourceSnapshot) []string {
	t.Helper()
	if rs == nil {
		return nil
	}
	var out []string
	for _, obj := range rs.Objects {
		m := obj.(interface {
			GetNamespace() string
			GetName() string
		})
		out = append(out, objectKey(m.GetNamespace(), m.GetName())+"="+versionOf(t, obj))
	}
	return out
}

// mustLoad loads s and fails the test on an error or a recovery.
func mustLoad(t testing.TB, s *Store) *Snapshot {
	t.Helper()
	snap, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if moved, cause := s.Recovered(); moved != "" {
		t.Fatalf("Load recovered: moved to %s: %v", moved, cause)
	}
	return snap
}

// resourceOf returns the snapshot of one resource, nil if it is not stored.
func resourceOf(snap *Snapshot, cluster string, resource ResourceKey) *ResourceSnapshot {
	cs := snap.Clusters[cluster]
	if cs == nil {
		return nil
	}
	return cs.Resources[resource]
}

// corruptPagesContaining overwrites with garbage each page of the file at path that
// holds marker: the page in use, and copies in free pages.
func corruptPagesContaining(t testing.TB, path string, marker []byte) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, marker) {
		t.Fatalf("marker %q is not in the file", marker)
	}
	pageSize := os.Getpagesize()
	for i := bytes.Index(data, marker); i >= 0; i = bytes.Index(data, marker) {
		start := i - i%pageSize
		copy(data[start:start+pageSize], bytes.Repeat([]byte{0xab}, pageSize))
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// garbleObjectName changes the name of writeSample's marker object in its value, not in
// its key: the file's pages are sound, and the object decodes, to another object. The
// change log's record of it holds the same value, changed too.
func garbleObjectName(t testing.TB, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key := bytes.Index(data, []byte("ns/marker-object"))
	if key < 0 {
		t.Fatal("the marker object is not in the file")
	}
	// The name, a CBOR string of 13 bytes; not the uid, which ends with it.
	name := []byte("Mmarker-object")
	i := bytes.Index(data[key:], name)
	if i < 0 {
		t.Fatal("the marker object's name is not in the file")
	}
	for j := key + i; j >= 0; {
		copy(data[j+1:], "MARKER")
		k := bytes.Index(data[j:], name)
		if k < 0 {
			break
		}
		j += k
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// sorted returns a sorted copy.
func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// capAtUsed caps s's file at the size its pages use, as a full disk would: the file has
// room beyond them (growthStep), which a commit fills before it grows the file.
func capAtUsed(t testing.TB, s *Store) {
	t.Helper()
	if err := s.view(func(tx *bolt.Tx) error { s.db.MaxSize = int(tx.Size()); return nil }); err != nil {
		t.Fatal(err)
	}
}
