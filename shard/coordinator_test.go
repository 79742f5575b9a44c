package shard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// watchers records which replica watches each cluster, as the Awares of several
// Coordinators report it, and fails the test on any overlap.
type watchers struct {
	t  *testing.T
	mu sync.Mutex
	// by is the replica watching each cluster.
	by map[string]string
	// engaged are the replicas that engaged each cluster, in order, one entry per Engage.
	engaged map[string][]string
}

func (w *watchers) aware(replica string) *recorder { return &recorder{w: w, replica: replica} }

func (w *watchers) engagements() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.engaged)
}

func (w *watchers) snapshot() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]string, len(w.by))
	for k, v := range w.by {
		out[k] = v
	}
	return out
}

// recorder is the Aware of one replica: a cluster is watched from Engage until its
// context is cancelled and Disengage returns.
type recorder struct {
	w       *watchers
	replica string
	causes  []error
}

func (r *recorder) Engage(ctx context.Context, c *cluster.Cluster) error {
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	if other, ok := r.w.by[c.Name]; ok {
		r.w.t.Errorf("cluster %s engaged by %s while %s watches it", c.Name, r.replica, other)
	}
	r.w.by[c.Name] = r.replica
	if r.w.engaged == nil {
		r.w.engaged = map[string][]string{}
	}
	r.w.engaged[c.Name] = append(r.w.engaged[c.Name], r.replica)
	go func() {
		<-ctx.Done()
		// Stopping is not instant: the Coordinator must wait for Disengage.
		time.Sleep(20 * time.Millisecond)
		r.w.mu.Lock()
		if r.w.by[c.Name] == r.replica {
			delete(r.w.by, c.Name)
		}
		r.w.mu.Unlock()
	}()
	return nil
}

func (r *recorder) Disengage(ctx context.Context, c *cluster.Cluster, cause error) error {
	for {
		r.w.mu.Lock()
		gone := r.w.by[c.Name] != r.replica
		if gone {
			r.causes = append(r.causes, cause)
		}
		r.w.mu.Unlock()
		if gone {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fastTiming leaves 3 s between a replica's deadline and its Lease's expiry, so that a
// loaded machine's scheduling delays do not look like overlaps. A process starved for
// longer than RenewDeadline gives its clusters up, as it must; settle is how long the
// tests wait for the replicas to settle again after such a stall.
var fastTiming = Options{LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond}

const settle = 30 * time.Second

// replica runs a Coordinator as a Manager does: the clusters' contexts end first (the
// Provider stops), then the Coordinator's, once the clusters have stopped.
type replica struct {
	coord                  *Coordinator
	w                      *watchers
	cancelClusters, cancel context.CancelFunc
	done                   chan struct{}
}

func startReplica(t *testing.T, client *fake.Clientset, w *watchers, id string, clusters []string) *replica {
	t.Helper()
	return startReplicaWith(t, client, w, id, clusters, w.aware(id), nil)
}

// startReplicaWith is startReplica with the Aware the coordinator engages its clusters
// in, and setOpts, if not nil, changing its options.
func startReplicaWith(t *testing.T, client *fake.Clientset, w *watchers, id string, clusters []string, aware cluster.Aware, setOpts func(*Options)) *replica {
	t.Helper()
	opts := fastTiming
	opts.Identity, opts.Namespace, opts.Client, opts.Address = id, "fleetwatch", client, "https://"+id+".peers:8443"
	if setOpts != nil {
		setOpts(&opts)
	}
	coord, err := New(opts, aware)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	clustersCtx, cancelClusters := context.WithCancel(ctx)
	r := &replica{coord: coord, w: w, cancelClusters: cancelClusters, cancel: cancel, done: make(chan struct{})}
	for _, name := range clusters {
		if err := coord.Engage(clustersCtx, &cluster.Cluster{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		defer close(r.done)
		_ = coord.Start(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancelClusters()
	r.coord.Freeze()
	for slices.Contains(slices.Collect(maps.Values(r.w.snapshot())), r.coord.Identity()) {
		time.Sleep(5 * time.Millisecond)
	}
	r.cancel()
	<-r.done
}

// waitAssigned waits until each cluster is watched by its owner among ids.
func waitAssigned(t *testing.T, w *watchers, clusters, ids []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := w.snapshot()
		bad := ""
		for _, c := range clusters {
			if want := Owner(c, ids); got[c] != want {
				bad = fmt.Sprintf("cluster %s is watched by %q, want %q", c, got[c], want)
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newClient returns a fake clientset whose Leases have resourceVersions that an update
// must match, as an apiserver's do: the Coordinators' takeovers rely on it.
func newClient() *fake.Clientset {
	client := fake.NewClientset()
	var mu sync.Mutex
	next := 0
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		// Create and update actions have the same methods: tell them by their verb.
		o, ok := a.(k8stesting.CreateAction)
		if !ok {
			return false, nil, nil
		}
		obj := o.GetObject().(metav1.Object)
		switch a.GetVerb() {
		case "create":
		case "update":
			cur, err := client.Tracker().Get(a.GetResource(), a.GetNamespace(), obj.GetName())
			if err != nil {
				return true, nil, err
			}
			if rv := cur.(metav1.Object).GetResourceVersion(); rv != obj.GetResourceVersion() {
				return true, nil, apierrors.NewConflict(a.GetResource().GroupResource(), obj.GetName(), fmt.Errorf("resourceVersion %s, want %s", obj.GetResourceVersion(), rv))
			}
		default:
			return false, nil, nil
		}
		next++
		obj.SetResourceVersion(fmt.Sprint(next))
		return false, nil, nil
	})
	return client
}

func TestCoordinatorsDivideClustersAndHandOver(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 24)
	r0 := startReplica(t, client, w, "r0", clusters)
	r1 := startReplica(t, client, w, "r1", clusters)
	startReplica(t, client, w, "r2", clusters)
	waitAssigned(t, w, clusters, []string{"r0", "r1", "r2"}, settle)

	// A cluster is engaged with the Aware (which the watchers record) just before the
	// Coordinator counts it as owned: Settled follows at once.
	for _, r := range []*replica{r0, r1} {
		deadline := time.Now().Add(time.Second)
		for !r.coord.Settled() {
			if time.Now().After(deadline) {
				t.Errorf("%s is not settled a second after every cluster is placed", r.coord.Identity())
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// Every replica sees where every cluster is, with the holder's address, once it has
	// read the Leases again.
	deadline := time.Now().Add(settle)
	for {
		var bad []string
		for _, p := range r0.coord.Placements() {
			if want := Owner(p.Cluster, []string{"r0", "r1", "r2"}); p.Holder != want || p.Assigned != want || p.Address != "https://"+want+".peers:8443" {
				bad = append(bad, fmt.Sprintf("%+v, want holder and assigned %s with its address", p, want))
			}
		}
		if len(bad) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r0 places %v", bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The owner of a cluster is found from its Lease.
	l, err := client.CoordinationV1().Leases("fleetwatch").Get(t.Context(), ClusterLeaseName(clusters[0]), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ptr.Deref(l.Spec.HolderIdentity, ""), Owner(clusters[0], []string{"r0", "r1", "r2"}); got != want || l.Annotations[ClusterAnnotation] != clusters[0] {
		t.Errorf("cluster Lease holder %q, annotation %q; want %q, %q", got, l.Annotations[ClusterAnnotation], want, clusters[0])
	}

	// A replica that stops releases its Leases: the others take its clusters at once,
	// not after LeaseDuration.
	start := time.Now()
	r1.stop()
	l, err = client.CoordinationV1().Leases("fleetwatch").Get(t.Context(), ReplicaLeaseName("r1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
		t.Errorf("r1 stopped, and its Lease still names %q", h)
	}
	waitAssigned(t, w, clusters, []string{"r0", "r2"}, settle)
	t.Logf("handed over in %v after r1 stopped (its Lease would expire after %v)", time.Since(start), fastTiming.LeaseDuration)

	// A replica that joins takes only its share, handed over by the others.
	startReplica(t, client, w, "r3", clusters)
	waitAssigned(t, w, clusters, []string{"r0", "r2", "r3"}, settle)
}

// TestCoordinatorsStartTogether: replicas that expect each other (Options.Replicas)
// take no cluster until all have joined, then each takes its own share: every cluster
// is engaged once, by its final owner, and nothing is handed over. One that joins
// while the others are missing waits for them.
func TestCoordinatorsStartTogether(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 24)
	ids := []string{"r0", "r1", "r2"}
	expect := func(o *Options) { o.Replicas, o.StartTimeout = len(ids), time.Hour }
	var replicas []*replica
	for _, id := range ids[:2] {
		replicas = append(replicas, startReplicaWith(t, client, w, id, clusters, w.aware(id), expect))
	}
	// r0 and r1 see each other, and wait for the third.
	deadline := time.Now().Add(settle)
	for _, r := range replicas {
		for {
			all := true
			for _, p := range r.coord.Placements() {
				all = all && p.Assigned == Owner(p.Cluster, ids[:2])
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s does not see both replicas: %+v", r.coord.Identity(), r.coord.Placements())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if r.coord.Settled() {
			t.Errorf("%s is settled while it waits for the others", r.coord.Identity())
		}
	}
	if got := w.snapshot(); len(got) > 0 {
		t.Fatalf("2 of 3 replicas joined, and clusters are engaged: %v", got)
	}
	startReplicaWith(t, client, w, ids[2], clusters, w.aware(ids[2]), expect)
	waitAssigned(t, w, clusters, ids, settle)
	for _, c := range clusters {
		if got := w.engagements()[c]; !slices.Equal(got, []string{Owner(c, ids)}) {
			t.Errorf("cluster %s was engaged by %v, want once by its owner %s", c, got, Owner(c, ids))
		}
	}
}

// TestCoordinatorStopsWaitingAfterStartTimeout: replicas that expect more than join take
// their shares among those that did once StartTimeout has passed.
func TestCoordinatorStopsWaitingAfterStartTimeout(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 12)
	for _, id := range []string{"r0", "r1"} {
		startReplicaWith(t, client, w, id, clusters, w.aware(id), func(o *Options) { o.Replicas, o.StartTimeout = 3, time.Second })
	}
	waitAssigned(t, w, clusters, []string{"r0", "r1"}, settle)
}

// TestCoordinatorJoinsARunningFleet: a replica that starts while the others run (a
// rolling update) waits for no one, also if it expects more replicas than there are.
func TestCoordinatorJoinsARunningFleet(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 12)
	for _, id := range []string{"r0", "r1"} {
		startReplicaWith(t, client, w, id, clusters, w.aware(id), func(o *Options) { o.Replicas = 2 })
	}
	waitAssigned(t, w, clusters, []string{"r0", "r1"}, settle)
	startReplicaWith(t, client, w, "r2", clusters, w.aware("r2"), func(o *Options) { o.Replicas, o.StartTimeout = 5, time.Hour })
	waitAssigned(t, w, clusters, []string{"r0", "r1", "r2"}, settle)
}

// TestCoordinatorGivesUpBeforeItsLeaseExpires: a replica whose renewals fail stops
// every cluster within RenewDeadline; the others take them only after LeaseDuration.
func TestCoordinatorGivesUpBeforeItsLeaseExpires(t *testing.T) {
	t.Parallel()
	client := newClient()
	var mu sync.Mutex
	cutOff := false
	client.PrependReactor("*", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if !cutOff {
			return false, nil, nil
		}
		// r0 is cut off from the home cluster; it names itself in what it writes.
		if u, ok := a.(k8stesting.UpdateAction); ok && slices.Contains([]string{ReplicaLeaseName("r0")}, u.GetObject().(metav1.Object).GetName()) {
			return true, nil, apierrors.NewServiceUnavailable("cut off")
		}
		return false, nil, nil
	})
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 12)
	r0 := startReplica(t, client, w, "r0", clusters)
	startReplica(t, client, w, "r1", clusters)
	waitAssigned(t, w, clusters, []string{"r0", "r1"}, settle)

	mu.Lock()
	cutOff = true
	mu.Unlock()
	cut := time.Now()
	deadline := cut.Add(fastTiming.LeaseDuration)
	for {
		stillR0 := 0
		for _, by := range w.snapshot() {
			if by == "r0" {
				stillR0++
			}
		}
		if stillR0 == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r0 still watches %d clusters %v after it was cut off, past LeaseDuration", stillR0, time.Since(cut))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("r0 gave up %v after it was cut off", time.Since(cut))
	if r0.coord.Joined() {
		t.Error("r0 still counts itself a member")
	}
	waitAssigned(t, w, clusters, []string{"r1"}, settle)
	// The recorder fails the test if r1 engaged a cluster that r0 still watched.
}

// receiver is a recorder that is a Receiver: it records the handovers it is told of,
// and how many it was told of at once at most, each taking receiveTime.
type receiver struct {
	*recorder
	mu        sync.Mutex
	handovers map[string]Handover
	running   int
	peak      int
}

const receiveTime = 50 * time.Millisecond

func (r *receiver) Receive(ctx context.Context, h Handover) {
	r.mu.Lock()
	r.handovers[h.Cluster] = h
	r.running++
	r.peak = max(r.peak, r.running)
	r.mu.Unlock()
	time.Sleep(receiveTime)
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
}

func (r *receiver) got() map[string]Handover {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.handovers)
}

// TestCoordinatorTellsOfHandovers: a cluster that moves on a planned change (a replica
// joins, or one stops) is released with HandoverAnnotation naming its old owner, and its
// new owner is told, with the old owner's address, before it engages it; a cluster that
// did not move, or was taken from a replica that lost its Lease, is no handover. The
// clusters taken in one round are received in parallel, at most ParallelReceives at
// once.
func TestCoordinatorTellsOfHandovers(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 12)
	start := func(id string) (*replica, *receiver) {
		rcv := &receiver{recorder: w.aware(id), handovers: map[string]Handover{}}
		r := startReplicaWith(t, client, w, id, clusters, rcv, func(o *Options) { o.ParallelReceives = 2 })
		return r, rcv
	}
	_, rcv0 := start("r0")
	waitAssigned(t, w, clusters, []string{"r0"}, settle)
	if got := rcv0.got(); len(got) != 0 {
		t.Errorf("clusters taken at the start are handovers: %v", got)
	}

	r1, rcv1 := start("r1")
	waitAssigned(t, w, clusters, []string{"r0", "r1"}, settle)
	moved := 0
	for _, c := range clusters {
		h, ok := rcv1.got()[c]
		if Owner(c, []string{"r0", "r1"}) != "r1" {
			if ok {
				t.Errorf("cluster %s stayed with r0, and r1 was told of a handover %+v", c, h)
			}
			continue
		}
		moved++
		if want := (Handover{Cluster: c, From: "r0", Address: "https://r0.peers:8443"}); h != want {
			t.Errorf("cluster %s moved to r1: handover %+v, want %+v", c, h, want)
		}
		l, err := client.CoordinationV1().Leases("fleetwatch").Get(t.Context(), ClusterLeaseName(c), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := l.Annotations[HandoverAnnotation]; ok {
			t.Errorf("cluster %s taken by r1 still has %s=%q", c, HandoverAnnotation, a)
		}
	}
	if moved == 0 {
		t.Fatal("no cluster moved to r1; pick other names")
	}

	// r1 stops: its clusters go back to r0, handed over by r1.
	r1.stop()
	waitAssigned(t, w, clusters, []string{"r0"}, settle)
	for _, c := range clusters {
		if Owner(c, []string{"r0", "r1"}) != "r1" {
			continue
		}
		if h, want := rcv0.got()[c], (Handover{Cluster: c, From: "r1", Address: "https://r1.peers:8443"}); h != want {
			t.Errorf("cluster %s back to r0 as r1 stopped: handover %+v, want %+v", c, h, want)
		}
	}
	most := 0
	for id, rcv := range map[string]*receiver{"r0": rcv0, "r1": rcv1} {
		rcv.mu.Lock()
		peak := rcv.peak
		rcv.mu.Unlock()
		t.Logf("%s received at most %d states at once", id, peak)
		if peak > 2 {
			t.Errorf("%s received %d states at once, more than ParallelReceives", id, peak)
		}
		most = max(most, peak)
	}
	if most < 2 {
		t.Error("no states were received in parallel")
	}
}

// TestCoordinatorPublishesDescription: what Describe returns is on the replica's Lease
// and read by the others as the Description of the clusters it holds, also as it
// changes; a description longer than MaxDescription is not published.
func TestCoordinatorPublishesDescription(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 8)
	var desc atomic.Value
	desc.Store("first")
	r0 := startReplicaWith(t, client, w, "r0", clusters, w.aware("r0"), func(o *Options) {
		o.Describe = func() string { return desc.Load().(string) }
	})
	r1 := startReplicaWith(t, client, w, "r1", clusters, w.aware("r1"), func(o *Options) {
		o.Describe = func() string { return strings.Repeat("x", MaxDescription+1) }
	})
	ids := []string{"r0", "r1"}
	waitAssigned(t, w, clusters, ids, settle)
	if owners := slices.Collect(maps.Values(Assign(clusters, ids))); !slices.Contains(owners, "r0") || !slices.Contains(owners, "r1") {
		t.Fatalf("the test needs clusters on both replicas: %v", owners)
	}
	// described waits until every cluster placed on the other replica, as r sees it,
	// has the description want, and those it holds itself none.
	described := func(r *replica, want string) {
		t.Helper()
		deadline := time.Now().Add(settle)
		for {
			bad := ""
			for _, p := range r.coord.Placements() {
				wantHere := want
				if p.Holder == r.coord.Identity() {
					wantHere = ""
				}
				if p.Holder == "" || p.Description != wantHere {
					bad = fmt.Sprintf("%s places %s on %q with description %.20q, want %.20q", r.coord.Identity(), p.Cluster, p.Holder, p.Description, wantHere)
					break
				}
			}
			if bad == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal(bad)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	described(r1, "first")
	described(r0, "") // too long: not published
	desc.Store("second")
	described(r1, "second")
	l, err := client.CoordinationV1().Leases("fleetwatch").Get(t.Context(), ReplicaLeaseName("r1"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Annotations[DescriptionAnnotation]; ok {
		t.Errorf("r1's Lease has a description longer than MaxDescription")
	}
}

// newOnClock returns a Coordinator of replica id, on clk, not started: a test drives its
// rounds.
func newOnClock(t *testing.T, client *fake.Clientset, clk clock.WithTicker, w *watchers, id string) *Coordinator {
	t.Helper()
	opts := fastTiming
	opts.Identity, opts.Namespace, opts.Client, opts.Clock = id, "fleetwatch", client, clk
	c, err := New(opts, w.aware(id))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCoordinatorJudgesExpiryWhenItReads: a round that takes many clusters, one
// request each, may last longer than a Lease: a replica must not count another gone
// because the time since it last read that one's Lease has grown, only because it read
// it unchanged for LeaseDuration. Here r1's round takes free clusters, each write
// taking a second of the fake clock while r0 renews every other second; the last
// cluster of the round is held by r0, which r1 saw renew just before the round.
func TestCoordinatorJudgesExpiryWhenItReads(t *testing.T) {
	t.Parallel()
	client := newClient()
	clk := clocktesting.NewFakeClock(time.Now())
	w := &watchers{t: t, by: map[string]string{}}
	ctx := t.Context()
	r0, r1 := newOnClock(t, client, clk, w, "r0"), newOnClock(t, client, clk, w, "r1")
	// r1's share among both, in the order of its rounds; r0 holds the last.
	var share []string
	for _, name := range slices.Sorted(slices.Values(names("cluster", 60))) {
		if Owner(name, []string{"r0", "r1"}) == "r1" {
			share = append(share, name)
		}
	}
	held := share[len(share)-1]
	if !r0.renew(ctx) || r0.observe(ctx) != nil {
		t.Fatal("r0 does not join")
	}
	if err := r0.Engage(ctx, &cluster.Cluster{Name: held}); err != nil {
		t.Fatal(err)
	}
	r0.take(ctx, []string{held})
	if got := w.snapshot()[held]; got != "r0" {
		t.Fatalf("cluster %s is watched by %q, want r0", held, got)
	}

	for _, name := range share {
		if err := r1.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := client.CoordinationV1().Leases("fleetwatch").Get(ctx, ClusterLeaseName(held), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r1.storeClusterLease(l)
	if !r1.renew(ctx) || r1.observe(ctx) != nil {
		t.Fatal("r1 does not join")
	}
	// Each cluster Lease that r1 creates takes a second; r0 writes its Lease every other
	// one, straight in the tracker (a reactor cannot call the client).
	var slow atomic.Bool
	slow.Store(true)
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if !slow.Load() {
			return false, nil, nil
		}
		clk.Step(time.Second)
		if clk.Now().Unix()%2 == 0 { // r0 renews its Lease every other second
			gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
			obj, err := client.Tracker().Get(gvr, "fleetwatch", ReplicaLeaseName("r0"))
			if err != nil {
				return true, nil, err
			}
			own := obj.(*coordinationv1.Lease).DeepCopy()
			own.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now()}
			own.ResourceVersion = ""
			if err := client.Tracker().Update(gvr, own, "fleetwatch"); err != nil {
				return true, nil, err
			}
		}
		// Both renew, as their renewLoops would.
		for _, c := range []*Coordinator{r0, r1} {
			c.mu.Lock()
			c.lastRenew = clk.Now()
			c.mu.Unlock()
		}
		return false, nil, nil
	})
	r1.assign(ctx)
	slow.Store(false)
	if took := fastTiming.LeaseDuration; clk.Since(r1.observedAt) < took {
		t.Fatalf("r1's round took %v, less than a Lease (%v): the test proves nothing", clk.Since(r1.observedAt), took)
	}
	if got := w.snapshot()[held]; got != "r0" {
		t.Errorf("after a round longer than a Lease, cluster %s is watched by %q; r0, which renews, still holds it", held, got)
	}

	// Read again, r0's Lease has changed: r0 is live, and keeps the cluster until it
	// hands it over. Once r1 has read r0's Lease unchanged for LeaseDuration, it takes
	// the cluster, which r0, whose watchdog ran meanwhile, has stopped.
	if r1.observe(ctx) != nil {
		t.Fatal("r1 cannot read the Leases")
	}
	r1.assign(ctx)
	if got := w.snapshot()[held]; got != "r0" {
		t.Errorf("cluster %s is watched by %q, want r0", held, got)
	}
	for range 2 {
		clk.Step(fastTiming.LeaseDuration / 2)
		_ = r1.renew(ctx)
	}
	r0.checkRenewed(ctx)
	for w.snapshot()[held] == "r0" {
		time.Sleep(5 * time.Millisecond)
	}
	if !r1.renew(ctx) || r1.observe(ctx) != nil {
		t.Fatal("r1 cannot renew")
	}
	r1.assign(ctx)
	if got := w.snapshot()[held]; got != "r1" {
		t.Errorf("r0 gone, cluster %s is watched by %q, want r1", held, got)
	}
}

// TestCoordinatorWaitsForAHolderItHasNotRead: a cluster Lease seen held by a replica
// whose Lease this replica has not read since (it joined, or joined again, after the
// last read) does not make the cluster free: its holder is gone only once its Lease has
// been read unchanged, or missing, for LeaseDuration since the cluster Lease was seen.
func TestCoordinatorWaitsForAHolderItHasNotRead(t *testing.T) {
	t.Parallel()
	client := newClient()
	clk := clocktesting.NewFakeClock(time.Now())
	w := &watchers{t: t, by: map[string]string{}}
	ctx := t.Context()
	r0, r1 := newOnClock(t, client, clk, w, "r0"), newOnClock(t, client, clk, w, "r1")
	var name string
	for _, n := range names("cluster", 20) {
		if Owner(n, []string{"r0", "r1"}) == "r1" {
			name = n
			break
		}
	}
	for _, c := range []*Coordinator{r0, r1} {
		if err := c.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	// r0 joins and reads the replica Leases, alone; then r1 joins and takes the cluster.
	if !r0.renew(ctx) || r0.observe(ctx) != nil {
		t.Fatal("r0 does not join")
	}
	if !r1.renew(ctx) || r1.observe(ctx) != nil {
		t.Fatal("r1 does not join")
	}
	r1.assign(ctx)
	if got := w.snapshot()[name]; got != "r1" {
		t.Fatalf("cluster %s is watched by %q, want r1", name, got)
	}
	// r0's informer brings r1's cluster Lease before r0 reads the replica Leases again.
	l, err := client.CoordinationV1().Leases("fleetwatch").Get(ctx, ClusterLeaseName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r0.storeClusterLease(l)
	r0.assign(ctx) // r0 counts itself alone: the cluster is its own, if free.
	if got := w.snapshot()[name]; got != "r1" {
		t.Errorf("r0, which has not read r1's Lease, took cluster %s: watched by %q, want r1", name, got)
	}
	// Once r1's Lease has been read unchanged for LeaseDuration, r1 is gone, and r0
	// takes the cluster, which r1, whose watchdog ran meanwhile, has stopped.
	for range 3 {
		_ = r0.renew(ctx)
		if err := r0.observe(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Step(fastTiming.LeaseDuration / 2)
	}
	r1.checkRenewed(ctx)
	for w.snapshot()[name] == "r1" {
		time.Sleep(5 * time.Millisecond)
	}
	_ = r0.renew(ctx)
	if err := r0.observe(ctx); err != nil {
		t.Fatal(err)
	}
	r0.assign(ctx)
	if got := w.snapshot()[name]; got != "r0" {
		t.Errorf("r1 gone, cluster %s is watched by %q, want r0", name, got)
	}
}

// stallingAware is a recorder whose Engage of the cluster stall steps the fake clock by
// step, as a process starved of CPU, or an Engage that waits, lets time pass.
type stallingAware struct {
	*recorder
	clk   *clocktesting.FakeClock
	stall string
	step  time.Duration
}

func (a *stallingAware) Engage(ctx context.Context, c *cluster.Cluster) error {
	if c.Name == a.stall {
		a.clk.Step(a.step)
	}
	return a.recorder.Engage(ctx, c)
}

// TestCoordinatorFencesItself: a replica whose last renewal is older than
// RenewDeadline takes and engages nothing, and a cluster whose Engage outlasted it
// stops as Engage returns, with every other, whether or not its watchdog runs: the
// others may take its clusters LeaseDuration after its last renewal.
func TestCoordinatorFencesItself(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// writeStep is how much the fake clock moves at each cluster Lease created,
		// engageStep at the Engage of the last cluster.
		writeStep, engageStep time.Duration
	}{
		{name: "takes past the deadline", writeStep: time.Second},
		{name: "engage past the deadline", engageStep: fastTiming.RenewDeadline + time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := newClient()
			clk := clocktesting.NewFakeClock(time.Now())
			w := &watchers{t: t, by: map[string]string{}}
			ctx := t.Context()
			clusters := slices.Sorted(slices.Values(names("cluster", 8)))
			opts := fastTiming
			opts.Identity, opts.Namespace, opts.Client, opts.Clock = "r0", "fleetwatch", client, clk
			aware := &stallingAware{recorder: w.aware("r0"), clk: clk, stall: clusters[len(clusters)-1], step: tc.engageStep}
			r0, err := New(opts, aware)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range clusters {
				if err := r0.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			if !r0.renew(ctx) || r0.observe(ctx) != nil {
				t.Fatal("r0 does not join")
			}
			client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				clk.Step(tc.writeStep)
				return false, nil, nil
			})
			// The watchdog does not run: starved, it might run only once the others
			// have taken the clusters.
			r0.assign(ctx)
			time.Sleep(100 * time.Millisecond) // the recorder stops a cluster 20 ms after its context ends
			deadline := r0.lastRenew.Add(fastTiming.RenewDeadline)
			for name, by := range w.snapshot() {
				t.Errorf("cluster %s is still watched by %s, %v past its renew deadline", name, by, clk.Since(deadline))
			}
		})
	}
}

// TestCoordinatorDisengagesLostClustersBeforeReleasing: a replica that lost its Lease
// disengages every cluster it gave up before it releases any: the releases are
// requests to the home cluster, paced by the client's rate limit or failing slowly, and
// the others take the clusters LeaseDuration after the last renewal.
func TestCoordinatorDisengagesLostClustersBeforeReleasing(t *testing.T) {
	t.Parallel()
	client := newClient()
	clk := clocktesting.NewFakeClock(time.Now())
	w := &watchers{t: t, by: map[string]string{}}
	ctx := t.Context()
	opts := fastTiming
	opts.Identity, opts.Namespace, opts.Client, opts.Clock = "r0", "fleetwatch", client, clk
	aware := w.aware("r0")
	r0, err := New(opts, aware)
	if err != nil {
		t.Fatal(err)
	}
	clusters := names("cluster", 5)
	for _, name := range clusters {
		if err := r0.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if !r0.renew(ctx) || r0.observe(ctx) != nil {
		t.Fatal("r0 does not join")
	}
	r0.take(ctx, clusters)
	if got := len(w.snapshot()); got != len(clusters) {
		t.Fatalf("r0 watches %d clusters, want %d", got, len(clusters))
	}
	var releases, early atomic.Int32
	client.PrependReactor("get", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.HasPrefix(a.(k8stesting.GetAction).GetName(), clusterLeasePrefix) {
			releases.Add(1)
			w.mu.Lock()
			if len(aware.causes) < len(clusters) {
				early.Add(1)
			}
			w.mu.Unlock()
		}
		return false, nil, nil
	})
	clk.Step(fastTiming.RenewDeadline + time.Second)
	if r0.checkRenewed(ctx) {
		t.Fatal("r0 holds its Lease past its renew deadline")
	}
	r0.disengageLost(ctx)
	if releases.Load() != int32(len(clusters)) || early.Load() > 0 {
		t.Errorf("r0 released %d clusters, %d of them before it had disengaged every one; want %d, none early", releases.Load(), early.Load(), len(clusters))
	}
}

// stallingClient is a home cluster client whose Lease gets, creates and updates wait
// while stalled is set, as requests wait behind a rate limiter that hundreds of cluster
// Leases' requests saturate.
type stallingClient struct {
	kubernetes.Interface
	stalled *atomic.Bool
}

// IsWatchListSemanticsUnSupported is the fake clientset's: its watches send no initial
// events (cache.ToListWatcherWithWatchListSemantics).
func (c stallingClient) IsWatchListSemanticsUnSupported() bool { return true }

func (c stallingClient) CoordinationV1() coordinationclient.CoordinationV1Interface {
	return stallingCoordination{c.Interface.CoordinationV1(), c.stalled}
}

type stallingCoordination struct {
	coordinationclient.CoordinationV1Interface
	stalled *atomic.Bool
}

func (c stallingCoordination) Leases(namespace string) coordinationclient.LeaseInterface {
	return stallingLeases{c.CoordinationV1Interface.Leases(namespace), c.stalled}
}

type stallingLeases struct {
	coordinationclient.LeaseInterface
	stalled *atomic.Bool
}

func (l stallingLeases) wait(ctx context.Context) error {
	for l.stalled.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func (l stallingLeases) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l stallingLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l stallingLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if err := l.wait(ctx); err != nil {
		return nil, err
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// TestCoordinatorRenewsThroughItsOwnClient: with Options.RenewClient, a replica renews
// its Lease while the requests of its Client wait, for longer than RenewDeadline; it
// keeps its clusters. Without, its renewals wait with the rest, and it gives them up.
func TestCoordinatorRenewsThroughItsOwnClient(t *testing.T) {
	t.Parallel()
	for _, own := range []bool{true, false} {
		t.Run(fmt.Sprintf("renewClient=%v", own), func(t *testing.T) {
			t.Parallel()
			home := newClient()
			stalled := new(atomic.Bool)
			w := &watchers{t: t, by: map[string]string{}}
			clusters := names("cluster", 6)
			r := startReplicaWith(t, home, w, "r0", clusters, w.aware("r0"), func(o *Options) {
				o.Client = stallingClient{home, stalled}
				if own {
					o.RenewClient = home
				}
			})
			waitAssigned(t, w, clusters, []string{"r0"}, settle)
			stalled.Store(true)
			time.Sleep(fastTiming.RenewDeadline + 2*time.Second)
			watched := len(w.snapshot())
			stalled.Store(false)
			if own && watched != len(clusters) {
				t.Errorf("with its own renewal client, the replica watches %d of %d clusters while its Client stalls", watched, len(clusters))
			}
			if !own && watched != 0 {
				t.Errorf("without its own renewal client, the replica still watches %d clusters past its RenewDeadline", watched)
			}
			r.stop()
		})
	}
}

// createCounter is an Aware that records how many cluster Leases were created when it
// engaged its first cluster.
type createCounter struct {
	created *atomic.Int32
	mu      sync.Mutex
	atFirst int32
	engaged int
}

func (a *createCounter) Engage(context.Context, *cluster.Cluster) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.engaged == 0 {
		a.atFirst = a.created.Load()
	}
	a.engaged++
	return nil
}

// TestCoordinatorEngagesAsItTakes: a replica engages each cold cluster as soon as it has
// taken its Lease, not once it has taken them all: the clusters taken first sync while
// the others' Leases are written.
func TestCoordinatorEngagesAsItTakes(t *testing.T) {
	t.Parallel()
	client := newClient()
	created := new(atomic.Int32)
	client.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if l := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease); l.Labels[LeaseLabel] == LeaseCluster {
			created.Add(1)
		}
		return false, nil, nil
	})
	clusters := names("cluster", 20)
	aware := &createCounter{created: created}
	w := &watchers{t: t, by: map[string]string{}}
	startReplicaWith(t, client, w, "r0", clusters, aware, nil)
	for deadline := time.Now().Add(settle); ; time.Sleep(20 * time.Millisecond) {
		aware.mu.Lock()
		n := aware.engaged
		aware.mu.Unlock()
		if n == len(clusters) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d clusters engaged", n, len(clusters))
		}
	}
	aware.mu.Lock()
	defer aware.mu.Unlock()
	if aware.atFirst != 1 {
		t.Errorf("%d cluster Leases were created when the first cluster was engaged, want 1", aware.atFirst)
	}
}

// TestCoordinatorRestartKeepsItsClusters: a replica killed and started again with its
// identity (a kill -9, an OOM kill) waits for its earlier process's Lease to expire,
// as it must, but says it does (SuccessorAnnotation): the others leave its clusters to
// it instead of taking them cold at the same expiry and handing them back. A successor
// that dies too stops saying it, and the others take the clusters a Lease later.
func TestCoordinatorRestartKeepsItsClusters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// successorDies stops the successor once it has waited for half a Lease.
		successorDies bool
	}{
		{name: "comes back"},
		{name: "dies waiting", successorDies: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			client := newClient()
			clk := clocktesting.NewFakeClock(time.Now())
			w := &watchers{t: t, by: map[string]string{}}
			ctx := t.Context()
			clusters := names("cluster", 12)
			r0, r1 := newOnClock(t, client, clk, w, "r0"), newOnClock(t, client, clk, w, "r1")
			for _, c := range []*Coordinator{r0, r1} {
				for _, name := range clusters {
					if err := c.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
						t.Fatal(err)
					}
				}
				if !c.renew(ctx) {
					t.Fatal("a replica does not join")
				}
			}
			for _, c := range []*Coordinator{r0, r1} {
				if err := c.observe(ctx); err != nil {
					t.Fatal(err)
				}
				c.assign(ctx)
			}
			before := w.snapshot()
			var share []string
			for name, by := range before {
				if by == "r0" {
					share = append(share, name)
				}
			}
			if len(share) == 0 || len(before) != len(clusters) {
				t.Fatalf("r0 watches %v of %v", share, before)
			}
			// r0 is killed: its process renews and watches nothing from now on.
			w.mu.Lock()
			for _, name := range share {
				delete(w.by, name)
			}
			w.mu.Unlock()

			// The new process: r0's identity, its Aware named apart.
			opts := fastTiming
			opts.Identity, opts.Namespace, opts.Client, opts.Clock = "r0", "fleetwatch", client, clk
			succ, err := New(opts, w.aware("r0 again"))
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range clusters {
				if err := succ.Engage(ctx, &cluster.Cluster{Name: name}); err != nil {
					t.Fatal(err)
				}
			}
			// The cluster Leases, as each one's informer would bring them.
			informed := func(c *Coordinator) {
				ls, err := client.CoordinationV1().Leases("fleetwatch").List(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for i := range ls.Items {
					c.storeClusterLease(&ls.Items[i])
				}
			}
			informed(r1)
			killed := clk.Now()
			clk.Step(fastTiming.RetryPeriod) // the new process starts
			var joined time.Time
			for step := 0; clk.Since(killed) < 3*fastTiming.LeaseDuration; step++ {
				if !tc.successorDies || clk.Since(killed) < fastTiming.LeaseDuration/2 {
					if succ.renew(ctx) && joined.IsZero() {
						joined = clk.Now()
						informed(succ)
						if err := succ.observe(ctx); err != nil {
							t.Fatal(err)
						}
						succ.assign(ctx)
					}
				}
				informed(r1)
				if !r1.renew(ctx) || r1.observe(ctx) != nil {
					t.Fatal("r1 cannot renew")
				}
				r1.assign(ctx)
				if !tc.successorDies {
					for _, name := range share {
						if by := w.snapshot()[name]; by == "r1" {
							t.Fatalf("r1 took cluster %s of r0 %v after r0 was killed, while r0's successor waited for its Lease", name, clk.Since(killed))
						}
					}
				}
				clk.Step(fastTiming.RetryPeriod)
				time.Sleep(time.Millisecond) // the recorder stops a cluster as its context ends
			}
			want := "r0 again"
			if tc.successorDies {
				want = "r1"
				if !joined.IsZero() {
					t.Fatalf("the successor joined at %v, before it stopped", joined.Sub(killed))
				}
			} else {
				if joined.IsZero() {
					t.Fatal("the successor never joined")
				}
				if joined.Sub(killed) < fastTiming.LeaseDuration {
					t.Errorf("the successor joined %v after r0 was killed, before r0's Lease of %v expired", joined.Sub(killed), fastTiming.LeaseDuration)
				}
				l, err := client.CoordinationV1().Leases("fleetwatch").Get(ctx, ReplicaLeaseName("r0"), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if v, ok := l.Annotations[SuccessorAnnotation]; ok {
					t.Errorf("the successor holds its Lease with %s=%q still on it", SuccessorAnnotation, v)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for _, name := range share {
				for w.snapshot()[name] != want && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if by := w.snapshot()[name]; by != want {
					t.Errorf("cluster %s of r0 is watched by %q, want %q", name, by, want)
				}
			}
		})
	}
}
