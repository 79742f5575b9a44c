package main

import (
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
			TypedList: listCounters{Objects: 200}, ColdList: listCounters{Objects: 200, Others: 40}, WarmList: listCounters{Others: 41}},
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
