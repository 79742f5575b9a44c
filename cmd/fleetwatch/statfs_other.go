//go:build !unix

package main

// filesystemBytes returns 0: the size of a filesystem is not told here.
func filesystemBytes(string) uint64 { return 0 }
