package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/internal/filewatch"
)

// Aware is told by a Provider which clusters exist.
type Aware interface {
	// Engage is called when a cluster joins the set: when the Provider starts, when a
	// context appears in the kubeconfig files, and, with a new *Cluster, when a cluster's
	// connection changed (see Cluster.Fingerprint) and the old one was taken out.
	//
	// ctx is cancelled when the cluster leaves the set. context.Cause(ctx) then tells
	// why: ErrClusterRemoved when its context is gone, ErrClusterReplaced when a new
	// Cluster of the same name follows (errors.Is(cause, ErrClusterRemoved) holds for
	// both), and on shutdown the cause of the context given to Provider.Start, typically
	// context.Canceled. A consumer that drops a cluster's cached objects on removal but
	// keeps them on shutdown tests errors.Is(context.Cause(ctx), ErrClusterRemoved).
	//
	// ctx carries the logger of the context given to Provider.Start, with the key
	// "cluster" set to the cluster name (see klog.FromContext), and the cluster name
	// (see NameFromContext).
	//
	// Engage must return promptly: work that lasts runs in goroutines bound to ctx. If
	// it returns an error, ctx is cancelled with that error, the cluster is not in the
	// set, and the Provider tries again at its next reload.
	//
	// A Provider calls Engage, and Disengage if implemented, from one goroutine, one
	// call at a time, in the order of the changes.
	Engage(ctx context.Context, c *Cluster) error
}

// Disengager is an optional interface of an Aware, for consumers that must finish their
// cleanup of a cluster before a replacement of the same name is engaged. Cancellation of
// the Engage context alone does not give that ordering: the cleanup would run in the
// consumer's goroutine while the replacement is already being engaged.
type Disengager interface {
	// Disengage is called after a cluster left the set, once its Engage context is
	// cancelled, and before any replacement is engaged. cause is ErrClusterRemoved or
	// ErrClusterReplaced. It is not called on shutdown. ctx is the context given to
	// Provider.Start. An error is logged; the cluster is gone regardless. The Provider
	// waits for Disengage, which is the point, so other changes wait too: it should
	// clean up and return, not linger.
	Disengage(ctx context.Context, c *Cluster, cause error) error
}

// SelectionObserver is an optional interface of an Aware, for consumers that hold state
// of clusters from before the Provider started, such as a snapshot, and must drop that
// of the clusters the kubeconfig files no longer select, which are never engaged.
type SelectionObserver interface {
	// Selected is called after each successful read of the kubeconfig files, before
	// the changes it brings are applied, with the names of every selected cluster,
	// sorted. It is called from the goroutine that calls Engage, with the context given
	// to Provider.Start, and must return promptly. names is the consumer's.
	Selected(ctx context.Context, names []string)
}

// Provider keeps the set of clusters in step with the kubeconfig files and tells an
// Aware about every change. It reads the files when it starts, then whenever a file
// event arrives in one of their directories (editors and kubectl replace files by
// rename, so the directories are watched, not the files), and every
// Options.PollInterval as a fallback. A context that appears is engaged, one that
// disappears is removed, and one whose Fingerprint changed is replaced: the old Cluster
// is removed, then the new one engaged.
//
// A reload that fails (a file caught half-written, a garbage file, a missing file)
// changes nothing: the current clusters stay, the error is logged, and the next event or
// poll tries again. A reload that finds no selected context at all removes every
// cluster; only at start is that an error.
type Provider struct {
	aware        Aware
	clock        clock.WithTicker
	pollInterval time.Duration
	reloadDelay  time.Duration

	// reconfigured tells Start's goroutine that SetOptions replaced the loader.
	reconfigured chan struct{}

	// mu guards loader, clusters, cancels and started. Only Start's goroutine writes
	// clusters and cancels; it calls out to the Aware without holding mu.
	mu sync.RWMutex
	// loader reads the kubeconfig files as the options say.
	loader *loader
	// clusters holds the engaged clusters by name.
	clusters map[string]*Cluster
	// cancels holds the cancel func of each engaged cluster's context, by name.
	cancels map[string]context.CancelCauseFunc
	started bool

	// Test hooks, set before Start.
	noWatch     bool        // rely on polling alone
	afterReload func(error) // called after each reload, with its error
}

// NewProvider returns a Provider of the clusters that opts select, which tells aware
// about them once started. It fails if opts are invalid.
func NewProvider(opts Options, aware Aware) (*Provider, error) {
	if aware == nil {
		return nil, fmt.Errorf("%w: the Aware is nil", ErrInvalidOptions)
	}
	var errs []error
	if opts.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("%w: PollInterval is negative (%s)", ErrInvalidOptions, opts.PollInterval))
	}
	if opts.ReloadDelay < 0 {
		errs = append(errs, fmt.Errorf("%w: ReloadDelay is negative (%s)", ErrInvalidOptions, opts.ReloadDelay))
	}
	l, err := newLoader(opts)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var clk clock.WithTicker = clock.RealClock{}
	if opts.Clock != nil {
		clk = opts.Clock
	}
	return &Provider{
		loader:       l,
		aware:        aware,
		clock:        clk,
		pollInterval: cmp.Or(opts.PollInterval, DefaultPollInterval),
		reloadDelay:  cmp.Or(opts.ReloadDelay, DefaultReloadDelay),
		reconfigured: make(chan struct{}, 1),
		clusters:     map[string]*Cluster{},
		cancels:      map[string]context.CancelCauseFunc{},
	}, nil
}

// SetOptions changes which clusters the Provider selects: it takes the Kubeconfigs,
// Include, Exclude, Aliases, QPS, Burst and UserAgent of opts; PollInterval,
// ReloadDelay and Clock keep the values given to NewProvider. A running Provider then
// reloads at once, from its own goroutine, and applies the difference as for an edit of
// the files: a context no longer selected is removed, a new one is engaged, a cluster
// whose connection changed is replaced, and a context whose cluster name changed (an
// alias) is removed under its old name and engaged under the new one. Clusters that
// did not change are left alone. If that reload fails, the current clusters stay, as
// for any reload.
//
// It returns an error, and changes nothing, if opts are invalid as NewProvider would
// find them. It may be called from any goroutine, before or after Start.
func (p *Provider) SetOptions(opts Options) error {
	l, err := newLoader(opts)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.loader = l
	p.mu.Unlock()
	select {
	case p.reconfigured <- struct{}{}:
	default:
	}
	return nil
}

func (p *Provider) currentLoader() *loader {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.loader
}

// Clusters returns the engaged clusters, sorted by name. The slice is the caller's; the
// Clusters are shared and must not be modified.
func (p *Provider) Clusters() []*Cluster {
	p.mu.RLock()
	cs := slices.Collect(maps.Values(p.clusters))
	p.mu.RUnlock()
	slices.SortFunc(cs, func(a, b *Cluster) int { return strings.Compare(a.Name, b.Name) })
	return cs
}

// Get returns the engaged cluster of that name.
func (p *Provider) Get(name string) (*Cluster, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	c, ok := p.clusters[name]
	return c, ok
}

// Start loads the kubeconfig files, engages every cluster, and then follows the files
// until ctx is done. It returns an error, having engaged nothing, if the first load fails
// or selects no context; it returns ErrAlreadyStarted if called twice. Otherwise it
// returns nil once ctx is done, after cancelling the context of every cluster (with the
// cause of ctx, so that consumers can tell shutdown from removal) and without calling
// Disengage.
//
// An Engage that fails at start is retried at the next reload; it does not fail Start.
// Start logs through the logger of ctx (klog.FromContext).
func (p *Provider) Start(ctx context.Context) error {
	p.mu.Lock()
	if p.started {
		p.mu.Unlock()
		return ErrAlreadyStarted
	}
	p.started = true
	p.mu.Unlock()
	logger := klog.FromContext(ctx).WithName("clusters")

	var lastErr string // of the last failed reload, to log each failure once
	f := &filewatch.Follower{
		What:         "kubeconfig files",
		Paths:        func() []string { return p.currentLoader().paths },
		Clock:        p.clock,
		Delay:        p.reloadDelay,
		PollInterval: p.pollInterval,
		NoWatch:      p.noWatch,
		Trigger:      p.reconfigured,
		Reread:       func() { p.reload(ctx, logger, &lastErr) },
	}
	err := f.Run(ctx, logger, func() error {
		clusters, err := p.currentLoader().loadSome()
		if err != nil {
			return err
		}
		p.apply(ctx, logger, clusters)
		return nil
	})
	if err != nil {
		return err
	}
	p.stop(ctx)
	return nil
}

// reload re-reads the kubeconfig files and applies the difference.
func (p *Provider) reload(ctx context.Context, logger klog.Logger, lastErr *string) {
	clusters, _, err := p.currentLoader().load()
	if err != nil {
		if msg := err.Error(); msg != *lastErr {
			logger.Error(err, "Reloading kubeconfig files failed; keeping the current clusters")
			*lastErr = msg
		} else {
			logger.V(4).Info("Reloading kubeconfig files still fails", "err", err)
		}
	} else {
		if *lastErr != "" {
			logger.Info("Reloading kubeconfig files works again")
			*lastErr = ""
		}
		p.apply(ctx, logger, clusters)
	}
	if p.afterReload != nil {
		p.afterReload(err)
	}
}

// apply tells a SelectionObserver what next selects, then makes the engaged set equal
// to next: it removes, then replaces, then adds, each in name order.
func (p *Provider) apply(ctx context.Context, logger klog.Logger, next []*Cluster) {
	if o, ok := p.aware.(SelectionObserver); ok {
		names := make([]string, len(next))
		for i, c := range next {
			names[i] = c.Name
		}
		slices.Sort(names)
		o.Selected(ctx, names)
	}
	p.mu.RLock()
	current := maps.Clone(p.clusters)
	p.mu.RUnlock()

	var removed, added []*Cluster
	var replaced [][2]*Cluster // old, new
	want := make(map[string]*Cluster, len(next))
	for _, c := range next {
		want[c.Name] = c
		old, ok := current[c.Name]
		switch {
		case !ok:
			added = append(added, c)
		case old.Fingerprint != c.Fingerprint || old.Context != c.Context:
			replaced = append(replaced, [2]*Cluster{old, c})
		}
	}
	for name, old := range current {
		if _, ok := want[name]; !ok {
			removed = append(removed, old)
		}
	}
	slices.SortFunc(removed, func(a, b *Cluster) int { return strings.Compare(a.Name, b.Name) })

	for _, c := range removed {
		p.disengage(ctx, logger, c, ErrClusterRemoved)
	}
	for _, r := range replaced {
		p.disengage(ctx, logger, r[0], ErrClusterReplaced)
		p.engage(ctx, logger, r[1])
	}
	engaged := 0
	for _, c := range added {
		if p.engage(ctx, logger, c) {
			engaged++
		}
	}
	// One line for what a reload changed, at every verbosity: at thousands of clusters,
	// a line per cluster engaged is for higher ones.
	if len(removed)+len(replaced)+len(added) > 0 {
		logger.Info("Clusters changed", "engaged", engaged, "failed", len(added)-engaged, "replaced", len(replaced), "removed", len(removed), "clusters", len(next))
	}
}

// engage engages c, and reports whether it did.
func (p *Provider) engage(ctx context.Context, logger klog.Logger, c *Cluster) bool {
	cctx, cancel := context.WithCancelCause(klog.NewContext(NewContext(ctx, c.Name), klog.FromContext(ctx).WithValues("cluster", c.Name)))
	if err := p.aware.Engage(cctx, c); err != nil {
		cancel(err)
		logger.Error(err, "Engaging cluster failed; retrying at the next reload", clusterKeys(c)...)
		return false
	}
	p.mu.Lock()
	p.clusters[c.Name] = c
	p.cancels[c.Name] = cancel
	p.mu.Unlock()
	logger.V(2).Info("Engaged cluster", clusterKeys(c)...)
	return true
}

func (p *Provider) disengage(ctx context.Context, logger klog.Logger, c *Cluster, cause error) {
	p.mu.Lock()
	cancel := p.cancels[c.Name]
	delete(p.clusters, c.Name)
	delete(p.cancels, c.Name)
	p.mu.Unlock()
	cancel(cause)
	logger.Info("Disengaged cluster", append(clusterKeys(c), "reason", cause.Error())...)
	if d, ok := p.aware.(Disengager); ok {
		if err := d.Disengage(ctx, c, cause); err != nil {
			logger.Error(err, "Disengaging cluster failed", clusterKeys(c)...)
		}
	}
}

// stop forgets every cluster and cancels its context with the cause of ctx.
func (p *Provider) stop(ctx context.Context) {
	p.mu.Lock()
	cancels := p.cancels
	p.clusters = map[string]*Cluster{}
	p.cancels = map[string]context.CancelCauseFunc{}
	p.mu.Unlock()
	for _, cancel := range cancels {
		cancel(context.Cause(ctx))
	}
}

func clusterKeys(c *Cluster) []any {
	return []any{"cluster", c.Name, "context", c.Context, "kubeconfig", c.Kubeconfig, "server", c.Server()}
}
