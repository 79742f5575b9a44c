package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestManyPodsPerAPIServer(t *testing.T) {
	for _, tc := range []struct{ contexts, pods int }{
		{1, 20}, {10, 20}, {100, 20}, {1000, 20}, {1500, 20}, {1501, 19}, {3000, 10}, {10000, 3}, {30000, 1}, {100000, 1},
	} {
		if got := manyPodsPerAPIServer(tc.contexts); got != tc.pods {
			t.Errorf("manyPodsPerAPIServer(%d) = %d, want %d", tc.contexts, got, tc.pods)
		}
	}
}

// manyReport is fullReport with a many-clusters section of two rows: 10 contexts, every
// contender synced; 10,000, where fleetwatch did not sync in time and no warm run
// followed.
func manyReport() *report {
	rep := fullReport()
	rep.Options.many = []int{10, 10000}
	rep.ManyPod = objectSizes{Objects: 20, Served: 1500, Cached: 1024}
	res := func(synced float64, rss uint64, goroutines int) *Result {
		return &Result{Total: 200, SyncedSec: synced, RSSAfterGC: rss << 20, PeakRSS: 2 * rss << 20, Goroutines: goroutines}
	}
	rep.Many = []manyResult{
		{Contexts: 10, PodsPerAPIServer: 20, Objects: 200, Typed: res(1, 40, 100), Cold: res(2, 20, 150), Warm: res(0.5, 20, 140),
			TypedList: listCounters{Objects: 200}, ColdList: listCounters{Objects: 200, Others: 40}, WarmList: listCounters{Others: 41},
			TypedRuns: []float64{1.2, 1, 0.9}, ColdRuns: []float64{2, 2.5, 1.5}, WarmRuns: []float64{0.5, 0.4, 0.7}},
		{Contexts: 10000, PodsPerAPIServer: 3, Objects: 30000, Typed: res(100, 3000, 40000),
			Cold:      &Result{Total: 12000, NotSyncedSec: 900.2, RSSAfterGC: 500 << 20, PeakRSS: 600 << 20, Goroutines: 10000},
			TypedList: listCounters{Objects: 30000}, ColdList: listCounters{Objects: 12000, Others: 30000}},
	}
	return rep
}

func TestMarkdownMany(t *testing.T) {
	md := manyReport().markdown()
	for _, want := range []string{
		"### Many clusters: contexts over 3 apiservers",
		// RSS beyond objects: (20 MiB − 200 × 1 KiB) / 10 = 2028.8 KiB; (40 MiB − 200 KiB) / 10.
		// Beyond the first row: (500 MiB − 20 MiB − 29,800 KiB) / 9,990 = 46.2 KiB;
		// (3,000 MiB − 40 MiB − 29,800 KiB) / 9,990 = 300.4 KiB.
		"| 10 | 20 | 200 | 1.00 / 40 (80) | 2.00 / 20 (40) | 0.50 / 20 (40) | 2.00, 0.50 | 0.25 | 15.0, 10.0 | 2028, 4076 | —, — | 4.0, 4.1, 0.0 | 0 |",
		"| 10000 | 3 | 30000 | 100.00 / 3000 (6000) | not synced in 900 s (12000 objects) / 500 (600) | — | —, — | — | 1.0, 4.0 | 48, 304 | 46, 300 | 3.0, —, 0.0 | — |",
		"| 10000 | fleetwatch serve, cold | not synced in 900 s | 12000 |",
		"| 10 | typed informers | 1.00 (runs: 1.20, 1.00, 0.90) | 200 |",
		"| 10 | fleetwatch serve, warm | 0.50 (runs: 0.50, 0.40, 0.70) | 200 |",
		"| 10000 | fleetwatch serve, warm | skipped: the cold run did not sync |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no line with %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
	if only := manyReport().manyOnlyMarkdown(); !strings.Contains(only, "(--many-only)") || !strings.Contains(only, "| 10 | 20 | 200 |") {
		t.Errorf("--many-only report:\n%s", only)
	}
}

// TestMedianRun: the run of median synced time is the row's, a run that did not sync
// counting for the time it waited.
func TestMedianRun(t *testing.T) {
	run := func(synced, notSynced float64) manyRun {
		return manyRun{res: &Result{SyncedSec: synced, NotSyncedSec: notSynced}, list: listCounters{Objects: synced}}
	}
	for _, tc := range []struct {
		runs       []manyRun
		want       float64
		wantRuns   []float64
		wantListed float64
	}{
		{nil, -1, nil, 0},
		{[]manyRun{run(2, 0)}, 2, nil, 2},
		{[]manyRun{run(3, 0), run(1, 0), run(2, 0)}, 2, []float64{3, 1, 2}, 2},
		{[]manyRun{run(3, 0), run(1, 0)}, 3, []float64{3, 1}, 3},
		{[]manyRun{run(0, 900), run(1, 0), run(2, 0)}, 2, []float64{900, 1, 2}, 2},
	} {
		res, list, runs := medianRun(tc.runs)
		got := -1.0
		if res != nil {
			got = res.SyncedSec
		}
		if got != tc.want || list.Objects != tc.wantListed || fmt.Sprint(runs) != fmt.Sprint(tc.wantRuns) {
			t.Errorf("medianRun(%d runs) = %v, %v, %v; want %v, %v, %v", len(tc.runs), got, list.Objects, runs, tc.want, tc.wantListed, tc.wantRuns)
		}
	}
}

// TestMissingManyRows checks that --check catches a row of --many that the report
// lacks.
func TestMissingManyRows(t *testing.T) {
	rep := manyReport()
	if missing := rep.missingRows(rep.markdown()); len(missing) > 0 {
		t.Fatalf("a full report lacks rows:\n%s", strings.Join(missing, "\n"))
	}
	rep.Many = rep.Many[:1]
	missing := rep.missingRows(rep.markdown())
	if len(missing) != 1 || missing[0] != "| 10000 | 3 | 30000 |" {
		t.Errorf("without the row of 10000 contexts, missing = %q", missing)
	}
	rep.Many = nil
	if missing := rep.missingRows(rep.markdown()); len(missing) != 3 {
		t.Errorf("without a many-clusters section, missing = %q", missing)
	}
}

func TestHandovers(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after map[string]int32
		want          int
	}{
		{"created once each", nil, map[string]int32{"a": 0, "b": 0}, 0},
		{"created, then taken by another", nil, map[string]int32{"a": 1, "b": 0}, 1},
		{"taken again after a release", map[string]int32{"a": 3, "b": 0}, map[string]int32{"a": 4, "b": 1}, 0},
		{"taken twice after a release", map[string]int32{"a": 3}, map[string]int32{"a": 5}, 1},
		{"kept by its holder", map[string]int32{"a": 3}, map[string]int32{"a": 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handovers(tc.before, tc.after); got != tc.want {
				t.Errorf("handovers(%v, %v) = %d, want %d", tc.before, tc.after, got, tc.want)
			}
		})
	}
}

func TestLeaseRates(t *testing.T) {
	l := leaseCounters{Reads: 180, Writes: 96, Listed: 270, WatchEvents: 12}
	if got, want := l.rates(60), "3.0 reads/s (4 Leases listed/s), 1.6 writes/s, 0 watch events/s"; got != want {
		t.Errorf("rates = %q, want %q", got, want)
	}
}

func TestSettleKind(t *testing.T) {
	for reason, want := range map[string]string{
		`fleetwatch-0 says ctx-07 is Remote by "fleetwatch-1"`:     `fleetwatch-0 says a cluster is Remote by "fleetwatch-1"`,
		"fleetwatch-2 /readyz: 503 not ready: 12 clusters syncing": "fleetwatch-2 /readyz: 503",
		"fleetwatch-1 lists 999 clusters":                          "fleetwatch-1 lists 999",
	} {
		if got := settleKind(reason); got != want {
			t.Errorf("settleKind(%q) = %q, want %q", reason, got, want)
		}
	}
}

// manyShardsReport is manyReport with a sharded row of 3 replicas at 10 contexts.
func manyShardsReport() *report {
	rep := manyReport()
	rep.Options.manyShards = 3
	replicas := func(rss ...uint64) []replicaFigures {
		var out []replicaFigures
		for i, r := range rss {
			out = append(out, replicaFigures{ID: fmt.Sprintf("fleetwatch-%d", i), Clusters: 3 + i, CPUSec: 1, PeakRSS: 2 * r << 20,
				IdleSec: 1, HeapAfterGC: r << 19, RSSAfterGC: r << 20, Goroutines: 50})
		}
		return out
	}
	rep.Many[0].Sharded = &manyShardResult{Replicas: 3,
		Cold: &manyShardStart{Seconds: 2, Replicas: replicas(10, 12, 14), Lists: listCounters{Objects: 200},
			Leases: leaseCounters{Reads: 8, Writes: 20, Listed: 6, WatchEvents: 30}},
		Warm:   &manyShardStart{Seconds: 1, Replicas: replicas(11, 12, 13), Leases: leaseCounters{Reads: 6, Writes: 10, Listed: 36, WatchEvents: 60}, Handovers: 1},
		Steady: leaseCounters{Reads: 180, Writes: 96, Listed: 270}, SteadySec: 60}
	return rep
}

func TestMarkdownManyShards(t *testing.T) {
	md := manyShardsReport().markdown()
	for _, want := range []string{
		"#### Many clusters, sharded",
		// RSS summed 36 MiB against the cold daemon's 20 MiB; Lease rates over the
		// start's 2 s and the steady state's 60 s.
		"| 10 | 200 | 3 | 2.00 | 3–5 | 200 (1.00) | 0 | 10–14 | 36 / 1.80 | 4.0, 10.0 | 3.0, 1.6 | 1.00 | 0 | 1 |",
		"| 10 | together | fleetwatch-2 | 5 | 1.00 | 28 | 1.0 | 7 | 14 | 50 |",
		"| 10 | restart | fleetwatch-0 | 3 |",
		"| 10 | steady state | 60.0 | 180 | 96 | 270 | 0 | 3.0 reads/s (4 Leases listed/s), 1.6 writes/s, 0 watch events/s |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no line with %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
	rep := manyShardsReport()
	if missing := rep.missingRows(rep.markdown()); len(missing) > 0 {
		t.Fatalf("a full report lacks rows:\n%s", strings.Join(missing, "\n"))
	}
	rep.Many[0].Sharded = nil
	if missing := rep.missingRows(rep.markdown()); len(missing) != 1 || missing[0] != "| 10 | 200 | 3 |" {
		t.Errorf("without the sharded row, missing = %q", missing)
	}
	rep = manyShardsReport()
	rep.Many[0].Sharded = &manyShardResult{Replicas: 3, Error: "not settled"}
	if md := rep.markdown(); !strings.Contains(md, "| 10 | 200 | 3 | failed: not settled |") {
		t.Errorf("a failed row is not in the report:\n%s", md)
	}
}
