package main

import (
	"math"
	"strings"
	"testing"
)

// TestMarkdownPeers checks that the report has a row for every contender of the sync
// phase and every figure against the strongest peers, with the ratio to that peer.
func TestMarkdownPeers(t *testing.T) {
	res := func(impl string, synced float64, heap uint64) *Result {
		return &Result{Impl: impl, Total: 100, SyncedSec: synced, HeapAfterGC: heap, RSSAfterGC: 2 * heap, PeakRSS: 3 * heap,
			InitialEvents: 100, FirstEventSec: 0.1, LastInitialEventSec: synced}
	}
	rr := &runResult{
		ClientGo: res(implClientGo, 4, 4000<<10), ClientGoStripped: res(implClientGoStripped, 3, 3000<<10),
		ClientGoTyped: res(implClientGoTyped, 1, 1000<<10), ClientGoMetadata: res(implClientGoMetadata, 0.5, 100<<10),
		Fleetwatch: res(implFleetwatch, 2, 500<<10), Metadata: res(implFleetwatch, 0.25, 200<<10), Compact: res(implFleetwatch, 2, 250<<10),
		Serve: res("serve-objects", 3, 600<<10), ServeCompact: res("serve-compact", 3, 300<<10),
		Compressed: res(implFleetwatch, 2, 200<<10), ServeCompressed: res("serve-compressed", 3, 250<<10), MetadataCompact: res(implFleetwatch, 0.2, 100<<10),
		SnapCold: res(implFleetwatch, 2, 500<<10), Warm: res(implFleetwatch, 0.2, 500<<10), CatchUp: res(implFleetwatch, 0.3, 500<<10),
	}
	md := (&report{Runs: []*runResult{rr}}).markdown()
	for _, want := range []string{
		"| client-go typed informers + the same transform | 100 | 1.00 | 1.00 |",
		"| fleetwatch, full objects | 100 | 2.00 | 2.00 |",
		"| fleetwatch, metadata-only | 100 | 0.25 | 0.50 |",
		"| `fleetwatch serve`, full objects, cache.encoding objects | 100 | 3.00 | 3.00 |",
		"| `fleetwatch serve`, full objects, cache.encoding compact | 100 | 3.00 | 3.00 |",
		"| `fleetwatch serve`, cache.encoding compact, vs typed informers + transform: heap per cached object after GC (KiB) | 10.00 | 3.00 | 0.30 | 0.30 | ≤ 0.5 | **yes** |",
		"| client-go dynamic informers | 100 | 4.00 | 4.00 |",
		"| Full objects, vs typed informers + transform: heap per cached object after GC (KiB) | 10.00 | 5.00 | 0.50 | 0.50 | ≤ 0.5 | **yes** |",
		"| Metadata-only, vs metadatainformer + transform: heap per cached object after GC (KiB) | 1.00 | 2.00 | 2.00 | 2.00 | ≤ 0.7 | no |",
		"| Full objects, vs typed informers + transform: cold sync (s) | 1.00 | 2.00 | 2.00 | 2.00 | ≤ 1 | no |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no line with %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

// fullReport is a report of two runs with every contender, a watch phase and two scale
// rows, as the harness fills it.
func fullReport() *report {
	res := func(impl string) *Result {
		return &Result{Impl: impl, Total: 100, SyncedSec: 1, HeapAfterGC: 1 << 20, RSSAfterGC: 2 << 20, PeakRSS: 3 << 20,
			InitialEvents: 100, FirstEventSec: 0.1, LastInitialEventSec: 0.9}
	}
	watch := func(impl string) *Result {
		r := res(impl)
		r.Events, r.Stamped, r.Expected, r.WindowSec, r.CPUWindowSec = 10, 10, 10, 5, 0.01
		r.LatenciesMs = []float64{1, 2, 3}
		return r
	}
	mcr := func(provider string, warm, compact bool) *mcrResult {
		return &mcrResult{Provider: provider, Warm: warm, Compact: compact, Expected: 30, FirstSec: 0.1, AllSec: 0.5,
			HeapAfterGC: 1 << 20, RSSAfterGC: 2 << 20, PeakRSS: 3 << 20}
	}
	few := func(provider string, warm bool) *mcrResult {
		r := mcr(provider, warm, provider == mcrFleetwatch)
		r.Expected, r.HeapAfterGC, r.RSSAfterGC = 3, 1<<19, 1<<20
		return r
	}
	rep := &report{Options: driverOptions{pods: 100, configMaps: 10, clusters: 3, runs: 2, writeRate: 2, controllers: true}}
	for range 2 {
		warm, catchUp := res(implFleetwatch), res(implFleetwatch)
		warm.LoadedSec, warm.LoadedObjects = 0.1, 100
		catchUp.LoadedSec, catchUp.LoadedObjects = 0.1, 100
		catchUp.CaughtUpSec, catchUp.Stamped, catchUp.Expected = 0.5, 10, 10
		rep.Runs = append(rep.Runs, &runResult{
			ClientGo: res(implClientGo), ClientGoStripped: res(implClientGoStripped), ClientGoTyped: res(implClientGoTyped),
			ClientGoMetadata: res(implClientGoMetadata), Fleetwatch: res(implFleetwatch), Metadata: res(implFleetwatch), Compact: res(implFleetwatch),
			Serve: res("serve-objects"), ServeCompact: res("serve-compact"), Compressed: res(implFleetwatch), ServeCompressed: res("serve-compressed"), MetadataCompact: res(implFleetwatch),
			SnapCold: res(implFleetwatch), Warm: warm, CatchUp: catchUp,
			Encoded:      map[string]resourceSize{"/v1/pods": {Objects: 300, Bytes: 300 << 10}},
			ClientGoList: listCounters{InitEvents: 100}, CatchUpList: listCounters{InitEvents: 10},
			CatchUpResume: []resumeProbe{{Cluster: "cluster-1", Resource: "pods", ResourceVersion: "7", Resumes: true}},
			ClientGoWatch: watch(implClientGo), FleetwatchWatch: watch(implFleetwatch), SnapWatch: watch(implFleetwatch), CompactWatch: watch(implFleetwatch),
			ClientGoTypedWatch: watch(implClientGoTyped), HistoryWatch: watch(implFleetwatch), ServeWatch: watch("serve"),
			WatchLists:    map[string]listCounters{},
			MCRKubeconfig: mcr(mcrKubeconfig, false, false),
			MCRFleetwatch: mcr(mcrFleetwatch, false, false), MCRFleetwatchWarm: mcr(mcrFleetwatch, true, false),
			MCRCompact: mcr(mcrFleetwatch, false, true), MCRCompactWarm: mcr(mcrFleetwatch, true, true),
			MCRCompressed: mcr(mcrFleetwatch, false, true), MCRCompressedWarm: mcr(mcrFleetwatch, true, true),
			MCRPodsKubeconfig: mcr(mcrKubeconfig, false, false),
			MCRPodsCompressed: mcr(mcrFleetwatch, false, true), MCRPodsCompressedWarm: mcr(mcrFleetwatch, true, true),
			MCRKubeconfigFew: few(mcrKubeconfig, false), MCRCompressedFew: few(mcrFleetwatch, false), MCRCompressedFewWarm: few(mcrFleetwatch, true),
		})
	}
	for _, n := range []int{1, 6} {
		rep.Scale = append(rep.Scale, scaleResult{Contexts: n, ClientGo: res(implClientGo), Fleetwatch: &Result{Total: 100 * n, SyncedSec: 1, HeapAfterGC: 1 << 20}})
	}
	rep.Shards = &shardResult{Replicas: 3, Clusters: 3,
		Warm:       []moveResult{{From: 2, To: 3, Moved: 1, Seconds: 1}, {From: 3, To: 2, Moved: 1, Seconds: 0.5}},
		Cold:       []moveResult{{From: 2, To: 3, Moved: 1, Seconds: 2, Lists: listCounters{Objects: 400}}, {From: 3, To: 2, Moved: 1, Seconds: 2, Lists: listCounters{Objects: 400}}},
		FanoutPage: []float64{0.002, 0.004}, FanoutFull: []float64{0.1, 0.2}, SinglePage: []float64{0.001, 0.002}, SingleFull: []float64{0.05, 0.1}}
	return rep
}

// TestMarkdownShards checks the sharded table's rows: the moves with the warm handover
// against the same moves without it, the fan-out lists against a single replica.
func TestMarkdownShards(t *testing.T) {
	md := fullReport().markdown()
	for _, want := range []string{
		"| rebalance 2 → 3 replicas, 1 of 3 clusters moved (s) | 2.00 | 1.00 | 0.50 |",
		"| rebalance 3 → 2 replicas, 1 of 3 clusters moved (s) | 2.00 | 0.50 | 0.25 |",
		"| objects re-sent by the apiservers, 2 → 3 replicas | 400 | 0 | 0 |",
		"| fan-out list, a page of 500 pods, p50 (ms) | 1.0 | 2.0 | 2.00 |",
		"| fan-out list, all pods, p99 (ms) | 100.0 | 200.0 | 2.00 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no line with %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}

// TestMissingRows checks the smoke test's check (--check): a full report has every row,
// and one without a row, or with a value not measured, is caught.
func TestMissingRows(t *testing.T) {
	rep := fullReport()
	md := rep.markdown()
	if missing := rep.missingRows(md); len(missing) > 0 {
		t.Fatalf("a full report lacks rows:\n%s\n\n%s", strings.Join(missing, "\n"), md)
	}
	for _, tc := range []struct {
		name, row string
	}{
		{"a figure", "| Full objects, vs typed informers + transform: cold sync (s) |"},
		{"a contender of a run", "| 2 | fleetwatch metadata-only |"},
		{"the daemon of a run", "| 1 | fleetwatch serve, cache.encoding compact |"},
		{"a restart of a run", "| 2 | fleetwatch + snapshot, warm after changes ("},
		{"a scale", "| 6 | 600 |"},
		{"a watch contender", "| 1 | fleetwatch + snapshot (fresh file) |"},
		{"the change log's watch contender", "| 2 | fleetwatch + snapshot + change log (fresh file) |"},
		{"the change log's figure", "| CPU per event at 2 writes/s (µs): change log on / off (both with a snapshot) |"},
		{"the restarts' lists", "| 1 | 100 / "},
		{"a sharded move", "| objects re-sent by the apiservers, 3 → 2 replicas |"},
		{"a fan-out list", "| fan-out list, all pods, p99 (ms) |"},
		{"a controller figure", "| Heap per ConfigMap after GC, every one reconciled, warm (KiB) |"},
		{"a compact controller figure", "| Compact fleet: restart → first reconcile (s), warm, kubeconfig provider cold |"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kept []string
			for _, l := range strings.Split(md, "\n") {
				if !strings.HasPrefix(l, tc.row) {
					kept = append(kept, l)
				}
			}
			if len(kept) == len(strings.Split(md, "\n")) {
				t.Fatalf("the report has no row %q to remove", tc.row)
			}
			if missing := rep.missingRows(strings.Join(kept, "\n")); len(missing) != 1 || !strings.HasPrefix(missing[0], strings.TrimSuffix(strings.TrimSuffix(tc.row, "("), "|")) {
				t.Errorf("without %q, missing = %q", tc.row, missing)
			}
		})
	}
	t.Run("a compact controller not run", func(t *testing.T) {
		rep := fullReport()
		rep.Runs[1].MCRCompactWarm = nil
		missing := rep.missingRows(rep.markdown())
		if len(missing) == 0 || !strings.Contains(strings.Join(missing, "\n"), "Compact fleet: restart") {
			t.Errorf("missing = %q", missing)
		}
	})
	t.Run("a value not measured", func(t *testing.T) {
		rep := fullReport()
		rep.Runs[1].FleetwatchWatch.LatenciesMs = nil
		missing := rep.missingRows(rep.markdown())
		if len(missing) == 0 || !strings.Contains(strings.Join(missing, "\n"), "not measured") {
			t.Errorf("missing = %q", missing)
		}
	})
}

// TestMemoryBeyondTheFew checks the rows that subtract the controller over the few
// ConfigMaps of mcrFewNamespace: per run, what the process over every ConfigMap holds
// beyond it, divided by the ConfigMaps beyond its few.
func TestMemoryBeyondTheFew(t *testing.T) {
	rep := fullReport()
	r := rep.Runs[0]
	r.MCRKubeconfig.RSSAfterGC, r.MCRKubeconfigFew.RSSAfterGC = 40<<20, 10<<20
	r.MCRCompressedWarm.RSSAfterGC, r.MCRCompressedFewWarm.RSSAfterGC = 25<<20, 10<<20
	var found bool
	for _, f := range rep.controllerFigures() {
		if !strings.HasPrefix(f.name, "Compressed fleet: RSS per ConfigMap beyond") || !strings.HasSuffix(f.name, ", warm (KiB)") {
			continue
		}
		found = true
		// 30 MiB over 27 ConfigMaps against 15 MiB over them.
		if want := 30.0 * 1024 / 27; math.Abs(f.base[0]-want) > 1e-9 {
			t.Errorf("kubeconfig provider: %v KiB per ConfigMap, want %v", f.base[0], want)
		}
		if want := 15.0 * 1024 / 27; math.Abs(f.value[0]-want) > 1e-9 {
			t.Errorf("fleetwatch: %v KiB per ConfigMap, want %v", f.value[0], want)
		}
		// Without the few, the row has no value rather than a wrong one.
		r.MCRCompressedFewWarm = nil
		for _, g := range rep.controllerFigures() {
			if g.name == f.name && !math.IsNaN(g.value[0]) {
				t.Errorf("without the run over the few: %v, want NaN", g.value[0])
			}
		}
	}
	if !found {
		t.Fatal("no row of the RSS per ConfigMap beyond the few, warm")
	}
}
