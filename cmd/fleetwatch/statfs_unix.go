//go:build unix

package main

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// filesystemBytes returns the size of the filesystem that holds path's directory, 0 if
// it cannot be told.
func filesystemBytes(path string) uint64 {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return 0
	}
	return uint64(st.Blocks) * uint64(st.Bsize)
}
