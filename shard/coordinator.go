package shard

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// Causes of a cluster's disengagement by a Coordinator. Both wrap
// cluster.ErrClusterRemoved: the cluster leaves this replica's fleet, with its objects.
var (
	// ErrMoved: the cluster is assigned to another replica, which takes it over once
	// this one has released it.
	ErrMoved = fmt.Errorf("%w: moved to another replica", cluster.ErrClusterRemoved)
	// ErrLeaseLost: this replica could not renew its Lease within RenewDeadline, or
	// another replica holds the cluster's Lease.
	ErrLeaseLost = fmt.Errorf("%w: this replica lost its Lease", cluster.ErrClusterRemoved)
)

// Options configure a Coordinator. Every field documents its default.
type Options struct {
	// Identity names this replica: its Lease is ReplicaLeaseName(Identity), and it holds
	// cluster Leases under this name. It must be unique among the replicas and should be
	// stable across restarts (a StatefulSet pod's name), so that a restarted replica
	// finds its clusters where it left them. Required; see ValidateIdentity.
	Identity string
	// Namespace holds the Leases in the home cluster. Required.
	Namespace string
	// Client reaches the home cluster. It needs get, list, watch, create and update on
	// Leases in Namespace, nothing else. Required.
	Client kubernetes.Interface
	// RenewClient, if set, is the client of this replica's own Lease (get, create and
	// update), with a rate limiter of its own: the renewals then never wait behind the
	// requests of the cluster Leases, which a replica sends by the hundred when it
	// starts, takes over a lost replica's clusters or releases its own, and which would
	// otherwise eat into the margin between RenewDeadline and LeaseDuration. Default
	// Client.
	RenewClient kubernetes.Interface
	// Address is how peers reach this replica's API, published on its Lease as
	// AddressAnnotation. Default: none published.
	Address string

	// LeaseDuration is how long the others wait, from the last change of a replica's
	// Lease they observed, before they count it gone and take its clusters. Default
	// DefaultLeaseDuration.
	LeaseDuration time.Duration
	// RenewDeadline is how long a replica keeps its clusters after its last successful
	// renewal: past it, it disengages them all, before LeaseDuration lets another start.
	// Default DefaultRenewDeadline.
	RenewDeadline time.Duration
	// RetryPeriod is the interval of renewals, of the reads of the others' Leases, and
	// of the attempts to take a cluster. Default DefaultRetryPeriod.
	RetryPeriod time.Duration

	// Replicas is how many replicas the fleet runs (a StatefulSet's replicas). A replica
	// that starts takes no cluster until it sees that many members, itself included, or
	// until StartTimeout has passed since it joined. Replicas started together (a fresh
	// install, or a full restart of a StatefulSet with podManagementPolicy Parallel) thus
	// each list their own share once, instead of the first to join taking every cluster
	// and handing most of them over a moment later. A replica that starts while the
	// others run (a rolling update, a restart after a crash) waits for nothing once it
	// sees one of them renew a Lease that says it is done waiting (StartedAnnotation);
	// neither does one that joins again after it lost its Lease. Default 0: not known,
	// no wait.
	Replicas int
	// StartTimeout bounds the wait for Replicas: past it, a replica takes its share
	// among the members it sees, as if the missing ones had failed. Default
	// DefaultStartTimeout.
	StartTimeout time.Duration

	// ParallelReceives bounds how many states of clusters handed over to this replica
	// a Receiver fetches at once. Default DefaultParallelReceives.
	ParallelReceives int

	// Describe, if set, returns what this replica publishes about the clusters it owns,
	// written to its Lease (DescriptionAnnotation) at each renewal, at most
	// MaxDescription bytes (a longer one is not published); the others read it as
	// Placement.Description of the clusters this replica holds. A fleetwatch.Manager
	// publishes the resources its clusters resolved, so that a replica serves the API
	// of clusters it does not watch, also when it watches none. It is called from Start's
	// goroutine and must return promptly. Default: nothing published.
	Describe func() string

	// Balance is what the placement balances among the replicas: BalanceCount,
	// rendezvous hashing (Owner), each replica about as many clusters; or
	// BalanceObjects, AssignByCost over the costs that the clusters' holders publish
	// (Cost), each replica at most 1.25 times the mean of the objects. It is published
	// on the replica's Lease (BalanceAnnotation), and the replicas place by objects only
	// while every member publishes BalanceObjects, else by count, as releases before it
	// place: the replicas must agree on the placement. Default BalanceCount.
	Balance Balance
	// Cost returns the objects that this replica holds of a cluster it owns, and
	// whether they are known (false, for instance, until the cluster has synced): its
	// holder publishes them on the cluster's Lease (CostAnnotation), quantized
	// (Requantize), when the quantized value changes. Required with BalanceObjects. It
	// is called from Start's goroutine, without the Coordinator's locks, once per owned
	// cluster and round, and must return promptly.
	Cost func(cluster string) (objects int64, ok bool)

	// OnChange, if set, is called after each round in which this replica's membership,
	// the clusters it owns or the placement of the others changed. It must return
	// promptly.
	OnChange func()
	// Clock defaults to the real clock.
	Clock clock.WithTicker
}

// DefaultStartTimeout is the default of Options.StartTimeout: long enough for the pods
// of a StatefulSet started in parallel to pull their image and join, short enough that
// a replica that cannot be scheduled delays the others' start by no more.
const DefaultStartTimeout = time.Minute

// DefaultParallelReceives is the default of Options.ParallelReceives: a replica that
// gains many clusters at once (a scale down) fetches their states a few at a time, so
// that no old owner and no network link is asked for all of them at once.
const DefaultParallelReceives = 4

// MaxDescription bounds Options.Describe: the annotations of an object are limited to
// 256 KiB in all, and a replica Lease is written at every renewal.
const MaxDescription = 128 << 10

// Placement is where a cluster is watched, as a replica sees it.
type Placement struct {
	// Cluster is the cluster name.
	Cluster string
	// Holder is the replica that holds the cluster's Lease and is a member; empty while
	// no live replica does (its owner is gone, or the cluster is being handed over).
	Holder string
	// Address is Holder's published address, if any.
	Address string
	// Description is what Holder publishes (Options.Describe), if another replica holds
	// the cluster.
	Description string
	// Assigned is the replica that the placement (Options.Balance) assigns the cluster
	// to among the members this replica sees; it takes the cluster once Holder released
	// it.
	Assigned string
}

// Coordinator engages with its Aware the clusters that this replica owns, of those a
// Provider engages with it (see the package doc). It is a cluster.Aware, a
// cluster.Disengager, for the Provider, and runs its rounds of renewals and assignment
// in Start. An Aware that is a cluster.SelectionObserver is told, once this replica is
// a member and has seen every other member renew (see observed), and at every change,
// the selected clusters assigned to it: what it holds of the others (a snapshot's state)
// is not its to serve.
//
// Its Aware is called from one goroutine at a time, as a Provider calls it. The
// context given to Aware.Engage is a child of the Provider's, cancelled with ErrMoved or
// ErrLeaseLost when the cluster leaves this replica; Disengage follows with that cause,
// and the cluster's Lease is released only once Disengage has returned. An Aware thus
// stops its watches before Disengage returns (a fleetwatch.Manager waits for its
// informers).
type Coordinator struct {
	opts   Options
	aware  cluster.Aware
	leases coordinationclient.LeaseInterface
	// own is the client of this replica's Lease (Options.RenewClient).
	own      coordinationclient.LeaseInterface
	instance string
	// poke asks Start's goroutine for a round now.
	poke chan struct{}

	// engageMu serializes the calls to aware and guards frozen. Held, it is taken before
	// mu.
	engageMu sync.Mutex
	// frozen is set by Freeze: nothing is engaged any more.
	frozen bool

	// mu guards the fields below. Requests to the home cluster are made without it.
	mu sync.Mutex
	// selected are the clusters the Provider engaged, by name.
	selected map[string]*candidate
	// owned are the clusters engaged with aware, by name.
	owned map[string]*owned
	// joined is set while this replica holds its Lease; lastRenew is the time at which
	// the last successful renewal was sent. losses counts the times it lost its Lease
	// (loseLocked): a cluster whose Engage spans one is given up as it returns.
	joined    bool
	lastRenew time.Time
	losses    int
	// starting is set until this replica, joined, has seen Options.Replicas members or
	// waited StartTimeout since joinedAt, the time it first joined: meanwhile it takes
	// no cluster (see Options.Replicas).
	starting bool
	joinedAt time.Time
	// self and peers are the replica Leases as observed, by Lease name. observedAt is
	// when observe last sent its read of the peers: a peer is live or gone as of then,
	// however long ago, since what it did after is not known (holderLocked).
	self       *observed
	peers      map[string]*observed
	observedAt time.Time
	// checked is when checkRenewed last ran (the watchdog, a round, a take): a replica
	// that does not run (starved of CPU) cannot give its clusters up in time, and the
	// simulation tells such a stall by it.
	checked time.Time
	// members are the live replicas, this one included while joined, sorted.
	members []string
	// clusterLeases are the cluster Leases by cluster name, as the informer of
	// clusterInformer and this replica's own writes last had them (storeClusterLease),
	// and clusterSeen when each was first seen at that resourceVersion.
	clusterLeases map[string]*coordinationv1.Lease
	clusterSeen   map[string]time.Time
	// clusterInformer watches the cluster Leases, which change only when clusters move:
	// a replica reads them once, then only their changes. Set by Start.
	clusterInformer cache.SharedIndexInformer
	// unproven is set while a member counts as live only because this replica has not
	// seen its Lease long enough to tell (see observed): it may be gone.
	unproven bool
	// assigned are the selected clusters assigned to this replica, sorted, as last told
	// to a SelectionObserver.
	assigned []string
	// placement is the last placement of the selected clusters (see ownersLocked).
	placement placement
	// lastErr is the last error of reading the Leases, logged once while it lasts. Only
	// Start's goroutine uses it.
	lastErr string
	// reported is what OnChange last reported, as of the end of a round. Only Start's
	// goroutine uses it.
	reported summary
}

var (
	_ cluster.Aware      = (*Coordinator)(nil)
	_ cluster.Disengager = (*Coordinator)(nil)
)

// Handover is a cluster handed over on a planned move, as its Lease tells its new
// holder.
type Handover struct {
	// Cluster is the cluster name.
	Cluster string
	// From is the replica that released the cluster (HandoverAnnotation).
	From string
	// Address is From's published address (AddressAnnotation); empty if it publishes
	// none.
	Address string
}

// Receiver is an Aware that takes over warm the clusters handed over to it: once the
// Coordinator holds the Lease of a cluster that another replica released on a planned
// move, it calls Receive, then Engage. Receive fetches what it can of the old owner's
// state; it must return within a bounded time, whatever happens, since the cluster is
// watched by no one meanwhile. The clusters taken in one round are received in
// parallel, at most Options.ParallelReceives at once, each cluster once, never while
// Engage or Disengage runs; they are engaged, one call at a time, once all have been
// received (those not handed over before).
type Receiver interface {
	Receive(ctx context.Context, h Handover)
}

// candidate is a cluster that the Provider engaged.
type candidate struct {
	c   *cluster.Cluster
	ctx context.Context
}

// owned is a cluster engaged with the Aware.
type owned struct {
	c      *cluster.Cluster
	ctx    context.Context
	cancel context.CancelCauseFunc
	// lost is set when the cluster was given up because this replica lost its Lease; it
	// is disengaged at the next round.
	lost bool
}

// observed is a replica Lease and the local time at which its record last changed. As
// in client-go's leaderelection, expiry is measured from that time on this replica's
// clock, never from the renewTime written by another's, so clocks need not agree. A
// Lease first seen counts as changed then: its holder may be gone, which shows only
// when it has not changed for its duration.
type observed struct {
	// record is the Lease's spec, to tell a change.
	record string
	at     time.Time
	// proven is set once the record was seen to change: its holder was alive since.
	proven   bool
	holder   string
	instance string
	address  string
	// description is DescriptionAnnotation, written with the spec.
	description string
	// started is StartedAnnotation, written with the spec.
	started bool
	// balance is BalanceAnnotation, written with the spec.
	balance  string
	duration time.Duration
}

// liveAt reports whether the Lease is held at now.
func (o *observed) liveAt(now time.Time) bool {
	return o != nil && o.holder != "" && now.Before(o.at.Add(o.duration))
}

// holderLocked returns the Lease of the replica holder, which holds the Lease of the
// cluster name, as last observed, and whether holder counts as live. It is gone only
// once this replica has read its replica Lease unchanged (or released, or missing) for
// LeaseDuration since it saw either change: never because the time since that read
// has grown (a round that takes many clusters may outlast a Lease while the others
// renew unseen), nor on a read older than the cluster Lease (its holder joined, or
// joined again, and took it since). mu is held.
func (c *Coordinator) holderLocked(name, holder string) (*observed, bool) {
	o := c.peers[ReplicaLeaseName(holder)]
	if o != nil && o.holder == holder && o.liveAt(c.observedAt) {
		return o, true
	}
	return o, c.observedAt.Before(c.clusterSeen[name].Add(c.opts.LeaseDuration))
}

// New returns a Coordinator that engages with aware the clusters this replica owns. It
// fails if opts are invalid. Nothing runs until Start.
func New(opts Options, aware cluster.Aware) (*Coordinator, error) {
	opts.LeaseDuration = cmp.Or(opts.LeaseDuration, DefaultLeaseDuration)
	opts.RenewDeadline = cmp.Or(opts.RenewDeadline, DefaultRenewDeadline)
	opts.RetryPeriod = cmp.Or(opts.RetryPeriod, DefaultRetryPeriod)
	opts.ParallelReceives = cmp.Or(opts.ParallelReceives, DefaultParallelReceives)
	opts.StartTimeout = cmp.Or(opts.StartTimeout, DefaultStartTimeout)
	opts.Balance = cmp.Or(opts.Balance, BalanceCount)
	errs := validateBalance(opts)
	if err := ValidateIdentity(opts.Identity); err != nil {
		errs = append(errs, fmt.Errorf("shard: Identity: %w", err))
	}
	if opts.ParallelReceives < 0 {
		errs = append(errs, fmt.Errorf("shard: ParallelReceives is %d, below 0", opts.ParallelReceives))
	}
	if opts.Replicas < 0 {
		errs = append(errs, fmt.Errorf("shard: Replicas is %d, below 0", opts.Replicas))
	}
	if opts.StartTimeout < 0 {
		errs = append(errs, fmt.Errorf("shard: StartTimeout is %s, below 0", opts.StartTimeout))
	}
	if opts.Namespace == "" {
		errs = append(errs, errors.New("shard: Namespace is empty"))
	}
	if opts.Client == nil {
		errs = append(errs, errors.New("shard: Client is nil"))
	}
	if aware == nil {
		errs = append(errs, errors.New("shard: the Aware is nil"))
	}
	if err := ValidateTiming(opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod); err != nil {
		errs = append(errs, fmt.Errorf("shard: %w", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	own := opts.RenewClient
	if own == nil {
		own = opts.Client
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Coordinator{
		own:           own.CoordinationV1().Leases(opts.Namespace),
		opts:          opts,
		aware:         aware,
		leases:        opts.Client.CoordinationV1().Leases(opts.Namespace),
		instance:      hex.EncodeToString(b),
		starting:      opts.Replicas > 1,
		poke:          make(chan struct{}, 1),
		selected:      map[string]*candidate{},
		owned:         map[string]*owned{},
		peers:         map[string]*observed{},
		clusterLeases: map[string]*coordinationv1.Lease{},
		clusterSeen:   map[string]time.Time{},
	}, nil
}

// Identity returns Options.Identity.
func (c *Coordinator) Identity() string { return c.opts.Identity }

// Joined reports whether this replica holds its Lease, renewed within RenewDeadline.
func (c *Coordinator) Joined() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.joined
}

// Settled reports whether this replica is a member, done waiting for the others to
// join (Options.Replicas), and owns every selected cluster assigned to it: the others
// have handed them over.
func (c *Coordinator) Settled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.joined || c.starting {
		return false
	}
	owners := c.ownersLocked()
	for name := range c.selected {
		if owners[name] == c.opts.Identity && c.owned[name] == nil {
			return false
		}
	}
	return true
}

// Selected returns a cluster that the Aware selected (Engage), whether this replica
// owns it or not.
func (c *Coordinator) Selected(name string) (*cluster.Cluster, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cand := c.selected[name]
	if cand == nil {
		return nil, false
	}
	return cand.c, true
}

// Placements returns where each selected cluster is watched, sorted by cluster name.
func (c *Coordinator) Placements() []Placement {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Placement, 0, len(c.selected))
	owners := c.ownersLocked()
	for _, name := range slices.Sorted(maps.Keys(c.selected)) {
		p := Placement{Cluster: name, Assigned: owners[name]}
		if o := c.owned[name]; o != nil && !o.lost {
			p.Holder, p.Address = c.opts.Identity, c.opts.Address
		} else if l := c.clusterLeases[name]; l != nil {
			holder := ptr.Deref(l.Spec.HolderIdentity, "")
			if peer := c.peers[ReplicaLeaseName(holder)]; holder != c.opts.Identity && peer.liveAt(c.observedAt) {
				p.Holder, p.Address, p.Description = holder, peer.address, peer.description
			}
		}
		out = append(out, p)
	}
	return out
}

// Engage implements cluster.Aware: the cluster becomes a candidate, engaged with the
// Aware once this replica owns it.
func (c *Coordinator) Engage(ctx context.Context, cl *cluster.Cluster) error {
	c.mu.Lock()
	c.selected[cl.Name] = &candidate{c: cl, ctx: ctx}
	c.mu.Unlock()
	c.wake()
	return nil
}

// Disengage implements cluster.Disengager: a cluster that this replica owns is
// disengaged with the Aware, then its Lease is released.
func (c *Coordinator) Disengage(ctx context.Context, cl *cluster.Cluster, cause error) error {
	c.engageMu.Lock()
	defer c.engageMu.Unlock()
	c.mu.Lock()
	delete(c.selected, cl.Name)
	o := c.owned[cl.Name]
	delete(c.owned, cl.Name)
	c.mu.Unlock()
	if o == nil {
		return nil
	}
	err := c.disengageLocked(ctx, o, cause)
	c.release(ctx, cl.Name)
	return err
}

// Freeze stops engaging clusters, once an Engage in progress has returned. A Manager
// calls it when its Provider has stopped, before it waits for its clusters' goroutines.
func (c *Coordinator) Freeze() {
	c.engageMu.Lock()
	c.frozen = true
	c.engageMu.Unlock()
}

func (c *Coordinator) wake() {
	select {
	case c.poke <- struct{}{}:
	default:
	}
}

// Start renews this replica's Lease, and assigns, takes and hands over clusters, every
// RetryPeriod until ctx is done. Then it releases the Leases of the clusters it owns
// and its own, and returns nil: cancel ctx only once the clusters engaged with the
// Aware have stopped (a Manager cancels it after its informers have), since another
// replica starts watching a released cluster at once. Start logs through the logger of
// ctx.
func (c *Coordinator) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("shard").WithValues("replica", c.opts.Identity)
	ctx = klog.NewContext(ctx, logger)
	if err := c.newClusterInformer(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { c.clusterInformer.RunWithContext(ctx) })
	// Renewals run apart from the rounds of assignment, which wait for clusters to stop
	// and may take long: they must never hold a renewal back.
	wg.Go(func() { c.renewLoop(ctx) })
	wg.Go(func() { c.watchdog(ctx) })
	tick := c.opts.Clock.NewTicker(c.opts.RetryPeriod)
	defer tick.Stop()
	for ctx.Err() == nil {
		c.round(ctx)
		select {
		case <-ctx.Done():
		case <-tick.C():
		case <-c.poke:
		}
	}
	wg.Wait()
	c.shutdown(logger)
	return nil
}

// renewLoop renews this replica's Lease every RetryPeriod until ctx is done.
func (c *Coordinator) renewLoop(ctx context.Context) {
	tick := c.opts.Clock.NewTicker(c.opts.RetryPeriod)
	defer tick.Stop()
	for {
		if joined := c.Joined(); c.renew(ctx) != joined {
			c.wake()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
		}
	}
}

// watchdog gives up every cluster once RenewDeadline has passed since the last
// renewal, also while a renewal hangs on an unreachable home cluster.
func (c *Coordinator) watchdog(ctx context.Context) {
	tick := c.opts.Clock.NewTicker(c.opts.RetryPeriod / 4)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C():
			_ = c.checkRenewed(ctx)
		}
	}
}

// checkRenewed gives up every cluster if RenewDeadline has passed since the last
// renewal, and reports whether this replica still holds its Lease. The watchdog calls
// it, and so does every step that takes or engages a cluster, right before: a process
// starved of CPU may run one step late while its watchdog waits, and the others may
// take its clusters LeaseDuration after its last renewal.
func (c *Coordinator) checkRenewed(ctx context.Context) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkRenewedLocked(ctx)
}

// checkRenewedLocked is checkRenewed with mu held.
func (c *Coordinator) checkRenewedLocked(ctx context.Context) bool {
	now := c.opts.Clock.Now()
	c.checked = now
	if c.joined && now.Sub(c.lastRenew) > c.opts.RenewDeadline {
		c.loseLocked(ctx, now)
	}
	return c.joined
}

// loseLocked leaves the membership and stops every owned cluster at once, by cancelling
// its context; the next round disengages them.
func (c *Coordinator) loseLocked(ctx context.Context, now time.Time) {
	klog.FromContext(ctx).Info("Lost this replica's Lease: not renewed within the renew deadline; stopping every cluster",
		"lastRenew", c.lastRenew, "since", now.Sub(c.lastRenew), "renewDeadline", c.opts.RenewDeadline, "clusters", len(c.owned))
	c.joined = false
	c.losses++
	c.members = slices.DeleteFunc(c.members, func(m string) bool { return m == c.opts.Identity })
	for _, o := range c.owned {
		o.lost = true
		o.cancel(ErrLeaseLost)
	}
}

// round is one pass: observe the others, then take and hand over clusters.
func (c *Coordinator) round(ctx context.Context) {
	logger := klog.FromContext(ctx)
	_ = c.checkRenewed(ctx)
	c.disengageLost(ctx)
	// Until the informer has listed the cluster Leases, this replica would take their
	// clusters for free.
	if c.Joined() && c.clusterInformer.HasSynced() {
		switch err := c.observe(ctx); {
		case err != nil && err.Error() != c.lastErr:
			logger.Error(err, "Reading the Leases of the home cluster failed; trying again", "retryPeriod", c.opts.RetryPeriod)
			c.lastErr = err.Error()
		case err != nil:
			logger.V(4).Info("Reading the Leases of the home cluster still fails", "err", err)
		default:
			if c.lastErr != "" {
				logger.Info("Reading the Leases of the home cluster works again")
				c.lastErr = ""
			}
			c.assign(ctx)
			c.publishCosts(ctx)
		}
	}
	// Against the last round's end, not this one's start: what changed between two
	// rounds (a renewal that joined) is reported too.
	if now := c.summary(); !now.equal(c.reported) {
		c.reported = now
		if c.opts.OnChange != nil {
			c.opts.OnChange()
		}
	}
}

// summary is what OnChange reports changes of.
type summary struct {
	joined     bool
	placements []Placement
}

func (c *Coordinator) summary() summary {
	return summary{joined: c.Joined(), placements: c.Placements()}
}

func (s summary) equal(o summary) bool {
	return s.joined == o.joined && slices.Equal(s.placements, o.placements)
}

// renew renews this replica's Lease, taking it if it is free or expired, as client-go's
// leaderelection does with a lock. A renewal sent more than RenewDeadline after the
// last one that succeeded (the process was paused, or the home cluster unreachable)
// first gives every cluster up, even if it succeeds: the others may have taken them.
// It reports whether this replica is a member now.
func (c *Coordinator) renew(ctx context.Context) bool {
	logger := klog.FromContext(ctx)
	start := c.opts.Clock.Now()
	_ = c.checkRenewed(ctx)
	rctx, cancel := context.WithTimeout(ctx, c.opts.RenewDeadline)
	defer cancel()
	err := c.tryRenew(rctx, start)
	// A renewal that returns past the deadline of the one before (the process was
	// paused in between) cannot vouch for the time in between.
	_ = c.checkRenewed(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		logger.V(2).Info("Renewing this replica's Lease failed", "err", err)
		return c.joined
	}
	if !c.joined {
		logger.Info("Joined the replicas: holding this replica's Lease", "lease", ReplicaLeaseName(c.opts.Identity), "namespace", c.opts.Namespace)
		c.joined = true
		c.members = insertSorted(c.members, c.opts.Identity)
		if c.joinedAt.IsZero() {
			c.joinedAt = start
		}
	}
	c.lastRenew = start
	return true
}

// tryRenew writes this replica's Lease, as of now.
func (c *Coordinator) tryRenew(ctx context.Context, now time.Time) error {
	name := ReplicaLeaseName(c.opts.Identity)
	l, err := c.own.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.opts.Namespace}}
		c.holdReplica(l, now)
		l, err = c.own.Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			c.observeSelf(l, now)
		}
		return err
	}
	if err != nil {
		return err
	}
	c.observeSelf(l, now)
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	mine := holder == c.opts.Identity && l.Annotations[InstanceAnnotation] == c.instance
	c.mu.Lock()
	held := c.self.liveAt(now)
	c.mu.Unlock()
	if !mine && holder != "" && held {
		waiting := fmt.Errorf("lease %s is held by another process (holder %q, instance %q); waiting for it to expire", name, holder, l.Annotations[InstanceAnnotation])
		if holder != c.opts.Identity {
			return waiting
		}
		// This process succeeds one of its identity that held the Lease (it was killed,
		// or runs on): it says so, for the others to leave the identity's clusters to it.
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[SuccessorAnnotation] = c.instance + " " + now.UTC().Format(time.RFC3339Nano)
		if l, err = c.own.Update(ctx, l, metav1.UpdateOptions{}); err == nil {
			c.observeSelf(l, now)
		}
		return waiting
	}
	if !mine {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
		delete(l.Annotations, SuccessorAnnotation)
	}
	c.holdReplica(l, now)
	l, err = c.own.Update(ctx, l, metav1.UpdateOptions{})
	if err == nil {
		c.observeSelf(l, now)
	}
	return err
}

// holdReplica sets the fields of a replica Lease held by this process at now.
func (c *Coordinator) holdReplica(l *coordinationv1.Lease, now time.Time) {
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	l.Labels[LeaseLabel] = LeaseReplica
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[InstanceAnnotation] = c.instance
	if c.opts.Address != "" {
		l.Annotations[AddressAnnotation] = c.opts.Address
	} else {
		delete(l.Annotations, AddressAnnotation)
	}
	c.mu.Lock()
	started := !c.starting
	c.mu.Unlock()
	if started {
		l.Annotations[StartedAnnotation] = "true"
	} else {
		delete(l.Annotations, StartedAnnotation)
	}
	l.Annotations[BalanceAnnotation] = string(c.opts.Balance)
	delete(l.Annotations, DescriptionAnnotation)
	if c.opts.Describe != nil {
		if d := c.opts.Describe(); len(d) > MaxDescription {
			klog.Background().V(2).Info("This replica's description is too long to publish on its Lease; the others serve its clusters with what they know", "bytes", len(d), "max", MaxDescription)
		} else if d != "" {
			l.Annotations[DescriptionAnnotation] = d
		}
	}
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration.Round(time.Second) / time.Second))
	if l.Spec.AcquireTime == nil {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// observeSelf observes this replica's own Lease. Its successor's marks do not count as
// changes: a process waiting for its identity's Lease judges the holder by its own
// renewals alone.
func (c *Coordinator) observeSelf(l *coordinationv1.Lease, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.self = observe(c.self, l, now, c.opts.LeaseDuration, false)
}

// observe returns the observation of l, which prev observed before. With successor, a
// new SuccessorAnnotation is a change: the identity lives on in a process that waits
// to take the Lease.
func observe(prev *observed, l *coordinationv1.Lease, now time.Time, fallback time.Duration, successor bool) *observed {
	record := l.Spec.String() + l.Annotations[InstanceAnnotation]
	if successor {
		record += "\x00" + l.Annotations[SuccessorAnnotation]
	}
	if prev != nil && prev.record == record {
		return prev
	}
	d := fallback
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		d = time.Duration(s) * time.Second
	}
	return &observed{
		record:      record,
		at:          now,
		proven:      prev != nil,
		holder:      ptr.Deref(l.Spec.HolderIdentity, ""),
		instance:    l.Annotations[InstanceAnnotation],
		address:     l.Annotations[AddressAnnotation],
		description: l.Annotations[DescriptionAnnotation],
		started:     l.Annotations[StartedAnnotation] != "",
		balance:     l.Annotations[BalanceAnnotation],
		duration:    d,
	}
}

// observe reads the Leases of the replicas, and sets the members. It lists them at
// every round, as client-go's leaderelection reads its lock: a member is live only while
// this replica reads its renewals, never on a watch's word, which may lag.
func (c *Coordinator) observe(ctx context.Context) error {
	// The Leases are read at some moment between sending the request and its answer:
	// one unchanged is known unchanged since it was seen to change until the request
	// was sent, a change is known from the answer on.
	sent := c.opts.Clock.Now()
	replicas, err := c.leases.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{LeaseLabel: LeaseReplica}.String()})
	if err != nil {
		return fmt.Errorf("listing replica Leases: %w", err)
	}
	now := c.opts.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	peers := make(map[string]*observed, len(replicas.Items))
	var members []string
	c.unproven = false
	for i := range replicas.Items {
		l := &replicas.Items[i]
		o := observe(c.peers[l.Name], l, now, c.opts.LeaseDuration, true)
		peers[l.Name] = o
		if o.holder != c.opts.Identity && l.Name == ReplicaLeaseName(o.holder) && o.liveAt(sent) {
			members = append(members, o.holder)
			c.unproven = c.unproven || !o.proven
		}
	}
	c.peers = peers
	c.observedAt = sent
	if c.joined {
		members = append(members, c.opts.Identity)
	}
	slices.Sort(members)
	c.members = members
	return nil
}

// newClusterInformer makes the informer of the cluster Leases.
func (c *Coordinator) newClusterInformer() error {
	selector := labels.Set{LeaseLabel: LeaseCluster}.String()
	// The informer lists as a watch does (WatchList) where the client supports it, as
	// client-go's generated informers decide (a fake clientset does not).
	c.clusterInformer = cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return c.leases.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return c.leases.Watch(ctx, o)
		},
	}, c.opts.Client), &coordinationv1.Lease{}, 0, cache.Indexers{})
	if _, err := c.clusterInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.storeClusterLease(obj) },
		UpdateFunc: func(_, obj any) { c.storeClusterLease(obj) },
		DeleteFunc: c.forgetClusterLease,
	}); err != nil {
		return fmt.Errorf("shard: watching the cluster Leases: %w", err)
	}
	return nil
}

// storeClusterLease records obj, a cluster Lease, unless the one recorded is newer: the
// informer's events and this replica's own writes both record, in either order, and a
// write must not be undone by the event of an earlier change that arrives after it.
func (c *Coordinator) storeClusterLease(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	name, ok := l.Annotations[ClusterAnnotation]
	if !ok || l.Name != ClusterLeaseName(name) {
		return
	}
	now := c.opts.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.clusterLeases[name]
	if cur != nil && newerVersion(cur.ResourceVersion, l.ResourceVersion) {
		return
	}
	if cur == nil || cur.ResourceVersion != l.ResourceVersion {
		c.clusterSeen[name] = now
	}
	c.clusterLeases[name] = l
}

func (c *Coordinator) forgetClusterLease(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if l, ok := obj.(*coordinationv1.Lease); ok {
		c.mu.Lock()
		if name := l.Annotations[ClusterAnnotation]; c.clusterLeases[name] != nil && c.clusterLeases[name].Name == l.Name {
			delete(c.clusterLeases, name)
			delete(c.clusterSeen, name)
		}
		c.mu.Unlock()
	}
}

// newerVersion reports whether the resourceVersion a is newer than b. They are opaque to
// clients, but etcd's revisions, which grow, are what every apiserver serves; one that
// is not a number is taken as no newer.
func newerVersion(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

// assign takes the clusters assigned to this replica that are free, and hands over
// those assigned to another.
func (c *Coordinator) assign(ctx context.Context) {
	logger := klog.FromContext(ctx)
	type step struct {
		name  string
		take  bool
		cause error
	}
	var steps []step
	c.mu.Lock()
	if c.waitingLocked(logger) {
		c.mu.Unlock()
		return
	}
	var assigned []string
	owners := c.ownersLocked()
	for _, name := range slices.Sorted(maps.Keys(c.selected)) {
		mine := owners[name] == c.opts.Identity
		if mine {
			assigned = append(assigned, name)
		}
		o := c.owned[name]
		l := c.clusterLeases[name]
		switch {
		case o != nil && !o.lost && l != nil && ptr.Deref(l.Spec.HolderIdentity, "") != c.opts.Identity:
			logger.Info("Another replica holds the Lease of a cluster this replica watches; stopping it", "cluster", name, "holder", ptr.Deref(l.Spec.HolderIdentity, ""))
			steps = append(steps, step{name: name, cause: ErrLeaseLost})
		case o != nil && !o.lost && !mine:
			steps = append(steps, step{name: name, cause: ErrMoved})
		case o == nil && mine:
			steps = append(steps, step{name: name, take: true})
		}
	}
	// A replica that just started counts the gone ones live for a LeaseDuration: what
	// it holds of the clusters they seem to own (a snapshot's state) may be its own once
	// they expire, and must not be dropped before.
	tell := !slices.Equal(assigned, c.assigned) && !c.unproven
	if tell {
		c.assigned = assigned
	}
	c.mu.Unlock()

	if so, ok := c.aware.(cluster.SelectionObserver); ok && tell {
		c.engageMu.Lock()
		so.Selected(ctx, slices.Clone(assigned))
		c.engageMu.Unlock()
	}
	var take []string
	for _, s := range steps {
		if ctx.Err() != nil {
			return
		}
		if s.take {
			take = append(take, s.name)
		} else {
			c.handOver(ctx, s.name, s.cause)
		}
	}
	c.take(ctx, take)
}

// waitingLocked reports whether this replica, just started, still waits for the
// others to join before it takes clusters (Options.Replicas). mu is held.
func (c *Coordinator) waitingLocked(logger klog.Logger) bool {
	if !c.starting {
		return false
	}
	switch waited := c.opts.Clock.Since(c.joinedAt); {
	case len(c.members) >= c.opts.Replicas:
		logger.Info("The replicas have joined; taking this replica's share", "members", len(c.members), "waited", waited)
	case c.runningLocked():
		logger.Info("Joined replicas that run already; taking this replica's share", "members", c.members, "replicas", c.opts.Replicas)
	case waited >= c.opts.StartTimeout:
		logger.Info("Not every replica joined within the start timeout; taking this replica's share among those that did",
			"members", c.members, "replicas", c.opts.Replicas, "startTimeout", c.opts.StartTimeout)
	default:
		logger.V(2).Info("Waiting for the replicas to join before taking clusters", "members", len(c.members), "replicas", c.opts.Replicas)
		return true
	}
	c.starting = false
	return false
}

// runningLocked reports whether another member, seen renewing since this replica
// started, is done waiting for the others (StartedAnnotation): this replica joins a
// fleet that runs, as in a rolling update, and the others do not wait for it. A Lease
// left by a process that is gone is not seen renewing. mu is held.
func (c *Coordinator) runningLocked() bool {
	for _, o := range c.peers {
		if o.holder != c.opts.Identity && o.proven && o.started && o.liveAt(c.observedAt) {
			return true
		}
	}
	return false
}

// take acquires the Leases of the clusters of names that are free, then engages them
// with the Aware: first those that start cold, then, once a Receiver has received the
// states of those handed over, at most ParallelReceives at once, those.
func (c *Coordinator) take(ctx context.Context, names []string) {
	type taken struct {
		name string
		cand *candidate
		h    Handover
		warm bool
	}
	c.engageMu.Lock()
	defer c.engageMu.Unlock()
	var warm []taken
	for _, name := range names {
		c.mu.Lock()
		cand := c.selected[name]
		busy := c.owned[name] != nil
		l := c.clusterLeases[name]
		c.mu.Unlock()
		if c.frozen || cand == nil || busy || cand.ctx.Err() != nil || ctx.Err() != nil {
			continue
		}
		if !c.checkRenewed(ctx) {
			break
		}
		if !c.acquire(ctx, name, l) {
			continue
		}
		t := taken{name: name, cand: cand}
		if _, ok := c.aware.(Receiver); ok {
			if t.h, t.warm = c.handover(name, l); t.warm {
				warm = append(warm, t)
				continue
			}
		}
		// A cold cluster is engaged as soon as its Lease is taken: the takes go at the
		// home client's rate, hundreds of them when a replica starts, and the clusters
		// taken first sync meanwhile.
		c.engage(ctx, t.name, t.cand)
	}
	if len(warm) == 0 {
		return
	}
	r := c.aware.(Receiver)
	var g errgroup.Group
	g.SetLimit(c.opts.ParallelReceives)
	for _, t := range warm {
		g.Go(func() error {
			r.Receive(ctx, t.h)
			return nil
		})
	}
	_ = g.Wait()
	for _, t := range warm {
		c.engage(ctx, t.name, t.cand)
	}
}

// engage engages a cluster whose Lease this replica took, or releases the Lease if the
// Aware fails or this replica no longer holds its own. engageMu is held.
func (c *Coordinator) engage(ctx context.Context, name string, cand *candidate) {
	logger := klog.FromContext(ctx).WithValues("cluster", name)
	c.mu.Lock()
	held, losses := c.checkRenewedLocked(ctx), c.losses
	c.mu.Unlock()
	if !held {
		logger.Info("Not engaging a cluster taken before this replica lost its Lease; releasing it")
		c.release(ctx, name)
		return
	}
	cctx, cancel := context.WithCancelCause(cand.ctx)
	if err := c.aware.Engage(cctx, cand.c); err != nil {
		cancel(err)
		logger.Error(err, "Engaging an owned cluster failed; releasing it")
		c.release(ctx, name)
		return
	}
	c.mu.Lock()
	o := &owned{c: cand.c, ctx: cctx, cancel: cancel}
	c.owned[name] = o
	// Lost meanwhile, the cluster stops at once, as those owned then did.
	if !c.checkRenewedLocked(ctx) || c.losses != losses {
		o.lost = true
		cancel(ErrLeaseLost)
	}
	c.mu.Unlock()
	logger.Info("Took over cluster")
}

// handover returns the handover of the cluster whose Lease l this replica took, if its
// last holder released it on a planned move.
func (c *Coordinator) handover(name string, l *coordinationv1.Lease) (Handover, bool) {
	if l == nil || l.Annotations[HandoverAnnotation] == "" || l.Annotations[HandoverAnnotation] == c.opts.Identity {
		return Handover{}, false
	}
	h := Handover{Cluster: name, From: l.Annotations[HandoverAnnotation]}
	c.mu.Lock()
	if peer := c.peers[ReplicaLeaseName(h.From)]; peer != nil {
		h.Address = peer.address
	}
	c.mu.Unlock()
	return h, true
}

// acquire writes this replica into the cluster's Lease l (nil if there is none) if it is
// free: it has no holder, or this replica, or one whose Lease was not renewed for its
// LeaseDuration. The write is conditional on l's resourceVersion, so of two replicas
// that take a cluster at once, one fails. It reports whether this replica holds it.
func (c *Coordinator) acquire(ctx context.Context, name string, l *coordinationv1.Lease) bool {
	logger := klog.FromContext(ctx).WithValues("cluster", name)
	now := c.opts.Clock.Now()
	rctx, cancel := context.WithTimeout(ctx, c.opts.RenewDeadline)
	defer cancel()
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: ClusterLeaseName(name), Namespace: c.opts.Namespace,
			Labels:      map[string]string{LeaseLabel: LeaseCluster},
			Annotations: map[string]string{ClusterAnnotation: name},
		}}
		c.holdCluster(l, now)
		created, err := c.leases.Create(rctx, l, metav1.CreateOptions{})
		if err != nil {
			logger.V(2).Info("Creating the cluster's Lease failed; trying again", "err", err)
			return false
		}
		c.storeClusterLease(created)
		return true
	}
	holder := ptr.Deref(l.Spec.HolderIdentity, "")
	if holder != "" && holder != c.opts.Identity {
		c.mu.Lock()
		peer, live := c.holderLocked(name, holder)
		var changed time.Time
		if peer != nil {
			changed = peer.at
		}
		read, seen := c.observedAt, c.clusterSeen[name]
		c.mu.Unlock()
		if live {
			logger.V(2).Info("Waiting for the cluster's holder to hand it over", "holder", holder)
			return false
		}
		logger.Info("Taking the cluster of a replica whose Lease expired", "holder", holder, "resourceVersion", l.ResourceVersion,
			"clusterLeaseSeen", seen, "holderLeaseChanged", changed, "replicaLeasesRead", read)
	}
	l = l.DeepCopy()
	delete(l.Annotations, HandoverAnnotation)
	if holder != c.opts.Identity {
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	c.holdCluster(l, now)
	updated, err := c.leases.Update(rctx, l, metav1.UpdateOptions{})
	if err != nil {
		logger.V(2).Info("Taking the cluster's Lease failed; trying again", "err", err)
		return false
	}
	c.storeClusterLease(updated)
	return true
}

// holdCluster sets the fields of a cluster Lease taken by this replica at now. The
// Lease is held while this replica's is renewed; its renewTime is when it was taken.
func (c *Coordinator) holdCluster(l *coordinationv1.Lease, now time.Time) {
	l.Spec.HolderIdentity = ptr.To(c.opts.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(c.opts.LeaseDuration.Round(time.Second) / time.Second))
	l.Spec.AcquireTime = &metav1.MicroTime{Time: now}
	l.Spec.RenewTime = &metav1.MicroTime{Time: now}
}

// handOver disengages an owned cluster, then releases its Lease.
func (c *Coordinator) handOver(ctx context.Context, name string, cause error) {
	c.engageMu.Lock()
	defer c.engageMu.Unlock()
	c.mu.Lock()
	o := c.owned[name]
	delete(c.owned, name)
	c.mu.Unlock()
	if o == nil {
		return
	}
	klog.FromContext(ctx).Info("Handing cluster over", "cluster", name, "reason", cause.Error())
	if err := c.disengageLocked(ctx, o, cause); err != nil {
		klog.FromContext(ctx).Error(err, "Disengaging a cluster failed", "cluster", name)
	}
	c.releaseCluster(ctx, name, errors.Is(cause, ErrMoved))
}

// disengageLost disengages the clusters given up when this replica lost its Lease, and
// releases what it can. Every one is disengaged before any is released: the releases
// are requests to the home cluster, paced by the client's rate limit (a second for 50
// clusters by the daemon's), and a Disengage among them would wait for those before
// it, past the takeover by the others. Only Start's goroutine takes clusters, so none
// is taken again between its Disengage and its release.
func (c *Coordinator) disengageLost(ctx context.Context) {
	c.engageMu.Lock()
	c.mu.Lock()
	lost := map[string]*owned{}
	for name, o := range c.owned {
		if o.lost {
			lost[name] = o
			delete(c.owned, name)
		}
	}
	c.mu.Unlock()
	names := slices.Sorted(maps.Keys(lost))
	for _, name := range names {
		if err := c.disengageLocked(ctx, lost[name], ErrLeaseLost); err != nil {
			klog.FromContext(ctx).Error(err, "Disengaging a cluster failed", "cluster", name)
		}
	}
	c.engageMu.Unlock()
	// Their informers have stopped: releasing hands them over at once if the home
	// cluster can be reached, and is harmless if another holds them already.
	for _, name := range names {
		c.release(ctx, name)
	}
}

// disengageLocked stops an owned cluster and waits for the Aware to disengage it.
// engageMu is held.
func (c *Coordinator) disengageLocked(ctx context.Context, o *owned, cause error) error {
	o.cancel(cause)
	if d, ok := c.aware.(cluster.Disengager); ok {
		return d.Disengage(ctx, o.c, cause)
	}
	return nil
}

// release empties the holder of the cluster's Lease if it is this replica.
func (c *Coordinator) release(ctx context.Context, name string) { c.releaseCluster(ctx, name, false) }

// releaseCluster empties the holder of the cluster's Lease if it is this replica; on a
// planned move (handover), it names this replica in HandoverAnnotation.
func (c *Coordinator) releaseCluster(ctx context.Context, name string, handover bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.RenewDeadline)
	defer cancel()
	if err := c.releaseLease(ctx, ClusterLeaseName(name), handover); err != nil {
		klog.FromContext(ctx).V(2).Info("Releasing the cluster's Lease failed; it is free once this replica's expires", "cluster", name, "err", err)
	}
}

// releaseLease empties the holder of the Lease name if it is this replica, as client-go's
// leaderelection releases a lock: the others may take it at once.
func (c *Coordinator) releaseLease(ctx context.Context, name string, handover bool) error {
	l, err := c.leases.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != c.opts.Identity {
		return nil
	}
	if l.Annotations[InstanceAnnotation] != "" && l.Annotations[InstanceAnnotation] != c.instance {
		return nil
	}
	if handover {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[HandoverAnnotation] = c.opts.Identity
	} else {
		delete(l.Annotations, HandoverAnnotation)
	}
	l.Spec.HolderIdentity = nil
	l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	l.Spec.RenewTime = &metav1.MicroTime{Time: c.opts.Clock.Now()}
	if l, err = c.leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		return err
	}
	c.storeClusterLease(l)
	return nil
}

// shutdown releases the Leases of the owned clusters, whose watches have stopped, and
// this replica's own, so that the others take over at once. A stop is a planned move:
// the clusters' Leases name this replica in HandoverAnnotation, but those of the
// clusters given up with this replica's Lease.
func (c *Coordinator) shutdown(logger klog.Logger) {
	ctx := klog.NewContext(context.Background(), logger)
	c.mu.Lock()
	names := slices.Sorted(maps.Keys(c.owned))
	handover := map[string]bool{}
	for name, o := range c.owned {
		handover[name] = !o.lost
	}
	joined := c.joined
	c.owned = map[string]*owned{}
	c.joined = false
	c.mu.Unlock()
	for _, name := range names {
		c.releaseCluster(ctx, name, handover[name])
	}
	if joined {
		rctx, cancel := context.WithTimeout(ctx, c.opts.RenewDeadline)
		defer cancel()
		if err := c.releaseLease(rctx, ReplicaLeaseName(c.opts.Identity), false); err != nil {
			logger.Error(err, "Releasing this replica's Lease failed; the others take its clusters once it expires")
			return
		}
	}
	logger.Info("Released this replica's Leases", "clusters", len(names))
}

func insertSorted(s []string, v string) []string {
	i, found := slices.BinarySearch(s, v)
	if found {
		return s
	}
	return slices.Insert(s, i, v)
}
