package persist

import (
	"syscall"

	bolt "go.etcd.io/bbolt"
)

// evictMapped drops the pages of tx's file that the process has read through bbolt's
// memory map from its resident memory (madvise MADV_DONTNEED): the map is read-only and
// shared, so the pages stay in the page cache, and a later read maps them again. A load
// reads the whole file through the map, which would otherwise count in the process's
// RSS for as long as the file is open, as much as the file's size.
func evictMapped(tx *bolt.Tx) {
	db := tx.DB()
	size := tx.Size()
	if size <= 0 {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, db.Info().Data, uintptr(size), syscall.MADV_DONTNEED)
}
