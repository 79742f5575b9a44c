package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/shard"
)

// The sharded many-clusters row (--many-shards N, issue #33) runs, after a row's
// contenders, N replicas of the daemon over the row's kubeconfig: the real binary with
// shard.enabled, their Leases in a home apiserver of the phase's own, as shard.go runs
// them, but started together with shard.replicas N, as a StatefulSet whose
// podManagementPolicy is Parallel starts them. It measures the start (time to settled,
// clusters per replica, objects listed, handovers, Lease requests), each replica's
// memory once idle, the Lease requests of a steady state, and a restart of all N
// together from their snapshots.
const (
	// manyShardsMaxContexts bounds the rows that run sharded: each costs a start, a
	// minute of steady state and a restart of N replicas, and the row of 10,000
	// contexts alone takes the 2 cores of the bench's machine for its single daemon.
	manyShardsMaxContexts = 1000
	// manyShardsSteady is how long the steady state is watched.
	manyShardsSteady = 60 * time.Second
)

// manyShardResult is the sharded part of a row of the many-clusters table.
type manyShardResult struct {
	Replicas int `json:"replicas"`
	// Cold is the replicas started together, with no snapshot and no Lease; Warm the
	// same replicas stopped and started again together, on their snapshots. Warm is nil
	// if the row failed before.
	Cold *manyShardStart `json:"cold,omitempty"`
	Warm *manyShardStart `json:"warm,omitempty"`
	// Steady are the home apiserver's Lease figures over SteadySec after Cold, the
	// replicas' memory measured.
	Steady    leaseCounters `json:"steady"`
	SteadySec float64       `json:"steadySec"`
	// Error is why the row stopped, if it did; what was measured before is kept.
	Error string `json:"error,omitempty"`
}

// manyShardStart is what a start of every replica together measured.
type manyShardStart struct {
	// Seconds is from the first replica's start to every replica ready and listing
	// every cluster synced by the replica that rendezvous hashing assigns it to.
	Seconds float64 `json:"seconds"`
	// Replicas are each replica's figures, in the order of their identities.
	Replicas []replicaFigures `json:"replicas"`
	// Lists are the member apiservers' figures over the start.
	Lists listCounters `json:"lists"`
	// Leases are the home apiserver's Lease figures over the start.
	Leases leaseCounters `json:"leases"`
	// Handovers are the takes of cluster Leases over the start beyond the first of
	// each: a cluster that a replica took and another one took from it.
	Handovers int `json:"handovers"`
}

// replicaFigures are one replica's measurements of a start.
type replicaFigures struct {
	ID string `json:"id"`
	// Clusters are the clusters it owns once settled.
	Clusters int `json:"clusters"`
	// CPUSec is its CPU time and PeakRSS its VmHWM when the fleet settled.
	CPUSec  float64 `json:"cpuSec"`
	PeakRSS uint64  `json:"peakRSS"`
	// IdleSec is how long after the settling it was idle (serveIdle); the heap, RSS
	// after GC and goroutines are measured then.
	IdleSec     float64 `json:"idleSec"`
	HeapAfterGC uint64  `json:"heapAfterGC"`
	RSSAfterGC  uint64  `json:"rssAfterGC"`
	Goroutines  int     `json:"goroutines"`
}

// leaseCounters are the home apiserver's counters of Lease requests and of the Lease
// objects it handed out, as the Lease protocol's simulation counts them
// (shard/fleet_bench_test.go): reads are GETs and LISTs, writes POSTs, PUTs, PATCHes,
// DELETEs and APPLYs. They include the home apiserver's own identity Lease, renewed
// every 10 s.
type leaseCounters struct {
	Reads       float64 `json:"reads"`
	Writes      float64 `json:"writes"`
	Listed      float64 `json:"listed"`
	WatchEvents float64 `json:"watchEvents"`
}

func (c leaseCounters) minus(o leaseCounters) leaseCounters {
	return leaseCounters{Reads: c.Reads - o.Reads, Writes: c.Writes - o.Writes, Listed: c.Listed - o.Listed, WatchEvents: c.WatchEvents - o.WatchEvents}
}

// rates are the counters per second over sec seconds: reads/s (Leases listed/s),
// writes/s, watch events/s.
func (c leaseCounters) rates(sec float64) string {
	return fmt.Sprintf("%.1f reads/s (%.0f Leases listed/s), %.1f writes/s, %.0f watch events/s",
		c.Reads/sec, c.Listed/sec, c.Writes/sec, c.WatchEvents/sec)
}

func homeLeases(ctx context.Context, c *testenv.Cluster) (leaseCounters, error) {
	m, err := c.Metrics(ctx)
	if err != nil {
		return leaseCounters{}, err
	}
	var l leaseCounters
	for _, v := range []string{"GET", "LIST"} {
		l.Reads += m.Requests(v, "leases")
	}
	for _, v := range []string{"POST", "PUT", "PATCH", "DELETE", "APPLY"} {
		l.Writes += m.Requests(v, "leases")
	}
	l.Listed = m.ListedObjects("coordination.k8s.io", "leases")
	l.WatchEvents = m.Sum("apiserver_watch_events_total", map[string]string{"resource": "leases"})
	return l, nil
}

// clusterLeaseTransitions are the leaseTransitions of the cluster Leases in namespace,
// by Lease name.
func clusterLeaseTransitions(ctx context.Context, c *testenv.Cluster, namespace string) (map[string]int32, error) {
	list, err := c.Clientset().CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{LabelSelector: shard.LeaseLabel + "=" + shard.LeaseCluster})
	if err != nil {
		return nil, err
	}
	out := make(map[string]int32, len(list.Items))
	for _, l := range list.Items {
		out[l.Name] = ptr.Deref(l.Spec.LeaseTransitions, 0)
	}
	return out, nil
}

// handovers counts, from the cluster Leases' transitions before and after a start, the
// takes beyond the first of each cluster. A replica that creates a cluster's Lease takes
// it with 0 transitions, and every later take by another holder, or from no holder,
// adds one; a Lease that its holder kept through a restart was not taken again.
func handovers(before, after map[string]int32) int {
	n := 0
	for name, t := range after {
		b, ok := before[name]
		takes := int(t - b)
		if !ok {
			takes = int(t) + 1
		}
		n += max(0, takes-1)
	}
	return n
}

// manyShards runs the sharded part of the row of n contexts in kubeconfig, whose
// objects are those of r, with the Leases in home. A failure is recorded in the
// result, with what was measured before it.
func (d *driver) manyShards(ctx context.Context, home *shardHome, r manyResult, kubeconfig string) *manyShardResult {
	n := r.Contexts
	res := &manyShardResult{Replicas: d.opts.manyShards}
	if err := d.manyShardsRun(ctx, home, n, kubeconfig, res); err != nil {
		log.Printf("many: %d contexts, %d replicas: %v", n, res.Replicas, err)
		res.Error = err.Error()
	}
	return res
}

func (d *driver) manyShardsRun(ctx context.Context, home *shardHome, n int, kubeconfig string, res *manyShardResult) error {
	dir := filepath.Join(d.workDir, fmt.Sprintf("many-shards-%d", n))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// A namespace per row: its replicas find no Lease of another row's.
	ns := fmt.Sprintf("many-%d", n)
	if err := home.createNamespace(ctx, ns); err != nil {
		return err
	}
	names := make([]string, n)
	for i := range names {
		names[i] = contextName(i)
	}
	f := &shardFleet{d: d, bin: d.serveBin, home: home, dir: dir, logPrefix: fmt.Sprintf("many%d-shard-", n), namespace: ns,
		members: kubeconfig, clusters: names, resources: []string{"pods"}, replicas: res.Replicas,
		syncTimeout: (2 * manyRowTimeout).String(), warm: true, running: map[string]*shardReplica{}}
	defer func() {
		if err := f.stopAll(); err != nil {
			log.Printf("many: %v", err)
		}
	}()
	ids := replicaIDs(res.Replicas)
	var err error
	if res.Cold, err = f.startTogether(ctx, ids, "cold"); err != nil {
		return fmt.Errorf("the start together: %w", err)
	}
	l0, err := homeLeases(ctx, home.env.Clusters[0])
	if err != nil {
		return err
	}
	start := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(manyShardsSteady):
	}
	l1, err := homeLeases(ctx, home.env.Clusters[0])
	if err != nil {
		return err
	}
	res.Steady, res.SteadySec = l1.minus(l0), time.Since(start).Seconds()
	log.Printf("many: %d contexts, %d replicas, steady state: %s over %.0f s", n, res.Replicas, res.Steady.rates(res.SteadySec), res.SteadySec)
	if err := f.stopAll(); err != nil {
		return err
	}
	if res.Warm, err = f.startTogether(ctx, ids, "warm"); err != nil {
		return fmt.Errorf("the restart together: %w", err)
	}
	return nil
}

// startTogether starts the replicas ids at once and measures them until they have
// settled and are idle; name is the start's, for the log.
func (f *shardFleet) startTogether(ctx context.Context, ids []string, name string) (*manyShardStart, error) {
	home := f.home.env.Clusters[0]
	trans0, err := clusterLeaseTransitions(ctx, home, f.namespace)
	if err != nil {
		return nil, err
	}
	leases0, err := homeLeases(ctx, home)
	if err != nil {
		return nil, err
	}
	lists0, err := f.d.listCounters(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for _, id := range ids {
		if err := f.start(ctx, id); err != nil {
			return nil, err
		}
	}
	if _, err := f.settle(ctx, ids); err != nil {
		return nil, err
	}
	s := &manyShardStart{Seconds: time.Since(start).Seconds()}
	owned := map[string]int{}
	for _, owner := range shard.Assign(f.clusters, ids) {
		owned[owner]++
	}
	for _, id := range ids {
		pid := f.running[id].cmd.Process.Pid
		s.Replicas = append(s.Replicas, replicaFigures{ID: id, Clusters: owned[id], CPUSec: procCPU(pid),
			PeakRSS: readStatus(fmt.Sprintf("/proc/%d/status", pid))["VmHWM"]})
	}
	leases1, err := homeLeases(ctx, home)
	if err != nil {
		return nil, err
	}
	lists1, err := f.d.listCounters(ctx)
	if err != nil {
		return nil, err
	}
	trans1, err := clusterLeaseTransitions(ctx, home, f.namespace)
	if err != nil {
		return nil, err
	}
	s.Leases, s.Lists, s.Handovers = leases1.minus(leases0), lists1.minus(lists0), handovers(trans0, trans1)
	if len(trans1) != len(f.clusters) {
		return nil, fmt.Errorf("%d cluster Leases for %d clusters", len(trans1), len(f.clusters))
	}
	settled := time.Now()
	for i, id := range ids {
		if err := f.memory(ctx, id, settled, &s.Replicas[i]); err != nil {
			return nil, err
		}
	}
	log.Printf("many: %d contexts, %d replicas, %s start: settled in %.2f s, clusters %v, %.0f objects listed, %d handovers, home %s",
		len(f.clusters), len(ids), name, s.Seconds, s.clusters(), s.Lists.Objects, s.Handovers, s.Leases.rates(s.Seconds))
	return s, nil
}

// memory waits until the replica id is idle, as serveContend waits for its daemon, and
// measures its goroutines and its memory after GC into r.
func (f *shardFleet) memory(ctx context.Context, id string, settled time.Time, r *replicaFigures) error {
	rep := f.running[id]
	get := func(path string) (string, bool) {
		code, body, err := f.get(ctx, rep.base+path)
		return string(body), err == nil && code == 200
	}
	serveIdle(ctx, get)
	r.IdleSec = time.Since(settled).Seconds()
	if m, ok := get("/metrics"); ok {
		r.Goroutines = int(sumMetric(m, "go_goroutines "))
	}
	if err := rep.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	select {
	case m := <-rep.memstats:
		r.HeapAfterGC, r.RSSAfterGC = m[0], m[1]
		return nil
	case <-time.After(time.Minute):
		return fmt.Errorf("%s: no memstats within a minute of SIGUSR1", id)
	}
}

// clusters are the clusters each replica owns, in the order of their identities.
func (s *manyShardStart) clusters() []int {
	var out []int
	for _, r := range s.Replicas {
		out = append(out, r.Clusters)
	}
	return out
}

// rssRange is the smallest and the largest RSS after GC of the replicas, and their sum.
func (s *manyShardStart) rssRange() (lo, hi, sum uint64) {
	for i, r := range s.Replicas {
		if i == 0 || r.RSSAfterGC < lo {
			lo = r.RSSAfterGC
		}
		hi = max(hi, r.RSSAfterGC)
		sum += r.RSSAfterGC
	}
	return lo, hi, sum
}

// clusterRange is the fewest and the most clusters a replica owns.
func (s *manyShardStart) clusterRange() (lo, hi int) {
	c := s.clusters()
	if len(c) == 0 {
		return 0, 0
	}
	return slices.Min(c), slices.Max(c)
}

// start is s's restart together if warm, else its start together; the zero value if it
// did not happen.
func (s *manyShardResult) start(warm bool) manyShardStart {
	x := s.Cold
	if warm {
		x = s.Warm
	}
	if x == nil {
		return manyShardStart{}
	}
	return *x
}
