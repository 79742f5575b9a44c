package gctune

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

// heapGoal is the collector's current heap goal.
func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func TestBallast(t *testing.T) {
	runtime.GC()
	without := heapGoal()
	r1 := Ballast()
	r2 := Ballast()
	if !BallastHeld() {
		t.Fatal("no ballast held")
	}
	runtime.GC()
	// The collector counts the ballast as live: the next cycle starts at least its
	// size later.
	if with := heapGoal(); with < without+SyncBallast {
		t.Errorf("heap goal %d with the ballast, want at least %d more than %d", with, SyncBallast, without)
	}
	r1()
	r1() // a second call does nothing
	if !BallastHeld() {
		t.Fatal("the ballast was freed while a holder remains")
	}
	r2()
	if BallastHeld() {
		t.Fatal("the ballast is held after the last holder released it")
	}
	runtime.GC()
	if after := heapGoal(); after >= without+SyncBallast {
		t.Errorf("heap goal %d after the ballast's release, want below %d", after, without+SyncBallast)
	}
}
