package cborenc

import (
	"bytes"
	"math"
	"testing"
)

// TestAppendHead writes heads at the bounds of each of their lengths.
func TestAppendHead(t *testing.T) {
	for _, tc := range []struct {
		major byte
		arg   uint64
		want  []byte
	}{
		{Uint, 0, []byte{0x00}},
		{Uint, 23, []byte{0x17}},
		{Uint, 24, []byte{0x18, 24}},
		{Bytes, 255, []byte{0x58, 0xff}},
		{Map, 256, []byte{0xb9, 0x01, 0x00}},
		{Array, math.MaxUint16 + 1, []byte{0x9a, 0, 1, 0, 0}},
		{Negint, math.MaxUint32 + 1, []byte{0x3b, 0, 0, 0, 1, 0, 0, 0, 0}},
	} {
		if got := AppendHead(nil, tc.major, tc.arg); !bytes.Equal(got, tc.want) {
			t.Errorf("AppendHead(%d, %d) = %x, want %x", tc.major, tc.arg, got, tc.want)
		}
		if n := headLen(tc.arg); n != len(tc.want) {
			t.Errorf("headLen(%d) = %d, want %d", tc.arg, n, len(tc.want))
		}
	}
	if got := AppendInt(nil, -1); !bytes.Equal(got, []byte{0x20}) {
		t.Errorf("AppendInt(-1) = %x", got)
	}
	if got := AppendInt(nil, math.MinInt64); !bytes.Equal(got, []byte{0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}) {
		t.Errorf("AppendInt(MinInt64) = %x", got)
	}
	if got := AppendFloat64(nil, 1.5); !bytes.Equal(got, []byte{0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("AppendFloat64(1.5) = %x", got)
	}
}

// TestSplice: an array of 30 maps, one of them of 24 members, written with one-byte
// heads, comes out with the heads it needs, appended to what dst holds.
func TestSplice(t *testing.T) {
	var enc []byte
	var long []LongHead
	outer := len(enc)
	enc = append(enc, Array<<5)
	var want []byte
	want = AppendHead(want, Array, 30)
	for i := range 30 {
		n := 0
		if i == 7 {
			n = 24
		}
		head := len(enc)
		enc = append(enc, Map<<5)
		want = AppendHead(want, Map, uint64(n))
		for k := range n {
			enc = AppendInt(enc, int64(k))
			enc = append(enc, Null)
			want = AppendInt(want, int64(k))
			want = append(want, Null)
		}
		long = EndHead(enc, head, n, long)
	}
	long = EndHead(enc, outer, 30, long)
	if got := Splice(nil, enc, long); !bytes.Equal(got, want) || cap(got) != len(got) {
		t.Errorf("Splice = %x (cap %d), want %x", got, cap(got), want)
	}
	if got := Splice([]byte("x"), enc, long); string(got) != "x"+string(want) {
		t.Errorf("Splice after x = %x", got)
	}
	if got := Spliced([]byte{3}, enc, long); string(got) != "\x03"+string(want) || cap(got) != len(got) {
		t.Errorf("Spliced after 3 = %x (cap %d)", got, cap(got))
	}
}
