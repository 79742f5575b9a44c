package server

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// ChangeLogSource is a Source whose fleet is loaded from a snapshot that keeps a change
// log: a watch then resumes from a cursor that an earlier run of the server handed out,
// across a restart, reading what it missed from the log. *fleetwatch.Manager implements
// it.
//
// The log must hold the changes of each resource in the order in which the fleet sent
// them to the server, one record each: a cursor's position counts changes (see
// resumeGap).
type ChangeLogSource interface {
	// ChangeLogEpoch identifies the change log, the same across restarts of the
	// daemon that keep its file; "" if there is none, and then a cursor resumes in the
	// run of the server that handed it out only.
	ChangeLogEpoch() string
	// SnapshotLoaded returns a channel that is closed once the fleet holds what the
	// snapshot held, and ChangeLogBase knows of it: a watch from a cursor of an earlier
	// run waits for it.
	SnapshotLoaded() <-chan struct{}
	// ChangeLogBase returns where the objects of cluster's resource gvr that the fleet
	// loaded from the snapshot, or imported on a warm handover, stand in the change
	// log: the resourceVersion they were stored at (0 while it is not known yet), how
	// many were loaded, and the number of the load, which tells the loads of the
	// cluster's resource in one run apart: a load that brings back a cluster that left
	// (a warm handover, A to B to A) has another than the one before, and the watch
	// cache starts a new generation of the cluster's positions for its objects
	// (position). Of a resource that one informer per namespace watches
	// (ScopedChangeLog), rv is the greatest of its namespaces' once every one is
	// known, and objects those of all. ok is false if none of the resource was loaded
	// from it (all 0), or if what was loaded no longer stands for the log (the
	// cluster's identity changed, it left, the resource was dropped): then the rest are
	// still those of the load. It is called with the
	// watch cache's locks held, so it does no I/O.
	ChangeLogBase(cluster string, gvr schema.GroupVersionResource) (rv uint64, objects int, load uint64, ok bool)
	// ChangesSince calls fn with each change of cluster's resource gvr that the change
	// log holds at resourceVersion rv or after it, up to upTo (a base of
	// ChangeLogBase), oldest first: at is the change's resourceVersion in the log (a
	// watch event's own, a list's for the changes of a list), e the event that the
	// fleet sent for it: Added, Updated (OldObject is the state before, nil if the log
	// no longer has it) or Deleted (Object is the last state that the log has, or holds
	// the name only; FinalStateUnknown for an object that a relist found gone), each
	// Object with the resourceVersion it had in the fleet (a watched deletion's own).
	// withRV reports whether the changes at rv are among them: false where the log's
	// coverage starts at rv, which holds every change after rv but not every one at it,
	// and then it leaves those at rv out. It fails if the log does not hold every
	// change after rv: the watch gets 410 Gone.
	ChangesSince(cluster string, gvr schema.GroupVersionResource, rv, upTo uint64, fn func(at uint64, e aggregate.Event)) (withRV bool, err error)
	// ChangeLogHolds reports whether the change log holds the changes of cluster as
	// the change log logEpoch (another replica's ChangeLogEpoch) recorded them, in the
	// same order: they came with the cluster's state when it was handed over from
	// there, so a position of that replica's cursors is placed in this log as in its
	// own (ChangeLogBase and ChangesSince serve it). It is called with the watch
	// cache's locks held, so it does no I/O.
	ChangeLogHolds(cluster, logEpoch string) bool
}

// ScopedChangeLog is a ChangeLogSource whose fleet may watch a resource with one
// informer per namespace (a daemon restricted to namespaces). The log then holds the
// changes of each namespace in the order its informer received them, and a base per
// namespace; the informers' streams interleave in the fleet in an order that a
// restarted fleet does not repeat. So the watch cache keeps, for such a resource, a
// position of the cluster in each namespace beside the cluster's, and cursors carry
// them (position.scopes): a later run places a cursor namespace by namespace
// (resumeLocked). Without it, a cursor of such a resource is not resumed across a
// restart. *fleetwatch.Manager implements it.
type ScopedChangeLog interface {
	ChangeLogSource
	// ChangeLogScoped reports whether cluster's resource gvr is watched, or was
	// loaded, with one informer per namespace. It is known before the first change of
	// the resource reaches the server. It is called with the watch cache's locks held,
	// so it does no I/O.
	ChangeLogScoped(cluster string, gvr schema.GroupVersionResource) bool
	// ChangeLogScopeBases calls fn with the base of each namespace of cluster's
	// resource gvr that the fleet loaded: the resourceVersion that namespace's objects
	// were stored at (0 while not known) and how many were loaded. ChangeLogBase of
	// the resource is the greatest of those resourceVersions, once every one is known,
	// with the objects of all. It returns ChangeLogBase's ok, and calls fn only where
	// there is a load. It is called with the watch cache's locks held, so it does no
	// I/O.
	ChangeLogScopeBases(cluster string, gvr schema.GroupVersionResource, fn func(namespace string, rv uint64, objects int)) bool
	// ScopeChangesSince is ChangesSince of the changes in namespace, up to its base.
	ScopeChangesSince(cluster string, gvr schema.GroupVersionResource, namespace string, rv, upTo uint64, fn func(at uint64, e aggregate.Event)) (withRV bool, err error)
}

// ListedChangeLog is a ChangeLogSource that also gives a base to the objects of the
// first lists of a resource that the fleet did not load from the snapshot (it watches
// the resource cold): ChangeLogBase is then the resourceVersion of the list, and the
// objects those of the list, which take positions (0, n) and then stand at the base,
// as loaded objects do (positionLocked); so a cursor handed out after the list names
// the list's resourceVersion, which a later run places in the log, where its coverage
// of the resource starts. *fleetwatch.Manager implements it.
type ListedChangeLog interface {
	ChangeLogSource
	// ChangeLogListed reports whether the base of cluster's resource gvr
	// (ChangeLogBase) is of first lists in this run, not of a load: no position of an
	// earlier run stands on it, and the log may hold nothing of it yet. It is called
	// with the watch cache's locks held, so it does no I/O.
	ChangeLogListed(cluster string, gvr schema.GroupVersionResource) bool
}

// logEpochSep separates, in a watch cache's epoch, the change log's epoch from the
// run's: neither a base-36 nor a base64url string holds it.
const logEpochSep = ":"

// accepts reports whether a cursor of epoch can be resumed here: it is this run's, or
// of an earlier run over the same change log.
func (wc *watchCache) accepts(epoch string) bool {
	return epoch == wc.epoch || wc.sameLog(epoch)
}

// acceptsCursor reports whether cursor c can be resumed here: each of its positions is
// of an epoch that accepts takes, or of a replica whose change log came with the position's
// cluster on a warm handover (ChangeLogHolds); a cursor without positions, if its
// epoch is accepted; a short cursor, if it is of this run and the cache hands out
// short ones.
func (wc *watchCache) acceptsCursor(c cursor) bool {
	if c.short {
		// Of this run only (sequenced).
		return wc.sequenced && c.epoch == wc.epoch
	}
	if len(c.positions) == 0 {
		return wc.accepts(c.epoch)
	}
	return wc.unplaced(c) == ""
}

// unplaced returns the first cluster of c whose position acceptsCursor does not take,
// "" if none.
func (wc *watchCache) unplaced(c cursor) string {
	for _, cl := range slices.Sorted(maps.Keys(c.positions)) {
		if e := c.epochOf(cl); !wc.accepts(e) && !wc.heldLog(cl, e) {
			return cl
		}
	}
	return ""
}

// heldLog reports whether epoch is of a replica whose change log came with cluster on
// a warm handover, and is held in this one.
func (wc *watchCache) heldLog(cluster, epoch string) bool {
	log, _, ok := strings.Cut(epoch, logEpochSep)
	return ok && wc.log != nil && log != "" && wc.log.ChangeLogHolds(cluster, log)
}

// fromLog reports whether a watch from cursor c, which acceptsCursor accepted, has a
// position of another run or replica, which it places in the change log once the
// snapshot is loaded (waitLoaded).
func (wc *watchCache) fromLog(c cursor) bool {
	return wc.log != nil && (c.epoch != wc.epoch || len(c.origins) > 0)
}

// sameLog reports whether epoch is of a run of the server over this change log.
func (wc *watchCache) sameLog(epoch string) bool {
	log, _, ok := strings.Cut(epoch, logEpochSep)
	return ok && wc.logEpoch != "" && log == wc.logEpoch
}

// waitLoaded waits until the fleet holds the snapshot, before a watch from a cursor of
// an earlier run is placed in the change log, at most primeWait: then 503 with
// Retry-After.
func (wc *watchCache) waitLoaded(ctx context.Context) error {
	t := time.NewTimer(primeWait)
	defer t.Stop()
	select {
	case <-wc.log.SnapshotLoaded():
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	se := apierrors.NewServiceUnavailable("the server's cache of the fleet is loading its snapshot")
	se.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return se
}

// logGap is what a watch resumed from a cursor reads from the change log for one
// cluster before it reads the history: the changes after the cursor's position (from)
// up to the base of the objects loaded from the snapshot, after which the history
// holds every change.
type logGap struct {
	cluster string
	// namespace is, for a resource that one informer per namespace watches
	// (ScopedChangeLog), the namespace whose changes the gap holds; from is then the
	// cluster's position in it, base its base.
	namespace string
	from      position
	base      uint64
	// gen is the generation of the cluster's positions at the base (position).
	gen     uint32
	changes []aggregate.Event
}

// resumed is where a watch resumed from a cursor starts (resumeLocked).
type resumed struct {
	// starts is the position of each cluster in the history, after which it starts.
	starts map[string]position
	// gaps are read from the change log and sent first.
	gaps []logGap
	// scopes are, for the clusters whose resource one informer per namespace watches,
	// where the cursor stands in each namespace (position.scopes), and skips, for
	// those placed namespace by namespace, where the watch starts in each: it skips
	// the changes of the history at or before them (the changes after the last commit
	// of an earlier run, which the restarted informers received again).
	scopes, skips map[string]map[string]position
}

// scopesOf records where position p of cluster cl stands in its namespaces, if it says.
func (r *resumed) scopesOf(cl string, p position) {
	if at, err := parseScopes(p.scopes, p.gen); err == nil && len(at) > 0 {
		r.scopesAt(cl, at)
	}
}

// scopesAt records that the cursor of cluster cl stands at scopes in its namespaces.
func (r *resumed) scopesAt(cl string, scopes map[string]position) {
	if r.scopes == nil {
		r.scopes = map[string]map[string]position{}
	}
	r.scopes[cl] = scopes
}

// resumeLocked returns where a watch resumed from cursor c starts in the history of rc
// for each cluster of sc that c has a position of, and the gaps to read from the change
// log first. A position of this run resumes from the history, unless it is at or
// before the base of the cluster's objects loaded from the snapshot: the changes in
// between are the log's, which the history does not hold. A position of an earlier run
// resumes from the log up to the base, or from the history if it is after the base
// (its changes after the last commit were lost in a crash, and the restarted informer
// received them again with the same resourceVersions). Any other position of an
// earlier run fails: the history of this run cannot place it. A position of another
// replica's run, of a cluster handed over from it with its change log, is one of an
// earlier run. Positions of other runs, and a cluster's own resourceVersion, are placed
// in the cluster's current generation (position). One of this run's of an older
// generation (the cluster left and came back) is placed in the log as one of an earlier
// run if it is of a change before the cluster left (placedBeforeLeaving); else it
// resumes from the history, which has the cluster's objects go and come again. A
// cluster whose base is of this run's first lists (ListedChangeLog) resumes a position
// of this run from the history, and none of another. A cluster whose resource one
// informer per namespace watches is placed namespace by namespace (resumeScopesLocked).
func (wc *watchCache) resumeLocked(rc *resourceCache, c cursor, sc scope) (resumed, error) {
	c = rc.placeLocked(c)
	r := resumed{starts: make(map[string]position, len(c.positions))}
	for _, cl := range slices.Sorted(maps.Keys(c.positions)) {
		if !sc.includes(cl) {
			continue
		}
		p := c.positions[cl]
		gen := rc.positions[cl].gen
		thisRun := c.epochOf(cl) == wc.epoch
		if !thisRun {
			// Generations are of a run: the log places the position in the current one.
			p.gen = gen
		}
		var base uint64
		var loaded bool
		if wc.log != nil {
			base, _, _, loaded = wc.log.ChangeLogBase(cl, rc.resource)
			loaded = loaded && base > 0
		}
		if rc.listedLocked(cl) && thisRun && p.gen <= gen {
			// The history holds every change since the lists, which are this run's
			// (and before them, of an older generation of the cluster, the changes of
			// what they replaced).
			r.starts[cl] = p
			r.scopesOf(cl, p)
			continue
		}
		if rc.listedLocked(cl) && !thisRun {
			return resumed{}, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, which the change log cannot place: this run did not load the cluster's %s from the snapshot", p, cl, rc.resource.Resource)
		}
		if rc.scopedLocked(cl) {
			done, err := wc.resumeScopesLocked(rc, cl, p, thisRun, loaded, base, &r)
			if err != nil {
				return resumed{}, err
			}
			if done {
				continue
			}
			r.scopesOf(cl, p)
		}
		switch {
		case p.gen > gen:
			return resumed{}, fmt.Errorf("the position %s of cluster %q is of a generation that this run of the server has not reached", p, cl)
		case loaded && p.rv > 0 && (p.gen == gen && p.compare(position{gen: gen, rv: base}) <= 0 ||
			p.gen < gen && rc.placedBeforeLeaving(cl, p)):
			// The changes in between are the log's; the watch stands at their
			// positions in the current generation.
			p.gen = gen
			r.gaps = append(r.gaps, logGap{cluster: cl, from: p, base: base, gen: gen})
			r.starts[cl] = position{gen: gen, rv: base}
		case thisRun, loaded && p.rv > 0:
			r.starts[cl] = p
		case loaded:
			return resumed{}, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, among the objects that it loaded from the snapshot, which the change log cannot place", p, cl)
		default:
			return resumed{}, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, which the change log cannot place: this run did not load the cluster's %s from the snapshot, or they no longer stand for its log (the cluster's identity changed, it left, the resource was dropped)", p, cl, rc.resource.Resource)
		}
	}
	return r, nil
}

// resumeScopesLocked places position p of cluster cl, whose resource one informer per
// namespace watches, namespace by namespace, adding to r where the watch starts, and
// reports whether it did; if not, resumeLocked places p as the cluster's position
// alone, which it does exactly within a run (the cluster's positions give the order in
// which the history holds its changes) and for a resource loaded in one scope.
//
// A position of an earlier run, or of this run at or before the base (where the
// history does not hold what follows), is placed by its positions per namespace
// (scopes): in each namespace, one at or before the namespace's base resumes from the
// log up to the base, one after it from the history, skipping the changes at or
// before it, which the restarted informer of the namespace received again; one among
// the namespace's loaded objects (0.n) fails. A namespace that the cursor has no
// position in had sent nothing when it was handed out: the watch sends its loaded
// objects, then its changes. The cluster then starts after its base in the history,
// or before its loaded objects if it sends some of them.
func (wc *watchCache) resumeScopesLocked(rc *resourceCache, cl string, p position, thisRun, loaded bool, base uint64, r *resumed) (bool, error) {
	gen := rc.positions[cl].gen
	if thisRun && (!loaded || p.gen != gen || p.scopes == "" || p.rv == 0 && p.n > 0 || p.compare(position{gen: gen, rv: base}) > 0) {
		return false, nil
	}
	type scopeBase struct {
		rv      uint64
		objects int
	}
	bases := map[string]scopeBase{}
	ok := rc.scoped.ChangeLogScopeBases(cl, rc.resource, func(ns string, rv uint64, objects int) {
		bases[ns] = scopeBase{rv: rv, objects: objects}
	})
	switch {
	case p.scopes == "" && ok && len(bases) == 1:
		// Of a build that kept no positions per namespace, of a resource loaded in
		// one namespace: its position is the namespace's.
		for ns := range bases {
			p.scopes = encodeScopes(map[string]position{ns: {rv: p.rv, n: p.n}})
		}
	case p.scopes == "":
		return false, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, which kept no position per namespace of %s, which one informer per namespace watches: the change log cannot place it", p, cl, rc.resource.Resource)
	case !ok || !loaded:
		return false, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, which the change log cannot place: this run did not load the cluster's %s from the snapshot, or they no longer stand for its log (the cluster's identity changed, it left, the resource was dropped)", p, cl, rc.resource.Resource)
	}
	at, err := parseScopes(p.scopes, gen)
	if err != nil {
		return false, err // checked by parseCursor
	}
	start := position{gen: gen, rv: base}
	skips := make(map[string]position, len(at))
	for _, ns := range slices.Sorted(maps.Keys(at)) {
		sp := at[ns]
		b, ok := bases[ns]
		switch {
		case !ok || b.rv == 0:
			return false, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, which watched namespace %q, whose %s this run did not load from the snapshot", p, cl, ns, rc.resource.Resource)
		case sp.rv == 0:
			return false, fmt.Errorf("the position %s of cluster %q is of an earlier run of the server, among the objects of namespace %q that it loaded from the snapshot, which the change log cannot place", p, cl, ns)
		case sp.compare(position{gen: gen, rv: b.rv}) <= 0:
			r.gaps = append(r.gaps, logGap{cluster: cl, namespace: ns, from: sp, base: b.rv, gen: gen})
			skips[ns] = position{gen: gen, rv: b.rv}
		default:
			skips[ns] = sp
		}
	}
	for ns, b := range bases {
		if _, seen := at[ns]; !seen && b.objects > 0 {
			start = position{gen: gen}
		}
	}
	r.starts[cl] = start
	r.scopesAt(cl, at)
	if r.skips == nil {
		r.skips = map[string]map[string]position{}
	}
	r.skips[cl] = skips
	return true, nil
}

// readGaps reads the changes of each gap from the change log.
func (wc *watchCache) readGaps(ctx context.Context, gvr schema.GroupVersionResource, gaps []logGap) error {
	for i := range gaps {
		g := &gaps[i]
		var logged []loggedChange
		collect := func(at uint64, e aggregate.Event) {
			logged = append(logged, loggedChange{at: at, event: e})
		}
		var withRV bool
		var err error
		if g.namespace != "" {
			// Only resumeScopesLocked makes such gaps, with a ScopedChangeLog.
			withRV, err = wc.log.(ScopedChangeLog).ScopeChangesSince(g.cluster, gvr, g.namespace, g.from.rv, g.base, collect)
		} else {
			withRV, err = wc.log.ChangesSince(g.cluster, gvr, g.from.rv, g.base, collect)
		}
		if err == nil {
			g.changes, err = changesAfter(g.from, logged, withRV)
		}
		if err != nil {
			return fmt.Errorf("cluster %q: %w", g.cluster, err)
		}
		klog.FromContext(ctx).V(4).Info("Resuming a watch from the change log", "cluster", g.cluster, "resource", gvr, "namespace", g.namespace, "from", g.from, "base", g.base, "changes", len(g.changes))
	}
	return nil
}

// loggedChange is a change of the change log, at its resourceVersion there.
type loggedChange struct {
	at    uint64
	event aggregate.Event
}

// changesAfter returns the changes that follow position p, from those of the log at
// p's resourceVersion (if withRV) and after it, in the order of the log. Position (rv,
// n) stands n changes after the change whose object's resourceVersion is rv (a list's
// object, or a watch event, whose change is the only one at its resourceVersion), or
// if there is none among them, n changes after those at rv: the history places each
// change after the one before, moving to its object's resourceVersion if it is greater
// (position.next), which is the order of the log.
//
// Without the changes at rv (withRV false: the log's coverage starts at rv), a change
// whose object's resourceVersion is rv that is not among those after rv may have been
// a list's, with more of the list at rv after it, which n would count: with n > 0 the
// position cannot be told from one that counts changes after rv only (after a watch
// event at rv, or a base), and is refused rather than placed where it skips changes
// after rv. With n = 0 it is placed after rv, which is exact but for a cursor that
// stopped at such a list's object (docs/design.md, "Watches across a restart").
func changesAfter(p position, logged []loggedChange, withRV bool) ([]aggregate.Event, error) {
	start, found := -1, false
	for i, c := range logged {
		if c.at > p.rv && start < 0 {
			start = i
		}
		if !c.event.FinalStateUnknown && resourceVersionOf(c.event.Object) == p.rv {
			start, found = i+1, true
			break
		}
	}
	if start < 0 {
		start = len(logged)
	}
	if !withRV && !found && p.n > 0 {
		return nil, fmt.Errorf("the change log holds the changes after resourceVersion %d, not every one at it, which the position %s may count", p.rv, p)
	}
	if start+int(p.n) > len(logged) {
		return nil, fmt.Errorf("the change log holds %d changes after %s, fewer than the cursor counts", len(logged)-start, p)
	}
	out := make([]aggregate.Event, 0, len(logged)-start-int(p.n))
	for _, c := range logged[start+int(p.n):] {
		out = append(out, c.event)
	}
	return out, nil
}

// resourceVersionOf returns obj's resourceVersion as an integer, 0 if it is none.
func resourceVersionOf(obj runtime.Object) uint64 {
	m, err := meta.Accessor(obj)
	if obj == nil || err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	return v
}

// gapEntry returns the history entry of a change read from the change log, at the
// position after pos; ok is false for an event without an object.
func gapEntry(cluster string, pos position, e aggregate.Event) (entry, bool) {
	m, err := meta.Accessor(e.Object)
	if e.Object == nil || err != nil {
		return entry{}, false
	}
	en := entry{cluster: cluster, pos: pos.next(m.GetResourceVersion()), obj: e.Object, old: e.OldObject}
	switch e.Type {
	case aggregate.Added:
		en.typ = watch.Added
	case aggregate.Deleted:
		en.typ, en.old = watch.Deleted, e.Object
	default:
		en.typ = watch.Modified
		if en.old == nil {
			// The state before is gone from the log: the change is taken as one that
			// does not move the object in or out of the watch's selection.
			en.old = e.Object
		}
	}
	return en, true
}

// changeLogOf returns src as a ChangeLogSource, or nil if it is none.
func changeLogOf(src Source) ChangeLogSource {
	if l, ok := src.(ChangeLogSource); ok {
		return l
	}
	return nil
}
