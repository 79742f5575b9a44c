package persist

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fleetwatch/fleetwatch/persist/persisttest"
)

// TestCheckPages damages one field of the page structure at a time, each a way for
// bbolt to read beyond the file or to hand out what was not committed, and checks that
// checkPages names what is wrong.
func TestCheckPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	writeDamageSample(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := persisttest.ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPages(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("the sound file: %v", err)
	}
	ps := int64(layout.PageSize)
	branch, leaf := layout.Of(persisttest.Branch)[0].Off, layout.Of(persisttest.Leaf)[0].Off
	// A leaf with at least two plain values, not the root page of a bucket.
	for _, l := range layout.Of(persisttest.Leaf) {
		if n := binary.NativeEndian.Uint16(data[l.Off+10:]); n >= 2 && binary.NativeEndian.Uint32(data[l.Off+16:]) == 0 && l.Len == ps {
			leaf = l.Off
		}
	}
	freelist := layout.Of(persisttest.Freelist)[0].Off
	newest := int64(layout.NewestMeta) * ps
	u16 := func(off int64, v uint16) func([]byte) {
		return func(b []byte) { binary.NativeEndian.PutUint16(b[off:], v) }
	}
	u32 := func(off int64, v uint32) func([]byte) {
		return func(b []byte) { binary.NativeEndian.PutUint32(b[off:], v) }
	}
	u64 := func(off int64, v uint64) func([]byte) {
		return func(b []byte) { binary.NativeEndian.PutUint64(b[off:], v) }
	}
	// metaField sets a field of the newest meta and keeps its checksum valid.
	metaField := func(field int64, v uint64) func([]byte) {
		return func(b []byte) {
			m := b[newest+16:]
			binary.NativeEndian.PutUint64(m[field:], v)
			h := fnv.New64a()
			h.Write(m[:boltMetaChecksummed])
			binary.NativeEndian.PutUint64(m[56:], h.Sum64())
		}
	}
	freeCount := binary.NativeEndian.Uint16(data[freelist+10:])
	if freeCount == 0 || freeCount == 0xffff {
		t.Fatalf("the freelist has %d ids", freeCount)
	}
	usedPage := uint64(branch / ps)
	tests := []struct {
		name   string
		damage func([]byte)
		want   string // "" if the file is still sound
	}{
		{"child past the high-water mark", u64(branch+16+8, 1<<40), "not below the high-water mark"},
		{"child is a meta page", u64(branch+16+8, 1), "not below the high-water mark"},
		{"branch page emptied", u16(branch+10, 0), "branch page"},
		{"leaf count decreased", u16(leaf+10, binary.NativeEndian.Uint16(data[leaf+10:])-1), "is at offset"},
		{"leaf count increased", u16(leaf+10, binary.NativeEndian.Uint16(data[leaf+10:])+1), "is at offset"},
		{"leaf page emptied", u16(leaf+10, 0), "is empty"},
		{"key size grown", u32(leaf+16+8, 1<<31), "past the 4096 bytes of the page"},
		{"value size grown", u32(leaf+16+12, 1<<31), "past the 4096 bytes of the page"},
		{"overflow past the file", u32(leaf+12, 1<<30), "overflow pages go past"},
		{"page type", u16(leaf+8, 0x04), "where a branch or leaf page belongs"},
		{"page id", u64(leaf, 3), "says it is page"},
		{"element flags", u32(leaf+16, 7), "has flags"},
		// Found in the freelist, out of order, or in the tree, both used and free.
		{"a used page freed", u64(freelist+16, usedPage), "free"},
		{"a free page lost", u16(freelist+10, freeCount-1), "neither in use nor free"},
		{"freelist count past its page", u16(freelist+10, 0xfffe), "do not fit"},
		{"freelist is a leaf", u16(freelist+8, boltLeafPage), "freelist page"},
		{"no freelist", metaField(32, boltNoFreelist), "no freelist"},
		{"root past the high-water mark", metaField(16, 1<<20), "root page"},
		{"high-water mark past the file", metaField(40, uint64(len(data))/uint64(ps)+1), "truncated"},
		{"newest meta invalid: the commit before", u64(newest+16+8*5, 12345), ""},
		{"both metas invalid", func(b []byte) { b[16], b[ps+16] = 0, 0 }, "neither meta page is valid"},
		{"keys out of order", func(b []byte) {
			// The first byte of the first key of a leaf above the last one's.
			e := b[leaf+16:]
			b[leaf+16+int64(binary.NativeEndian.Uint32(e[4:]))] = 0xff
		}, "is not above the key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bytes.Clone(data)
			tt.damage(b)
			// Through plain reads, and through the map of a file (mapFile), as Open reads it.
			damaged := filepath.Join(t.TempDir(), "damaged.db")
			if err := os.WriteFile(damaged, b, 0o600); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(damaged)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			maps := countMaps(t)
			for how, r := range map[string]io.ReaderAt{"reads": bytes.NewReader(b), "file": f} {
				before, _ := maps()
				err := checkPages(r, int64(len(b)))
				// Mapped at most once (not at all if the metas fail), by every file whose
				// pages are read, and unmapped on every path.
				if mapped, unmapped := maps(); how == "file" && mapsSupported &&
					(mapped > before+1 || tt.want == "" && mapped != before+1 || unmapped != mapped) {
					t.Fatalf("%s: %d maps made and %d unmapped", how, mapped-before, unmapped-before)
				}
				switch {
				case tt.want == "":
					if err != nil {
						t.Fatalf("%s: got %v, want no error", how, err)
					}
				case err == nil || !strings.Contains(err.Error(), tt.want):
					t.Fatalf("%s: got %v, want an error saying %q", how, err, tt.want)
				}
				t.Logf("%s: %v", how, err)
			}
		})
	}
}

// TestCheckPagesFileCutShort checks that checkPages fails, and does not crash, when the
// file is shorter than the size it is given (cut short under the lock): reading a page
// of the map past the end of the file faults, and the fault is an error.
func TestCheckPagesFileCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	writeDamageSample(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := persisttest.ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := int64(layout.PageSize)
	// The root page moves to the last page of a file twice as long, which the meta's
	// high-water mark covers; the file itself stays as it is.
	pages := 2 * int64(len(data)) / ps
	m := data[int64(layout.NewestMeta)*ps+16:]
	binary.NativeEndian.PutUint64(m[16:], uint64(pages-1))
	binary.NativeEndian.PutUint64(m[40:], uint64(pages))
	h := fnv.New64a()
	h.Write(m[:boltMetaChecksummed])
	binary.NativeEndian.PutUint64(m[56:], h.Sum64())
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	maps := countMaps(t)
	err = checkPages(f, pages*ps)
	if err == nil {
		t.Fatal("a file cut short passed the check")
	}
	if mapsSupported {
		// The fault, not a bounds check: the map is as long as the size given.
		if !strings.Contains(err.Error(), "faulted") {
			t.Errorf("got %v, want the fault on the map as an error", err)
		}
		if mapped, unmapped := maps(); mapped != 1 || unmapped != 1 {
			t.Errorf("%d maps made, %d unmapped after the fault; want 1 and 1", mapped, unmapped)
		}
	}
	t.Logf("%v", err)
}

// countMaps counts the maps that checkPages makes and unmaps until the test ends: maps
// returns how many of each so far.
func countMaps(t *testing.T) (maps func() (mapped, unmapped int)) {
	var mu sync.Mutex
	var mapped, unmapped int
	t.Cleanup(func() { mapPages = mapFile })
	mapPages = func(f *os.File, size int64) ([]byte, func(), error) {
		data, unmap, err := mapFile(f, size)
		if data == nil {
			return data, unmap, err
		}
		mu.Lock()
		mapped++
		mu.Unlock()
		return data, func() {
			mu.Lock()
			unmapped++
			mu.Unlock()
			unmap()
		}, nil
	}
	return func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return mapped, unmapped
	}
}
