// Package labelenc is the one-string form of an object's labels that a compact fleet
// keeps for each object (aggregate's compactLabels): the labels sorted by key, each key
// and value preceded by its length as a uvarint, so that any key or value can be held.
// A snapshot's partial load writes it as it reads an object's labels, while they are in
// the CPU's cache, rather than building a map that the fleet reads again later.
//
// It imports nothing of fleetwatch.
package labelenc

import (
	"encoding/binary"
	"iter"
	"slices"
	"strings"
)

// Pair is one label.
type Pair struct{ Key, Value string }

// Append appends the encoding of pairs to dst, and returns it, with ok false (and dst
// as it was) if two pairs have the same key. It sorts pairs by key.
func Append(dst []byte, pairs []Pair) (_ []byte, ok bool) {
	slices.SortFunc(pairs, func(a, b Pair) int { return strings.Compare(a.Key, b.Key) })
	n := len(dst)
	for i, p := range pairs {
		if i > 0 && pairs[i-1].Key == p.Key {
			return dst[:n], false
		}
		dst = binary.AppendUvarint(dst, uint64(len(p.Key)))
		dst = append(dst, p.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(p.Value)))
		dst = append(dst, p.Value...)
	}
	return dst, true
}

// Valid reports whether s is an encoding that Append could have returned: every length
// fits in what follows it, in its shortest form, and the keys are in strictly
// increasing order.
func Valid(s string) bool {
	var prev string
	for i := 0; len(s) > 0; i++ {
		k, rest, ok := cut(s)
		if !ok {
			return false
		}
		if i > 0 && k <= prev {
			return false
		}
		if _, s, ok = cut(rest); !ok {
			return false
		}
		prev = k
	}
	return true
}

// cut splits s into the field it starts with and what follows; ok is false if s does
// not start with a whole field whose length is in its shortest form.
func cut(s string) (field, rest string, ok bool) {
	var n uint64
	var shift uint
	for i := 0; i < len(s) && i < maxUvarintLen; i++ {
		b := s[i]
		n |= uint64(b&0x7f) << shift
		if b < 0x80 {
			if (b == 0 && i > 0) || n > uint64(len(s)-i-1) {
				return "", "", false
			}
			s = s[i+1:]
			return s[:n], s[n:], true
		}
		shift += 7
	}
	return "", "", false
}

// maxUvarintLen is the longest uvarint that cut reads: a length beyond what a string
// can hold has no field after it anyway.
const maxUvarintLen = 9

// All yields the labels of s, which Valid accepts, in the order of their keys. It
// stops at the first field that is not whole.
func All(s string) iter.Seq2[string, string] {
	return func(yield func(key, value string) bool) {
		for len(s) > 0 {
			k, rest, ok := cut(s)
			if !ok {
				return
			}
			var v string
			if v, s, ok = cut(rest); !ok || !yield(k, v) {
				return
			}
		}
	}
}
