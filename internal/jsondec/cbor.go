package jsondec

import (
	"cmp"
	"math"
	"slices"
)

// ObjectCBOR is Object, and also returns the CBOR (RFC 8949) of the map it returns, so
// that a caller that stores the object as CBOR need not encode it. m and err are what
// Object returns for data.
//
// cbor is nil if err is not nil, if m is nil (data is null), or if data has an object
// with a repeated key, at any depth, whose map holds only the last of its values.
// Otherwise it is d.CBORPrefix, then one CBOR data item, the map m, in a newly
// allocated slice of their exact length:
//
//   - maps as maps (major type 5), their entries in the order of the members of the
//     JSON objects, without the members that the Decoder leaves out
//     (DropManagedFields);
//   - map keys and strings as byte strings (major type 2) of their decoded bytes;
//   - an int64 as an integer (major type 0 or 1), a float64 as a double-precision
//     float (0xfb and the 8 bytes of the IEEE 754 value, big-endian);
//   - arrays as arrays (major type 4); true, false and null as the simple values
//     0xf5, 0xf4 and 0xf6.
//
// Every length is definite and every head in its shortest form; there are no tags and
// no text strings. These are the bytes that direct.Marshal, from
// k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct, writes for m, except that
// map keys are not sorted and floats are always eight bytes wide; direct.Unmarshal
// decodes them into a map[string]any equal to m. cbor shares no memory with data or
// with the Decoder.
//
// On a realistic pod, ObjectCBOR takes 10-20% longer than Object (BenchmarkObject);
// Object itself does not pay for it.
func (d *Decoder) ObjectCBOR(data []byte) (m map[string]any, cbor []byte, err error) {
	d.emit = true
	defer d.finishCBOR()
	if m, err = d.Object(data); err != nil || m == nil || !d.emit {
		return m, nil, err
	}
	return m, d.encoded(), nil
}

// ObjectPartialCBOR is ObjectCBOR for a caller that keeps the CBOR and, of the map, only
// what files the object: cbor and err are what ObjectCBOR returns for data, but m holds
// only apiVersion, kind and metadata, and in metadata only name, namespace, uid,
// resourceVersion and labels (those that data has; their values as ObjectCBOR's m has
// them). The rest is decoded and checked as ObjectCBOR does, and written as CBOR, but no
// map, slice or string is built for it. If cbor is nil, m is ObjectCBOR's whole map.
func (d *Decoder) ObjectPartialCBOR(data []byte) (m map[string]any, cbor []byte, err error) {
	d.partial = true
	m, cbor, err = d.ObjectCBOR(data)
	d.partial, d.drop = false, false
	clear(d.hashes)
	d.hashes = d.hashes[:0]
	if cap(d.hashes) > maxScratch {
		d.hashes = nil
	}
	if err != nil || m == nil || cbor != nil {
		return m, cbor, err
	}
	// A repeated key: the object has no faithful encoding, and the caller needs it whole.
	m, err = d.Object(data)
	return m, nil, err
}

// CBOR major types (RFC 8949, section 3.1), and the simple values and the prefix of a
// double-precision float (section 3.3).
const (
	cborUint   = 0
	cborNegint = 1
	cborBytes  = 2
	cborArray  = 4
	cborMap    = 5

	cborFalse   = 0xf4
	cborTrue    = 0xf5
	cborNull    = 0xf6
	cborFloat64 = 0xfb
)

// longHead is a map or array of d.enc whose head takes more than the one byte reserved
// for it: its length is count.
type longHead struct {
	off   int
	count int
}

// finishCBOR stops the writing of CBOR, and forgets what was written.
func (d *Decoder) finishCBOR() {
	d.emit = false
	d.enc, d.long = d.enc[:0], d.long[:0]
	if cap(d.enc) > maxScratch {
		d.enc = nil
	}
	if cap(d.long) > maxScratch {
		d.long = nil
	}
}

// startHead appends the head of a map or an array, whose length is not known yet, and
// returns its offset in d.enc. While decoding, a head takes one byte: endHead completes
// it, and encoded lengthens it if it must.
func (d *Decoder) startHead(major byte) int {
	d.enc = append(d.enc, major<<5)
	return len(d.enc) - 1
}

// endHead sets the length of the map or array whose head is at off.
func (d *Decoder) endHead(off, count int) {
	if count < 24 {
		d.enc[off] |= byte(count)
		return
	}
	d.long = append(d.long, longHead{off: off, count: count})
}

// encoded returns a copy of d.enc with its long heads.
func (d *Decoder) encoded() []byte {
	n := len(d.enc)
	for _, h := range d.long {
		n += headLen(uint64(h.count)) - 1
	}
	// The heads were listed as their maps and arrays ended, which is not the order of
	// their offsets.
	slices.SortFunc(d.long, func(a, b longHead) int { return cmp.Compare(a.off, b.off) })
	b := make([]byte, 0, len(d.CBORPrefix)+n)
	b = append(b, d.CBORPrefix...)
	prev := 0
	for _, h := range d.long {
		b = append(b, d.enc[prev:h.off]...)
		b = appendHead(b, d.enc[h.off]>>5, uint64(h.count))
		prev = h.off + 1
	}
	return append(b, d.enc[prev:]...)
}

// appendString appends s as a byte string.
func (d *Decoder) appendString(s string) {
	d.enc = appendHead(d.enc, cborBytes, uint64(len(s)))
	d.enc = append(d.enc, s...)
}

// appendNumber appends v, an int64 or a float64 returned by convertNumber.
func (d *Decoder) appendNumber(v any) {
	switch x := v.(type) {
	case int64:
		d.appendInt(x)
	case float64:
		u := math.Float64bits(x)
		d.enc = append(d.enc, cborFloat64, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32),
			byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
	}
}

func (d *Decoder) appendInt(n int64) {
	if n < 0 {
		d.enc = appendHead(d.enc, cborNegint, uint64(-1-n))
	} else {
		d.enc = appendHead(d.enc, cborUint, uint64(n))
	}
}

// appendHead appends the initial byte of a data item of major type major, and its
// argument arg, in the shortest form.
func appendHead(b []byte, major byte, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return append(b, m|byte(arg))
	case arg <= math.MaxUint8:
		return append(b, m|24, byte(arg))
	case arg <= math.MaxUint16:
		return append(b, m|25, byte(arg>>8), byte(arg))
	case arg <= math.MaxUint32:
		return append(b, m|26, byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	default:
		return append(b, m|27, byte(arg>>56), byte(arg>>48), byte(arg>>40), byte(arg>>32),
			byte(arg>>24), byte(arg>>16), byte(arg>>8), byte(arg))
	}
}

// headLen is the length of a head whose argument is arg.
func headLen(arg uint64) int {
	switch {
	case arg < 24:
		return 1
	case arg <= math.MaxUint8:
		return 2
	case arg <= math.MaxUint16:
		return 3
	case arg <= math.MaxUint32:
		return 5
	default:
		return 9
	}
}
