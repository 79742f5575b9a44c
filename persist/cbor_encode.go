package persist

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// The objects of a snapshot are encoded by a hand-written encoder, without reflection:
// the snapshot writer encodes every object that changes, and direct.Marshal spent about
// 100 µs on a pod, most of it in reflection and in sorting through reflect.Value. The
// encoder writes exactly the bytes that direct.Marshal writes for an unstructured
// object's map (FuzzFastEncode and TestFastEncodeMatchesDirect hold it to that):
//
//   - Go strings, map keys included, as CBOR byte strings;
//   - integers in their shortest form;
//   - map entries sorted by their encoded keys, byte by byte, which for byte-string keys
//     is by length, then by content;
//   - nil maps and nil slices as null;
//   - definite lengths only, and no tags.
//
// Floats, rare in Kubernetes objects, are written by direct.Marshal one by one, since
// it picks the shortest of three widths. On a value of any type other than those that
// JSON and CBOR decode into (a typed value that a user transform put there), the encoder
// gives up and the whole object goes through direct.Marshal.

// cborEncoder encodes unstructured objects. It is not safe for concurrent use; its
// buffers are reused from one object to the next.
type cborEncoder struct {
	buf []byte
	// entries holds the sorted entries of the large maps being encoded, one range per
	// level.
	entries []entry
}

// appendMap appends the CBOR of m to e.buf. ok is false if m holds a value that the
// encoder does not handle, or that direct.Marshal rejects; e.buf is then undefined.
func (e *cborEncoder) appendMap(m map[string]any) (ok bool) {
	if m == nil {
		e.buf = append(e.buf, cborNull)
		return true
	}
	e.head(cborMap, uint64(len(m)))
	// The entries of a small map are sorted on the stack, where storing them costs no
	// write barrier; those of a larger one in e.entries, after the entries of the maps
	// that enclose it, which stay readable through their own slices even if e.entries
	// grows into a new array.
	var small [16]entry
	var entries []entry
	start := len(e.entries)
	if len(m) <= len(small) {
		entries = small[:0]
		for k, v := range m {
			entries = append(entries, entry{k, v})
		}
	} else {
		for k, v := range m {
			e.entries = append(e.entries, entry{k, v})
		}
		entries = e.entries[start:]
	}
	slices.SortFunc(entries, compareEntries)
	for _, en := range entries {
		e.str(en.key)
		if !e.appendValue(en.value) {
			return false
		}
	}
	clear(e.entries[start:])
	e.entries = e.entries[:start]
	return true
}

// entry is a map entry.
type entry struct {
	key   string
	value any
}

// compareEntries orders map entries as their encoded keys sort byte by byte: by length,
// then by content.
func compareEntries(a, b entry) int {
	if c := cmp.Compare(len(a.key), len(b.key)); c != 0 {
		return c
	}
	return cmp.Compare(a.key, b.key)
}
func (e *cborEncoder) appendValue(v any) bool {
	switch x := v.(type) {
	case nil:
		e.buf = append(e.buf, cborNull)
	case string:
		e.str(x)
	case int64:
		if x < 0 {
			e.head(cborNegint, uint64(-1-x))
		} else {
			e.head(cborUint, uint64(x))
		}
	case bool:
		if x {
			e.buf = append(e.buf, cborTrue)
		} else {
			e.buf = append(e.buf, cborFalse)
		}
	case float64:
		data, err := direct.Marshal(x)
		if err != nil {
			return false
		}
		e.buf = append(e.buf, data...)
	case map[string]any:
		return e.appendMap(x)
	case []any:
		if x == nil {
			e.buf = append(e.buf, cborNull)
			return true
		}
		e.head(cborArray, uint64(len(x)))
		for _, item := range x {
			if !e.appendValue(item) {
				return false
			}
		}
	default:
		return false
	}
	return true
}

// Simple values (RFC 8949, section 3.3).
const (
	cborFalse = 0xf4
	cborTrue  = 0xf5
	cborNull  = 0xf6
)

// str appends s as a byte string, as direct.Marshal writes Go strings.
func (e *cborEncoder) str(s string) {
	e.head(cborBytes, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// head appends the initial byte of a data item and its argument, in the shortest form.
func (e *cborEncoder) head(major byte, arg uint64) {
	m := major << 5
	switch {
	case arg < 24:
		e.buf = append(e.buf, m|byte(arg))
	case arg <= 0xff:
		e.buf = append(e.buf, m|24, byte(arg))
	case arg <= 0xffff:
		e.buf = append(e.buf, m|25, byte(arg>>8), byte(arg))
	case arg <= 0xffffffff:
		e.buf = append(e.buf, m|26, byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	default:
		e.buf = append(e.buf, m|27, byte(arg>>56), byte(arg>>48), byte(arg>>40), byte(arg>>32),
			byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	}
}
