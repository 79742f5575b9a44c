package weakmap

import (
	"runtime"
	"testing"
	"time"
)

// TestEntryLeavesWithItsValue: a value is shared while held, and its entry leaves once
// nothing holds it; a new value of the same key is not taken out by the old one's
// cleanup.
func TestEntryLeavesWithItsValue(t *testing.T) {
	var m Map[string, [16]byte]
	a := m.LoadOrStore("k", func() *[16]byte { return &[16]byte{1} })
	if b := m.LoadOrStore("k", func() *[16]byte { t.Fatal("made a second value of a held key"); return nil }); b != a {
		t.Fatal("a second LoadOrStore returned another value")
	}
	if got := m.Load("k"); got != a {
		t.Fatal("Load did not return the held value")
	}
	runtime.KeepAlive(a)
	a = nil
	deadline := time.Now().Add(10 * time.Second)
	for m.Has("k") {
		if time.Now().After(deadline) {
			t.Fatal("the entry of a value nothing holds is still there after 10 s")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if m.Load("k") != nil || m.Len() != 0 {
		t.Fatal("the map still has the value")
	}
	c := m.LoadOrStore("k", func() *[16]byte { return &[16]byte{2} })
	if c[0] != 2 || m.Load("k") != c {
		t.Fatal("a new value of a released key was not stored")
	}
	runtime.KeepAlive(c)
}
