package persist

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
)

// pending is what has not been committed yet. Per cluster: a drop of the whole cluster,
// a new identity, and per resource: a drop, the changes since the resource's last
// checkpoint (unchecked), and the changes up to that checkpoint (checked) with its
// resourceVersion. Changes are kept per object key, the latest state of the object or
// nil for a deletion, so memory is bounded by the number of distinct objects.
//
// A commit applies, per cluster: the drop, the identity, then per resource the drop, the
// checked changes and the resourceVersion. A drop discards everything pending before it,
// so what follows a drop applies to an empty resource, as in an informer that starts
// over.
//
// With history set, every change is also kept, in the order it arrived, for the change
// log (history.go): the changes of a resource since its last checkpoint (uncheckedLog)
// and those up to it (checkedLog), each with the resourceVersion of the checkpoint that
// covers it. Those are not coalesced, so they are bounded apart: beyond maxPendingLog
// of them, the log keeps none and records that it lost some (lost).
type pending struct {
	clusters map[string]*clusterPending
	history  bool
	// logLen is the number of log entries held, in uncheckedLog and checkedLog.
	logLen int
}

// maxPendingLog bounds the log entries that a pending holds: about 100 bytes each, plus
// the objects they keep alive, of which the informers' caches hold the latest anyway.
// A relist of more objects than this in one resource, or commits that fail for long,
// leave a ChangeLost record in the log instead of the changes.
const maxPendingLog = 1 << 20

type clusterPending struct {
	drop bool
	// replaced says that the drop is of a cluster whose identity changed.
	replaced bool
	identity *Identity
	groups   map[ResourceKey]*groupPending
}

type groupPending struct {
	drop bool
	// broken is why an object of the resource cannot be stored. The resource is then
	// dropped from the file, and its changes are ignored until the caller drops it.
	broken error

	unchecked      map[string]objectState
	uncheckedSince time.Time

	checked      map[string]objectState
	rv           string
	checkedSince time.Time

	// uncheckedLog and checkedLog are the changes of unchecked and checked in the order
	// they arrived, for the change log; lost says that some were not kept.
	uncheckedLog []logEntry
	checkedLog   []logEntry
	lost         bool
}

// logEntry is one change for the change log.
type logEntry struct {
	// typ is ChangeDeleted or ChangeVanished for a deletion, 0 for an upsert: whether
	// it added or modified the object is known at commit time, from the file.
	typ ChangeType
	key string
	st  objectState
	// objectRV is the object's resourceVersion, rv the one of the checkpoint that
	// covers the change ("" until it comes).
	objectRV, rv string
	time         time.Time
}

func (g *groupPending) idle() bool {
	return !g.drop && g.broken == nil && len(g.unchecked) == 0 && g.rv == "" && !g.lost
}

// logs returns the number of log entries of g.
func (g *groupPending) logs() int { return len(g.uncheckedLog) + len(g.checkedLog) }

// cluster returns the pending state of a cluster, creating it if needed.
func (p *pending) cluster(name string) *clusterPending {
	c := p.clusters[name]
	if c == nil {
		c = p.resetCluster(name)
	}
	return c
}

// resetCluster replaces the pending state of a cluster with an empty one.
func (p *pending) resetCluster(name string) *clusterPending {
	if p.clusters == nil {
		p.clusters = make(map[string]*clusterPending)
	}
	if old := p.clusters[name]; old != nil {
		for _, g := range old.groups {
			p.logLen -= g.logs()
		}
	}
	c := &clusterPending{groups: make(map[ResourceKey]*groupPending)}
	p.clusters[name] = c
	return c
}

// resetGroup replaces the pending state of a resource with g.
func (p *pending) resetGroup(cluster string, resource ResourceKey, g *groupPending) {
	c := p.cluster(cluster)
	if old := c.groups[resource]; old != nil {
		p.logLen -= old.logs()
	}
	c.groups[resource] = g
}

func (p *pending) group(cluster string, resource ResourceKey) *groupPending {
	c := p.cluster(cluster)
	g := c.groups[resource]
	if g == nil {
		g = &groupPending{}
		c.groups[resource] = g
	}
	return g
}

func (p *pending) setIdentity(cluster string, id Identity) {
	p.cluster(cluster).identity = &id
}

func (p *pending) dropCluster(cluster string, replaced bool) {
	c := p.resetCluster(cluster)
	c.drop, c.replaced = true, replaced
}

func (p *pending) dropResource(cluster string, resource ResourceKey) {
	p.resetGroup(cluster, resource, &groupPending{drop: true})
}

// breakResource drops the resource and ignores its changes until the next dropResource.
func (p *pending) breakResource(cluster string, resource ResourceKey, err error) {
	p.resetGroup(cluster, resource, &groupPending{drop: true, broken: err})
}

// objectState is the latest state of one object: encoded, the CBOR of its map, to be
// stored as it is, or else obj, to be encoded at commit time; a deletion if both are
// nil.
type objectState struct {
	obj     runtime.Object
	encoded []byte
}

// change records the latest state of one object, and e for the change log if p keeps
// one (e's key, st and time are set here).
func (p *pending) change(cluster string, resource ResourceKey, key string, st objectState, e logEntry, now time.Time) {
	g := p.group(cluster, resource)
	if g.broken != nil {
		return
	}
	if g.unchecked == nil {
		g.unchecked = make(map[string]objectState)
	}
	if len(g.unchecked) == 0 {
		g.uncheckedSince = now
	}
	g.unchecked[key] = st
	if !p.history || g.lost {
		return
	}
	e.key, e.st, e.time = key, st, now
	g.uncheckedLog = append(g.uncheckedLog, e)
	p.logLen++
	if p.logLen > maxPendingLog {
		p.loseLog()
	}
}

// loseLog discards every log entry held, and marks their resources lost. A resource
// keeps the mark while it has unchecked changes, of which entries may be gone.
func (p *pending) loseLog() {
	for _, c := range p.clusters {
		for _, g := range c.groups {
			if g.logs() > 0 {
				clear(g.uncheckedLog)
				g.uncheckedLog, g.checkedLog, g.lost = g.uncheckedLog[:0], nil, true
			}
		}
	}
	p.logLen = 0
}

// checkpoint makes the unchecked changes of a resource ready to commit with rv, and
// returns how many there were.
func (p *pending) checkpoint(cluster string, resource ResourceKey, rv string, now time.Time) int {
	g := p.group(cluster, resource)
	if g.broken != nil {
		return 0
	}
	n := len(g.unchecked)
	since := now
	if n > 0 {
		since = g.uncheckedSince
	}
	if len(g.uncheckedLog) > 0 {
		for i := range g.uncheckedLog {
			g.uncheckedLog[i].rv = rv
		}
		g.checkedLog = append(g.checkedLog, g.uncheckedLog...)
		clear(g.uncheckedLog)
		g.uncheckedLog = g.uncheckedLog[:0]
	}
	if g.checked == nil {
		g.checked, g.unchecked = g.unchecked, nil
	} else {
		// The unchecked map is kept for the next changes: a watch event is one change
		// and one checkpoint, and needs no map of its own.
		for k, st := range g.unchecked {
			g.checked[k] = st
		}
		clear(g.unchecked)
	}
	g.uncheckedSince = time.Time{}
	g.rv = rv
	g.checkedSince = earliest(g.checkedSince, since)
	return n
}

// batch is what one commit writes.
type batch struct {
	clusters map[string]*clusterBatch
	// changes is the number of object changes in the batch.
	changes int
}

type clusterBatch struct {
	drop     bool
	replaced bool
	identity *Identity
	groups   map[ResourceKey]*groupBatch
}

type groupBatch struct {
	drop bool
	// rv is the resourceVersion that changes bring the resource to; "" if the batch only
	// drops the resource.
	rv      string
	changes map[string]objectState
	since   time.Time
	// log is the changes in the order they arrived, for the change log; lost says that
	// some were not kept.
	log  []logEntry
	lost bool
}

// since returns the time of the oldest change or checkpoint in b, or the zero time if
// it has none.
func (b *batch) since() time.Time {
	var t time.Time
	for _, cb := range b.clusters {
		for _, gb := range cb.groups {
			t = earliest(t, gb.since)
		}
	}
	return t
}

// take moves everything that is ready to commit into a batch, or returns nil if nothing
// is. Unchecked changes stay.
func (p *pending) take() *batch {
	b := &batch{clusters: make(map[string]*clusterBatch)}
	for name, c := range p.clusters {
		cb := &clusterBatch{drop: c.drop, replaced: c.replaced, identity: c.identity, groups: make(map[ResourceKey]*groupBatch)}
		c.drop, c.replaced, c.identity = false, false, nil
		for resource, g := range c.groups {
			if g.drop || g.rv != "" {
				cb.groups[resource] = &groupBatch{drop: g.drop, rv: g.rv, changes: g.checked, since: g.checkedSince, log: g.checkedLog, lost: g.lost}
				b.changes += len(g.checked)
				p.logLen -= len(g.checkedLog)
				g.drop, g.rv, g.checked, g.checkedSince, g.checkedLog = false, "", nil, time.Time{}, nil
				g.lost = g.lost && len(g.unchecked) > 0
			}
			if g.idle() {
				delete(c.groups, resource)
			}
		}
		if cb.drop || cb.identity != nil || len(cb.groups) > 0 {
			b.clusters[name] = cb
		}
		if len(c.groups) == 0 {
			delete(p.clusters, name)
		}
	}
	if len(b.clusters) == 0 {
		return nil
	}
	return b
}

// restore puts back a batch that failed to commit, under what arrived since it was
// taken: that is newer and wins, and a drop since makes the batch's part obsolete.
func (p *pending) restore(b *batch) {
	for name, cb := range b.clusters {
		if c := p.clusters[name]; c != nil && c.drop {
			continue
		}
		c := p.cluster(name)
		c.drop, c.replaced = cb.drop, cb.replaced
		if c.identity == nil {
			c.identity = cb.identity
		}
		for resource, gb := range cb.groups {
			g := p.group(name, resource)
			if g.drop || g.broken != nil {
				continue
			}
			g.drop = gb.drop
			g.lost = g.lost || gb.lost
			if gb.rv == "" {
				continue
			}
			if len(gb.log) > 0 && !g.lost {
				g.checkedLog = append(gb.log, g.checkedLog...)
				p.logLen += len(gb.log)
				if p.logLen > maxPendingLog {
					p.loseLog()
				}
			}
			if g.checked == nil {
				g.checked = gb.changes
			} else {
				for k, obj := range gb.changes {
					if _, newer := g.checked[k]; !newer {
						g.checked[k] = obj
					}
				}
			}
			if g.rv == "" {
				g.rv = gb.rv
			}
			g.checkedSince = earliest(g.checkedSince, gb.since)
		}
	}
}

// counts returns the number of pending changes, how many of them are checkpointed, the
// age of the oldest checkpointed one (or of a checkpoint without changes), and the age
// of the oldest one of all.
func (p *pending) counts(now time.Time) (changes, checked int, lag, oldest time.Duration) {
	for _, c := range p.clusters {
		for _, g := range c.groups {
			changes += len(g.unchecked) + len(g.checked)
			checked += len(g.checked)
			if g.rv != "" {
				lag = max(lag, now.Sub(g.checkedSince))
			}
			if len(g.unchecked) > 0 {
				oldest = max(oldest, now.Sub(g.uncheckedSince))
			}
		}
	}
	return changes, checked, lag, max(lag, oldest)
}

// earliest returns the earlier of two times, a zero time counting as none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}
