package persisttest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Region is a kind of place in a bbolt file.
type Region int

// The regions, in the order of Regions.
const (
	// Meta is one of the two meta pages, pages 0 and 1: the page header and the meta,
	// not the rest of the page, which bbolt does not read.
	Meta Region = iota
	// Freelist is the freelist page.
	Freelist
	// Branch is a branch page of a bucket.
	Branch
	// Leaf is a leaf page of a bucket, its element headers and keys included.
	Leaf
	// Value is a value stored in a leaf: an object, a resourceVersion, an identity.
	Value
	// Free is a free page: what the last commits left behind.
	Free
)

// Regions are all the regions.
var Regions = []Region{Meta, Freelist, Branch, Leaf, Value, Free}

func (r Region) String() string {
	return [...]string{"meta", "freelist", "branch", "leaf", "value", "free"}[r]
}

// Span is a run of bytes of one region.
type Span struct {
	Region
	Off, Len int64
}

// Layout is where the regions of a bbolt file are, as its newest valid meta page says.
type Layout struct {
	Size     int64
	PageSize int
	// NewestMeta is the page (0 or 1) of the newest valid meta page.
	NewestMeta int
	Spans      []Span
}

// Of returns the spans of a region.
func (l *Layout) Of(r Region) []Span {
	var out []Span
	for _, s := range l.Spans {
		if s.Region == r {
			out = append(out, s)
		}
	}
	return out
}

var order = binary.NativeEndian

// metaEnd is the end of the meta in a meta page.
const metaEnd = 16 + 64

// ReadLayout maps the bbolt file at path, which must be sound.
func ReadLayout(path string) (*Layout, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ps := os.Getpagesize()
	if len(data) < 2*ps {
		return nil, errors.New("too short")
	}
	l := &Layout{Size: int64(len(data)), PageSize: ps}
	meta := func(i int) (txid, root, freelist uint64) {
		m := data[i*ps+16:]
		return order.Uint64(m[48:]), order.Uint64(m[16:]), order.Uint64(m[32:])
	}
	tx0, root, freelist := meta(0)
	if tx1, r1, f1 := meta(1); tx1 > tx0 {
		l.NewestMeta, root, freelist = 1, r1, f1
	}
	l.Spans = append(l.Spans, Span{Meta, 0, metaEnd}, Span{Meta, int64(ps), metaEnd})
	page := func(id uint64) (p []byte, flags, count uint16) {
		off := int(id) * ps
		overflow := int(order.Uint32(data[off+12:]))
		return data[off : off+(1+overflow)*ps], order.Uint16(data[off+8:]), order.Uint16(data[off+10:])
	}
	p, _, count := page(freelist)
	l.Spans = append(l.Spans, Span{Freelist, int64(freelist) * int64(ps), int64(len(p))})
	ids := p[16:]
	n := int(count)
	if count == 0xffff {
		n, ids = int(order.Uint64(ids)), ids[8:]
	}
	for i := range n {
		l.Spans = append(l.Spans, Span{Free, int64(order.Uint64(ids[8*i:])) * int64(ps), int64(ps)})
	}
	var leaf func(base int64, p []byte, count uint16) error
	var tree func(id uint64) error
	leaf = func(base int64, p []byte, count uint16) error {
		for i := range int(count) {
			e := p[16+16*i:]
			flags, pos, ksize, vsize := order.Uint32(e), order.Uint32(e[4:]), order.Uint32(e[8:]), order.Uint32(e[12:])
			start := 16 + 16*i + int(pos) + int(ksize)
			value := p[start : start+int(vsize)]
			if flags == 0 {
				if vsize > 0 { // an empty value, such as an index key's, has no bytes to damage
					l.Spans = append(l.Spans, Span{Value, base + int64(start), int64(vsize)})
				}
				continue
			}
			if root := order.Uint64(value); root != 0 {
				if err := tree(root); err != nil {
					return err
				}
			} else if err := leaf(base+int64(start)+16, value[16:], order.Uint16(value[16+10:])); err != nil {
				return err
			}
		}
		return nil
	}
	tree = func(id uint64) error {
		p, flags, count := page(id)
		base := int64(id) * int64(ps)
		switch flags {
		case 0x01:
			l.Spans = append(l.Spans, Span{Branch, base, int64(len(p))})
			for i := range int(count) {
				if err := tree(order.Uint64(p[16+16*i+8:])); err != nil {
					return err
				}
			}
			return nil
		case 0x02:
			l.Spans = append(l.Spans, Span{Leaf, base, int64(len(p))})
			return leaf(base, p, count)
		}
		return fmt.Errorf("page %d: flags %#x", id, flags)
	}
	if err := tree(root); err != nil {
		return nil, err
	}
	return l, nil
}

// Damage is bytes written over a file.
type Damage struct {
	Region
	Off  int64
	Data []byte
}

func (d Damage) String() string {
	return fmt.Sprintf("%d bytes at %d (%s)", len(d.Data), d.Off, d.Region)
}

// RandomDamages draws n damages, as many in each region as the file has of it: at a
// random place of a random span of the region, of 1 byte to a few pages, random bytes,
// zeros or ones.
func RandomDamages(rng *rand.Rand, l *Layout, n int) []Damage {
	var regions []Region
	for _, r := range Regions {
		if len(l.Of(r)) > 0 {
			regions = append(regions, r)
		}
	}
	lengths := []int{1, 1, 2, 3, 4, 8, 16, 64, 512, l.PageSize, 3 * l.PageSize}
	out := make([]Damage, 0, n)
	for i := range n {
		r := regions[i%len(regions)]
		spans := l.Of(r)
		s := spans[rng.IntN(len(spans))]
		length := lengths[rng.IntN(len(lengths))]
		if r == Value && length > 64 && rng.IntN(2) == 0 {
			length = rng.IntN(64) + 1 // mostly within the value
		}
		off := s.Off + rng.Int64N(s.Len)
		length = int(min(int64(length), l.Size-off))
		data := make([]byte, length)
		switch rng.IntN(4) {
		case 0:
			// zeros
		case 1:
			for j := range data {
				data[j] = 0xff
			}
		default:
			for j := range data {
				data[j] = byte(rng.Uint32())
			}
		}
		out = append(out, Damage{Region: r, Off: off, Data: data})
	}
	return out
}

// Apply writes d over the file at path.
func Apply(path string, d Damage) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(d.Data, d.Off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteCopy writes data to a new file at path, creating its directory, with d over it if
// d is not nil: a damaged copy of a snapshot, for a test to open and load.
func WriteCopy(path string, data []byte, d *Damage) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	if d == nil {
		return nil
	}
	return Apply(path, *d)
}
