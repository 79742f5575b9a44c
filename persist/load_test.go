package persist

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoadPanicWaitsForDecoders: when the walk of Load ends early while a decoder is in
// the middle of a chunk, whose values are in the file's memory map, no decoder may read
// on once Load has returned: the recovery of Load closes the database, which unmaps the
// file, and a read of a value then faults and kills the process. The walk ends early on
// a bad page, which panics in bbolt, or on a damaged bucket, which is an error.
func TestLoadPanicWaitsForDecoders(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func() error
	}{
		{"the walk panics", func() error { panic("bad page") }},
		{"the walk fails", func() error { return fmt.Errorf("%w: a damaged bucket", ErrCorrupt) }},
	} {
		t.Run(tc.name, func(t *testing.T) { testLoadEndsEarly(t, tc.fail) })
	}
	t.Run("a decoder fails while the walk waits, runs ahead", testLoadFailsAhead)
}

// testLoadFailsAhead: a snapshot of many small clusters, whose walk runs loadAhead runs
// ahead of the filing and then waits for a token (the filing waits on the run of the
// second cluster, in which a decoder is held; the first cluster is filed alone), when
// another decoder finds a value unreadable. The walk
// ends from its wait, and Load returns only once no decoder can read the map: none
// reads it after.
func testLoadFailsAhead(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	clusters := 4 * loadAhead()
	for c := range clusters {
		cluster := fmt.Sprintf("c-%03d", c)
		for i := range 4 {
			w.Upsert(cluster, pods, object("ns", fmt.Sprintf("pod-%d", i), "1"))
		}
		w.Checkpoint(cluster, pods, "100")
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path, Options{})

	returned := make(chan struct{})
	var held, sent, lateReads atomic.Int32
	testHookSent = func(n int) error {
		sent.Store(int32(n))
		return nil
	}
	// The first cluster is filed alone, and gives its token back: then the walk hands
	// out loadAhead runs more, the last one of cluster c-<loadAhead>, and waits.
	most := int32(1 + loadAhead())
	last := fmt.Sprintf("c-%03d", loadAhead())
	testHookDecode = func(c *chunk, i int) {
		switch {
		case c.cluster == "c-001" && i == 1 && held.CompareAndSwap(0, 1):
			// Held until the walk has handed out all it may, and then a while.
			for sent.Load() < most {
				runtime.Gosched()
			}
			select {
			case <-returned:
			case <-time.After(200 * time.Millisecond):
			}
		case c.cluster == last && i == 0:
			for sent.Load() < most {
				runtime.Gosched()
			}
			panic("an unreadable value")
		}
		stopLateRead(returned, &lateReads)
	}
	t.Cleanup(func() { testHookSent, testHookDecode = nil, nil })

	loadNothing(t, s, returned, "after a decoder failed")
	if n := sent.Load(); n != most {
		t.Errorf("the walk handed out %d runs, want %d: it did not wait for the filing", n, most)
	}
	if n := lateReads.Load(); n > 0 {
		t.Fatalf("a decoder went on reading the memory map after Load returned (%d times)", n)
	}
}

func testLoadEndsEarly(t *testing.T, fail func() error) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	for i := range loadChunk + 10 {
		w.Upsert("a", pods, object("ns", fmt.Sprintf("pod-%04d", i), "1"))
	}
	w.Checkpoint("a", pods, "100")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Load recovers only without a Writer: start over with one that has none.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path, Options{})

	returned, hookDone := make(chan struct{}), make(chan struct{})
	var blocked, lateReads atomic.Int32
	testHookSent = func(n int) error {
		// The first chunk is out, and a decoder is in it: the walk ends now.
		for blocked.Load() == 0 {
			runtime.Gosched()
		}
		return fail()
	}
	testHookDecode = func(c *chunk, i int) {
		if i == 1 && blocked.CompareAndSwap(0, 1) {
			defer close(hookDone)
			select {
			case <-returned:
			case <-time.After(time.Second):
			}
		}
		stopLateRead(returned, &lateReads)
	}
	t.Cleanup(func() { testHookSent, testHookDecode = nil, nil })

	loadNothing(t, s, returned, "after the walk ended early")
	if moved, cause := s.Recovered(); moved == "" {
		t.Errorf("Load did not move the file aside (cause %v)", cause)
	}
	select {
	case <-hookDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the decoder in the middle of a chunk never went on")
	}
	if n := lateReads.Load(); n > 0 {
		t.Fatalf("a decoder went on reading the memory map after Load returned (%d times)", n)
	}
}

// TestLoadedSnapshotOutlivesTheFile: nothing that Load returns points into the file's
// memory map, which the values are read from in place: once the Store is closed and
// the file unmapped, and before anything else is mapped, every object, resourceVersion
// and identity still reads the same. A string left in the map would fault here.
func TestLoadedSnapshotOutlivesTheFile(t *testing.T) {
	path := testPath(t)
	writeDamageSample(t, path)
	s := openTest(t, path, Options{})
	snap := mustLoad(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := dumpSnapshot(t, snap)
	want := dumpSnapshot(t, mustLoad(t, openTest(t, path, Options{ReadOnly: true})))
	if got != want {
		t.Fatal("the snapshot changed after its Store was closed")
	}
}

// dumpSnapshot returns all of snap as text.
func dumpSnapshot(t *testing.T, snap *Snapshot) string {
	t.Helper()
	var b strings.Builder
	for _, cluster := range slices.Sorted(maps.Keys(snap.Clusters)) {
		cs := snap.Clusters[cluster]
		fmt.Fprintf(&b, "%s %s %s\n", cluster, cs.Identity.UID, cs.Identity.Server)
		for _, key := range slices.Sorted(maps.Keys(cs.Resources)) {
			rs := cs.Resources[key]
			fmt.Fprintf(&b, "%s %s\n", key, rs.ResourceVersion)
			for _, obj := range rs.Objects {
				data, err := json.Marshal(obj)
				if err != nil {
					t.Fatal(err)
				}
				b.Write(data)
			}
		}
	}
	return b.String()
}

// stopLateRead, called by a decoder before it reads a value, counts in late and ends
// the decoder instead if Load has returned (returned is closed): reading the value now,
// from a map that is gone, is the fault the tests look for, reported rather than taken.
func stopLateRead(returned <-chan struct{}, late *atomic.Int32) {
	select {
	case <-returned:
		late.Add(1)
		runtime.Goexit()
	default:
	}
}

// loadNothing loads s, closes returned once Load has returned, and checks that the load
// failed whole: no error, and no cluster.
func loadNothing(t *testing.T, s *Store, returned chan struct{}, what string) {
	t.Helper()
	snap, err := s.Load()
	close(returned)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(snap.Clusters) != 0 {
		t.Errorf("Load %s returned %d clusters", what, len(snap.Clusters))
	}
}
