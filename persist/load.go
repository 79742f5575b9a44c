package persist

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
)

// Snapshot is the content of the file. Load returns a new one each time: it belongs to
// the caller, objects included.
type Snapshot struct {
	// Clusters maps the name of each stored cluster to what is stored about it.
	Clusters map[string]*ClusterSnapshot
}

// ClusterSnapshot is what is stored about one cluster.
type ClusterSnapshot struct {
	// Identity is the identity stored by SetIdentity, zero if none was. A caller that
	// finds another identity on the server drops the cluster (Writer.DropCluster).
	Identity Identity
	// Resources maps the key of each stored resource of the cluster to its snapshot.
	Resources map[ResourceKey]*ResourceSnapshot
}

// ResourceSnapshot is one resource of one cluster as its informer had it at
// ResourceVersion: a warm start lists exactly these objects at that resourceVersion and
// watches from there.
type ResourceSnapshot struct {
	ResourceVersion string
	// Objects are *unstructured.Unstructured, or *metav1.PartialObjectMetadata for a
	// resource cached metadata-only, sorted by namespace and name. It may be empty.
	Objects []kruntime.Object
}

// MetadataOnly reports whether the resource was stored metadata-only: it has objects,
// and they are all *metav1.PartialObjectMetadata. A caller that now caches the resource
// in the other form drops it (Writer.DropResource); an empty resource fits either form.
func (r *ResourceSnapshot) MetadataOnly() bool {
	for _, obj := range r.Objects {
		if _, ok := obj.(*metav1.PartialObjectMetadata); !ok {
			return false
		}
	}
	return len(r.Objects) > 0
}

// Load reads and decodes the whole snapshot, on all CPUs.
//
// If a page or an object cannot be read, and the Store is writable and has no Writer
// yet, Load moves the file aside and starts an empty snapshot, as Open does: it returns
// an empty Snapshot, and Recovered says what happened. Otherwise (a read-only Store, or a
// Writer that may have committed on top of the file already), it returns an error
// wrapping ErrCorrupt. Load never panics on a bad file.
func (s *Store) Load() (*Snapshot, error) {
	snap, err := s.load()
	if err == nil || !errors.Is(err, ErrCorrupt) || s.opts.ReadOnly {
		return snap, err
	}
	if err := s.recoverFromLoad(err); err != nil {
		return nil, err
	}
	return &Snapshot{Clusters: make(map[string]*ClusterSnapshot)}, nil
}

// recoverFromLoad moves aside a file that Load could not read and opens an empty one.
func (s *Store) recoverFromLoad(cause error) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.writer != nil {
		return cause
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if err := s.closeDBLocked(); err != nil {
		s.closed = true
		return fmt.Errorf("%w; closing it failed: %w", cause, err)
	}
	s.poisoned.Store(false)
	db, file, err := s.replaceCorrupt(cause)
	if err != nil {
		s.closed = true
		return err
	}
	s.db, s.file = db, file
	return nil
}

func (s *Store) load() (*Snapshot, error) {
	var snap *Snapshot
	err := s.view(func(tx *bolt.Tx) error {
		var err error
		snap, err = loadTx(tx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("loading snapshot %s: %w", s.path, err)
	}
	return snap, nil
}

// loadChunk is how many objects a decoder takes at a time.
const loadChunk = 256

// Test hooks of loadTx: testHookSent is called by the walk after it hands out each chunk,
// with the number handed out so far, and the walk fails with the error it returns;
// testHookDecode is called by a decoder before it decodes value i of c. A test makes the
// walk panic or fail mid-load, and watches when decoders run.
var (
	testHookSent   func(n int) error
	testHookDecode func(c *chunk, i int)
)

// chunk is a run of objects of one resource: their stored bytes, decoded by one of the
// decoders of loadTx.
type chunk struct {
	cluster, resource string
	// sealed says whether the values are sealed, with seals that start with sum.
	sealed bool
	sum    uint32
	keys   []string
	// values are the stored bytes, in the file's memory map: they are valid until the
	// read transaction ends and the file is unmapped, so loadTx returns, and lets a panic
	// of the walk go on, only after its decoders are done with them; nothing that the
	// decoder returns shares memory with them.
	values  []string
	objects []kruntime.Object
}

// loadTx reads the snapshot in tx. The goroutine of tx walks the buckets and hands the
// objects' bytes out in chunks, without copying them out of the file's memory map;
// decoders, one per CPU, decode them before loadTx returns and tx ends. A bad page can
// panic in the walk; the caller recovers, and may close and unmap the file as it does,
// so the walk waits for the decoders before its panic goes on. A decoder that faults on
// the map (a value beyond the end of the file) fails as on a bad value.
func loadTx(tx *bolt.Tx) (*Snapshot, error) {
	var (
		work     = make(chan *chunk, runtime.GOMAXPROCS(0))
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		failed   = make(chan struct{})
	)
	fail := func(err error) {
		errOnce.Do(func() {
			firstErr = err
			close(failed)
		})
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() { decodeChunks(work, fail) })
	}

	snap := &Snapshot{Clusters: make(map[string]*ClusterSnapshot)}
	sealed := isSealed(tx)
	chunks := make(map[*ResourceSnapshot][]*chunk)
	sent := 0
	send := func(rs *ResourceSnapshot, c *chunk) error {
		chunks[rs] = append(chunks[rs], c)
		select {
		case work <- c:
			sent++
			if testHookSent != nil {
				return testHookSent(sent)
			}
			return nil
		case <-failed:
			return firstErr
		}
	}
	walk := func() error {
		// Also when a bad page panics: the decoders end, and the map stays until they have.
		defer func() {
			close(work)
			wg.Wait()
		}()
		return forEachCluster(tx, func(cluster string, cb *bolt.Bucket, id Identity) error {
			cs := &ClusterSnapshot{Identity: id, Resources: make(map[ResourceKey]*ResourceSnapshot)}
			snap.Clusters[cluster] = cs
			return forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
				key, err := ParseResourceKey(resource)
				if err != nil {
					return fmt.Errorf("%w: cluster %q: %v", ErrCorrupt, cluster, err)
				}
				rv, err := getRV(rb, cluster, resource, sealed)
				if err != nil {
					return err
				}
				objects := rb.Bucket(bucketObjects)
				if objects == nil {
					return fmt.Errorf("%w: cluster %q, resource %q: no objects", ErrCorrupt, cluster, resource)
				}
				rs := &ResourceSnapshot{ResourceVersion: rv}
				sum := objectsSum(cluster, resource)
				cs.Resources[key] = rs
				var c *chunk
				cur := objects.Cursor()
				for k, v := cur.First(); k != nil; k, v = cur.Next() {
					if v == nil {
						return fmt.Errorf("%w: cluster %q, resource %q: %q is a bucket, not an object", ErrCorrupt, cluster, resource, k)
					}
					if c == nil {
						c = &chunk{cluster: cluster, resource: resource, sealed: sealed, sum: sum}
					}
					c.keys = append(c.keys, string(k))
					c.values = append(c.values, unsafe.String(unsafe.SliceData(v), len(v)))
					if len(c.keys) == loadChunk {
						if err := send(rs, c); err != nil {
							return err
						}
						c = nil
					}
				}
				if c != nil {
					return send(rs, c)
				}
				return nil
			})
		})
	}
	walkErr := walk()
	if walkErr != nil {
		return nil, walkErr
	}
	if firstErr != nil {
		return nil, firstErr
	}
	for rs, cs := range chunks {
		n := 0
		for _, c := range cs {
			n += len(c.objects)
		}
		rs.Objects = make([]kruntime.Object, 0, n)
		for _, c := range cs {
			rs.Objects = append(rs.Objects, c.objects...)
		}
	}
	return snap, nil
}

// decodeChunks is a decoder of loadTx: it decodes the chunks of work until work is
// closed, and gives fail the errors. A fault reading the memory map (a value past the
// end of the file) is a panic in its goroutine, which decode turns into an error: the
// setting is per goroutine, so that every decoder makes it.
func decodeChunks(work <-chan *chunk, fail func(error)) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var d fastDecoder
	for c := range work {
		if err := c.decode(&d); err != nil {
			fail(err)
		}
	}
}

// decode checks the seals of the chunk's values, decodes them, and checks that each
// object is stored under its own key. It never panics.
func (c *chunk) decode(d *fastDecoder) (err error) {
	defer recoverDecode(&err)
	c.objects = make([]kruntime.Object, len(c.values))
	for i, v := range c.values {
		if testHookDecode != nil {
			testHookDecode(c, i)
		}
		if c.sealed {
			var err error
			if v, err = unseal(c.sum, c.keys[i], v); err != nil {
				return fmt.Errorf("cluster %q, resource %q: %w", c.cluster, c.resource, err)
			}
		}
		obj, err := d.decode(v)
		if err != nil {
			return fmt.Errorf("cluster %q, resource %q, object %q: %w", c.cluster, c.resource, c.keys[i], err)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return fmt.Errorf("%w: cluster %q, resource %q, object %q: %v", ErrCorrupt, c.cluster, c.resource, c.keys[i], err)
		}
		if key := objectKey(m.GetNamespace(), m.GetName()); key != c.keys[i] {
			return fmt.Errorf("%w: cluster %q, resource %q: the object stored as %q is %q", ErrCorrupt, c.cluster, c.resource, c.keys[i], key)
		}
		c.objects[i] = obj
	}
	c.values = nil
	return nil
}
