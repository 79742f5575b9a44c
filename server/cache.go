package server

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/search"
)

// watchCache is the server's view of the fleet, kept by one fleet handler: for each
// resource, the current objects of every cluster and a bounded history of their changes.
// It plays the part of the apiserver's watch cache. Lists, gets and watches are served
// from it rather than from the fleet's Indexer because fleet handlers run behind the
// Indexer: only a view that is written by the same handler that writes the history can
// hand out a list together with the exact point of the history it reflects, so that a
// watch from that point neither misses nor repeats a change. The objects are the fleet's
// own (shared, never modified); the view costs one map entry per object, and the history
// keeps up to its size of past object states alive. Under a compact fleet, the objects
// are the fleet's encodings of them, with a summary (compact.go).
type watchCache struct {
	historySize int
	// codec is the Codec of a compact fleet, whose events carry the encodings that the
	// view keeps; nil under a plain fleet.
	codec aggregate.Codec
	// epoch identifies this watch cache in cursors: positions of another epoch (the
	// server was restarted) cannot be compared with ours, unless both are of logEpoch.
	epoch string
	// log is the change log of the fleet's snapshot, nil without one; logEpoch is its
	// ChangeLogEpoch, which starts epoch: a cursor of another run of the server over
	// the same log resumes from it (resume.go).
	log      ChangeLogSource
	logEpoch string
	// sequenced is set where no cursor outlives the run or the replica: without a
	// change log, outside a sharded fleet. The cursors handed out are then short, a
	// sequence number of the resource's changes (cursor.short), rather than the
	// position of every cluster, which a later run or another replica would need.
	sequenced bool

	// reg is the fleet registration, set once AddHandler has returned.
	reg atomic.Pointer[aggregate.Registration]
	// active counts OnEvent calls in progress.
	active atomic.Int32
	// primed is closed once the handler has caught up with the fleet for the first time:
	// before, the view may lack objects the fleet has.
	primed    chan struct{}
	primeOnce sync.Once

	// index is the search index of the same objects, written by the same handler, so
	// that a search sees what lists see. It is built from the view once the view has
	// caught up with the ready fleet (indexWhenReady), or at the first search before that,
	// off the path to readiness: until then it is left alone, and indexed is closed once
	// it has caught up (a search waits for that, waitIndexed).
	index   *search.Index
	indexed chan struct{}
	// indexMu guards indexBuilt, and orders the index's build against the events
	// that follow it.
	indexMu    sync.Mutex
	indexBuilt bool

	// mu guards resources.
	mu        sync.RWMutex
	resources map[schema.GroupVersionResource]*resourceCache
}

var _ aggregate.Handler = (*watchCache)(nil)

// newWatchCache returns an empty watch cache; log is nil, or the change log that a watch
// resumes from across a restart.
func newWatchCache(historySize int, codec aggregate.Codec, log ChangeLogSource) *watchCache {
	var b [9]byte
	_, _ = rand.Read(b[:]) // never fails
	epoch := base64.RawURLEncoding.EncodeToString(b[:])
	var logEpoch string
	if log != nil {
		if logEpoch = log.ChangeLogEpoch(); logEpoch != "" {
			epoch = logEpoch + logEpochSep + epoch
		} else {
			log = nil
		}
	}
	return &watchCache{
		historySize: historySize,
		codec:       codec,
		epoch:       epoch,
		log:         log,
		logEpoch:    logEpoch,
		primed:      make(chan struct{}),
		index:       search.New(search.Options{ShortNames: shortNames}),
		indexed:     make(chan struct{}),
		resources:   make(map[schema.GroupVersionResource]*resourceCache),
	}
}

// register adds the watch cache to fleet as a handler of every resource. The fleet
// replays its current state to the handler first.
func (wc *watchCache) register(fleet *aggregate.Fleet) (*aggregate.Registration, error) {
	// EncodedOnly: the view keeps a summary and the encoding of each full object of a
	// compact fleet, read from the encoding (storedForm), so the events need not decode.
	// No MaxBacklog: the history, and so every watch, must have each change, in order,
	// as the apiservers' watch caches have them; coalesced events would skip some (a
	// warm start's replay of more objects than the fleet's MaxBacklog, with changes
	// to some of them coming in behind it). A view that falls behind holds the events
	// it has yet to take, and the versions of the objects they name.
	reg, err := fleet.AddHandler(wc, aggregate.HandlerOptions{Name: "server", EncodedOnly: wc.codec != nil, MaxBacklog: math.MaxInt})
	if err != nil {
		return nil, err
	}
	wc.reg.Store(reg)
	// Nothing was queued (an empty fleet), or everything was already delivered. An event
	// that was just taken off the queue and is about to enter OnEvent is missed by this
	// check: the view is then primed one event early, as if the request that follows had
	// come a moment sooner.
	if reg.Backlog() == 0 && wc.active.Load() == 0 {
		wc.prime()
	}
	return reg, nil
}

// indexPoll is how often indexWhenReady asks whether the fleet is ready, where the
// fleet's sync hold does not tell it (a var for tests).
var indexPoll = time.Second

// indexWhenReady builds the search index once the view is primed and has caught up with
// what the fleet held when it was first ready, unless a search built it first or stop is
// closed. synced is closed when the registration has synced: the Manager's hold on the
// fleet released at its first readiness, and every event queued then delivered. Where no
// hold tells it, caughtUp returns nil until the fleet is ready, and then a channel closed
// once the view has caught up (Server.caughtUp); it is asked every indexPoll. The view
// primes whenever it catches up with the fleet, which a warm start's replay does again
// and again while the snapshot loads: built then, the index would take the rest of the
// replay object by object, on the path to readiness.
func (wc *watchCache) indexWhenReady(synced <-chan struct{}, caughtUp func() <-chan struct{}, stop <-chan struct{}) {
	select {
	case <-wc.primed:
	case <-wc.indexed:
		return
	case <-stop:
		return
	}
	t := time.NewTicker(indexPoll)
	defer t.Stop()
	var up <-chan struct{}
	for {
		if up == nil {
			up = caughtUp()
		}
		select {
		case <-synced:
		case <-up: // nil until the fleet is ready
		case <-t.C:
			continue
		case <-wc.indexed:
			return
		case <-stop:
			return
		}
		break
	}
	wc.buildIndex()
}

func (wc *watchCache) prime() { wc.primeOnce.Do(func() { close(wc.primed) }) }

// OnEvent applies a fleet event to the view and its history, and to the search index
// once it is built.
func (wc *watchCache) OnEvent(e aggregate.Event) {
	wc.active.Add(1)
	if stored := wc.resource(e.Resource).apply(e); stored != nil {
		// The index keeps the summary, not the object the event decoded.
		e.Object = stored
	}
	wc.indexMu.Lock()
	if wc.indexBuilt {
		wc.index.OnEvent(e)
	}
	wc.indexMu.Unlock()
	wc.active.Add(-1)
	// Inside OnEvent, an empty backlog means every event queued so far has been handled.
	if reg := wc.reg.Load(); reg != nil && reg.Backlog() == 0 {
		wc.prime()
	}
}

// buildIndex fills the search index from the view and then closes indexed: the replay
// of the fleet's state at start (a warm start's thousands of clusters from the snapshot)
// is indexed in one pass once the fleet is ready (indexWhenReady) or a search asks
// (waitIndexed), not object by object before. The view already has every event handled
// so far; an event that the view took before the build, and that OnEvent hands the index
// after, is put again, to the same state. A second call waits for the first to end.
func (wc *watchCache) buildIndex() {
	wc.indexMu.Lock()
	defer wc.indexMu.Unlock()
	if wc.indexBuilt {
		return
	}
	for _, rc := range wc.all() {
		rc.each(func(cluster string, obj runtime.Object) {
			wc.index.OnEvent(aggregate.Event{Type: aggregate.Added, Cluster: cluster, Resource: rc.resource, Object: obj})
		})
	}
	wc.indexBuilt = true
	close(wc.indexed)
}

// resource returns the cache of gvr, creating it if needed.
func (wc *watchCache) resource(gvr schema.GroupVersionResource) *resourceCache {
	wc.mu.RLock()
	rc := wc.resources[gvr]
	wc.mu.RUnlock()
	if rc != nil {
		return rc
	}
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if rc = wc.resources[gvr]; rc == nil {
		rc = newResourceCache(gvr, wc.historySize, wc.codec)
		rc.log = wc.log
		rc.scoped, _ = wc.log.(ScopedChangeLog)
		rc.listed, _ = wc.log.(ListedChangeLog)
		wc.resources[gvr] = rc
	}
	return rc
}

// each calls fn with every object of the view, by cluster, under the read lock.
func (rc *resourceCache) each(fn func(cluster string, obj runtime.Object)) {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	for cluster, co := range rc.clusters {
		for _, names := range co.namespaces {
			for _, obj := range names {
				fn(cluster, obj)
			}
		}
	}
}

// lookup returns the cache of gvr, or nil if no event of gvr has been seen.
func (wc *watchCache) lookup(gvr schema.GroupVersionResource) *resourceCache {
	wc.mu.RLock()
	defer wc.mu.RUnlock()
	return wc.resources[gvr]
}

// all returns the cache of every resource seen.
func (wc *watchCache) all() []*resourceCache {
	wc.mu.RLock()
	defer wc.mu.RUnlock()
	return slices.Collect(maps.Values(wc.resources))
}

// resourceCache is the view and history of one resource.
type resourceCache struct {
	resource    schema.GroupVersionResource
	historySize int
	// codec and log are the watch cache's.
	codec aggregate.Codec
	log   ChangeLogSource
	// scoped and listed are log as a ScopedChangeLog and a ListedChangeLog, nil if it
	// is none.
	scoped ScopedChangeLog
	listed ListedChangeLog

	// mu guards every field below.
	mu sync.RWMutex
	// clusters holds the current objects, by cluster, namespace and name. A cluster
	// without objects has no entry.
	clusters map[string]*clusterObjects
	// ring is the history, oldest first from head once it is full. nextSeq is the
	// sequence number of the next change; the ring holds nextSeq-len(ring) to nextSeq-1.
	ring    []entry
	head    int
	nextSeq uint64
	// positions is the position of every cluster that has had a change.
	positions map[string]position
	// scopes is, for each cluster whose resource one informer per namespace watches
	// (ScopedChangeLog), its position in each namespace that has had a change, of the
	// cluster's generation or an older one (then it has had none in this one).
	scopes map[string]map[string]position
	// loads is, for each cluster loaded from the change log, the load of it that the
	// generation of its positions counts from (positionLocked).
	loads map[string]uint64
	// forgotten is, for each cluster whose loaded objects stopped standing for the
	// change log (its identity changed, it left, the resource was dropped), the load
	// and the generation of its positions that the change after started
	// (positionLocked).
	forgotten map[string]forgottenLoad
	// kept is the position of each cluster's last change that is not a deletion that
	// no watch saw (FinalStateUnknown); left, for each cluster whose objects such
	// deletions emptied, the last of those positions before (placedBeforeLeaving).
	kept map[string]position
	left map[string]leftMark
	// evicted is, for every cluster that has lost changes off the end of the history,
	// the position of the last one lost. A cursor before it is too old. evictedSeq is
	// the sequence number of that change, for short cursors.
	evicted    map[string]position
	evictedSeq map[string]uint64
	// changed is closed at the next change, if a watch asked for it since the last one
	// (changedLocked): made only when a watch waits, not at every change of a replay.
	changed atomic.Pointer[chan struct{}]
	// kind and namespaced are read off the objects, for resources that no cluster status
	// describes (a cluster whose discovery has not answered yet serves from a snapshot).
	kind       schema.GroupVersionKind
	namespaced bool
	// metadataOnly is set once a metadata-only object was seen.
	metadataOnly bool
	// events counts the changes of each cluster, for metrics.
	events map[string]uint64
	// lazy reads the summaries of the compactObjects of the fleet's events; nil
	// without a codec.
	lazy *lazySummary
}

type clusterObjects struct {
	count      int
	namespaces map[string]map[string]runtime.Object
}

// entry is one change in the history.
type entry struct {
	seq     uint64
	cluster string
	pos     position
	// scope is, for a resource that one informer per namespace watches in the
	// cluster, the object's namespace, and spos the cluster's position in it after the
	// change (resourceCache.scopes); "" otherwise.
	scope string
	spos  position
	typ   watch.EventType
	// obj is the new state, or for Deleted the last state. old is the state before a
	// Modified or Deleted: what a watcher saw, which its selectors are applied to.
	obj, old runtime.Object
}

func newResourceCache(gvr schema.GroupVersionResource, historySize int, codec aggregate.Codec) *resourceCache {
	rc := &resourceCache{
		resource:    gvr,
		historySize: historySize,
		codec:       codec,
		clusters:    make(map[string]*clusterObjects),
		positions:   make(map[string]position),
		scopes:      make(map[string]map[string]position),
		loads:       make(map[string]uint64),
		forgotten:   make(map[string]forgottenLoad),
		kept:        make(map[string]position),
		left:        make(map[string]leftMark),
		evicted:     make(map[string]position),
		evictedSeq:  make(map[string]uint64),
		events:      make(map[string]uint64),
	}
	if codec != nil {
		rc.lazy = newLazySummary(gvr.GroupResource(), codec)
	}
	return rc
}

// apply records a fleet event. The event's type is recomputed from the view, so that the
// history is always consistent with it. Under a compact fleet, it returns the
// compactObject that the view keeps for a full object (the last state, for Deleted).
func (rc *resourceCache) apply(e aggregate.Event) *compactObject {
	obj, stored, id, held := rc.storedForm(e)
	if !held {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil // the fleet only holds objects with metadata
		}
		id = identity{namespace: m.GetNamespace(), name: m.GetName(), resourceVersion: m.GetResourceVersion()}
	}
	ns, name := id.namespace, id.name
	rc.mu.Lock()
	defer rc.mu.Unlock()
	co := rc.clusters[e.Cluster]
	var prev runtime.Object
	if co != nil {
		prev = co.namespaces[ns][name]
	}
	var typ watch.EventType
	switch e.Type {
	case aggregate.Deleted:
		if prev == nil {
			return stored
		}
		names := co.namespaces[ns]
		delete(names, name)
		if len(names) == 0 {
			delete(co.namespaces, ns)
		}
		if co.count--; co.count == 0 {
			delete(rc.clusters, e.Cluster)
		}
		if e.Moved {
			// The cluster moved to another replica, whose part of a fleet watch goes
			// on with its changes: no watch sees the object go, and the cluster's
			// position stays at its last change here.
			if rc.clusters[e.Cluster] == nil {
				rc.leftLocked(e.Cluster, rc.positions[e.Cluster])
			}
			return stored
		}
		typ = watch.Deleted
	default:
		if co == nil {
			co = &clusterObjects{namespaces: make(map[string]map[string]runtime.Object)}
			rc.clusters[e.Cluster] = co
		}
		names := co.namespaces[ns]
		if names == nil {
			names = make(map[string]runtime.Object)
			co.namespaces[ns] = names
		}
		names[name] = obj
		typ = watch.Modified
		if prev == nil {
			co.count++
			typ = watch.Added
		}
		rc.observeLocked(obj, ns)
	}
	rc.events[e.Cluster]++
	unknown := typ == watch.Deleted && e.FinalStateUnknown
	pos := rc.positionLocked(e.Cluster, e.InitialList, unknown, id.resourceVersion)
	en := entry{
		cluster: e.Cluster,
		pos:     pos,
		typ:     typ,
		obj:     obj,
		old:     prev,
	}
	if rc.scopedLocked(e.Cluster) {
		en.scope, en.spos = ns, rc.scopePositionLocked(e.Cluster, ns, pos.gen, e.InitialList, unknown, id.resourceVersion)
		sp := rc.scopes[e.Cluster]
		if sp == nil {
			sp = make(map[string]position)
			rc.scopes[e.Cluster] = sp
		}
		sp[ns] = en.spos
	}
	rc.appendLocked(en)
	switch {
	case typ != watch.Deleted || !e.FinalStateUnknown:
		rc.kept[e.Cluster] = pos
	case rc.clusters[e.Cluster] == nil:
		// Emptied by deletions that no watch saw: the cluster left (or a relist found
		// nothing).
		rc.leftLocked(e.Cluster, pos)
	}
	return stored
}

// leftLocked records that the objects of cluster, now at pos, are all gone by
// deletions that no watch saw: the first time in a generation, the changes up to the
// last one before are the change log's too (placedBeforeLeaving).
func (rc *resourceCache) leftLocked(cluster string, pos position) {
	m, had := rc.left[cluster]
	rc.left[cluster] = leftMark{at: rc.kept[cluster], once: !had || m.at.gen != pos.gen}
}

// leftMark is where a cluster stood when its objects were all deleted without a watch
// event (see resourceCache.left).
type leftMark struct {
	// at is the position of the cluster's last change before those deletions.
	at position
	// once is false if its objects were emptied so before in the same generation.
	once bool
}

// placedBeforeLeaving reports whether p, a position of this run of an older generation
// of cluster, stands at or before the last change before the cluster's objects went
// (left), the only time in p's generation: the change log, which holds the changes of
// the cluster in the order the fleet sent them, places it (resumeLocked), as it places a
// position of an earlier run. The deletions after it are the view's only (the cluster
// left), which the log does not count.
func (rc *resourceCache) placedBeforeLeaving(cluster string, p position) bool {
	m, ok := rc.left[cluster]
	return ok && m.once && m.at.gen == p.gen && p.compare(m.at) <= 0
}

// positionLocked returns the position of the next change of cluster, whose object has
// resourceVersion rv. With a change log, the objects loaded from the snapshot, which
// come in key order, each take the position after the one before without a
// resourceVersion, (0, n); once they all came, the cluster stands at their base, the
// resourceVersion they were stored at (ChangeLogSource.ChangeLogBase): cursors say so
// (settledLocked), and the first change after them is placed after (base, 0). A cursor
// at or after the base resumes in a later run of the server from the log.
//
// A load of a cluster that already has positions here (it left and came back with its
// log on a warm handover: A to B to A) starts a generation of its positions, whose
// loaded objects take (gen, 0, n) in the same way: placed after its old objects, at
// the positions that the replica it came from had them at, they would come again to a
// watch resumed from a position of that replica (carryMoved).
//
// So does the first change after the loaded objects stopped standing for the log
// (forgotten: ok false): the cluster's identity changed, it left, or the resource was
// dropped, and the deletions that follow (unknown: no watch saw them) and the objects
// listed again are of another history than the log's. In the new generation they come
// after every earlier position, also after one of an earlier run past the base, which
// a watch resumed before the change started from (resumeLocked): those of the
// changes that the restarted informer was to receive again, which it now never will.
// The deletions and the objects listed again (and any loaded object that the view
// takes only now) take positions without a resourceVersion, (gen, 0, n), and the watch
// events after them positions of their own resourceVersions, not after the base: a
// cluster of another identity counts from its own, which a later run places in its own
// log, and a later run refuses a position (0, n) of this one.
func (rc *resourceCache) positionLocked(cluster string, initial, unknown bool, rv string) position {
	cur, had := rc.positions[cluster]
	if rc.log == nil || !initial && !unknown && cur.rv != 0 {
		// A watch event after a base, or without a change log.
		return cur.next(rv)
	}
	base, _, load, ok := rc.log.ChangeLogBase(cluster, rc.resource)
	if !ok && base == 0 {
		return cur.next(rv)
	}
	if !ok {
		if f, was := rc.forgotten[cluster]; !was || f.load != load {
			cur = position{gen: cur.gen + 1}
			rc.forgotten[cluster] = forgottenLoad{load: load, gen: cur.gen}
		}
		return nextAfterLoad(cur, initial, unknown, rv, false, 0)
	}
	if initial && load != rc.loads[cluster] {
		if had {
			cur = position{gen: cur.gen + 1}
		}
		rc.loads[cluster] = load
	}
	return nextAfterLoad(cur, initial, unknown, rv, true, base)
}

// nextAfterLoad returns the position of a change after cur, whose object has
// resourceVersion rv, in a stream of changes that a load of objects stored at base
// starts (positionLocked): standing, a load that still stands for the change log, else
// one that stopped standing for it. Until the stream has a resourceVersion, the loaded
// objects take (gen, 0, n), and so do, after a load that stopped standing, the
// deletions that no watch saw and the objects listed again; the first other change
// after a standing load is placed after its base.
func nextAfterLoad(cur position, initial, unknown bool, rv string, standing bool, base uint64) position {
	if cur.rv == 0 {
		switch {
		case standing && initial, !standing && (initial || unknown):
			return position{gen: cur.gen, n: cur.n + 1}
		case standing && base > 0:
			cur = position{gen: cur.gen, rv: base}
		}
	}
	return cur.next(rv)
}

// listedLocked reports whether the base of cluster's resource is of its first lists in
// this run (ListedChangeLog).
func (rc *resourceCache) listedLocked(cluster string) bool {
	return rc.listed != nil && rc.listed.ChangeLogListed(cluster, rc.resource)
}

// scopedLocked reports whether one informer per namespace watches the resource in
// cluster, with a change log that keeps its changes by namespace.
func (rc *resourceCache) scopedLocked(cluster string) bool {
	return rc.scoped != nil && rc.scoped.ChangeLogScoped(cluster, rc.resource)
}

// scopePositionLocked returns the position in namespace ns of the next change of
// cluster, which positionLocked placed in generation gen: the rules of positionLocked,
// namespace by namespace, with the namespace's base (ChangeLogScopeBases). A
// namespace's loaded objects take (gen, 0, n) in it, and its first change after them
// is placed after its own base.
func (rc *resourceCache) scopePositionLocked(cluster, ns string, gen uint32, initial, unknown bool, rv string) position {
	cur, ok := rc.scopes[cluster][ns]
	if !ok || cur.gen != gen {
		cur = position{gen: gen}
	}
	if !initial && !unknown && cur.rv != 0 {
		return cur.next(rv)
	}
	if f, ok := rc.forgotten[cluster]; ok && f.gen == gen {
		// The load stopped standing for the log (positionLocked).
		return nextAfterLoad(cur, initial, unknown, rv, false, 0)
	}
	base, _, loaded := rc.scopeBaseLocked(cluster, ns)
	if !loaded {
		return cur.next(rv)
	}
	return nextAfterLoad(cur, initial, unknown, rv, true, base)
}

// scopeBaseLocked returns the base of namespace ns of cluster's current load, as
// ChangeLogScopeBases has it; loaded is false if there is none that stands for the log.
func (rc *resourceCache) scopeBaseLocked(cluster, ns string) (base uint64, objects int, loaded bool) {
	ok := rc.scoped.ChangeLogScopeBases(cluster, rc.resource, func(n string, rv uint64, o int) {
		if n == ns {
			base, objects, loaded = rv, o, true
		}
	})
	return base, objects, loaded && ok
}

// scopesLocked returns the scopes of a cursor of cluster whose position is p, from its
// positions by namespace: those of p's generation, each of them settled, as
// settledLocked settles p: where the last of its namespace's loaded objects put it,
// its base. A namespace of the current load that had no loaded object and no change
// stands at its base. "" if the cluster is not watched namespace by namespace.
func (rc *resourceCache) scopesLocked(cluster string, p position, scopes map[string]position) string {
	if len(scopes) == 0 && len(rc.scopes[cluster]) == 0 || !rc.scopedLocked(cluster) {
		// The first without asking the log, at every cursor of every cluster.
		return ""
	}
	out := make(map[string]position, len(scopes))
	for ns, sp := range scopes {
		if sp.gen == p.gen {
			out[ns] = sp
		}
	}
	if rc.log != nil && p.gen == rc.positions[cluster].gen {
		f, forgotten := rc.forgotten[cluster]
		_, _, load, _ := rc.log.ChangeLogBase(cluster, rc.resource)
		if (!forgotten || f.gen != p.gen) && load == rc.loads[cluster] {
			// Asked before: fn is called with the log's lock held.
			listed := rc.listedLocked(cluster)
			rc.scoped.ChangeLogScopeBases(cluster, rc.resource, func(ns string, base uint64, objects int) {
				sp, seen := out[ns]
				switch {
				case base == 0:
				case !seen && objects == 0 && !listed:
					// (An empty first list may not be where the log's coverage
					// starts: without a position the namespace is sent whole.)
					out[ns] = position{gen: p.gen, rv: base}
				case seen && sp.rv == 0 && sp.n > 0 && int(sp.n) == objects:
					out[ns] = position{gen: p.gen, rv: base}
				}
			})
		}
	}
	return encodeScopes(out)
}

// forgottenLoad is a load whose objects stopped standing for the change log, and the
// generation of the cluster's positions after it (resourceCache.forgotten).
type forgottenLoad struct {
	load uint64
	gen  uint32
}

// settledLocked returns p, a position of cluster, or if p is where the last of the
// objects of the cluster's current load put it, their base (see positionLocked).
// Positions after the load stopped standing for the log do not settle: the deletions
// of its objects take (gen, 0, n) too.
func (rc *resourceCache) settledLocked(cluster string, p position) position {
	if p.rv != 0 || p.n == 0 || rc.log == nil || p.gen != rc.positions[cluster].gen {
		return p
	}
	if f, ok := rc.forgotten[cluster]; ok && f.gen == p.gen {
		return p
	}
	if base, objects, load, _ := rc.log.ChangeLogBase(cluster, rc.resource); base > 0 && int(p.n) == objects && load == rc.loads[cluster] {
		return position{gen: p.gen, rv: base}
	}
	return p
}

// placeLocked returns c with the position of a cluster's own resourceVersion
// (clusterRV) in the cluster's current generation.
func (rc *resourceCache) placeLocked(c cursor) cursor {
	if !c.clusterRV {
		return c
	}
	placed := make(map[string]position, len(c.positions))
	for cl, p := range c.positions {
		p.gen = rc.positions[cl].gen
		placed[cl] = p
	}
	c.positions, c.clusterRV = placed, false
	return c
}

// identity is what the view files an object by.
type identity struct{ namespace, name, resourceVersion string }

// storedForm returns what the view keeps of the event's object: the object itself,
// or under a compact fleet, for a full object, its compactObject (stored). The events
// of the objects that the fleet holds encoded come undecoded (register's EncodedOnly):
// an Added or Updated one's compactObject reads its summary from the encoding at the
// first look (lazyCompactObject), and id is then the object's identity as the fleet
// holds it (held; otherwise the caller reads it from obj); a Deleted one's summary is
// read at once. The encoding of a Deleted event's object that comes decoded, which the
// fleet no longer holds, is made here. obj is nil for an event that the view cannot
// keep (an encoding that fails to decode, logged).
func (rc *resourceCache) storedForm(e aggregate.Event) (obj runtime.Object, stored *compactObject, id identity, held bool) {
	if e.Object == nil && e.Encoded != nil && rc.codec != nil {
		if h, ok := e.Held(); ok && h.Key().Name != "" {
			stored = rc.lazy.lazyCompactObject(e.Encoded)
			k := h.Key()
			return stored, stored, identity{namespace: k.Namespace, name: k.Name, resourceVersion: h.ResourceVersion()}, true
		}
		if c, ok := rc.codec.(cborCodec); ok && c.CBORMaps() {
			if stored, ok = summarizeEncoded(c, rc.resource.GroupResource(), e.Encoded); ok {
				return stored, stored, identity{}, false
			}
		}
		decoded, err := rc.codec.Decode(e.Encoded)
		if err != nil {
			klog.ErrorS(err, "Decoding a cached object failed; leaving it out of the server's view", "cluster", e.Cluster, "resource", rc.resource)
			return nil, nil, identity{}, false
		}
		e.Object = decoded
	}
	u, ok := e.Object.(*unstructured.Unstructured)
	if rc.codec == nil || !ok {
		return e.Object, nil, identity{}, false
	}
	data := e.Encoded
	if data == nil {
		var err error
		if data, err = rc.codec.Encode(u); err != nil {
			klog.ErrorS(err, "Encoding a deleted object failed; keeping it decoded", "resource", rc.resource, "namespace", u.GetNamespace(), "name", u.GetName())
			return e.Object, nil, identity{}, false
		}
	}
	stored = newCompactObject(rc.resource.GroupResource(), u, data)
	return stored, stored, identity{}, false
}

func (rc *resourceCache) observeLocked(obj runtime.Object, namespace string) {
	if rc.kind.Empty() {
		if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Kind != "" && gvk.Group != "meta.k8s.io" {
			rc.kind = gvk
		}
	}
	if namespace != "" {
		rc.namespaced = true
	}
	if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
		rc.metadataOnly = true
	}
}

func (rc *resourceCache) isMetadataOnly() bool {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	return rc.metadataOnly
}

func (rc *resourceCache) appendLocked(e entry) {
	e.seq = rc.nextSeq
	rc.nextSeq++
	rc.positions[e.cluster] = e.pos
	if len(rc.ring) < rc.historySize {
		rc.ring = append(rc.ring, e)
	} else {
		lost := rc.ring[rc.head]
		rc.evicted[lost.cluster] = lost.pos
		rc.evictedSeq[lost.cluster] = lost.seq
		rc.ring[rc.head] = e
		rc.head = (rc.head + 1) % len(rc.ring)
	}
	if ch := rc.changed.Swap(nil); ch != nil {
		close(*ch)
	}
}

// changedLocked returns a channel that is closed at the next change. It is called
// under the read lock: watches share the channel that the first of them made, and a
// change, which takes the write lock, closes it.
func (rc *resourceCache) changedLocked() <-chan struct{} {
	for {
		if ch := rc.changed.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if rc.changed.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// firstSeqLocked is the sequence number of the oldest change in the history.
func (rc *resourceCache) firstSeqLocked() uint64 { return rc.nextSeq - uint64(len(rc.ring)) }

// readLocked appends to buf up to max changes from sequence number seq on, which must
// still be in the history.
func (rc *resourceCache) readLocked(seq uint64, max int, buf []entry) []entry {
	first := rc.firstSeqLocked()
	for s := seq; s < rc.nextSeq && max > 0; s, max = s+1, max-1 {
		buf = append(buf, rc.ring[(rc.head+int(s-first))%len(rc.ring)])
	}
	return buf
}

// cursorLocked returns the current cursor of the clusters in sc, in wc.
func (rc *resourceCache) cursorLocked(wc *watchCache, sc scope) cursor {
	c := cursor{epoch: wc.epoch, positions: make(map[string]position)}
	for cl, p := range rc.positions {
		if sc.includes(cl) {
			sp := rc.settledLocked(cl, p)
			sp.scopes = rc.scopesLocked(cl, p, rc.scopes[cl])
			c.positions[cl] = sp
		}
	}
	return c
}

// listCursorLocked returns the resourceVersion of a list of the clusters in sc, in wc:
// short if wc hands out short cursors to sc's client (shortFor).
func (rc *resourceCache) listCursorLocked(wc *watchCache, sc scope) cursor {
	if wc.shortFor(sc) {
		return rc.shortCursorLocked(wc)
	}
	return rc.cursorLocked(wc, sc)
}

// currentLocked reports whether the state of the clusters in sc at want, a cursor
// that wc accepts, is the current one (a list with resourceVersionMatch=Exact).
func (rc *resourceCache) currentLocked(wc *watchCache, want cursor, sc scope) bool {
	if want.short {
		return want.resource == resourceID(rc.resource) && rc.unchangedSinceLocked(want.seq, sc)
	}
	return equalIn(rc.placeLocked(want), rc.cursorLocked(wc, sc), sc)
}

// shortFor reports whether wc hands out short cursors in the scope sc: if it is
// sequenced, to a client that may read every cluster. A short cursor counts the changes
// of every cluster, which a client limited to some clusters must not learn (see
// docs/threat-model.md): it gets the positions of its clusters.
func (wc *watchCache) shortFor(sc scope) bool { return wc.sequenced && sc.allow == nil }

// shortCursorLocked returns the current short cursor of rc, in wc (cursor.short).
func (rc *resourceCache) shortCursorLocked(wc *watchCache) cursor {
	return cursor{epoch: wc.epoch, short: true, resource: resourceID(rc.resource), seq: rc.nextSeq}
}

// resourceID names gvr in short cursors: their sequence numbers are of one resource's
// changes.
func resourceID(gvr schema.GroupVersionResource) string {
	return strings.TrimSuffix(gvr.Resource+"."+gvr.Version+"."+gvr.Group, ".")
}

// checkShortLocked returns why the short cursor c cannot be resumed in rc in the
// scope sc, nil if it can: it is of another resource, after rc's changes, or older
// than the history for a cluster of sc.
func (rc *resourceCache) checkShortLocked(c cursor, sc scope) error {
	switch {
	case c.resource != resourceID(rc.resource):
		return fmt.Errorf("it is a resourceVersion of %s, not of %s", c.resource, resourceID(rc.resource))
	case c.seq > rc.nextSeq:
		return fmt.Errorf("it is after the %d changes of this server's view", rc.nextSeq)
	}
	if cl, old := rc.expiredSinceLocked(c.seq, sc); old {
		return fmt.Errorf("the history of cluster %q no longer reaches back to it", cl)
	}
	return nil
}

// expiredSinceLocked returns a cluster of sc that lost a change at or after sequence
// number seq off the end of the history, if any.
func (rc *resourceCache) expiredSinceLocked(seq uint64, sc scope) (string, bool) {
	if seq >= rc.firstSeqLocked() {
		return "", false
	}
	for _, cl := range slices.Sorted(maps.Keys(rc.evictedSeq)) {
		if sc.includes(cl) && rc.evictedSeq[cl] >= seq {
			return cl, true
		}
	}
	return "", false
}

// unchangedSinceLocked reports whether no cluster of sc changed at or after sequence
// number seq: the state of sc at the short cursor at seq is the current one.
func (rc *resourceCache) unchangedSinceLocked(seq uint64, sc scope) bool {
	if seq > rc.nextSeq {
		return false
	}
	if _, old := rc.expiredSinceLocked(seq, sc); old {
		return false
	}
	first := rc.firstSeqLocked()
	for q := max(seq, first); q < rc.nextSeq; q++ {
		if sc.includes(rc.ring[(rc.head+int(q-first))%len(rc.ring)].cluster) {
			return false
		}
	}
	return true
}

// expiredLocked returns a cluster of sc for which c is older than the history, if any.
func (rc *resourceCache) expiredLocked(c cursor, sc scope) (string, bool) {
	for _, cl := range slices.Sorted(maps.Keys(rc.evicted)) {
		if sc.includes(cl) && c.positions[cl].compare(rc.evicted[cl]) < 0 {
			return cl, true
		}
	}
	return "", false
}

// object is an object of the view with its cluster.
type object struct {
	cluster string
	obj     runtime.Object
	// codec decodes obj if it is a *compactObject (see full).
	codec aggregate.Codec
}

// listLocked returns, in (cluster, namespace, name) order, the objects that q matches,
// starting after the key after (if not nil), at most limit of them (0: no limit), as a
// listing to finish with items once rc.mu is released.
func (rc *resourceCache) listLocked(q *query, after *aggregate.Key, limit int) listing {
	l := listing{q: q, limit: limit}
	match := q
	if q.codec != nil && q.needsFields() {
		// Matching these fields decodes compact objects: that is left to items, out of
		// the lock, which would otherwise hold back the fleet's events meanwhile.
		l.decode, limit = true, 0
		match = q.withoutPaths()
	}
	for _, cl := range slices.Sorted(maps.Keys(rc.clusters)) {
		if !q.scope.includes(cl) || (after != nil && cl < after.Cluster) {
			continue
		}
		co := rc.clusters[cl]
		for _, ns := range slices.Sorted(maps.Keys(co.namespaces)) {
			if q.namespace != "" && ns != q.namespace {
				continue
			}
			sameNS := after != nil && cl == after.Cluster
			if sameNS && ns < after.Namespace {
				continue
			}
			sameNS = sameNS && ns == after.Namespace
			names := co.namespaces[ns]
			for _, name := range slices.Sorted(maps.Keys(names)) {
				if sameNS && name <= after.Name {
					continue
				}
				obj := names[name]
				if !match.matches(obj) {
					continue
				}
				if limit > 0 && len(l.objs) == limit {
					l.more = true
					return l
				}
				l.objs = append(l.objs, object{cluster: cl, obj: obj, codec: rc.codec})
			}
		}
	}
	return l
}

// listing is what listLocked found.
type listing struct {
	q     *query
	objs  []object
	more  bool
	limit int
	// decode is set if objs are the candidates that q matches apart from the fields
	// that need decoding, all of them: items matches those and applies the limit.
	decode bool
}

// items returns the objects of the listing, and whether further objects match. It
// needs no lock: the cached objects are immutable.
func (l listing) items() ([]object, bool) {
	if !l.decode {
		return l.objs, l.more
	}
	out := l.objs[:0]
	for _, o := range l.objs {
		if !l.q.matches(o.obj) {
			continue
		}
		if l.limit > 0 && len(out) == l.limit {
			return out, true
		}
		out = append(out, o)
	}
	return out, false
}

// getLocked returns the object namespace/name of every cluster in sc, by cluster name.
func (rc *resourceCache) getLocked(sc scope, namespace, name string) []object {
	var out []object
	for _, cl := range slices.Sorted(maps.Keys(rc.clusters)) {
		if !sc.includes(cl) {
			continue
		}
		if obj, ok := rc.clusters[cl].namespaces[namespace][name]; ok {
			out = append(out, object{cluster: cl, obj: obj, codec: rc.codec})
		}
	}
	return out
}

// hasCluster reports whether the view has objects of cluster.
func (rc *resourceCache) hasCluster(cluster string) bool {
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	return rc.clusters[cluster] != nil
}

// scope is the set of clusters a request reads: one, or every cluster (cluster "*")
// that allow admits.
type scope struct {
	cluster string
	// allow is the filter of the clusters the request's client may read, decided before
	// the request read the cache (Server.authorize); it is called with locks held, so
	// it does no I/O. nil admits every cluster.
	allow func(cluster string) bool
	// fanOut is set for a request under /clusters/*/ that the other replicas of a
	// sharded fleet are asked for too (see fanout.go).
	fanOut bool
}

// allClusters is the name of the scope of every cluster.
const allClusters = "*"

func (s scope) includes(cluster string) bool {
	if s.cluster != allClusters && s.cluster != cluster {
		return false
	}
	return s.allow == nil || s.allow(cluster)
}

func (s scope) all() bool { return s.cluster == allClusters }
