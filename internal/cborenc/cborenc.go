package cborenc

import (
	"cmp"
	"math"
	"slices"
)

// Major types (RFC 8949, section 3.1), and the simple values and the prefix of a
// double-precision float (section 3.3).
const (
	Uint   = 0
	Negint = 1
	Bytes  = 2
	Array  = 4
	Map    = 5

	False   = 0xf4
	True    = 0xf5
	Null    = 0xf6
	Float64 = 0xfb
)

// AppendHead appends the initial byte of a data item of major type major, and its
// argument arg, in the shortest form.
func AppendHead(b []byte, major byte, arg uint64) []byte {
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

// AppendInt appends n as an integer (major type 0 or 1).
func AppendInt(b []byte, n int64) []byte {
	if n < 0 {
		return AppendHead(b, Negint, uint64(-1-n))
	}
	return AppendHead(b, Uint, uint64(n))
}

// AppendFloat64 appends f as a double-precision float, whatever its value.
func AppendFloat64(b []byte, f float64) []byte {
	u := math.Float64bits(f)
	return append(b, Float64, byte(u>>56), byte(u>>48), byte(u>>40), byte(u>>32),
		byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
}

// LongHead is a map or an array whose head was written in one byte, at Off, while its
// length was unknown, and whose length, Count, needs a longer one.
type LongHead struct {
	Off, Count int
}

// EndHead sets the length of the map or array whose one-byte head is at off in b: in the
// head if it fits, else by appending it to long, which it returns.
func EndHead(b []byte, off, count int, long []LongHead) []LongHead {
	if count < 24 {
		b[off] |= byte(count)
		return long
	}
	return append(long, LongHead{Off: off, Count: count})
}

// Splice appends enc to dst with the heads of long lengthened; to a nil dst, in a newly
// allocated slice of its exact length. It sorts long.
func Splice(dst, enc []byte, long []LongHead) []byte {
	n := splicedLen(enc, long)
	if dst == nil {
		dst = make([]byte, 0, n)
	} else {
		dst = slices.Grow(dst, n)
	}
	return splice(dst, enc, long)
}

// Spliced returns prefix, then enc with the heads of long lengthened, in a newly
// allocated slice of their exact length. It sorts long.
func Spliced(prefix, enc []byte, long []LongHead) []byte {
	dst := make([]byte, 0, len(prefix)+splicedLen(enc, long))
	return splice(append(dst, prefix...), enc, long)
}

// splicedLen is the length of enc with the heads of long lengthened.
func splicedLen(enc []byte, long []LongHead) int {
	n := len(enc)
	for _, h := range long {
		n += headLen(uint64(h.Count)) - 1
	}
	return n
}

func splice(dst, enc []byte, long []LongHead) []byte {
	// The heads are listed as their maps and arrays end, which is not the order of their
	// offsets.
	slices.SortFunc(long, func(a, b LongHead) int { return cmp.Compare(a.Off, b.Off) })
	prev := 0
	for _, h := range long {
		dst = append(dst, enc[prev:h.Off]...)
		dst = AppendHead(dst, enc[h.Off]>>5, uint64(h.Count))
		prev = h.Off + 1
	}
	return append(dst, enc[prev:]...)
}
