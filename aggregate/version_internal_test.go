package aggregate

import (
	"runtime"
	"testing"
	"unsafe"
)

// TestVersionAfterCollection checks what a reader that keys by Version relies on, where
// keying by address would fail: the Version of an object the fleet let go, kept after
// the object was collected, differs from the Version of a new object that took its
// address, and the new object's Held is not that Version (Is). The test fails if no
// address was taken again, which would prove nothing: whether the allocator hands a
// freed address out again soon is up to it (under -race, beside other packages' tests,
// it once did not), so it tries up to five rounds.
func TestVersionAfterCollection(t *testing.T) {
	const n = 20000
	for round := range 5 {
		reused := versionsAfterCollection(t, n)
		if reused > 0 {
			t.Logf("round %d: %d of %d new objects took the address of a collected one", round, reused, n)
			return
		}
	}
	t.Fatalf("in five rounds, none of %d new objects took the address of one of %d collected ones", n, n)
}

// versionsAfterCollection lets n objects go, after taking their Versions, and makes n
// new ones; it fails the test if one that took the address of a collected one has its
// Version, and returns how many did.
func versionsAfterCollection(t *testing.T, n int) (reused int) {
	versions := make(map[uintptr]Version, n)
	for range n {
		o := &encodedObject{rv: "1"}
		versions[uintptr(unsafe.Pointer(o))] = Held{stored: o}.Version()
	}
	runtime.GC()
	runtime.GC()
	keep := make([]*encodedObject, 0, n)
	for range n {
		o := &encodedObject{rv: "2"}
		keep = append(keep, o)
		old, ok := versions[uintptr(unsafe.Pointer(o))]
		if !ok {
			continue
		}
		reused++
		if h := (Held{stored: o}); h.Is(old) || h.Version() == old {
			t.Fatalf("a new object at the address of a collected one has its Version")
		}
	}
	runtime.KeepAlive(keep)
	return reused
}
