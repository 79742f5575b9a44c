//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package persist

import (
	"os"
	"strconv"
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// mapFile maps the first size bytes of f read-only, for checkPages. unmap must be called
// once the mapping is no longer read; nothing may keep a slice of it past that.
func mapFile(f *os.File, size int64) (data []byte, unmap func(), err error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, nil
	}
	data, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() { _ = syscall.Munmap(data) }, nil
}

// initialMapSize is bbolt's Options.InitialMmapSize for a file opened to write (not ro):
// 1 GiB of address space on 64-bit platforms, so that the file grows that far without a
// remap; nothing on 32-bit ones, whose address space is scarce. A read-only open maps
// the file as it is.
func initialMapSize(ro bool) int {
	if ro || strconv.IntSize < 64 {
		return 0
	}
	return 1 << 30
}

// growthStep is how far beyond what a commit needs bbolt grows a file mapped larger
// than itself (its DB.AllocSize, 16 MiB by default): each growth costs a truncate and
// an fsync, and the step stays in the file's apparent size (a hole, on the file systems
// that have them).
const growthStep = 4 << 20

// setGrowth sets db's growth step where its map is larger than the file: bbolt grows
// such a file by AllocSize beyond each commit's need, where a file mapped at its size
// grows to the next power of 2 up to AllocSize.
func setGrowth(db *bolt.DB) {
	if !db.IsReadOnly() && initialMapSize(false) > 0 {
		db.AllocSize = growthStep
	}
}
