package persist

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/s2"
)

// A Codec with Compress set keeps an encoding that S2 (github.com/klauspost/compress/s2,
// its block format) makes at least an eighth shorter as the byte formatCompressed and
// that block: the encoding of one of the other formats, compressed whole. Decoding reads
// it whatever the Codec's Compress, so a fleet or a snapshot may hold both forms; a
// build before formatCompressed takes such an object for damage (ErrCorrupt: the
// snapshot is moved aside and the fleet starts cold).
//
// Keys, defaulted fields and the texts of a ConfigMap repeat within an object, so S2
// halves most encodings (a realistic pod 4.8 KB → 2.8 KB, the bench's ConfigMaps 1.1 KB
// → 0.64 KB) at a cost of a few µs to compress and to expand them: what a fleet that
// keeps its objects encoded trades for memory (docs/benchmarks.md).
const formatCompressed byte = 5

const (
	// minCompressed is the length under which an encoding is kept as it is: S2 saves
	// little on so few bytes.
	minCompressed = 256
	// maxExpanded bounds the length that a compressed encoding may claim to expand to,
	// so that a damaged length does not allocate gigabytes: far more than an object that
	// an apiserver stores (etcd's default limit on a value is 1.5 MiB).
	maxExpanded = 64 << 20
)

// compressBuffers are the scratch space of compress, grown to the largest encoding.
var compressBuffers = sync.Pool{New: func() any { return new([]byte) }}

// compress returns enc in formatCompressed if that is at least an eighth shorter, else
// enc itself. It does not modify enc, and the result shares no memory with it unless it
// is enc.
func compress(enc []byte) []byte {
	if len(enc) < minCompressed || isCompressed(enc[0]) {
		return enc
	}
	return compressBlock(enc, compressedHead, s2.Encode)
}

// appendCompressed appends enc to dst as compress returns it, in dst's memory: the
// change log's records are made in one buffer (records.prepare).
func appendCompressed(dst, enc []byte) []byte {
	if len(enc) < minCompressed || isCompressed(enc[0]) {
		return append(dst, enc...)
	}
	n := s2.MaxEncodedLen(len(enc))
	if n < 0 {
		return append(dst, enc...)
	}
	start := len(dst)
	dst = slices.Grow(dst, 1+n)
	block := s2.Encode(dst[start+1:start+1+n], enc)
	if 1+len(block) > len(enc)-len(enc)/8 {
		return append(dst, enc...)
	}
	dst = append(dst, formatCompressed)
	return dst[:start+1+len(block)]
}

// compressedHead is what precedes the S2 block of an encoding in formatCompressed.
var compressedHead = []byte{formatCompressed}

// compressBlock returns head and then the S2 block that encode makes of enc if that is
// at least an eighth shorter than enc, else enc itself. It does not modify enc, and the
// result shares no memory with it unless it is enc.
func compressBlock(enc, head []byte, encode func(dst, src []byte) []byte) []byte {
	n := s2.MaxEncodedLen(len(enc))
	if n < 0 {
		return enc
	}
	bp := compressBuffers.Get().(*[]byte)
	defer compressBuffers.Put(bp)
	if cap(*bp) < n {
		*bp = make([]byte, n)
	}
	block := encode((*bp)[:n], enc)
	if len(head)+len(block) > len(enc)-len(enc)/8 {
		return enc
	}
	out := make([]byte, len(head)+len(block))
	copy(out, head)
	copy(out[len(head):], block)
	return out
}

// expand returns the encoding that data, an encoding in formatCompressed or formatDict,
// holds, written into dst's memory where it has room. It only reads data. An error wraps
// ErrCorrupt.
func expand(dst, data []byte) ([]byte, error) {
	src, decode := data[1:], s2.Decode
	if data[0] == formatDict {
		d, err := dictionaryOf(data)
		if err != nil {
			return nil, err
		}
		src, decode = data[1+dictIDSize:], d.s2.Decode
	}
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, fmt.Errorf("%w: compressed object: %v", ErrCorrupt, err)
	}
	if n > maxExpanded {
		return nil, fmt.Errorf("%w: compressed object claims %d bytes, more than %d", ErrCorrupt, n, maxExpanded)
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	out, err := decode(dst[:n], src)
	if err != nil {
		return nil, fmt.Errorf("%w: compressed object: %v", ErrCorrupt, err)
	}
	if len(out) == 0 || isCompressed(out[0]) {
		return nil, fmt.Errorf("%w: a compressed object holds no object in another format", ErrCorrupt)
	}
	return out, nil
}

// keepScratch is the largest scratch space that a pooled decoder keeps between calls.
const keepScratch = 1 << 20

// expanded returns data's encoding uncompressed: data itself, or if it is in
// formatCompressed or formatDict, what it holds, in d's scratch space, valid until d's
// next use.
func (d *fastDecoder) expanded(data string) (string, error) {
	if len(data) == 0 || !isCompressed(data[0]) {
		return data, nil
	}
	// s2 only reads its source: a view of data's bytes, not a copy.
	out, err := expand(d.scratch[:0], unsafe.Slice(unsafe.StringData(data), len(data)))
	if err != nil {
		return "", err
	}
	if cap(out) <= keepScratch {
		d.scratch = out
	} else {
		d.scratch = nil
	}
	return unsafe.String(unsafe.SliceData(out), len(out)), nil
}
