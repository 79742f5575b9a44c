package persist

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"runtime/debug"
)

// bbolt trusts its file: it follows page ids and element offsets through its memory map
// without checking them against anything. A page id past the end of the file, or an
// offset or a length that points out of its page, is read from memory beyond the file
// (SIGBUS) or beyond the map (SIGSEGV, or another mapping of the process), or makes a
// key of gigabytes that the walk copies. Faults are not panics, and an allocation beyond
// the memory of the machine is fatal too: none of these can be recovered from.
//
// So Open checks the page structure of an existing file before bbolt reads any of it:
// checkPages reads the file with plain reads, every access bounds-checked, and accepts
// only what bbolt itself writes. Everything bbolt may follow then stays in the file:
//
//   - the meta page that bbolt will use (it picks it as bbolt does: the valid one with the
//     higher transaction id), its high-water mark within the file, and its root and
//     freelist pages below it;
//   - the freelist: a freelist page whose ids are sorted, distinct and below the mark
//     (a file without one, written with NoFreelistSync, which fleetwatch never sets, is
//     refused: bbolt would rebuild it in a goroutine of its own);
//   - every page reachable from the root, its buckets' pages included: its id in its
//     header, its overflow below the mark, a branch or leaf type, elements packed one
//     after the other from the end of the element headers, as bbolt writes them (so that
//     a changed count, offset or size does not go unnoticed), keys non-empty and in
//     order, bucket values of the form bbolt writes, inline buckets that fit their value;
//   - no leaf page without elements but the database's root: the check of the packing
//     starts at the first element, so a count of 0 would hide a page's elements from
//     it, from bbolt and from the seals alike (each covers its own value and key, not
//     the set of keys). bbolt never writes such a page: it removes a node it empties,
//     and writes a bucket it empties inline. The root of a file that bbolt created and
//     no migration filled is one. Emptied in a file that holds a cluster, the root
//     leaves pages neither in use nor free (a bucket that holds a bucket, as the
//     clusters bucket then does, is never inline); in one that holds none, it loads what
//     was stored: no cluster;
//   - every page below the mark is either reachable, once, or free, never both: what a
//     later commit allocates from the freelist is not in use.
//
// It reads each page once, through a read-only map of the file of its own (mapFile;
// plain reads where there is none), which Load does too, so a warm start reads the file
// twice, the second time from the page cache: BenchmarkCheckPages took 54 ms for a file of
// 94 MiB whose Load took 620 ms.

// The layout of a bbolt file (go.etcd.io/bbolt/internal/common), in the byte order of
// the machine that wrote it, which is this one's.
const (
	boltPageHeaderSize   = 16 // id uint64, flags uint16, count uint16, overflow uint32
	boltElementSize      = 16 // branch: pos, ksize uint32, pgid uint64; leaf: flags, pos, ksize, vsize uint32
	boltBucketHeaderSize = 16 // root pgid uint64, sequence uint64
	boltMetaSize         = 64 // magic, version, pageSize, flags uint32; root bucket; freelist, pgid, txid, checksum uint64
	boltMetaChecksummed  = 56 // the checksum covers the meta up to itself

	boltMagic   = 0xED0CDAED
	boltVersion = 2

	boltBranchPage   = 0x01
	boltLeafPage     = 0x02
	boltFreelistPage = 0x10
	boltBucketLeaf   = 0x01

	// boltNoFreelist is the freelist page id of a file written with NoFreelistSync, whose
	// freelist bbolt rebuilds by walking the file in a goroutine of its own.
	boltNoFreelist = ^uint64(0)

	// Page sizes that checkPages accepts, bounds of its buffers.
	minBoltPageSize = 1 << 10
	maxBoltPageSize = 1 << 16
)

var boltOrder = binary.NativeEndian

// boltMeta is a parsed meta page.
type boltMeta struct {
	valid                     bool
	pageSize                  uint32
	root, freelist, hwm, txid uint64
}

// parseMeta parses the meta in the page at the start of b, which has at least
// boltPageHeaderSize+boltMetaSize bytes.
func parseMeta(b []byte) boltMeta {
	m := b[boltPageHeaderSize : boltPageHeaderSize+boltMetaSize]
	h := fnv.New64a()
	h.Write(m[:boltMetaChecksummed])
	return boltMeta{
		valid: boltOrder.Uint32(m[0:]) == boltMagic && boltOrder.Uint32(m[4:]) == boltVersion &&
			boltOrder.Uint64(m[56:]) == h.Sum64(),
		pageSize: boltOrder.Uint32(m[8:]),
		root:     boltOrder.Uint64(m[16:]),
		freelist: boltOrder.Uint64(m[32:]),
		hwm:      boltOrder.Uint64(m[40:]),
		txid:     boltOrder.Uint64(m[48:]),
	}
}

// checkPages checks the page structure of the bbolt file f, of the given size, as the
// comment above says. f is locked, so that nothing writes it meanwhile. The error says
// what is wrong; the caller wraps it in ErrCorrupt.
func checkPages(f io.ReaderAt, size int64) (err error) {
	pageSize, err := boltPageSize(f, size)
	if err != nil {
		return err
	}
	if size < 2*int64(pageSize) {
		return fmt.Errorf("the file (%d bytes) is shorter than its two meta pages", size)
	}
	metas := make([]byte, 2*pageSize)
	if _, err := f.ReadAt(metas, 0); err != nil {
		return fmt.Errorf("reading the meta pages: %w", err)
	}
	m0, m1 := parseMeta(metas), parseMeta(metas[pageSize:])
	// bbolt's DB.meta: the one with the higher transaction id, if it is valid.
	m, other := m0, m1
	if m1.txid > m0.txid {
		m, other = m1, m0
	}
	if !m.valid {
		m = other
	}
	switch {
	case !m.valid:
		return errors.New("neither meta page is valid")
	case m.pageSize != uint32(pageSize):
		return fmt.Errorf("the meta page says pages are %d bytes, bbolt reads them as %d", m.pageSize, pageSize)
	case m.hwm > uint64(size)/uint64(pageSize):
		return fmt.Errorf("the file is truncated: %d bytes, the database needs %d pages of %d", size, m.hwm, pageSize)
	case m.freelist == boltNoFreelist:
		return errors.New("the file has no freelist")
	case m.freelist < 2 || m.freelist >= m.hwm:
		return fmt.Errorf("the freelist page %d is not below the high-water mark %d", m.freelist, m.hwm)
	case m.root < 2 || m.root >= m.hwm:
		return fmt.Errorf("the root page %d is not below the high-water mark %d", m.root, m.hwm)
	}
	c := &pageChecker{f: f, pageSize: pageSize, hwm: m.hwm, root: m.root, used: newBitset(m.hwm), free: newBitset(m.hwm)}
	// A file is read through a read-only map of its own rather than a read and an
	// allocation per page: the pages are then read from the page cache, where bbolt's map
	// and Load find them again. Every access is still bounds-checked against the file's
	// size, and the file is locked; a fault on the map (a file cut short under the lock)
	// becomes an error, not a crash.
	if file, ok := f.(*os.File); ok {
		if data, unmap, mapErr := mapPages(file, size); mapErr == nil && data != nil {
			defer unmap()
			c.data = data
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			defer func() {
				// Only a fault on the map is an error; any other panic is a bug, and goes
				// on (after the map is gone).
				if r := recover(); r != nil {
					fault, ok := r.(interface{ Addr() uintptr })
					if !ok {
						panic(r)
					}
					err = fmt.Errorf("reading the file's pages faulted at %#x: %v", fault.Addr(), r)
				}
			}()
		}
	}
	c.used.set(0)
	c.used.set(1)
	if err := c.checkFreelist(m.freelist); err != nil {
		return err
	}
	if err := c.checkTree(m.root, nil, nil); err != nil {
		return err
	}
	for id := uint64(2); id < m.hwm; id++ {
		if !c.used.has(id) && !c.free.has(id) {
			return fmt.Errorf("page %d is neither in use nor free", id)
		}
	}
	return nil
}

// boltPageSize returns the page size that bbolt's Open will use for the file: that of
// the first meta page if it is valid, else that of a valid second meta page at one of
// the offsets bbolt tries, else the default if a meta page could at least be read.
func boltPageSize(f io.ReaderAt, size int64) (int, error) {
	var buf [0x1000]byte
	readable := false
	if n, err := f.ReadAt(buf[:], 0); err == nil && n == len(buf) {
		readable = true
		if m := parseMeta(buf[:]); m.valid {
			return checkedPageSize(m.pageSize)
		}
	}
	for i := range 15 {
		pos := int64(1024) << i
		if pos >= size-1024 {
			break
		}
		clear(buf[:])
		n, err := f.ReadAt(buf[:], pos)
		if (err == nil && n == len(buf)) || (errors.Is(err, io.EOF) && int64(n) == size-pos) {
			readable = true
			if m := parseMeta(buf[:]); m.valid {
				return checkedPageSize(m.pageSize)
			}
		}
	}
	if readable {
		return checkedPageSize(uint32(os.Getpagesize()))
	}
	return 0, errors.New("no meta page can be read")
}

func checkedPageSize(n uint32) (int, error) {
	if n < minBoltPageSize || n > maxBoltPageSize || n&(n-1) != 0 {
		return 0, fmt.Errorf("page size %d", n)
	}
	return int(n), nil
}

// mapPages is mapFile; tests replace it to see that every map is unmapped.
var mapPages = mapFile

// pageChecker walks the pages of a file for checkPages.
type pageChecker struct {
	f io.ReaderAt
	// data is the file mapped in memory, or nil: then pages are read from f.
	data     []byte
	pageSize int
	// hwm is the high-water mark: the pages of the database are [0, hwm).
	hwm uint64
	// root is the root page of the database, the one leaf page that may be empty.
	root uint64
	// used are the pages reachable from the meta, free those of the freelist.
	used, free bitset
}

// page reads page id, with its overflow pages, and marks them used.
func (c *pageChecker) page(id uint64) (p []byte, flags, count uint16, err error) {
	if id < 2 || id >= c.hwm {
		return nil, 0, 0, fmt.Errorf("page id %d is not below the high-water mark %d", id, c.hwm)
	}
	off := int64(id) * int64(c.pageSize)
	if c.data != nil {
		if off+int64(c.pageSize) > int64(len(c.data)) {
			return nil, 0, 0, fmt.Errorf("reading page %d: %w", id, io.ErrUnexpectedEOF)
		}
		p = c.data[off : off+int64(c.pageSize) : off+int64(c.pageSize)]
	} else {
		p = make([]byte, c.pageSize)
		if _, err := c.f.ReadAt(p, off); err != nil {
			return nil, 0, 0, fmt.Errorf("reading page %d: %w", id, err)
		}
	}
	flags, count = boltOrder.Uint16(p[8:]), boltOrder.Uint16(p[10:])
	overflow := uint64(boltOrder.Uint32(p[12:]))
	if got := boltOrder.Uint64(p[0:]); got != id {
		return nil, 0, 0, fmt.Errorf("page %d says it is page %d", id, got)
	}
	if overflow >= c.hwm-id {
		return nil, 0, 0, fmt.Errorf("page %d: %d overflow pages go past the high-water mark %d", id, overflow, c.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		switch {
		case c.used.has(i):
			return nil, 0, 0, fmt.Errorf("page %d is referenced twice", i)
		case c.free.has(i):
			return nil, 0, 0, fmt.Errorf("page %d is both in use and free", i)
		}
		c.used.set(i)
	}
	if overflow > 0 && c.data != nil {
		end := off + int64(overflow+1)*int64(c.pageSize)
		if end > int64(len(c.data)) {
			return nil, 0, 0, fmt.Errorf("reading page %d: %w", id, io.ErrUnexpectedEOF)
		}
		p = c.data[off:end:end]
	} else if overflow > 0 {
		p = append(p, make([]byte, int(overflow)*c.pageSize)...)
		if _, err := c.f.ReadAt(p[c.pageSize:], int64(id+1)*int64(c.pageSize)); err != nil {
			return nil, 0, 0, fmt.Errorf("reading page %d: %w", id, err)
		}
	}
	return p, flags, count, nil
}

// checkFreelist checks the freelist page and marks its ids free.
func (c *pageChecker) checkFreelist(id uint64) error {
	p, flags, count, err := c.page(id)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if flags != boltFreelistPage {
		return fmt.Errorf("freelist page %d has flags %#x", id, flags)
	}
	ids := p[boltPageHeaderSize:]
	n := uint64(count)
	if count == 0xffff { // the count is the first id
		if len(ids) < 8 {
			return fmt.Errorf("freelist page %d: no room for its count", id)
		}
		n, ids = boltOrder.Uint64(ids), ids[8:]
	}
	if n > uint64(len(ids)/8) {
		return fmt.Errorf("freelist page %d: %d ids do not fit in %d bytes", id, n, len(ids))
	}
	prev := uint64(1)
	for i := range n {
		free := boltOrder.Uint64(ids[8*i:])
		if free <= prev || free >= c.hwm {
			return fmt.Errorf("freelist page %d: id %d after %d, high-water mark %d", id, free, prev, c.hwm)
		}
		if c.used.has(free) {
			return fmt.Errorf("page %d is both in use and free", free)
		}
		c.free.set(free)
		prev = free
	}
	return nil
}

// checkTree checks the page id of a bucket and the pages under it, whose keys are in
// [lo, hi) (nil: unbounded).
func (c *pageChecker) checkTree(id uint64, lo, hi []byte) error {
	p, flags, count, err := c.page(id)
	if err != nil {
		return err
	}
	switch flags {
	case boltBranchPage:
		if count == 0 {
			return fmt.Errorf("branch page %d is empty", id)
		}
		type child struct {
			id  uint64
			key []byte
		}
		children := make([]child, 0, count)
		_, err := forEachElement(p, count, false, func(key, _ []byte, _ uint32, pgid uint64) error {
			children = append(children, child{pgid, key})
			return nil
		})
		if err != nil {
			return fmt.Errorf("branch page %d: %w", id, err)
		}
		for i, ch := range children {
			if err := checkKeyOrder(ch.key, i, lo, hi, children[max(i-1, 0)].key); err != nil {
				return fmt.Errorf("branch page %d: %w", id, err)
			}
		}
		for i, ch := range children {
			next := hi
			if i+1 < len(children) {
				next = children[i+1].key
			}
			if err := c.checkTree(ch.id, ch.key, next); err != nil {
				return err
			}
		}
		return nil
	case boltLeafPage:
		if count == 0 && id != c.root {
			return fmt.Errorf("leaf page %d is empty", id)
		}
		if err := c.checkLeaf(p, count, lo, hi, true); err != nil {
			return fmt.Errorf("leaf page %d: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("page %d has flags %#x where a branch or leaf page belongs", id, flags)
}

// checkLeaf checks the elements of a leaf page p, its own or a bucket's inline page, and
// the buckets they hold. An inline page (nested false) holds no buckets, and ends where
// its last element does.
func (c *pageChecker) checkLeaf(p []byte, count uint16, lo, hi []byte, nested bool) error {
	var prev []byte
	i := 0
	end, err := forEachElement(p, count, true, func(key, value []byte, flags uint32, _ uint64) error {
		if err := checkKeyOrder(key, i, lo, hi, prev); err != nil {
			return err
		}
		prev = key
		i++
		switch {
		case flags == 0:
			return nil
		case flags != boltBucketLeaf:
			return fmt.Errorf("key %q has flags %#x", key, flags)
		case !nested:
			return fmt.Errorf("bucket %q is in an inline bucket", key)
		case len(value) < boltBucketHeaderSize:
			return fmt.Errorf("bucket %q: a value of %d bytes", key, len(value))
		}
		root := boltOrder.Uint64(value)
		if root != 0 {
			if len(value) != boltBucketHeaderSize {
				return fmt.Errorf("bucket %q: a value of %d bytes", key, len(value))
			}
			if err := c.checkTree(root, nil, nil); err != nil {
				return fmt.Errorf("bucket %q: %w", key, err)
			}
			return nil
		}
		inline := value[boltBucketHeaderSize:]
		if len(inline) < boltPageHeaderSize {
			return fmt.Errorf("inline bucket %q: %d bytes", key, len(inline))
		}
		if flags := boltOrder.Uint16(inline[8:]); flags != boltLeafPage || boltOrder.Uint32(inline[12:]) != 0 {
			return fmt.Errorf("inline bucket %q: page flags %#x", key, flags)
		}
		if err := c.checkLeaf(inline, boltOrder.Uint16(inline[10:]), nil, nil, false); err != nil {
			return fmt.Errorf("inline bucket %q: %w", key, err)
		}
		return nil
	})
	if err == nil && !nested && end != len(p) {
		err = fmt.Errorf("%d bytes after the last element", len(p)-end)
	}
	return err
}

// checkKeyOrder checks the key of element i of a page, which must be above the key of
// the element before it (prev), at least lo for the first, and below hi.
func checkKeyOrder(key []byte, i int, lo, hi, prev []byte) error {
	switch {
	case i == 0 && lo != nil && bytes.Compare(key, lo) < 0:
		return fmt.Errorf("key %q is below the key %q of its parent", key, lo)
	case i > 0 && bytes.Compare(key, prev) <= 0:
		return fmt.Errorf("key %q is not above the key %q before it", key, prev)
	case hi != nil && bytes.Compare(key, hi) >= 0:
		return fmt.Errorf("key %q is not below the next key %q of its parent", key, hi)
	}
	return nil
}

// forEachElement calls fn for each of the count elements of the branch or leaf page p,
// after checking that each lies in p, packed right after the one before it, from the
// end of the element headers, as bbolt writes them. fn gets the flags and value of a
// leaf element, the child page of a branch element. It returns where the last element
// ends.
func forEachElement(p []byte, count uint16, leaf bool, fn func(key, value []byte, flags uint32, pgid uint64) error) (int, error) {
	next := boltPageHeaderSize + int(count)*boltElementSize
	if next > len(p) {
		return 0, fmt.Errorf("%d elements do not fit in %d bytes", count, len(p))
	}
	for i := range int(count) {
		e := p[boltPageHeaderSize+i*boltElementSize:]
		var flags, pos, ksize, vsize uint32
		var pgid uint64
		if leaf {
			flags, pos, ksize, vsize = boltOrder.Uint32(e), boltOrder.Uint32(e[4:]), boltOrder.Uint32(e[8:]), boltOrder.Uint32(e[12:])
		} else {
			pos, ksize, pgid = boltOrder.Uint32(e), boltOrder.Uint32(e[4:]), boltOrder.Uint64(e[8:])
		}
		start := int64(boltPageHeaderSize+i*boltElementSize) + int64(pos)
		end := start + int64(ksize) + int64(vsize)
		switch {
		case start != int64(next):
			return 0, fmt.Errorf("element %d is at offset %d, not %d", i, start, next)
		case ksize == 0:
			return 0, fmt.Errorf("element %d has an empty key", i)
		case end > int64(len(p)):
			return 0, fmt.Errorf("element %d ends at %d, past the %d bytes of the page", i, end, len(p))
		}
		if err := fn(p[start:start+int64(ksize)], p[start+int64(ksize):end], flags, pgid); err != nil {
			return 0, err
		}
		next = int(end)
	}
	return next, nil
}

// bitset is a set of page ids below a bound.
type bitset []uint64

func newBitset(n uint64) bitset    { return make(bitset, (n+63)/64) }
func (b bitset) set(i uint64)      { b[i/64] |= 1 << (i % 64) }
func (b bitset) has(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }
