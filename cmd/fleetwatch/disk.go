package main

import (
	"fmt"
	"path/filepath"
)

// historyBound returns the bound of the change log (history.maxBytes) that the daemon
// uses, given the size of the filesystem that holds the snapshot at path (fsBytes;
// statfs; 0 if unknown), and a message to log if it lowered it. The log's file takes up
// to about twice its bound (bbolt keeps freed pages for reuse), beside the snapshot's
// objects: a bound whose twice is more than half of the filesystem, as the 36 GiB
// default is on a small volume, would fill it, and a full disk fails every commit. The
// bound is then lowered to a quarter of the filesystem, at least min.
func historyBound(maxBytes int64, path string, fsBytes uint64, min int64) (int64, string) {
	if fsBytes == 0 || maxBytes <= 0 || uint64(maxBytes) <= fsBytes/4 {
		return maxBytes, ""
	}
	bound := max(int64(fsBytes/4), min)
	if bound >= maxBytes {
		return maxBytes, ""
	}
	return bound, fmt.Sprintf("history.maxBytes is %d, and the change log's file takes up to about twice as much, but the filesystem of %s holds %d bytes: the log is bounded to %d, a quarter of it; set history.maxBytes to choose",
		maxBytes, filepath.Dir(path), fsBytes, bound)
}
