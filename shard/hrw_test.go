package shard

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func TestOwnerIgnoresOrder(t *testing.T) {
	a := []string{"r0", "r1", "r2", "r3"}
	b := []string{"r3", "r1", "r0", "r2"}
	for _, c := range names("cluster", 200) {
		if x, y := Owner(c, a), Owner(c, b); x != y {
			t.Fatalf("cluster %s: owner %s in one order, %s in another", c, x, y)
		}
	}
	if got := Owner("c", nil); got != "" {
		t.Errorf("Owner without replicas = %q, want empty", got)
	}
}

// TestAssignSpreadsEvenly: each replica gets close to 1/N of the clusters.
func TestAssignSpreadsEvenly(t *testing.T) {
	for _, tc := range []struct{ clusters, replicas int }{
		{2000, 2}, {2000, 3}, {3000, 5}, {5000, 10},
	} {
		t.Run(fmt.Sprintf("%d clusters over %d", tc.clusters, tc.replicas), func(t *testing.T) {
			count := map[string]int{}
			for _, owner := range Assign(names("arn:aws:eks:eu-west-1:123:cluster/prod", tc.clusters), names("fleetwatch", tc.replicas)) {
				count[owner]++
			}
			mean := float64(tc.clusters) / float64(tc.replicas)
			// A binomial count's standard deviation is below sqrt(mean); 5 of them is a
			// bound that a fair hash passes and a skewed one does not.
			slack := 5 * math.Sqrt(mean)
			for r, n := range count {
				if math.Abs(float64(n)-mean) > slack {
					t.Errorf("replica %s owns %d clusters, want %.0f ± %.0f", r, n, mean, slack)
				}
			}
			if len(count) != tc.replicas {
				t.Errorf("%d replicas own clusters, want %d", len(count), tc.replicas)
			}
		})
	}
}

// TestAssignMovesOnlyWhatMust: a change of membership moves only the clusters of the
// replica that left, or those that the replica that joined takes, about 1/N.
func TestAssignMovesOnlyWhatMust(t *testing.T) {
	clusters := names("cluster", 3000)
	for _, tc := range []struct {
		name          string
		before, after []string
	}{
		{"3 to 4", names("r", 3), names("r", 4)},
		{"4 to 3", names("r", 4), names("r", 3)},
		{"4 to 2", names("r", 4), names("r", 2)},
		{"5 without r-2", names("r", 5), []string{"r-0", "r-1", "r-3", "r-4"}},
		{"9 to 10", names("r", 9), names("r", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := Assign(clusters, tc.before), Assign(clusters, tc.after)
			moved := 0
			for _, c := range clusters {
				b, a := before[c], after[c]
				if b == a {
					continue
				}
				moved++
				// A cluster moves only if its owner left, or to a replica that joined.
				if slices.Contains(tc.after, b) && slices.Contains(tc.before, a) {
					t.Errorf("cluster %s moved from %s to %s, though both were there before and after", c, b, a)
				}
			}
			// The clusters that must move: those of the replicas that left, plus 1/N of
			// the rest for each that joined.
			var want float64
			switch {
			case len(tc.after) > len(tc.before):
				want = float64(len(clusters)) * float64(len(tc.after)-len(tc.before)) / float64(len(tc.after))
			default:
				want = float64(len(clusters)) * float64(len(tc.before)-len(tc.after)) / float64(len(tc.before))
			}
			if slack := 5 * math.Sqrt(want); math.Abs(float64(moved)-want) > slack {
				t.Errorf("%d of %d clusters moved, want %.0f ± %.0f", moved, len(clusters), want, slack)
			}
		})
	}
}
