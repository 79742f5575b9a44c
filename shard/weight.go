package shard

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"strconv"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// Balance is what the placement of the clusters balances among the replicas (see
// Options.Balance).
type Balance string

const (
	// BalanceCount places by rendezvous hashing (Owner): each replica gets about as
	// many clusters, whatever they hold.
	BalanceCount Balance = "count"
	// BalanceObjects places by the clusters' objects (AssignByCost over the costs on
	// their Leases, CostAnnotation): each replica holds at most 1.25 times the mean.
	BalanceObjects Balance = "objects"
)

// validateBalance checks Options.Balance and Options.Cost.
func validateBalance(opts Options) []error {
	switch opts.Balance {
	case BalanceCount:
	case BalanceObjects:
		if opts.Cost == nil {
			return []error{fmt.Errorf("shard: Balance is %q, and Cost is nil", opts.Balance)}
		}
	default:
		return []error{fmt.Errorf("shard: Balance is %q, want %q or %q", opts.Balance, BalanceCount, BalanceObjects)}
	}
	return nil
}

// Load bound of AssignByCost: a cluster goes to its highest ranked replica whose load,
// the cluster's cost added, stays within LoadBoundNum/LoadBoundDen of the mean load
// (ε = 0.25). Integers, not a float, so that every replica, whatever its architecture,
// compares the same way. It is part of the contract between replicas: changing it
// changes BalanceObjects' placement, so a new value needs a new Balance.
const (
	LoadBoundNum = 5
	LoadBoundDen = 4
)

// maxCost caps a cost, so that the sums of AssignByCost cannot overflow: 2^40 objects
// is far beyond what one process holds.
const maxCost = 1 << 40

// Quantize returns the cost that n objects publish: the smallest power of 2 not below
// n, at least 1. A cluster's cost thus changes only when its objects cross a power of 2,
// not at every object created or deleted.
func Quantize(n int64) int64 {
	if n <= 1 {
		return 1
	}
	if n >= maxCost {
		return maxCost
	}
	return 1 << bits.Len64(uint64(n-1))
}

// Requantize returns the cost to publish for n objects when cost was published before
// (0 if none): cost again while n is within a quarter beyond its quantum's bounds,
// (3/8 cost, 5/4 cost], else Quantize(n). A cluster whose objects go up and down across
// a power of 2 thus does not change its cost, and its placement, at each crossing.
func Requantize(cost, n int64) int64 {
	if cost > 0 && n > cost*3/8 && n <= cost*5/4 {
		return cost
	}
	return Quantize(n)
}

// AssignByCost returns the owner of each cluster of costs among replicas, weighing each
// by its cost (a cost below 1 counts as 1): bounded-load rendezvous hashing. The
// clusters are taken by cost, the highest first (ties by name), and each goes to the
// replica of highest rendezvous weight (see Owner) whose load, with the cluster's cost
// added, stays within LoadBoundNum/LoadBoundDen of the total over len(replicas); if none
// can take it, to the least loaded (ties by rank). Every replica computes the same
// owners from the same costs and replicas, whatever the order of replicas or the
// iteration order of costs. With "" if replicas is empty.
//
// A replica thus carries at most 1.25 times the mean cost, but for a cluster that alone
// exceeds the bound. Most clusters go to the replica Owner gives them, the others to
// their next in rank: a change of membership moves about 1/N of the cost, and a
// cluster's cost changing moves that cluster and few others.
func AssignByCost(costs map[string]int64, replicas []string) map[string]string {
	replicas = slices.Compact(slices.Sorted(slices.Values(replicas)))
	out := make(map[string]string, len(costs))
	type item struct {
		name string
		cost int64
	}
	items := make([]item, 0, len(costs))
	var total int64
	for name, cost := range costs {
		cost = min(max(cost, 1), maxCost)
		items = append(items, item{name, cost})
		total += cost
	}
	if len(replicas) == 0 {
		for _, it := range items {
			out[it.name] = ""
		}
		return out
	}
	slices.SortFunc(items, func(a, b item) int {
		return cmp.Or(cmp.Compare(b.cost, a.cost), cmp.Compare(a.name, b.name))
	})
	n := int64(len(replicas))
	// fits reports whether load stays within the bound: load ≤ (5/4)·total/n, in
	// integers.
	fits := func(load int64) bool { return load*n*LoadBoundDen <= total*LoadBoundNum }
	load := make([]int64, len(replicas))
	weights := make([]uint64, len(replicas))
	rank := make([]int, len(replicas))
	for _, it := range items {
		best := 0
		for i, r := range replicas {
			weights[i] = weight(r, it.name)
			if weights[i] > weights[best] {
				best = i
			}
		}
		if !fits(load[best] + it.cost) {
			best = nextFit(weights, rank, load, it.cost, fits)
		}
		load[best] += it.cost
		out[it.name] = replicas[best]
	}
	return out
}

// nextFit returns the index of the replica of highest weight whose load with cost fits,
// or else the least loaded, ties going to the higher weight. rank is scratch space of
// len(weights). Ties of weight go to the lower index, as in Owner.
func nextFit(weights []uint64, rank []int, load []int64, cost int64, fits func(int64) bool) int {
	for i := range rank {
		rank[i] = i
	}
	slices.SortFunc(rank, func(a, b int) int { return cmp.Or(cmp.Compare(weights[b], weights[a]), cmp.Compare(a, b)) })
	for _, i := range rank {
		if fits(load[i] + cost) {
			return i
		}
	}
	least := rank[0]
	for _, i := range rank {
		if load[i] < load[least] {
			least = i
		}
	}
	return least
}

// placement is the owner of each selected cluster as last computed, and what it was
// computed from: it is computed again only when the members, the selected clusters or
// their costs change.
type placement struct {
	weighted bool
	members  []string
	// costs are the selected clusters' costs (all 1 unless weighted).
	costs  map[string]int64
	owners map[string]string
}

// ownersLocked returns the owner of each selected cluster among the members. The
// caller must not modify it. mu is held.
func (c *Coordinator) ownersLocked() map[string]string {
	weighted := c.weightedLocked()
	costs := make(map[string]int64, len(c.selected))
	for name := range c.selected {
		costs[name] = 1
		if weighted {
			costs[name] = leaseCost(c.clusterLeases[name])
		}
	}
	p := &c.placement
	if p.owners != nil && p.weighted == weighted && slices.Equal(p.members, c.members) && maps.Equal(p.costs, costs) {
		return p.owners
	}
	if p.owners != nil && p.weighted != weighted {
		klog.Background().Info("The replicas place the clusters by another measure", "replica", c.opts.Identity, "byObjects", weighted, "members", c.members)
	}
	var owners map[string]string
	if weighted {
		owners = AssignByCost(costs, c.members)
	} else {
		owners = make(map[string]string, len(costs))
		for name := range costs {
			owners[name] = Owner(name, c.members)
		}
	}
	*p = placement{weighted: weighted, members: slices.Clone(c.members), costs: costs, owners: owners}
	return owners
}

// weightedLocked reports whether the members place by objects: this replica and every
// other member publishes BalanceObjects. A member of an earlier release publishes
// nothing and places by count, and so do the others while it is a member. mu is held.
func (c *Coordinator) weightedLocked() bool {
	if c.opts.Balance != BalanceObjects {
		return false
	}
	for _, m := range c.members {
		if m == c.opts.Identity {
			continue
		}
		if o := c.peers[ReplicaLeaseName(m)]; o == nil || o.balance != string(BalanceObjects) {
			return false
		}
	}
	return true
}

// leaseCost is the cost published on the cluster Lease l (nil if none): 1 if none is,
// as for a cluster whose objects no holder knew yet.
func leaseCost(l *coordinationv1.Lease) int64 {
	if l == nil {
		return 1
	}
	if v, err := strconv.ParseInt(l.Annotations[CostAnnotation], 10, 64); err == nil && v > 0 {
		return v
	}
	return 1
}

// publishCosts writes on the Lease of each cluster this replica holds its cost
// (Options.Cost, Requantize), where it changed. In a steady fleet nothing changes and
// nothing is written; the write is conditional on the Lease's resourceVersion, so it
// never undoes another's, and a write that fails is tried at the next round.
func (c *Coordinator) publishCosts(ctx context.Context) {
	if c.opts.Balance != BalanceObjects {
		return
	}
	logger := klog.FromContext(ctx)
	c.mu.Lock()
	var held []string
	for name, o := range c.owned {
		l := c.clusterLeases[name]
		if !o.lost && l != nil && ptr.Deref(l.Spec.HolderIdentity, "") == c.opts.Identity {
			held = append(held, name)
		}
	}
	c.mu.Unlock()
	slices.Sort(held)
	for _, name := range held {
		if ctx.Err() != nil {
			return
		}
		objects, ok := c.opts.Cost(name)
		if !ok {
			continue
		}
		c.mu.Lock()
		l := c.clusterLeases[name]
		c.mu.Unlock()
		if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != c.opts.Identity {
			continue
		}
		var published int64
		if v, err := strconv.ParseInt(l.Annotations[CostAnnotation], 10, 64); err == nil {
			published = v
		}
		cost := Requantize(published, objects)
		if cost == published {
			continue
		}
		l = l.DeepCopy()
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[CostAnnotation] = strconv.FormatInt(cost, 10)
		wctx, cancel := context.WithTimeout(ctx, c.opts.RenewDeadline)
		updated, err := c.leases.Update(wctx, l, metav1.UpdateOptions{})
		cancel()
		if err != nil {
			logger.V(2).Info("Publishing the cluster's cost failed; trying again", "cluster", name, "err", err)
			continue
		}
		c.storeClusterLease(updated)
		logger.V(1).Info("Published the cluster's cost", "cluster", name, "objects", objects, "cost", cost, "was", published)
	}
}
