//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package persist

import (
	"os"
	"syscall"
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
