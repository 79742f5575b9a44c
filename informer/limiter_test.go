package informer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

func TestLimiterBoundsConcurrency(t *testing.T) {
	l := NewLimiter(2)
	var cur, peak atomic.Int32
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if err := l.Acquire(t.Context()); err != nil {
				t.Error(err)
				return
			}
			n := cur.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			cur.Add(-1)
			l.Release()
		})
	}
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency %d, want 2", p)
	}
}

func TestLimiterAcquireHonoursContext(t *testing.T) {
	l := NewLimiter(1)
	if err := l.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if err := l.Acquire(ctx); err == nil {
		t.Fatal("Acquire of a full limiter succeeded")
	}
	l.Release()
	if err := l.Acquire(t.Context()); err != nil {
		t.Fatalf("after Release: %v", err)
	}
}

func TestUnreachableClusterGivesBackItsSlot(t *testing.T) {
	l := &signalingLimiter{Limiter: NewLimiter(1), acquired: make(chan struct{})}
	// Nothing listens on this address: discovery fails at once.
	s, err := New(Options{
		Cluster:            "down",
		Config:             &rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second},
		Resources:          []Resource{{Name: "pods"}},
		Sink:               nopSink{},
		InitialSyncLimiter: l,
		SyncTimeout:        time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	<-l.acquired
	// A second cluster gets the only slot long before the first one's sync timeout.
	actx, acancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer acancel()
	if err := l.Limiter.Acquire(actx); err != nil {
		t.Fatalf("the slot of an unreachable cluster was not given back: %v", err)
	}
	l.Limiter.Release()
}

// TestHungClusterGivesBackItsSlot: a cluster whose apiserver accepts connections and
// never answers (as one stopped with SIGSTOP) holds its slot for SyncTimeout, no
// longer; its Listing begins only once it has the slot.
func TestHungClusterGivesBackItsSlot(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	l := &signalingLimiter{Limiter: NewLimiter(1), acquired: make(chan struct{})}
	const syncTimeout = 300 * time.Millisecond
	s, err := New(Options{
		Cluster:            "hung",
		Config:             &rest.Config{Host: srv.URL},
		Resources:          []Resource{{Name: "pods"}},
		Sink:               nopSink{},
		InitialSyncLimiter: l,
		SyncTimeout:        syncTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Another cluster has the only slot: this one waits, and has not begun.
	if err := l.Acquire(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = s.Start(ctx) }()
	select {
	case <-s.Listing():
		t.Fatal("the initial sync began without a slot")
	case <-time.After(100 * time.Millisecond):
	}
	l.Limiter.Release()
	select {
	case <-s.Listing():
	case <-time.After(10 * time.Second):
		t.Fatal("the initial sync did not begin once the slot was free")
	}
	began := time.Now()
	actx, acancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer acancel()
	if err := l.Limiter.Acquire(actx); err != nil {
		t.Fatalf("the slot of a hung cluster was not given back: %v", err)
	}
	if held := time.Since(began); held < syncTimeout*3/4 {
		t.Errorf("the slot was given back after %v, before the sync timeout (%v)", held, syncTimeout)
	}
	l.Limiter.Release()
}

// signalingLimiter closes acquired on its first Acquire.
type signalingLimiter struct {
	Limiter
	once     sync.Once
	acquired chan struct{}
}

func (l *signalingLimiter) Acquire(ctx context.Context) error {
	err := l.Limiter.Acquire(ctx)
	l.once.Do(func() { close(l.acquired) })
	return err
}

type nopSink struct{}

func (nopSink) Store(Scope) Store                          { return nil }
func (nopSink) RemoveResource(schema.GroupVersionResource) {}
