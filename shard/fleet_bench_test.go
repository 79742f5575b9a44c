package shard

import (
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
// Coordinators report it.
type simFleet struct {
	mu sync.Mutex
	// owner is the replica that has each cluster engaged.
	owner map[string]string
	// engaged counts the calls to Engage, disengaged those to Disengage, overlaps the
	// Engages of a cluster another replica had engaged.
	engaged, disengaged, overlaps int
}

// simAware is the Aware of one replica of a simFleet: it watches nothing, and counts.
type simAware struct {
	f       *simFleet
	replica string
}

var _ cluster.Disengager = (*simAware)(nil)

func (a *simAware) Engage(_ context.Context, c *cluster.Cluster) error {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if o, ok := a.f.owner[c.Name]; ok && o != a.replica {
		a.f.overlaps++
	}
	a.f.owner[c.Name] = a.replica
	a.f.engaged++
	return nil
}

func (a *simAware) Disengage(_ context.Context, c *cluster.Cluster, _ error) error {
	a.f.mu.Lock()
	defer a.f.mu.Unlock()
	if a.f.owner[c.Name] == a.replica {
		delete(a.f.owner, c.Name)
	}
	a.f.disengaged++
	return nil
}

// stop drops every cluster of replica, as a Manager's informers stop before its
// Coordinator's context ends.
func (f *simFleet) stop(replica string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	maps.DeleteFunc(f.owner, func(_, o string) bool { return o == replica })
}

func (f *simFleet) owners() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.owner)
}

func (f *simFleet) counts() (engaged, disengaged, overlaps int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.engaged, f.disengaged, f.overlaps
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
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.Discard()))
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
	h := &simHome{b: b, c: home, clusters: names("arn:aws:eks:eu-west-1:123456789012:cluster/prod", total), fleet: &simFleet{owner: map[string]string{}},
		opts: Options{Namespace: "fleetwatch", Replicas: n}}
	ids := names("fleetwatch", n)
	var rows [][2]string
	row := func(what, value string) {
		rows = append(rows, [2]string{what, value})
		b.Logf("%s: %s", what, value)
	}
	share := float64(total) / float64(n)
	for range b.N {
		// A start of every replica at once.
		before := h.figures()
		start := time.Now()
		replicas := map[string]*simReplica{}
		for _, id := range ids {
			replicas[id] = h.start(id)
		}
		took := h.settle(ids, start)
		engaged, disengaged, _ := h.fleet.counts()
		row(fmt.Sprintf("start of %d replicas together over %d clusters", n, total),
			fmt.Sprintf("settled in %.1fs; %d clusters engaged (%d of them more than once), %d handed over; home: %s",
				took.Seconds(), engaged, engaged-len(h.fleet.owners()), disengaged, before.to(h.figures())))
		b.ReportMetric(took.Seconds(), "start-s")

		// The steady state.
		before = h.figures()
		time.Sleep(*simSteady)
		steady := before.to(h.figures())
		row("steady state", steady.String())
		b.ReportMetric(steady.reads, "steady-reads/s")
		b.ReportMetric(steady.writes, "steady-writes/s")
		b.ReportMetric(steady.listedLeases, "steady-listed-leases/s")

		// A replica lost: its Lease expires for the others, who take its clusters.
		victim := ids[n/2]
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
			h.stop(replicas[id])
			stops += h.settle(live, at)
			m := float64(moved(owners, h.fleet.owners())) / share
			worst, sum = max(worst, m), sum+m
			owners = h.fleet.owners()
			at = time.Now()
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
		_, _, overlaps := h.fleet.counts()
		if overlaps > 0 {
			b.Errorf("%d clusters were engaged by a replica while another had them engaged", overlaps)
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
