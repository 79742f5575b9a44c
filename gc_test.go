package fleetwatch

import (
	"runtime/debug"
	"testing"
)

func TestRelaxGC(t *testing.T) {
	orig := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(orig) })

	t.Run("raises and restores", func(t *testing.T) {
		debug.SetGCPercent(100)
		restore := relaxGC()
		if got := gcPercent(); got != loadGCPercent {
			t.Errorf("while loading: GOGC %d, want %d", got, loadGCPercent)
		}
		restore()
		restore() // a second call does nothing
		if got := gcPercent(); got != 100 {
			t.Errorf("after loading: GOGC %d, want 100", got)
		}
	})
	t.Run("concurrent loads restore once, after the last", func(t *testing.T) {
		debug.SetGCPercent(50)
		r1 := relaxGC()
		r2 := relaxGC()
		r1()
		if got := gcPercent(); got != loadGCPercent {
			t.Errorf("while the second loads: GOGC %d, want %d", got, loadGCPercent)
		}
		r2()
		if got := gcPercent(); got != 50 {
			t.Errorf("after both: GOGC %d, want 50", got)
		}
	})
	t.Run("a higher target or GC off is left alone", func(t *testing.T) {
		for _, v := range []int{1000, -1} {
			debug.SetGCPercent(v)
			restore := relaxGC()
			if got := gcPercent(); got != v {
				t.Errorf("GOGC %d while loading, want %d", got, v)
			}
			restore()
			if got := gcPercent(); got != v {
				t.Errorf("GOGC %d after loading, want %d", got, v)
			}
		}
	})
	t.Run("a change made while loading is kept", func(t *testing.T) {
		debug.SetGCPercent(100)
		restore := relaxGC()
		debug.SetGCPercent(200)
		restore()
		if got := gcPercent(); got != 200 {
			t.Errorf("GOGC %d, want the 200 set while loading", got)
		}
	})
}
