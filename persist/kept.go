package persist

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// keptValues is the table of Codec.DecodeShared: the maps and arrays that it decoded, by
// their encoding, as sharedValues is the loader's, but one for the whole process, safe
// for concurrent use, and outliving the values it was given. So it differs in three
// ways:
//   - Each slot holds an immutable *keptValue, replaced whole by an atomic store: a
//     reader holds an encoding and its value that belong together, and the value,
//     published by the store, is read by any goroutine (never written).
//   - It keeps a copy of each encoding, never a view: the data decoded may change after
//     the call, or be unmapped.
//   - It keeps an encoding the second time in a row that its hash meets its slot (seen),
//     so that what one object alone holds (a pod's status, its node) neither costs a
//     copy nor pushes out what objects share; none longer than maxKeptEncoding (a big
//     ConfigMap's data is decoded at each read, as without the table), and at most
//     maxKeptBytes of them: a table that would hold more starts over, so that it keeps
//     what repeats now rather than what repeated first.
type keptValues struct {
	slots [1 << keptBits]atomic.Pointer[keptValue]
	// seen has the tag of the hash of the last encoding that met each slot, kept or not.
	seen [1 << keptBits]atomic.Uint32
	// bytes is the length of the encodings the slots hold.
	bytes atomic.Int64
	// resetting is held by the goroutine that empties the table; another one that
	// finds it full meanwhile does not wait, and keeps nothing.
	resetting sync.Mutex
}

type keptValue struct {
	enc string
	v   any
}

// keptBits sets the number of slots of a keptValues; maxKeptEncoding and maxKeptBytes
// bound what it keeps (a pod's container is about 1 KiB of CBOR): with their
// decodings, a few times maxKeptBytes, beside the 96 KiB of the slots and tags.
const (
	keptBits        = 13
	maxKeptEncoding = 2 << 10
	maxKeptBytes    = 4 << 20
)

// kept is Codec.DecodeShared's table.
var kept keptValues

// slot returns the index of the slot of enc, and the tag of its hash.
func (t *keptValues) slot(enc string) (uint16, uint32) {
	h := maphash.String(sharedSeed, enc)
	return uint16(h >> (64 - keptBits)), uint32(h)
}

// find returns the value kept in slot i for enc, nil if there is none.
func (t *keptValues) find(i uint16, enc string) any {
	if kv := t.slots[i].Load(); kv != nil && kv.enc == enc {
		return kv.v
	}
	return nil
}

// keep puts a copy of enc, whose hash has the tag, and its decoding v in slot i, if the
// slot's last encoding had the same tag and the table's bounds allow it.
func (t *keptValues) keep(i uint16, tag uint32, enc string, v any) {
	if len(enc) > maxKeptEncoding || t.seen[i].Swap(tag) != tag {
		return
	}
	if t.bytes.Load()+int64(len(enc)) > maxKeptBytes && !t.reset() {
		return
	}
	old := t.slots[i].Swap(&keptValue{enc: strings.Clone(enc), v: v})
	d := int64(len(enc))
	if old != nil {
		d -= int64(len(old.enc))
	}
	t.bytes.Add(d)
}

// reset empties t, unless another goroutine is doing so: then it returns false.
func (t *keptValues) reset() bool {
	if !t.resetting.TryLock() {
		return false
	}
	defer t.resetting.Unlock()
	for i := range t.slots {
		if old := t.slots[i].Swap(nil); old != nil {
			t.bytes.Add(-int64(len(old.enc)))
		}
	}
	return true
}
