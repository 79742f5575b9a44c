package aggregate

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestEntryTable holds entryTables to Go maps through random adds and removes that take
// them across the sizes where they turn from slices to hash tables and back, grow and
// shrink.
func TestEntryTable(t *testing.T) {
	entries := make([]*entry, 3000)
	for i := range entries {
		entries[i] = &entry{key: Key{Cluster: fmt.Sprint("c", i%3), Namespace: fmt.Sprint("ns-", i%7), Name: fmt.Sprint("o-", i)}}
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, seed))
			var s set
			var items itemTable
			want := map[*entry]bool{}
			check := func(step int) {
				t.Helper()
				if s.len() != len(want) || items.len() != len(want) {
					t.Fatalf("step %d: len %d and %d, want %d", step, s.len(), items.len(), len(want))
				}
				n := 0
				for e := range s.all() {
					if !want[e] {
						t.Fatalf("step %d: set iterates %v, not in it", step, e.key)
					}
					n++
				}
				for e := range items.all() {
					if !want[e] {
						t.Fatalf("step %d: items iterate %v, not in them", step, e.key)
					}
					n++
				}
				if n != 2*len(want) {
					t.Fatalf("step %d: iterated %d entries, want %d", step, n, 2*len(want))
				}
				// A window of 50 anywhere: entries added and removed, and never added.
				from := r.IntN(len(entries) - 50)
				for _, e := range entries[from : from+50] {
					if s.has(e) != want[e] || items.has(e) != want[e] || (items.get(e.key) == e) != want[e] {
						t.Fatalf("step %d: %v: has %v, %v, get %v; want %v", step, e.key, s.has(e), items.has(e), items.get(e.key) != nil, want[e])
					}
				}
			}
			// Phases of adds and removes among the first limit entries, at several
			// scales; a limit of 0 drains the tables, in random order.
			for step, limit := 0, 0; step < 48_000; step++ {
				if step%4000 == 0 {
					limit = []int{4, 9, 20, 3000, 0, 100, 12, 2000, 0, 3000, 30, 0}[step/4000%12]
				}
				var e *entry
				if limit == 0 {
					for x := range want {
						e = x
						break
					}
					if e == nil {
						continue
					}
				} else {
					e = entries[r.IntN(limit)]
				}
				if want[e] {
					if !s.remove(e) || !items.remove(e) {
						t.Fatalf("step %d: remove %v: not found", step, e.key)
					}
					delete(want, e)
				} else {
					if s.remove(e) || items.remove(e) {
						t.Fatalf("step %d: removed %v, which was not there", step, e.key)
					}
					s.add(e)
					items.add(e)
					want[e] = true
				}
				if step%97 == 0 || s.len() < 20 {
					check(step)
				}
			}
			check(-1)
			for e := range want {
				s.remove(e)
				items.remove(e)
			}
			if s.len() != 0 || s.slots != nil || items.len() != 0 || items.slots != nil {
				t.Errorf("emptied: len %d and %d, %d and %d slots; want none", s.len(), items.len(), len(s.slots), len(items.slots))
			}
		})
	}
	var nilSet *set
	if nilSet.len() != 0 {
		t.Error("a nil set has entries")
	}
	for range nilSet.all() {
		t.Error("a nil set iterates")
	}
}
