package aggregate

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// DefaultMaxBacklog is the default of Options.MaxBacklog: how many events may wait for a
// handler before they are coalesced per object.
const DefaultMaxBacklog = 10_000

// DefaultShutdownTimeout is the default of Options.ShutdownTimeout.
const DefaultShutdownTimeout = 30 * time.Second

// Options configures a Fleet. The zero value is valid; every field documents its default.
type Options struct {
	// Clock stamps sync and panic times. Default: the real clock.
	Clock clock.PassiveClock

	// Indexers are user-defined indices added to the Indexer of every resource, present
	// and future. More can be added per resource with Indexer.AddIndexers. The names of
	// the built-in indices are reserved. Default: none.
	Indexers cache.Indexers

	// MaxBacklog is the default of HandlerOptions.MaxBacklog. Default: DefaultMaxBacklog.
	MaxBacklog int

	// ShutdownTimeout bounds how long Start, once its context is done, waits for handlers
	// to return from OnEvent. Default: DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// Codec, if set, makes the fleet compact: it keeps each object as its encoding and
	// decodes it when it is read or delivered (see Codec). Reads then cost a decode,
	// except for the objects in the hot set. Default: nil, objects are kept decoded (a
	// fleetwatch.Manager's fleet is compact unless its Options.Encoding says otherwise).
	Codec Codec

	// HotObjects bounds the decoded objects that a compact fleet keeps per resource, for
	// the keys read or written last. Default: DefaultHotObjects. Ignored without Codec.
	HotObjects int

	// DecodeAhead, if positive, bounds the pending events that a compact fleet holds
	// decoded ahead of its handlers, all handlers together: while a handler is behind,
	// helper goroutines (up to three per handler, and one fewer than GOMAXPROCS) decode
	// its next events' objects, so that a handler with a backlog does not decode every
	// object alone on its goroutine. Delivery is unchanged: one event at a time, in
	// order, each with objects decoded for this handler. 64 holds about 1.5 MB of
	// decoded pods. It shortens the end of a cold sync whose handlers fall behind when
	// the fleet has cores to spare, at about a tenth more CPU for the sync
	// (docs/benchmarks.md, "Decoding ahead of a compact fleet's handlers"). Default 0:
	// no decoding ahead, each handler's goroutine decodes its events' objects, but for
	// its replay: the objects the fleet held when the handler was added, as after a warm
	// start's load, are decoded ahead of it so, up to 64 events, while it takes them.
	// Ignored without Codec, and for EncodedOnly handlers.
	DecodeAhead int
}

// maxDecodeHelpers bounds the helper goroutines that decode ahead of one handler.
const maxDecodeHelpers = 3

// replayDecodeAhead is the bound on the events decoded ahead (Options.DecodeAhead)
// while a handler of a compact fleet takes its replay: the objects the fleet held when
// the handler was added, as after a warm start's load, whose decoding is then all that
// the handler waits for, and which no apiserver competes with for the cores, unlike
// a cold sync's.
const replayDecodeAhead = 64

// withDefaults returns o with defaults filled in and the Indexers map copied, so the
// caller may reuse it.
func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.Indexers = maps.Clone(o.Indexers)
	if o.MaxBacklog <= 0 {
		o.MaxBacklog = DefaultMaxBacklog
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.Codec == nil {
		o.Codec = defaultCodec
	}
	if o.HotObjects <= 0 {
		o.HotObjects = DefaultHotObjects
	}
	if o.DecodeAhead == 0 {
		o.DecodeAhead = defaultDecodeAhead
	}
	return o
}

// Fleet is the federated cache of many clusters: for each resource, an Indexer holding
// the objects of every cluster, written by one ClusterStore per cluster, and handlers
// that receive every change as a cluster-tagged Event.
//
// The cache works as soon as New returns: stores can be written and read, and handlers
// added, before Start. Handlers receive events only while Start runs; until then their
// events wait in their backlogs (coalesced beyond MaxBacklog).
type Fleet struct {
	clock           clock.PassiveClock
	indexers        cache.Indexers
	maxBacklog      int
	shutdownTimeout time.Duration
	codec           Codec
	hotObjects      int
	// decodeAhead bounds, in a compact fleet, the events decoded ahead of the handlers
	// (Options.DecodeAhead), and decodeHelpers the helper goroutines of each handler;
	// 0 without, and no helpers with one processor. aheadTaken counts the queued events
	// that helpers took (backlog.claimed, over every handler).
	decodeAhead, decodeHelpers int
	aheadTaken                 atomic.Int64
	// replayHelpers are the helper goroutines of a handler that decode ahead of its
	// replay (replayDecodeAhead), in a compact fleet; 0 with one processor.
	replayHelpers int

	// lock guards the fields below, and the started and indexers fields of every
	// Registration. Lock order: lock, then an Indexer's lock, then a Registration's mu.
	lock sync.Mutex
	// resources holds the Indexer of every resource the fleet knows.
	resources map[schema.GroupVersionResource]*Indexer
	// handlers are the registered handlers, in registration order.
	handlers []*Registration
	// started and stopped track Start: handlers run between the two.
	started, stopped bool
	// handlerCount numbers handlers for default names.
	handlerCount int
	// syncHolds counts the holds taken with HoldSync that are not released yet; while it
	// is positive, new registrations also wait for the last release (gated).
	syncHolds int
	gated     []*Registration
}

// New returns a Fleet. It panics if opts.Indexers uses a built-in index name or holds a
// nil function: both are programming errors, found by the first test that builds a
// fleet.
func New(opts Options) *Fleet {
	opts = opts.withDefaults()
	for name, fn := range opts.Indexers {
		if isBuiltinIndex(name) || fn == nil {
			panic(fmt.Sprintf("aggregate.New: Options.Indexers[%q]: name is built in or function is nil", name))
		}
	}
	f := &Fleet{
		clock:           opts.Clock,
		indexers:        opts.Indexers,
		maxBacklog:      opts.MaxBacklog,
		shutdownTimeout: opts.ShutdownTimeout,
		codec:           opts.Codec,
		hotObjects:      opts.HotObjects,
		resources:       make(map[schema.GroupVersionResource]*Indexer),
	}
	if f.codec != nil {
		// With one processor, a helper would only take turns with the handler's
		// goroutine: none then.
		f.replayHelpers = max(min(runtime.GOMAXPROCS(0)-1, maxDecodeHelpers), 0)
		if opts.DecodeAhead > 0 {
			f.decodeAhead, f.decodeHelpers = opts.DecodeAhead, f.replayHelpers
		}
	}
	return f
}

// Start runs the handlers' delivery goroutines and blocks until ctx is done. Then it
// stops the handlers (pending events are dropped, later AddHandler calls fail with
// ErrStopped) and waits up to Options.ShutdownTimeout for those inside OnEvent to
// return. The cache itself keeps working after Start returns. Start returns nil, or an
// error wrapping ErrShutdownTimeout naming the handlers that did not return, or
// ErrAlreadyStarted if it was called before.
func (f *Fleet) Start(ctx context.Context) error {
	f.lock.Lock()
	if f.started {
		f.lock.Unlock()
		return ErrAlreadyStarted
	}
	f.started = true
	for _, r := range f.handlers {
		f.runLocked(r)
	}
	f.lock.Unlock()

	<-ctx.Done()

	f.lock.Lock()
	f.stopped = true
	handlers := slices.Clone(f.handlers)
	for _, r := range handlers {
		f.unsubscribeLocked(r)
	}
	f.lock.Unlock()

	for _, r := range handlers {
		r.stop()
	}
	timeout := time.NewTimer(f.shutdownTimeout)
	defer timeout.Stop()
	for i, r := range handlers {
		select {
		case <-r.done:
		case <-timeout.C:
			var stuck []string
			for _, r := range handlers[i:] {
				select {
				case <-r.done:
				default:
					stuck = append(stuck, r.name)
				}
			}
			return fmt.Errorf("handlers %q still in OnEvent after %v: %w", stuck, f.shutdownTimeout, ErrShutdownTimeout)
		}
	}
	return nil
}

// takeAhead counts one event more taken to decode ahead, if fewer than bound are.
func (f *Fleet) takeAhead(bound int) bool {
	for {
		n := f.aheadTaken.Load()
		if n >= int64(bound) {
			return false
		}
		if f.aheadTaken.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// releaseAhead counts n events fewer taken to decode ahead: delivered, dropped by a
// merge, or dropped with their handler.
func (f *Fleet) releaseAhead(n int) {
	if n > 0 {
		f.aheadTaken.Add(-int64(n))
	}
}

// runLocked starts the delivery goroutine of r. It exits when r is stopped, by Remove or
// by the end of Start.
func (f *Fleet) runLocked(r *Registration) {
	r.started = true
	go r.run()
}

// AddHandler registers h for the events of opts.Resources (every resource if empty).
//
// The handler first receives the current state, as Added events with InitialList set,
// then every later change. The two are taken atomically for each resource: no change is
// missed or delivered twice. Registration.HasSynced tells when the handler has caught up
// with the stores that exist now: register after the stores are created (by the
// informers of the clusters known at start) for it to mean "synced with the fleet".
// AddHandler may be called before or after Start, and from a handler's OnEvent.
func (f *Fleet) AddHandler(h Handler, opts HandlerOptions) (*Registration, error) {
	if h == nil {
		return nil, fmt.Errorf("add handler %q: nil Handler: %w", opts.Name, ErrInvalidHandler)
	}
	if opts.MaxBacklog < 0 {
		return nil, fmt.Errorf("add handler %q: negative MaxBacklog %d: %w", opts.Name, opts.MaxBacklog, ErrInvalidHandler)
	}
	if opts.MaxBacklog == 0 {
		opts.MaxBacklog = f.maxBacklog
	}

	f.lock.Lock()
	defer f.lock.Unlock()
	if f.stopped {
		return nil, fmt.Errorf("add handler %q: %w", opts.Name, ErrStopped)
	}
	f.handlerCount++
	name := opts.Name
	if name == "" {
		name = fmt.Sprintf("handler-%d", f.handlerCount)
	}
	r := newRegistration(f, h, opts, name)
	for _, ix := range f.resources {
		if r.wants(ix.resource) {
			f.subscribeLocked(r, ix)
		}
	}
	if f.syncHolds > 0 {
		r.waitingStores.Add(1)
		f.gated = append(f.gated, r)
	}
	f.handlers = append(f.handlers, r)
	r.markReplayed()
	if f.started {
		f.runLocked(r)
	}
	// Stop counting AddHandler as a store to wait for; see Registration.waitingStores.
	r.storeSynced()
	return r, nil
}

// HoldSync keeps the handlers registered while it is held from reporting HasSynced
// until it is released: then each of them has synced once it has been delivered every
// event queued by that moment (and the stores it waits for have synced). The code that
// runs the clusters holds it until their initial lists are in, so that a handler
// registered before any store exists does not count as synced with an empty fleet.
// Holds nest; release is idempotent.
func (f *Fleet) HoldSync() (release func()) {
	f.lock.Lock()
	f.syncHolds++
	f.lock.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.lock.Lock()
			f.syncHolds--
			var gated []*Registration
			if f.syncHolds == 0 {
				gated, f.gated = f.gated, nil
			}
			f.lock.Unlock()
			for _, r := range gated {
				r.storeSynced()
			}
		})
	}
}

// subscribeLocked subscribes r to ix, queueing ix's current objects for it.
func (f *Fleet) subscribeLocked(r *Registration, ix *Indexer) {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	r.mu.Lock()
	if r.cluster == "" {
		r.queue.reserve(ix.items.n)
		for e := range ix.items.all() {
			r.pushLocked(pending{ref: objectRef{ix, e.key}, typ: Added, obj: peek(e), encoded: encodingOf(e), entry: e, stored: e.obj, initialList: true})
		}
	} else if ci := ix.clusters[r.cluster]; ci != nil {
		r.queue.reserve(ci.count)
		for _, s := range ci.namespaces {
			for e := range s.all() {
				r.pushLocked(pending{ref: objectRef{ix, e.key}, typ: Added, obj: peek(e), encoded: encodingOf(e), entry: e, stored: e.obj, initialList: true})
			}
		}
	}
	r.mu.Unlock()
	for c, s := range ix.stores {
		if !s.synced.Load() && r.wantsCluster(c) {
			r.waitingStores.Add(1)
			s.waiters = append(s.waiters, r)
		}
	}
	ix.handlers = append(ix.handlers, r)
	r.indexers = append(r.indexers, ix)
}

// unsubscribeLocked removes r from the fleet and from every resource.
func (f *Fleet) unsubscribeLocked(r *Registration) {
	f.handlers = slices.DeleteFunc(f.handlers, func(o *Registration) bool { return o == r })
	for _, ix := range r.indexers {
		ix.lock.Lock()
		ix.handlers = slices.DeleteFunc(ix.handlers, func(o *Registration) bool { return o == r })
		ix.lock.Unlock()
	}
	r.indexers = nil
}

// indexerLocked returns the Indexer of gvr, creating it if needed.
func (f *Fleet) indexerLocked(gvr schema.GroupVersionResource) *Indexer {
	ix := f.resources[gvr]
	if ix != nil {
		return ix
	}
	ix = newIndexer(gvr, f.indexers, f.codec, f.hotObjects)
	for _, r := range f.handlers {
		if r.wants(gvr) {
			// Nothing to snapshot and no store to wait for: subscribe directly.
			ix.handlers = append(ix.handlers, r)
			r.indexers = append(r.indexers, ix)
		}
	}
	f.resources[gvr] = ix
	return ix
}

// Indexer returns the Indexer of gvr. A resource the fleet did not know yet is added,
// empty.
func (f *Fleet) Indexer(gvr schema.GroupVersionResource) *Indexer {
	f.lock.Lock()
	defer f.lock.Unlock()
	return f.indexerLocked(gvr)
}

// Lister returns a Lister of gvr. A resource the fleet did not know yet is added, empty.
func (f *Fleet) Lister(gvr schema.GroupVersionResource) *Lister {
	return &Lister{ix: f.Indexer(gvr)}
}

// ClusterStore returns the store for the objects of gvr in cluster, creating it if
// needed. Repeated calls return the same store until the cluster or resource is removed;
// after that they return a new one.
func (f *Fleet) ClusterStore(cluster string, gvr schema.GroupVersionResource) *ClusterStore {
	f.lock.Lock()
	defer f.lock.Unlock()
	ix := f.indexerLocked(gvr)
	ix.lock.Lock()
	defer ix.lock.Unlock()
	s := ix.stores[cluster]
	if s == nil {
		s = &ClusterStore{cluster: cluster, ix: ix, fleet: f}
		ix.stores[cluster] = s
	}
	return s
}

// RemoveCluster removes every object of cluster, of every resource, delivering a Deleted
// event for each with FinalStateUnknown set (the objects were not deleted in the
// cluster; the fleet stopped knowing them). The cluster's stores are retired: writes to
// them fail with ErrStoreRemoved, and handlers stop waiting for them to sync.
func (f *Fleet) RemoveCluster(cluster string) { f.removeCluster(cluster, false) }

// MoveCluster is RemoveCluster for a cluster that another fleet watches from now on (a
// replica of a sharded fleet that took it over): the objects did not go from the
// cluster, and the Deleted events say so (Event.Moved), for a handler that serves
// watches of the whole sharded fleet (the HTTP server's), whose clients follow the
// cluster's changes on its new owner.
func (f *Fleet) MoveCluster(cluster string) { f.removeCluster(cluster, true) }

func (f *Fleet) removeCluster(cluster string, moved bool) {
	f.lock.Lock()
	var waiters []*Registration
	for _, ix := range f.resources {
		ix.lock.Lock()
		waiters = append(waiters, ix.removeClusterLocked(cluster, moved)...)
		ix.lock.Unlock()
	}
	f.lock.Unlock()
	for _, r := range waiters {
		r.storeSynced()
	}
}

// RemoveClusterResource is RemoveCluster for one resource of the cluster, for example a
// custom resource whose definition was deleted.
func (f *Fleet) RemoveClusterResource(cluster string, gvr schema.GroupVersionResource) {
	f.lock.Lock()
	ix := f.resources[gvr]
	f.lock.Unlock()
	if ix == nil {
		return
	}
	ix.lock.Lock()
	waiters := ix.removeClusterLocked(cluster, false)
	ix.lock.Unlock()
	for _, r := range waiters {
		r.storeSynced()
	}
}

// Resources returns the resources the fleet knows, sorted.
func (f *Fleet) Resources() []schema.GroupVersionResource {
	f.lock.Lock()
	defer f.lock.Unlock()
	out := slices.Collect(maps.Keys(f.resources))
	slices.SortFunc(out, compareGVR)
	return out
}

// Clusters returns, sorted, the clusters that have a store or objects for at least one
// resource.
func (f *Fleet) Clusters() []string {
	f.lock.Lock()
	indexers := slices.Collect(maps.Values(f.resources))
	f.lock.Unlock()
	seen := make(map[string]struct{})
	for _, ix := range indexers {
		ix.lock.RLock()
		for c := range ix.stores {
			seen[c] = struct{}{}
		}
		for c := range ix.clusters {
			seen[c] = struct{}{}
		}
		ix.lock.RUnlock()
	}
	return slices.Sorted(maps.Keys(seen))
}

// Codec returns the Codec of a compact fleet (Options.Codec), nil for a plain one. A
// consumer of Event.Encoded decodes with it.
func (f *Fleet) Codec() Codec { return f.codec }

// Stats is a snapshot of the fleet's state, for metrics and status.
type Stats struct {
	// Handlers describes the registered handlers, in registration order.
	Handlers []HandlerStats
	// Stores describes the stores, sorted by cluster then resource.
	Stores []StoreStats
}

// StoreStats describes one ClusterStore.
type StoreStats struct {
	Cluster  string
	Resource schema.GroupVersionResource
	// Objects is the number of objects of the cluster and resource.
	Objects int
	// Synced is set once MarkSynced was called, at SyncedAt.
	Synced   bool
	SyncedAt time.Time
}

// Handlers returns the registrations of the handlers added so far and not removed, in
// the order they were added.
func (f *Fleet) Handlers() []*Registration {
	f.lock.Lock()
	defer f.lock.Unlock()
	return slices.Clone(f.handlers)
}

// Stats returns the fleet's statistics.
func (f *Fleet) Stats() Stats {
	f.lock.Lock()
	handlers := slices.Clone(f.handlers)
	indexers := slices.Collect(maps.Values(f.resources))
	f.lock.Unlock()
	var st Stats
	for _, r := range handlers {
		st.Handlers = append(st.Handlers, r.Stats())
	}
	for _, ix := range indexers {
		ix.lock.RLock()
		for c, s := range ix.stores {
			n := 0
			if ci := ix.clusters[c]; ci != nil {
				n = ci.count
			}
			st.Stores = append(st.Stores, StoreStats{
				Cluster:  c,
				Resource: ix.resource,
				Objects:  n,
				Synced:   s.synced.Load(),
				SyncedAt: s.syncedAt,
			})
		}
		ix.lock.RUnlock()
	}
	slices.SortFunc(st.Stores, func(a, b StoreStats) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), compareGVR(a.Resource, b.Resource))
	})
	return st
}

func compareGVR(a, b schema.GroupVersionResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Version, b.Version), cmp.Compare(a.Resource, b.Resource))
}
