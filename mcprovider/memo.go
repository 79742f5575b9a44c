package mcprovider

import (
	"reflect"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// DefaultTypedObjects is the default of Options.TypedObjects. Kept objects cost their
// typed heap: 1,024 of make bench's ConfigMaps take about 2.5 MB, of its large pods 11
// MB, which a controller's heap per object carries (docs/benchmarks.md, "mcprovider's
// memo of typed objects").
const DefaultTypedObjects = 1024

// typedMemo keeps typed objects that reads, and the typed handlers of the informers,
// converted from the fleet's objects, so that a typed read of an unchanged object costs
// a lookup and a DeepCopy, as a read of controller-runtime's cache does (it stores typed
// objects), rather than a conversion: the Get of the reconcile that an event triggers
// reads the version that the event's handler converted.
//
// It keeps at most one object per key of the fleet and kind, with the aggregate.Version
// of what the fleet held when it was converted, and hands it out only for that version
// (aggregate.Held.Is): an update, a deletion and re-creation, the same key in another
// cluster, all hold another version, which is converted and replaces the kept object.
// The Version is a weak reference, so what the memo keeps of a version the fleet has let
// go keeps none of the fleet's objects alive (only the strings that a conversion of a
// plain fleet's object shares with it), and can never pass for a new object that takes
// its address. The entry of a deleted object matches no read; CLOCK evicts it in turn.
//
// It holds at most size objects, evicted by CLOCK: a read marks its entry, and an object
// added to a full memo takes the slot of the first unmarked entry from the hand on,
// unmarking those it passes. The objects it holds are never modified nor handed out:
// reads get deep copies (copyInto).
type typedMemo struct {
	size int

	// mu guards entries, ring and hand. Reads take it for reading, and mark the entry they
	// find atomically.
	mu      sync.RWMutex
	entries map[memoKey]*memoEntry
	// ring holds the entries in CLOCK order, at most size of them; hand is the slot the
	// next eviction looks at first.
	ring []*memoEntry
	hand int
}

// memoKey is what a typed object is kept under: the key of the fleet's object it was
// converted from, and its kind, which the scheme maps to its Go type and the mapper to
// the fleet's resource.
type memoKey struct {
	key aggregate.Key
	gvk schema.GroupVersionKind
}

// memoEntry is one kept object. It never changes but for marked: a new version of its
// key takes a new entry.
type memoEntry struct {
	key memoKey
	// version is the version of the fleet's object that obj was converted from.
	version aggregate.Version
	obj     runtime.Object
	// slot is the entry's index in the ring.
	slot int
	// marked is set by a read, cleared by an eviction that passes it.
	marked atomic.Bool
}

// newTypedMemo returns a memo of size objects; nil, which keeps nothing, if size is not
// positive.
func newTypedMemo(size int) *typedMemo {
	if size <= 0 {
		return nil
	}
	return &typedMemo{size: size, entries: make(map[memoKey]*memoEntry, size)}
}

// read converts h, an object as the fleet holds it (or held it, for an Event's), into
// out, an object of the typed target t, replacing all of out: a copy of the object kept
// for h's version if there is one, else a conversion (target.fromEncoded), which it
// keeps. A nil memo converts.
func (m *typedMemo) read(t target, h aggregate.Held, out runtime.Object) error {
	k := memoKey{key: h.Key(), gvk: t.gvk}
	if m == nil || k.key == (aggregate.Key{}) {
		return t.fromEncoded(h.Object, h.Encoded, out)
	}
	if e := m.get(k); e != nil && h.Is(e.version) && copyInto(out, e.obj) {
		return nil
	}
	if err := t.fromEncoded(h.Object, h.Encoded, out); err != nil {
		return err
	}
	if v := h.Version(); !v.IsZero() {
		m.add(k, v, out.DeepCopyObject())
	}
	return nil
}

// get returns the entry of k, or nil, and marks it.
func (m *typedMemo) get(k memoKey) *memoEntry {
	m.mu.RLock()
	e := m.entries[k]
	m.mu.RUnlock()
	if e == nil {
		return nil
	}
	// Only the first read since the last sweep writes: the others leave its cache line
	// shared among the readers' cores.
	if !e.marked.Load() {
		e.marked.Store(true)
	}
	return e
}

// add keeps obj, converted from version v of the fleet's object, under k: in the slot of
// the entry of k if there is one (of an older version; of a later one, where a handler
// converts an event after the fleet replaced its version, which costs the next read of
// the later one a conversion; or of v if another read converted it too), else in a
// free slot, else in the slot of an entry it evicts.
func (m *typedMemo) add(k memoKey, v aggregate.Version, obj runtime.Object) {
	e := &memoEntry{key: k, version: v, obj: obj}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old := m.entries[k]; old != nil {
		e.slot = old.slot
	} else if len(m.ring) < m.size {
		e.slot = len(m.ring)
		m.ring = append(m.ring, nil)
	} else {
		e.slot = m.evictLocked()
	}
	m.entries[k] = e
	m.ring[e.slot] = e
}

// evictLocked removes the first unmarked entry from the hand on, unmarking the marked
// ones it passes, and returns its slot. The ring is full.
func (m *typedMemo) evictLocked() int {
	for {
		e := m.ring[m.hand]
		m.hand = (m.hand + 1) % len(m.ring)
		if !e.marked.Swap(false) {
			delete(m.entries, e.key)
			return e.slot
		}
	}
}

// len returns the number of objects kept.
func (m *typedMemo) len() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.entries)
}

// copyInto replaces all of out with a deep copy of kept, as controller-runtime's cache
// reader does, and reports whether it did: not if they are not pointers to the same type.
func copyInto(out, kept runtime.Object) bool {
	o, k := reflect.ValueOf(out), reflect.ValueOf(kept)
	if o.Type() != k.Type() || o.Kind() != reflect.Pointer || o.IsNil() {
		return false
	}
	o.Elem().Set(reflect.ValueOf(kept.DeepCopyObject()).Elem())
	return true
}
