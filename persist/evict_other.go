//go:build !linux

package persist

import bolt "go.etcd.io/bbolt"

// evictMapped does nothing here; see evict_linux.go.
func evictMapped(*bolt.Tx) {}
