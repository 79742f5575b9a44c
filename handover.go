package fleetwatch

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

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
// stream.
type StateFetcher interface {
	FetchState(ctx context.Context, h shard.Handover) (io.ReadCloser, error)
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
	if err := m.opts.Snapshot.ExportCluster(name, &buf); err != nil {
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
// state is given once: the Manager forgets it then (the new owner that fails to import
// it starts cold), or after HandoverOptions.Keep. It holds whole objects of the cluster
// (never the values of Secrets unless Options.KeepSecretData): serve it to the other
// replicas only.
func (m *Manager) HandoverState(name string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweepHandoffsLocked()
	h := m.handoffs[name]
	if h == nil {
		return nil, false
	}
	delete(m.handoffs, name)
	return h.state, true
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
	setOpts := informer.Options{KeepManagedFields: m.opts.KeepManagedFields, KeepSecretData: m.opts.KeepSecretData, TransformID: m.opts.TransformID}
	specs := map[string]bool{}
	for _, r := range m.opts.Resources {
		specs[setOpts.Spec(r)] = true
	}
	return specs
}

// Receive implements shard.Receiver: it fetches the state of a cluster handed over to
// this replica and imports it into the snapshot and the fleet, so that Engage resumes
// the cluster's watches from the old owner's resourceVersions, once the cluster's
// identity is confirmed as after a restart. If anything fails, or the state was made
// under another configuration of the resources, the cluster starts cold.
func (m *Manager) Receive(ctx context.Context, h shard.Handover) {
	if m.opts.Handover.Fetcher == nil || m.writer == nil {
		return
	}
	logger := klog.FromContext(ctx).WithValues("cluster", h.Cluster, "from", h.From)
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, m.handoverTimeout())
	defer cancel()
	sv, objects, err := m.receive(ctx, h)
	if err != nil {
		logger.Info("Warm handover failed; starting the cluster cold", "err", err.Error())
		return
	}
	m.mu.Lock()
	m.saved[h.Cluster] = sv
	m.mu.Unlock()
	m.status.Set(aggregate.ClusterStatus{Name: h.Cluster, Server: sv.identity.Server, UID: sv.identity.UID, Phase: aggregate.PhaseStale})
	logger.Info("Took the cluster's state over from its old owner", "scopes", len(sv.scopes), "objects", objects, "took", time.Since(start))
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
	cs, err := m.opts.Snapshot.ImportCluster(h.Cluster, rc)
	if err != nil {
		return nil, 0, err
	}
	for key := range cs.Resources {
		scope, err := informer.ParseScope(string(key))
		if err != nil || !specs[scope.Spec] {
			m.writer.DropCluster(h.Cluster)
			return nil, 0, fmt.Errorf("the old owner's resource %q is configured differently here", key)
		}
	}
	// What this replica held of the cluster (an old snapshot's) gives way to it.
	m.mu.Lock()
	delete(m.saved, h.Cluster)
	m.mu.Unlock()
	m.fleet.RemoveCluster(h.Cluster)
	snap := &persist.Snapshot{Clusters: map[string]*persist.ClusterSnapshot{h.Cluster: cs}}
	sv := seed(ctx, m.fleet, snap, specs, m.opts.Snapshot)[h.Cluster]
	n := 0
	for _, s := range sv.scopes {
		n += len(s.objects)
	}
	return sv, n, nil
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

// waitHandoffs waits, once ctx is done, until the new owners have fetched every state
// kept, at most HandoverOptions.Keep and half of GracefulShutdownTimeout.
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
