package shard

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

func TestQuantize(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{-1, 1}, {0, 1}, {1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {1000, 1024}, {1024, 1024}, {1025, 2048},
		{maxCost + 1, maxCost},
	} {
		if got := Quantize(tc.n); got != tc.want {
			t.Errorf("Quantize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// TestRequantize: a published cost stays while the objects are within a quarter beyond
// its quantum, so that a cluster hovering at a power of 2 does not flap.
func TestRequantize(t *testing.T) {
	for _, tc := range []struct{ cost, n, want int64 }{
		{0, 1000, 1024},    // none published
		{1024, 600, 1024},  // within the quantum
		{1024, 1025, 1024}, // just above: kept
		{1024, 1280, 1024}, // a quarter above: kept
		{1024, 1281, 2048},
		{1024, 385, 1024}, // below the quantum, within a quarter of its lower bound
		{1024, 384, 512},
		{1024, 10, 16},
	} {
		if got := Requantize(tc.cost, tc.n); got != tc.want {
			t.Errorf("Requantize(%d, %d) = %d, want %d", tc.cost, tc.n, got, tc.want)
		}
	}
}

// skewedCosts is the fleet of BenchmarkPlacementSpread with its costs quantized: 1% of
// the clusters with 100,000 objects, 9% with 10,000, the rest 100 to 1,000.
func skewedCosts(n int) map[string]int64 {
	objects := unevenCosts(names("arn:aws:eks:eu-west-1:123456789012:cluster/prod", n))
	out := make(map[string]int64, len(objects))
	for c, o := range objects {
		out[c] = Quantize(int64(o))
	}
	return out
}

// loads sums the cost of each replica's clusters.
func loads(costs map[string]int64, owners map[string]string) map[string]int64 {
	out := map[string]int64{}
	for c, r := range owners {
		out[r] += costs[c]
	}
	return out
}

func TestAssignByCostIsDeterministic(t *testing.T) {
	costs := skewedCosts(2000)
	want := AssignByCost(costs, names("r", 7))
	reversed := names("r", 7)
	slices.Reverse(reversed)
	for i := range 3 {
		// A copy of the map iterates in another order.
		if got := AssignByCost(maps.Clone(costs), append(reversed, "r-3")); !maps.Equal(got, want) {
			t.Fatalf("try %d: another order of replicas or costs gave another placement", i)
		}
	}
	if got := AssignByCost(map[string]int64{"a": 3}, nil); got["a"] != "" || len(got) != 1 {
		t.Errorf("without replicas: %v, want a placed on \"\"", got)
	}
}

// TestAssignByCostBoundsLoad: on a skewed fleet, no replica carries more than 1.25 times
// the mean cost, where rendezvous hashing by count lets one carry far more.
func TestAssignByCostBoundsLoad(t *testing.T) {
	for _, tc := range []struct{ clusters, replicas int }{{1000, 3}, {3000, 10}, {10000, 20}} {
		t.Run(fmt.Sprintf("%d clusters over %d", tc.clusters, tc.replicas), func(t *testing.T) {
			costs := skewedCosts(tc.clusters)
			var total int64
			for _, c := range costs {
				total += c
			}
			mean := float64(total) / float64(tc.replicas)
			replicas := names("r", tc.replicas)
			most := func(owners map[string]string) float64 {
				return float64(slices.Max(slices.Collect(maps.Values(loads(costs, owners))))) / mean
			}
			weighted := AssignByCost(costs, replicas)
			if got := most(weighted); got > float64(LoadBoundNum)/LoadBoundDen {
				t.Errorf("the most loaded replica carries %.2f× the mean, want at most %.2f×", got, float64(LoadBoundNum)/LoadBoundDen)
			}
			counted := Assign(slices.Collect(maps.Keys(costs)), replicas)
			t.Logf("max/mean %.2f weighted, %.2f by count", most(weighted), most(counted))
			if len(loads(costs, weighted)) != tc.replicas {
				t.Errorf("%d replicas carry clusters, want %d", len(loads(costs, weighted)), tc.replicas)
			}
		})
	}
	// A cluster heavier than the bound goes to the least loaded replica.
	owners := AssignByCost(map[string]int64{"huge": 1000, "a": 1, "b": 1}, []string{"r0", "r1"})
	if owners["a"] == owners["huge"] || owners["b"] == owners["huge"] {
		t.Errorf("a cluster shares the replica of one over the bound: %v", owners)
	}
}

// moves counts the clusters whose owner differs, and their cost.
func moves(costs map[string]int64, before, after map[string]string) (clusters int, cost int64) {
	for c, b := range before {
		if after[c] != b {
			clusters++
			cost += costs[c]
		}
	}
	return clusters, cost
}

// TestAssignByCostMovesAboutOneNth: a change of membership moves about 1/N of the
// clusters and of the cost, as rendezvous hashing does, within a margin for the
// clusters that the bound sends on to their next replica.
func TestAssignByCostMovesAboutOneNth(t *testing.T) {
	costs := skewedCosts(10000)
	var total int64
	for _, c := range costs {
		total += c
	}
	for _, tc := range []struct {
		name          string
		before, after []string
	}{
		{"3 to 4", names("r", 3), names("r", 4)},
		{"4 to 3", names("r", 4), names("r", 3)},
		{"10 without r-2", names("r", 10), slices.Delete(names("r", 10), 2, 3)},
		{"19 to 20", names("r", 19), names("r", 20)},
		{"20 to 21", names("r", 20), names("r", 21)},
		{"20 without r-0", names("r", 20), names("r", 20)[1:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := float64(max(len(tc.before), len(tc.after)))
			clusters, cost := moves(costs, AssignByCost(costs, tc.before), AssignByCost(costs, tc.after))
			byCount := float64(clusters) / float64(len(costs)) * n
			byCost := float64(cost) / float64(total) * n
			t.Logf("moved %.2f/N of the clusters, %.2f/N of the cost", byCount, byCost)
			// Rendezvous hashing alone moves 1/N. The bound adds the clusters that now
			// overflow to another replica, mostly small ones (placed last, into what
			// room the large ones left): measured up to 1.9/N of the clusters and
			// 1.15/N of the cost at 20 replicas.
			if byCount > 2.5 || byCost > 1.4 {
				t.Errorf("moved %.2f/N of the clusters and %.2f/N of the cost, want at most 2.5/N and 1.4/N", byCount, byCost)
			}
		})
	}
}

// TestAssignByCostIsStableUnderCostChanges: objects that change within their quantum
// (and its hysteresis) change no published cost, so nothing moves; a cluster whose cost
// doubles moves itself and few others.
func TestAssignByCostIsStableUnderCostChanges(t *testing.T) {
	objects := unevenCosts(names("arn:aws:eks:eu-west-1:123456789012:cluster/prod", 10000))
	costs := skewedCosts(10000)
	replicas := names("r", 20)
	base := AssignByCost(costs, replicas)

	grown := maps.Clone(costs)
	for c, o := range objects {
		// Up to 20% more objects each: within the hysteresis of every cost.
		grown[c] = Requantize(costs[c], int64(o*1.2))
	}
	if n, _ := moves(costs, base, AssignByCost(grown, replicas)); n != 0 {
		t.Errorf("objects changed within their quanta moved %d clusters, want 0", n)
	}

	var moved []int
	for _, c := range slices.Sorted(maps.Keys(costs))[:60] {
		doubled := maps.Clone(costs)
		doubled[c] *= 2
		n, _ := moves(costs, base, AssignByCost(doubled, replicas))
		moved = append(moved, n)
	}
	slices.Sort(moved)
	mean := 0.0
	for _, n := range moved {
		mean += float64(n) / float64(len(moved))
	}
	t.Logf("a cost doubled moved %.1f clusters on average, %d at the median, %d at most, of %d", mean, moved[len(moved)/2], moved[len(moved)-1], len(costs))
	// 1/N of the fleet would be 500.
	if mean > 5 || moved[len(moved)-1] > 100 {
		t.Errorf("a cost doubled moved %.1f clusters on average and %d at most, want at most 5 and 100", mean, moved[len(moved)-1])
	}
}
