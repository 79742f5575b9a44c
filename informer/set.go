package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/internal/intern"
	"github.com/fleetwatch/fleetwatch/internal/wire"
)

// Store is where the informer for one resource of one cluster keeps its objects. The
// informer diffs a relist against what it holds, and calls the mutators from a single
// goroutine per namespace it watches.
// aggregate.ClusterStore implements it.
type Store interface {
	// ListKeys and GetByKey use client-go keys: namespace/name, or name for
	// cluster-scoped objects.
	cache.KeyListerGetter
	// Apply adds or updates obj. initialList is true while the informer delivers its
	// initial list. It fails only for an object without metadata.
	Apply(obj runtime.Object, initialList bool) error
	// Delete removes obj. finalStateUnknown is true when the delete was detected by a
	// relist: obj is then the last known state.
	Delete(obj runtime.Object, finalStateUnknown bool) error
	// MarkSynced records that the initial list has been delivered completely.
	MarkSynced()
}

// Checkpointer is an optional interface of a Store that persists what it holds.
type Checkpointer interface {
	// Checkpoint says that the objects the informer has applied so far are the state of
	// its scope at resourceVersion. The informer calls it after each watch event and
	// after a list has been applied completely, never in the middle of a list, so state
	// saved with a checkpoint is always consistent.
	Checkpoint(resourceVersion string)
}

// Sink hands a Set the stores of its cluster. It is implemented by the code that wires
// a Set to the fleet.
type Sink interface {
	// Store returns the store for an informer of scope. The informers of one resource
	// (one per configured namespace) get stores that share their objects.
	Store(scope Scope) Store
	// RemoveResource drops every object of resource gvr of the Set's cluster: the
	// cluster no longer serves it.
	RemoveResource(gvr schema.GroupVersionResource)
}

// Seeder is an optional interface of a Sink whose stores were seeded from saved state.
type Seeder interface {
	// Seed returns the resourceVersion at which the store of scope holds saved state,
	// if it does. The informer's first list is then that state, read from the store
	// without asking the cluster, and its watch resumes from resourceVersion. If the
	// cluster has compacted it away (410 Gone), the informer lists normally and the list
	// is diffed against the store.
	Seed(scope Scope) (resourceVersion string, ok bool)
}

// Defaults of Options.
const (
	DefaultSyncTimeout          = 2 * time.Minute
	DefaultDiscoveryInterval    = 30 * time.Second
	DefaultStreamingListTimeout = 2 * time.Minute
)

// Options configure a Set.
type Options struct {
	// Cluster names the cluster in logs and errors. Required.
	Cluster string
	// Config reaches the cluster. Required.
	Config *rest.Config
	// Resources to inform on, valid as ValidateResources checks them. Required.
	Resources []Resource
	// Sink receives the objects. Required.
	Sink Sink

	// SyncTimeout bounds the initial sync: a resource that has not synced by then is
	// reported with ErrSyncTimeout (and keeps trying), and the Set releases its
	// InitialSyncLimiter slot. Default DefaultSyncTimeout.
	SyncTimeout time.Duration
	// DiscoveryInterval is how often the cluster's discovery is read again, so that a
	// resource that appears (a CRD installed) is picked up and one that disappears is
	// dropped. Default DefaultDiscoveryInterval.
	DiscoveryInterval time.Duration
	// StreamingListTimeout bounds how long a streaming list may go without its
	// initial-events-end bookmark before the informer falls back to a paginated LIST.
	// Default DefaultStreamingListTimeout.
	StreamingListTimeout time.Duration
	// InitialSyncLimiter, if set, is acquired before the Set's initial list and released
	// once it has synced or SyncTimeout has passed since it was acquired, whatever the
	// cluster does meanwhile (see Listing). The objects that the initial list receives
	// count against it as they come.
	InitialSyncLimiter Limiter
	// ExpectedObjects is how many objects the initial sync is expected to list, for
	// InitialSyncLimiter: the objects that a snapshot held for the cluster, say. Default
	// 0: not known.
	ExpectedObjects int
	// KeepManagedFields keeps metadata.managedFields, which are stripped by default.
	KeepManagedFields bool
	// JSONOnly asks the cluster for JSON only. By default, full objects of the kinds
	// that package pbjson can transcode (not those whose protobuf carries less than
	// their JSON, such as StatefulSets: pbjson.Lossy) are asked for in protobuf, which the
	// kube-apiserver encodes at about half the CPU, and decoded into the same objects
	// (see package wire); so is the metadata of the metadata-only resources of a
	// PartialSink. The other metadata-only resources are read by client-go's metadata
	// client, in protobuf whatever JSONOnly says.
	JSONOnly bool
	// KeepSecretData keeps the values of Secrets, which are dropped by default: data,
	// stringData and LastAppliedAnnotation, from full and metadata-only objects, and
	// the bodies of responses from the log (secrets.go).
	KeepSecretData bool
	// Transform, if set, runs on every object after the built-in transforms. It must be
	// idempotent: objects seeded from saved state pass through it again.
	Transform cache.TransformFunc
	// TransformID identifies Transform in the Spec of every Scope, so that state saved
	// under another transform does not seed an informer. Change it when Transform
	// changes what it keeps.
	TransformID string
	// OnChange, if set, is called whenever the status of a resource changes. It is called
	// without locks held and must return quickly.
	OnChange func()
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

func (o *Options) validate() error {
	var errs []error
	if o.Cluster == "" {
		errs = append(errs, errors.New("Options.Cluster is required"))
	}
	if o.Config == nil {
		errs = append(errs, errors.New("Options.Config is required"))
	}
	if o.Sink == nil {
		errs = append(errs, errors.New("Options.Sink is required"))
	}
	errs = append(errs, ValidateResources(o.Resources, GoFieldNames("Options.Resources")))
	return errors.Join(errs...)
}

func (o *Options) defaults() {
	if o.SyncTimeout == 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.DiscoveryInterval == 0 {
		o.DiscoveryInterval = DefaultDiscoveryInterval
	}
	if o.StreamingListTimeout == 0 {
		o.StreamingListTimeout = DefaultStreamingListTimeout
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	o.Resources = slices.Clone(o.Resources)
}

// State is the sync state of one resource of a Set.
type State string

const (
	// StatePending: not resolved yet (discovery has not answered).
	StatePending State = "Pending"
	// StateNotFound: the cluster does not serve the resource.
	StateNotFound State = "NotFound"
	// StateDuplicate: the name resolves to the same resource as a name configured before
	// it (ErrDuplicateResource), which caches it instead.
	StateDuplicate State = "Duplicate"
	// StateSyncing: the informer runs and its initial list is not complete.
	StateSyncing State = "Syncing"
	// StateSynced: the informer's initial list is complete.
	StateSynced State = "Synced"
)

// ResourceStatus is the state of one configured resource in one cluster.
type ResourceStatus struct {
	// Name is the configured name.
	Name string
	// Mapping is what Name resolved to; zero while Pending or NotFound.
	Mapping Mapping
	State   State
	// SyncedTime is when the initial list completed.
	SyncedTime time.Time
	// LastError is the most recent list, watch or discovery error, cleared by a
	// successful sync; LastErrorTime is when it happened.
	LastError     error
	LastErrorTime time.Time
	// ResourceVersions is the last synced resourceVersion per watched namespace ("" for
	// all namespaces).
	ResourceVersions map[string]string
}

// Set runs the informers of one cluster.
type Set struct {
	opts Options

	// clients are the clients of the informers, made as they are first needed.
	clients *clients
	// interned is set if the objects of the dynamic clients are always interned: the
	// transform then need not intern them again.
	interned bool
	// encode is set if the objects of the watch events of the dynamic clients may come
	// with their encoding, as wire.EncodedObjects, for the Sink's EncodedStores.
	encode bool
	// partial is set if the Sink's stores are PartialStores that keep only encodings:
	// the watched objects of the resources whose transform keeps encodings then come
	// partial, with their encodings (clients.partial and clients.partialMetadata).
	partial bool
	// discovery reads the cluster's discovery at each reconcile, made from
	// discoveryConfig by its first (discoveryClient): a discovery client makes a decoder
	// of the whole scheme, a tenth of a millisecond of CPU per cluster, which a warm
	// start of thousands would otherwise spend before it is ready. mapper is the mapper
	// of what it last read, and docs the documents of aggregated discovery with an ETag
	// that it last read, shared with the Sets whose clusters serve the same (discover),
	// and held so that they stay shared until the next read; only reconcile uses them.
	discoveryConfig *rest.Config
	discovery       *discovery.DiscoveryClient
	mapper          *sharedMapper
	docs            [len(discoveryPaths)]*discoveryDoc
	// reconciled is set once reconcile has run: the first run resolves the names of
	// builtinKinds without discovery (builtinOnly).
	reconciled bool

	// grant is the InitialSyncLimiter's grant while the initial sync holds it.
	grant atomic.Pointer[Grant]

	// loop runs discovery periodically and when asked (rediscover).
	loop discoveryLoop
	// listing is closed when the initial sync begins (see Listing).
	listing chan struct{}
	// stopped is closed when Start's context is done: it ends discovery's requests.
	stopped chan struct{}

	// mu guards status, running, and the fields of opts that Reconfigure changes:
	// Resources, KeepManagedFields and KeepSecretData. The other fields of opts do not
	// change after New.
	mu sync.Mutex
	// status is indexed like opts.Resources.
	status []ResourceStatus
	// running holds the informers of the resolved resources, by configured name.
	running map[string]*runner
}

// runner is the informers of one resource: one per watched namespace.
type runner struct {
	mapping Mapping
	// resource and spec are what the informers were started with: a change of either
	// restarts them.
	resource  Resource
	spec      string
	cancel    context.CancelFunc
	done      chan struct{}
	informers map[string]syncer // by namespace, "" = all
}

// syncer is what watchSync needs of an informer: a loop, or a fake in tests.
type syncer interface {
	// Synced returns a channel that is closed once the informer's first list has been
	// applied to its store.
	Synced() <-chan struct{}
	// LastSyncResourceVersion returns the resourceVersion of the last list or event
	// that the informer applied.
	LastSyncResourceVersion() string
}

var _ syncer = (*loop)(nil)

// New validates opts and returns a Set. Nothing runs until Start.
func New(opts Options) (*Set, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.defaults()
	cfg := rest.CopyConfig(opts.Config)
	es, ok := opts.Sink.(EncodingSink)
	encode := ok && es.StoresEncoded()
	ps, ok := opts.Sink.(PartialSink)
	partial := encode && ok && ps.StoresPartial()
	// One client made now, so that a config that cannot make clients fails here.
	if _, err := rest.HTTPClientFor(cfg); err != nil {
		return nil, fmt.Errorf("cluster %s: %w", opts.Cluster, err)
	}
	// Discovery's requests end when Start's context does, so that a cluster whose
	// apiserver hangs does not hold Start (and a Manager's stop) back.
	stopped := make(chan struct{})
	dcfg := rest.CopyConfig(cfg)
	dcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &stopAware{rt: rt, stopped: stopped} })
	s := &Set{
		opts:            opts,
		clients:         newClients(cfg, encode),
		interned:        wire.DecodesAllJSON(),
		encode:          encode,
		partial:         partial,
		discoveryConfig: dcfg,
		listing:         make(chan struct{}),
		stopped:         stopped,
		running:         map[string]*runner{},
	}
	for _, r := range opts.Resources {
		s.status = append(s.status, ResourceStatus{Name: r.Name, State: StatePending})
	}
	return s, nil
}

// Start runs the informers until ctx is done, then stops them and returns ctx's error
// cause. Objects stay in the Sink: on shutdown they are the last known state.
func (s *Set) Start(ctx context.Context) error {
	done := make(chan error, 1)
	s.Launch(ctx, func(err error) { done <- err })
	return <-done
}

// Launch runs the informers as Start does, without blocking: it calls done with what
// Start would return, once ctx is done and the informers have stopped. Once its initial
// sync is over, a Set launched so holds no goroutine of its own between its rediscoveries
// (a timer runs them): in a fleet of thousands of idle clusters, a cluster costs the
// goroutines of its watches only.
func (s *Set) Launch(ctx context.Context, done func(error)) {
	logger := klog.FromContext(ctx).WithValues("cluster", s.opts.Cluster)
	ctx = klog.NewContext(ctx, logger)
	go func() {
		stop := context.AfterFunc(ctx, func() { close(s.stopped) })
		if l := s.opts.InitialSyncLimiter; l != nil {
			g, err := l.Acquire(ctx, s.opts.ExpectedObjects)
			if err != nil {
				stop()
				done(err)
				return
			}
			s.initialSyncHolding(ctx, g)
		} else {
			close(s.listing)
			s.reconcile(ctx)
			go s.waitInitialSync(ctx, false)
		}
		s.loop.start(ctx, s, done)
	}()
}

// discoveryLoop runs a Set's discovery (Set.reconcile) every DiscoveryInterval and when
// asked (Set.rediscover), one run at a time, on timers and a goroutine only while a run
// is due, and stops the informers once its context is done.
type discoveryLoop struct {
	// mu guards the fields below.
	mu  sync.Mutex
	ctx context.Context
	set *Set
	// done is Launch's, called once the informers have stopped.
	done  func(error)
	timer clock.Timer
	// running is set while a goroutine runs discovery; again asks it for one run more.
	running, again bool
	// asked records a rediscover before the loop started.
	asked bool
	// ended is set once ctx is done: the runner, or the AfterFunc of ctx if none runs,
	// stops the informers.
	ended bool
}

// start begins the loop once the initial sync is under way.
func (l *discoveryLoop) start(ctx context.Context, s *Set, done func(error)) {
	l.mu.Lock()
	l.ctx, l.set, l.done = ctx, s, done
	asked := l.asked
	l.mu.Unlock()
	context.AfterFunc(ctx, l.end)
	if asked {
		l.run()
		return
	}
	l.schedule()
}

// schedule arms the timer of the next periodic run.
func (l *discoveryLoop) schedule() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	if l.timer != nil {
		l.timer.Stop()
	}
	interval := l.set.opts.DiscoveryInterval
	if c, ok := l.set.opts.Clock.(clock.WithDelayedExecution); ok {
		l.timer = c.AfterFunc(interval, l.run)
		return
	}
	t := l.set.opts.Clock.NewTimer(interval)
	l.timer = t
	go func() {
		select {
		case <-t.C():
			l.run()
		case <-l.ctx.Done():
		}
	}()
}

// run runs discovery now, or once more after the run in progress.
func (l *discoveryLoop) run() {
	l.mu.Lock()
	switch {
	case l.ctx == nil:
		l.asked = true
		l.mu.Unlock()
		return
	case l.ended:
		l.mu.Unlock()
		return
	case l.running:
		l.again = true
		l.mu.Unlock()
		return
	}
	l.running = true
	l.mu.Unlock()
	go func() {
		for {
			l.set.reconcile(l.ctx)
			l.mu.Lock()
			if l.ended {
				l.mu.Unlock()
				l.stop()
				return
			}
			if !l.again {
				l.running = false
				l.mu.Unlock()
				l.schedule()
				return
			}
			l.again = false
			l.mu.Unlock()
		}
	}()
}

// end is called once the loop's context is done: it stops the informers, unless a
// discovery run is in progress, which does once it returns.
func (l *discoveryLoop) end() {
	l.mu.Lock()
	l.ended = true
	if l.timer != nil {
		l.timer.Stop()
	}
	running := l.running
	l.mu.Unlock()
	if !running {
		l.stop()
	}
}

// stop stops the informers and reports the loop done.
func (l *discoveryLoop) stop() {
	l.set.stopAll()
	l.done(context.Cause(l.ctx))
}

// initialSyncHolding runs the initial sync with the grant g of the InitialSyncLimiter,
// which it gives back once the sync is done or SyncTimeout has passed, whichever comes
// first, also while discovery hangs (an apiserver that stopped answering without
// closing its connections): a cluster never holds the others back for longer. The
// objects that the informers list meanwhile count against g (Set.listed).
func (s *Set) initialSyncHolding(ctx context.Context, g Grant) {
	s.grant.Store(&g)
	release := func() {
		s.grant.Store(nil)
		g.Release()
	}
	defer release()
	timer := s.opts.Clock.NewTimer(s.opts.SyncTimeout)
	defer timer.Stop()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-timer.C():
			release()
		case <-done:
		}
	}()
	close(s.listing)
	s.reconcile(ctx)
	// A cluster that does not answer gives its slot back at once, so that unreachable
	// clusters never hold back the others; it syncs when it answers.
	s.waitInitialSync(ctx, true)
}

// stopAware ends the requests it sends once stopped is closed.
type stopAware struct {
	rt      http.RoundTripper
	stopped <-chan struct{}
}

func (t *stopAware) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	go func() {
		select {
		case <-t.stopped:
			cancel()
		case <-ctx.Done():
		}
	}()
	resp, err := t.rt.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose is a response body that cancels its request's context once closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// listed counts n objects received by a list or a streaming list's initial events
// against the grant of the initial sync, while it holds one.
func (s *Set) listed(n int) {
	if g := s.grant.Load(); g != nil {
		(*g).Listed(n)
	}
}

// Listing returns a channel closed when the Set's initial sync begins: at Start, or,
// with an InitialSyncLimiter, once Start has its slot. SyncTimeout counts from then.
func (s *Set) Listing() <-chan struct{} { return s.listing }

// waitInitialSync waits until every resolved resource has synced, or SyncTimeout; with
// giveUp, also until the cluster is found unreachable.
func (s *Set) waitInitialSync(ctx context.Context, giveUp bool) {
	timeout := s.opts.Clock.NewTimer(s.opts.SyncTimeout)
	defer timeout.Stop()
	poll := s.opts.Clock.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for !s.initialSyncDone() {
		if giveUp && s.unreachable() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-timeout.C():
			s.markSyncTimeout()
			return
		case <-poll.C():
		}
	}
}

// unreachable reports whether the cluster cannot sync any resource for now: discovery
// failed for every resource not resolved yet, and the list of every resource resolved
// without it (builtinKinds) failed as discovery would have: unanswered, or refused
// (refusedOrUnanswered). A list that fails otherwise (an overloaded server's 429 or
// 5xx, a timeout) is retried within the cluster's turn, so that the retries of large
// lists do not add to those of other clusters.
func (s *Set) unreachable() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.status {
		switch {
		case st.LastError == nil:
			return false
		case st.State == StatePending:
		case st.State == StateSyncing && refusedOrUnanswered(st.LastError):
		default:
			return false
		}
	}
	return len(s.status) > 0
}

// refusedOrUnanswered reports whether err is the failure of a request that the server
// did not answer (any error but an API status: a refused or broken connection, a bad
// certificate), or refused as unauthenticated or forbidden.
func refusedOrUnanswered(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err)
}

// initialSyncDone reports whether no resource is Pending or Syncing.
func (s *Set) initialSyncDone() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.status {
		if st.State == StatePending || st.State == StateSyncing {
			return false
		}
	}
	return true
}

func (s *Set) markSyncTimeout() {
	now := s.opts.Clock.Now()
	s.mu.Lock()
	for i := range s.status {
		if st := &s.status[i]; st.State == StatePending || st.State == StateSyncing {
			err := fmt.Errorf("%s: %w after %v", st.Name, ErrSyncTimeout, s.opts.SyncTimeout)
			if st.LastError != nil {
				err = fmt.Errorf("%w (last error: %v)", err, st.LastError)
			}
			st.LastError, st.LastErrorTime = err, now
		}
	}
	s.mu.Unlock()
	s.changed()
}

// HasSynced reports whether every resource has either synced or is not served.
func (s *Set) HasSynced() bool { return s.initialSyncDone() }

// Status returns a copy of the status of every configured resource, in configured order.
func (s *Set) Status() []ResourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ResourceStatus, len(s.status))
	for i, st := range s.status {
		st.ResourceVersions = maps.Clone(st.ResourceVersions)
		out[i] = st
	}
	return out
}

func (s *Set) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange()
	}
}

// Reconfigure replaces the Resources, KeepManagedFields and KeepSecretData of the Set
// with those of opts, and has a running Set reconcile its informers at once; the other
// fields of opts are ignored. The informers of a resource whose name and settings did
// not change go on untouched: nothing is listed again. Those of a resource that is no
// longer configured stop, and its objects leave the Sink (RemoveResource). Those of a
// resource whose settings changed (its selectors, namespaces, MetadataOnly, or the kept
// fields, which change every resource) are restarted cold: their objects leave the Sink
// and are listed again. A new resource starts as it would in New.
//
// It returns an error, and changes nothing, if opts.Resources is invalid. It may be
// called before Start and while the Set runs, from any goroutine.
func (s *Set) Reconfigure(opts Options) error {
	s.mu.Lock()
	prev, next := s.opts, s.opts
	next.Resources = slices.Clone(opts.Resources)
	next.KeepManagedFields, next.KeepSecretData = opts.KeepManagedFields, opts.KeepSecretData
	if err := next.validate(); err != nil {
		s.mu.Unlock()
		return err
	}
	before := map[string]int{}
	for i, r := range prev.Resources {
		before[r.Name] = i
	}
	status := make([]ResourceStatus, len(next.Resources))
	for i, r := range next.Resources {
		status[i] = ResourceStatus{Name: r.Name, State: StatePending}
		if j, ok := before[r.Name]; ok && sameSettings(prev, prev.Resources[j], next, r) {
			status[i] = s.status[j]
		}
	}
	// Only the fields that change are written: the others are read without the lock.
	s.opts.Resources = next.Resources
	s.opts.KeepManagedFields, s.opts.KeepSecretData = next.KeepManagedFields, next.KeepSecretData
	s.status = status
	s.mu.Unlock()
	s.changed()
	s.loop.run()
	return nil
}

// sameSettings reports whether the informers of a resource configured as a in aOpts can
// serve it configured as b in bOpts.
func sameSettings(aOpts Options, a Resource, bOpts Options, b Resource) bool {
	return a.Name == b.Name && slices.Equal(a.Namespaces, b.Namespaces) && aOpts.Spec(a) == bOpts.Spec(b)
}

// options returns a copy of opts, taken under the lock: its Resources are not shared
// with Reconfigure.
func (s *Set) options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	opts := s.opts
	opts.Resources = slices.Clone(opts.Resources)
	return opts
}

// reconcile resolves every configured resource through discovery (but the first run,
// for the names of builtinKinds alone) and starts, stops or restarts its informers to
// match.
func (s *Set) reconcile(ctx context.Context) {
	opts := s.options()
	configured := map[string]bool{}
	for _, r := range opts.Resources {
		configured[r.Name] = true
	}
	s.mu.Lock()
	unconfigured := map[string]*runner{}
	for name, run := range s.running {
		if !configured[name] {
			unconfigured[name] = run
		}
	}
	s.mu.Unlock()
	for _, name := range slices.Sorted(maps.Keys(unconfigured)) {
		run := unconfigured[name]
		klog.FromContext(ctx).Info("Resource no longer configured; dropping its objects", "resource", name, "gvr", run.mapping.Resource)
		s.stop(name, run)
		s.opts.Sink.RemoveResource(run.mapping.Resource)
	}
	if len(opts.Resources) == 0 {
		return
	}
	names := make([]string, len(opts.Resources))
	for i, r := range opts.Resources {
		names[i] = r.Name
	}
	first := !s.reconciled
	s.reconciled = true
	var mapper meta.RESTMapper = builtinMapper
	if !first || !builtinOnly(names) {
		var err error
		if mapper, err = s.discover(ctx, names); err != nil {
			s.discoveryFailed(opts.Resources, err)
			return
		}
	}
	// Resolve every name first, so that a name that became a duplicate stops before the
	// name it duplicates starts.
	mappings := make([]Mapping, len(opts.Resources))
	errs := make([]error, len(opts.Resources))
	claimed := map[schema.GroupVersionResource]string{}
	for i, r := range opts.Resources {
		mappings[i], errs[i] = resolve(mapper, r.Name)
		if errs[i] != nil && !errors.Is(errs[i], ErrResourceNotFound) {
			// The mapper cannot use what discovery returned: the names after this
			// one are not resolved, as when discovery fails.
			for j := i + 1; j < len(errs); j++ {
				errs[j] = errs[i]
			}
			break
		}
		if errs[i] != nil {
			continue
		}
		gvr := mappings[i].Resource
		if first, ok := claimed[gvr]; ok {
			errs[i] = fmt.Errorf("%s %w: %s, as %s", r.Name, ErrDuplicateResource, gvr, first)
			s.mu.Lock()
			cur := s.running[r.Name]
			s.mu.Unlock()
			if cur != nil {
				// Its objects stay: they are the resource's, and the first name's
				// informer lists them again and deletes what it does not select.
				klog.FromContext(ctx).Info("Resource duplicates one configured before it; stopping it", "resource", r.Name, "gvr", gvr, "first", first)
				s.stop(r.Name, cur)
			}
			continue
		}
		claimed[gvr] = r.Name
	}
	for i, r := range opts.Resources {
		m, err := mappings[i], errs[i]
		s.mu.Lock()
		cur := s.running[r.Name]
		s.mu.Unlock()
		switch {
		case errors.Is(err, ErrDuplicateResource):
			s.setStatus(r.Name, nil, func(st *ResourceStatus) {
				st.State, st.Mapping, st.ResourceVersions = StateDuplicate, m, nil
				st.LastError, st.LastErrorTime = err, s.opts.Clock.Now()
			})
		case err == nil:
			if cur != nil && cur.mapping == m && cur.spec == opts.Spec(r) && slices.Equal(cur.resource.Namespaces, r.Namespaces) {
				continue
			}
			if cur != nil {
				s.stop(r.Name, cur)
				s.opts.Sink.RemoveResource(cur.mapping.Resource)
			}
			s.start(ctx, opts, r, m)
		case errors.Is(err, ErrResourceNotFound):
			if cur != nil {
				klog.FromContext(ctx).Info("Resource no longer served; dropping its objects", "resource", r.Name, "gvr", cur.mapping.Resource)
				s.stop(r.Name, cur)
				s.opts.Sink.RemoveResource(cur.mapping.Resource)
			}
			s.setStatus(r.Name, nil, func(st *ResourceStatus) {
				st.State, st.Mapping, st.ResourceVersions = StateNotFound, Mapping{}, nil
				st.LastError, st.LastErrorTime = err, s.opts.Clock.Now()
			})
		default:
			s.discoveryFailed(opts.Resources[i:], err)
			return
		}
	}
}

// discoveryFailed records err, a failure to read or use the cluster's discovery (it may
// be unreachable), as the last error of resources, and keeps what runs: the next round
// tries again, rather than once per resource.
func (s *Set) discoveryFailed(resources []Resource, err error) {
	now := s.opts.Clock.Now()
	for _, r := range resources {
		s.setStatus(r.Name, nil, func(st *ResourceStatus) { st.LastError, st.LastErrorTime = err, now })
	}
}

// setStatus updates the status of the resource name. With run set, it does so only
// while run is that resource's current runner, so that an informer that was stopped
// does not report over its successor.
func (s *Set) setStatus(name string, run *runner, update func(*ResourceStatus)) {
	s.mu.Lock()
	i := slices.IndexFunc(s.status, func(st ResourceStatus) bool { return st.Name == name })
	if i < 0 || (run != nil && s.running[name] != run) {
		s.mu.Unlock()
		return
	}
	before := s.status[i]
	update(&s.status[i])
	after := s.status[i]
	s.mu.Unlock()
	if before.State != after.State || !errors.Is(after.LastError, before.LastError) || before.Mapping != after.Mapping {
		s.changed()
	}
}

// start runs the informers of resource r, resolved to m, configured by opts: a loop per
// namespace, each in a goroutine of its own.
func (s *Set) start(ctx context.Context, opts Options, r Resource, m Mapping) {
	ctx, cancel := context.WithCancel(ctx)
	spec := opts.Spec(r)
	run := &runner{mapping: m, resource: r, spec: spec, cancel: cancel, done: make(chan struct{}), informers: map[string]syncer{}}
	namespaces := []string{metav1.NamespaceAll}
	if m.Namespaced && len(r.Namespaces) > 0 {
		namespaces = r.Namespaces
	}
	// The stores first: whether they keep partial objects says which clients the
	// informers take.
	stores := make([]Store, len(namespaces))
	for i, ns := range namespaces {
		stores[i] = s.opts.Sink.Store(Scope{Resource: m.Resource, Namespace: ns, Spec: spec})
	}
	_, partialStore := stores[0].(PartialStore)
	partial := partialStore && s.partial && keepsEncoding(opts, m)
	dyn, md, err := s.clients.of(r.MetadataOnly, partial, opts.KeepManagedFields)
	if err != nil {
		cancel()
		s.setStatus(r.Name, nil, func(st *ResourceStatus) { st.LastError, st.LastErrorTime = err, s.opts.Clock.Now() })
		return
	}
	// Registered first, so that the errors of its informers are recorded.
	s.mu.Lock()
	s.running[r.Name] = run
	s.mu.Unlock()
	// The last informer to stop closes run.done: no goroutine waits for them.
	var running atomic.Int32
	running.Store(int32(len(namespaces)))
	for i, ns := range namespaces {
		scope := Scope{Resource: m.Resource, Namespace: ns, Spec: spec}
		store := stores[i]
		var known cache.KeyListerGetter = store
		if ns != metav1.NamespaceAll {
			known = namespaceKeys{store: store, namespace: ns}
		}
		var objType runtime.Object = &unstructured.Unstructured{}
		switch {
		case r.MetadataOnly && !partial:
			objType = &metav1.PartialObjectMetadata{}
		case s.encode:
			// Unstructured or wire.EncodedObject: the loop checks that all events have
			// the type of objType, if set.
			objType = nil
		}
		lw := newListWatch(dyn, md, m, r, ns, s.opts.StreamingListTimeout, !s.opts.JSONOnly, partial)
		lw.listed = s.listed
		lw.quiet = isSecrets(m.Resource) && !opts.KeepSecretData
		if seeder, ok := s.opts.Sink.(Seeder); ok {
			if rv, ok := seeder.Seed(scope); ok {
				lw.seed(known, m, r.MetadataOnly, rv)
			}
		}
		informer := newLoop(fmt.Sprintf("%s %s", s.opts.Cluster, scope), lw, store, known, transform(opts, m, known, s.interned), objType,
			func(ctx context.Context, err error) { s.watchError(ctx, r.Name, run, err) })
		run.informers[ns] = informer
		go func() {
			defer func() {
				if running.Add(-1) == 0 {
					close(run.done)
				}
			}()
			informer.run(ctx)
		}()
	}
	s.setStatus(r.Name, run, func(st *ResourceStatus) {
		st.State, st.Mapping, st.SyncedTime, st.ResourceVersions = StateSyncing, m, time.Time{}, nil
	})
	go s.watchSync(ctx, r.Name, run, stores)
}

// watchSync marks resource name Synced once all the informers of run have synced.
//
// It waits on each informer's Synced channel rather than polling: a poll every 20 ms made
// the last resource of a cold sync, and with it the Manager's Ready, 10 ms later on
// average than its informers.
func (s *Set) watchSync(ctx context.Context, name string, run *runner, stores []Store) {
	for _, c := range run.informers {
		select {
		case <-ctx.Done():
			return
		case <-c.Synced():
		}
	}
	for _, store := range stores {
		store.MarkSynced()
	}
	rvs := map[string]string{}
	for ns, c := range run.informers {
		rvs[ns] = c.LastSyncResourceVersion()
	}
	s.setStatus(name, run, func(st *ResourceStatus) {
		st.State, st.SyncedTime, st.ResourceVersions = StateSynced, s.opts.Clock.Now(), rvs
		st.LastError, st.LastErrorTime = nil, time.Time{}
	})
}

// watchError records a list or watch error of the informers run of resource name. A
// NotFound means the resource may be gone: discovery runs again at once.
func (s *Set) watchError(ctx context.Context, name string, run *runner, err error) {
	logWatchError(ctx, name, err)
	s.setStatus(name, run, func(st *ResourceStatus) { st.LastError, st.LastErrorTime = err, s.opts.Clock.Now() })
	if apierrors.IsNotFound(err) {
		s.loop.run()
	}
}

func (s *Set) stop(name string, run *runner) {
	run.cancel()
	<-run.done
	s.mu.Lock()
	if s.running[name] == run {
		delete(s.running, name)
	}
	s.mu.Unlock()
}

func (s *Set) stopAll() {
	s.mu.Lock()
	running := make(map[string]*runner, len(s.running))
	for k, v := range s.running {
		running[k] = v
	}
	s.mu.Unlock()
	for name, run := range running {
		s.stop(name, run)
	}
}

// transform strips what nobody queries before an object reaches the store, and interns
// the strings of the objects it keeps (package intern): they share their map keys and
// their short string values, a fifth of the heap of full pods. If interned is set, the
// objects come interned and without managedFields from the decoder already, and only
// what opts.Transform returns is interned again.
//
// An object that the store already holds at the same resourceVersion is replaced by the
// stored one, untouched: the lists of a warm start hand out shallow copies of stored
// objects, which are shared with readers and must not be mutated, and an unchanged
// object of a relist needs no second copy in memory.
//
// A wire.EncodedObject comes from a Set's decoder, interned and stripped already, and is
// returned as it is, with its encoding, unless a transform would change it (a user
// Transform, or dropping the values of Secrets): it then goes on without its encoding.
//
// Unless opts.KeepSecretData is set, the values of Secrets are dropped (secrets.go),
// from full and metadata-only objects alike.
func transform(opts Options, m Mapping, known cache.KeyListerGetter, interned bool) cache.TransformFunc {
	secrets := isSecrets(m.Resource)
	keepsEncoding := keepsEncoding(opts, m)
	var table internTable
	return func(obj interface{}) (interface{}, error) {
		if o, ok := obj.(*seedObject); ok {
			return o.seeded(known)
		}
		e, encoded := obj.(*wire.EncodedObject)
		if stored, ok := storedSame(known, obj); ok {
			return stored, nil
		}
		if encoded {
			if keepsEncoding {
				// Decoded by a Set's decoder, which interns and drops managedFields
				// unless they are kept: there is nothing left to do.
				return e, nil
			}
			if e.Partial {
				// listWatch makes partial objects only where the encoding is kept.
				return nil, fmt.Errorf("a partial %s object to transform", m.Resource)
			}
			obj = e.Unstructured
		}
		if !opts.KeepManagedFields {
			if a, err := meta.Accessor(obj); err == nil {
				a.SetManagedFields(nil)
			}
		}
		if secrets && !opts.KeepSecretData {
			dropSecretValues(obj)
		}
		if opts.Transform != nil {
			var err error
			if obj, err = opts.Transform(obj); err != nil {
				return nil, err
			}
		}
		if u, ok := obj.(*unstructured.Unstructured); ok && (!interned || opts.Transform != nil) {
			table.Lock()
			table.Object(u.Object)
			table.Unlock()
		}
		return obj, nil
	}
}

// keepsEncoding reports whether the transform of the objects of m, with opts, leaves
// the watched objects that come with their encoding as they are: an object whose
// encoding a transform would make wrong loses it.
func keepsEncoding(opts Options, m Mapping) bool {
	return opts.Transform == nil && (!isSecrets(m.Resource) || opts.KeepSecretData)
}

// internTable is an intern.Table for the objects of one informer. Its loop calls the
// transform from one goroutine; the lock keeps the table safe regardless.
type internTable struct {
	sync.Mutex
	intern.Table
}

// objectKey is the key function of the informers:
// cache.DeletionHandlingMetaNamespaceKeyFunc, without building the key again for a
// wire.EncodedObject.
func objectKey(obj any) (string, error) {
	if e, ok := obj.(*wire.EncodedObject); ok {
		return e.Key(), nil
	}
	return cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
}

// storedSame returns the object that known holds under obj's key, if it has obj's
// non-empty resourceVersion.
func storedSame(known cache.KeyListerGetter, obj interface{}) (interface{}, bool) {
	a, err := meta.Accessor(obj)
	if err != nil || a.GetResourceVersion() == "" {
		return nil, false
	}
	key, err := objectKey(obj)
	if err != nil {
		return nil, false
	}
	// A compact store decodes at GetByKey: what a watch event brings, a new
	// resourceVersion, is told apart without it.
	if vg, ok := versionGetterOf(known); ok {
		if rv, ok := vg.ResourceVersionByKey(key); !ok || rv != a.GetResourceVersion() {
			return nil, false
		}
	}
	stored, ok, err := known.GetByKey(key)
	if err != nil || !ok {
		return nil, false
	}
	sa, err := meta.Accessor(stored)
	if err != nil || sa.GetResourceVersion() != a.GetResourceVersion() {
		return nil, false
	}
	return stored, true
}

// applier applies the changes that an informer receives to its store, and tells a
// Checkpointer store at which resourceVersion its state is consistent: after each watch
// event, when a list has been applied completely, and at each bookmark of a watch.
type applier struct {
	store        Store
	checkpointer Checkpointer
	encodedStore EncodedStore
	partialStore PartialStore
}

func newApplier(store Store) applier {
	a := applier{store: store}
	a.checkpointer, _ = store.(Checkpointer)
	a.encodedStore, _ = store.(EncodedStore)
	a.partialStore, _ = store.(PartialStore)
	return a
}

// checkpoint tells a Checkpointer store that its state is consistent at rv.
func (a applier) checkpoint(rv string) {
	if a.checkpointer != nil && rv != "" {
		a.checkpointer.Checkpoint(rv)
	}
}

// apply applies the change d, whose object is transformed already: an Added, Updated or
// Deleted of a watch event, a Replaced of a list's object, or a Deleted of a
// cache.DeletedFinalStateUnknown that a list did not hold. initialList is set for the
// changes of the first list.
func (a applier) apply(d cache.Delta, initialList bool) error {
	obj, finalStateUnknown := d.Object, false
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, finalStateUnknown = tomb.Obj, true
	}
	// A partial object goes to the store as it is: it answers for what files it
	// without reading its map again (wire.EncodedObject).
	var partialObj *wire.EncodedObject
	if e, ok := obj.(*wire.EncodedObject); ok && e.Partial {
		partialObj = e
	}
	partial := partialObj != nil
	obj, encoded := wire.Unwrap(obj)
	if partial && d.Type == cache.Deleted {
		// Handlers get the deleted object whole.
		whole, err := wire.DecodeEncoded(encoded)
		if err != nil {
			return fmt.Errorf("decoding a deleted object: %w", err)
		}
		obj, partial = whole, false
	}
	o, ok := obj.(runtime.Object)
	if !ok {
		return fmt.Errorf("unexpected %T in a %s delta", obj, d.Type)
	}
	var err error
	switch {
	case d.Type == cache.Deleted:
		err = a.store.Delete(o, finalStateUnknown)
	case partial && a.partialStore != nil:
		err = a.partialStore.ApplyPartial(partialObj, encoded, initialList)
	case partial:
		err = fmt.Errorf("a partial object in a %s delta for a store that needs whole ones", d.Type)
	case encoded != nil && a.encodedStore != nil: // Added, Updated, Replaced
		err = a.encodedStore.ApplyEncoded(o.(*unstructured.Unstructured), encoded, initialList)
	default:
		err = a.store.Apply(o, initialList)
	}
	// Watch events (Added, Updated, Deleted but not a relist's tombstone) leave the
	// state consistent at their object's resourceVersion; list items do not.
	watched := d.Type == cache.Added || d.Type == cache.Updated || (d.Type == cache.Deleted && !finalStateUnknown)
	if err == nil && watched {
		if m, err := meta.Accessor(o); err == nil {
			a.checkpoint(m.GetResourceVersion())
		}
	}
	return err
}

// namespaceKeys is the part of a store in one namespace: the known objects of an
// informer that watches only that namespace, so that its relists do not delete the
// objects of other namespaces.
type namespaceKeys struct {
	store     cache.KeyListerGetter
	namespace string
}

func (n namespaceKeys) ListKeys() []string {
	prefix := n.namespace + "/"
	var keys []string
	for _, k := range n.store.ListKeys() {
		if len(k) > len(prefix) && k[:len(prefix)] == prefix {
			keys = append(keys, k)
		}
	}
	return keys
}

func (n namespaceKeys) GetByKey(key string) (interface{}, bool, error) {
	return n.store.GetByKey(key)
}

// logWatchError logs a list or watch error of the informers of resource name as
// client-go's cache.DefaultWatchErrorHandler does: an expired resourceVersion at verbosity 4, a watch
// that ended normally not at all, one cut short at verbosity 1, any other error as an
// error.
func logWatchError(ctx context.Context, name string, err error) {
	logger := klog.FromContext(ctx)
	switch {
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		logger.V(4).Info("Watch closed", "resource", name, "err", err)
	case errors.Is(err, io.EOF):
	case errors.Is(err, io.ErrUnexpectedEOF):
		logger.V(1).Info("Watch closed with unexpected EOF", "resource", name, "err", err)
	default:
		logger.Error(err, "Failed to watch", "resource", name)
	}
}

// clients are the clients of a Set's informers, each pair made the first time that an
// informer needs one of it: a Set uses one or two of the seven (under a compact fleet,
// the partial clients only), and a fleet of a thousand clusters spent a sixth of the CPU
// of its warm start making all of them, on the way to its readiness.
type clients struct {
	cfg    *rest.Config
	encode bool
	// dynamic, partial and partialMetadata are the pairs of wire.NewDynamicClients,
	// wire.NewPartialDynamicClients and wire.NewPartialMetadataClients.
	dynamic, partial, partialMetadata clientPair
	metadata                          func() (*metadataClient, error)
}

// metadataClient is client-go's metadata client, with the Watcher of its watches
// (wire.NewMetadataClient).
type metadataClient struct {
	metadata.Interface
	watcher *wire.Watcher
}

func newClients(cfg *rest.Config, encode bool) *clients {
	return &clients{
		cfg:    cfg,
		encode: encode,
		metadata: sync.OnceValues(func() (*metadataClient, error) {
			md, watcher, err := wire.NewMetadataClient(cfg)
			if err != nil {
				return nil, err
			}
			return &metadataClient{Interface: md, watcher: watcher}, nil
		}),
	}
}

// of returns the client of the informers of a resource: metadataOnly, partial (whose
// objects come partial, with their encodings), and with or without managedFields. It is
// a dynamic client, but for a metadata-only resource that is not partial, which client-go's
// metadata client reads.
func (c *clients) of(metadataOnly, partial, keepManagedFields bool) (*wire.Client, *metadataClient, error) {
	switch {
	case partial && metadataOnly:
		d, err := c.partialMetadata.get(func() (*wire.Client, *wire.Client, error) {
			return wire.NewPartialMetadataClients(c.cfg)
		}, keepManagedFields)
		return d, nil, err
	case partial:
		d, err := c.partial.get(func() (*wire.Client, *wire.Client, error) {
			return wire.NewPartialDynamicClients(c.cfg)
		}, keepManagedFields)
		return d, nil, err
	}
	if metadataOnly {
		// client-go's metadata client, which keeps managedFields.
		md, err := c.metadata()
		return nil, md, err
	}
	d, err := c.dynamic.get(func() (*wire.Client, *wire.Client, error) {
		return wire.NewDynamicClients(c.cfg, c.encode)
	}, keepManagedFields)
	return d, nil, err
}

// clientPair is a pair of dynamic clients, one that drops managedFields and one that
// keeps them, made once by the first get.
type clientPair struct {
	once       sync.Once
	drop, keep *wire.Client
	err        error
}

func (p *clientPair) get(newPair func() (drop, keep *wire.Client, err error), keep bool) (*wire.Client, error) {
	p.once.Do(func() { p.drop, p.keep, p.err = newPair() })
	if keep {
		return p.keep, p.err
	}
	return p.drop, p.err
}
