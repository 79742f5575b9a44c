package informer

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
