package persist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
)

// Defaults of WriterOptions.
const (
	DefaultInterval   = 5 * time.Second
	DefaultMaxPending = 5000
)

// WriterOptions configures a Writer. The zero value is ready to use.
type WriterOptions struct {
	// Interval is how often the Writer commits what is ready. It bounds the lag of the
	// snapshot behind the informers, plus the time a commit takes. Default DefaultInterval.
	//
	// A shorter interval costs CPU and saves little. Each commit rewrites, besides the
	// leaf of each changed object, the branch pages above the leaves, the buckets' pages
	// and the meta page, and syncs the file twice: at 60 changed pods per second, going
	// from 1s to 5s took the snapshot's CPU per watch event from about 105 to 81 µs when
	// this default was chosen. And the lag does not decide what a restart loses: after a
	// crash, each watch resumes from its stored resourceVersion, and the apiserver sends
	// the events since, as long as they are in its watch window (minutes).
	Interval time.Duration

	// MaxPending is how many checkpointed changes make the Writer commit before the
	// Interval is over, so that a burst of watch events is written in parts of about
	// this size. (The changes of a relist, which has one checkpoint at its end, are
	// committed together, however many they are.) Default DefaultMaxPending.
	MaxPending int

	// FinalFlushTimeout bounds the last commit, made by Start when its context is done.
	// Default: 10s.
	FinalFlushTimeout time.Duration

	// Clock drives the interval and measures the lag, and gives the changes their time
	// in the change log. Default: the real clock.
	Clock clock.WithTicker

	// History configures the change log, which the commits write with the objects
	// (history.go). It is kept by default.
	History HistoryOptions
}

func (o WriterOptions) withDefaults() WriterOptions {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.FinalFlushTimeout <= 0 {
		o.FinalFlushTimeout = 10 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.History = o.History.withDefaults()
	return o
}

// Writer writes the informers' changes to the Store behind their back, in batches.
//
// The producer methods (Upsert, Delete, Checkpoint, DropResource, DropCluster) may be
// called from many goroutines. They never wait for the file: they record the change in
// memory and return. For each object only its latest state is kept (a deletion being a
// state), so memory is bounded by the number of distinct objects, even while commits
// fail. Objects passed to Upsert are kept by reference and encoded at commit time: they
// must not be modified after the call, as for any object of an informer's cache.
//
// Unless WriterOptions.History disables it, every change is also a record of the change
// log, committed in the same transaction as the objects and the resourceVersion it
// leads to: two changes of one object between commits are two records. Until they are
// committed, those records are not coalesced: up to maxPendingLog of them are held, and
// beyond, the log records that it lost changes (ChangeLost).
//
// The consistency contract: for each (cluster, resource), the changes since its last
// Checkpoint are not committed until the next Checkpoint of that (cluster, resource).
// A commit writes, for each (cluster, resource), exactly the changes up to its latest
// checkpoint and that checkpoint's resourceVersion, and it writes all of them in one
// bbolt transaction. So the stored objects of a resource are always the informer's state
// at the stored resourceVersion, whenever the process dies. The informer layer sends a
// Checkpoint after each watch event and after a relist has been applied completely, so
// that a state in the middle of a relist is never stored with a resourceVersion.
//
// Changes to one (cluster, resource) must be sent in the order in which they happened,
// and so must DropResource and DropCluster relative to them: a drop discards what was
// sent before it, and what follows it starts from an empty resource.
//
// A Writer commits once per WriterOptions.Interval, or as soon as MaxPending changes
// are checkpointed, while Start runs, and when Flush is called. SetTiming changes both
// while it runs. A commit that fails (a
// full disk) keeps its changes in memory, under those that arrived since, and the next
// commit retries; Stats reports the failures and the lag.
type Writer struct {
	store *Store
	opts  WriterOptions
	clock clock.WithTicker
	// kick asks the loop of Start for a commit before the interval is over.
	kick chan struct{}
	// retime tells the loop of Start that the interval changed (SetTiming).
	retime  chan struct{}
	started atomic.Bool

	// mu guards state, sinceCommit, inflight, stats, and the Interval and MaxPending of
	// opts, which SetTiming changes.
	mu    sync.Mutex
	state pending
	// sinceCommit counts the changes checkpointed since the last commit was taken.
	sinceCommit int
	// inflight is the batch being committed, if any: taken from state, not in the file
	// yet.
	inflight *batch
	stats    Stats
	// historyCleared says that a Writer with the change log disabled has deleted the
	// log that the file held. Guarded by the Store's commitMu.
	historyCleared bool
}

// Stats describes a Writer, for metrics. Durations and counts are as of the call.
type Stats struct {
	// Pending is the number of changes not committed yet, counted per object, those of
	// a commit in progress included.
	Pending int
	// Checkpointed is how many of Pending are covered by a checkpoint, and so wait only
	// for the next commit, or for the one in progress.
	Checkpointed int
	// Lag is the age of the oldest checkpointed change (or checkpoint) not committed yet,
	// in progress or not, 0 if there is none: how far the snapshot is behind the
	// informers. It stays below the interval plus the duration of a commit as long as
	// commits succeed.
	Lag time.Duration
	// OldestPending is the age of the oldest change not committed, checkpointed or not.
	// A change without a checkpoint waits for one, as in the middle of a relist.
	OldestPending time.Duration

	// Commits and CommitErrors count the commits that succeeded and failed.
	Commits      uint64
	CommitErrors uint64
	// Rejected counts changes that cannot be stored: calls with an empty cluster name, an
	// invalid resource or resourceVersion, and objects that cannot be encoded, for which
	// the whole resource is dropped from the file and not written again until it is
	// dropped by the caller.
	Rejected uint64
	// LastError is the last error of a commit or a rejection, and LastErrorTime its time.
	LastError     error
	LastErrorTime time.Time
	// LastCommitTime and LastCommitDuration describe the last successful commit.
	LastCommitTime     time.Time
	LastCommitDuration time.Duration

	// FileSize is the size of the snapshot file in bytes.
	FileSize int64
}

// NewWriter returns the Writer of s. A Store has at most one Writer: NewWriter panics
// if it is called twice. Once s has a Writer, SetIdentity, DropCluster and DropResource
// of s go through it, so that they are ordered with its changes.
func (s *Store) NewWriter(opts WriterOptions) *Writer {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.writer != nil {
		panic("persist: NewWriter called twice on one Store")
	}
	opts = opts.withDefaults()
	w := &Writer{store: s, opts: opts, clock: opts.Clock, kick: make(chan struct{}, 1), retime: make(chan struct{}, 1)}
	w.state.history = opts.History.Enabled
	s.writer = w
	return w
}

// Upsert records the new state of an object, an *unstructured.Unstructured or a
// *metav1.PartialObjectMetadata. It is committed with the next Checkpoint of its
// (cluster, resource).
func (w *Writer) Upsert(cluster string, resource ResourceKey, obj runtime.Object) {
	w.upsert(cluster, resource, obj, nil)
}

// UpsertEncoded is Upsert with the encoding of obj at hand: encoded is the CBOR of obj's
// Object map, or the byte 3 (package wire's MetadataFormat) and then the CBOR of the
// map of a meta.k8s.io/v1 PartialObjectMetadata, or the byte 4 (wire's
// CompactMetadataFormat) and such an object in package metaenc's encoding, which is
// stored as it is, rather than
// an encoding of obj made at commit time. The informers get it for free while decoding a watch event (see
// jsondec.Decoder.ObjectCBOR). It must be one CBOR map in the subset that the
// snapshot's decoder reads: map keys are byte or text strings, in any order and each
// once, and values are maps, arrays, strings, integers that fit an int64, finite floats,
// booleans or null, all of definite length and without tags; or such a map compressed,
// as Codec with Compress keeps it.
//
// Checking that would cost as much as encoding obj, so only the first bytes are
// checked: if they are not the head of a map, 3 and the head of a map, 4, or the head of
// a compressed encoding, obj is encoded at commit time as by Upsert. An encoding that is
// not what it should be makes the snapshot fail to load at the next start, which then
// moves the file aside and starts cold. encoded may not be modified after the call; obj
// may, if encoded passed that check: the Writer then keeps encoded and not obj.
func (w *Writer) UpsertEncoded(cluster string, resource ResourceKey, obj *unstructured.Unstructured, encoded []byte) {
	if !isMapHead(first(encoded)) && (first(encoded) != formatMetadataMap || len(encoded) < 2 || !isMapHead(encoded[1])) &&
		first(encoded) != formatMetadataCompact && !isCompressed(first(encoded)) {
		encoded = nil
	}
	w.upsert(cluster, resource, obj, encoded)
}

// first returns the first byte of b, 0 if b is empty (not the head of a map).
func first(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

func (w *Writer) upsert(cluster string, resource ResourceKey, obj runtime.Object, encoded []byte) {
	if err := validateGroup(cluster, resource); err != nil {
		w.reject(err)
		return
	}
	key, err := keyOf(obj)
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("cluster %q, resource %q: %w; the resource is not stored any more", cluster, resource, err)
		w.state.breakResource(cluster, resource, err)
		w.rejectLocked(err, now)
		return
	}
	st := objectState{obj: obj, encoded: encoded}
	var e logEntry
	if w.state.history {
		e.objectRV = resourceVersionOf(obj)
	}
	if encoded != nil {
		// The commit writes encoded and never reads obj, which may be much larger than
		// what the caller keeps of it (a compact fleet keeps the encoding and drops the
		// partial object it was filed with): holding obj until the next commit, up to
		// an Interval after a cold start's lists, would keep every listed object alive.
		st.obj = nil
	}
	w.state.change(cluster, resource, key, st, e, now)
}

// resourceVersionOf returns the resourceVersion of an object that keyOf accepted.
func resourceVersionOf(obj runtime.Object) string {
	if m, ok := obj.(metav1.Object); ok {
		return m.GetResourceVersion()
	}
	return ""
}

// Delete records that an object is gone. It is committed with the next Checkpoint of
// its (cluster, resource). namespace is empty for a cluster-scoped object.
func (w *Writer) Delete(cluster string, resource ResourceKey, namespace, name string) {
	w.delete(cluster, resource, namespace, name, ChangeDeleted)
}

// DeleteVanished is Delete of an object that a relist found gone, deleted while the
// informer was away: the change log tells it apart (ChangeVanished).
func (w *Writer) DeleteVanished(cluster string, resource ResourceKey, namespace, name string) {
	w.delete(cluster, resource, namespace, name, ChangeVanished)
}

func (w *Writer) delete(cluster string, resource ResourceKey, namespace, name string, typ ChangeType) {
	if err := validateGroup(cluster, resource); err != nil {
		w.reject(err)
		return
	}
	if name == "" {
		w.reject(fmt.Errorf("%w: cluster %q, resource %q: delete of an object without a name", ErrInvalid, cluster, resource))
		return
	}
	if key := objectKey(namespace, name); !validObjectKey(key) {
		w.reject(fmt.Errorf("cluster %q, resource %q: %w", cluster, resource, errObjectKey(key)))
		return
	}
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state.change(cluster, resource, objectKey(namespace, name), objectState{}, logEntry{typ: typ}, now)
}

// Checkpoint says that the informer of (cluster, resource) holds, at resourceVersion,
// exactly the state that the changes sent so far describe. Those changes become ready
// to commit, together with resourceVersion. Informers that share a store (one per
// namespace) have a resourceVersion each, and so need a resource key each.
func (w *Writer) Checkpoint(cluster string, resource ResourceKey, resourceVersion string) {
	if err := validateGroup(cluster, resource); err != nil {
		w.reject(err)
		return
	}
	if resourceVersion == "" {
		w.reject(fmt.Errorf("%w: cluster %q, resource %q: checkpoint without a resourceVersion", ErrInvalid, cluster, resource))
		return
	}
	now := w.clock.Now()
	w.mu.Lock()
	w.sinceCommit += w.state.checkpoint(cluster, resource, resourceVersion, now)
	full := w.sinceCommit >= w.opts.MaxPending
	w.mu.Unlock()
	if full {
		signal(w.kick)
	}
}

// signal wakes the loop of Start through c, unless a wake-up is pending already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// SetTiming changes the Interval and MaxPending of the Writer, as WriterOptions sets them
// (zero or less for the default), while it runs: the next commit comes at most the new
// interval after the call, and a MaxPending that the changes checkpointed since the last
// commit already reach makes it come at once.
func (w *Writer) SetTiming(interval time.Duration, maxPending int) {
	o := WriterOptions{Interval: interval, MaxPending: maxPending}.withDefaults()
	w.mu.Lock()
	changed := o.Interval != w.opts.Interval
	w.opts.Interval, w.opts.MaxPending = o.Interval, o.MaxPending
	full := w.sinceCommit >= w.opts.MaxPending
	w.mu.Unlock()
	if changed {
		signal(w.retime)
	}
	if full {
		signal(w.kick)
	}
}

// interval returns the current commit interval.
func (w *Writer) interval() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.opts.Interval
}

// DropResource discards what the Writer holds for (cluster, resource), and deletes the
// resource from the file at the next commit. Changes sent after it start from an empty
// resource: call it before the informer of a resource starts over without the snapshot
// (the snapshot was not valid for it, or the resource changed between full objects and
// metadata only).
func (w *Writer) DropResource(cluster string, resource ResourceKey) {
	if err := validateGroup(cluster, resource); err != nil {
		w.reject(err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state.dropResource(cluster, resource)
}

// SetIdentity stores the identity of cluster at the next commit, with the changes sent
// before it: Store.SetIdentity without a commit of its own, so that the identities of
// a fleet of thousands that starts cost a few commits, not one each.
func (w *Writer) SetIdentity(cluster string, id Identity) {
	if err := validateCluster(cluster); err != nil {
		w.reject(err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state.setIdentity(cluster, id)
}

// DropCluster discards what the Writer holds for cluster, and deletes the cluster from
// the file, with its identity, at the next commit. Call it when a cluster leaves the
// fleet; ReplaceCluster before it starts over because its identity changed.
func (w *Writer) DropCluster(cluster string) { w.dropCluster(cluster, false) }

// ReplaceCluster is DropCluster of a cluster whose identity changed, which starts over
// as another cluster under the same name: the change log tells it apart
// (ChangeClusterReplaced).
func (w *Writer) ReplaceCluster(cluster string) { w.dropCluster(cluster, true) }

func (w *Writer) dropCluster(cluster string, replaced bool) {
	if err := validateCluster(cluster); err != nil {
		w.reject(err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.state.dropCluster(cluster, replaced)
}

// Start commits what is ready once per interval, or sooner when MaxPending changes are
// ready, until ctx is done. Then it commits one last time, bounded by
// WriterOptions.FinalFlushTimeout, and returns the error of that commit. A failed commit
// is retried at the next interval. Start may be called once.
func (w *Writer) Start(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	ticker := w.clock.NewTicker(w.interval())
	defer func() { ticker.Stop() }()
	failing := false
	for {
		select {
		case <-w.retime:
			ticker.Stop()
			ticker = w.clock.NewTicker(w.interval())
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.FinalFlushTimeout)
			defer cancel()
			return w.Flush(fctx)
		case <-ticker.C():
			failing = w.store.commit(nil) != nil
		case <-w.kick:
			// After a failure, wait for the interval rather than retry at the pace of
			// the producers.
			if !failing {
				failing = w.store.commit(nil) != nil
			}
		}
	}
}

// Flush commits what is ready now and returns the error of the commit; nil means that
// every change checkpointed before the call is in the file. If ctx ends first, Flush
// returns ctx's error, and the commit goes on in the background.
func (w *Writer) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- w.store.commit(nil) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("flushing snapshot %s: %w", w.store.path, ctx.Err())
	}
}

// Stats returns the Writer's current statistics.
func (w *Writer) Stats() Stats {
	now := w.clock.Now()
	w.mu.Lock()
	st := w.stats
	st.Pending, st.Checkpointed, st.Lag, st.OldestPending = w.state.counts(now)
	if b := w.inflight; b != nil {
		st.Pending += b.changes
		st.Checkpointed += b.changes
		if since := b.since(); !since.IsZero() {
			lag := now.Sub(since)
			st.Lag, st.OldestPending = max(st.Lag, lag), max(st.OldestPending, lag)
		}
	}
	w.mu.Unlock()
	st.FileSize = w.store.fileSize()
	return st
}

func (w *Writer) reject(err error) {
	now := w.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rejectLocked(err, now)
}

func (w *Writer) rejectLocked(err error, now time.Time) {
	w.stats.Rejected++
	w.stats.LastError, w.stats.LastErrorTime = err, now
}

// keyOf returns the object key of an object that the Writer can store.
func keyOf(obj runtime.Object) (string, error) {
	var m metav1.Object
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		if o != nil && o.Object != nil {
			m = o
		}
	case *metav1.PartialObjectMetadata:
		if o != nil {
			m = o
		}
	default:
		return "", fmt.Errorf("%w: objects of type %T cannot be stored, only *unstructured.Unstructured and *metav1.PartialObjectMetadata", ErrInvalid, obj)
	}
	if m == nil {
		return "", fmt.Errorf("%w: nil object", ErrInvalid)
	}
	if m.GetName() == "" {
		return "", fmt.Errorf("%w: object without a name", ErrInvalid)
	}
	key := objectKey(m.GetNamespace(), m.GetName())
	if !validObjectKey(key) {
		return "", errObjectKey(key)
	}
	return key, nil
}

// commit takes what is ready, from the Writer if there is one and otherwise from a
// pending of its own, after applying mutate to it, and writes it in one transaction. A
// batch that fails goes back to the Writer, which retries it with its next commit.
func (s *Store) commit(mutate func(*pending)) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	w := s.writer
	if w == nil {
		if mutate == nil {
			return nil
		}
		var p pending
		mutate(&p)
		b := p.take()
		if b == nil {
			return nil
		}
		_, err := s.write(b, commitHistory{mode: historyMarkers, now: s.opts.Clock.Now()})
		return err
	}

	w.mu.Lock()
	if mutate != nil {
		mutate(&w.state)
	}
	w.sinceCommit = 0
	b := w.state.take()
	w.inflight = b
	w.mu.Unlock()
	if b == nil {
		return nil
	}
	start := w.clock.Now()
	ch := commitHistory{mode: historyOn, opts: w.opts.History, now: start}
	if !w.opts.History.Enabled {
		ch.mode, ch.clear = historyOff, !w.historyCleared
	}
	broken, err := s.write(b, ch)
	if err == nil && ch.clear {
		w.historyCleared = true
	}
	now := w.clock.Now()

	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight = nil
	for _, g := range broken {
		w.state.breakResource(g.cluster, g.resource, g.err)
		w.rejectLocked(g.err, now)
	}
	if err != nil {
		w.state.restore(b)
		w.sinceCommit += b.changes
		w.stats.CommitErrors++
		w.stats.LastError, w.stats.LastErrorTime = err, now
		return err
	}
	w.stats.Commits++
	w.stats.LastCommitTime, w.stats.LastCommitDuration = now, now.Sub(start)
	return nil
}

// brokenResource is a resource with an object that could not be encoded.
type brokenResource struct {
	cluster  string
	resource ResourceKey
	err      error
}

// op is one write to an objects bucket; a nil value deletes the key.
type op struct {
	key, value []byte
}

// commitHistory says what a commit writes to the change log.
type commitHistory struct {
	mode historyMode
	opts HistoryOptions
	// now is the time of the commit: of the records of drops, and the retention's.
	now time.Time
	// clear deletes the log (with historyOff).
	clear bool
}

// write encodes a batch and commits it in one transaction, with its records in the
// change log. A resource with an object that cannot be encoded is turned into a drop in
// b, and returned in broken: the file must not keep a state of it that lacks a change.
func (s *Store) write(b *batch, ch commitHistory) (broken []brokenResource, err error) {
	ops := make(map[*groupBatch][]op)
	sealed := s.sealed()
	if len(s.opts.migrations) < historyVersion {
		ch = commitHistory{} // a file without a change log, in tests
	}
	var enc cborEncoder
	recs := records{buf: s.recordBuf[:0]}
	// dicts are the dictionaries of the batch's values, which the transaction stores
	// where the file does not have them yet.
	dicts := make(map[uint64]*dictionary)
	for cluster, cb := range b.clusters {
		for resource, gb := range cb.groups {
			list := make([]op, 0, len(gb.changes))
			sum := objectsSum(cluster, string(resource))
		changes:
			for key, st := range gb.changes {
				o := op{key: []byte(key)}
				if first(st.encoded) == formatDict {
					d, err := dictionaryOf(st.encoded)
					if err != nil {
						err = fmt.Errorf("cluster %q, resource %q, object %q: %w; the resource is not stored any more", cluster, resource, key, err)
						broken = append(broken, brokenResource{cluster, resource, err})
						*gb = groupBatch{drop: true}
						list = nil
						break changes
					}
					dicts[d.id] = d
				}
				switch {
				case st.encoded != nil && sealed:
					o.value = seal(sum, o.key, st.encoded)
				case st.encoded != nil:
					o.value = st.encoded
				case st.obj != nil:
					var encErr error
					if sealed {
						o.value, encErr = enc.sealObject(st.obj, sum, o.key)
					} else {
						o.value, encErr = enc.encodeObject(st.obj)
					}
					if encErr != nil {
						encErr = fmt.Errorf("cluster %q, resource %q, object %q: %w; the resource is not stored any more", cluster, resource, key, encErr)
						broken = append(broken, brokenResource{cluster, resource, encErr})
						*gb = groupBatch{drop: true}
						list = nil
						break changes
					}
				}
				list = append(list, o)
			}
			if ch.mode == historyOn && len(gb.log) > 0 {
				recs.prepare(&enc, cluster, resource, gb, list, sealed, dicts)
			}
			// bbolt inserts faster in key order.
			slices.SortFunc(list, func(a, b op) int { return bytes.Compare(a.key, b.key) })
			ops[gb] = list
		}
	}
	recs.seal()
	err = s.update(func(tx *bolt.Tx) error {
		if err := putDictionaries(tx, dicts); err != nil {
			return err
		}
		if ch.clear {
			if err := clearHistory(tx); err != nil {
				return err
			}
		}
		h, err := openHistory(tx, ch.mode, ch.opts, ch.now)
		if err != nil {
			return err
		}
		if err := apply(tx, b, ops, sealed, h, &recs); err != nil {
			return err
		}
		return h.finish(tx)
	})
	if cap(recs.buf) <= maxRecordBuf {
		s.recordBuf = recs.buf[:0]
	}
	if err != nil {
		return broken, fmt.Errorf("committing to snapshot %s: %w", s.path, err)
	}
	// The pages that the commit read through the file's map (the nodes it changed and
	// the branches above them) would stay resident for as long as the file is open: a
	// cold start of 1,000 small clusters, whose commits touch every cluster, kept 35 MB
	// of the map, 35 KiB per cluster, in the process's RSS. Evicted in a read
	// transaction, which holds the map in place (bbolt remaps only with no transaction
	// open); the next commit reads them again from the page cache.
	_ = s.view(func(tx *bolt.Tx) error {
		evictMapped(tx)
		return nil
	})
	return broken, nil
}

// apply writes a batch in tx, in the order that pending describes, and its records to
// the change log if h is not nil. The values of ops are sealed already; apply seals the
// others if sealed.
func apply(tx *bolt.Tx, b *batch, ops map[*groupBatch][]op, sealed bool, h *historyTx, recs *records) error {
	clusters := getClustersBucket(tx)
	if clusters == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketClusters)
	}
	for cluster, cb := range b.clusters {
		name := []byte(cluster)
		if cb.drop {
			if h != nil && clusters.Bucket(name) != nil {
				typ := ChangeClusterRemoved
				if cb.replaced {
					typ = ChangeClusterReplaced
				}
				if err := h.marker(typ, cluster, "", ""); err != nil {
					return err
				}
				if err := h.spillCluster(cluster, clusters.Bucket(name)); err != nil {
					return err
				}
			}
			if err := deleteBucket(clusters, name); err != nil {
				return err
			}
		}
		writes := cb.identity != nil
		for _, gb := range cb.groups {
			writes = writes || gb.rv != ""
		}
		cbk := getBucket(tx, bucketClusters, name)
		if writes && cbk == nil {
			var err error
			if cbk, err = createClusterBucket(tx, cluster); err != nil {
				return err
			}
		}
		if cbk == nil {
			continue // only drops, of what is not there
		}
		if cb.identity != nil {
			data, err := encodeIdentity(*cb.identity)
			if err != nil {
				return err
			}
			if sealed {
				data = seal(identitySum(cluster), keyIdentity, data)
			}
			if err := cbk.Put(keyIdentity, data); err != nil {
				return err
			}
		}
		for resource, gb := range cb.groups {
			key := []byte(resource)
			if res := getBucket(tx, bucketClusters, name, bucketResources); gb.drop && res != nil {
				if h != nil && res.Bucket(key) != nil {
					if err := h.marker(ChangeResourceReset, cluster, string(resource), ""); err != nil {
						return err
					}
					h.spillObjects(cluster, string(resource), res.Bucket(key).Bucket(bucketObjects))
				}
				if err := deleteBucket(res, key); err != nil {
					return err
				}
			}
			if gb.rv == "" {
				continue
			}
			rb, err := createResourceBucket(tx, cluster, string(key))
			if err != nil {
				return err
			}
			objects, err := rb.CreateBucketIfNotExists(bucketObjects)
			if err != nil {
				return err
			}
			if h != nil && h.mode == historyOn {
				if err := h.logGroup(rb, objects, cluster, string(resource), gb, recs.of(gb), sealed); err != nil {
					return err
				}
			}
			for _, o := range ops[gb] {
				if o.value == nil {
					err = objects.Delete(o.key)
				} else {
					err = objects.Put(o.key, o.value)
				}
				if err != nil {
					return err
				}
			}
			rv := []byte(gb.rv)
			if sealed {
				rv = seal(rvSum(cluster, string(key)), keyRV, rv)
			}
			if err := rb.Put(keyRV, rv); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteBucket deletes a child bucket of b, if it exists.
func deleteBucket(b *bolt.Bucket, name []byte) error {
	if err := b.DeleteBucket(name); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
		return err
	}
	return nil
}
