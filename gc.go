package fleetwatch

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// loadGCPercent is the garbage collector's target (GOGC) while a snapshot loads. Loading
// builds the whole cache, hundreds of MiB, from nothing: at the default target of 100 the
// collector runs again each time the heap doubles and marks every object loaded so far
// several times over, nearly half of the CPU time of a warm start. At 400 it runs about
// three times. The heap holds no garbage to speak of while loading, so this costs little
// memory; a memory limit (GOMEMLIMIT) still applies.
const loadGCPercent = 400

// loadGC counts the snapshot loads in progress in the process, so that concurrent
// Managers raise the target once and the last one restores it.
var loadGC struct {
	// mu guards the fields and the changes of the GC target made here.
	mu sync.Mutex
	// active is the number of loads in progress.
	active int
	// raised is whether the first of them raised the target, and saved the target
	// before.
	raised bool
	saved  int
}

// relaxGC raises the garbage collector's target to loadGCPercent until the returned
// function is called. It leaves the target alone if it is already higher, or if the
// collector is off. The target is restored only if nothing else in the process changed
// it in the meantime: a library must not overwrite its user's settings.
func relaxGC() (restore func()) {
	loadGC.mu.Lock()
	defer loadGC.mu.Unlock()
	if loadGC.active == 0 {
		loadGC.raised = false
		if current := gcPercent(); current >= 0 && current < loadGCPercent {
			loadGC.saved = debug.SetGCPercent(loadGCPercent)
			loadGC.raised = true
		}
	}
	loadGC.active++
	return sync.OnceFunc(func() {
		loadGC.mu.Lock()
		defer loadGC.mu.Unlock()
		loadGC.active--
		if loadGC.active == 0 && loadGC.raised && gcPercent() == loadGCPercent {
			debug.SetGCPercent(loadGC.saved)
		}
	})
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
