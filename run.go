package fleetwatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"
)

// DefaultGracefulShutdownTimeout is the default of Options.GracefulShutdownTimeout.
const DefaultGracefulShutdownTimeout = 30 * time.Second

// Runnable is a part of a program that runs with a Manager, such as an HTTP server that
// serves its cache. Start blocks until ctx is done, then stops and returns. An error
// returned before ctx is done stops the Manager.
type Runnable interface {
	Start(ctx context.Context) error
}

// RunnableFunc is a Runnable of a function.
type RunnableFunc func(ctx context.Context) error

// Start implements Runnable.
func (f RunnableFunc) Start(ctx context.Context) error { return f(ctx) }

var _ Runnable = RunnableFunc(nil)

// Add adds r to the Manager: Start runs it, and stops it last, after the fleet's
// handlers, within the same Options.GracefulShutdownTimeout. A server that reads the
// cache thus answers until the cache has stopped changing. Add must be called before
// Start; afterwards it returns ErrAlreadyStarted.
func (m *Manager) Add(r Runnable) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return ErrAlreadyStarted
	}
	m.runnables = append(m.runnables, r)
	return nil
}

// Start runs the fleet, and the Runnables added with Add, until ctx is done or one of
// them fails. Then it stops them in order, each group from the GracefulShutdownTimeout
// that the groups before it left:
//
//  1. the clusters, the sources of events (their informers, probes and the Provider);
//  2. the snapshot writer, whose last commit saves what they delivered;
//  3. the fleet's handlers, so that no handler misses an event that was already cached;
//  4. with Options.Handover, the wait for the new owners of the clusters this replica
//     handed over to receive their states (see Manager.HandoverReceived), at most
//     HandoverOptions.Keep and half the budget;
//  5. the Runnables, together, so that servers answer until the cache stops changing
//     and the states are received.
//
// The budget is measured on the real clock, not Options.Clock. Once it is spent, Start
// cancels every group that is left and returns without waiting for them, with an error
// wrapping ErrShutdownTimeout that names the part it was waiting for; so a caller always
// reaches the close of Options.Snapshot, which waits for a commit still in progress.
// Start returns ErrAlreadyStarted if called twice.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return ErrAlreadyStarted
	}
	m.started = true
	runnables := m.runnables
	m.mu.Unlock()

	// ended receives once per part that returns, so that a part that fails early stops
	// the rest.
	ended := make(chan struct{}, 3+len(runnables))
	start := func(name string, run func(context.Context) error) *part {
		return startPart(ctx, name, run, ended)
	}
	groups := [][]*part{
		nil, // the clusters, started last, once what they feed runs
		{start("snapshot writer", func(ctx context.Context) error {
			// Nothing is written before the snapshot is loaded: the informers wait for it.
			if !m.awaitLoaded(ctx) || m.writer == nil {
				<-ctx.Done()
				return nil
			}
			return m.writer.Start(ctx)
		})},
		{start("fleet handlers", m.fleet.Start)},
		{start("handovers", m.waitHandoffs)},
		nil,
	}
	for i, r := range runnables {
		groups[4] = append(groups[4], start(fmt.Sprintf("runnable %d", i), r.Start))
	}
	groups[0] = []*part{start("clusters", m.runClusters)}

	select {
	case <-ctx.Done():
	case <-ended:
	}
	return stopInOrder(ctx, m.opts.GracefulShutdownTimeout, groups)
}

// runClusters runs the Provider until ctx is done, and returns once the goroutines of
// every engaged cluster have returned. With Options.Shard, the Coordinator runs from
// before the Provider engages any cluster until after they have all stopped: it
// releases the clusters' Leases last, since another replica starts watching a released
// cluster at once.
func (m *Manager) runClusters(ctx context.Context) error {
	if m.shard == nil {
		err := m.provider.Start(ctx)
		m.wg.Wait()
		m.drainIdentities(ctx)
		return err
	}
	sctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	shardDone := make(chan error, 1)
	go func() { shardDone <- m.shard.Start(sctx) }()
	err := m.provider.Start(ctx)
	m.shard.Freeze()
	m.wg.Wait()
	m.drainIdentities(ctx)
	// A stop is a planned move: the Coordinator's release names this replica as the one
	// that keeps their states.
	m.keepHandoffs(ctx)
	stop()
	return errors.Join(err, <-shardDone)
}

// part is one goroutine of Start.
type part struct {
	name   string
	cancel context.CancelCauseFunc
	// done is closed once run has returned, with err.
	done chan struct{}
	err  error
}

// startPart runs run in a goroutine, with a context that carries the values of parent
// but ends only when the part is cancelled, and sends on ended when run returns.
func startPart(parent context.Context, name string, run func(context.Context) error, ended chan<- struct{}) *part {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	p := &part{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer func() { ended <- struct{}{} }()
		defer close(p.done)
		p.err = run(ctx)
	}()
	return p
}

// stopInOrder cancels each group of parts, with the cause of ctx, and waits for it,
// before the next, all within budget.
func stopInOrder(ctx context.Context, budget time.Duration, groups [][]*part) error {
	logger := klog.FromContext(ctx)
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	var errs []error
	for i, group := range groups {
		for _, p := range group {
			p.cancel(context.Cause(ctx))
		}
		for _, p := range group {
			select {
			case <-p.done:
				if p.err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", p.name, p.err))
				}
				continue
			case <-deadline.C:
			}
			for _, rest := range groups[i+1:] {
				for _, p := range rest {
					p.cancel(context.Cause(ctx))
				}
			}
			logger.Info("Graceful shutdown timed out; not waiting for the rest", "waitingFor", p.name, "timeout", budget)
			return errors.Join(append(errs, fmt.Errorf("%s still stopping after %v: %w", p.name, budget, ErrShutdownTimeout))...)
		}
	}
	return errors.Join(errs...)
}
