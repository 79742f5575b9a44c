package gctune

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestRelax(t *testing.T) {
	origPercent := debug.SetGCPercent(100)
	origLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		debug.SetGCPercent(origPercent)
		debug.SetMemoryLimit(origLimit)
	})
	limit := func() int64 { return debug.SetMemoryLimit(-1) }
	const budget = 256 << 20

	t.Run("turns off, limits, and restores", func(t *testing.T) {
		debug.SetGCPercent(100)
		before := memoryInUse()
		restore := Relax(budget)
		if got := gcPercent(); got != -1 {
			t.Errorf("while loading: GOGC %d, want off", got)
		}
		if got := limit(); got < before+budget || got > memoryInUse()+budget {
			t.Errorf("while loading: memory limit %d, want the %d in use plus %d", got, before, budget)
		}
		restore()
		restore() // a second call does nothing
		if got := gcPercent(); got != 100 {
			t.Errorf("after loading: GOGC %d, want 100", got)
		}
		if got := limit(); got != math.MaxInt64 {
			t.Errorf("after loading: memory limit %d, want none", got)
		}
	})
	t.Run("concurrent loads add their budgets and restore once, after the last", func(t *testing.T) {
		debug.SetGCPercent(50)
		r1 := Relax(budget)
		first := limit()
		r2 := Relax(budget)
		if got := limit(); got != first+budget {
			t.Errorf("with two loads: memory limit %d, want %d", got, first+budget)
		}
		r1()
		if got := gcPercent(); got != -1 {
			t.Errorf("while the second loads: GOGC %d, want off", got)
		}
		r2()
		if got := gcPercent(); got != 50 {
			t.Errorf("after both: GOGC %d, want 50", got)
		}
		if got := limit(); got != math.MaxInt64 {
			t.Errorf("after both: memory limit %d, want none", got)
		}
	})
	t.Run("a lower memory limit is kept", func(t *testing.T) {
		debug.SetGCPercent(100)
		low := memoryInUse() + 1<<20
		debug.SetMemoryLimit(low)
		restore := Relax(budget)
		if got := limit(); got != low {
			t.Errorf("while loading: memory limit %d, want the lower %d", got, low)
		}
		restore()
		if got, percent := limit(), gcPercent(); got != low || percent != 100 {
			t.Errorf("after loading: memory limit %d, GOGC %d, want %d and 100", got, percent, low)
		}
		debug.SetMemoryLimit(math.MaxInt64)
	})
	t.Run("a collector that is off is left alone", func(t *testing.T) {
		debug.SetGCPercent(-1)
		restore := Relax(budget)
		if got, l := gcPercent(), limit(); got != -1 || l != math.MaxInt64 {
			t.Errorf("while loading: GOGC %d, memory limit %d, want both untouched", got, l)
		}
		restore()
		if got := gcPercent(); got != -1 {
			t.Errorf("GOGC %d after loading, want off", got)
		}
	})
	t.Run("changes made while loading are kept", func(t *testing.T) {
		debug.SetGCPercent(100)
		restore := Relax(budget)
		debug.SetGCPercent(200)
		debug.SetMemoryLimit(1 << 40)
		restore()
		if got, l := gcPercent(), limit(); got != 200 || l != 1<<40 {
			t.Errorf("GOGC %d, memory limit %d, want the 200 and %d set while loading", got, l, int64(1<<40))
		}
		debug.SetMemoryLimit(math.MaxInt64)
	})
}

func TestLoadBudget(t *testing.T) {
	for _, tt := range []struct{ size, want int64 }{
		{0, 64 << 20},
		{-1, 64 << 20},
		{100 << 20, 600<<20 + 64<<20},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := LoadBudget(tt.size); got != tt.want {
			t.Errorf("LoadBudget(%d) = %d, want %d", tt.size, got, tt.want)
		}
	}
}
