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
type pending struct {
	clusters map[string]*clusterPending
}

type clusterPending struct {
	drop     bool
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
}

func (g *groupPending) idle() bool {
	return !g.drop && g.broken == nil && len(g.unchecked) == 0 && g.rv == ""
}

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
	c := &clusterPending{groups: make(map[ResourceKey]*groupPending)}
	p.clusters[name] = c
	return c
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

func (p *pending) dropCluster(cluster string) {
	p.resetCluster(cluster).drop = true
}

func (p *pending) dropResource(cluster string, resource ResourceKey) {
	p.cluster(cluster).groups[resource] = &groupPending{drop: true}
}

// breakResource drops the resource and ignores its changes until the next dropResource.
func (p *pending) breakResource(cluster string, resource ResourceKey, err error) {
	p.cluster(cluster).groups[resource] = &groupPending{drop: true, broken: err}
}

// objectState is the latest state of one object: encoded, the CBOR of its map, to be
// stored as it is, or else obj, to be encoded at commit time; a deletion if both are
// nil.
type objectState struct {
	obj     runtime.Object
	encoded []byte
}

// change records the latest state of one object.
func (p *pending) change(cluster string, resource ResourceKey, key string, st objectState, now time.Time) {
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
		cb := &clusterBatch{drop: c.drop, identity: c.identity, groups: make(map[ResourceKey]*groupBatch)}
		c.drop, c.identity = false, nil
		for resource, g := range c.groups {
			if g.drop || g.rv != "" {
				cb.groups[resource] = &groupBatch{drop: g.drop, rv: g.rv, changes: g.checked, since: g.checkedSince}
				b.changes += len(g.checked)
				g.drop, g.rv, g.checked, g.checkedSince = false, "", nil, time.Time{}
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
		c.drop = cb.drop
		if c.identity == nil {
			c.identity = cb.identity
		}
		for resource, gb := range cb.groups {
			g := p.group(name, resource)
			if g.drop || g.broken != nil {
				continue
			}
			g.drop = gb.drop
			if gb.rv == "" {
				continue
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
