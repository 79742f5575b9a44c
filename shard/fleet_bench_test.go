package shard

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

var (
	simClusters = flag.Int("sim-clusters", 10000, "clusters of BenchmarkFleet")
	simReplicas = flag.Int("sim-replicas", 20, "replicas of BenchmarkFleet")
	simSteady   = flag.Duration("sim-steady", 30*time.Second, "how long BenchmarkFleet measures the steady state")
)

// The daemon's limits on a replica's requests to the home cluster (cmd/fleetwatch's
// homeQPS and homeBurst).
const (
	simQPS   = 50
	simBurst = 100
)

// simFleet is where the clusters of a simulated fleet are watched, as the Awares of its
// Coordinators report it, and the story of every overlap.
type simFleet struct {
	timing Options
	lag    *lagProbe
	// begin is when the simulation started: the stories' times are since then.
	begin time.Time

	mu sync.Mutex
	// owner is the engagement of each cluster, from Engage until Disengage. One whose
	// context ended watches no more (a Manager's informers stop with it): an Engage by
	// another replica then is no overlap, and is counted apart (stopping).
	owner map[string]*simEngagement
	// coords are the replicas' Coordinators, by identity.
	coords map[string]*Coordinator
	// took is what each replica logged last of each cluster it took from an expired
	// holder, by replica and cluster.
	took map[[2]string]string
	// phase is the part of the simulation that runs, for the stories.
	phase string
	// engaged counts the calls to Engage, disengaged those to Disengage.
	engaged, disengaged int
	// overlaps are the Engages of a cluster that another replica watched; stopping
	// those of a cluster whose engagement by another replica had its context ended (its
	// watches stop) but had not been disengaged yet.
	overlaps, stopping []simOverlap
}

func newSimFleet(timing Options) *simFleet {
	return &simFleet{timing: timing, lag: newLagProbe(), begin: time.Now(), owner: map[string]*simEngagement{},
		coords: map[string]*Coordinator{}, took: map[[2]string]string{}}
}

// simEngagement is a cluster engaged by a replica.
type simEngagement struct {
	replica string
	coord   *Coordinator
	at      time.Time
	// ended is when the context given to Engage ended; zero while it runs.
	ended time.Time
	// disengaged is when Disengage was called; zero before.
	disengaged time.Time
}

// simOverlap is a cluster engaged by a replica while another watched it.
type simOverlap struct {
	// starved is set when the old owner's goroutines verifiably stalled past the
	// margin of the protocol (LeaseDuration − RenewDeadline): it did not check its
	// deadline (watchdog, round, take) between that deadline and the takeover, which
	// came at least LeaseDuration after its last renewal. Any other overlap is the
	// protocol's.
	starved bool
	story   string
	// prev is the old owner's engagement, at the time of the takeover.
	prev *simEngagement
	at   time.Time
}

// tell is the story, with when the old owner disengaged the cluster.
func (o simOverlap) tell(f *simFleet) string {
	f.mu.Lock()
	d := o.prev.disengaged
	f.mu.Unlock()
	if d.IsZero() {
		return o.story + " The old owner never disengaged it (stopped with its replica)."
	}
	return o.story + fmt.Sprintf(" The old owner disengaged it at %.1fs, %.1fs after the takeover.", d.Sub(f.begin).Seconds(), d.Sub(o.at).Seconds())
}

// simAware is the Aware of one replica of a simFleet: it watches nothing, and counts.
type simAware struct {
	f       *simFleet
	replica string
}

var _ cluster.Disengager = (*simAware)(nil)

func (a *simAware) Engage(ctx context.Context, c *cluster.Cluster) error {
	now := time.Now()
	a.f.mu.Lock()
	prev := a.f.owner[c.Name]
	e := &simEngagement{replica: a.replica, coord: a.f.coords[a.replica], at: now}
	a.f.owner[c.Name] = e
	a.f.engaged++
	var prevEnded time.Time
	if prev != nil {
		prevEnded = prev.ended
	}
	a.f.mu.Unlock()
	context.AfterFunc(ctx, func() {
		a.f.mu.Lock()
		e.ended = time.Now()
		a.f.mu.Unlock()
	})
	switch {
	case prev == nil || prev.replica == a.replica:
	case !prevEnded.IsZero():
		o := a.f.overlap(c.Name, prev, e)
		a.f.mu.Lock()
		a.f.stopping = append(a.f.stopping, o)
		a.f.mu.Unlock()
	default:
		o := a.f.overlap(c.Name, prev, e)
		a.f.mu.Lock()
		a.f.overlaps = append(a.f.overlaps, o)
		a.f.mu.Unlock()
	}
	return nil
}

func (a *simAware) Disengage(_ context.Context, c *cluster.Cluster, _ error) error {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if e := a.f.owner[c.Name]; e != nil && e.replica == a.replica {
		e.disengaged = time.Now()
		delete(a.f.owner, c.Name)
	}
	a.f.disengaged++
	return nil
}

// overlap tells the story of cluster, engaged by next while prev watched it: what each
// Coordinator holds of it at that moment, what next logged of its takeover, and how late
// the process's goroutines ran meanwhile. Neither mu is held.
func (f *simFleet) overlap(name string, prev, next *simEngagement) simOverlap {
	since := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%.1fs", t.Sub(f.begin).Seconds())
	}
	old, nw := prev.coord, next.coord
	old.mu.Lock()
	lastRenew, checked, joined := old.lastRenew, old.checked, old.joined
	lost := old.owned[name] != nil && old.owned[name].lost
	oldObserved := old.observedAt
	old.mu.Unlock()
	nw.mu.Lock()
	var rv string
	if l := nw.clusterLeases[name]; l != nil {
		rv = l.ResourceVersion
	}
	var peerChanged time.Time
	if p := nw.peers[ReplicaLeaseName(prev.replica)]; p != nil {
		peerChanged = p.at
	}
	observedAt, newRenew := nw.observedAt, nw.lastRenew
	nw.mu.Unlock()
	f.mu.Lock()
	took := f.took[[2]string{next.replica, name}]
	phase, ended := f.phase, prev.ended
	f.mu.Unlock()

	t := next.at
	deadline := lastRenew.Add(f.timing.RenewDeadline)
	starved := !t.Before(lastRenew.Add(f.timing.LeaseDuration)) && checked.Before(deadline)
	kind := "protocol"
	switch {
	case !ended.IsZero():
		kind = fmt.Sprintf("no overlap (its context ended %.1fs before, not disengaged yet):", t.Sub(ended).Seconds())
	case starved:
		kind = "starvation"
	}
	story := fmt.Sprintf("%s: %s overlap of %s at %s: %s engaged it while %s watched it (since %s).\n"+
		"  old owner %s: last renewal sent at %s (%.1fs before), renew deadline %s, deadline last checked at %s, joined %v, cluster given up %v, replica Leases read at %s.\n"+
		"  new owner %s: its Lease of the cluster now at resourceVersion %s, it saw %s's Lease change at %s, read the replica Leases at %s (%.1fs before), renewed at %s; it logged: %s.\n"+
		"  process: goroutines up to %v late from the old owner's renewal to the takeover (%v in the last second).",
		phase, kind, name, since(t), next.replica, prev.replica, since(prev.at),
		prev.replica, since(lastRenew), t.Sub(lastRenew).Seconds(), since(deadline), since(checked), joined, lost, since(oldObserved),
		next.replica, rv, prev.replica, since(peerChanged), since(observedAt), t.Sub(observedAt).Seconds(), since(newRenew), cmp.Or(took, "nothing"),
		f.lag.max(lastRenew, t).Round(time.Millisecond), f.lag.max(t.Add(-time.Second), t).Round(time.Millisecond))
	return simOverlap{starved: starved, story: story, prev: prev, at: t}
}

// stop drops every cluster of replica, as a Manager's informers stop before its
// Coordinator's context ends.
func (f *simFleet) stop(replica string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	maps.DeleteFunc(f.owner, func(_ string, e *simEngagement) bool { return e.replica == replica })
}

func (f *simFleet) setPhase(phase string) {
	f.mu.Lock()
	f.phase = phase
	f.mu.Unlock()
}

func (f *simFleet) owners() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.owner))
	for c, e := range f.owner {
		out[c] = e.replica
	}
	return out
}

func (f *simFleet) counts() (engaged, disengaged int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engaged, f.disengaged
}

// takeLog is a logr.LogSink that records, for the simFleet's stories, what a replica
// logs when it takes a cluster from an expired holder.
type takeLog struct {
	f       *simFleet
	replica string
	values  []any
}

var _ logr.LogSink = (*takeLog)(nil)

func (l *takeLog) Init(logr.RuntimeInfo)       {}
func (l *takeLog) Enabled(level int) bool      { return level == 0 }
func (l *takeLog) Error(error, string, ...any) {}

func (l *takeLog) Info(_ int, msg string, kv ...any) {
	if !strings.HasPrefix(msg, "Taking the cluster of a replica whose Lease expired") {
		return
	}
	kv = append(slices.Clone(l.values), kv...)
	var name string
	var sb strings.Builder
	sb.WriteString(msg)
	for i := 0; i+1 < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case time.Time:
			fmt.Fprintf(&sb, " %v=%.1fs", kv[i], v.Sub(l.f.begin).Seconds())
		default:
			fmt.Fprintf(&sb, " %v=%v", kv[i], v)
		}
		if kv[i] == "cluster" {
			name, _ = kv[i+1].(string)
		}
	}
	fmt.Fprintf(&sb, " (at %.1fs)", time.Since(l.f.begin).Seconds())
	l.f.mu.Lock()
	l.f.took[[2]string{l.replica, name}] = sb.String()
	l.f.mu.Unlock()
}

func (l *takeLog) WithValues(kv ...any) logr.LogSink {
	return &takeLog{f: l.f, replica: l.replica, values: append(slices.Clone(l.values), kv...)}
}

func (l *takeLog) WithName(string) logr.LogSink { return l }

// lagProbe measures how late the process's goroutines run: one that wakes every
// lagPeriod records by how much it woke late.
type lagProbe struct {
	mu sync.Mutex
	// lates are the lateness of each wake, in order.
	lates []lagSample
	stop  chan struct{}
}

type lagSample struct {
	at   time.Time
	late time.Duration
}

const lagPeriod = 100 * time.Millisecond

func newLagProbe() *lagProbe {
	p := &lagProbe{stop: make(chan struct{})}
	go func() {
		next := time.Now().Add(lagPeriod)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(time.Until(next)):
			}
			now := time.Now()
			p.mu.Lock()
			p.lates = append(p.lates, lagSample{at: now, late: now.Sub(next)})
			p.mu.Unlock()
			next = now.Add(lagPeriod)
		}
	}()
	return p
}

// max returns the largest lateness of the wakes from a to b.
func (p *lagProbe) max(a, b time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, _ := slices.BinarySearchFunc(p.lates, a, func(s lagSample, t time.Time) int { return s.at.Compare(t) })
	var m time.Duration
	for ; i < len(p.lates) && !p.lates[i].at.After(b); i++ {
		m = max(m, p.lates[i].late)
	}
	return m
}

// severable is a RoundTripper that fails every request once severed: the replica is
// gone, for the home cluster as for the others.
type severable struct {
	rt      http.RoundTripper
	mu      sync.Mutex
	severed bool
}

func (s *severable) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	severed := s.severed
	s.mu.Unlock()
	if severed {
		return nil, errors.New("severed")
	}
	return s.rt.RoundTrip(r)
}

func (s *severable) sever() {
	s.mu.Lock()
	s.severed = true
	s.mu.Unlock()
}

// simReplica is a Coordinator of a simFleet, run as a Manager runs it.
type simReplica struct {
	id     string
	coord  *Coordinator
	link   *severable
	cancel context.CancelFunc
	done   chan struct{}
}

// simHome is the home apiserver of a simulation and what it counts of its Leases.
type simHome struct {
	b        *testing.B
	c        *testenv.Cluster
	clusters []string
	fleet    *simFleet
	opts     Options
}

// leaseFigures are the apiserver's counters of requests on Leases and of the Lease
// objects it handed out.
type leaseFigures struct {
	at                          time.Time
	reads, writes, listedLeases float64
	watchEvents                 float64
}

func (h *simHome) figures() leaseFigures {
	ms, err := h.c.Metrics(context.Background())
	if err != nil {
		h.b.Fatal(err)
	}
	var f leaseFigures
	f.at = time.Now()
	for _, v := range []string{"GET", "LIST"} {
		f.reads += ms.Requests(v, "leases")
	}
	for _, v := range []string{"POST", "PUT", "PATCH", "DELETE", "APPLY"} {
		f.writes += ms.Requests(v, "leases")
	}
	f.listedLeases = ms.ListedObjects("coordination.k8s.io", "leases")
	f.watchEvents = ms.Sum("apiserver_watch_events_total", map[string]string{"resource": "leases"})
	return f
}

// rates are the figures per second from a to b.
type rates struct {
	seconds                                  float64
	reads, writes, listedLeases, watchEvents float64
}

func (a leaseFigures) to(b leaseFigures) rates {
	s := b.at.Sub(a.at).Seconds()
	return rates{seconds: s, reads: (b.reads - a.reads) / s, writes: (b.writes - a.writes) / s,
		listedLeases: (b.listedLeases - a.listedLeases) / s, watchEvents: (b.watchEvents - a.watchEvents) / s}
}

func (r rates) String() string {
	return fmt.Sprintf("%.1f reads/s (%.0f Leases listed/s), %.1f writes/s, %.0f watch events/s over %.0fs", r.reads, r.listedLeases, r.writes, r.watchEvents, r.seconds)
}

// start starts a replica id: a Coordinator with its own client of the home cluster, as
// limited as the daemon's, that engages every cluster of the fleet with it.
func (h *simHome) start(id string) *simReplica {
	cfg := h.c.RESTConfig()
	cfg.QPS, cfg.Burst = simQPS, simBurst
	link := &severable{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { link.rt = rt; return link })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		h.b.Fatal(err)
	}
	opts := h.opts
	opts.Identity, opts.Client = id, client
	coord, err := New(opts, &simAware{f: h.fleet, replica: id})
	if err != nil {
		h.b.Fatal(err)
	}
	h.fleet.mu.Lock()
	h.fleet.coords[id] = coord
	h.fleet.mu.Unlock()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.New(&takeLog{f: h.fleet, replica: id})))
	for _, name := range h.clusters {
		if err := coord.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
			h.b.Fatal(err)
		}
	}
	r := &simReplica{id: id, coord: coord, link: link, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = coord.Start(ctx)
	}()
	return r
}

// stop stops r as a Manager does on SIGTERM: nothing more is engaged, the clusters
// stop, then the Coordinator releases its Leases.
func (h *simHome) stop(r *simReplica) {
	r.coord.Freeze()
	h.fleet.stop(r.id)
	r.cancel()
	<-r.done
}

// settle waits until every cluster is engaged by its owner among live, and returns how
// long that took from since.
func (h *simHome) settle(live []string, since time.Time) time.Duration {
	want := Assign(h.clusters, live)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		got := h.fleet.owners()
		bad := 0
		for c, o := range want {
			if got[c] != o {
				bad++
			}
		}
		if bad == 0 {
			return time.Since(since)
		}
		if time.Now().After(deadline) {
			h.b.Fatalf("%d clusters are not engaged by their owners among %v after 10 minutes", bad, live)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func moved(before, after map[string]string) int {
	n := 0
	for c, o := range after {
		if before[c] != o {
			n++
		}
	}
	return n
}

// BenchmarkFleet drives real Coordinators, one per replica, in one process, over a real
// home apiserver: -sim-clusters clusters (10,000) and -sim-replicas replicas (20), with
// the default timing and the daemon's limits on requests to the home cluster. It starts
// them together, measures the steady state, kills one (its requests fail from then on,
// as for a replica lost with its node) and starts it again, then replaces every replica
// in turn, as a rolling update does. It reports what the home apiserver counts of the
// requests on Leases and of the Leases it handed out, and the clusters moved per
// change of membership against 1/N. Run it with
//
//	go test -run '^$' -bench Fleet -benchtime 1x -timeout 60m ./shard/
func BenchmarkFleet(b *testing.B) {
	n, total := *simReplicas, *simClusters
	env := testenv.New(b, testenv.Options{Names: []string{"home"}})
	home := env.Clusters[0]
	if _, err := home.Clientset().CoreV1().Namespaces().Create(b.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	h := &simHome{b: b, c: home, clusters: names("arn:aws:eks:eu-west-1:123456789012:cluster/prod", total),
		fleet: newSimFleet(Options{LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}),
		opts:  Options{Namespace: "fleetwatch", Replicas: n}}
	defer close(h.fleet.lag.stop)
	ids := names("fleetwatch", n)
	var rows [][2]string
	row := func(what, value string) {
		rows = append(rows, [2]string{what, value})
		b.Logf("%s: %s", what, value)
	}
	share := float64(total) / float64(n)
	for range b.N {
		// A start of every replica at once.
		h.fleet.setPhase("start")
		before := h.figures()
		start := time.Now()
		replicas := map[string]*simReplica{}
		for _, id := range ids {
			replicas[id] = h.start(id)
		}
		took := h.settle(ids, start)
		engaged, disengaged := h.fleet.counts()
		row(fmt.Sprintf("start of %d replicas together over %d clusters", n, total),
			fmt.Sprintf("settled in %.1fs; %d clusters engaged (%d of them more than once), %d handed over; home: %s",
				took.Seconds(), engaged, engaged-len(h.fleet.owners()), disengaged, before.to(h.figures())))
		b.ReportMetric(took.Seconds(), "start-s")

		// The steady state.
		h.fleet.setPhase("steady state")
		before = h.figures()
		time.Sleep(*simSteady)
		steady := before.to(h.figures())
		row("steady state", steady.String())
		b.ReportMetric(steady.reads, "steady-reads/s")
		b.ReportMetric(steady.writes, "steady-writes/s")
		b.ReportMetric(steady.listedLeases, "steady-listed-leases/s")

		// A replica lost: its Lease expires for the others, who take its clusters.
		victim := ids[n/2]
		h.fleet.setPhase(victim + " lost")
		owners := h.fleet.owners()
		before = h.figures()
		lost := time.Now()
		replicas[victim].link.sever()
		survivors := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == victim })
		took = h.settle(survivors, lost)
		m := moved(owners, h.fleet.owners())
		row(fmt.Sprintf("%s lost (kill -9)", victim), fmt.Sprintf("settled in %.1fs (lease duration %v); %d clusters moved, %.2f/N; home: %s",
			took.Seconds(), DefaultLeaseDuration, m, float64(m)/share, before.to(h.figures())))
		b.ReportMetric(took.Seconds(), "lost-settle-s")
		h.stop(replicas[victim])
		h.fleet.setPhase(victim + " back")
		owners = h.fleet.owners()
		back := time.Now()
		replicas[victim] = h.start(victim)
		took = h.settle(ids, back)
		m = moved(owners, h.fleet.owners())
		row(fmt.Sprintf("%s back", victim), fmt.Sprintf("settled in %.1fs (it waits for its old Lease to expire); %d clusters moved, %.2f/N",
			took.Seconds(), m, float64(m)/share))

		// A rolling update: each replica in turn, from the highest ordinal, stops and
		// starts again.
		before = h.figures()
		update := time.Now()
		var worst, sum float64
		var stops, starts time.Duration
		for i := n - 1; i >= 0; i-- {
			id := ids[i]
			live := slices.DeleteFunc(slices.Clone(ids), func(x string) bool { return x == id })
			owners := h.fleet.owners()
			at := time.Now()
			h.fleet.setPhase("rolling update: " + id + " stops")
			h.stop(replicas[id])
			stops += h.settle(live, at)
			m := float64(moved(owners, h.fleet.owners())) / share
			worst, sum = max(worst, m), sum+m
			owners = h.fleet.owners()
			at = time.Now()
			h.fleet.setPhase("rolling update: " + id + " starts")
			replicas[id] = h.start(id)
			starts += h.settle(ids, at)
			m = float64(moved(owners, h.fleet.owners())) / share
			worst, sum = max(worst, m), sum+m
		}
		rolling := before.to(h.figures())
		row("rolling update of every replica", fmt.Sprintf("%.0fs, each stop settled in %.1fs and each start in %.1fs on average; %.2f/N clusters moved per change on average, %.2f/N at most; home: %s",
			time.Since(update).Seconds(), stops.Seconds()/float64(n), starts.Seconds()/float64(n), sum/float64(2*n), worst, rolling))
		b.ReportMetric(worst, "moved-per-change/(C/N)")
		b.ReportMetric(rolling.reads, "rolling-reads/s")
		b.ReportMetric(rolling.writes, "rolling-writes/s")
		h.fleet.mu.Lock()
		overlaps, stopping := slices.Clone(h.fleet.overlaps), slices.Clone(h.fleet.stopping)
		h.fleet.mu.Unlock()
		var starved, protocol int
		for i, o := range overlaps {
			if o.starved {
				starved++
			} else {
				protocol++
			}
			if i < 40 {
				b.Log(o.tell(h.fleet))
			}
		}
		for i, o := range stopping {
			if i < 5 || i == len(stopping)-1 {
				b.Log(o.tell(h.fleet))
			}
		}
		row("exclusivity", fmt.Sprintf("%d clusters engaged while another replica watched them: %d after that replica's goroutines stalled past the margin (LeaseDuration − RenewDeadline), %d of the protocol; %d engaged after the other had stopped them but before it had disengaged them",
			len(overlaps), starved, protocol, len(stopping)))
		b.ReportMetric(float64(starved), "starved-overlaps")
		b.ReportMetric(float64(protocol), "protocol-overlaps")
		if protocol > 0 {
			b.Errorf("%d clusters were engaged by a replica while another watched them, not explained by a stall", protocol)
		}
		for _, r := range replicas {
			h.stop(r)
		}
	}
	var sb strings.Builder
	sb.WriteString("\n| | |\n|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %s |\n", r[0], r[1])
	}
	b.Log(sb.String())
}

// BenchmarkPlacementSpread reports the memory per replica of an uneven fleet, as the
// placement divides it among -sim-replicas replicas: -sim-clusters clusters of which 1%
// hold 100,000 objects, 9% 10,000 and the rest 100 to 1,000, the largest and the
// smallest replica's objects against the mean, by count (Assign, BalanceCount) and by
// objects (AssignByCost over the quantized costs, BalanceObjects); and, by objects, the
// clusters and objects that move when a replica joins or leaves, in units of 1/N.
func BenchmarkPlacementSpread(b *testing.B) {
	clusters := names("arn:aws:eks:eu-west-1:123456789012:cluster/prod", *simClusters)
	replicas := names("fleetwatch", *simReplicas)
	objects := unevenCosts(clusters)
	costs := make(map[string]int64, len(objects))
	for c, o := range objects {
		costs[c] = Quantize(int64(o))
	}
	spread := func(owners map[string]string) (most, least float64) {
		load := map[string]float64{}
		for c, r := range owners {
			load[r] += objects[c]
		}
		var sum float64
		least = math.Inf(1)
		for _, r := range replicas {
			sum += load[r]
			most, least = max(most, load[r]), min(least, load[r])
		}
		mean := sum / float64(len(replicas))
		return most / mean, least / mean
	}
	// movedPerN is the share of the clusters and of the objects whose owner differs,
	// times n.
	movedPerN := func(before, after map[string]string, n int) (clusters, objs float64) {
		var moved, total float64
		for c, r := range before {
			total += objects[c]
			if after[c] != r {
				clusters++
				moved += objects[c]
			}
		}
		return clusters / float64(len(before)) * float64(n), moved / total * float64(n)
	}
	for range b.N {
		most, least := spread(Assign(clusters, replicas))
		b.ReportMetric(most, "count-max/mean")
		b.ReportMetric(least, "count-min/mean")
		weighted := AssignByCost(costs, replicas)
		most, least = spread(weighted)
		b.ReportMetric(most, "objects-max/mean")
		b.ReportMetric(least, "objects-min/mean")
		n := len(replicas)
		c, o := movedPerN(weighted, AssignByCost(costs, append(slices.Clone(replicas), "fleetwatch-new")), n+1)
		b.ReportMetric(c, "join-moved-clusters/(C/N)")
		b.ReportMetric(o, "join-moved-objects/(O/N)")
		c, o = movedPerN(weighted, AssignByCost(costs, replicas[1:]), n)
		b.ReportMetric(c, "leave-moved-clusters/(C/N)")
		b.ReportMetric(o, "leave-moved-objects/(O/N)")
	}
}

// unevenCosts gives each cluster its objects, drawn from its name's hash: 1% with
// 100,000, 9% with 10,000, the rest between 100 and 1,000.
func unevenCosts(clusters []string) map[string]float64 {
	out := make(map[string]float64, len(clusters))
	for _, c := range clusters {
		h := weight("cost", c)
		switch p := h % 100; {
		case p == 0:
			out[c] = 100000
		case p < 10:
			out[c] = 10000
		default:
			out[c] = float64(100 + (h>>8)%901)
		}
	}
	return out
}
