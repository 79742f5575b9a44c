package jsondec

import (
	"errors"

	"github.com/fleetwatch/fleetwatch/internal/cborenc"
)

// ObjectCBOR is Object, and also returns the CBOR (RFC 8949) of the map it returns, so
// that a caller that stores the object as CBOR need not encode it. m and err are what
// Object returns for data.
//
// cbor is nil if err is not nil, if m is nil (data is null), or if data has an object
// with a repeated key, at any depth, whose map holds only the last of its values.
// Otherwise it is d.CBORPrefix, then one CBOR data item, the map m, in a newly
// allocated slice of their exact length (or what d.Rewrite makes of them):
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
	return m, d.EncodedOf(d.enc, d.long), nil
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

// ErrRepeatedKey is returned by AppendValueCBOR for a value with an object that has a
// repeated key, which has no faithful encoding (see ObjectCBOR).
var ErrRepeatedKey = errors.New("jsondec: an object with a repeated key has no CBOR")

// AppendValueCBOR appends to dst the CBOR that ObjectCBOR writes for data, one JSON
// value, were it the value of a member of an object nested in depth maps and arrays (the
// object of Object is at depth 1): for a transcoder that writes the CBOR of an object
// whose members it has itself, but one of which is JSON (a raw extension). Nothing is
// decoded into maps. It fails, and leaves dst as it was, where decoding the object would
// fail for the value (an *Error, with an offset in data), and with ErrRepeatedKey where
// ObjectCBOR would return no CBOR. Strings are decoded as ever, and DropManagedFields
// does not apply.
func (d *Decoder) AppendValueCBOR(dst, data []byte, depth int) ([]byte, error) {
	d.start(data)
	d.emit, d.drop = true, true
	defer func() {
		d.drop = false
		d.finishCBOR()
		d.finish()
	}()
	d.space()
	if _, err := d.value(depth, ctxNone); err != nil {
		return dst, err
	}
	if err := d.end(); err != nil {
		return dst, err
	}
	if !d.emit {
		return dst, ErrRepeatedKey
	}
	return d.appendEncoded(dst), nil
}

// The CBOR major types and simple values that the Decoder writes (package cborenc).
const (
	cborBytes = cborenc.Bytes
	cborArray = cborenc.Array
	cborMap   = cborenc.Map

	cborFalse = cborenc.False
	cborTrue  = cborenc.True
	cborNull  = cborenc.Null
)

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
// it, and appendEncoded lengthens it if it must.
func (d *Decoder) startHead(major byte) int {
	d.enc = append(d.enc, major<<5)
	return len(d.enc) - 1
}

// endHead sets the length of the map or array whose head is at off.
func (d *Decoder) endHead(off, count int) {
	d.long = cborenc.EndHead(d.enc, off, count, d.long)
}

// appendEncoded appends d.enc to dst with its long heads.
func (d *Decoder) appendEncoded(dst []byte) []byte {
	return cborenc.Splice(dst, d.enc, d.long)
}

// EncodedOf returns what ObjectCBOR returns for enc, CBOR with the long heads long (see
// package cborenc), in a newly allocated slice of its exact length: d.CBORPrefix and
// the CBOR, or what d.Rewrite makes of them. It sorts long. Package pbjson writes its
// CBOR through it.
func (d *Decoder) EncodedOf(enc []byte, long []cborenc.LongHead) []byte {
	if d.Rewrite == nil {
		return cborenc.Spliced(d.CBORPrefix, enc, long)
	}
	d.rewriting = cborenc.Splice(append(d.rewriting[:0], d.CBORPrefix...), enc, long)
	defer func() {
		if cap(d.rewriting) > maxScratch {
			d.rewriting = nil
		}
	}()
	if out, ok := d.Rewrite(d.rewriting); ok {
		return out
	}
	out := make([]byte, len(d.rewriting))
	copy(out, d.rewriting)
	return out
}

// appendString appends s as a byte string.
func (d *Decoder) appendString(s string) {
	d.enc = cborenc.AppendHead(d.enc, cborBytes, uint64(len(s)))
	d.enc = append(d.enc, s...)
}

// appendNumber appends v, an int64 or a float64 returned by convertNumber.
func (d *Decoder) appendNumber(v any) {
	switch x := v.(type) {
	case int64:
		d.appendInt(x)
	case float64:
		d.enc = cborenc.AppendFloat64(d.enc, x)
	}
}

func (d *Decoder) appendInt(n int64) {
	d.enc = cborenc.AppendInt(d.enc, n)
}
