package shard

import (
	"cmp"
	"math/bits"
	"slices"
)

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
