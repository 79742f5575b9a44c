package gctune

import "sync"

// While the informers sync cold, the collector's pace is set by a heap that grows from
// nothing: at the default target (GOGC=100) a cycle starts each time the heap doubles,
// so while the cache is small, a cycle starts after every few MiB of the garbage that
// decoding a list makes, and each one marks the cache built so far again. A ballast, a
// block of memory without pointers that the collector counts as live but has nothing to
// mark in, spaces the cycles by at least its size, whatever the cache's size: fewer
// cycles, each marking what it would have. The cost is the garbage that waits for the
// next cycle, up to the ballast's size more than without it; the ballast itself is
// never written, so the OS maps no pages for it (it stays out of the RSS), and it counts
// against a memory limit (GOMEMLIMIT) as heap.

// SyncBallast is the size of the ballast that Ballast holds.
const SyncBallast = 64 << 20

// ballast counts the holders of the ballast in the process, so that concurrent
// Managers share one.
var ballast struct {
	mu     sync.Mutex
	active int
	block  []byte
}

// Ballast holds a ballast of SyncBallast bytes (see above) until the returned
// function is called; concurrent holders share one, which is freed after the last
// releases it. The next collection after that one frees its memory.
func Ballast() (release func()) {
	ballast.mu.Lock()
	defer ballast.mu.Unlock()
	if ballast.active == 0 {
		ballast.block = make([]byte, SyncBallast)
	}
	ballast.active++
	return sync.OnceFunc(func() {
		ballast.mu.Lock()
		defer ballast.mu.Unlock()
		ballast.active--
		if ballast.active == 0 {
			ballast.block = nil
		}
	})
}

// BallastHeld reports whether a ballast is held.
func BallastHeld() bool {
	ballast.mu.Lock()
	defer ballast.mu.Unlock()
	return ballast.block != nil
}
