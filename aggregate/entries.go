package aggregate

import (
	"hash/maphash"
	"iter"
	"math/bits"
)

// entryTable is a set of entries in a table of pointers, 8 bytes a slot, where a Go map
// takes 16 a slot for a map[*entry]struct{} (the empty value pads it) and 56 for a
// map[Key]*entry, whose slots hold the key beside the entry that holds it too. Up to
// denseMax entries it is a slice, searched in full, which keeps the many small sets of
// an index small; beyond that it is an open-addressing hash table with linear probing,
// its size a power of two, at most 3/4 full, hashed by H.
//
// It is not safe for concurrent use: the indexer's lock guards every table.
type entryTable[H entryHasher] struct {
	// slots holds the entries: the first n slots while len(slots) <= denseMax, else
	// a hash table with nil for a free slot.
	slots []*entry
	n     int
}

// entryHasher hashes an entry for an entryTable. The hash must not change while the
// entry is in a table.
type entryHasher interface{ hash(e *entry) uint64 }

// byAddress hashes an entry by its address (a pointer is comparable, and maphash hashes
// it as a map would): index sets hold entries, not keys.
type byAddress struct{}

func (byAddress) hash(e *entry) uint64 { return maphash.Comparable(keySeed, e) }

// byKey hashes an entry by its key: the items of an indexer are found by key.
type byKey struct{}

func (byKey) hash(e *entry) uint64 { return keyHash(e.key) }

var keySeed = maphash.MakeSeed()

// keyHash hashes the three strings of k, each rotated differently, so that keys whose
// strings trade places do not collide.
func keyHash(k Key) uint64 {
	return maphash.String(keySeed, k.Name) ^
		bits.RotateLeft64(maphash.String(keySeed, k.Namespace), 21) ^
		bits.RotateLeft64(maphash.String(keySeed, k.Cluster), 42)
}

// denseMax is the largest number of entries that an entryTable holds as a slice; the
// smallest hash table has minHashed slots.
const (
	denseMax  = 8
	minHashed = 16
)

// set is a set of entries: the objects that have one indexed value.
type set = entryTable[byAddress]

// itemTable holds the entries of an indexer, found by key.
type itemTable struct{ entryTable[byKey] }

// len returns the number of entries; a nil table has none.
func (t *entryTable[H]) len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// all returns the entries, in no particular order; a nil table has none. The table
// must not change during the iteration.
func (t *entryTable[H]) all() iter.Seq[*entry] {
	return func(yield func(*entry) bool) {
		if t == nil {
			return
		}
		for _, e := range t.slots {
			if e != nil && !yield(e) {
				return
			}
		}
	}
}

func (t *entryTable[H]) hashed() bool { return len(t.slots) > denseMax }

// home returns the slot where a hash table of t's size starts looking for e.
func (t *entryTable[H]) home(e *entry) int {
	var h H
	return int(h.hash(e) >> (64 - bits.TrailingZeros(uint(len(t.slots)))))
}

// index returns the slot of e, or -1.
func (t *entryTable[H]) index(e *entry) int {
	if !t.hashed() {
		for i, x := range t.slots[:t.n] {
			if x == e {
				return i
			}
		}
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(e); ; i = (i + 1) & mask {
		switch t.slots[i] {
		case e:
			return i
		case nil:
			return -1
		}
	}
}

// has reports whether e is in t.
func (t *entryTable[H]) has(e *entry) bool { return t.index(e) >= 0 }

// add adds e, which must not be in t.
func (t *entryTable[H]) add(e *entry) {
	t.n++
	switch {
	case t.n <= denseMax && !t.hashed():
		t.slots = append(t.slots, e)
		return
	case t.n > len(t.slots)*3/4:
		t.resize(t.n)
	}
	t.place(e)
}

// place puts e in the first free slot of its probe sequence.
func (t *entryTable[H]) place(e *entry) {
	mask := len(t.slots) - 1
	i := t.home(e)
	for t.slots[i] != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = e
}

// remove removes e, and reports whether it was in t.
func (t *entryTable[H]) remove(e *entry) bool {
	i := t.index(e)
	if i < 0 {
		return false
	}
	t.n--
	if !t.hashed() {
		last := len(t.slots) - 1
		t.slots[i], t.slots[last] = t.slots[last], nil
		t.slots = t.slots[:last]
		if t.n == 0 {
			t.slots = nil
		}
		return true
	}
	// Shift back the entries after i that probed past it, so that no probe sequence
	// has a hole (no tombstones).
	mask := len(t.slots) - 1
	t.slots[i] = nil
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		if (j-t.home(t.slots[j]))&mask >= (j-i)&mask {
			t.slots[i], t.slots[j] = t.slots[j], nil
			i = j
		}
	}
	if t.n <= denseMax/2 || t.n < len(t.slots)/8 {
		t.resize(t.n)
	}
	return true
}

// resize makes t a slice or a hash table about half full, for n entries.
func (t *entryTable[H]) resize(n int) {
	old := t.slots
	if n <= denseMax/2 {
		t.slots = make([]*entry, 0, n)
		for _, e := range old {
			if e != nil {
				t.slots = append(t.slots, e)
			}
		}
		return
	}
	size := minHashed
	for size < 2*n {
		size *= 2
	}
	t.slots = make([]*entry, size)
	for _, e := range old {
		if e != nil {
			t.place(e)
		}
	}
}

// get returns the entry with key k, or nil.
func (t *itemTable) get(k Key) *entry {
	if !t.hashed() {
		for _, e := range t.slots[:t.n] {
			if e.key == k {
				return e
			}
		}
		return nil
	}
	mask := len(t.slots) - 1
	for i := int(keyHash(k) >> (64 - bits.TrailingZeros(uint(len(t.slots))))); ; i = (i + 1) & mask {
		e := t.slots[i]
		if e == nil || e.key == k {
			return e
		}
	}
}

func insert[V comparable](m map[V]*set, v V, e *entry) {
	s := m[v]
	if s == nil {
		s = new(set)
		m[v] = s
	}
	s.add(e)
}

func remove[V comparable](m map[V]*set, v V, e *entry) {
	s := m[v]
	if s == nil {
		return
	}
	s.remove(e)
	if s.len() == 0 {
		delete(m, v)
	}
}
