package aggregate

import (
	"reflect"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TypedMemo keeps typed objects made from a fleet's objects, so that a typed read of an
// unchanged object costs a lookup and a DeepCopy, as a read of controller-runtime's cache
// does (it stores typed objects), rather than a decode or a conversion: a controller's
// reconciles read the same objects again and again. TypedLister reads through one
// (TypedListerOptions.Memo), and so do mcprovider's caches, whose informers' typed
// handlers fill it too: the Get of the reconcile that an event triggers reads the
// version that the event's handler converted.
//
// It keeps at most one object per key of the fleet and kind, with the Version of what the
// fleet held when it was made, and hands it out only for that version (Held.Is): an
// update, a deletion and re-creation, the same key in another cluster, all hold another
// version, which is made again and replaces the kept object. The Version is a weak
// reference, so what the memo keeps of a version the fleet has let go keeps none of the
// fleet's objects alive (only the strings that a conversion of a plain fleet's object
// shares with it), and can never pass for a new object that takes its address. The entry
// of a deleted object matches no read; CLOCK evicts it in turn.
//
// It holds at most its size of objects, evicted by CLOCK: a read marks its entry, and an
// object added to a full memo takes the slot of the first unmarked entry from the hand
// on, unmarking those it passes. The objects it holds are never modified nor handed out:
// reads get deep copies. A nil *TypedMemo keeps nothing: every read makes its object. It
// is safe for concurrent use.
type TypedMemo struct {
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
// made from, and its kind, which a scheme maps to its Go type.
type memoKey struct {
	key Key
	gvk schema.GroupVersionKind
}

// memoEntry is one kept object. It never changes but for marked: a new version of its
// key takes a new entry.
type memoEntry struct {
	key memoKey
	// version is the version of the fleet's object that obj was converted from.
	version Version
	obj     runtime.Object
	// slot is the entry's index in the ring.
	slot int
	// marked is set by a read, cleared by an eviction that passes it.
	marked atomic.Bool
}

// NewTypedMemo returns a memo of at most size objects; nil, which keeps nothing, if size
// is not positive.
func NewTypedMemo(size int) *TypedMemo {
	if size <= 0 {
		return nil
	}
	return &TypedMemo{size: size, entries: make(map[memoKey]*memoEntry, size)}
}

// Read replaces all of out, an object of kind gvk, with the typed object of h, an object
// as the fleet holds it (Indexer.GetHeld, Indexer.SelectEncoded) or held it
// (Event.Held): a deep copy of the object kept for h's version if there is one, else
// what build writes into out, of which it keeps a deep copy. build must replace all of out
// with h's object; its error is Read's, and nothing is kept then. A Held that no Indexer
// nor Event gave (without a Key), or whose object has no Version, is made and not kept.
func (m *TypedMemo) Read(h Held, gvk schema.GroupVersionKind, out runtime.Object, build func(out runtime.Object) error) error {
	k := memoKey{key: h.Key(), gvk: gvk}
	if m == nil || k.key == (Key{}) {
		return build(out)
	}
	if e := m.get(k); e != nil && h.Is(e.version) && copyInto(out, e.obj) {
		return nil
	}
	if err := build(out); err != nil {
		return err
	}
	if v := h.Version(); !v.IsZero() {
		m.add(k, v, out.DeepCopyObject())
	}
	return nil
}

// Size returns the most objects m keeps; 0 for a nil memo.
func (m *TypedMemo) Size() int {
	if m == nil {
		return 0
	}
	return m.size
}

// Len returns the number of objects m keeps.
func (m *TypedMemo) Len() int {
	if m == nil {
		return 0
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.entries)
}

// Kept returns the object that m keeps under key and kind gvk, whatever its version, and
// whether there is one, for tests and debugging: it must not be modified, but by a test
// that marks it to tell a copy of it apart.
func (m *TypedMemo) Kept(key Key, gvk schema.GroupVersionKind) (runtime.Object, bool) {
	if m == nil {
		return nil, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	e := m.entries[memoKey{key: key, gvk: gvk}]
	if e == nil {
		return nil, false
	}
	return e.obj, true
}

// get returns the entry of k, or nil, and marks it.
func (m *TypedMemo) get(k memoKey) *memoEntry {
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
func (m *TypedMemo) add(k memoKey, v Version, obj runtime.Object) {
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
func (m *TypedMemo) evictLocked() int {
	for {
		e := m.ring[m.hand]
		m.hand = (m.hand + 1) % len(m.ring)
		if !e.marked.Swap(false) {
			delete(m.entries, e.key)
			return e.slot
		}
	}
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
