package fleetwatch

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// A cold start of thousands of clusters is bound by CPU, the apiservers' as much as the
// daemon's: each request costs an apiserver a fraction of a millisecond whatever it
// asks (a health probe of /readyz 0.4 ms, a list of 20 pods 1.2 ms, in the
// kube-apiserver 1.36 of the tests). Two requests of each cluster's start are not needed
// for its sync: the first health probe, whose answer the cluster's lists give too, and
// the identity of a cluster without saved state, which only a later start compares with.
// So they wait until the fleet is first ready (Manager.Ready, when its sync hold is
// released), rather than compete with the lists that readiness waits for; the probes are
// then spread over a moment, and the identities read at once, so that a stop soon after
// finds them read. A cluster that has not synced firstProbeDelay after its
// turn among the initial syncs is probed then, so that a dead cluster among thousands is
// reported Unreachable without waiting for the others; and no cluster waits more than
// a health interval for its first probe.

// The snapshot's commits wait the same way in a fleet of commitHoldClusters or more:
// until it is ready, the writer commits once per interval, not also every
// WriterOptions.MaxPending changes. An initial sync of thousands of small clusters is
// thousands of small checkpointed lists, and each commit rewrites the pages of every
// cluster it touches: at 1,000 clusters, the commits every MaxPending changes took a
// fifth of the CPU of the start. What the sync listed is then committed at once when
// the fleet is ready. A fleet of fewer, larger clusters keeps committing each large list
// as it comes, so that no commit holds the encodings of all of them at once.

// commitHoldClusters is the number of clusters from which the snapshot's commits wait
// for the fleet to be ready.
var commitHoldClusters = 100

// firstProbeDelay is how long a cluster's initial sync may run before its first health
// probe, if the fleet is not ready sooner.
var firstProbeDelay = 5 * time.Second

// releaseSpreadPerCall spreads the calls deferred until the fleet is ready: over this
// much per call, at most a health interval.
const releaseSpreadPerCall = time.Millisecond

// deferredCall is a call of afterReady: f, called at most once, by run.
type deferredCall struct {
	m    *Manager
	ctx  context.Context
	f    func()
	once sync.Once
	// atOnce has runDeferred run it at once rather than spread with the others.
	atOnce bool
}

// run calls f, unless ctx has ended or the call was run or dropped before. It is safe
// to call from any goroutine, any number of times.
func (d *deferredCall) run() { d.finish(true) }

// finish calls f if call is set and ctx has not ended, the first time it is called, and
// gives back what the call held of the Manager's WaitGroup.
func (d *deferredCall) finish(call bool) {
	d.once.Do(func() {
		defer d.m.wg.Done()
		if call && d.ctx.Err() == nil {
			d.f()
		}
	})
}

// deferCall returns a call of f, which holds the Manager's WaitGroup, so that Start
// returns after it, until it has run, or been dropped because ctx ended.
func (m *Manager) deferCall(ctx context.Context, f func()) *deferredCall {
	d := &deferredCall{m: m, ctx: ctx, f: f}
	m.wg.Add(1)
	context.AfterFunc(ctx, func() { d.finish(false) })
	return d
}

// afterReady runs d once the fleet is first ready, at a random moment of the spread of
// the calls deferred so, or at once if it is ready already. It may be run earlier.
func (m *Manager) afterReady(d *deferredCall) {
	m.mu.Lock()
	if m.readyOnce {
		m.mu.Unlock()
		d.run()
		return
	}
	m.deferred = append(m.deferred, d)
	m.mu.Unlock()
}

// runDeferred runs the calls that waited for the fleet to be ready: those atOnce at once,
// the others spread over a moment, releaseSpreadPerCall each, at most a health interval
// in all.
func (m *Manager) runDeferred() {
	m.mu.Lock()
	m.readyOnce = true
	calls := m.deferred
	m.deferred = nil
	writer, timing, held := m.writer, m.opts.SnapshotWriter, m.commitsHeld
	m.commitsHeld = false
	m.mu.Unlock()
	if writer != nil && held {
		writer.SetTiming(timing.Interval, timing.MaxPending)
	}
	spread := min(time.Duration(len(calls))*releaseSpreadPerCall, cmp.Or(m.opts.Health.Interval, cluster.DefaultHealthInterval))
	for _, d := range calls {
		if d.atOnce || spread <= 0 {
			d.run()
			continue
		}
		time.AfterFunc(rand.N(spread), d.run)
	}
}

// identityWorkers is how many identities of clusters started cold are read at once.
const identityWorkers = 64

// identityDrainTimeout bounds the reads of drainIdentities at a stop.
const identityDrainTimeout = 2 * time.Second

// identityReader reads the identities of clusters, identityWorkers at a time: once the
// fleet is ready, thousands of clusters ask at once, and a goroutine each would be
// thousands of goroutines for a moment.
type identityReader struct {
	// mu guards queue, workers and unread.
	mu      sync.Mutex
	queue   []identityRead
	workers int
	// unread holds the clusters started cold whose identity is still to be read,
	// queued or not.
	unread map[*member]struct{}
}

// pending records that mb's identity is to be read.
func (r *identityReader) pending(mb *member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.unread == nil {
		r.unread = map[*member]struct{}{}
	}
	r.unread[mb] = struct{}{}
}

// forget records that mb's identity is read, or no longer wanted.
func (r *identityReader) forget(mb *member) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.unread, mb)
}

// takeUnread returns the clusters whose identity is still to be read, and forgets them.
func (r *identityReader) takeUnread() []*member {
	r.mu.Lock()
	defer r.mu.Unlock()
	mbs := make([]*member, 0, len(r.unread))
	for mb := range r.unread {
		mbs = append(mbs, mb)
	}
	r.unread = nil
	return mbs
}

// identityRead is a cluster whose identity is to be read, with the context it is read in.
type identityRead struct {
	ctx context.Context
	mb  *member
}

// add queues the read of mb's identity, and starts a worker if fewer than
// identityWorkers run. The workers hold the Manager's WaitGroup.
func (r *identityReader) add(ctx context.Context, m *Manager, mb *member) {
	r.mu.Lock()
	r.queue = append(r.queue, identityRead{ctx: ctx, mb: mb})
	start := r.workers < identityWorkers
	if start {
		r.workers++
	}
	r.mu.Unlock()
	if !start {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			r.mu.Lock()
			if len(r.queue) == 0 {
				r.workers--
				r.mu.Unlock()
				return
			}
			next := r.queue[0]
			r.queue = r.queue[1:]
			r.mu.Unlock()
			if next.ctx.Err() != nil {
				continue
			}
			// One attempt here; a cluster that does not answer retries on its own, a
			// second later, so that it holds up none of the others.
			if _, err := m.tryIdentity(next.ctx, next.mb); err != nil {
				m.wg.Add(1)
				go func() {
					defer m.wg.Done()
					select {
					case <-next.ctx.Done():
						return
					case <-m.opts.Clock.After(time.Second):
					}
					m.readIdentity(next.ctx, next.mb)
				}()
			}
		}
	}()
}

// holdCommitsLocked has the snapshot writer commit once per interval only, until the
// fleet is ready, once the fleet has commitHoldClusters clusters, engaged or selected.
// m.mu is held.
func (m *Manager) holdCommitsLocked() {
	if m.readyOnce || m.commitsHeld || m.writer == nil {
		return
	}
	// Until it holds, the fleet is smaller than commitHoldClusters, or this runs once.
	n := len(m.members)
	for name := range m.unengaged {
		if m.members[name] == nil {
			n++
		}
	}
	if n < commitHoldClusters {
		return
	}
	m.commitsHeld = true
	m.writer.SetTiming(m.opts.SnapshotWriter.Interval, math.MaxInt)
}

// drainIdentities reads, once the clusters have stopped, the identities of the clusters
// started cold that are still unread, identityWorkers at a time and within
// identityDrainTimeout, so that the snapshot's last commit has them: a cluster saved
// without its identity is taken as changed at the next start, and syncs cold. A stop
// soon after the fleet is ready (a restart, a rolling update) comes before the reads
// that the fleet's readiness started have all answered.
func (m *Manager) drainIdentities(ctx context.Context) {
	if m.snapshotWriter() == nil {
		return
	}
	var current []*member
	for _, mb := range m.identities.takeUnread() {
		m.mu.Lock()
		ok := m.members[mb.cluster.Name] == mb
		m.mu.Unlock()
		if ok {
			current = append(current, mb)
		}
	}
	if len(current) == 0 {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), identityDrainTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(identityWorkers)
	var unread atomic.Int32
	for _, mb := range current {
		g.Go(func() error {
			// A cluster that does not answer in time is saved without its identity.
			if _, err := m.tryIdentity(dctx, mb); err != nil {
				unread.Add(1)
			}
			return nil
		})
	}
	_ = g.Wait()
	klog.FromContext(ctx).V(2).Info("Read the identities still unread at the stop", "clusters", len(current), "unread", unread.Load())
}
