package shard

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// objectCounts is what the Awares of a test hold of each cluster, as Options.Cost
// reports it.
type objectCounts struct {
	mu sync.Mutex
	n  map[string]int64
}

func (o *objectCounts) set(cluster string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[cluster] = n
}

func (o *objectCounts) cost(cluster string) (int64, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, ok := o.n[cluster]
	return n, ok
}

// byObjects sets the options of a replica that places by objects.
func byObjects(objects *objectCounts) func(*Options) {
	return func(o *Options) {
		o.Balance = BalanceObjects
		o.Cost = objects.cost
	}
}

// waitPlaced waits until each cluster is watched by the owner want returns.
func waitPlaced(t *testing.T, w *watchers, clusters []string, want func() map[string]string) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		got, owners := w.snapshot(), want()
		bad := ""
		for _, c := range clusters {
			if got[c] != owners[c] {
				bad = fmt.Sprintf("cluster %s is watched by %q, want %q", c, got[c], owners[c])
				break
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", settle, bad)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publishedCosts reads the costs on the cluster Leases.
func publishedCosts(t *testing.T, client *fake.Clientset, clusters []string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, c := range clusters {
		l, err := client.CoordinationV1().Leases("fleetwatch").Get(t.Context(), ClusterLeaseName(c), metav1.GetOptions{})
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(l.Annotations[CostAnnotation], 10, 64); err == nil {
			out[c] = v
		}
	}
	return out
}

// costWrites counts the updates of cluster Leases that changed their cost.
func costWrites(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok || a.GetVerb() != "update" {
			continue
		}
		if l, ok := u.GetObject().(*coordinationv1.Lease); ok && strings.HasPrefix(l.Name, clusterLeasePrefix) && l.Spec.HolderIdentity != nil && l.Annotations[CostAnnotation] != "" {
			n++
		}
	}
	return n
}

// TestCoordinatorsPlaceByObjects: replicas with BalanceObjects publish each cluster's
// cost on its Lease once they know its objects, place the clusters by those costs, and
// write again only when a cost leaves its quantum; a member that places by count (an
// earlier release) makes every replica place by count while it is there.
func TestCoordinatorsPlaceByObjects(t *testing.T) {
	t.Parallel()
	client := newClient()
	w := &watchers{t: t, by: map[string]string{}}
	clusters := names("cluster", 12)
	objects := &objectCounts{n: map[string]int64{}}
	for i, c := range clusters {
		// Two heavy clusters among light ones.
		n := int64(100 + 10*i)
		if i < 2 {
			n = 5000
		}
		objects.set(c, n)
	}
	// Replicas 2: without it, the first replica may take the clusters of the second,
	// whose Lease it has not seen yet, as expired (the overlap that BenchmarkFleet
	// found, with either Balance).
	together := func(o *Options) { byObjects(objects)(o); o.Replicas = 2 }
	startReplicaWith(t, client, w, "r0", clusters, w.aware("r0"), together)
	startReplicaWith(t, client, w, "r1", clusters, w.aware("r1"), together)
	ids := []string{"r0", "r1"}
	wantCosts := func() map[string]int64 {
		out := map[string]int64{}
		for _, c := range clusters {
			n, _ := objects.cost(c)
			out[c] = Quantize(n)
		}
		return out
	}
	waitPlaced(t, w, clusters, func() map[string]string { return AssignByCost(wantCosts(), ids) })
	if got := publishedCosts(t, client, clusters); !maps.Equal(got, wantCosts()) {
		t.Fatalf("published costs %v, want %v", got, wantCosts())
	}

	// Objects that change within their quanta write nothing.
	before := costWrites(client)
	for _, c := range clusters {
		n, _ := objects.cost(c)
		objects.set(c, n*9/8)
	}
	time.Sleep(8 * fastTiming.RetryPeriod)
	if after := costWrites(client); after != before {
		t.Errorf("objects within their quanta wrote %d costs, want 0", after-before)
	}

	// A cluster whose objects quadruple publishes its new cost, and the placement follows.
	objects.set(clusters[5], 4000)
	for deadline := time.Now().Add(settle); publishedCosts(t, client, clusters)[clusters[5]] != 4096; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("cost of %s is %d after its objects grew to 4000, want 4096", clusters[5], publishedCosts(t, client, clusters)[clusters[5]])
		}
	}
	waitPlaced(t, w, clusters, func() map[string]string { return AssignByCost(publishedCosts(t, client, clusters), ids) })
	if got := costWrites(client) - before; got < 1 || got > 2 {
		t.Errorf("one cost changed and %d were written, want 1 (2 if its Lease moved in between)", got)
	}

	// A member that places by count: everyone does, until it leaves.
	r2 := startReplicaWith(t, client, w, "r2", clusters, w.aware("r2"), nil)
	waitAssigned(t, w, clusters, []string{"r0", "r1", "r2"}, settle)
	r2.stop()
	waitPlaced(t, w, clusters, func() map[string]string { return AssignByCost(publishedCosts(t, client, clusters), ids) })
}

func TestNewValidatesBalance(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*Options)
		want string
	}{
		{"unknown", func(o *Options) { o.Balance = "bytes" }, `Balance is "bytes", want "count" or "objects"`},
		{"objects without cost", func(o *Options) { o.Balance = BalanceObjects }, `Balance is "objects", and Cost is nil`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Identity: "r0", Namespace: "fleetwatch", Client: fake.NewClientset()}
			tc.set(&opts)
			_, err := New(opts, &recorder{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
