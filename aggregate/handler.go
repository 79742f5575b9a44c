package aggregate

import (
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Handler receives the fleet's events.
//
// Each registered handler has its own goroutine and its own queue: OnEvent is never
// called concurrently with itself, events of one object arrive in the order they
// happened, and a slow OnEvent delays no one but this handler. While it is behind by more
// than HandlerOptions.MaxBacklog events, its pending events are coalesced per object; see
// HandlerOptions.MaxBacklog.
//
// OnEvent must not modify the event's objects. A panic in OnEvent is recovered, logged
// and counted, and delivery continues with the next event.
type Handler interface {
	OnEvent(Event)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(Event)

// OnEvent calls f(e).
func (f HandlerFunc) OnEvent(e Event) { f(e) }

var _ Handler = HandlerFunc(nil)

// HandlerOptions configures a handler registration. The zero value is valid.
type HandlerOptions struct {
	// Name identifies the handler in logs and Stats. Default: handler-<n>.
	Name string

	// Resources are the resources whose events the handler receives, including
	// resources the fleet learns about later. Default (empty): every resource.
	Resources []schema.GroupVersionResource

	// Cluster, if set, limits the handler to the events of that cluster: its initial
	// state is the cluster's objects only, and HasSynced waits for the cluster's stores
	// only. A handler per cluster costs the fleet no more than one handler of every
	// cluster. Default (empty): every cluster.
	Cluster string

	// DeliverNoOpUpdates asks for Updated events whose old and new objects have the same
	// non-empty resourceVersion: the re-list of an object already known (a warm restart
	// or relist) or a resync. In such an event Object and OldObject are both the object
	// held by the cache. Default: such updates are not delivered.
	DeliverNoOpUpdates bool

	// EncodedOnly, in a compact fleet (Options.Codec), has the fleet decode nothing for
	// the handler: where the fleet has an event's object only encoded, Object is nil and
	// Encoded is the encoding, on Deleted events too (the last state the fleet held);
	// likewise OldObject is nil where the fleet has it only encoded, and OldEncoded is
	// its encoding. Objects at hand
	// decoded (one applied decoded, a metadata-only one, one read lately) come as
	// without the option. A handler that keeps what it needs of an object from its
	// encoding (the HTTP server's watch cache) so pays no decode per event, and leaves
	// no decoded object among what it keeps. In a plain fleet it changes nothing.
	// Default: false.
	EncodedOnly bool

	// MaxBacklog is how many events may wait for this handler before they are coalesced.
	// Beyond it, a new event for an object that already has a pending event is merged
	// into that event, so the backlog holds at most one event per object and its memory
	// is bounded by the number of distinct objects. Merging keeps what the handler needs
	// to reach the right final state; the rules are:
	//   - Added, then any updates: one Added with the latest object;
	//   - Added, then Deleted: nothing, the handler never knew the object;
	//   - Updated or Deleted, then more changes ending with the object present: one
	//     Updated from the object the handler last saw to the latest one (after a
	//     Deleted then Added, the UIDs of the two can differ, as after a client-go relist);
	//   - any changes ending with Deleted of an object the handler knew: one Deleted with
	//     the last known object.
	// The number of events merged away is reported as Coalesced in HandlerStats.
	// Coalescing stops once the handler has caught up completely. Default (0):
	// Options.MaxBacklog of the fleet. It must not be negative.
	MaxBacklog int
}

// Registration is a handler registered with a Fleet. It implements client-go's
// cache.ResourceEventHandlerRegistration: pass reg.HasSynced to cache.WaitForCacheSync,
// or reg.HasSyncedChecker() to cache.WaitFor.
type Registration struct {
	fleet       *Fleet
	handler     Handler
	name        string
	resources   map[schema.GroupVersionResource]struct{} // nil: every resource
	cluster     string                                   // empty: every cluster
	deliverNoOp bool
	encodedOnly bool
	clock       clock.PassiveClock

	// started is set once the delivery goroutine was started; guarded by fleet.lock.
	started bool
	// indexers are the resources the handler is subscribed to; guarded by fleet.lock.
	indexers []*Indexer
	// done is closed when the delivery goroutine returns.
	done chan struct{}

	// mu guards the fields from queue to lastPanicAt; cond (on mu) wakes the delivery
	// goroutine.
	mu   sync.Mutex
	cond sync.Cond
	// queue holds the events not yet handed to OnEvent.
	queue backlog
	// stopped is set by Remove and fleet shutdown; nothing is queued or delivered after.
	stopped bool
	// lastSeq is the sequence number of the last event queued. Every queued event gets
	// the next number.
	lastSeq uint64
	// doneThrough says every event numbered up to it has been delivered, merged into a
	// delivered event, or cancelled. Queued events are ordered by the number of their
	// first merged event, so it is one less than that of the oldest event in flight or
	// queued, or lastSeq if there is none.
	doneThrough uint64
	// inflight is the number of the event being delivered, or 0.
	inflight uint64
	// running is set while the delivery goroutine runs; helpers is the number of helper
	// goroutines decoding ahead (decodeAhead), of at most maxHelpers (0 where nothing is
	// decoded ahead), each counted in helpersDone until it returns. The queued events
	// they took (backlog.claimed) count in the fleet's aheadTaken.
	running             bool
	helpers, maxHelpers int
	helpersDone         sync.WaitGroup
	// awaiting is the decoding ahead that the delivery goroutine waits for, if any.
	awaiting *aheadDecode
	// aheadCond (on mu) wakes the helpers that wait for the handler to take an event
	// they decoded, when the fleet's bound on events decoded ahead is reached;
	// helpersWaiting counts them.
	aheadCond      sync.Cond
	helpersWaiting int
	// syncTarget is the value of lastSeq when every store the handler waits for had
	// synced; set once, when targetSet is set.
	syncTarget uint64
	targetSet  bool
	// replayTarget is the value of lastSeq once AddHandler had queued the current state;
	// replaySet is set from then until replayed is closed, once that state is delivered
	// or the handler is stopped.
	replayTarget uint64
	replaySet    bool
	replayed     chan struct{}
	// catchUps are the channels that CaughtUp returned and has not closed yet, each
	// with the value of lastSeq at its call.
	catchUps []catchUp
	// stats
	delivered   uint64
	coalesced   uint64
	panics      uint64
	lastPanicAt time.Time

	// The fields below are safe for concurrent use on their own.

	// waitingStores counts the stores this registration waits for to sync, plus one
	// while AddHandler is still registering it.
	waitingStores atomic.Int64
	// synced is closed once HasSynced is true; isSynced mirrors it.
	synced   chan struct{}
	isSynced atomic.Bool
}

var _ cache.ResourceEventHandlerRegistration = (*Registration)(nil)

func newRegistration(f *Fleet, h Handler, opts HandlerOptions, name string) *Registration {
	r := &Registration{
		fleet:       f,
		handler:     h,
		name:        name,
		deliverNoOp: opts.DeliverNoOpUpdates,
		encodedOnly: opts.EncodedOnly,
		clock:       f.clock,
		cluster:     opts.Cluster,
		done:        make(chan struct{}),
		synced:      make(chan struct{}),
		replayed:    make(chan struct{}),
		queue:       backlog{max: opts.MaxBacklog},
	}
	if !opts.EncodedOnly {
		r.maxHelpers = f.decodeHelpers
	}
	if len(opts.Resources) > 0 {
		r.resources = make(map[schema.GroupVersionResource]struct{}, len(opts.Resources))
		for _, gvr := range opts.Resources {
			r.resources[gvr] = struct{}{}
		}
	}
	r.cond.L = &r.mu
	r.aheadCond.L = &r.mu
	r.waitingStores.Store(1)
	return r
}

// Name returns the name of the handler.
func (r *Registration) Name() string { return r.name }

// wantsCluster reports whether the handler receives events of cluster.
func (r *Registration) wantsCluster(cluster string) bool {
	return r.cluster == "" || r.cluster == cluster
}

// wants reports whether the handler receives events of gvr.
func (r *Registration) wants(gvr schema.GroupVersionResource) bool {
	if r.resources == nil {
		return true
	}
	_, ok := r.resources[gvr]
	return ok
}

// Replayed returns a channel that is closed once the handler has been delivered the
// current state that AddHandler queued for it (or that state was merged away, or the
// handler was removed), whether or not the stores it waits for have synced. A consumer
// that counts state loaded from a snapshot as synced waits for it rather than HasSynced.
func (r *Registration) Replayed() <-chan struct{} { return r.replayed }

// CaughtUp returns a channel that is closed once every event queued for the handler
// before the call has been delivered (or merged into a delivered event, or cancelled),
// or the handler was removed. Unlike Replayed, it counts the events that the fleet
// queued after AddHandler: a handler added to an empty fleet that a snapshot then
// fills has caught up once it was delivered what was loaded up to the call.
func (r *Registration) CaughtUp() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{})
	if r.stopped || r.doneThrough >= r.lastSeq {
		close(ch)
		return ch
	}
	r.catchUps = append(r.catchUps, catchUp{through: r.lastSeq, ch: ch})
	return ch
}

// catchUp is a channel returned by CaughtUp, to close once doneThrough reaches through.
type catchUp struct {
	through uint64
	ch      chan struct{}
}

// markReplayed records that AddHandler has queued the current state.
func (r *Registration) markReplayed() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replayTarget, r.replaySet = r.lastSeq, true
	r.advanceLocked()
}

// HasSynced reports whether the handler is synced: every ClusterStore of its resources
// that existed when it was added has been marked synced (or removed), and every event
// queued for it up to the moment the last of them was marked has been delivered. Stores
// created after the handler was added are not waited for. Like client-go's, it never
// turns false again.
func (r *Registration) HasSynced() bool { return r.isSynced.Load() }

// HasSyncedChecker returns a cache.DoneChecker whose Done channel is closed when
// HasSynced turns true.
func (r *Registration) HasSyncedChecker() cache.DoneChecker { return syncChecker{r} }

type syncChecker struct{ r *Registration }

func (c syncChecker) Name() string          { return c.r.name }
func (c syncChecker) Done() <-chan struct{} { return c.r.synced }

// Backlog returns the number of events waiting for the handler, not counting the one
// being delivered.
func (r *Registration) Backlog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue.live
}

// HandlerStats describes one handler.
type HandlerStats struct {
	// Name is the handler's name.
	Name string
	// Backlog is the number of events waiting for the handler.
	Backlog int
	// Delivered is the number of events handed to OnEvent, including those that panicked.
	Delivered uint64
	// Coalesced is the number of events merged away under backlog (see
	// HandlerOptions.MaxBacklog): every event that was merged into an earlier one counts
	// one, and an Added cancelled by a Deleted counts two.
	Coalesced uint64
	// Panics is the number of OnEvent calls that panicked, and LastPanic the time of
	// the last one.
	Panics    uint64
	LastPanic time.Time
	// Synced is HasSynced.
	Synced bool
}

// Stats returns the handler's statistics.
func (r *Registration) Stats() HandlerStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return HandlerStats{
		Name:      r.name,
		Backlog:   r.queue.live,
		Delivered: r.delivered,
		Coalesced: r.coalesced,
		Panics:    r.panics,
		LastPanic: r.lastPanicAt,
		Synced:    r.isSynced.Load(),
	}
}

// Remove unregisters the handler: it receives no event once Remove has returned, and its
// goroutines (delivery, and in a compact fleet those decoding ahead) have exited.
// Pending events are dropped. Remove is idempotent. It waits for an OnEvent in progress
// to return, and for a decode in progress, so it must not be called from the handler's
// own OnEvent; call it from another goroutine (go reg.Remove()) to stop from inside.
func (r *Registration) Remove() {
	f := r.fleet
	f.lock.Lock()
	f.unsubscribeLocked(r)
	started := r.started
	f.lock.Unlock()
	r.stop()
	if started {
		<-r.done
	}
}

// stop makes the delivery goroutine exit and drops pending events.
func (r *Registration) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.fleet.releaseAhead(r.queue.claimed)
	r.queue.reset()
	r.aheadCond.Broadcast()
	// Nothing more will be delivered; HasSynced stays as it is.
	if r.replaySet {
		r.replaySet = false
		close(r.replayed)
	}
	for _, c := range r.catchUps {
		close(c.ch)
	}
	r.catchUps = nil
	r.cond.Broadcast()
}

// enqueue queues an event for the handler. It is called with the lock of p's indexer
// held, so events of one resource are queued in the order they happened. It never
// blocks on the handler.
func (r *Registration) enqueue(p pending) {
	r.mu.Lock()
	r.pushLocked(p)
	r.mu.Unlock()
}

// pushLocked queues p and wakes the delivery goroutine.
func (r *Registration) pushLocked(p pending) {
	if r.stopped {
		return
	}
	r.lastSeq++
	p.seq = r.lastSeq
	claimed := r.queue.claimed
	n := r.queue.push(p)
	r.fleet.releaseAhead(claimed - r.queue.claimed)
	if n > 0 {
		r.coalesced += uint64(n)
		r.advanceLocked()
	}
	r.cond.Signal()
	r.helpLocked()
}

// helpLocked starts a helper goroutine to decode events ahead of the handler, if the
// handler is behind (an event waits beyond the one it delivers or takes next), one of
// the events waiting has objects to decode that no helper took, and the bounds of
// aheadLocked on the events decoded ahead and on the helpers are not reached.
func (r *Registration) helpLocked() {
	bound, helpers := r.aheadLocked()
	if r.helpers >= helpers || !r.running || r.stopped || r.fleet.aheadTaken.Load() >= int64(bound) {
		return
	}
	if r.queue.live < 2 && (r.inflight == 0 || r.queue.live == 0) {
		return
	}
	if r.queue.nextToDecode() == nil {
		return
	}
	r.helpers++
	r.helpersDone.Add(1)
	go r.decodeAhead()
}

// decodeAhead is a helper goroutine: it decodes queued events ahead of the handler
// (decodeNextLocked) until none is left to take or the handler is stopped. While the
// fleet's bound on events decoded ahead is reached, it waits for its handler to take
// one it decoded: a helper that returned then would have to be started again at every
// event the handler takes, and would start behind the handler's goroutine rather than
// beside it. If its handler has none (the others took the bound), it returns.
func (r *Registration) decodeAhead() {
	defer r.helpersDone.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	for !r.stopped {
		if r.decodeNextLocked() {
			continue
		}
		if r.queue.claimed == 0 || r.queue.nextToDecode() == nil {
			break
		}
		r.helpersWaiting++
		r.aheadCond.Wait()
		r.helpersWaiting--
	}
	r.helpers--
}

// aheadLocked returns the bound on the events decoded ahead, all handlers together, and
// on the helpers of r, that apply to r now: the fleet's (Options.DecodeAhead), raised
// while r takes its replay (replayDecodeAhead), unless it is EncodedOnly.
func (r *Registration) aheadLocked() (bound, helpers int) {
	bound, helpers = r.fleet.decodeAhead, r.maxHelpers
	if r.replaySet && !r.encodedOnly {
		bound, helpers = max(bound, replayDecodeAhead), max(helpers, r.fleet.replayHelpers)
	}
	return bound, helpers
}

// decodeNextLocked takes the oldest queued event with objects to decode that nobody
// took, if the fleet's bound on events decoded ahead allows, and decodes its objects
// outside mu for the delivery goroutine (pending.decodedObjects). It reports whether it
// took one. What it decoded for an event that a merge changed meanwhile is dropped
// (backlog.dropAhead).
func (r *Registration) decodeNextLocked() bool {
	p := r.queue.nextToDecode()
	bound, _ := r.aheadLocked()
	if p == nil || !r.fleet.takeAhead(bound) {
		return false
	}
	d := &aheadDecode{}
	d.obj, _ = p.obj.(*encodedObject)
	if p.typ == Updated {
		d.old, _ = p.old.(*encodedObject)
	}
	p.ahead = d
	r.queue.claimed++
	r.queue.scan++
	ix := p.ref.ix
	r.mu.Unlock()
	var obj, old runtime.Object
	if d.obj != nil {
		obj = ix.decode(d.obj.data, *d.obj.key)
	}
	if d.old != nil {
		old = ix.decode(d.old.data, *d.old.key)
	}
	r.mu.Lock()
	d.decodedObj, d.decodedOld, d.done = obj, old, true
	if r.awaiting == d {
		r.cond.Broadcast()
	}
	return true
}

// storeSynced is called once for every store the registration waits for, when it syncs
// or is removed, and once by AddHandler when registration is complete.
func (r *Registration) storeSynced() {
	if r.waitingStores.Add(-1) != 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncTarget, r.targetSet = r.lastSeq, true
	r.advanceLocked()
}

// advanceLocked recomputes doneThrough and closes synced when it reaches syncTarget.
func (r *Registration) advanceLocked() {
	switch p, ok := r.queue.front(); {
	case r.inflight != 0:
		r.doneThrough = r.inflight - 1
	case ok:
		r.doneThrough = p.seq - 1
	default:
		r.doneThrough = r.lastSeq
	}
	if r.targetSet && r.doneThrough >= r.syncTarget && !r.isSynced.Load() {
		r.isSynced.Store(true)
		close(r.synced)
	}
	if r.replaySet && r.doneThrough >= r.replayTarget {
		r.replaySet = false
		close(r.replayed)
	}
	r.catchUps = slices.DeleteFunc(r.catchUps, func(c catchUp) bool {
		if r.doneThrough < c.through {
			return false
		}
		close(c.ch)
		return true
	})
}

// run delivers queued events, one at a time, until the registration is stopped. It
// returns once its helper goroutines (decodeAhead) have.
func (r *Registration) run() {
	r.mu.Lock()
	r.running = true
	defer func() {
		r.running = false
		r.mu.Unlock()
		r.helpersDone.Wait()
		close(r.done)
	}()
	for {
		for r.queue.live == 0 && !r.stopped {
			r.cond.Wait()
		}
		if r.stopped {
			return
		}
		p, _ := r.queue.pop()
		r.inflight = p.seq
		if p.ahead != nil {
			r.fleet.releaseAhead(1)
			if r.helpersWaiting > 0 {
				// One taken event fewer: a waiting helper can take another.
				r.aheadCond.Signal()
			}
		}
		r.helpLocked()
		if d := p.ahead; d != nil {
			// A helper is decoding its objects. Rather than decode them twice, or wait
			// idle, decode the next events meanwhile, as a helper does; wait once there
			// is none to take.
			for !d.done && !r.stopped {
				if !r.decodeNextLocked() {
					r.awaiting = d
					r.cond.Wait()
					r.awaiting = nil
				}
			}
			if r.stopped {
				return
			}
		}
		r.mu.Unlock()
		panicked := r.deliver(p.event(r.encodedOnly), p.ref.key)
		r.mu.Lock()
		r.inflight = 0
		r.delivered++
		if panicked {
			r.panics++
			r.lastPanicAt = r.clock.Now()
		}
		r.advanceLocked()
	}
}

// deliver calls OnEvent with e, the event of the object with key, recovering a panic.
func (r *Registration) deliver(e Event, key Key) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			panicked = true
			klog.ErrorS(fmt.Errorf("panic: %v", v), "Event handler panicked; continuing with the next event",
				"handler", r.name, "cluster", e.Cluster, "resource", e.Resource, "key", key, "type", e.Type,
				"stack", string(debug.Stack()))
		}
	}()
	r.handler.OnEvent(e)
	return false
}
