package fleetwatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/gctune"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/shard"
)

// Defaults of Options, those of the informer sets.
const (
	DefaultSyncTimeout        = informer.DefaultSyncTimeout
	DefaultMaxConcurrentSyncs = informer.DefaultMaxConcurrentSyncs
	DefaultMaxSyncObjects     = informer.DefaultMaxSyncObjects
)

// Options configure a Manager. Every field documents its default.
type Options struct {
	// Clusters selects the clusters: kubeconfig files, context globs and aliases. See
	// cluster.Options for its defaults ($KUBECONFIG, else ~/.kube/config; every context).
	Clusters cluster.Options
	// Resources are the resources cached in every cluster, valid as
	// informer.ValidateResources checks them. Required.
	Resources []informer.Resource
	// Fleet configures the federated cache. See aggregate.Options. Its Codec, if set,
	// takes the place of Encoding.
	Fleet aggregate.Options
	// Encoding is how the fleet holds full objects (its Codec), unless Fleet.Codec is
	// set. Default DefaultEncoding: each object in the snapshot's encoding, decoded
	// where it is read. EncodingObjects holds decoded objects, as aggregate.New does.
	Encoding Encoding
	// Health configures the probe of each cluster. See cluster.HealthOptions.
	Health cluster.HealthOptions

	// SyncTimeout bounds each cluster's initial sync, counted from its turn (see
	// MaxConcurrentSyncs; a cluster waiting for one has not begun). A cluster that has
	// not synced by then gives its turn to the next, no longer holds back readiness, and
	// its unsynced resources report informer.ErrSyncTimeout; it keeps trying. Default
	// DefaultSyncTimeout.
	SyncTimeout time.Duration
	// MaxConcurrentSyncs and MaxSyncObjects bound the initial syncs that run at once, so
	// that starting a large fleet is not a thundering herd, while the turns follow the
	// work (see informer.LimiterOptions): at most MaxConcurrentSyncs clusters, and at
	// most MaxSyncObjects objects listed by them together, a cluster counting for what
	// it has listed so far, or for what it is expected to list if more: the objects the
	// snapshot held for it, else the median of the clusters that synced before it, else
	// MaxSyncObjects/8 (so at most 8 clusters of unknown size start before the first
	// has synced). So a thousand clusters of 20 objects sync hundreds at a time, and
	// clusters of 100,000 take turns. Defaults DefaultMaxConcurrentSyncs and
	// DefaultMaxSyncObjects.
	MaxConcurrentSyncs int
	MaxSyncObjects     int
	// DiscoveryInterval is how often each cluster's discovery is read again. Default
	// informer.DefaultDiscoveryInterval.
	DiscoveryInterval time.Duration
	// KeepManagedFields keeps metadata.managedFields, stripped by default.
	KeepManagedFields bool
	// JSONOnly asks the clusters for JSON only, not for protobuf where the informers
	// can transcode it (see informer.Options).
	JSONOnly bool
	// KeepSecretData keeps the values of Secrets: data, stringData and the last-applied
	// annotation of kubectl apply, all dropped by default (see informer.Options).
	KeepSecretData bool
	// Transform, if set, runs on every object after the built-in transforms. It must be
	// idempotent (objects loaded from the snapshot pass through it again), and return
	// the type it is given (*unstructured.Unstructured, or *metav1.PartialObjectMetadata
	// for a metadata-only resource): a compact fleet (the default Encoding) and the
	// snapshot encode no other.
	Transform cache.TransformFunc
	// TransformID identifies Transform; change it when Transform changes what it keeps,
	// so that snapshot state made under the old one is not reused.
	TransformID string

	// Snapshot, if set, makes restarts warm: NewManager loads it into the fleet, so reads
	// are served at once, and every informer whose cluster still has the same identity
	// resumes its watch from the saved resourceVersion instead of listing. The Manager
	// keeps it up to date through a persist.Writer. The caller opens and closes it.
	//
	// The objects that a fleet without a Codec loads from it share, within a cluster,
	// the maps and arrays they hold alike (the spec of the pods of one Deployment): one
	// copy of each, as the fleet's objects are not to be modified.
	//
	// While the snapshot loads, NewManager turns the garbage collector off (GOGC=off)
	// and bounds the heap with a memory limit instead: the memory in use plus six times
	// the file's size, or a lower limit (GOMEMLIMIT) that was set. Afterwards it sets
	// both back, unless something else changed them meanwhile. Building the whole cache
	// at once would otherwise spend nearly half of its time in the collector. A
	// collector that was already off is left alone. DisableGCTuning turns this off.
	Snapshot *persist.Store
	// LoadSnapshotInBackground, with Snapshot, has NewManager start loading the
	// snapshot and return at once: the kubeconfig files are read, the clusters made
	// and a program's API served while the file loads. Start engages the clusters once
	// the load has ended, and the fleet is Ready then, before they are engaged: those
	// the snapshot holds are served from it (engaging thousands of clusters would
	// otherwise compete with the load for the CPU). Until SnapshotLoaded is closed, the
	// fleet holds part of the snapshot, and part of the cluster being loaded (filed as
	// it is decoded); reads of the whole fleet wait for SnapshotLoaded. If the file
	// turns out unreadable part of the way through, what it seeded is taken back
	// (Deleted events) and every cluster syncs cold. The garbage collector's tuning
	// (see Snapshot) lasts the load, which now runs beside the program's first work:
	// its garbage waits too, so the peak heap is higher. Not with Shard. Default false:
	// NewManager loads the whole snapshot before it returns.
	LoadSnapshotInBackground bool
	// DisableGCTuning leaves the garbage collector's settings alone while the snapshot
	// loads. They are process-wide: a program that manages them itself sets this.
	// Default false: NewManager tunes them as Snapshot describes.
	DisableGCTuning bool
	// SnapshotWriter configures the writer of Snapshot. See persist.WriterOptions.
	// Reconfigure changes its Interval and MaxPending.
	SnapshotWriter persist.WriterOptions

	// GracefulShutdownTimeout bounds the whole stop of Start once its context is done:
	// clusters, snapshot writer, handlers and Runnables share it (see Start), on the
	// real clock. It is also
	// the default of Fleet.ShutdownTimeout and SnapshotWriter.FinalFlushTimeout, so that
	// none of them gives up before the budget is spent. Default
	// DefaultGracefulShutdownTimeout.
	GracefulShutdownTimeout time.Duration

	// Shard, if set, runs the Manager as one replica of a sharded fleet (see package
	// shard): of the clusters that Clusters selects, it engages only those this replica
	// owns, holding each one's Lease in the home cluster of Shard.Client while its
	// informers run. The others are in Status as PhaseRemote (with the Replica that
	// watches them) or PhaseMoving, without objects; a cluster that moves away leaves
	// the fleet with Deleted events, as a removed one does. Controllers built on
	// Managers with the same Shard.Namespace and Clusters divide the fleet among them.
	// Shard.OnChange is called too. The Manager publishes the resources its clusters
	// resolved as Shard.Describe (a Describe given is replaced), and the statuses of
	// the others' clusters have the resources their owners publish, without a State.
	// With Shard.Balance shard.BalanceObjects and no Shard.Cost, the Manager's Cost is
	// the objects it holds of a cluster once it is synced (see clusterObjects).
	// Default nil: every selected cluster is engaged.
	Shard *shard.Options
	// Handover, with Shard and Snapshot, hands clusters over warm on planned moves: the
	// old owner keeps a moved cluster's stored state for a while, and the new owner
	// imports it before it engages the cluster, whose watches then resume from the old
	// owner's resourceVersions. See HandoverOptions. Default: no Fetcher, so a cluster
	// that moves starts cold on its new owner (relists), as after a crash.
	Handover HandoverOptions

	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// Manager runs a fleet: it engages every cluster that the kubeconfig files select, runs
// an informer set and a health probe for each, and keeps the status of each. Reconfigure
// changes which clusters and resources it caches while it runs.
type Manager struct {
	// opts are fixed by NewManager, except the fields that Reconfigure changes (see
	// reconfigurable), which mu guards.
	opts     Options
	created  time.Time
	fleet    *aggregate.Fleet
	status   *aggregate.StatusBoard
	provider *cluster.Provider
	// shard engages the clusters this replica owns, between the Provider and the
	// Manager; nil unless Options.Shard is set.
	shard *shard.Coordinator
	// described are the other replicas' descriptions of their clusters (describe.go).
	described descriptions
	// writer keeps Options.Snapshot up to date; nil without a snapshot.
	writer *persist.Writer
	// logEpoch identifies the snapshot's change log, and logBases where the objects
	// loaded from the snapshot stand in it (resume.go); "" and nil without a log.
	logEpoch string
	logBases *logBases
	// saved is what the snapshot held, by cluster; mu guards it. Entries are taken by
	// Engage.
	saved map[string]*saved
	// loaded is closed once the snapshot is loaded and its writer created (at once
	// without a snapshot): writer is set before, and read without mu only after.
	loaded chan struct{}
	// handoffs are the states of the clusters this replica handed over, by cluster, kept
	// for their new owners to fetch; mu guards it.
	handoffs map[string]*handoff
	// releaseSync releases the fleet's sync hold once the Manager is first ready, so that
	// handlers registered before the clusters were engaged report HasSynced only after
	// the initial lists.
	releaseSync func()
	// syncReleased is set once releaseSync has been called; releaseCheck while a look
	// of releaseIfReady is due.
	syncReleased, releaseCheck atomic.Bool

	// readyOnce is set once the fleet was first ready; deferred are the calls that wait
	// for it (afterReady); commitsHeld once the snapshot writer commits per interval
	// only until then (holdCommitsLocked). mu guards them.
	readyOnce   bool
	deferred    []*deferredCall
	commitsHeld bool
	// identities reads the identities of the clusters that started cold.
	identities identityReader

	// replayed is closed once the fleet's handlers have taken the snapshot's state
	// (handlersReplayed), made by the first call, under replayedOnce.
	replayed     chan struct{}
	replayedOnce sync.Once
	// resuming holds a slot for each cluster served from the snapshot that is
	// confirming its identity and launching its informers (resumeWorkers at once).
	resuming chan struct{}

	// wg counts the goroutines of engaged clusters, so that Start returns after them.
	wg sync.WaitGroup

	// reconfigureMu serializes Reconfigure, and the creation of each cluster's informer
	// set with it, so that every set ends up with the latest options. Held, it is taken
	// before mu.
	reconfigureMu sync.Mutex

	// mu guards members, limiter, started, runnables, saved, handoffs, unengaged, the
	// fields of opts that Reconfigure changes, and those of a background load below.
	mu sync.Mutex
	// While the snapshot loads in the background (Options.LoadSnapshotInBackground),
	// loading is set, and selection holds the names that Selected last got, applied
	// once the load ends.
	loading   bool
	selection []string
	// unengaged holds the clusters that Selected last got and that were not engaged then,
	// until Engage has had them: readiness waits for them. engageGate, while not nil, is
	// closed once unengaged is empty: the informers and probes of the clusters engaged
	// meanwhile wait for it.
	unengaged  map[string]bool
	engageGate chan struct{}
	// members are the engaged clusters, by name.
	members map[string]*member
	// limiter bounds the initial lists of the clusters engaged from now on.
	limiter informer.Limiter
	// started is set by Start; runnables are those added by Add before, awares those
	// added by AddAware.
	started   bool
	runnables []Runnable
	awares    []cluster.Aware
}

var (
	_ cluster.Aware             = (*Manager)(nil)
	_ cluster.Disengager        = (*Manager)(nil)
	_ cluster.SelectionObserver = (*Manager)(nil)
	_ shard.Receiver            = (*Manager)(nil)
)

// AddAware has the Manager tell a about every cluster it engages, once it has engaged
// it itself: the cluster's informer set and health probe run, and its objects loaded
// from the snapshot, if any, are in the fleet. a's Engage gets the context that the
// Manager's cluster.Provider gave the cluster, which ends when the cluster leaves the
// fleet (removed from the kubeconfig files, or replaced by a new Cluster of the same
// name, which is engaged next), with the cause cluster.Aware describes. It is called
// from the Provider's goroutine, one call at a time, in the order of the changes, and
// must return promptly. An error it returns is logged; the cluster stays in the fleet.
// With Options.Shard, a is told about the clusters this replica owns, from the
// Coordinator's goroutine, and the context also ends when a cluster moves to another
// replica (cause shard.ErrMoved or shard.ErrLeaseLost, which wrap
// cluster.ErrClusterRemoved).
//
// This is how a program builds on the clusters of the fleet without reading the
// kubeconfig files itself, as mcprovider does for multicluster-runtime. ClusterHasSynced
// tells when an engaged cluster's objects are complete in the fleet. AddAware must be
// called before Start; afterwards it returns ErrAlreadyStarted.
func (m *Manager) AddAware(a cluster.Aware) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return ErrAlreadyStarted
	}
	m.awares = append(m.awares, a)
	return nil
}

// ClusterHasSynced reports whether the objects of the engaged cluster name are complete
// in the fleet: the snapshot held the cluster, and the fleet serves what it saved until
// its informers confirm it (phase Stale, whether or not its server answers), or every
// informer of the cluster has synced. It is false for a cluster that is not engaged.
//
// A resource that the snapshot did not hold (one added to Options.Resources since) is
// empty until its informer has listed it. It turns false again only when the cluster's
// saved objects are dropped because its identity changed, until it has synced cold.
func (m *Manager) ClusterHasSynced(name string) bool {
	m.mu.Lock()
	mb := m.members[name]
	m.mu.Unlock()
	if mb == nil {
		return false
	}
	mb.mu.Lock()
	stale := mb.stale
	mb.mu.Unlock()
	if stale || mb.set.HasSynced() {
		mb.markSynced()
		return true
	}
	return false
}

// ClusterSynced returns a channel that is closed once ClusterHasSynced(name) has been
// true for the cluster engaged as name now, so that a caller waits for a cluster
// without polling; nil if no cluster is engaged as name. It is closed at once for a
// cluster that the snapshot held, and stays closed even if ClusterHasSynced turns false
// again (see there). A cluster engaged again under the same name, its connection
// replaced, has a channel of its own.
func (m *Manager) ClusterSynced(name string) <-chan struct{} {
	m.mu.Lock()
	mb := m.members[name]
	m.mu.Unlock()
	if mb == nil {
		return nil
	}
	return mb.synced
}

// member is one engaged cluster.
type member struct {
	cluster *cluster.Cluster
	set     *informer.Set
	sink    *sink
	// done is closed when the informer set has stopped.
	done chan struct{}
	// synced is closed, by markSynced, once ClusterHasSynced has first been true: by
	// refresh, which every change of the informers' status calls.
	synced     chan struct{}
	syncedOnce sync.Once
	// informersSynced is closed by refresh once the informers have first synced (not
	// counting the snapshot's objects, as synced does).
	informersSynced     chan struct{}
	informersSyncedOnce sync.Once
	// saved is the snapshot's state of the cluster, nil if none (or dropped).
	saved *saved
	// syncTimeout is the Options.SyncTimeout the cluster was engaged with.
	syncTimeout time.Duration
	// firstProbe starts the cluster's health probes (afterReady).
	firstProbe *deferredCall

	// refreshMu serializes the refreshes of the cluster's status, so that the status
	// recorded last is computed from the newest observation. The informer set reports
	// each resource's change from that resource's goroutine: unserialized, a refresh
	// that read the set before another could record its older status after it, and keep
	// it until the next change (a health probe, 30s later).
	refreshMu sync.Mutex

	// mu guards the fields below.
	mu sync.Mutex
	// health is the last health report; nil before the first probe.
	health *cluster.Health
	// identity is the cluster's identity, once read.
	identity cluster.Identity
	// syncTimedOut is set when SyncTimeout passed before the initial sync completed.
	syncTimedOut bool
	// stale is set while the cluster's objects come from the snapshot and have not been
	// confirmed by its server.
	stale bool
}

// NewManager validates opts and returns a Manager. Nothing runs until Start.
func NewManager(opts Options) (*Manager, error) {
	if err := validateResources(opts.Resources); err != nil {
		return nil, err
	}
	opts.defaultReconfigurable()
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Fleet.Clock == nil {
		opts.Fleet.Clock = opts.Clock
	}
	codec, err := fleetCodec(&opts)
	if err != nil {
		return nil, err
	}
	opts.Fleet.Codec = codec
	if opts.GracefulShutdownTimeout <= 0 {
		opts.GracefulShutdownTimeout = DefaultGracefulShutdownTimeout
	}
	opts.Fleet.ShutdownTimeout = cmp.Or(opts.Fleet.ShutdownTimeout, opts.GracefulShutdownTimeout)
	opts.SnapshotWriter.FinalFlushTimeout = cmp.Or(opts.SnapshotWriter.FinalFlushTimeout, opts.GracefulShutdownTimeout)
	if opts.LoadSnapshotInBackground && opts.Shard != nil {
		return nil, errors.New("fleetwatch: Options.LoadSnapshotInBackground does not go with Options.Shard")
	}
	fleet := aggregate.New(opts.Fleet)
	m := &Manager{
		opts:        opts,
		created:     time.Now(),
		fleet:       fleet,
		loaded:      make(chan struct{}),
		limiter:     newLimiter(opts),
		releaseSync: fleet.HoldSync(),
		members:     map[string]*member{},
		saved:       map[string]*saved{},
		resuming:    make(chan struct{}, resumeWorkers),
		status: aggregate.NewStatusBoard(opts.Clock, func(c string, gvr schema.GroupVersionResource) int {
			return fleet.Indexer(gvr).ClusterLen(c)
		}),
	}
	if opts.Snapshot != nil && opts.SnapshotWriter.History.Enabled {
		if id, err := opts.Snapshot.ID(); err != nil {
			klog.Background().Error(err, "Watches will not resume from the change log across a restart")
		} else {
			m.logEpoch, m.logBases = id, &logBases{}
		}
	}
	var aware cluster.Aware = m
	if opts.Shard != nil {
		so := *opts.Shard
		onChange := so.OnChange
		so.OnChange = func() {
			m.releaseIfReady()
			if onChange != nil {
				onChange()
			}
		}
		if so.Clock == nil {
			so.Clock = opts.Clock
		}
		so.Describe = func() string { return describe(m.status.List(), shard.MaxDescription) }
		if so.Balance == shard.BalanceObjects && so.Cost == nil {
			so.Cost = m.clusterObjects
		}
		coord, err := shard.New(so, m)
		if err != nil {
			return nil, fmt.Errorf("fleetwatch: Options.Shard: %w", err)
		}
		m.shard, aware = coord, coord
	}
	p, err := cluster.NewProvider(opts.Clusters, aware)
	if err != nil {
		return nil, err
	}
	m.provider = p
	switch {
	case opts.Snapshot == nil:
		close(m.loaded)
	case opts.LoadSnapshotInBackground:
		m.loading = true
		go m.loadSnapshot()
	default:
		m.loadSnapshot()
	}
	return m, nil
}

// SnapshotLoaded returns a channel that is closed once the fleet holds the whole
// snapshot, or none of it if the file was unreadable: before NewManager returns, unless
// Options.LoadSnapshotInBackground is set. It is closed without a snapshot too.
func (m *Manager) SnapshotLoaded() <-chan struct{} { return m.loaded }

// validateResources checks Options.Resources as the informer sets will (see
// informer.ValidateResources), so that a list that NewManager or Reconfigure accepts
// never fails in Engage or in an informer set's Reconfigure.
func validateResources(resources []informer.Resource) error {
	if len(resources) == 0 {
		return errors.New("fleetwatch: Options.Resources is empty")
	}
	if err := informer.ValidateResources(resources, informer.GoFieldNames("Options.Resources")); err != nil {
		return fmt.Errorf("fleetwatch: %w", err)
	}
	return nil
}

// defaultReconfigurable applies the defaults of the fields that Reconfigure changes,
// and copies the caller's slices and maps.
func (o *Options) defaultReconfigurable() {
	if o.SyncTimeout == 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.MaxConcurrentSyncs == 0 {
		o.MaxConcurrentSyncs = DefaultMaxConcurrentSyncs
	}
	if o.MaxSyncObjects == 0 {
		o.MaxSyncObjects = DefaultMaxSyncObjects
	}
	o.Resources = slices.Clone(o.Resources)
	o.Clusters.Kubeconfigs = slices.Clone(o.Clusters.Kubeconfigs)
	o.Clusters.Include = slices.Clone(o.Clusters.Include)
	o.Clusters.Exclude = slices.Clone(o.Clusters.Exclude)
	o.Clusters.Aliases = maps.Clone(o.Clusters.Aliases)
}

// Reconfigure changes, while the Manager runs, the fields of Options that decide which
// clusters and resources are cached: Clusters, Resources, SyncTimeout,
// MaxConcurrentSyncs, MaxSyncObjects, KeepManagedFields and KeepSecretData; and the Interval and
// MaxPending of SnapshotWriter. The other fields of opts are ignored; they are fixed by
// NewManager. Nothing is restarted that the change does not concern:
//
//   - Clusters: the kubeconfig files are read again at once, as when they are edited. A
//     context no longer selected leaves the fleet with its objects, a new one joins, and
//     a context whose alias changed leaves under its old name and joins, cold, under the
//     new one (see cluster.Provider.SetOptions). Other clusters are left alone.
//   - Resources, KeepManagedFields, KeepSecretData: every cluster's informers are
//     reconciled in place (see informer.Set.Reconfigure). A resource no longer listed
//     leaves the fleet and the snapshot; a new one is listed; one whose settings changed
//     is listed again. The informers of unchanged resources go on: nothing is relisted.
//     A change of the kept fields changes every resource.
//   - SyncTimeout, MaxConcurrentSyncs and MaxSyncObjects apply to the clusters that
//     join from now on.
//   - SnapshotWriter.Interval and MaxPending apply to the snapshot's next commit (see
//     persist.Writer.SetTiming).
//
// It returns an error, and changes nothing, if opts.Resources or opts.Clusters are
// invalid. It may be called from any goroutine, before or after Start.
func (m *Manager) Reconfigure(opts Options) error {
	if err := validateResources(opts.Resources); err != nil {
		return err
	}
	opts.defaultReconfigurable()
	m.reconfigureMu.Lock()
	defer m.reconfigureMu.Unlock()
	// The Provider validates the cluster options; it does not block (it reloads in its
	// own goroutine), and nothing else here can fail, so an error changes nothing.
	if err := m.provider.SetOptions(opts.Clusters); err != nil {
		return err
	}
	m.mu.Lock()
	if opts.MaxConcurrentSyncs != m.opts.MaxConcurrentSyncs || opts.MaxSyncObjects != m.opts.MaxSyncObjects {
		m.limiter = newLimiter(opts)
	}
	m.opts.Clusters = opts.Clusters
	m.opts.Resources = opts.Resources
	m.opts.SyncTimeout, m.opts.MaxConcurrentSyncs, m.opts.MaxSyncObjects = opts.SyncTimeout, opts.MaxConcurrentSyncs, opts.MaxSyncObjects
	m.opts.KeepManagedFields, m.opts.KeepSecretData = opts.KeepManagedFields, opts.KeepSecretData
	m.opts.SnapshotWriter.Interval = opts.SnapshotWriter.Interval
	m.opts.SnapshotWriter.MaxPending = opts.SnapshotWriter.MaxPending
	members := slices.Collect(maps.Values(m.members))
	// Nil while the snapshot loads: the writer is created with the timing set here.
	writer := m.writer
	m.mu.Unlock()
	if writer != nil {
		writer.SetTiming(opts.SnapshotWriter.Interval, opts.SnapshotWriter.MaxPending)
	}
	// Outside mu: a Set reports the change through OnChange, which refreshes the status.
	setOpts := informer.Options{Resources: opts.Resources, KeepManagedFields: opts.KeepManagedFields, KeepSecretData: opts.KeepSecretData}
	for _, mb := range members {
		// Not expected to fail: the resources were validated above.
		if err := mb.set.Reconfigure(setOpts); err != nil {
			return fmt.Errorf("cluster %s: %w", mb.cluster.Name, err)
		}
	}
	return nil
}

// loadSnapshot seeds the fleet from Options.Snapshot and creates its writer, then closes
// loaded. The loaded clusters are Stale until their servers confirm them. A background
// load (Options.LoadSnapshotInBackground) lets Engage take each cluster as soon as it
// is seeded.
func (m *Manager) loadSnapshot() {
	if !m.opts.DisableGCTuning {
		var size int64
		if fi, err := os.Stat(m.opts.Snapshot.Path()); err == nil {
			size = fi.Size()
		}
		defer gctune.Relax(gctune.LoadBudget(size))()
	}
	// One cluster at a time, each seeded while the next is decoded, and filed run by run
	// as its own runs are decoded (LoadOptions.Objects): a cluster is complete in the
	// fleet, and Engage takes it, once the last of its runs is filed. A compact fleet in
	// the snapshot's encoding takes the stored encodings as they are.
	ctx := klog.NewContext(context.Background(), klog.Background())
	specs := m.specs()
	var stale []staleScope
	// seeded has the clusters that the load put objects of into the fleet, which a
	// failed load takes out again; seeders those being filed, in the goroutine that
	// calls Objects and fn, one at a time.
	seeded := map[string]bool{}
	seeders := map[string]*clusterSeeder{}
	began, objects := time.Now(), 0
	seeder := func(name string) *clusterSeeder {
		sd := seeders[name]
		if sd == nil {
			sd = newClusterSeeder(ctx, m.fleet, name, specs, m.logBases)
			seeders[name] = sd
			seeded[name] = true
		}
		return sd
	}
	loadOpts := persist.LoadOptions{
		Partial: snapshotEncoded(m.opts.Fleet.Codec),
		Objects: func(name string, key persist.ResourceKey, objects []runtime.Object, encoded [][]byte) error {
			seeder(name).add(key, objects, encoded)
			return nil
		},
	}
	err := m.opts.Snapshot.LoadEach(loadOpts, func(name string, cs *persist.ClusterSnapshot) error {
		var s *saved
		sd := seeder(name)
		s, stale = sd.finish(cs, stale)
		objects += sd.n
		delete(seeders, name)
		m.status.Set(loadedStatus(name, s.identity))
		m.mu.Lock()
		m.saved[name] = s
		m.mu.Unlock()
		if testHookSeeded != nil {
			return testHookSeeded(name)
		}
		return nil
	})
	if err != nil {
		// The file was found unreadable part of the way through (and moved aside, when it
		// could be): what was seeded from it goes, and the fleet starts cold. No cluster
		// was engaged from it: Engage waits for the load's end.
		klog.Background().Error(err, "Snapshot unusable; starting cold", "path", m.opts.Snapshot.Path())
		m.mu.Lock()
		m.saved, stale = map[string]*saved{}, nil
		m.mu.Unlock()
		for name := range seeded {
			m.logBases.forget(name, schema.GroupVersionResource{})
			m.fleet.RemoveCluster(name)
			m.status.Remove(name)
		}
	}
	if err == nil {
		klog.Background().Info("Snapshot loaded", "path", m.opts.Snapshot.Path(), "clusters", len(seeded), "objects", objects, "took", time.Since(began).Round(time.Millisecond))
	}
	dropStale(ctx, m.opts.Snapshot, stale)
	m.mu.Lock()
	m.writer = m.opts.Snapshot.NewWriter(m.opts.SnapshotWriter)
	m.holdCommitsLocked()
	selection := m.selection
	m.loading, m.selection = false, nil
	m.mu.Unlock()
	if selection != nil {
		m.dropUnselected(ctx, selection)
	}
	close(m.loaded)
	// The selected clusters that the snapshot holds are served now, engaged or not.
	m.releaseIfReady()
}

// snapshotWriter returns the writer of Options.Snapshot: nil without a snapshot, and
// while it loads.
func (m *Manager) snapshotWriter() *persist.Writer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.writer
}

// testHookSeeded is called by loadSnapshot after it seeded each cluster, so that a test
// holds a background load there, or fails it as an unreadable file would.
var testHookSeeded func(cluster string) error

// awaitLoaded waits until the snapshot is loaded; it returns false if ctx ended first.
func (m *Manager) awaitLoaded(ctx context.Context) bool {
	select {
	case <-m.loaded:
		return true
	case <-ctx.Done():
		return false
	}
}

// SnapshotStats returns the snapshot writer's statistics; ok is false without a snapshot.
func (m *Manager) SnapshotStats() (stats persist.Stats, ok bool) {
	w := m.snapshotWriter()
	if w == nil {
		return persist.Stats{}, false
	}
	return w.Stats(), true
}

// Fleet returns the federated cache: listers, indices and handlers. A handler's
// Registration.HasSynced turns true only once the Manager has been Ready, so
// cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) waits for the initial lists of the
// clusters, also for handlers added before Start.
func (m *Manager) Fleet() *aggregate.Fleet { return m.fleet }

// Sharded reports whether the Manager runs as one replica of a sharded fleet
// (Options.Shard; server.ShardedSource).
func (m *Manager) Sharded() bool { return m.shard != nil }

// RESTConfig returns a copy of the rest.Config with which the Manager reaches the engaged
// cluster name, so that a controller can write back to the cluster an event came from
// (Event.Cluster, Key.Cluster):
//
//	cfg, err := mgr.RESTConfig(e.Cluster)
//	...
//	cs, err := kubernetes.NewForConfig(cfg)
//
// It connects as the cluster's kubeconfig context does, with cluster.Options' QPS, Burst
// and UserAgent, and has no timeout. The copy is the caller's to change. A cluster
// replaced because its connection changed in the kubeconfig (see cluster.Provider) gets
// a new config: clients built from the old one keep the old connection, so a controller
// that keeps clients per cluster builds them again when RESTConfig's Host or credentials
// change, or builds them per write.
//
// With Options.Shard, a cluster that the kubeconfig files select and another replica
// watches has its config too: this replica does not watch it, but may read it (the
// server reads a custom resource's CRD for its Table columns) or write to it.
//
// It returns an error wrapping ErrUnknownCluster for any other cluster: one the
// kubeconfig files do not select, one that left the fleet, or one known only from the
// snapshot until the kubeconfig files are read.
func (m *Manager) RESTConfig(name string) (*rest.Config, error) {
	m.mu.Lock()
	mb := m.members[name]
	m.mu.Unlock()
	if mb != nil {
		return rest.CopyConfig(mb.cluster.Config), nil
	}
	if m.shard != nil {
		if c, ok := m.shard.Selected(name); ok {
			return rest.CopyConfig(c.Config), nil
		}
	}
	return nil, fmt.Errorf("rest config of cluster %q: %w", name, ErrUnknownCluster)
}

// Status returns the status of every engaged cluster, sorted by name. With
// Options.Shard, it also has every selected cluster that another replica owns, or none
// does now, as PhaseRemote or PhaseMoving, and each status says which replica watches
// the cluster.
func (m *Manager) Status() []aggregate.ClusterStatus {
	sts := m.status.List()
	if m.shard == nil {
		return sts
	}
	placements := m.shard.Placements()
	byName := make(map[string]shard.Placement, len(placements))
	for _, p := range placements {
		byName[p.Cluster] = p
	}
	for i := range sts {
		p := byName[sts[i].Name]
		sts[i].Replica, sts[i].ReplicaAddress = p.Holder, p.Address
		delete(byName, sts[i].Name)
	}
	for _, p := range byName {
		sts = append(sts, m.placedStatus(p))
	}
	slices.SortFunc(sts, func(a, b aggregate.ClusterStatus) int { return cmp.Compare(a.Name, b.Name) })
	return sts
}

// NotSynced returns the statuses of the first limit clusters by name that have not
// synced, how many there are, and how many clusters Status has, without building every
// cluster's status unless the Manager runs as a shard (server.NotSyncedSource: what a
// failed /readyz names).
func (m *Manager) NotSynced(limit int) (first []aggregate.ClusterStatus, notSynced, all int) {
	if m.shard == nil {
		return m.status.NotSynced(limit)
	}
	// A replica's statuses include the clusters that others watch (Status).
	for _, st := range m.Status() {
		all++
		switch st.Phase {
		case aggregate.PhaseSynced, aggregate.PhaseRemote, aggregate.PhaseMoving:
			continue
		}
		if notSynced++; len(first) < limit {
			first = append(first, st)
		}
	}
	return first, notSynced, all
}

// ClusterStatus returns the status of one cluster (see Status).
func (m *Manager) ClusterStatus(name string) (aggregate.ClusterStatus, bool) {
	st, ok := m.status.Get(name)
	if m.shard == nil {
		return st, ok
	}
	for _, p := range m.shard.Placements() {
		if p.Cluster != name {
			continue
		}
		if !ok {
			return m.placedStatus(p), true
		}
		st.Replica, st.ReplicaAddress = p.Holder, p.Address
		return st, true
	}
	return st, ok
}

// placedStatus is the status of a selected cluster that this replica does not watch.
func (m *Manager) placedStatus(p shard.Placement) aggregate.ClusterStatus {
	st := aggregate.ClusterStatus{Name: p.Cluster, Phase: aggregate.PhaseMoving, Replica: p.Holder, ReplicaAddress: p.Address}
	if p.Holder != "" {
		st.Phase = aggregate.PhaseRemote
		st.Resources = m.described.resources(p.Holder, p.Description, p.Cluster)
	}
	if c, ok := m.provider.Get(p.Cluster); ok {
		st.Server = c.Server()
	}
	return st
}

// Ready reports whether every engaged cluster is served: it has synced, or it is
// served from the snapshot (phase Stale, while its identity is verified and its watches
// resume in the background), or it failed to sync within SyncTimeout and serves its
// last known state. A warm start is so ready as soon as the snapshot is loaded, without
// waiting for a round trip to any cluster, nor for its clusters to be engaged (a
// selected cluster that the snapshot holds is served before its Engage); a cluster whose identity turns out changed
// drops its saved objects and holds readiness back again until it has synced. A Manager
// without clusters is not ready, unless it runs as a shard (Options.Shard): then it is
// ready once it is a member, owns every cluster assigned to it (which may be none), and
// those are ready.
func (m *Manager) Ready() bool { return m.ready(true) }

// HasSynced reports whether every engaged cluster has synced against its server, or
// failed to within SyncTimeout: it is Ready without counting the clusters served from
// the snapshot, unconfirmed, as ready.
func (m *Manager) HasSynced() bool { return m.ready(false) }

// ready is Ready, or HasSynced without stale.
func (m *Manager) ready(stale bool) bool {
	if m.shard != nil && !m.shard.Settled() {
		return false
	}
	m.mu.Lock()
	members := make([]*member, 0, len(m.members))
	for _, mb := range m.members {
		members = append(members, mb)
	}
	selected := len(members) + len(m.unengaged)
	unengaged := m.unengagedLocked(stale)
	m.mu.Unlock()
	if selected == 0 && m.shard == nil || unengaged {
		return false
	}
	for _, mb := range members {
		mb.mu.Lock()
		served := mb.syncTimedOut || (stale && mb.stale)
		mb.mu.Unlock()
		if !served && !mb.set.HasSynced() {
			return false
		}
	}
	return true
}

// unengagedLocked reports whether a selected cluster that is not engaged yet holds
// readiness back: with stale, one whose state the loaded snapshot holds does not, since
// the fleet serves it already (its informers start once it is engaged, which at
// thousands of clusters goes on after the load).
func (m *Manager) unengagedLocked(stale bool) bool {
	if !stale || m.loading {
		return len(m.unengaged) > 0
	}
	for name := range m.unengaged {
		// A cluster being engaged is a member once its informers are made; until then
		// its saved state stays in saved.
		if m.saved[name] == nil && m.members[name] == nil {
			return true
		}
	}
	return false
}

// Selected implements cluster.SelectionObserver: it removes the snapshot's clusters
// that the kubeconfig files no longer select (with Options.Shard: that are not assigned
// to this replica), so that their objects are not served as ghosts. The others stay
// until they are engaged.
func (m *Manager) Selected(ctx context.Context, names []string) {
	m.mu.Lock()
	// The selected clusters not engaged yet hold readiness back until they are, but for
	// those the loaded snapshot holds: the Provider engages them one after the other.
	m.unengaged = map[string]bool{}
	for _, name := range names {
		if m.members[name] == nil {
			m.unengaged[name] = true
		}
	}
	if len(m.unengaged) > 0 && m.engageGate == nil {
		m.engageGate = make(chan struct{})
	}
	m.openGateLocked()
	m.holdCommitsLocked()
	// A warm start is ready once its clusters are selected, engaged or not.
	defer m.releaseIfReady()
	if m.loading {
		// The clusters loaded next are not in saved yet: the load's end drops them all.
		m.selection = names
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.dropUnselected(ctx, names)
}

// dropUnselected removes the snapshot's clusters that are not among names, sorted, and
// not engaged yet, as Selected says.
func (m *Manager) dropUnselected(ctx context.Context, names []string) {
	m.mu.Lock()
	var drop []string
	for name := range m.saved {
		if _, ok := slices.BinarySearch(names, name); !ok {
			drop = append(drop, name)
			delete(m.saved, name)
		}
	}
	m.mu.Unlock()
	slices.Sort(drop)
	for _, name := range drop {
		klog.FromContext(ctx).Info("Dropping a snapshot cluster that is no longer selected (by the kubeconfig files, or, as a shard, by the assignment)", "cluster", name)
		m.logBases.forget(name, schema.GroupVersionResource{})
		m.fleet.RemoveCluster(name)
		m.status.Remove(name)
		m.writer.DropCluster(name)
	}
}

// Engage implements cluster.Aware: it starts the cluster's informer set, health probe
// and identity read, bound to ctx. While the snapshot loads in the background
// (Options.LoadSnapshotInBackground), it first waits until the load has ended, so that
// a cluster the snapshot holds is engaged with its objects, and so that engaging
// thousands of clusters does not compete with the load for the CPU: the fleet is ready
// once the load has ended, whether its clusters are engaged yet or not (Ready).
func (m *Manager) Engage(ctx context.Context, c *cluster.Cluster) error {
	// Engaged or failed (the Provider retries at its next reload, and readiness does not
	// wait for that), it no longer holds readiness back as not engaged yet.
	defer func() {
		m.mu.Lock()
		delete(m.unengaged, c.Name)
		m.openGateLocked()
		m.mu.Unlock()
	}()
	if !m.awaitLoaded(ctx) {
		return fmt.Errorf("cluster %s: %w", c.Name, context.Cause(ctx))
	}
	m.reconfigureMu.Lock()
	m.mu.Lock()
	// The saved state leaves saved when the cluster becomes a member, so that a
	// cluster being engaged is served from it all along (unengagedLocked).
	sv := m.saved[c.Name]
	setOpts := informer.Options{
		Cluster:            c.Name,
		Config:             c.Config,
		Resources:          m.opts.Resources,
		SyncTimeout:        m.opts.SyncTimeout,
		DiscoveryInterval:  m.opts.DiscoveryInterval,
		InitialSyncLimiter: m.limiter,
		ExpectedObjects:    sv.objects(),
		KeepManagedFields:  m.opts.KeepManagedFields,
		KeepSecretData:     m.opts.KeepSecretData,
		JSONOnly:           m.opts.JSONOnly,
		Transform:          m.opts.Transform,
		TransformID:        m.opts.TransformID,
		Clock:              m.opts.Clock,
	}
	m.mu.Unlock()
	mb := &member{cluster: c, done: make(chan struct{}), synced: make(chan struct{}), informersSynced: make(chan struct{}), saved: sv, stale: sv != nil, syncTimeout: setOpts.SyncTimeout}
	// The writer is the sink's once the snapshot is loaded, before the informers start.
	mb.sink = &sink{fleet: m.fleet, cluster: c.Name, snapshot: m.opts.Snapshot, compact: snapshotEncoded(m.opts.Fleet.Codec), bases: m.logBases}
	setOpts.Sink = mb.sink
	setOpts.OnChange = func() { m.refresh(mb) }
	set, err := informer.New(setOpts)
	if err != nil {
		m.reconfigureMu.Unlock()
		return err
	}
	mb.set = set
	m.mu.Lock()
	delete(m.saved, c.Name)
	m.members[c.Name] = mb
	m.holdCommitsLocked()
	awares := slices.Clone(m.awares)
	gate := m.engageGate
	m.mu.Unlock()
	m.reconfigureMu.Unlock()
	phase := aggregate.PhaseConnecting
	if sv != nil {
		phase = aggregate.PhaseStale
	}
	m.status.Set(aggregate.ClusterStatus{Name: c.Name, Server: c.Server(), Phase: phase})
	m.refresh(mb)

	// The first probe waits for the fleet to be ready (afterready.go) or, served from
	// the snapshot, for the cluster to resume; or for its sync to take firstProbeDelay;
	// or a health interval at most.
	mb.firstProbe = m.deferCall(ctx, func() { m.startHealth(ctx, mb) })
	if sv == nil {
		m.afterReady(mb.firstProbe)
	}
	time.AfterFunc(cmp.Or(m.opts.Health.Interval, cluster.DefaultHealthInterval), mb.firstProbe.run)
	m.wg.Add(2)
	go func() {
		// Until the informers are launched, this goroutine ends the cluster's run when it
		// returns; once they are, their Launch does, when they have stopped.
		launched := false
		defer func() {
			if !launched {
				close(mb.done)
				m.wg.Done()
			}
		}()
		// The clusters selected with this one are engaged first, so that their
		// informers and probes do not contend with the engaging for the CPU.
		if gate != nil {
			select {
			case <-ctx.Done():
				return
			case <-gate:
			}
		}
		// A cluster served from the snapshot resumes once the fleet's handlers (the
		// server's cache, a controller's informers) have taken the snapshot's state,
		// which they serve: the resumes of thousands of clusters would compete with
		// them for the CPU, for nothing that readiness waits for.
		if mb.saved != nil {
			select {
			case <-ctx.Done():
				return
			case <-m.handlersReplayed():
			}
			// The resumes of thousands of clusters take turns: all at once, they
			// would be thousands of goroutines in the scheduler's queue, ahead of
			// every request to the API that serves their snapshot meanwhile.
			select {
			case <-ctx.Done():
				return
			case m.resuming <- struct{}{}:
			}
			defer func() { <-m.resuming }()
			mb.firstProbe.run()
		}
		mb.sink.setWriter(m.writer)
		// With saved state, the identity must be confirmed before the informers resume
		// from it: a recreated or repointed cluster must not inherit another's objects.
		if !m.confirmIdentity(ctx, mb) {
			return
		}
		go m.dropUnrequestedOnceSynced(ctx, mb)
		launched = true
		set.Launch(ctx, func(err error) {
			if err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Informers stopped")
			}
			close(mb.done)
			m.wg.Done()
		})
	}()
	go func() {
		defer m.wg.Done()
		// SyncTimeout counts from the cluster's turn among the initial syncs, as the
		// informers count it: a cluster that waits for its turn has not failed to sync.
		// The goroutine ends once the informers have synced. A cluster that has not
		// synced firstProbeDelay into its turn is probed then.
		select {
		case <-ctx.Done():
			return
		case <-set.Listing():
		}
		timeout := m.opts.Clock.After(mb.syncTimeout)
		probe := m.opts.Clock.After(firstProbeDelay)
		for {
			select {
			case <-ctx.Done():
			case <-mb.informersSynced:
			case <-probe:
				mb.firstProbe.run()
				probe = nil
				continue
			case <-timeout:
				mb.mu.Lock()
				mb.syncTimedOut = !set.HasSynced()
				mb.mu.Unlock()
				m.refresh(mb)
			}
			return
		}
	}()
	for _, a := range awares {
		if err := a.Engage(ctx, c); err != nil {
			klog.FromContext(ctx).Error(err, "An Aware added with AddAware failed to engage the cluster; it stays in the fleet")
		}
	}
	return nil
}

// resumeWorkers is how many clusters served from the snapshot confirm their identity
// and launch their informers at once.
const resumeWorkers = 32

// replayWait bounds how long the clusters served from the snapshot wait for the fleet's
// handlers to take its state before they resume: a slow handler holds them back no
// longer.
var replayWait = 5 * time.Second

// handlersReplayed returns a channel that is closed once every handler that the fleet
// has at the first call has been delivered the fleet's state as it was when the
// handler was added (aggregate.Registration.Replayed), and then every event queued for
// it up to that moment (CaughtUp): a handler added before the snapshot was loaded (the
// server's cache, which the API serves while the snapshot loads) has then taken the
// snapshot's state too. It is closed replayWait after the first call at the latest.
func (m *Manager) handlersReplayed() <-chan struct{} {
	m.replayedOnce.Do(func() {
		m.replayed = make(chan struct{})
		handlers := m.fleet.Handlers()
		go func() {
			defer close(m.replayed)
			timeout := time.NewTimer(replayWait)
			defer timeout.Stop()
			for _, r := range handlers {
				for _, done := range []func() <-chan struct{}{r.Replayed, r.CaughtUp} {
					select {
					case <-done():
					case <-timeout.C:
						return
					}
				}
			}
		}()
	})
	return m.replayed
}

// openGateLocked opens the engage gate once every selected cluster had its Engage.
func (m *Manager) openGateLocked() {
	if len(m.unengaged) == 0 && m.engageGate != nil {
		close(m.engageGate)
		m.engageGate = nil
	}
}

// startHealth starts probing the health of mb's cluster until ctx is done. The probes
// run on timers: a cluster costs no goroutine between them.
func (m *Manager) startHealth(ctx context.Context, mb *member) {
	m.wg.Add(1)
	if err := cluster.StartHealth(ctx, mb.cluster, m.opts.Health, func(h cluster.Health) {
		mb.mu.Lock()
		mb.health = &h
		mb.mu.Unlock()
		m.refresh(mb)
	}, m.wg.Done); err != nil {
		m.wg.Done()
		klog.FromContext(ctx).Error(err, "Cannot probe the cluster's health")
	}
}

// confirmIdentity reads the cluster's identity (retrying until ctx is done) and records
// it. If the cluster had saved state under another identity, that state is dropped, and
// the cluster syncs cold. With saved state it returns only once the identity is known;
// without, it returns true at once, and the identity is read in the background once the
// fleet is ready. It returns false if ctx ended first.
func (m *Manager) confirmIdentity(ctx context.Context, mb *member) bool {
	if mb.saved == nil {
		// Needed by the next start only: read once the fleet is ready (afterready.go).
		// Not spread with the probes: a stop soon after the fleet is ready must find it
		// read, or the next start takes the cluster as changed and syncs it cold.
		m.identities.pending(mb)
		d := m.deferCall(ctx, func() { m.identities.add(ctx, m, mb) })
		d.atOnce = true
		m.afterReady(d)
		return true
	}
	id, ok := m.readIdentity(ctx, mb)
	if !ok {
		return false
	}
	name := mb.cluster.Name
	if !id.Equal(mb.saved.identity) {
		klog.FromContext(ctx).Info("Cluster identity changed since the snapshot; dropping its saved objects and syncing cold",
			"cluster", name, "saved", mb.saved.identity.String(), "now", id.String())
		m.logBases.forget(name, schema.GroupVersionResource{})
		m.fleet.RemoveCluster(name)
		// Another cluster under the same name: the change log says so.
		m.writer.ReplaceCluster(name)
		m.writer.SetIdentity(name, persist.Identity{UID: id.UID, Server: id.Server})
		mb.saved = nil
		mb.mu.Lock()
		mb.stale = false
		mb.mu.Unlock()
		return true
	}
	seeds := map[informer.Scope]savedScope{}
	for scope, s := range mb.saved.scopes {
		seeds[scope] = s
	}
	mb.sink.mu.Lock()
	mb.sink.seeds = seeds
	mb.sink.mu.Unlock()
	return true
}

// dropUnrequestedOnceSynced waits for the cluster's first sync, then drops the saved
// scopes that its informers did not ask for, and forgets what was loaded.
func (m *Manager) dropUnrequestedOnceSynced(ctx context.Context, mb *member) {
	if mb.saved == nil {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-mb.informersSynced:
	}
	mb.sink.dropUnrequested(ctx, mb.saved.scopes)
	// The loaded objects now live in the fleet only; keeping them here too would hold a
	// second copy of every object that changes.
	mb.sink.mu.Lock()
	mb.sink.seeds = nil
	mb.sink.mu.Unlock()
	mb.saved = nil
}

// newLimiter returns the limiter of the initial syncs that opts configure.
func newLimiter(opts Options) informer.Limiter {
	return informer.NewLimiter(informer.LimiterOptions{MaxSyncs: opts.MaxConcurrentSyncs, MaxObjects: opts.MaxSyncObjects})
}

// Disengage implements cluster.Disengager: once the cluster's informers have stopped,
// its objects leave the cache, with a Deleted event each.
func (m *Manager) Disengage(ctx context.Context, c *cluster.Cluster, cause error) error {
	m.mu.Lock()
	mb := m.members[c.Name]
	if mb != nil && mb.cluster == c {
		delete(m.members, c.Name)
	} else {
		mb = nil
	}
	m.mu.Unlock()
	if mb == nil {
		return nil
	}
	m.identities.forget(mb)
	select {
	case <-mb.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if errors.Is(cause, shard.ErrMoved) {
		m.keepHandoff(ctx, c.Name)
	}
	m.logBases.forget(c.Name, schema.GroupVersionResource{})
	if errors.Is(cause, shard.ErrMoved) || errors.Is(cause, shard.ErrLeaseLost) {
		// Another replica watches it now: its objects did not go.
		m.fleet.MoveCluster(c.Name)
	} else {
		m.fleet.RemoveCluster(c.Name)
	}
	m.status.Remove(c.Name)
	if w := m.snapshotWriter(); w != nil {
		w.DropCluster(c.Name)
	}
	klog.FromContext(ctx).Info("Cluster left the fleet; its objects were removed", "cluster", c.Name, "reason", cause)
	return nil
}

// readIdentity reads the cluster's identity, retrying with backoff until it succeeds or
// ctx is done, records it, and saves it in the snapshot.
func (m *Manager) readIdentity(ctx context.Context, mb *member) (cluster.Identity, bool) {
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: time.Minute}
	for ctx.Err() == nil {
		if id, err := m.tryIdentity(ctx, mb); err == nil {
			return id, true
		}
		select {
		case <-ctx.Done():
		case <-m.opts.Clock.After(backoff.Step()):
		}
	}
	return cluster.Identity{}, false
}

// tryIdentity reads the cluster's identity once and, if it could, records it and saves
// it in the snapshot.
func (m *Manager) tryIdentity(ctx context.Context, mb *member) (cluster.Identity, error) {
	id, err := cluster.ReadIdentity(ctx, mb.cluster.Config)
	if err != nil {
		return cluster.Identity{}, err
	}
	mb.mu.Lock()
	mb.identity = id
	mb.mu.Unlock()
	m.identities.forget(mb)
	// Written with the writer's next commit, not in a commit of its own (one per
	// cluster, thousands at the start of a large fleet); a snapshot that has it already
	// is left alone. A cluster whose identity did not make it to the file before a crash
	// is taken as changed at the next start, and syncs cold; a stop reads those still
	// unread first (drainIdentities).
	if w := m.snapshotWriter(); w != nil && mb.saved == nil {
		w.SetIdentity(mb.cluster.Name, persist.Identity{UID: id.UID, Server: id.Server})
	}
	m.refresh(mb)
	return id, nil
}

// refresh recomputes the status of a cluster from its informers and its health (see
// clusterStatus), and releases the fleet's sync hold once the Manager is ready.
func (m *Manager) refresh(mb *member) {
	m.mu.Lock()
	current := m.members[mb.cluster.Name] == mb
	m.mu.Unlock()
	if !current {
		return
	}
	mb.refreshMu.Lock()
	defer mb.refreshMu.Unlock()
	o := observed{name: mb.cluster.Name, server: mb.cluster.Server(), resources: mb.set.Status(), syncTimeout: mb.syncTimeout}
	mb.mu.Lock()
	o.health, o.identity, o.syncTimedOut, o.stale = mb.health, mb.identity, mb.syncTimedOut, mb.stale
	mb.mu.Unlock()
	st, synced := clusterStatus(o)
	if synced {
		mb.mu.Lock()
		mb.stale = false
		mb.mu.Unlock()
	}
	if o.stale || mb.set.HasSynced() {
		mb.markSynced()
	}
	if mb.set.HasSynced() {
		mb.informersSyncedOnce.Do(func() { close(mb.informersSynced) })
	}
	m.status.Set(st)
	m.releaseIfReady()
}

// markSynced closes mb.synced, once.
func (mb *member) markSynced() { mb.syncedOnce.Do(func() { close(mb.synced) }) }

// releaseCheckDelay is how long releaseIfReady gathers the refreshes of the clusters
// before it asks Ready.
const releaseCheckDelay = 20 * time.Millisecond

// releaseIfReady releases the fleet's sync hold once the Manager is ready. Ready looks at
// every cluster, and each of thousands of clusters is refreshed many times while the
// fleet starts: asked at each refresh, it took 14% of the CPU of a start of 10,000
// clusters. So the refreshes of releaseCheckDelay are gathered into one look, on the
// real clock, and once released, nothing is asked again.
func (m *Manager) releaseIfReady() {
	if m.syncReleased.Load() || !m.releaseCheck.CompareAndSwap(false, true) {
		return
	}
	time.AfterFunc(releaseCheckDelay, func() {
		// Cleared before Ready looks, so that a refresh after this line asks again.
		m.releaseCheck.Store(false)
		if !m.syncReleased.Load() && m.Ready() && m.syncReleased.CompareAndSwap(false, true) {
			m.releaseSync()
			m.runDeferred()
			m.mu.Lock()
			// A cluster being engaged is a member already and still among the
			// unengaged until its Engage returns: counted once.
			clusters := len(m.members)
			for name := range m.unengaged {
				if m.members[name] == nil {
					clusters++
				}
			}
			m.mu.Unlock()
			klog.Background().Info("Fleet ready", "clusters", clusters, "since", time.Since(m.created).Round(time.Millisecond))
		}
	})
}
