package persist

import (
	"hash/maphash"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/x448/float16"

	"github.com/fleetwatch/fleetwatch/internal/intern"
)

// The objects of a snapshot are decoded by a hand-written decoder, without reflection:
// decoding through direct.Unmarshal spent most of its time in reflect.Value.SetMapIndex
// and in allocating one string per map key. It reads the subset of CBOR that
// direct.Marshal writes for an unstructured object's map: maps with string keys, arrays,
// byte and text strings, integers that fit an int64, finite floats, booleans and null,
// all of definite length and without tags. On anything else, or on anything that
// direct.Unmarshal would reject, it gives up and the object is decoded by
// direct.Unmarshal, so that it accepts exactly what direct.Unmarshal accepts and
// returns what direct.Unmarshal returns (FuzzFastDecode checks both).
//
// It saves memory as well as time: keys and short string values are interned (package
// intern), so that the objects that one decoder reads share them.

// maxFastDepth is how deep the decoder nests maps and arrays before it hands the object
// to direct.Unmarshal. It bounds the decoder's stack; objects are never that deep.
const maxFastDepth = 256

// fastDecoder decodes stored unstructured objects. It is not safe for concurrent use;
// the loader has one per goroutine, so that its intern.Table needs no lock.
type fastDecoder struct {
	strings intern.Table
	// scratch holds the expansion of a compressed encoding (expanded) while it is
	// decoded; nothing decoded shares its memory.
	scratch []byte
	// shared, if not nil, is the maps and slices that the decoder decoded, by their
	// encoding (sharedValues): a map or slice of an object whose encoding is there is
	// not decoded again, but handed out as it was. Only the loader sets it.
	shared *sharedValues
	// kept, if not nil, is the table of Codec.DecodeShared, set for the call
	// (decodeKept).
	kept *keptValues
	// spans is the decoder's scratch space for the spans of an object's maps and
	// slices (scanSpans).
	spans []span
	// labelSets interns the labels of a partial decoding's objects (filingLabels).
	labelSets labelSets
}

// decodeMap decodes data, the CBOR of an unstructured object's map. ok is false if data
// is not in the subset the decoder reads, or is not valid; the caller then decodes it
// with direct.Unmarshal. The result shares no memory with data.
func (d *fastDecoder) decodeMap(data string) (m map[string]any, ok bool) {
	if len(data) == 0 || data[0]>>5 != cborMap {
		return nil, false
	}
	r := cborReader{data: data, strings: &d.strings}
	if d.shared != nil || d.kept != nil {
		if d.spans, ok = scanSpans(data, d.spans[:0]); ok {
			r.shared, r.kept, r.spans = d.shared, d.kept, d.spans
		}
	}
	v, ok := r.value(0)
	if !ok || r.off != len(data) {
		return nil, false
	}
	return v.(map[string]any), true
}

// CBOR major types (RFC 8949, section 3.1).
const (
	cborUint   = 0
	cborNegint = 1
	cborBytes  = 2
	cborText   = 3
	cborArray  = 4
	cborMap    = 5
	cborTag    = 6
	cborSimple = 7
)

type cborReader struct {
	data    string
	off     int
	strings *intern.Table
	// metadata is set while the root's metadata is read, and unique while the value
	// of one of its members that uniqueMetadata names is: such a string is copied,
	// not interned.
	metadata, unique bool
	// shared, if not nil, is the decoder's sharedValues, and spans the spans of the
	// object's maps and slices, in the order in which value meets them; next is the
	// index in spans of the next one.
	shared *sharedValues
	spans  []span
	next   int
	// kept, if not nil, is Codec.DecodeShared's table, which value uses as it does
	// shared (the decoder sets one of them at most).
	kept *keptValues
	// labelSets is the decoder's, for filingLabels.
	labelSets *labelSets
}

// uniqueMetadata reports whether the member key of an object's metadata is a value of
// one object only, which the decoder copies rather than interns: interned, such values
// share nothing, cost a table insert each (a third of a partial load's decoding), and
// fill the table, which keeps them until it starts over (intern.Table). The name stays
// interned, as jsondec's decoder keeps it (label values repeat it, other namespaces
// have objects of the same name).
func uniqueMetadata(key string) bool {
	return key == "uid" || key == "resourceVersion"
}

// member reads the value of the member k of a map at depth, as value does; it tells
// value whether it is in the root's metadata, or a unique member of it.
func (r *cborReader) member(depth int, k string) (any, bool) {
	switch {
	case depth == 0 && k == "metadata":
		r.metadata = true
		defer func() { r.metadata = false }()
	case depth == 1 && r.metadata && uniqueMetadata(k):
		r.unique = true
		defer func() { r.unique = false }()
	}
	return r.value(depth + 1)
}

// head reads the initial byte of a data item and its argument. ok is false for
// indefinite lengths, reserved values and truncated input. For major type 7, arg is the
// additional information's payload, and ai says what it is.
func (r *cborReader) head() (major byte, ai byte, arg uint64, ok bool) {
	if r.off >= len(r.data) {
		return 0, 0, 0, false
	}
	b := r.data[r.off]
	r.off++
	major, ai = b>>5, b&0x1f
	switch {
	case ai < 24:
		return major, ai, uint64(ai), true
	case ai == 24:
		if len(r.data)-r.off < 1 {
			return 0, 0, 0, false
		}
		arg = uint64(r.data[r.off])
		r.off++
		// A one-byte argument below 24 is not well-formed for a simple value.
		if major == cborSimple && arg < 32 {
			return 0, 0, 0, false
		}
	case ai == 25:
		if len(r.data)-r.off < 2 {
			return 0, 0, 0, false
		}
		arg = uint64(r.data[r.off])<<8 | uint64(r.data[r.off+1])
		r.off += 2
	case ai == 26:
		if len(r.data)-r.off < 4 {
			return 0, 0, 0, false
		}
		arg = r.uint(4)
		r.off += 4
	case ai == 27:
		if len(r.data)-r.off < 8 {
			return 0, 0, 0, false
		}
		arg = r.uint(8)
		r.off += 8
	default: // 28-30 reserved, 31 indefinite length or break
		return 0, 0, 0, false
	}
	return major, ai, arg, true
}

// uint reads an n-byte big-endian integer at the offset, which has n bytes left.
func (r *cborReader) uint(n int) uint64 {
	var u uint64
	for _, b := range []byte(r.data[r.off : r.off+n]) {
		u = u<<8 | uint64(b)
	}
	return u
}

// str reads the n bytes of a string.
func (r *cborReader) str(n uint64) (string, bool) {
	if n > uint64(len(r.data)-r.off) {
		return "", false
	}
	s := r.data[r.off : r.off+int(n)]
	r.off += int(n)
	return s, true
}

// key reads a map key: a byte or text string.
func (r *cborReader) key() (string, bool) {
	s, ok := r.rawKey()
	if !ok {
		return "", false
	}
	return r.strings.Key(s), true
}

func (r *cborReader) value(depth int) (any, bool) {
	start := r.off
	major, ai, arg, ok := r.head()
	if !ok {
		return nil, false
	}
	switch major {
	case cborUint:
		if arg > math.MaxInt64 {
			return nil, false
		}
		return int64(arg), true
	case cborNegint:
		if arg > math.MaxInt64 {
			return nil, false
		}
		return -1 - int64(arg), true
	case cborBytes, cborText:
		s, ok := r.str(arg)
		if !ok || (major == cborText && !utf8.ValidString(s)) {
			return nil, false
		}
		if !r.unique {
			if v, ok := r.strings.Value(s); ok {
				return v, true
			}
		}
		return strings.Clone(s), true
	case cborArray, cborMap:
		if r.shared == nil && r.kept == nil {
			return r.container(major, arg, depth)
		}
		// The spans are those of the maps and slices of data in this order (scanSpans):
		// the one of this value is next.
		if r.next >= len(r.spans) {
			return nil, false // never: scanSpans walked the same items
		}
		sp := r.spans[r.next]
		r.next++
		if depth == 0 || (depth == 1 && r.metadata) {
			// The object's own map and its metadata are its own.
			return r.container(major, arg, depth)
		}
		enc := r.data[start:sp.end]
		if r.kept != nil {
			i, tag := r.kept.slot(enc)
			if v := r.kept.find(i, enc); v != nil {
				r.off, r.next = int(sp.end), int(sp.after)
				return v, true
			}
			v, ok := r.container(major, arg, depth)
			if ok && r.off == int(sp.end) && v != nil {
				r.kept.keep(i, tag, enc, v)
			}
			return v, ok
		}
		i := r.shared.slot(enc)
		if slot := &r.shared.slots[i]; slot.v != nil && slot.enc == enc {
			r.off, r.next = int(sp.end), int(sp.after)
			return slot.v, true
		}
		v, ok := r.container(major, arg, depth)
		if ok && r.off == int(sp.end) && v != nil {
			r.shared.set(i, enc, v)
		}
		return v, ok
	case cborSimple:
		switch ai {
		case 20:
			return false, true
		case 21:
			return true, true
		case 22:
			return nil, true
		case 25:
			return finite(float64(float16.Frombits(uint16(arg)).Float32()))
		case 26:
			return finite(float64(math.Float32frombits(uint32(arg))))
		case 27:
			return finite(math.Float64frombits(arg))
		}
		return nil, false
	default: // tags
		return nil, false
	}
}

// span is where the encoding of a map or an array ends in the encoding of an object, and
// the index, in the object's spans, of the first map or array after it and what it
// holds.
type span struct{ end, after int32 }

// scanSpans appends to spans the span of each map and array of data, the encoding of an
// object, in the order of their heads, and returns them. ok is false if data is not
// well-formed CBOR of the subset that the decoder reads, as far as heads and lengths go;
// the decoder then decodes it without spans.
func scanSpans(data string, spans []span) (_ []span, ok bool) {
	if len(data) > math.MaxInt32 {
		return spans, false
	}
	r := cborReader{data: data}
	ok = r.scan(&spans, 0) && r.off == len(data)
	return spans, ok
}

// scan reads one data item, appending the spans of the maps and arrays it is or holds.
func (r *cborReader) scan(spans *[]span, depth int) bool {
	major, _, arg, ok := r.head()
	if !ok {
		return false
	}
	switch major {
	case cborBytes, cborText:
		_, ok := r.str(arg)
		return ok
	case cborArray, cborMap:
		if depth >= maxFastDepth {
			return false
		}
		items := arg
		if major == cborMap {
			if arg > uint64(len(r.data)-r.off)/2 {
				return false
			}
			items = 2 * arg
		} else if arg > uint64(len(r.data)-r.off) {
			return false
		}
		i := len(*spans)
		*spans = append(*spans, span{})
		for range items {
			if !r.scan(spans, depth+1) {
				return false
			}
		}
		(*spans)[i] = span{end: int32(r.off), after: int32(len(*spans))}
		return true
	case cborTag:
		return false
	}
	return true
}

// sharedValues are the maps and arrays that a loader's decoder decoded, each found by its
// encoding, so that the objects of a load that hold the same map or array (the spec of
// the pods of one Deployment, a container's resources, the labels of a release) hold
// one copy of it. Objects handed out are not to be mutated (docs/design.md), and these
// are no exception: a change to one would show in every object that holds it.
//
// The keys are views of the stored values being decoded, in the file's memory map: the
// loader drops the table before its read transaction ends (decodeChunks), and uses it
// only for values read in place, never for those expanded in its scratch space.
type sharedValues struct {
	// slots holds an encoding and its decoding in the slot that the encoding's hash
	// picks, the last one decoded with that slot: a cache, not a set, so that it stays
	// small and each lookup costs one hash and one comparison.
	slots [1 << sharedBits]sharedValue
	// used has the index of each slot set since the last reset, which clears those
	// only: a load of thousands of small clusters resets the table at each cluster,
	// and clearing every slot was most of its CPU.
	used []uint16
}

type sharedValue struct {
	enc string
	v   any
}

// sharedBits sets the number of slots of a sharedValues.
const sharedBits = 14

var sharedSeed = maphash.MakeSeed()

// slot returns the index of the slot of enc.
func (t *sharedValues) slot(enc string) uint16 {
	return uint16(maphash.String(sharedSeed, enc) >> (64 - sharedBits))
}

// set puts enc and its decoding v in slot i.
func (t *sharedValues) set(i uint16, enc string, v any) {
	if t.slots[i].v == nil {
		t.used = append(t.used, i)
	}
	t.slots[i] = sharedValue{enc: enc, v: v}
}

// reset empties t.
func (t *sharedValues) reset() {
	for _, i := range t.used {
		t.slots[i] = sharedValue{}
	}
	t.used = t.used[:0]
}

// container reads an array or a map, whose head the reader has read, with its argument.
func (r *cborReader) container(major byte, arg uint64, depth int) (any, bool) {
	if depth >= maxFastDepth {
		return nil, false
	}
	if major == cborArray {
		// Every element takes at least one byte: a longer array is truncated.
		if arg > uint64(len(r.data)-r.off) {
			return nil, false
		}
		a := make([]any, arg)
		for i := range a {
			var ok bool
			if a[i], ok = r.value(depth + 1); !ok {
				return nil, false
			}
		}
		return a, true
	}
	if arg > uint64(len(r.data)-r.off)/2 {
		return nil, false
	}
	m := make(map[string]any, arg)
	for range arg {
		k, ok := r.key()
		if !ok {
			return nil, false
		}
		v, ok := r.member(depth, k)
		if !ok {
			return nil, false
		}
		m[k] = v
	}
	if uint64(len(m)) != arg { // a duplicate key
		return nil, false
	}
	return m, true
}

func finite(f float64) (any, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, false
	}
	return f, true
}
