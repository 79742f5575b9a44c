// Package weakmap provides Map, a map whose values the map keeps for no one: an entry
// leaves once its value is garbage. Tables of things that many holders share while any
// of them uses it (a discovery mapper of many clusters, the connection gates of one
// transport) keep them once, and forget them with their last holder.
package weakmap

import (
	"runtime"
	"sync"
	"weak"
)

// Map maps keys to values that it keeps for no one: an entry leaves once its value is
// garbage, collected because nothing else holds it. It is safe for concurrent use; the
// zero Map is empty and ready.
type Map[K comparable, V any] struct {
	// mu guards m.
	mu sync.Mutex
	m  map[K]weak.Pointer[V]
}

// Load returns the value of k, or nil.
func (w *Map[K, V]) Load(k K) *V {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[k].Value()
}

// LoadOrStore returns the value of k, or, if it has none, makes one with newValue,
// stores it, and returns it. newValue runs under the map's lock.
func (w *Map[K, V]) LoadOrStore(k K, newValue func() *V) *V {
	w.mu.Lock()
	defer w.mu.Unlock()
	if v := w.m[k].Value(); v != nil {
		return v
	}
	v := newValue()
	p := weak.Make(v)
	if w.m == nil {
		w.m = map[K]weak.Pointer[V]{}
	}
	w.m[k] = p
	runtime.AddCleanup(v, w.release, entry[K, V]{key: k, weak: p})
	return v
}

// Has reports whether k has an entry, of a value that may be on its way out.
func (w *Map[K, V]) Has(k K) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.m[k]
	return ok
}

// Len returns the number of entries, some of which may be on their way out.
func (w *Map[K, V]) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}

// entry is an entry of a Map, as the cleanup of its value finds it.
type entry[K comparable, V any] struct {
	key  K
	weak weak.Pointer[V]
}

// release deletes e, unless a new value took its key meanwhile.
func (w *Map[K, V]) release(e entry[K, V]) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m[e.key] == e.weak {
		delete(w.m, e.key)
	}
}
