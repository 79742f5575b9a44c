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
	l := NewLimiter(LimiterOptions{MaxSyncs: 2})
	var cur, peak atomic.Int32
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			g, err := l.Acquire(t.Context(), 1)
			if err != nil {
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
			g.Release()
		})
	}
	wg.Wait()
	if p := peak.Load(); p != 2 {
		t.Errorf("peak concurrency %d, want 2", p)
	}
}

func TestLimiterAcquireHonoursContext(t *testing.T) {
	l := NewLimiter(LimiterOptions{MaxSyncs: 1})
	g, err := l.Acquire(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(ctx, 0); err == nil {
		t.Fatal("Acquire of a full limiter succeeded")
	}
	g.Release()
	g.Release() // only the first counts
	g2, err := l.Acquire(t.Context(), 0)
	if err != nil {
		t.Fatalf("after Release: %v", err)
	}
	g2.Release()
}

// acquireNow acquires a grant of l for expected objects if one is admitted at once.
func acquireNow(t *testing.T, l Limiter, expected int) (Grant, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	g, err := l.Acquire(ctx, expected)
	return g, err == nil
}

// TestLimiterFollowsTheWork: before any sync has completed, at most 8 clusters of
// unknown size start; once small clusters have synced, many more start at once; a
// cluster that turns out large holds the newcomers back until it is done.
func TestLimiterFollowsTheWork(t *testing.T) {
	l := NewLimiter(LimiterOptions{MaxSyncs: 100, MaxObjects: 8000})
	var blind []Grant
	for {
		g, ok := acquireNow(t, l, 0)
		if !ok {
			break
		}
		blind = append(blind, g)
	}
	if len(blind) != 8 {
		t.Fatalf("%d clusters of unknown size started blind, want 8", len(blind))
	}
	for _, g := range blind {
		g.Listed(20)
		g.Release()
	}
	// Clusters of about 20 objects now: MaxSyncs of them at once.
	var small []Grant
	for {
		g, ok := acquireNow(t, l, 0)
		if !ok {
			break
		}
		small = append(small, g)
	}
	if len(small) != 100 {
		t.Fatalf("%d small clusters started at once, want MaxSyncs (100)", len(small))
	}
	for _, g := range small[1:] {
		g.Listed(20)
		g.Release()
	}
	// The one left turns out large: over the budget, nothing else starts.
	small[0].Listed(10_000)
	if g, ok := acquireNow(t, l, 0); ok {
		g.Release()
		t.Fatal("a sync started while a running one is over the budget")
	}
	// Until it is done.
	done := make(chan Grant)
	go func() {
		g, err := l.Acquire(t.Context(), 0)
		if err != nil {
			t.Error(err)
		}
		done <- g
	}()
	time.Sleep(10 * time.Millisecond)
	small[0].Release()
	select {
	case g := <-done:
		g.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting sync did not start once the large one was done")
	}
	small[0].Listed(1) // after Release: nothing
}

// TestLimiterExpected: a cluster said to be large counts as such from the start, and a
// cluster larger than the whole budget still starts when nothing else runs.
func TestLimiterExpected(t *testing.T) {
	l := NewLimiter(LimiterOptions{MaxSyncs: 100, MaxObjects: 1000})
	big, ok := acquireNow(t, l, 5000)
	if !ok {
		t.Fatal("a cluster over the budget did not start alone")
	}
	if g, ok := acquireNow(t, l, 10); ok {
		g.Release()
		t.Fatal("a sync started beside one over the budget")
	}
	big.Release()
	a, ok := acquireNow(t, l, 600)
	if !ok {
		t.Fatal("did not start alone")
	}
	if g, ok := acquireNow(t, l, 600); ok {
		g.Release()
		t.Fatal("two syncs of 600 started within a budget of 1000")
	}
	b, ok := acquireNow(t, l, 400)
	if !ok {
		t.Fatal("600 + 400 did not fit a budget of 1000")
	}
	a.Release()
	b.Release()
}

// TestLimiterFirstComeFirstServed: a large sync that waits is not overtaken by small
// ones that come after it.
func TestLimiterFirstComeFirstServed(t *testing.T) {
	l := NewLimiter(LimiterOptions{MaxSyncs: 100, MaxObjects: 1000})
	a, _ := acquireNow(t, l, 900)
	admitted := make(chan int, 2)
	var wg sync.WaitGroup
	for i, expected := range []int{900, 200} {
		wg.Go(func() {
			g, err := l.Acquire(t.Context(), expected)
			if err != nil {
				t.Error(err)
				return
			}
			admitted <- i
			time.Sleep(5 * time.Millisecond)
			g.Release()
		})
		time.Sleep(10 * time.Millisecond) // in this order
	}
	a.Release()
	wg.Wait()
	close(admitted)
	var order []int
	for i := range admitted {
		order = append(order, i)
	}
	if len(order) != 2 || order[0] != 0 {
		t.Errorf("admitted in order %v, want the large one first", order)
	}
}

// TestLimiterCancelledWaiterLetsOthersIn: a waiter at the head of the queue that gives
// up does not block the ones behind it that fit.
func TestLimiterCancelledWaiterLetsOthersIn(t *testing.T) {
	l := NewLimiter(LimiterOptions{MaxSyncs: 100, MaxObjects: 1000})
	a, _ := acquireNow(t, l, 500)
	ctx, cancel := context.WithCancel(t.Context())
	headDone := make(chan error)
	go func() {
		_, err := l.Acquire(ctx, 900)
		headDone <- err
	}()
	time.Sleep(10 * time.Millisecond)
	small := make(chan Grant)
	go func() {
		g, err := l.Acquire(t.Context(), 100)
		if err != nil {
			t.Error(err)
		}
		small <- g
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	if err := <-headDone; err == nil {
		t.Error("a cancelled Acquire succeeded")
	}
	select {
	case g := <-small:
		g.Release()
	case <-time.After(10 * time.Second):
		t.Fatal("the small sync behind a cancelled waiter did not start")
	}
	a.Release()
}

func TestUnreachableClusterGivesBackItsSlot(t *testing.T) {
	// Nothing listens on this address: the first request fails at once.
	s, l := startWithTheOnlySlot(t, "down", &rest.Config{Host: "http://127.0.0.1:1", Timeout: time.Second})
	// A second cluster gets the only slot long before the first one's sync timeout.
	if !slotGivenBack(t, l, 30*time.Second) {
		t.Fatalf("the slot of an unreachable cluster was not given back (last error: %v)", s.Status()[0].LastError)
	}
}

// startWithTheOnlySlot starts a Set of the pods of the cluster at cfg, whose limiter has
// one slot and whose sync timeout is an hour, and returns it once it holds the slot,
// with the limiter.
func startWithTheOnlySlot(t *testing.T, cluster string, cfg *rest.Config) (*Set, Limiter) {
	t.Helper()
	l := &signalingLimiter{Limiter: NewLimiter(LimiterOptions{MaxSyncs: 1}), acquired: make(chan struct{})}
	s, err := New(Options{
		Cluster:            cluster,
		Config:             cfg,
		Resources:          []Resource{{Name: "pods"}},
		Sink:               nopSink{},
		InitialSyncLimiter: l,
		SyncTimeout:        time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() { _ = s.Start(ctx) }()
	<-l.acquired
	return s, l.Limiter
}

// slotGivenBack reports whether another cluster gets l's only slot within wait.
func slotGivenBack(t *testing.T, l Limiter, wait time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	g, err := l.Acquire(ctx, 0)
	if err != nil {
		return false
	}
	g.Release()
	return true
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
	l := &signalingLimiter{Limiter: NewLimiter(LimiterOptions{MaxSyncs: 1}), acquired: make(chan struct{})}
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
	other, err := l.Acquire(t.Context(), 0)
	if err != nil {
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
	other.Release()
	select {
	case <-s.Listing():
	case <-time.After(10 * time.Second):
		t.Fatal("the initial sync did not begin once the slot was free")
	}
	began := time.Now()
	actx, acancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer acancel()
	g, err := l.Limiter.Acquire(actx, 0)
	if err != nil {
		t.Fatalf("the slot of a hung cluster was not given back: %v", err)
	}
	if held := time.Since(began); held < syncTimeout*3/4 {
		t.Errorf("the slot was given back after %v, before the sync timeout (%v)", held, syncTimeout)
	}
	g.Release()
}

// signalingLimiter closes acquired on its first Acquire.
type signalingLimiter struct {
	Limiter
	once     sync.Once
	acquired chan struct{}
}

func (l *signalingLimiter) Acquire(ctx context.Context, expected int) (Grant, error) {
	g, err := l.Limiter.Acquire(ctx, expected)
	l.once.Do(func() { close(l.acquired) })
	return g, err
}

type nopSink struct{}

func (nopSink) Store(Scope) Store                          { return nil }
func (nopSink) RemoveResource(schema.GroupVersionResource) {}
