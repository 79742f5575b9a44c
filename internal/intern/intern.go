// Package intern deduplicates the strings of unstructured objects.
//
// Thousands of cached objects of a resource repeat the same map keys ("containerPort",
// "imagePullPolicy") and many of the same short values ("TCP", "Running", an image, a
// label). Decoded from JSON or CBOR, each object holds its own copy of each of them, and
// each string value in a map[string]any sits in a box of its own. A Table gives out one
// shared copy of each, and one shared box for each value: for full pods that is about a
// fifth of the heap.
//
// A Table is bounded: once it holds maxEntries strings, it forgets them all and starts
// over, so that values seen once (names, UIDs, timestamps) cannot fill it for good and
// the values that repeat are learnt again at once. Strings already handed out stay
// shared.
//
// It imports nothing of fleetwatch.
package intern

import "strings"

// MaxValueLen is the length of the longest string value that a Table interns. Longer
// values are rarely repeated, and would make the Table costly to keep.
const MaxValueLen = 128

// maxEntries bounds the keys and the values of a Table, each.
const maxEntries = 1 << 14

// Table interns strings. The zero Table is ready to use. It is not safe for concurrent
// use.
type Table struct {
	keys   map[string]string
	values map[string]any
	// front holds some of the strings of keys and values, each in a slot chosen by a
	// cheap hash of its length and a few of its bytes: most lookups find there what
	// they look for at the cost of a comparison, rather than hashing the whole string
	// and probing a map. A string takes its slot when the map has it already, so the
	// strings seen once (names, UIDs, timestamps) do not push out those that repeat.
	// It outlives the maps' starting over: what it holds is shared as anything handed
	// out is. Allocated on first use.
	front *front
}

// frontBits sets the number of slots of a front cache, for keys and for values each.
const frontBits = 9

type front struct {
	keys   [1 << frontBits]string
	values [1 << frontBits]frontValue
}

// frontValue is an interned value and its box.
type frontValue struct {
	s string
	v any
}

// frontSlot returns the slot of s in a front cache.
func frontSlot(s string) uint {
	h := uint64(len(s))
	if n := len(s); n > 0 {
		h |= uint64(s[0])<<8 | uint64(s[n-1])<<16 | uint64(s[n/2])<<24 | uint64(s[n/4])<<32 | uint64(s[n-1-n/4])<<40
	}
	h *= 0x9e3779b97f4a7c15
	return uint(h >> (64 - frontBits))
}

// Key returns the interned copy of the map key k. The Table keeps a copy of k, never k
// itself, so k may be part of a larger buffer.
func (t *Table) Key(k string) string {
	if t.front == nil {
		t.front = new(front)
	}
	slot := &t.front.keys[frontSlot(k)]
	if s := *slot; s == k {
		return s
	}
	if s, ok := t.keys[k]; ok {
		*slot = s
		return s
	}
	if t.keys == nil || len(t.keys) >= maxEntries {
		t.keys = make(map[string]string, 256)
	}
	s := strings.Clone(k)
	t.keys[s] = s
	return s
}

// Value returns the interned copy of the string value s, boxed: storing it in a
// map[string]any or an []any allocates nothing. ok is false if s is longer than
// MaxValueLen. The Table keeps a copy of s, never s itself.
func (t *Table) Value(s string) (v any, ok bool) {
	if len(s) > MaxValueLen {
		return nil, false
	}
	if t.front == nil {
		t.front = new(front)
	}
	slot := &t.front.values[frontSlot(s)]
	if slot.v != nil && slot.s == s {
		return slot.v, true
	}
	if v, ok = t.values[s]; ok {
		*slot = frontValue{s: v.(string), v: v}
		return v, true
	}
	if t.values == nil || len(t.values) >= maxEntries {
		t.values = make(map[string]any, 256)
	}
	s = strings.Clone(s)
	v = s
	t.values[s] = v
	return v, true
}

// Object interns, in place, the map keys and the string values of the content of an
// unstructured object: maps with string keys, slices, and scalars, as JSON and CBOR
// decode them into map[string]any. Other values are left as they are.
//
// Replacing the key of a map entry relies on the Go runtime's map assignment storing the
// given key also when an equal key is present, which it does for strings so that the old
// key can be freed. If it did not, only the values would be shared.
func (t *Table) Object(m map[string]any) {
	for k, v := range m {
		switch x := v.(type) {
		case string:
			if iv, ok := t.Value(x); ok {
				v = iv
			}
		case map[string]any:
			t.Object(x)
		case []any:
			t.slice(x)
		}
		m[t.Key(k)] = v
	}
}

func (t *Table) slice(s []any) {
	for i, v := range s {
		switch x := v.(type) {
		case string:
			if iv, ok := t.Value(x); ok {
				s[i] = iv
			}
		case map[string]any:
			t.Object(x)
		case []any:
			t.slice(x)
		}
	}
}
