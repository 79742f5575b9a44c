//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package persist

import (
	"os"

	bolt "go.etcd.io/bbolt"
)

// mapFile maps nothing here: checkPages reads the file's pages with ReadAt.
func mapFile(*os.File, int64) ([]byte, func(), error) { return nil, nil, nil }

// initialMapSize is bbolt's Options.InitialMmapSize: none where bbolt's map may grow the
// file to its size (Windows) or the platform's map is not known.
func initialMapSize(bool) int { return 0 }

// setGrowth leaves bbolt's growth of the file as it is.
func setGrowth(*bolt.DB) {}
