package persist

import (
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Info describes the content of the file, for the snapshot inspect command.
type Info struct {
	Path string
	// FileSize is the size of the file in bytes.
	FileSize int64
	// SchemaVersion is the schema version of the file.
	SchemaVersion uint64
	// Created is when the file was created.
	Created time.Time
	// Clusters are sorted by name.
	Clusters []ClusterInfo
}

// ClusterInfo describes one stored cluster.
type ClusterInfo struct {
	Name string
	// Identity is zero if none is stored.
	Identity Identity
	// Resources are sorted by resource key.
	Resources []ResourceInfo
}

// ResourceInfo describes one stored resource of a cluster.
type ResourceInfo struct {
	Resource        ResourceKey
	ResourceVersion string
	// Objects is the number of stored objects.
	Objects int
	// Bytes is the space the objects take in the file, bbolt's pages included.
	Bytes int64
}

// Inspect describes the content of the file without decoding any object.
func (s *Store) Inspect() (Info, error) {
	info := Info{Path: s.path}
	err := s.view(func(tx *bolt.Tx) error {
		meta := getMetaBucket(tx)
		if meta == nil {
			return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketMeta)
		}
		info.SchemaVersion, _ = getUint64(meta, keyVersion)
		if created, ok := getUint64(meta, keyCreated); ok {
			info.Created = time.Unix(0, int64(created))
		}
		sealed := isSealed(tx)
		return forEachCluster(tx, func(cluster string, cb *bolt.Bucket, id Identity) error {
			ci := ClusterInfo{Name: cluster, Identity: id}
			err := forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
				key, err := ParseResourceKey(resource)
				if err != nil {
					return fmt.Errorf("%w: cluster %q: %v", ErrCorrupt, cluster, err)
				}
				rv, err := getRV(rb, cluster, resource, sealed)
				if err != nil {
					return err
				}
				ri := ResourceInfo{Resource: key, ResourceVersion: rv}
				if objects := rb.Bucket(bucketObjects); objects != nil {
					st := objects.Stats()
					// The objects, without their lists of changes (history_lists.go).
					c := objects.Cursor()
					for k, _ := c.First(); k != nil; k, _ = c.Next() {
						if !isListKey(k) {
							ri.Objects++
						}
					}
					ri.Bytes = int64(st.BranchAlloc + st.LeafAlloc + st.InlineBucketInuse)
				}
				ci.Resources = append(ci.Resources, ri)
				return nil
			})
			info.Clusters = append(info.Clusters, ci)
			return err
		})
	})
	if err != nil {
		return Info{}, fmt.Errorf("inspecting snapshot %s: %w", s.path, err)
	}
	info.FileSize = s.fileSize()
	return info, nil
}

// maxCheckErrors bounds how many errors of bbolt's check Verify reports.
const maxCheckErrors = 20

// errRollback ends the write transaction of Verify without a commit.
var errRollback = errors.New("rollback")

// Verify checks the whole file: the page structure as Open checks it, again (see
// checkPages), bbolt's own consistency check of every page (tx.Check), the bucket tree,
// the seals, the decoding of every object, and every record of the change log. It reads the whole file, and holds back
// the Writer's commits while it runs. Problems are returned wrapping ErrCorrupt. Verify
// never moves the file aside.
func (s *Store) Verify() error {
	verify := func(tx *bolt.Tx) error {
		fi, err := os.Stat(s.path)
		if err != nil {
			return err
		}
		if err := checkSize(tx, fi.Size()); err != nil {
			return err
		}
		// tx.Check follows the pages in a goroutine of bbolt's, where a fault on a bad
		// page cannot be recovered: check them first, as Open did.
		if err := checkPages(s.file, fi.Size()); err != nil {
			return fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		var errs []error
		for err := range tx.Check() {
			if len(errs) < maxCheckErrors {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%w: bbolt's check: %w", ErrCorrupt, errors.Join(errs...))
		}
		if err := checkVersion(tx, s.opts.migrations); err != nil {
			return err
		}
		if err := checkTree(tx); err != nil {
			return err
		}
		if err := loadTx(tx, LoadOptions{}, func(string, *ClusterSnapshot) error { return nil }); err != nil {
			return err
		}
		return verifyHistory(tx)
	}
	var err error
	if s.opts.ReadOnly {
		err = s.view(verify)
	} else {
		// bbolt's check is safe next to a writer only in a write transaction.
		err = s.update(func(tx *bolt.Tx) error {
			if err := verify(tx); err != nil {
				return err
			}
			return errRollback
		})
		if errors.Is(err, errRollback) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("verifying snapshot %s: %w", s.path, err)
	}
	return nil
}
