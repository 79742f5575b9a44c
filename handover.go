package fleetwatch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/shard"
)

// Defaults of HandoverOptions.
const (
	DefaultHandoverTimeout = 10 * time.Second
	DefaultHandoverKeep    = time.Minute
)

// HandoverOptions configure the warm handover of clusters between replicas (see
// Options.Handover). The transfer itself is the caller's: this package does no HTTP.
type HandoverOptions struct {
	// Fetcher fetches a handed-over cluster's state from its old owner. Default nil: a
	// cluster that moves starts cold on its new owner.
	Fetcher StateFetcher
	// Timeout bounds the fetch and the import of one cluster's state; past it, or on any
	// error, the cluster starts cold. The cluster is watched by no one meanwhile. Default
	// DefaultHandoverTimeout.
	Timeout time.Duration
	// Keep is how long the old owner keeps a moved cluster's state for its new owner,
	// which fetches it within a retry period or so of the move. Default
	// DefaultHandoverKeep.
	Keep time.Duration
}

// StateFetcher fetches the state of a cluster that another replica handed over: the
// stream that the old owner's Manager.HandoverState returned, as persist.Store's
// ExportCluster writes it. FetchState must end when ctx does; the caller closes the
// stream. A failure that another attempt may not meet, of FetchState or of a Read of
// the stream (a connection refused or reset, a 5xx, a stream cut short), is a
// *TransientError, which Manager.Receive tries again; any other (a 401, 403 or 404, a
// certificate not trusted) starts the cluster cold at once. FetchState may be called
// for several clusters at once.
type StateFetcher interface {
	FetchState(ctx context.Context, h shard.Handover) (io.ReadCloser, error)
}

// StateAcknowledger is a StateFetcher that can tell the old owner that the state of a
// cluster was received whole (imported, or found corrupt, which another attempt would
// not mend), so that it forgets it (see Manager.HandoverReceived). The old owner keeps
// a state until then, or for HandoverOptions.Keep, so that an attempt that broke off
// half-way can be made again. An error is logged only.
type StateAcknowledger interface {
	AcknowledgeState(ctx context.Context, h shard.Handover) error
}

// handoff is the state of a cluster handed over, kept for its new owner.
type handoff struct {
	state   []byte
	expires time.Time
}

// keepHandoff keeps the stored state of a cluster whose informers stopped on a planned
// move, for HandoverOptions.Keep, once the snapshot writer has committed what they
// delivered. Without a snapshot there is nothing to hand over.
func (m *Manager) keepHandoff(ctx context.Context, name string) {
	if m.writer == nil || m.opts.Handover.Fetcher == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("cluster", name)
	fctx, cancel := context.WithTimeout(ctx, m.handoverTimeout())
	defer cancel()
	if err := m.writer.Flush(fctx); err != nil {
		logger.Error(err, "Committing a moved cluster's state failed; its new owner starts it cold")
		return
	}
	var buf bytes.Buffer
	// The cluster's change log goes with it, so that a watch resumes on the new owner.
	if err := m.opts.Snapshot.ExportCluster(name, &buf, persist.ExportOptions{LogOrigins: m.logBases.origins(name)}); err != nil {
		logger.Error(err, "Exporting a moved cluster's state failed; its new owner starts it cold")
		return
	}
	keep := cmp.Or(m.opts.Handover.Keep, DefaultHandoverKeep)
	h := &handoff{state: buf.Bytes(), expires: m.opts.Clock.Now().Add(keep)}
	m.mu.Lock()
	if m.handoffs == nil {
		m.handoffs = map[string]*handoff{}
	}
	m.handoffs[name] = h
	m.sweepHandoffsLocked()
	m.mu.Unlock()
	logger.Info("Keeping a moved cluster's state for its new owner", "bytes", buf.Len(), "keep", keep)
}

// HandoverState returns the state of a cluster that this replica handed over on a
// planned move, for its new owner to import (see StateFetcher), if it still keeps it:
// the cluster's objects and resourceVersions, in persist's ExportCluster format. The
// state is kept, the same bytes given to every call, until its new owner says that it
// received it whole (HandoverReceived), or for HandoverOptions.Keep: a transfer that
// broke off half-way can thus be made again. It holds whole objects of the cluster
// (never the values of Secrets unless Options.KeepSecretData): serve it to the other
// replicas only. The returned slice must not be modified.
func (m *Manager) HandoverState(name string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepHandoffsLocked()
	h := m.handoffs[name]
	if h == nil {
		return nil, false
	}
	return h.state, true
}

// HandoverReceived forgets the state of cluster name that HandoverState gives, once its
// new owner has received it whole (see StateAcknowledger). It reports whether the state
// was still kept.
func (m *Manager) HandoverReceived(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.handoffs[name]
	delete(m.handoffs, name)
	return ok
}

// sweepHandoffsLocked forgets the states kept past their time.
func (m *Manager) sweepHandoffsLocked() {
	now := m.opts.Clock.Now()
	for name, h := range m.handoffs {
		if !now.Before(h.expires) {
			delete(m.handoffs, name)
		}
	}
}

func (m *Manager) handoverTimeout() time.Duration {
	return cmp.Or(m.opts.Handover.Timeout, DefaultHandoverTimeout)
}

// specs returns the Specs of the configured resources: saved state of any other was
// made under another configuration.
func (m *Manager) specs() map[string]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	setOpts := informer.Options{KeepManagedFields: m.opts.KeepManagedFields, KeepSecretData: m.opts.KeepSecretData, TransformID: m.opts.TransformID}
	specs := map[string]bool{}
	for _, r := range m.opts.Resources {
		specs[setOpts.Spec(r)] = true
	}
	return specs
}

// errConfiguredDifferently: a handed-over state holds a resource configured otherwise
// here.
var errConfiguredDifferently = errors.New("the old owner's resource is configured differently here")

// handoverBackoff paces the attempts of a handover's fetch: 200 ms, doubled up to 2 s,
// within HandoverOptions.Timeout.
var handoverBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 2 * time.Second}

// Receive implements shard.Receiver: it fetches the state of a cluster handed over to
// this replica and imports it into the snapshot and the fleet, so that Engage resumes
// the cluster's watches from the old owner's resourceVersions, once the cluster's
// identity is confirmed as after a restart. A transient failure (a *TransientError) is
// tried again with backoff, and at the Retry-After the old owner asked for, as long as
// HandoverOptions.Timeout allows; if anything else fails, or the state was made under
// another configuration of the resources, the cluster starts cold. Once the state was
// received whole, a StateAcknowledger tells the old owner. Receive may be called for
// several clusters at once.
func (m *Manager) Receive(ctx context.Context, h shard.Handover) {
	if m.opts.Handover.Fetcher == nil || m.writer == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("cluster", h.Cluster, "from", h.From)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, m.handoverTimeout())
	defer cancel()
	backoff := handoverBackoff
	for attempt := 1; ; attempt++ {
		sv, objects, err := m.receive(ctx, h)
		var transient *TransientError
		if err == nil || !errors.As(err, &transient) {
			// The state was received whole, or refused: another attempt gets nothing else.
			m.acknowledge(ctx, h, err)
		}
		if err == nil {
			m.mu.Lock()
			m.saved[h.Cluster] = sv
			m.mu.Unlock()
			m.status.Set(aggregate.ClusterStatus{Name: h.Cluster, Server: sv.identity.Server, UID: sv.identity.UID, Phase: aggregate.PhaseStale})
			logger.Info("Took the cluster's state over from its old owner", "scopes", len(sv.scopes), "objects", objects, "attempts", attempt, "took", time.Since(start))
			return
		}
		if transient == nil || ctx.Err() != nil {
			logger.Info("Warm handover failed; starting the cluster cold", "err", err.Error(), "attempts", attempt, "took", time.Since(start))
			return
		}
		// Timeout is measured on the real clock, as ctx's deadline is.
		delay := max(backoff.Step(), transient.RetryAfter)
		if deadline, _ := ctx.Deadline(); time.Until(deadline) <= delay {
			logger.Info("Warm handover failed, and another attempt would pass shard.handoverTimeout; starting the cluster cold", "err", err.Error(), "attempts", attempt, "took", time.Since(start))
			return
		}
		logger.V(1).Info("Fetching the cluster's state failed; trying again", "err", err.Error(), "attempt", attempt, "in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

func (m *Manager) receive(ctx context.Context, h shard.Handover) (*saved, int, error) {
	// A drop of the cluster still pending (it was here before) must not land on the
	// import.
	if err := m.writer.Flush(ctx); err != nil {
		return nil, 0, err
	}
	rc, err := m.opts.Handover.Fetcher.FetchState(ctx, h)
	if err != nil {
		return nil, 0, fmt.Errorf("fetching the state: %w", err)
	}
	defer rc.Close()
	specs := m.specs()
	cs, err := m.opts.Snapshot.ImportCluster(h.Cluster, rc, persist.ImportOptions{Log: m.logEpoch != ""})
	if err != nil {
		return nil, 0, err
	}
	for key := range cs.Resources {
		scope, err := informer.ParseScope(string(key))
		if err != nil || !specs[scope.Spec] {
			m.writer.DropCluster(h.Cluster)
			return nil, 0, fmt.Errorf("%w: %q", errConfiguredDifferently, key)
		}
	}
	// What this replica held of the cluster (an old snapshot's) gives way to it.
	m.mu.Lock()
	delete(m.saved, h.Cluster)
	m.mu.Unlock()
	m.logBases.forget(h.Cluster, schema.GroupVersionResource{})
	m.fleet.RemoveCluster(h.Cluster)
	snap := &persist.Snapshot{Clusters: map[string]*persist.ClusterSnapshot{h.Cluster: cs}}
	sv := seed(ctx, m.fleet, snap, specs, m.opts.Snapshot, m.logBases)[h.Cluster]
	n := 0
	for _, s := range sv.scopes {
		n += len(s.objects)
	}
	return sv, n, nil
}

// acknowledge tells the old owner, through a StateAcknowledger, that the state of h was
// received whole, unless the fetch failed before a stream came (err holds no answer of
// the import): a 401, 403 or 404 has nothing to forget.
func (m *Manager) acknowledge(ctx context.Context, h shard.Handover, err error) {
	ack, ok := m.opts.Handover.Fetcher.(StateAcknowledger)
	if !ok || err != nil && !errors.Is(err, persist.ErrCorrupt) && !errors.Is(err, errConfiguredDifferently) {
		return
	}
	if err := ack.AcknowledgeState(ctx, h); err != nil {
		klog.FromContext(ctx).Info("Telling the old owner that the cluster's state was received failed; it keeps it until it expires", "cluster", h.Cluster, "from", h.From, "err", err.Error())
	}
}

// keepHandoffs keeps the states of every cluster engaged, whose informers have stopped,
// as the replica stops.
func (m *Manager) keepHandoffs(ctx context.Context) {
	if m.writer == nil || m.opts.Handover.Fetcher == nil {
		return
	}
	m.mu.Lock()
	names := slices.Sorted(maps.Keys(m.members))
	m.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	for _, name := range names {
		m.keepHandoff(ctx, name)
	}
}

// waitHandoffs waits, once ctx is done, until the new owners have received every state
// kept (HandoverReceived), at most HandoverOptions.Keep and half of GracefulShutdownTimeout.
func (m *Manager) waitHandoffs(ctx context.Context) error {
	<-ctx.Done()
	limit := min(cmp.Or(m.opts.Handover.Keep, DefaultHandoverKeep), m.opts.GracefulShutdownTimeout/2)
	deadline := time.Now().Add(limit)
	for {
		m.mu.Lock()
		m.sweepHandoffsLocked()
		n := len(m.handoffs)
		m.mu.Unlock()
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			klog.FromContext(ctx).Info("Stopping before the new owners fetched the states of the clusters handed over; they start cold", "clusters", n, "waited", limit)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}
