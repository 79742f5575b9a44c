package main

import (
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
		Fleetwatch: res(implFleetwatch, 2, 500<<10), Metadata: res(implFleetwatch, 0.25, 200<<10),
		SnapCold: res(implFleetwatch, 2, 500<<10), Warm: res(implFleetwatch, 0.2, 500<<10), CatchUp: res(implFleetwatch, 0.3, 500<<10),
	}
	md := (&report{Runs: []*runResult{rr}}).markdown()
	for _, want := range []string{
		"| client-go typed informers + the same transform | 100 | 1.00 | 1.00 |",
		"| fleetwatch, full objects | 100 | 2.00 | 2.00 |",
		"| fleetwatch, metadata-only | 100 | 0.25 | 0.50 |",
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
