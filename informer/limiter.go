package informer

import (
	"context"
	"slices"
	"sync"
)

// Limiter bounds the initial syncs that run at once across a fleet, so that starting
// many clusters is not a thundering herd. A fleet's Sets share one.
type Limiter interface {
	// Acquire blocks until the initial sync of a cluster that is expected to list about
	// expected objects (0: not known) may begin, or ctx is done; it then returns a
	// Grant, which the caller releases once, when the sync is over.
	Acquire(ctx context.Context, expected int) (Grant, error)
}

// Grant is a sync's admission by a Limiter.
type Grant interface {
	// Listed counts n more objects received by the sync, which may weigh more than it
	// was expected to. It may be called from any goroutine, also after Release (it then
	// does nothing).
	Listed(n int)
	// Release ends the grant: its objects no longer count. Only the first call counts.
	Release()
}

// Defaults of LimiterOptions.
const (
	// DefaultMaxConcurrentSyncs is the most clusters that do their initial sync at once.
	DefaultMaxConcurrentSyncs = 256
	// DefaultMaxSyncObjects is the most objects that the initial syncs list at once.
	DefaultMaxSyncObjects = 100_000
	// blindShare is the share of MaxObjects that a sync of unknown size counts for until
	// some sync has completed: at most that many start before the fleet knows what a
	// cluster holds.
	blindShare = 8
	// sizeHistory is how many completed syncs the estimate of an unknown cluster's size
	// is taken from.
	sizeHistory = 64
)

// LimiterOptions configure NewLimiter. The zero value uses every default.
type LimiterOptions struct {
	// MaxSyncs is the most syncs at once, whatever their size. Default
	// DefaultMaxConcurrentSyncs.
	MaxSyncs int
	// MaxObjects is the most objects listed at once by the syncs under way. A sync
	// counts for the objects it has received so far, or for those it is expected to
	// list, whichever is more: the expected count its Set gives (the objects a snapshot
	// held), else the median of the last syncs that completed, else, before any has,
	// MaxObjects/8, so that at most 8 clusters of unknown size start blind. A sync
	// always starts when no other runs, however large. Default DefaultMaxSyncObjects.
	MaxObjects int
}

// NewLimiter returns a Limiter that follows the work: many small clusters sync
// together, up to opts.MaxSyncs at once, while clusters with many objects take turns
// within opts.MaxObjects (see LimiterOptions). Admissions are first come, first served.
func NewLimiter(opts LimiterOptions) Limiter {
	if opts.MaxSyncs <= 0 {
		opts.MaxSyncs = DefaultMaxConcurrentSyncs
	}
	if opts.MaxObjects <= 0 {
		opts.MaxObjects = DefaultMaxSyncObjects
	}
	return &workLimiter{opts: opts}
}

// workLimiter is the Limiter of NewLimiter.
type workLimiter struct {
	opts LimiterOptions

	// mu guards the fields below and those of every grant.
	mu sync.Mutex
	// active counts the grants not released; weight is the sum of their weights.
	active, weight int
	// sizes are the objects listed by the last syncs that completed, oldest first.
	sizes []int
	// waiting are the Acquires blocked, in arrival order.
	waiting []*waiter
}

type waiter struct {
	expected int
	// ready is closed once the waiter is admitted, with g set.
	ready chan struct{}
	g     *grant
}

// grant is a Grant of a workLimiter.
type grant struct {
	l *workLimiter
	// expected is what the sync's Set expected it to list (0: not known), estimate what
	// it counted for when it started, listed what it has received.
	expected, estimate, listed int
	released                   bool
}

var (
	_ Limiter = (*workLimiter)(nil)
	_ Grant   = (*grant)(nil)
)

func (l *workLimiter) Acquire(ctx context.Context, expected int) (Grant, error) {
	l.mu.Lock()
	if len(l.waiting) == 0 && l.admitsLocked(l.estimateLocked(expected)) {
		g := l.grantLocked(expected)
		l.mu.Unlock()
		return g, nil
	}
	w := &waiter{expected: expected, ready: make(chan struct{})}
	l.waiting = append(l.waiting, w)
	l.mu.Unlock()
	select {
	case <-w.ready:
		return w.g, nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if i := slices.Index(l.waiting, w); i >= 0 {
			l.waiting = slices.Delete(l.waiting, i, i+1)
			// The waiters behind it may fit now.
			l.admitWaitingLocked()
			return nil, context.Cause(ctx)
		}
		// Admitted meanwhile: the grant is the caller's, as if Acquire had returned.
		return w.g, nil
	}
}

// estimateLocked is what a sync expected to list expected objects (0: unknown) counts
// for when it starts.
func (l *workLimiter) estimateLocked(expected int) int {
	switch {
	case expected > 0:
		return expected
	case len(l.sizes) > 0:
		sorted := slices.Sorted(slices.Values(l.sizes))
		return max(sorted[len(sorted)/2], 1)
	default:
		return max(l.opts.MaxObjects/blindShare, 1)
	}
}

// admitsLocked reports whether a sync counting for estimate objects may start now.
func (l *workLimiter) admitsLocked(estimate int) bool {
	if l.active == 0 {
		return true
	}
	return l.active < l.opts.MaxSyncs && l.weight+estimate <= l.opts.MaxObjects
}

func (l *workLimiter) grantLocked(expected int) *grant {
	g := &grant{l: l, expected: expected, estimate: l.estimateLocked(expected)}
	l.active++
	l.weight += g.estimate
	return g
}

// admitWaitingLocked admits the waiters at the head of the queue for as long as they
// fit, in order.
func (l *workLimiter) admitWaitingLocked() {
	for len(l.waiting) > 0 {
		w := l.waiting[0]
		if !l.admitsLocked(l.estimateLocked(w.expected)) {
			return
		}
		w.g = l.grantLocked(w.expected)
		l.waiting = l.waiting[1:]
		close(w.ready)
	}
}

// weight is what g counts for: the objects it received, or its estimate if more.
func (g *grant) weight() int { return max(g.estimate, g.listed) }

func (g *grant) Listed(n int) {
	if n <= 0 {
		return
	}
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.released {
		return
	}
	before := g.weight()
	g.listed += n
	l.weight += g.weight() - before
}

func (g *grant) Release() {
	l := g.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.released {
		return
	}
	g.released = true
	l.active--
	l.weight -= g.weight()
	// What the cluster holds, as far as is known: a sync that resumed from a snapshot
	// lists nothing, and an unreachable cluster gives its grant back at once; neither
	// says what the next cluster will list.
	if size := max(g.listed, g.expected); size > 0 {
		l.sizes = append(l.sizes, size)
		if len(l.sizes) > sizeHistory {
			l.sizes = slices.Delete(l.sizes, 0, len(l.sizes)-sizeHistory)
		}
	}
	l.admitWaitingLocked()
}
