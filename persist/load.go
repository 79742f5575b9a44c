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
	// LogOrigins, of a cluster that ImportCluster imported with its change log
	// (ImportOptions.Log), are the change logs (Store.ID) whose records of the cluster
	// the Store's log now holds, the exporter's first: a position in one of them is
	// placed in this Store's log as there. Load returns them as ImportCluster did, until
	// the cluster's records no longer follow from the import (the cluster dropped,
	// replaced or imported again, the log cleared); empty for a state that carried no
	// log.
	LogOrigins []string
}

// ResourceSnapshot is one resource of one cluster as its informer had it at
// ResourceVersion: a warm start lists exactly these objects at that resourceVersion and
// watches from there.
type ResourceSnapshot struct {
	ResourceVersion string
	// Objects are *unstructured.Unstructured, or *metav1.PartialObjectMetadata for a
	// resource cached metadata-only, sorted by namespace and name. It may be empty.
	Objects []kruntime.Object
	// Encoded is nil unless the snapshot was loaded with LoadOptions.Partial. Then it
	// has an element for each of Objects: if it is not nil, the object is a
	// *PartialObject that holds only what files it (apiVersion, kind, and of the
	// metadata name, namespace, uid, resourceVersion and labels, the members that
	// jsondec.Decoder.ObjectPartialCBOR builds) and Encoded is the whole object in
	// Codec's encoding, which aggregate.ClusterStore.ApplyPartial takes; if it is nil,
	// the object is whole (metadata-only, or stored in a form that is decoded whole).
	Encoded [][]byte
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

// LoadOptions configures Store.LoadEach. The zero value decodes every object whole.
type LoadOptions struct {
	// Partial hands out each stored *unstructured.Unstructured as what files it (a
	// *PartialObject, without a map), with its stored
	// encoding in ResourceSnapshot.Encoded, for a fleet that keeps objects in
	// Codec's encoding (aggregate.ClusterStore.ApplyPartial): the encoding is taken as it
	// is stored rather than decoded into maps and encoded again. The rest of each object
	// is still read and checked, so that Partial accepts and rejects exactly the files
	// that a whole load does. Default: false.
	Partial bool

	// Objects, if set, is given each run of a cluster's objects (at most a few hundred)
	// as soon as the run is decoded, in the order of the file, so that the caller can
	// file them while the rest of the cluster is decoded. It is called from the
	// goroutine that calls LoadEach's fn, one call at a time, with every run of a
	// cluster before fn is called for the cluster; fn still gets the whole cluster,
	// whose ResourceSnapshots hold the same objects (and, with Partial, encodings) in
	// the same order. A run of a cluster may be handed out and the cluster later found
	// unreadable: then fn is not called for it, LoadEach returns an error wrapping
	// ErrCorrupt, and the caller takes back what it did with the runs, as with the
	// clusters that fn took. An error of Objects ends the load as one of fn does.
	// Default: nil, fn alone.
	Objects func(cluster string, resource ResourceKey, objects []kruntime.Object, encoded [][]byte) error
}

// Load reads and decodes the whole snapshot, on all CPUs. It is LoadEach, gathering
// the clusters into one Snapshot.
//
// If a page or an object cannot be read, and the Store is writable and has no Writer
// yet, Load moves the file aside and starts an empty snapshot, as Open does: it returns
// an empty Snapshot, and Recovered says what happened. Otherwise (a read-only Store, or a
// Writer that may have committed on top of the file already), it returns an error
// wrapping ErrCorrupt. Load never panics on a bad file.
func (s *Store) Load() (*Snapshot, error) {
	snap := &Snapshot{Clusters: make(map[string]*ClusterSnapshot)}
	recovered, err := s.loadEach(LoadOptions{}, func(cluster string, cs *ClusterSnapshot) error {
		snap.Clusters[cluster] = cs
		return nil
	})
	if recovered {
		return &Snapshot{Clusters: make(map[string]*ClusterSnapshot)}, nil
	}
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// LoadEach reads the snapshot one cluster at a time, and hands each cluster to fn as
// soon as it is decoded, while it decodes the next: memory holds a few clusters'
// objects at a time, not the whole file's. The first cluster is the exception: the next
// is decoded once fn has returned for it, so that fn, and what its caller does with the
// first cluster, have the CPUs to themselves and the first cluster is served sooner. fn
// is called from one goroutine at a time, in the order of the clusters' names, and owns
// what it is given; it never runs after LoadEach returned. An error of fn ends the load
// and is returned.
//
// A file found unreadable (see Load) may be so after fn has taken some clusters:
// LoadEach then returns an error wrapping ErrCorrupt, and the caller takes back what it
// did with them. As Load, it moves the file aside first if the Store is writable and has
// no Writer yet; Recovered says so. LoadEach never panics on a bad file.
func (s *Store) LoadEach(opts LoadOptions, fn func(cluster string, cs *ClusterSnapshot) error) error {
	_, err := s.loadEach(opts, fn)
	return err
}

// loadEach is LoadEach, and reports whether it moved the file aside.
func (s *Store) loadEach(opts LoadOptions, fn func(cluster string, cs *ClusterSnapshot) error) (recovered bool, err error) {
	err = s.view(func(tx *bolt.Tx) error { return loadTx(tx, opts, fn) })
	if err == nil {
		return false, nil
	}
	err = fmt.Errorf("loading snapshot %s: %w", s.path, err)
	if !errors.Is(err, ErrCorrupt) || s.opts.ReadOnly {
		return false, err
	}
	if rerr := s.recoverFromLoad(err); rerr != nil {
		return false, rerr
	}
	return true, err
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

// loadChunk is how many objects a decoder takes at a time.
const loadChunk = 256

// loadAhead returns how many runs (chunks) the walk of a load may be ahead of their
// filing (LoadOptions.Objects, fn), whichever clusters they are of: two for each of the
// decoders, 16 at least. Bound by clusters instead (two: one decoded, one being
// decoded), a snapshot of a thousand clusters of twenty objects left the decoders idle
// whenever the filing of a cluster took a moment more, and loaded 20% slower (a warm
// start of 1,000 contexts on 2 CPUs, interleaved runs: 8 runs ahead took 118 ms, 16 111
// ms, 64 106 ms, two clusters 148 ms). The pages of the runs ahead stay resident until
// the next eviction (evictEvery).
func loadAhead() int { return max(16, 2*runtime.GOMAXPROCS(0)) }

// Test hooks of loadTx: testHookSent is called by the walk after it hands out each chunk,
// with the number handed out so far, and the walk fails with the error it returns;
// testHookDecode is called by a decoder before it decodes value i of c. A test makes the
// walk panic or fail mid-load, and watches when decoders run.
var (
	testHookSent   func(n int) error
	testHookDecode func(c *chunk, i int)
)

// evictEvery is how many bytes of keys and values loadTx reads through the map between
// two evictions of it.
var evictEvery = 8 << 20

// chunk is a run of objects of one resource: their stored bytes, decoded by one of the
// decoders of loadTx.
type chunk struct {
	cluster, resource string
	key               ResourceKey
	// sealed says whether the values are sealed, with seals that start with sum.
	sealed bool
	sum    uint32
	// partial: LoadOptions.Partial.
	partial bool
	// dicts are the ids of the dictionaries that the values may use: those stored with
	// them. A value that uses another is corrupt, even if the process knows it.
	dicts map[uint64]bool
	keys  []string
	// values are the stored bytes, in the file's memory map: they are valid until the
	// read transaction ends and the file is unmapped, so loadTx returns, and lets a panic
	// of the walk go on, only after its decoders are done with them; nothing that the
	// decoder returns shares memory with them.
	values  []string
	objects []kruntime.Object
	// encoded are the objects' encodings with partial (ResourceSnapshot.Encoded).
	encoded [][]byte
	// rs is the resource the chunk belongs to, and done counts down the chunks of its
	// cluster that are not decoded yet.
	rs   *ResourceSnapshot
	done *sync.WaitGroup
	// decoded is closed once a decoder is done with the chunk, decoded or failed.
	decoded chan struct{}
}

// loadedCluster is a cluster whose objects the walk of loadTx has handed out.
type loadedCluster struct {
	name   string
	cs     *ClusterSnapshot
	chunks []*chunk
	// done is done when the decoders are done with chunks.
	done sync.WaitGroup
	// walked has each chunk once it is handed to the decoders, in the order of the walk;
	// the walk closes it at the end of the cluster, after setting abandoned if the walk
	// failed or panicked in the middle of it (then fn does not get the cluster).
	walked    chan *chunk
	abandoned bool
	// bytes is the size of the keys and values of chunks, read through the map.
	bytes int
	// delivered is closed once fn has returned for the cluster.
	delivered chan struct{}
}

// loadTx reads the snapshot in tx and hands it to fn one cluster at a time. After each
// evictEvery bytes of clusters, and at the end, the pages of the file read so far leave
// the process's resident memory (evictMapped), so that the load's RSS is bounded by the
// clusters in flight and evictEvery, not the file. The goroutine of tx walks the buckets and hands the objects' bytes out in chunks, without
// copying them out of the file's memory map; decoders, one per CPU, decode them before
// loadTx returns and tx ends; a deliverer waits for each cluster's chunks to be decoded,
// in the order of the walk, and calls fn, while the walk and the decoders go on with
// the next cluster (at most one more is held decoded, waiting), but for the first
// cluster: the walk waits until fn has taken it. A bad page can panic in
// the walk; the caller recovers, and may close and unmap the file as it does, so the
// walk waits for the decoders and the deliverer before its panic goes on. A decoder
// that faults on the map (a value beyond the end of the file) fails as on a bad value.
func loadTx(tx *bolt.Tx, opts LoadOptions, fn func(cluster string, cs *ClusterSnapshot) error) error {
	// The dictionaries before any value that may use one.
	dicts, err := readDictionaries(tx)
	if err != nil {
		return err
	}
	_, index := historyBuckets(tx)
	var (
		work  = make(chan *chunk, runtime.GOMAXPROCS(0))
		ready = make(chan *loadedCluster, loadAhead())
		// ahead holds a token for each run walked and not yet filed.
		ahead     = make(chan struct{}, loadAhead())
		decoders  sync.WaitGroup
		deliverer sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
		failed    = make(chan struct{})
		// mapped counts the bytes of values read through the map since it was last
		// evicted.
		mapped int
	)
	fail := func(err error) {
		errOnce.Do(func() {
			firstErr = err
			close(failed)
		})
	}
	for range runtime.GOMAXPROCS(0) {
		decoders.Go(func() { decodeChunks(work, fail) })
	}
	deliverer.Go(func() {
		for lc := range ready {
			// The chunks as they are decoded, in order, for opts.Objects; without it, this
			// only waits for them.
			for c := range lc.walked {
				select {
				case <-c.decoded:
				case <-failed:
					<-ahead
					continue
				}
				if opts.Objects != nil && !isFailed(failed) {
					if err := opts.Objects(lc.name, c.key, c.objects, c.encoded); err != nil {
						fail(err)
					}
				}
				<-ahead
			}
			lc.done.Wait()
			if lc.abandoned || isFailed(failed) {
				close(lc.delivered)
				continue
			}
			lc.assemble()
			if err := fn(lc.name, lc.cs); err != nil {
				fail(err)
			}
			close(lc.delivered)
			// Not after every cluster: the madvise covers the whole map, and every page
			// evicted is faulted in again by the next walk of the buckets above the
			// cluster's; thousands of small clusters spent most of their load on it.
			if mapped += lc.bytes; mapped >= evictEvery {
				evictMapped(tx)
				mapped = 0
			}
		}
		if mapped > 0 {
			evictMapped(tx)
		}
	})

	sealed := isSealed(tx)
	sent := 0
	first := true
	send := func(lc *loadedCluster, c *chunk) error {
		select {
		case ahead <- struct{}{}:
		case <-failed:
			return firstErr
		}
		lc.chunks = append(lc.chunks, c)
		c.done = &lc.done
		c.decoded = make(chan struct{})
		lc.done.Add(1)
		select {
		case work <- c:
		case <-failed:
			lc.done.Done()
			return firstErr
		}
		sent++
		select {
		case lc.walked <- c:
		case <-failed:
			return firstErr
		}
		if testHookSent != nil {
			return testHookSent(sent)
		}
		return nil
	}
	// cur is the cluster being walked, whose walked the walk closes.
	var cur *loadedCluster
	walk := func() error {
		// Also when a bad page panics: the decoders and fn end, and the map stays until
		// the decoders have.
		defer func() {
			if cur != nil {
				cur.abandoned = true
				close(cur.walked)
			}
			close(work)
			decoders.Wait()
			close(ready)
			deliverer.Wait()
		}()
		return forEachCluster(tx, func(cluster string, cb *bolt.Bucket, id Identity) error {
			lc := &loadedCluster{
				name:      cluster,
				delivered: make(chan struct{}),
				cs:        &ClusterSnapshot{Identity: id, Resources: make(map[ResourceKey]*ResourceSnapshot), LogOrigins: loadOrigins(index, cluster)},
				walked:    make(chan *chunk, loadAhead()),
			}
			// The deliverer takes the cluster now, and its chunks as they are walked (at
			// most loadAhead() runs ahead of it, of this cluster and those before).
			select {
			case ready <- lc:
			case <-failed:
				return firstErr
			}
			cur = lc
			err := forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
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
				lc.cs.Resources[key] = rs
				var c *chunk
				cur := objects.Cursor()
				for k, v := cur.First(); k != nil; k, v = cur.Next() {
					if v == nil {
						return fmt.Errorf("%w: cluster %q, resource %q: %q is a bucket, not an object", ErrCorrupt, cluster, resource, k)
					}
					if isListKey(k) {
						continue // an object's list of changes (history_lists.go)
					}
					if c == nil {
						c = &chunk{cluster: cluster, resource: resource, key: key, sealed: sealed, sum: sum, partial: opts.Partial, dicts: dicts, rs: rs}
					}
					lc.bytes += len(k) + len(v)
					c.keys = append(c.keys, string(k))
					c.values = append(c.values, unsafe.String(unsafe.SliceData(v), len(v)))
					if len(c.keys) == loadChunk {
						if err := send(lc, c); err != nil {
							return err
						}
						c = nil
					}
				}
				if c != nil {
					return send(lc, c)
				}
				return nil
			})
			if err != nil {
				return err
			}
			cur = nil
			close(lc.walked)
			// The first cluster is decoded on every CPU and handed to fn before the
			// next one is handed out: fn's filing of it, and what its caller does with a
			// cluster it has (a warm start serves it), run without the decoders of the
			// next cluster on the same CPUs. The load takes about as much longer as fn
			// takes for the first cluster; the next ones are decoded while fn runs.
			if first {
				first = false
				select {
				case <-lc.delivered:
				case <-failed:
					return firstErr
				}
			}
			return nil
		})
	}
	if err := walk(); err != nil {
		return err
	}
	return firstErr
}

// assemble puts the decoded objects of lc's chunks into its resources, in the order of
// the walk.
func (lc *loadedCluster) assemble() {
	n := make(map[*ResourceSnapshot]int)
	for _, c := range lc.chunks {
		n[c.rs] += len(c.objects)
	}
	for _, c := range lc.chunks {
		rs := c.rs
		if rs.Objects == nil {
			rs.Objects = make([]kruntime.Object, 0, n[rs])
			if c.partial {
				rs.Encoded = make([][]byte, 0, n[rs])
			}
		}
		rs.Objects = append(rs.Objects, c.objects...)
		if c.partial {
			rs.Encoded = append(rs.Encoded, c.encoded...)
		}
	}
	lc.chunks = nil
}

// decodeChunks is a decoder of loadTx: it decodes the chunks of work until work is
// closed, and gives fail the errors. A fault reading the memory map (a value past the
// end of the file) is a panic in its goroutine, which decode turns into an error: the
// setting is per goroutine, so that every decoder makes it.
func decodeChunks(work <-chan *chunk, fail func(error)) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var d fastDecoder
	cluster := ""
	for c := range work {
		if !c.partial && (d.shared == nil || c.cluster != cluster) {
			// Objects share maps and arrays within a cluster (sharedValues): the table
			// starts over with each, so that it holds views of the pages being read,
			// not of those that the load has evicted (evictMapped).
			if d.shared == nil {
				d.shared = new(sharedValues)
			}
			d.shared.reset()
			cluster = c.cluster
		}
		if err := c.decode(&d); err != nil {
			fail(err)
		}
		if c.decoded != nil {
			close(c.decoded)
		}
		c.done.Done()
		// Let what the delivered clusters woke (their filing, a controller's first
		// events) run between chunks, rather than wait for the decoders' preemption.
		runtime.Gosched()
	}
}

// decode checks the seals of the chunk's values, decodes them, and checks that each
// object is stored under its own key. It never panics.
func (c *chunk) decode(d *fastDecoder) (err error) {
	defer recoverDecode(&err)
	c.objects = make([]kruntime.Object, len(c.values))
	if c.partial {
		c.encoded = make([][]byte, len(c.values))
	}
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
		if len(v) > 0 && v[0] == formatDict {
			if id, err := dictIDOfEncoding(bytesOf(v)); err != nil || !c.dicts[id] {
				return fmt.Errorf("%w: cluster %q, resource %q, object %q: its dictionary is not stored with it", ErrCorrupt, c.cluster, c.resource, c.keys[i])
			}
		}
		var obj kruntime.Object
		var err error
		if c.partial {
			obj, c.encoded[i], err = d.decodePartial(v)
		} else {
			obj, err = d.decode(v)
		}
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

func isFailed(failed <-chan struct{}) bool {
	select {
	case <-failed:
		return true
	default:
		return false
	}
}
