// Package gctune changes the process's garbage collector settings while a snapshot
// loads, and sets them back afterwards. It is apart because the settings are
// process-wide: the root package uses it only when Options.DisableGCTuning is false. It
// imports nothing of fleetwatch.
package gctune

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// While a snapshot loads, the garbage collector is off, and a memory limit bounds the
// heap instead. Loading builds the whole cache, hundreds of MiB, from nothing, and makes
// little garbage: at the default target (GOGC=100) the collector runs each time the heap
// doubles and marks every object loaded so far again and again, nearly half of the CPU
// time of a warm start. Off, it does not run at all unless the heap grows past what the
// snapshot should need, LoadBudget; after the load, the collector runs once, marking the
// loaded objects a single time.

// LoadBudget returns how much memory the load of a snapshot file of size bytes may take
// before the collector runs: six times the file's size, plus 64 MiB. That is well above
// what a load takes (docs/benchmarks.md: a plain fleet's warm start from a file of 211
// MiB peaked at 404 MiB of RSS and held 247 MiB of heap after GC; a compact fleet, which
// keeps the stored encodings, holds 4.39 KiB of heap per object for 5.5 KiB of file), so
// that the collector stays off for a load as expected, and runs, rather than the process
// growing without bound, for a snapshot that decodes larger than expected.
func LoadBudget(size int64) int64 {
	const perFileByte, slack = 6, 64 << 20
	if size <= 0 {
		return slack
	}
	if size > (math.MaxInt64-slack)/perFileByte {
		return math.MaxInt64
	}
	return perFileByte*size + slack
}

// loadGC counts the snapshot loads in progress in the process, so that concurrent
// Managers change the collector's settings once and the last one restores them.
var loadGC struct {
	// mu guards the fields and the changes of the GC settings made here.
	mu sync.Mutex
	// active is the number of loads in progress.
	active int
	// off is whether the first load turned the collector off, and savedPercent the
	// target before.
	off          bool
	savedPercent int
	// limited is whether the loads lowered the memory limit, to limit, and savedLimit
	// the limit before.
	limited    bool
	limit      int64
	savedLimit int64
}

// Relax turns the garbage collector off, with a memory limit of the memory in use now
// plus budget (lower limits are kept), until the returned function is called. Concurrent
// loads add their budgets. A collector that is already off is left alone. The settings
// are restored only if nothing else in the process changed them in the meantime: a
// library must not overwrite its user's settings.
func Relax(budget int64) (restore func()) {
	loadGC.mu.Lock()
	defer loadGC.mu.Unlock()
	if loadGC.active == 0 {
		loadGC.off, loadGC.limited = false, false
		if gcPercent() >= 0 {
			loadGC.savedPercent = debug.SetGCPercent(-1)
			loadGC.off = true
		}
	}
	loadGC.active++
	if loadGC.off {
		current := debug.SetMemoryLimit(-1) // reads the limit
		switch {
		case !loadGC.limited:
			if want := satAdd(memoryInUse(), budget); want < current {
				loadGC.savedLimit, loadGC.limit, loadGC.limited = current, want, true
				debug.SetMemoryLimit(want)
			}
		case current == loadGC.limit:
			loadGC.limit = min(satAdd(loadGC.limit, budget), loadGC.savedLimit)
			debug.SetMemoryLimit(loadGC.limit)
		}
	}
	return sync.OnceFunc(func() {
		loadGC.mu.Lock()
		defer loadGC.mu.Unlock()
		loadGC.active--
		if loadGC.active > 0 {
			return
		}
		if loadGC.limited && debug.SetMemoryLimit(-1) == loadGC.limit {
			debug.SetMemoryLimit(loadGC.savedLimit)
		}
		if loadGC.off && gcPercent() == -1 {
			debug.SetGCPercent(loadGC.savedPercent)
		}
	})
}

// satAdd returns a+b for non-negative a and b, or math.MaxInt64 if that overflows.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// memoryInUse returns the memory that counts against the memory limit, as the runtime
// computes it: all memory mapped by the Go runtime, less what was returned to the OS.
func memoryInUse() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64() - s[1].Value.Uint64())
}

// gcPercent returns the garbage collector's current target, -1 if it is off.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return -1
	}
	v := s[0].Value.Uint64()
	if v > 1<<30 {
		return -1
	}
	return int(v)
}
