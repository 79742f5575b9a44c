package informer

import (
	"context"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"
)

// syncingInformer is a syncer whose initial sync ends when synced is closed.
type syncingInformer struct {
	synced chan struct{}
}

func (c syncingInformer) Synced() <-chan struct{}         { return c.synced }
func (c syncingInformer) LastSyncResourceVersion() string { return "7" }

// markingStore closes marked when it is marked synced.
type markingStore struct {
	Store
	marked chan struct{}
}

func (s markingStore) MarkSynced() { close(s.marked) }

// TestWatchSyncWithoutClock checks that a resource is Synced as soon as its informers
// are, without waiting for a tick of the clock: with a fake clock that never moves,
// only the informers' Synced channels can tell it (a poll of HasSynced on the
// clock's ticker never would).
func TestWatchSyncWithoutClock(t *testing.T) {
	changed := make(chan struct{}, 10)
	s := &Set{
		opts: Options{
			Cluster:  "c",
			Clock:    testingclock.NewFakeClock(time.Unix(1000, 0)),
			OnChange: func() { changed <- struct{}{} },
		},
		status:  []ResourceStatus{{Name: "pods", State: StateSyncing}},
		running: map[string]*runner{},
	}
	a, b := syncingInformer{synced: make(chan struct{})}, syncingInformer{synced: make(chan struct{})}
	run := &runner{informers: map[string]syncer{"a": a, "b": b}}
	s.running["pods"] = run
	store := markingStore{marked: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchSync(t.Context(), "pods", run, []Store{store})
	}()

	close(a.synced)
	select {
	case <-done:
		t.Fatal("Synced with one of two informers synced")
	case <-time.After(50 * time.Millisecond):
	}
	close(b.synced)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("not Synced 10 s after its informers, with the clock standing still")
	}
	select {
	case <-store.marked:
	default:
		t.Error("the store was not marked synced")
	}
	if st := s.Status()[0]; st.State != StateSynced || st.ResourceVersions["a"] != "7" || st.ResourceVersions["b"] != "7" {
		t.Errorf("status %+v, want Synced at resourceVersion 7 in a and b", st)
	}
	select {
	case <-changed:
	default:
		t.Error("OnChange was not called")
	}
}

// TestWatchSyncStopsWithContext checks that watchSync returns, marking nothing, once
// its context is done before the informers have synced.
func TestWatchSyncStopsWithContext(t *testing.T) {
	s := &Set{
		opts:    Options{Cluster: "c", Clock: testingclock.NewFakeClock(time.Unix(1000, 0))},
		status:  []ResourceStatus{{Name: "pods", State: StateSyncing}},
		running: map[string]*runner{},
	}
	run := &runner{informers: map[string]syncer{"": syncingInformer{synced: make(chan struct{})}}}
	s.running["pods"] = run
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchSync(ctx, "pods", run, []Store{markingStore{marked: make(chan struct{})}})
	}()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("watchSync still waiting 10 s after its context ended")
	}
	if st := s.Status()[0]; st.State != StateSyncing {
		t.Errorf("state %s, want Syncing", st.State)
	}
}
