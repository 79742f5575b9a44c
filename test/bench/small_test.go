package main

import (
	"strings"
	"testing"
)

// smallReport is fullReport with a small-pods section of two runs: typed informers at
// 1 s and 2 KiB per object, the plain fleet at 2 s and 3 KiB, the compact fleet and the
// daemon at 0.5 s and 0.5 KiB.
func smallReport() *report {
	rep := fullReport()
	rep.Options.smallPods = 100
	rep.SmallPod = objectSizes{Objects: 100, Served: 1500, Cached: 1000}
	res := func(synced float64, heapPerObject uint64) *Result {
		return &Result{Total: 300, SyncedSec: synced, CPUSyncSec: synced / 2, HeapAfterGC: 300 * heapPerObject, RSSAfterGC: 600 * heapPerObject, PeakRSS: 20 << 20}
	}
	for range 2 {
		rep.Small = append(rep.Small, &smallRun{Typed: res(1, 2048), Fleetwatch: res(2, 3072), Compact: res(0.5, 512), Serve: res(0.5, 1024)})
	}
	return rep
}

func TestMarkdownSmall(t *testing.T) {
	md := smallReport().markdown()
	for _, want := range []string{
		smallHeading,
		"3 clusters × 100 small pods (1500 B of JSON as served, 1000 B as cached)",
		"| Small pods, fleetwatch, plain fleet, vs typed informers + transform: cold sync (s) | 1.00 (1.00–1.00) | 2.00 (2.00–2.00) | 2.00, 2.00 | 2.00 | ≤ 1 | no |",
		"| Small pods, fleetwatch, plain fleet, vs typed informers + transform: heap per cached object after GC (KiB) | 2.00 (2.00–2.00) | 3.00 (3.00–3.00) | 1.50, 1.50 | 1.50 | ≤ 0.5 | no |",
		"| Small pods, `fleetwatch serve`, default cache.encoding, vs typed informers + transform: heap per cached object after GC (KiB) | 2.00 (2.00–2.00) | 1.00 (1.00–1.00) | 0.50, 0.50 | 0.50 | ≤ 0.5 | **yes** |",
		"| Small pods, `fleetwatch serve`, default cache.encoding, vs typed informers + transform: CPU time to synced (s) | 0.50 (0.50–0.50) | 0.25 (0.25–0.25) | 0.50, 0.50 | 0.50 | — | — |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no line with %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
	if only := smallReport().smallOnlyMarkdown(); !strings.Contains(only, "(--small-only)") || !strings.Contains(only, smallHeading) {
		t.Errorf("--small-only report:\n%s", only)
	}
}

// TestMissingSmallRows checks that --check catches a small-pods section that the report
// lacks, or a figure of it.
func TestMissingSmallRows(t *testing.T) {
	rep := smallReport()
	if missing := rep.missingRows(rep.markdown()); len(missing) > 0 {
		t.Fatalf("a full report lacks rows:\n%s", strings.Join(missing, "\n"))
	}
	row := "| Small pods, fleetwatch, compact fleet, vs typed informers + transform: cold sync (s) |"
	var kept []string
	for _, l := range strings.Split(rep.markdown(), "\n") {
		if !strings.HasPrefix(l, row) {
			kept = append(kept, l)
		}
	}
	if missing := rep.missingRows(strings.Join(kept, "\n")); len(missing) != 1 || missing[0] != row {
		t.Errorf("without the row %q, missing = %q", row, missing)
	}
	rep.Small = nil
	if missing := rep.missingRows(rep.markdown()); len(missing) != 16 || missing[0] != smallHeading {
		t.Errorf("without a small-pods section, missing = %q", missing)
	}
}
