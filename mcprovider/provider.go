package mcprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	fwcluster "github.com/fleetwatch/fleetwatch/cluster"
)

// Options configure a Provider. The zero value is valid; every field documents its
// default.
type Options struct {
	// Scheme maps Go types to kinds and converts the fleet's objects into them; it is
	// also the scheme of each cluster.Cluster. Default: client-go's scheme.Scheme.
	Scheme *runtime.Scheme

	// TypedObjects bounds the typed objects that the clusters' caches keep, converted
	// from the fleet's, so that a typed Get or List of an object that has not changed
	// since it was last read typed costs a lookup and a DeepCopy, as with
	// controller-runtime's cache, rather than a conversion (docs/benchmarks.md, "Reads
	// next to client-go's indexer and controller-runtime's cache"). The objects kept
	// are those read last, evicted by CLOCK, shared by every cluster, one per object,
	// with the version of the fleet's object it was converted from: it is read only
	// while the fleet holds that version, so a changed object is never read from an
	// older one. Each costs the heap of the typed object, a few KB for a Pod (about 11
	// KB for make bench's large pod). Set it to at least the objects that controllers
	// read again and again: a cyclic read of more distinct objects than it keeps
	// converts every time. Default (0): DefaultTypedObjects. Negative: none are kept,
	// every typed read converts.
	TypedObjects int

	// ClusterOptions are applied to each cluster's cluster.Options after the Provider's
	// own, for example to set its Logger. They must leave NewCache, MapperProvider and
	// Client.Cache alone: those make the cluster read the fleet. Default: none.
	ClusterOptions []cluster.Option
}

// Provider is a multicluster.Provider of the clusters of a fleetwatch.Manager. Get one
// with New and pass it to mcmanager.New; the multicluster-runtime manager starts it.
//
// A cluster is engaged once the Manager has engaged it and its objects are complete in
// the fleet (fleetwatch.Manager.ClusterHasSynced): at once for a cluster the snapshot
// held, before its apiserver answers (once the snapshot's load has ended, with
// fleetwatch.Options.LoadSnapshotInBackground); after its initial lists for another. It is
// disengaged, the context given to Engage ending, when it leaves the fleet; a cluster
// replaced because its connection changed in the kubeconfig files is disengaged, then
// engaged again as a new cluster.Cluster. Get finds the engaged clusters only.
type Provider struct {
	mgr    *fleetwatch.Manager
	fleet  *aggregate.Fleet
	scheme *runtime.Scheme
	// decoder decodes the fleet's encodings, nil for a plain fleet.
	decoder *encodedDecoder
	// memo keeps the typed objects that reads converted; nil if Options.TypedObjects is
	// negative.
	memo   *aggregate.TypedMemo
	mapper *fleetMapper
	opts   Options
	// wg counts the goroutines of the engaged clusters, so that Start returns after them.
	wg sync.WaitGroup

	// mu guards aware, clusters and indexes.
	mu sync.Mutex
	// aware is the multicluster-runtime manager, set by Start.
	aware multicluster.Aware
	// clusters holds the clusters that the Manager engaged, by name, whether engaged
	// with aware yet or not.
	clusters map[multicluster.ClusterName]*member
	// indexes are the fields indexed with IndexField, in order.
	indexes []*fieldIndex
}

var (
	_ multicluster.Provider         = (*Provider)(nil)
	_ multicluster.ProviderRunnable = (*Provider)(nil)
)

// member is one cluster that the Manager engaged.
type member struct {
	cluster cluster.Cluster
	// ctx ends when the cluster leaves the fleet.
	ctx context.Context
	// synced is closed once the cluster's objects are complete in the fleet; from then
	// on Get finds it, and it is engaged with the Provider's aware.
	synced chan struct{}
}

// New returns a Provider of the clusters of mgr, which it registers with mgr.AddAware,
// so it must be called before mgr is started. The Provider's Start runs mgr: do not
// start mgr yourself.
func New(mgr *fleetwatch.Manager, opts Options) (*Provider, error) {
	if opts.Scheme == nil {
		opts.Scheme = scheme.Scheme
	}
	if opts.TypedObjects == 0 {
		opts.TypedObjects = DefaultTypedObjects
	}
	p := &Provider{
		mgr:      mgr,
		fleet:    mgr.Fleet(),
		scheme:   opts.Scheme,
		opts:     opts,
		clusters: map[multicluster.ClusterName]*member{},
	}
	p.decoder = newEncodedDecoder(p.fleet.Codec(), opts.Scheme)
	p.memo = aggregate.NewTypedMemo(opts.TypedObjects)
	p.mapper = newFleetMapper(mgr, opts.Scheme)
	if err := mgr.AddAware(fleetAware{p}); err != nil {
		return nil, fmt.Errorf("mcprovider: %w", err)
	}
	return p, nil
}

// Manager returns the fleetwatch.Manager of the Provider, for its listers, handlers and
// the status of each cluster.
func (p *Provider) Manager() *fleetwatch.Manager { return p.mgr }

// Start runs the fleetwatch.Manager until ctx is done, engaging each of its clusters
// with aware as the Provider's doc says. It blocks; it returns what the Manager's Start
// returns, once the Manager has stopped within its Options.GracefulShutdownTimeout.
func (p *Provider) Start(ctx context.Context, aware multicluster.Aware) error {
	p.mu.Lock()
	if p.aware != nil {
		p.mu.Unlock()
		return ErrAlreadyStarted
	}
	p.aware = aware
	p.mu.Unlock()
	err := p.mgr.Start(ctx)
	// The Manager has ended every cluster's context, which their goroutines wait on.
	p.wg.Wait()
	return err
}

// Get returns the engaged cluster called name, or an error wrapping
// multicluster.ErrClusterNotFound.
func (p *Provider) Get(_ context.Context, name multicluster.ClusterName) (cluster.Cluster, error) {
	p.mu.Lock()
	m := p.clusters[name]
	p.mu.Unlock()
	// Found from the moment it is engaged: the requests of its first events may be
	// reconciled before Engage has returned.
	if m != nil && isClosed(m.synced) && m.ctx.Err() == nil {
		return m.cluster, nil
	}
	return nil, fmt.Errorf("cluster %q: %w", name, multicluster.ErrClusterNotFound)
}

// IndexField indexes the objects of obj's kind by field, once for the whole fleet: every
// cluster, engaged now or later, lists them by it (client.MatchingFields), as
// controller-runtime's cache does. extractValue gets each object as obj's Go type, a
// fresh conversion for a typed obj; it must not modify it.
//
// Indexing a field twice does nothing the second time, so that the IndexField of the
// multicluster-runtime manager and those of each cluster's cache agree. An index is
// added to the fleet as soon as its resource is known: at once if it is, else when the
// first cluster is engaged.
func (p *Provider) IndexField(_ context.Context, obj client.Object, field string, extractValue client.IndexerFunc) error {
	gvk, err := apiutil.GVKForObject(obj, p.scheme)
	if err != nil {
		return fmt.Errorf("index %s: %w", field, err)
	}
	target, err := newTarget(obj, gvk, p.scheme, p.decoder)
	if err != nil {
		return fmt.Errorf("index %s of %s: %w", field, gvk, err)
	}
	p.mu.Lock()
	for _, ix := range p.indexes {
		if ix.gvk == gvk && ix.field == field {
			p.mu.Unlock()
			return nil
		}
	}
	fi := &fieldIndex{gvk: gvk, field: field, target: target, extract: extractValue}
	p.indexes = append(p.indexes, fi)
	p.mu.Unlock()
	return p.applyIndex(fi)
}

// applyIndexes adds to the fleet the indices whose resource has become known.
func (p *Provider) applyIndexes() error {
	p.mu.Lock()
	indexes := append([]*fieldIndex(nil), p.indexes...)
	p.mu.Unlock()
	var errs []error
	for _, fi := range indexes {
		errs = append(errs, p.applyIndex(fi))
	}
	return errors.Join(errs...)
}

func (p *Provider) applyIndex(fi *fieldIndex) error {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if fi.applied {
		return nil
	}
	mapping, err := p.mapper.RESTMapping(fi.gvk.GroupKind(), fi.gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil // not known yet: applied when a cluster is engaged
		}
		return err
	}
	if err := p.fleet.Indexer(mapping.Resource).AddIndexers(fi.indexers()); err != nil {
		return fmt.Errorf("index %s of %s: %w", fi.field, fi.gvk, err)
	}
	fi.applied = true
	return nil
}

// fleetAware is the cluster.Aware that the Provider registers with the Manager.
type fleetAware struct{ p *Provider }

var _ fwcluster.Aware = fleetAware{}

// Engage builds the cluster.Cluster of c, and engages it with the multicluster-runtime
// manager once its objects are complete in the fleet, in a goroutine of its own, so that
// a cluster that syncs slowly holds back no other.
func (a fleetAware) Engage(ctx context.Context, c *fwcluster.Cluster) error {
	p := a.p
	name := multicluster.ClusterName(c.Name)
	m := &member{ctx: ctx, synced: make(chan struct{})}
	view := &clusterCache{p: p, name: c.Name, member: m}
	cl, err := cluster.New(rest.CopyConfig(c.Config), append([]cluster.Option{func(o *cluster.Options) {
		o.Scheme = p.scheme
		o.NewCache = func(*rest.Config, cache.Options) (cache.Cache, error) { return view, nil }
		o.MapperProvider = func(cfg *rest.Config, hc *http.Client) (meta.RESTMapper, error) {
			discovered, err := apiutil.NewDynamicRESTMapper(cfg, hc)
			if err != nil {
				return nil, err
			}
			// The fleet's kinds first, so that reads and writes of cached kinds need no
			// discovery; the cluster's discovery for the others.
			return meta.FirstHitRESTMapper{MultiRESTMapper: meta.MultiRESTMapper{p.mapper, discovered}}, nil
		}
		o.Client.Cache = &client.CacheOptions{Unstructured: true}
	}}, p.opts.ClusterOptions...)...)
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.Name, err)
	}
	m.cluster = cl

	// The Manager calls Engage once it holds the cluster: its channel is this cluster's.
	synced := p.mgr.ClusterSynced(c.Name)

	p.mu.Lock()
	p.clusters[name] = m
	aware := p.aware
	p.mu.Unlock()

	logger := klog.FromContext(ctx)
	p.wg.Go(func() {
		if err := cl.Start(ctx); err != nil {
			logger.Error(err, "Cluster stopped")
		}
	})
	p.wg.Go(func() {
		defer func() {
			<-ctx.Done()
			p.mu.Lock()
			if p.clusters[name] == m {
				delete(p.clusters, name)
			}
			p.mu.Unlock()
		}()
		if !waitSynced(ctx, synced) {
			return
		}
		close(m.synced)
		if err := p.applyIndexes(); err != nil {
			logger.Error(err, "Adding field indices to the fleet")
		}
		if aware == nil {
			return
		}
		if err := aware.Engage(ctx, name, cl); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Engaging the cluster with the multicluster manager failed")
			}
			return
		}
		logger.V(1).Info("Cluster engaged with the multicluster manager")
	})
	return nil
}

// waitSynced waits until synced, the Manager's fleetwatch.Manager.ClusterSynced of a
// cluster, is closed, or ctx is done; it reports whether the cluster's objects are
// complete in the fleet and ctx is not done. Nothing polls: a cluster that the snapshot
// held is engaged at once, a cold one as soon as its informers have synced.
func waitSynced(ctx context.Context, synced <-chan struct{}) bool {
	select {
	case <-synced:
		return ctx.Err() == nil
	case <-ctx.Done():
		return false
	}
}
