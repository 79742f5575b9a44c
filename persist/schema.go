package persist

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// Names of buckets and keys; see the package documentation for the tree they form.
var (
	bucketMeta      = []byte("meta")
	keyVersion      = []byte("version")
	keyCreated      = []byte("created")
	keyCompact      = []byte("compact")
	bucketClusters  = []byte("clusters")
	keyIdentity     = []byte("identity")
	bucketResources = []byte("resources")
	keyRV           = []byte("rv")
	bucketObjects   = []byte("objects")
	// bucketDictionaries holds the compression dictionaries of the values (dict.go).
	bucketDictionaries = []byte("dictionaries")
)

// Identity tells whether a stored cluster is the cluster a connection reaches now. It
// has the fields of cluster.Identity, so that one converts to the other.
type Identity struct {
	// UID is the UID of the cluster's kube-system namespace.
	UID types.UID
	// Server is the normalized server URL.
	Server string
}

// storedIdentity is the stored form of an Identity.
type storedIdentity struct {
	UID    string `json:"uid"`
	Server string `json:"server"`
}

func encodeIdentity(id Identity) ([]byte, error) {
	return json.Marshal(storedIdentity{UID: string(id.UID), Server: id.Server})
}

func decodeIdentity(data []byte) (Identity, error) {
	var s storedIdentity
	if err := json.Unmarshal(data, &s); err != nil {
		return Identity{}, fmt.Errorf("%w: identity: %v", ErrCorrupt, err)
	}
	return Identity{UID: types.UID(s.UID), Server: s.Server}, nil
}

// getBucket returns the bucket at the path of names under the root, or nil if one of
// them does not exist.
func getBucket(tx *bolt.Tx, names ...[]byte) *bolt.Bucket {
	b := tx.Bucket(names[0])
	for _, name := range names[1:] {
		if b == nil {
			return nil
		}
		b = b.Bucket(name)
	}
	return b
}

// createBucketIfNotExists returns the bucket at the path of names under the root,
// creating the buckets that are missing.
func createBucketIfNotExists(tx *bolt.Tx, names ...[]byte) (*bolt.Bucket, error) {
	b, err := tx.CreateBucketIfNotExists(names[0])
	for _, name := range names[1:] {
		if err != nil {
			return nil, err
		}
		b, err = b.CreateBucketIfNotExists(name)
	}
	return b, err
}

func getMetaBucket(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket(bucketMeta) }

func getClustersBucket(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket(bucketClusters) }

func createClusterBucket(tx *bolt.Tx, cluster string) (*bolt.Bucket, error) {
	return createBucketIfNotExists(tx, bucketClusters, []byte(cluster))
}

func createResourceBucket(tx *bolt.Tx, cluster, resource string) (*bolt.Bucket, error) {
	return createBucketIfNotExists(tx, bucketClusters, []byte(cluster), bucketResources, []byte(resource))
}

// putUint64 and getUint64 store integers big-endian, so that they also sort as bytes.
func putUint64(b *bolt.Bucket, key []byte, v uint64) error {
	return b.Put(key, binary.BigEndian.AppendUint64(nil, v))
}

func getUint64(b *bolt.Bucket, key []byte) (uint64, bool) {
	v := b.Get(key)
	if len(v) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

// migration moves the file from the schema version that is its index in the list of
// migrations to the next version. It runs in the same transaction that records the new
// version, so a failed or interrupted migration leaves the file as it was.
type migration struct {
	// name says what the migration does, for errors.
	name    string
	migrate func(tx *bolt.Tx, now time.Time) error
	// scrubs says that the migration deletes what must not stay in the file at all:
	// bbolt keeps deleted values in its free pages until they are reused, so the file is
	// rewritten (compacted) after the migration. The transaction of the migration sets
	// meta/compact, and the rewritten file is renamed over the old one without it, so a
	// crash in between leaves a file that Open compacts again.
	scrubs bool
}

// migrations is the ordered list of migrations; the schema version this binary writes is
// its length. Append to it; never change or reorder an entry. Every migration has a test
// (migrate_test.go).
var migrations = []migration{
	{name: "create the version 1 layout", migrate: migrateToV1},
	{name: "store unstructured objects without a format byte", migrate: migrateToV2},
	{name: "drop the stored Secrets that hold values", migrate: migrateToV3, scrubs: true},
	{name: "seal every value", migrate: migrateToV4},
	{name: "drop the stored StatefulSets, which protobuf left without their volumeClaimTemplates' apiVersion and kind", migrate: migrateToV5},
	{name: "drop the stored CSINodes, which protobuf from apiservers before 1.37 left with a status of {}", migrate: migrateToV6},
	{name: "create the change log", migrate: migrateToV7},
}

// migrateToV1 lays out an empty file: version 0 is a bbolt file without any bucket.
func migrateToV1(tx *bolt.Tx, now time.Time) error {
	meta, err := tx.CreateBucket(bucketMeta)
	if err != nil {
		return err
	}
	if err := putUint64(meta, keyCreated, uint64(now.UnixNano())); err != nil {
		return err
	}
	_, err = tx.CreateBucket(bucketClusters)
	return err
}

// migrateToV2 changes nothing in the file. Version 2 stores an unstructured object as
// its CBOR map alone, without the format byte before it, which version 1 readers do not
// know: the version tells them that the file is newer than they are, rather than
// corrupt. The values that version 1 wrote stay as they are, and are still read.
func migrateToV2(*bolt.Tx, time.Time) error { return nil }

// lastAppliedAnnotation is the annotation in which kubectl apply keeps the manifest it
// applied: for a Secret, its values. It is informer.LastAppliedAnnotation, which this
// package does not import.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// migrateToV3 drops every stored resource of Secrets (the core group's "secrets", any
// version, any qualifier) of which an object holds a value: data or stringData with an
// entry, or lastAppliedAnnotation. Versions 1 and 2 were written by binaries that kept
// the annotation, which holds the values, even when they dropped data and stringData.
//
// The migration drops rather than scrubs: whether the values were to be kept is in the
// resource key's qualifier, which this package does not read, and a scrubbed object would
// differ from the server's object at the stored resourceVersion, so a watch resumed from
// there would serve it without its values for good. A dropped resource is listed again by
// its informer; the other resources resume. An object that does not decode counts as
// holding a value. The file is compacted afterwards (migration.scrubs).
func migrateToV3(tx *bolt.Tx, _ time.Time) error {
	type stored struct{ cluster, resource string }
	var drop []stored
	err := forEachCluster(tx, func(cluster string, cb *bolt.Bucket, _ Identity) error {
		return forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
			if gvr := ResourceKey(resource).GroupVersionResource(); gvr.Group != "" || gvr.Resource != "secrets" {
				return nil
			}
			objects := rb.Bucket(bucketObjects)
			if objects == nil {
				return nil // checkTree reports it
			}
			c := objects.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if obj, err := decodeObject(v); v == nil || err != nil || holdsSecretValue(obj) {
					drop = append(drop, stored{cluster, resource})
					break
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, d := range drop {
		if err := getBucket(tx, bucketClusters, []byte(d.cluster), bucketResources).DeleteBucket([]byte(d.resource)); err != nil {
			return fmt.Errorf("cluster %q, resource %q: %w", d.cluster, d.resource, err)
		}
	}
	return nil
}

// migrateToV4 seals every value (see seal.go); migrate seals the meta bucket.
func migrateToV4(tx *bolt.Tx, _ time.Time) error {
	clusters := getClustersBucket(tx)
	if clusters == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketClusters)
	}
	type kv struct{ key, value []byte }
	// Keys are not put while a cursor walks their bucket: collect, then put.
	names, err := bucketNames(clusters)
	if err != nil {
		return err
	}
	for _, name := range names {
		cluster := string(name)
		cb := clusters.Bucket(name)
		if id := cb.Get(keyIdentity); id != nil {
			if err := cb.Put(keyIdentity, seal(identitySum(cluster), keyIdentity, id)); err != nil {
				return err
			}
		}
		resources := cb.Bucket(bucketResources)
		if resources == nil {
			continue
		}
		var keys [][]byte
		if err := resources.ForEachBucket(func(k []byte) error {
			keys = append(keys, bytes.Clone(k))
			return nil
		}); err != nil {
			return err
		}
		for _, key := range keys {
			resource := string(key)
			rb := resources.Bucket(key)
			if rv := rb.Get(keyRV); rv != nil {
				if err := rb.Put(keyRV, seal(rvSum(cluster, resource), keyRV, rv)); err != nil {
					return err
				}
			}
			objects := rb.Bucket(bucketObjects)
			if objects == nil {
				continue
			}
			var sealed []kv
			sum := objectsSum(cluster, resource)
			if err := objects.ForEach(func(k, v []byte) error {
				if v != nil {
					sealed = append(sealed, kv{bytes.Clone(k), seal(sum, k, v)})
				}
				return nil
			}); err != nil {
				return err
			}
			for _, o := range sealed {
				if err := objects.Put(o.key, o.value); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// holdsSecretValue reports whether the stored Secret obj holds a value (migrateToV3).
func holdsSecretValue(obj runtime.Object) bool {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		for _, field := range []string{"data", "stringData"} {
			switch v := o.Object[field].(type) {
			case nil:
			case map[string]any:
				if len(v) > 0 {
					return true
				}
			default:
				return true
			}
		}
		md, _ := o.Object["metadata"].(map[string]any)
		ann, _ := md["annotations"].(map[string]any)
		_, ok := ann[lastAppliedAnnotation]
		return ok
	case *metav1.PartialObjectMetadata:
		_, ok := o.Annotations[lastAppliedAnnotation]
		return ok
	}
	return true
}

// readVersion returns the schema version of the file: 0 for a file without buckets. A
// file with buckets but without the meta bucket was not written by fleetwatch, unless
// one of them holds a schema version: then it is the meta bucket, its name damaged. A
// meta bucket with a seal (keySum) must match it.
func readVersion(tx *bolt.Tx) (uint64, error) {
	meta := getMetaBucket(tx)
	if meta == nil {
		var names []string
		damaged := false
		if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			names = append(names, fmt.Sprintf("%q", name))
			damaged = damaged || (b != nil && b.Get(keyVersion) != nil)
			return nil
		}); err != nil {
			return 0, err
		}
		if damaged {
			return 0, fmt.Errorf("%w: no %q bucket, but the buckets %s, one with a schema version", ErrCorrupt, bucketMeta, strings.Join(names, ", "))
		}
		if len(names) > 0 {
			return 0, fmt.Errorf("%w: it has the buckets %s and no %q bucket", ErrNotSnapshot, strings.Join(names, ", "), bucketMeta)
		}
		return 0, nil
	}
	v, ok := getUint64(meta, keyVersion)
	if !ok {
		return 0, fmt.Errorf("%w: the schema version is missing or malformed", ErrCorrupt)
	}
	if sum := meta.Get(keySum); sum != nil && !bytes.Equal(sum, metaSum(meta)) {
		return 0, fmt.Errorf("%w: the schema version and creation time do not match their seal", ErrCorrupt)
	}
	return v, nil
}

// migrate brings the file to the schema version of the list, in one transaction. A file
// that needs no migration is not written to. If one of the migrations scrubs, it sets
// meta/compact in the same transaction: the caller then compacts the file
// (needsCompaction).
func migrate(db *bolt.DB, list []migration, now time.Time) error {
	var current bool
	if err := db.View(func(tx *bolt.Tx) error {
		v, err := readVersion(tx)
		current = err == nil && v == uint64(len(list))
		return nil
	}); err != nil || current {
		return err
	}
	return db.Update(func(tx *bolt.Tx) error {
		from, err := readVersion(tx)
		if err != nil {
			return err
		}
		to := uint64(len(list))
		if from > to {
			return fmt.Errorf("%w: the file has schema version %d, this binary knows versions up to %d", ErrSchemaTooNew, from, to)
		}
		if from == to {
			return nil
		}
		scrubbed := false
		for v := from; v < to; v++ {
			if err := list[v].migrate(tx, now); err != nil {
				return fmt.Errorf("migrating the schema from version %d to %d (%s): %w", v, v+1, list[v].name, err)
			}
			scrubbed = scrubbed || list[v].scrubs
		}
		meta := getMetaBucket(tx)
		if meta == nil {
			return fmt.Errorf("migrating the schema to version %d: no %q bucket after the migrations", to, bucketMeta)
		}
		if scrubbed {
			if err := meta.Put(keyCompact, []byte{1}); err != nil {
				return err
			}
		}
		if err := putUint64(meta, keyVersion, to); err != nil {
			return err
		}
		if to < sealedVersion {
			return nil
		}
		return meta.Put(keySum, metaSum(meta))
	})
}

// needsCompaction reports whether a migration that scrubs has run on the file since it
// was last compacted.
func needsCompaction(tx *bolt.Tx) bool {
	meta := getMetaBucket(tx)
	return meta != nil && meta.Get(keyCompact) != nil
}

// checkVersion is migrate's check for a read-only Store, which cannot migrate.
func checkVersion(tx *bolt.Tx, list []migration) error {
	v, err := readVersion(tx)
	if err != nil {
		return err
	}
	switch want := uint64(len(list)); {
	case v > want:
		return fmt.Errorf("%w: the file has schema version %d, this binary knows versions up to %d", ErrSchemaTooNew, v, want)
	case v < want:
		return fmt.Errorf("%w: the file has schema version %d, this binary writes version %d; open it writable once", ErrSchemaTooOld, v, want)
	}
	return nil
}

// checkSize checks that the file is at least as long as the database says. bbolt maps
// more than the file, and a page beyond its end would fault when read, so the other
// checks come after this one.
func checkSize(tx *bolt.Tx, fileSize int64) error {
	if size := tx.Size(); size > fileSize {
		return fmt.Errorf("%w: the file is truncated: %d bytes, the database needs %d", ErrCorrupt, fileSize, size)
	}
	return nil
}

// checkTree is the cheap integrity check of Open: the bucket tree down to each resource
// has the expected form. It reads a few pages per resource, and none of the objects,
// which Load and Verify read. A bad page can panic in bbolt; the caller recovers.
func checkTree(tx *bolt.Tx) error {
	meta := getMetaBucket(tx)
	if meta == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketMeta)
	}
	if _, ok := getUint64(meta, keyCreated); !ok {
		return fmt.Errorf("%w: the creation time is missing or malformed", ErrCorrupt)
	}
	clusters := getClustersBucket(tx)
	if clusters == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketClusters)
	}
	if err := checkHistoryTree(tx); err != nil {
		return err
	}
	sealed := isSealed(tx)
	return forEachCluster(tx, func(cluster string, cb *bolt.Bucket, _ Identity) error {
		if err := checkKeys(cb, keyIdentity, bucketResources); err != nil {
			return fmt.Errorf("cluster %q: %w", cluster, err)
		}
		return forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
			if _, err := ParseResourceKey(resource); err != nil {
				return fmt.Errorf("%w: cluster %q: %v", ErrCorrupt, cluster, err)
			}
			if err := checkKeys(rb, keyRV, bucketObjects); err != nil {
				return fmt.Errorf("cluster %q, resource %q: %w", cluster, resource, err)
			}
			if _, err := getRV(rb, cluster, resource, sealed); err != nil {
				return err
			}
			if rb.Bucket(bucketObjects) == nil {
				return fmt.Errorf("%w: cluster %q, resource %q: no %q bucket", ErrCorrupt, cluster, resource, bucketObjects)
			}
			return nil
		})
	})
}

// checkKeys checks that the keys of b are among the value key and the bucket key that
// the layout puts there: what a damaged name would hide is not taken for absent.
func checkKeys(b *bolt.Bucket, value, bucket []byte) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		switch {
		case bytes.Equal(k, value) && v != nil, bytes.Equal(k, bucket) && v == nil:
		default:
			return fmt.Errorf("%w: unexpected key %q", ErrCorrupt, k)
		}
	}
	return nil
}

// getRV returns the resourceVersion of a resource bucket, checking its seal if sealed.
func getRV(rb *bolt.Bucket, cluster, resource string, sealed bool) (string, error) {
	rv := rb.Get(keyRV)
	if sealed {
		var err error
		if rv, err = unsealBytes(rvSum(cluster, resource), string(keyRV), rv); err != nil {
			return "", fmt.Errorf("cluster %q, resource %q: %w", cluster, resource, err)
		}
	}
	if len(rv) == 0 {
		return "", fmt.Errorf("%w: cluster %q, resource %q: no resourceVersion", ErrCorrupt, cluster, resource)
	}
	return string(rv), nil
}

// forEachCluster calls fn for each cluster bucket, in key order, with the cluster's
// identity (zero if none is stored). A value where a bucket belongs, or an identity that
// does not decode, is ErrCorrupt.
func forEachCluster(tx *bolt.Tx, fn func(cluster string, cb *bolt.Bucket, id Identity) error) error {
	clusters := getClustersBucket(tx)
	if clusters == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketClusters)
	}
	sealed := isSealed(tx)
	c := clusters.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		cluster := string(k)
		if v != nil {
			return fmt.Errorf("%w: cluster %q is a value, not a bucket", ErrCorrupt, cluster)
		}
		cb := clusters.Bucket(k)
		var id Identity
		if data := cb.Get(keyIdentity); data != nil {
			var err error
			if sealed {
				if data, err = unsealBytes(identitySum(cluster), string(keyIdentity), data); err != nil {
					return fmt.Errorf("cluster %q: %w", cluster, err)
				}
			}
			if id, err = decodeIdentity(data); err != nil {
				return fmt.Errorf("cluster %q: %w", cluster, err)
			}
		}
		if err := fn(cluster, cb, id); err != nil {
			return err
		}
	}
	return nil
}

// forEachResource calls fn for each resource bucket of the cluster bucket cb, in key
// order. A value where a bucket belongs is ErrCorrupt.
func forEachResource(cluster string, cb *bolt.Bucket, fn func(resource string, rb *bolt.Bucket) error) error {
	resources := cb.Bucket(bucketResources)
	if resources == nil {
		return nil
	}
	c := resources.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil {
			return fmt.Errorf("%w: cluster %q: resource %q is a value, not a bucket", ErrCorrupt, cluster, k)
		}
		if err := fn(string(k), resources.Bucket(k)); err != nil {
			return err
		}
	}
	return nil
}

// migrateToV5 drops every stored resource of StatefulSets (lossyResource). Versions 1 to
// 4 were written by builds that asked for them in protobuf, which does not carry the
// apiVersion and kind that the apiserver gives each of spec.volumeClaimTemplates: their
// objects lack them, and a watch resumed from their resourceVersion would serve them so
// until each StatefulSet changes. Later builds ask for StatefulSets in JSON (package
// pbjson's Lossy). A dropped resource is listed again by its informer; the others
// resume. Those written under cache.jsonOnly, or metadata-only, were exact, but whether
// they were is in the key's qualifier, which this package does not read: they are
// listed again too.
//
// It reads no identity: within a chain of migrations from before version 4, the
// version that says that values are sealed is not recorded yet.
func migrateToV5(tx *bolt.Tx, _ time.Time) error {
	return dropResources(tx, lossyResource)
}

// migrateToV6 drops every stored resource of CSINodes (skewedResource). Versions 1 to 5
// were written by builds that transcoded the protobuf of an apiserver before Kubernetes
// 1.37, whose CSINode has no status, with the types of k8s.io/api v0.37, whose CSINode
// has one, which encoding/json writes even when empty: they stored each with a status
// of {} that the apiserver's JSON does not have. Later builds leave a struct absent from
// protobuf out (package pbjson). A dropped resource is listed again by its informer.
func migrateToV6(tx *bolt.Tx, _ time.Time) error {
	return dropResources(tx, skewedResource)
}

// dropResources deletes, in every cluster, the stored resources whose key drop reports.
func dropResources(tx *bolt.Tx, drop func(ResourceKey) bool) error {
	clusters := getClustersBucket(tx)
	if clusters == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketClusters)
	}
	names, err := bucketNames(clusters)
	if err != nil {
		return err
	}
	for _, name := range names {
		// Buckets are not deleted while a cursor walks their parent: collect, then delete.
		var dropped [][]byte
		err := forEachResource(string(name), clusters.Bucket(name), func(resource string, _ *bolt.Bucket) error {
			if drop(ResourceKey(resource)) {
				dropped = append(dropped, []byte(resource))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, resource := range dropped {
			if err := clusters.Bucket(name).Bucket(bucketResources).DeleteBucket(resource); err != nil {
				return fmt.Errorf("cluster %q, resource %q: %w", name, resource, err)
			}
		}
	}
	return nil
}

// lossyResource reports whether key is of a resource whose objects the builds before
// schema version 5 (and cluster state version 2) stored from protobuf that carries less
// than their JSON: the StatefulSets of the group apps, any version, any qualifier. It is
// the resources of the listable kinds of pbjson.Lossy when version 5 was made
// (TestLossyResource), and must not change with it: a kind that becomes lossy later
// needs a migration of its own.
func lossyResource(key ResourceKey) bool {
	gvr := key.GroupVersionResource()
	return gvr.Group == "apps" && gvr.Resource == "statefulsets"
}

// skewedResource reports whether key is of a resource whose objects the builds before
// schema version 6 (and cluster state version 3) stored with a member that an older
// apiserver's JSON does not have: the CSINodes of the group storage.k8s.io, any version,
// any qualifier. It must not change: another such kind needs a migration of its own.
func skewedResource(key ResourceKey) bool {
	gvr := key.GroupVersionResource()
	return gvr.Group == "storage.k8s.io" && gvr.Resource == "csinodes"
}

// bucketNames returns the names of the buckets in b, copied out of the transaction, for
// a migration that changes them, which it must not do while a cursor walks b.
func bucketNames(b *bolt.Bucket) ([][]byte, error) {
	var names [][]byte
	err := b.ForEachBucket(func(k []byte) error {
		names = append(names, bytes.Clone(k))
		return nil
	})
	return names, err
}

// migrateToV7 creates the change log (history.go), empty: it records the changes from
// the first commit on. The resources stored already are covered from their stored
// resourceVersions on, once they are committed again.
func migrateToV7(tx *bolt.Tx, _ time.Time) error {
	return createHistoryBucket(tx)
}

// historyVersion is the first schema version with a change log.
const historyVersion = 7
