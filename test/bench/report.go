package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Markers delimit the generated part of the --out file; the text around them is kept.
const (
	markerBegin = "<!-- bench:begin -->"
	markerEnd   = "<!-- bench:end -->"
)

// report is everything an invocation of the driver measured.
type report struct {
	Command     string                 `json:"command"`
	Machine     string                 `json:"machine"`
	Date        string                 `json:"date"`
	LoadAverage string                 `json:"loadAverage"`
	Versions    map[string]string      `json:"versions"`
	Options     driverOptions          `json:"-"`
	LoadTime    time.Duration          `json:"loadTime"`
	Duration    time.Duration          `json:"duration"`
	Sizes       map[string]objectSizes `json:"sizes"`
	Runs        []*runResult           `json:"runs"`
	Scale       []scaleResult          `json:"scale,omitempty"`
	// Shards is the sharded phase (--shards); nil without it.
	Shards *shardResult `json:"shards,omitempty"`
	// Many are the rows of the many-clusters section (--many), and ManyPod the JSON
	// size of its pods.
	Many    []manyResult `json:"many,omitempty"`
	ManyPod objectSizes  `json:"manyPod"`
	// Small are the runs of the small-pods section (--small-pods), and SmallPod the
	// JSON size of its pods.
	Small    []*smallRun `json:"small,omitempty"`
	SmallPod objectSizes `json:"smallPod"`
}

// scaleResult is one row of the scale table.
type scaleResult struct {
	Contexts int `json:"contexts"`
	// Namespaces is the number of bench namespaces each context caches; 0 means all.
	Namespaces int `json:"namespaces,omitempty"`
	// ClientGo is nil with --scale-clientgo=false.
	ClientGo   *Result `json:"clientGo"`
	Fleetwatch *Result `json:"fleetwatch"`
	// Warm is fleetwatch restarted from the snapshot that Fleetwatch wrote
	// (--scale-warm), WarmList the apiservers' list figures during its life, and
	// SnapshotBytes the snapshot file's size.
	Warm          *Result      `json:"warm,omitempty"`
	WarmList      listCounters `json:"warmList"`
	SnapshotBytes int64        `json:"snapshotBytes,omitempty"`
}

// figure is one row: a baseline and a measured value per run, and the goal on their
// ratio (measured / baseline).
type figure struct {
	name        string
	base, value []float64
	format      string // for values
	goal        string
	// ok decides whether the goal is met; nil: no goal.
	ok func(ratio float64, base, value []float64) bool
	// watch marks the figures of the watch phase.
	watch bool
}

func atMost(limit float64) func(float64, []float64, []float64) bool {
	return func(r float64, _, _ []float64) bool { return r <= limit }
}

func atLeast(limit float64) func(float64, []float64, []float64) bool {
	return func(r float64, _, _ []float64) bool { return r >= limit }
}

func allZero(_ float64, _, value []float64) bool {
	for _, v := range value {
		if v != 0 {
			return false
		}
	}
	return true
}

func (f figure) ratios() []float64 {
	out := make([]float64, len(f.base))
	for i := range f.base {
		out[i] = f.value[i] / f.base[i]
	}
	return out
}

func (f figure) row() string {
	ratios := f.ratios()
	per := make([]string, len(ratios))
	for i, r := range ratios {
		per[i] = formatRatio(r)
	}
	med := median(ratios)
	met := "—"
	if f.ok != nil {
		met = "no"
		if f.ok(med, f.base, f.value) {
			met = "**yes**"
		}
	}
	goal := f.goal
	if goal == "" {
		goal = "—"
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |\n", f.name, spread(f.base, f.format), spread(f.value, f.format),
		strings.Join(per, ", "), formatRatio(med), goal, met)
}

func formatRatio(r float64) string {
	switch {
	case math.IsNaN(r), math.IsInf(r, 0):
		return "n/a"
	case r == 0:
		return "0"
	case r < 0.01:
		return fmt.Sprintf("%.4f", r)
	default:
		return fmt.Sprintf("%.2f", r)
	}
}

// spread formats the median of vs and, with more than one value, their range.
func spread(vs []float64, format string) string {
	if len(vs) == 0 {
		return "—"
	}
	s := fmt.Sprintf(format, median(vs))
	if len(vs) > 1 {
		s += fmt.Sprintf(" (%s–%s)", fmt.Sprintf(format, slices.Min(vs)), fmt.Sprintf(format, slices.Max(vs)))
	}
	return s
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// quantile is the nearest-rank quantile q of vs.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	sorted := slices.Sorted(slices.Values(vs))
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// per collects f over the runs.
func (rep *report) per(f func(*runResult) float64) []float64 {
	out := make([]float64, len(rep.Runs))
	for i, r := range rep.Runs {
		out[i] = f(r)
	}
	return out
}

func perObject(b uint64, r *Result) float64 { return float64(b) / 1024 / float64(max(r.Total, 1)) }

func throughput(r *Result) float64 {
	return float64(r.InitialEvents) / (r.LastInitialEventSec - r.FirstEventSec)
}

// cpuPerEvent is NaN for a watch phase that did not run.
func cpuPerEvent(r *Result) float64 {
	if r == nil {
		return math.NaN()
	}
	return 1e6 * r.CPUWindowSec / float64(max(r.Events, 1))
}

func (rep *report) markdown() string {
	o := rep.Options
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	total := rep.per(func(r *runResult) float64 { return float64(r.ClientGo.Total) })
	p("%s\n\n", markerBegin)
	p("Generated by `test/bench` on %s; every figure below comes from that run.\n\n", rep.Date)
	p("- Command: `%s`\n", rep.Command)
	p("- Machine: %s; load average %s\n", rep.Machine, rep.LoadAverage)
	var vs []string
	for _, k := range []string{"go", "client-go", "kube-apiserver", "etcd", "fleetwatch"} {
		vs = append(vs, fmt.Sprintf("%s %s", k, rep.Versions[k]))
	}
	p("- Versions: %s\n", strings.Join(vs, ", "))
	loaded := "already loaded in --dir"
	if rep.LoadTime >= time.Second {
		loaded = fmt.Sprintf("loading took %v", rep.LoadTime.Round(time.Second))
	}
	p("- Data: %d clusters × (%d pods + %d configmaps), %s objects cached per contender (median); written by server-side apply (%s)\n",
		o.clusters, o.pods, o.configMaps, fmt.Sprintf("%.0f", median(total)), loaded)
	if s, ok := rep.Sizes["pods"]; ok {
		cm := rep.Sizes["configmaps"]
		p("- Object sizes (JSON, as served with managedFields / as cached without): pod %.0f / %.0f B, configmap %.0f / %.0f B\n", s.Served, s.Cached, cm.Served, cm.Cached)
	}
	p("- %d runs, contenders in rotating order, each in its own process; watch phase: the watch contenders side by side, in one window of %.0f writes/s over all clusters for %v\n",
		len(rep.Runs), o.writeRate, o.writeDuration)
	p("- Total time: %v\n\n", rep.Duration.Round(time.Second))
	p("Values are medians with (min–max) over the runs. Ratios are fleetwatch / client-go (first table), fleetwatch / the strongest peer (second), or measured / baseline (the persistence table), computed per run; the goal applies to their median.\n\n")

	header := func(a, b string) {
		p("| Figure | %s | %s | ratio per run | ratio | goal | met |\n|---|---|---|---|---|---|---|\n", a, b)
	}
	hasWatch := len(rep.Runs) > 0 && rep.Runs[0].ClientGoWatch != nil
	p("### fleetwatch next to client-go\n\n")
	p("fleetwatch is the library's default fleet (compact, `fleetwatch.DefaultEncoding`), restarted warm from its snapshot in the restart rows; client-go is dynamic informers without a transform.\n\n")
	header("client-go", "fleetwatch")
	for _, f := range rep.clientGoFigures() {
		if !f.watch || hasWatch {
			b.WriteString(f.row())
		}
	}

	p("\n### fleetwatch next to the strongest peers\n\n")
	p("The strongest thing a user can write for the same objects: for full objects, typed informers (`informers.SharedInformerFactory`) with a transform that drops managedFields; for metadata-only, the `metadatainformer` with the same transform. Ratios are fleetwatch / peer, and the goals are issue #15's: fleetwatch loses where a time or memory ratio is above 1, or a throughput ratio below 1. The library's fleet is compact by default (`fleetwatch.DefaultEncoding`; rows *compact cache*); the rows *fleetwatch, full objects* and *metadata-only* without it hold decoded objects (`Encoding: EncodingObjects`). %s\n\n", rep.compressedNote())
	header("peer", "fleetwatch")
	for _, f := range peerFigures(rep) {
		if !f.watch || hasWatch {
			b.WriteString(f.row())
		}
	}
	p("\n### Every contender, sync phase\n\n")
	p("Medians over the runs, each contender in its own process; the ratio columns divide by the strongest peer for the same objects (typed + transform for full objects, metadatainformer + transform for metadata-only).\n\n")
	p("| contender | objects | time to synced (s) | ratio | peak RSS (MiB) | ratio | heap/object after GC (KiB) | ratio | RSS/object after GC (KiB) | ratio |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range syncContenders {
		peer := func(r *runResult) *Result { return r.ClientGoTyped }
		if c.metadataOnly {
			peer = func(r *runResult) *Result { return r.ClientGoMetadata }
		}
		cols := []func(*Result) float64{
			func(x *Result) float64 { return x.SyncedSec },
			func(x *Result) float64 { return float64(x.PeakRSS) / (1 << 20) },
			func(x *Result) float64 { return perObject(x.HeapAfterGC, x) },
			func(x *Result) float64 { return perObject(x.RSSAfterGC, x) },
		}
		formats := []string{"%.2f", "%.0f", "%.2f", "%.2f"}
		p("| %s | %.0f |", c.name, median(rep.per(func(r *runResult) float64 { return float64(c.res(r).Total) })))
		for k, col := range cols {
			v := rep.per(func(r *runResult) float64 { return col(c.res(r)) })
			ratio := rep.per(func(r *runResult) float64 { return col(c.res(r)) / col(peer(r)) })
			p(" %s | %s |", fmt.Sprintf(formats[k], median(v)), formatRatio(median(ratio)))
		}
		p("\n")
	}

	b.WriteString(rep.smallMarkdown())

	if len(rep.Runs) > 0 && rep.Runs[0].MCRKubeconfig != nil {
		rep.controllersMarkdown(p, header)
	}
	if len(rep.Runs) > 0 && len(rep.Runs[0].Fleetwatch.SearchLatenciesMs) > 0 {
		fw := rep.Runs[0].Fleetwatch
		p("\n### Search (fleetwatch only)\n\n")
		p("After the plain fleetwatch sync, and after its memory figures: %d name-substring searches (3 to 5 digits of the objects' names, such as `00042`, over all %d objects) through `GET /apis/fleetwatch.io/v1alpha1/search` on loopback HTTP, the whole answer read; and the heap of a search index of every object. See [search.md](search.md).\n\n",
			len(fw.SearchLatenciesMs), fw.SearchIndexObjects)
		header("baseline", "measured")
		for _, f := range rep.searchFigures() {
			b.WriteString(f.row())
		}
	}

	p("\n### Warm restarts and persistence (fleetwatch only)\n\n")
	header("baseline", "measured")
	for _, f := range rep.persistenceFigures() {
		if !f.watch || hasWatch {
			b.WriteString(f.row())
		}
	}

	p("\n### Snapshot size per object\n\n")
	p("The snapshot of the cold run with persistence (full objects, managedFields stripped), against the JSON of the same objects.\n\n")
	p("| Resource | objects in the snapshot | encoded bytes/object | bbolt page bytes/object | JSON bytes/object as served | JSON bytes/object as cached | encoded / cached JSON | pages / cached JSON |\n|---|---|---|---|---|---|---|---|\n")
	for _, gvr := range benchGVRs {
		objects := rep.per(func(r *runResult) float64 { return float64(snapshotResource(r, gvr.Resource).Objects) })
		pagesPer := rep.per(func(r *runResult) float64 {
			s := snapshotResource(r, gvr.Resource)
			return float64(s.Bytes) / float64(max(s.Objects, 1))
		})
		encodedPer := rep.per(func(r *runResult) float64 {
			s := encodedResource(r, gvr.Resource)
			return float64(s.Bytes) / float64(max(s.Objects, 1))
		})
		sz := rep.Sizes[gvr.Resource]
		p("| %s | %s | %s | %s | %.0f | %.0f | %s | %s |\n", gvr.Resource, spread(objects, "%.0f"), spread(encodedPer, "%.0f"), spread(pagesPer, "%.0f"),
			sz.Served, sz.Cached, formatRatio(median(encodedPer)/sz.Cached), formatRatio(median(pagesPer)/sz.Cached))
	}
	fileSize := rep.per(func(r *runResult) float64 { return float64(r.Snapshot.FileSize) / (1 << 20) })
	filePer := rep.per(func(r *runResult) float64 { return float64(r.Snapshot.FileSize) / float64(max(r.SnapCold.Total, 1)) })
	p("\nSnapshot file: %s MiB, %s bytes per cached object.\n", spread(fileSize, "%.1f"), spread(filePer, "%.0f"))

	b.WriteString(rep.scaleMarkdown())

	if rep.Shards != nil {
		rep.shardsMarkdown(p)
	}
	b.WriteString(rep.manyMarkdown())

	p("\n### Raw measurements\n\n")
	p("Sync phase, per run and contender: time from process start to synced, cached objects, initial-list events, CPU time up to sync, heap and RSS after GC, peak RSS.\n\n")
	p("| run | contender | synced (s) | objects | initial events | CPU to sync (s) | heap (MiB) | RSS (MiB) | peak RSS (MiB) |\n|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rep.Runs {
		for _, c := range r.syncRows() {
			x := c.res
			name := c.name
			if x.LoadedSec > 0 {
				name += fmt.Sprintf(" (all %d objects readable at %.3fs)", x.LoadedObjects, x.LoadedSec)
			}
			if x.CaughtUpSec > 0 {
				name += fmt.Sprintf(" (%d/%d changes delivered at %.2fs, CPU %.2fs by then; heap and RSS after catching up)", x.Stamped, x.Expected, x.CaughtUpSec, x.CPUCaughtUpSec)
			}
			p("| %d | %s | %.2f | %d | %d | %.2f | %.0f | %.0f | %.0f |\n", i+1, name, x.SyncedSec, x.Total, x.InitialEvents, x.CPUSyncSec,
				float64(x.HeapAfterGC)/(1<<20), float64(x.RSSAfterGC)/(1<<20), float64(x.PeakRSS)/(1<<20))
		}
	}
	p("\nObjects handed out by the apiservers during each restart, by metric: streaming-list and replayed watch events (`apiserver_init_events_total`) / lists from the watch cache / lists from etcd (these include the apiservers' own, when a watch cache fills up again).\n\n")
	p("The last column is what the apiservers answered, just before the warm restart after changes, to a watch from each resourceVersion of the snapshot: a resume that they refuse (410 Gone, their watch cache no longer reaching back to it) makes any informer relist, so a relist there is the apiservers', not fleetwatch's.\n\n")
	p("| run | client-go, cold | fleetwatch, warm | fleetwatch, warm after changes | resumes accepted before it |\n|---|---|---|---|---|\n")
	for i, r := range rep.Runs {
		lc := func(c listCounters) string {
			return fmt.Sprintf("%.0f / %.0f / %.0f", c.InitEvents, c.CacheList, c.StorageList)
		}
		p("| %d | %s | %s | %s | %s |\n", i+1, lc(r.ClientGoList), lc(r.WarmList), lc(r.CatchUpList), resumes(r.CatchUpResume))
	}
	if !hasWatch {
		p("\n%s\n", markerEnd)
		return b.String()
	}
	p("\nWatch phase, per run and contender (side by side, in one window, which ends for all of them once each has received every write and the snapshot has committed them): stamped writes delivered / made, all events in the window, window length, CPU time in the window and per event, minor page faults per event (first touches of memory the kernel maps for the process), latency quantiles, garbage collections that ended in the window, and the objects that the apiservers handed out as lists during the window (for all of them).\n\n")
	p("| run | contender | delivered | events | window (s) | CPU (s) | CPU/event (µs) | page faults/event | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | GCs | objects listed in the window |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rep.Runs {
		for _, c := range r.watchRows() {
			x := c.res
			faults := 0.0
			if x.Events > 0 {
				faults = float64(x.FaultsInWindow) / float64(x.Events)
			}
			p("| %d | %s | %d/%d | %d | %.1f | %.2f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %.0f |\n", i+1, c.name, x.Stamped, x.Expected, x.Events, x.WindowSec,
				x.CPUWindowSec, cpuPerEvent(x), faults, latency(x, 0.5), latency(x, 0.9), latency(x, 0.99), latency(x, 1), x.GCsInWindow, listedInWindow(r, c.key))
		}
		if x := r.ServeWatch; x != nil {
			// No handler to time: the changes its watch cache received, and its CPU.
			p("| %d | %s | — | %d | — | %.2f | %.0f | — | — | — | — | — | — | %.0f |\n", i+1, serveWatchRow, x.Events, x.CPUWindowSec, cpuPerEvent(x), listedInWindow(r, "window"))
		}
	}
	p("\n%s\n", markerEnd)
	return b.String()
}

// syncContenders are the contenders of the sync phase that cache from scratch, in the
// order of the "every contender" table; metadataOnly ones compare with the
// metadatainformer, the others with typed informers.
var syncContenders = []struct {
	name         string
	res          func(*runResult) *Result
	metadataOnly bool
}{
	{"client-go dynamic informers", func(r *runResult) *Result { return r.ClientGo }, false},
	{"client-go dynamic + transform dropping managedFields", func(r *runResult) *Result { return r.ClientGoStripped }, false},
	{"client-go typed informers + the same transform", func(r *runResult) *Result { return r.ClientGoTyped }, false},
	{"fleetwatch, full objects", func(r *runResult) *Result { return r.Fleetwatch }, false},
	{"fleetwatch, full objects, compact cache", func(r *runResult) *Result { return r.Compact }, false},
	{"fleetwatch, full objects, compact cache compressed", func(r *runResult) *Result { return r.Compressed }, false},
	{"`fleetwatch serve`, full objects, cache.encoding objects", func(r *runResult) *Result { return r.Serve }, false},
	{"`fleetwatch serve`, full objects, cache.encoding compact", func(r *runResult) *Result { return r.ServeCompact }, false},
	{"`fleetwatch serve`, full objects, cache.encoding compressed", func(r *runResult) *Result { return r.ServeCompressed }, false},
	{"client-go metadatainformer + the same transform", func(r *runResult) *Result { return r.ClientGoMetadata }, true},
	{"fleetwatch, metadata-only", func(r *runResult) *Result { return r.Metadata }, true},
	{"fleetwatch, metadata-only, compact cache", func(r *runResult) *Result { return r.MetadataCompact }, true},
}

// peerFigures compare fleetwatch with the strongest peer for the same objects, with
// issue #15's goals: full objects against typed informers with the managedFields
// transform, metadata-only against the metadatainformer with it.
func peerFigures(rep *report) []figure {
	var out []figure
	for _, c := range []struct {
		what       string
		peer, mine func(*runResult) *Result
		memoryGoal float64
		// daemon is set for the daemon, which has no handler of the bench's to time
		// events with.
		daemon bool
	}{
		{"Full objects, vs typed informers + transform", func(r *runResult) *Result { return r.ClientGoTyped }, func(r *runResult) *Result { return r.Fleetwatch }, 0.5, false},
		{"Full objects, compact cache, vs typed informers + transform", func(r *runResult) *Result { return r.ClientGoTyped }, func(r *runResult) *Result { return r.Compact }, 0.5, false},
		{"Full objects, compact cache compressed, vs typed informers + transform", func(r *runResult) *Result { return r.ClientGoTyped }, func(r *runResult) *Result { return r.Compressed }, 0.5, false},
		{"`fleetwatch serve`, cache.encoding objects, vs typed informers + transform", func(r *runResult) *Result { return r.ClientGoTyped }, func(r *runResult) *Result { return r.Serve }, 0.5, true},
		{"`fleetwatch serve`, cache.encoding compact, vs typed informers + transform", func(r *runResult) *Result { return r.ClientGoTyped }, func(r *runResult) *Result { return r.ServeCompact }, 0.5, true},
		{"`fleetwatch serve`, cache.encoding compressed, vs typed informers + transform", func(r *runResult) *Result { return r.ClientGoTyped }, func(r *runResult) *Result { return r.ServeCompressed }, 0.5, true},
		{"Metadata-only, vs metadatainformer + transform", func(r *runResult) *Result { return r.ClientGoMetadata }, func(r *runResult) *Result { return r.Metadata }, 0.7, false},
		{"Metadata-only, compact cache, vs metadatainformer + transform", func(r *runResult) *Result { return r.ClientGoMetadata }, func(r *runResult) *Result { return r.MetadataCompact }, 0.7, false},
	} {
		fig := func(name, format string, v func(*Result) float64, limit float64) figure {
			f := figure{name: fmt.Sprintf("%s: %s", c.what, name), format: format,
				base:  rep.per(func(r *runResult) float64 { return v(c.peer(r)) }),
				value: rep.per(func(r *runResult) float64 { return v(c.mine(r)) })}
			if limit > 0 {
				f.goal, f.ok = fmt.Sprintf("≤ %g", limit), atMost(limit)
			}
			return f
		}
		out = append(out,
			fig("cold sync (s)", "%.2f", func(x *Result) float64 { return x.SyncedSec }, 1.0),
			fig("heap per cached object after GC (KiB)", "%.2f", func(x *Result) float64 { return perObject(x.HeapAfterGC, x) }, c.memoryGoal),
			fig("RSS per cached object after GC (KiB)", "%.2f", func(x *Result) float64 { return perObject(x.RSSAfterGC, x) }, c.memoryGoal),
			fig("peak RSS during the initial sync (MiB)", "%.0f", func(x *Result) float64 { return float64(x.PeakRSS) / (1 << 20) }, 0),
		)
		if !c.daemon {
			out = append(out, fig("event throughput through handlers, initial lists (events/s)", "%.0f", throughput, 0))
		}
	}
	// Issue #15's other memory goal for full objects: the heap per cached object at most
	// 1.5 times the objects' own compact encoding, the CBOR that the snapshot stores of
	// them (its payload per object, over every resource).
	encoded := func(r *runResult) float64 {
		var n, b float64
		for _, s := range r.Encoded {
			n, b = n+float64(s.Objects), b+float64(s.Bytes)
		}
		if n == 0 {
			return math.NaN()
		}
		return b / n / 1024
	}
	for _, c := range []struct {
		what string
		mine func(*runResult) *Result
	}{
		{"Full objects, compact cache", func(r *runResult) *Result { return r.Compact }},
		{"Full objects, compact cache compressed", func(r *runResult) *Result { return r.Compressed }},
		{"`fleetwatch serve`, cache.encoding compact", func(r *runResult) *Result { return r.ServeCompact }},
	} {
		out = append(out, figure{name: c.what + ": heap per cached object after GC, against the objects' own compact encoding (the snapshot's bytes per object; KiB)", format: "%.2f",
			base:  rep.per(encoded),
			value: rep.per(func(r *runResult) float64 { return perObject(c.mine(r).HeapAfterGC, c.mine(r)) }),
			goal:  "≤ 1.5", ok: atMost(1.5)})
	}
	// The watch phase, side by side in one window: the plain fleet against typed
	// informers with the transform, in reports that have them.
	if len(rep.Runs) == 0 || rep.Runs[0].ClientGoTypedWatch != nil {
		o := rep.Options
		watchFig := func(name, format string, v func(*Result) float64, goal string, ok func(float64, []float64, []float64) bool) figure {
			return figure{name: "Full objects, vs typed informers + transform: " + name, format: format, goal: goal, ok: ok, watch: true,
				base:  rep.per(func(r *runResult) float64 { return v(r.ClientGoTypedWatch) }),
				value: rep.per(func(r *runResult) float64 { return v(r.FleetwatchWatch) })}
		}
		out = append(out,
			watchFig(fmt.Sprintf("event latency, apiserver write → handler, p50 at %.0f writes/s (ms)", o.writeRate), "%.1f",
				func(x *Result) float64 { return latency(x, 0.5) }, "", nil),
			watchFig(fmt.Sprintf("event latency, apiserver write → handler, p99 at %.0f writes/s (ms)", o.writeRate), "%.1f",
				func(x *Result) float64 { return latency(x, 0.99) }, "≤ 1.2", atMost(1.2)),
			watchFig(fmt.Sprintf("CPU per event at %.0f writes/s (µs)", o.writeRate), "%.0f", cpuPerEvent, "", nil),
		)
		// The compact fleet, the library's default (fleetwatch.DefaultEncoding), whose
		// goal for the CPU per event is the peer's (#37).
		if len(rep.Runs) == 0 || rep.Runs[0].CompactWatch != nil {
			compactFig := func(name, format string, v func(*Result) float64, goal string, ok func(float64, []float64, []float64) bool) figure {
				return figure{name: "Full objects, compact cache, vs typed informers + transform: " + name, format: format, goal: goal, ok: ok, watch: true,
					base:  rep.per(func(r *runResult) float64 { return v(r.ClientGoTypedWatch) }),
					value: rep.per(func(r *runResult) float64 { return v(r.CompactWatch) })}
			}
			out = append(out,
				compactFig(fmt.Sprintf("event latency, apiserver write → handler, p99 at %.0f writes/s (ms)", o.writeRate), "%.1f",
					func(x *Result) float64 { return latency(x, 0.99) }, "≤ 1.2", atMost(1.2)),
				compactFig(fmt.Sprintf("CPU per event at %.0f writes/s (µs)", o.writeRate), "%.0f", cpuPerEvent, "≤ 1", atMost(1)),
			)
		}
		// The daemon in its default configuration, in the same window (servewatch.go).
		if len(rep.Runs) == 0 || rep.Runs[0].ServeWatch != nil {
			out = append(out, figure{name: fmt.Sprintf("`fleetwatch serve`, default cache.encoding, vs typed informers + transform: CPU per event at %.0f writes/s (µs)", o.writeRate),
				format: "%.0f", goal: "≤ 1", ok: atMost(1), watch: true,
				base:  rep.per(func(r *runResult) float64 { return cpuPerEvent(r.ClientGoTypedWatch) }),
				value: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.ServeWatch) })})
		}
	}
	return out
}

// listedInWindow returns the objects that the apiservers handed out as lists during the
// watch window of a run, over all the contenders, which share it. Reports from before the
// side-by-side window have a figure per contender, over its life.
func listedInWindow(r *runResult, key string) float64 {
	if lc, ok := r.WatchLists["window"]; ok {
		return lc.Objects
	}
	return r.WatchLists[key].Objects
}

// resourceSize is the number and the size of the stored objects of a resource.
type resourceSize struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// snapshotResource sums a resource's stored objects and the bbolt pages they take over
// clusters.
func snapshotResource(r *runResult, resource string) resourceSize {
	var out resourceSize
	for _, c := range r.Snapshot.Clusters {
		for _, res := range c.Resources {
			if resourceOf(string(res.Resource)) == resource {
				out.Objects += res.Objects
				out.Bytes += res.Bytes
			}
		}
	}
	return out
}

// encodedResource sums a resource's encoded objects over clusters.
func encodedResource(r *runResult, resource string) resourceSize {
	var out resourceSize
	for key, s := range r.Encoded {
		if resourceOf(key) == resource {
			out.Objects += s.Objects
			out.Bytes += s.Bytes
		}
	}
	return out
}

// resourceOf returns the resource of a persist.ResourceKey, "group/version/resource[?...]".
func resourceOf(key string) string {
	key, _, _ = strings.Cut(key, "?")
	return key[strings.LastIndex(key, "/")+1:]
}

// writeMarked writes md into path: between the markers if the file has them, else as
// the whole file.
func writeMarked(path, md string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	content := md
	if i, j := bytes.Index(old, []byte(markerBegin)), bytes.Index(old, []byte(markerEnd)); i >= 0 && j > i {
		content = string(old[:i]) + strings.TrimSuffix(md, "\n") + string(old[j+len(markerEnd):])
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// controllersMarkdown renders the controller contenders: the same multicluster-runtime
// controller on the kubeconfig provider (the baseline) and on fleetwatch's.
func (rep *report) controllersMarkdown(p func(string, ...any), header func(a, b string)) {
	p("\n### A multicluster-runtime controller: the kubeconfig provider next to fleetwatch's\n\n")
	p("`examples/multicluster-runtime`, multicluster-runtime's uniform reconciler over every ConfigMap of every cluster (%d in all), each in its own process: on multicluster-runtime's kubeconfig provider (a controller-runtime cache per cluster, listed at every start, without managedFields as fleetwatch's are (`cache.TransformStripManagedFields`), kubeconfigs in Secrets of the first cluster), and on fleetwatch's provider (one cache for the fleet; cold with a new snapshot, then warm from it), over a plain fleet (`--encoding objects`), a compact one (`--encoding compact`: the objects kept in the snapshot's encoding and decoded when read; rows *Compact fleet*) and a compressed one (`--encoding %s`, the example's default; rows *Compressed fleet*). Times are from the process start to the end of its first reconcile and of the reconcile of every ConfigMap, read from its output; memory is what it measured of itself once every ConfigMap was reconciled, after garbage collection (`--memstats-after`), per ConfigMap, so the process's fixed cost weighs more the fewer the objects; lists are the objects the apiservers handed out as lists during its life. Ratios are fleetwatch / kubeconfig provider. The goals are issue #16's: memory per object ≤ 0.5×, and a warm first reconcile ≤ 0.1× with 0 objects re-sent; the time until every ConfigMap is reconciled is the controller's own work through its queue after its first reconcile, shown without a goal. Rows *Pods*: the same controller over every Pod instead (`--resource pods`, %s in all; read only), on the kubeconfig provider and on fleetwatch's over a compressed fleet: the memory per object at a size where the objects weigh more than the process. Rows *beyond the same controller's over the few of %s*: what the process over every ConfigMap holds beyond the same controller over the few ConfigMaps of %s alone (`--namespaces %s`), per ConfigMap: the memory of an object, without the process's own.\n\n",
		rep.Runs[0].MCRKubeconfig.Expected, rep.compressedEncoding(), podCount(rep.Runs[0]), mcrFewNamespace, mcrFewNamespace, mcrFewNamespace)
	header("kubeconfig provider", "fleetwatch provider")
	for _, f := range rep.controllerFigures() {
		p("%s", f.row())
	}
}

// searchFigures are the rows of the Search table.
func (rep *report) searchFigures() []figure {
	return []figure{
		{name: "Search p99, name substring (ms), vs the 50 ms goal",
			base: rep.per(func(*runResult) float64 { return 50 }), value: rep.per(func(r *runResult) float64 { return quantile(r.Fleetwatch.SearchLatenciesMs, 0.99) }),
			format: "%.1f", goal: "≤ 1", ok: atMost(1)},
		{name: "Search p50, name substring (ms), vs the 50 ms goal",
			base: rep.per(func(*runResult) float64 { return 50 }), value: rep.per(func(r *runResult) float64 { return quantile(r.Fleetwatch.SearchLatenciesMs, 0.5) }),
			format: "%.1f"},
		{name: "Search index heap per object (KiB), vs the fleet's heap per object",
			base: rep.per(func(r *runResult) float64 { return perObject(r.Fleetwatch.HeapAfterGC, r.Fleetwatch) }),
			value: rep.per(func(r *runResult) float64 {
				return float64(r.Fleetwatch.SearchIndexBytes) / 1024 / float64(max(r.Fleetwatch.SearchIndexObjects, 1))
			}),
			format: "%.2f"},
	}
}

// podCount is the number of Pods the controller of Pods reconciled, "—" if it did not run.
func podCount(r *runResult) string {
	if r.MCRPodsKubeconfig == nil {
		return "—"
	}
	return strconv.Itoa(r.MCRPodsKubeconfig.Expected)
}

// orNaN is f(r), or NaN if the contender did not run (a missing row, for --check).
func orNaN(r *mcrResult, f func(*mcrResult) float64) float64 {
	if r == nil {
		return math.NaN()
	}
	return f(r)
}

// controllerFigures are the rows of the controller contenders' table.
func (rep *report) controllerFigures() []figure {
	// column returns the values of a figure, per run, of the contender that pick chooses.
	type column func(f func(*mcrResult) float64) []float64
	of := func(pick func(*runResult) *mcrResult) column {
		return func(f func(*mcrResult) float64) []float64 {
			return rep.per(func(r *runResult) float64 { return orNaN(pick(r), f) })
		}
	}
	var (
		kc             = of(func(r *runResult) *mcrResult { return r.MCRKubeconfig })
		cold           = of(func(r *runResult) *mcrResult { return r.MCRFleetwatch })
		warm           = of(func(r *runResult) *mcrResult { return r.MCRFleetwatchWarm })
		compactCold    = of(func(r *runResult) *mcrResult { return r.MCRCompact })
		compactWarm    = of(func(r *runResult) *mcrResult { return r.MCRCompactWarm })
		compressedCold = of(func(r *runResult) *mcrResult { return r.MCRCompressed })
		compressedWarm = of(func(r *runResult) *mcrResult { return r.MCRCompressedWarm })
		podsKC         = of(func(r *runResult) *mcrResult { return r.MCRPodsKubeconfig })
		podsCold       = of(func(r *runResult) *mcrResult { return r.MCRPodsCompressed })
		podsWarm       = of(func(r *runResult) *mcrResult { return r.MCRPodsCompressedWarm })
	)
	// beyondFew returns the bytes per ConfigMap (KiB) that field measures in the
	// contender that pick chooses beyond what it measures in the same controller over
	// the few ConfigMaps of mcrFewNamespace, which few chooses: the memory of an
	// object without the process's own.
	beyondFew := func(pick, few func(*runResult) *mcrResult, field func(*mcrResult) uint64) []float64 {
		return rep.per(func(r *runResult) float64 {
			all, base := pick(r), few(r)
			if all == nil || base == nil || all.Expected <= base.Expected {
				return math.NaN()
			}
			return (float64(field(all)) - float64(field(base))) / 1024 / float64(all.Expected-base.Expected)
		})
	}
	heapOf := func(r *mcrResult) uint64 { return r.HeapAfterGC }
	rssOf := func(r *mcrResult) uint64 { return r.RSSAfterGC }
	kcOf := func(r *runResult) *mcrResult { return r.MCRKubeconfig }
	kcFew := func(r *runResult) *mcrResult { return r.MCRKubeconfigFew }
	compressedColdOf := func(r *runResult) *mcrResult { return r.MCRCompressed }
	compressedWarmOf := func(r *runResult) *mcrResult { return r.MCRCompressedWarm }
	compressedFew := func(r *runResult) *mcrResult { return r.MCRCompressedFew }
	compressedFewWarm := func(r *runResult) *mcrResult { return r.MCRCompressedFewWarm }
	first := func(r *mcrResult) float64 { return r.FirstSec }
	all := func(r *mcrResult) float64 { return r.AllSec }
	heap := func(r *mcrResult) float64 { return mcrPerObject(r.HeapAfterGC, r) }
	rss := func(r *mcrResult) float64 { return mcrPerObject(r.RSSAfterGC, r) }
	peak := func(r *mcrResult) float64 { return float64(r.PeakRSS) / (1 << 20) }
	rssMiB := func(r *mcrResult) float64 { return float64(r.RSSAfterGC) / (1 << 20) }
	beyond := func(r *mcrResult) float64 { return (float64(r.RSSAfterGC) - float64(r.HeapAfterGC)) / (1 << 20) }
	lists := func(r *mcrResult) float64 { return r.Lists.Objects }
	return []figure{
		{name: "Heap per ConfigMap after GC, every one reconciled, cold (KiB)", base: kc(heap), value: cold(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Heap per ConfigMap after GC, every one reconciled, warm (KiB)", base: kc(heap), value: warm(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compact fleet: heap per ConfigMap after GC, every one reconciled, cold (KiB)", base: kc(heap), value: compactCold(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compact fleet: heap per ConfigMap after GC, every one reconciled, warm (KiB)", base: kc(heap), value: compactWarm(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: heap per ConfigMap after GC, every one reconciled, cold (KiB)", base: kc(heap), value: compressedCold(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: heap per ConfigMap after GC, every one reconciled, warm (KiB)", base: kc(heap), value: compressedWarm(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "RSS per ConfigMap after GC, every one reconciled, cold (KiB)", base: kc(rss), value: cold(rss), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compact fleet: RSS per ConfigMap after GC, every one reconciled, cold (KiB)", base: kc(rss), value: compactCold(rss), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: RSS per ConfigMap after GC, every one reconciled, warm (KiB)", base: kc(rss), value: compressedWarm(rss), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: RSS beyond the heap after GC, warm: the process's fixed cost, mostly (MiB)", base: kc(beyond), value: compressedWarm(beyond), format: "%.0f"},
		{name: "Compressed fleet: heap per ConfigMap beyond the same controller's over the few of " + mcrFewNamespace + ", cold (KiB)", base: beyondFew(kcOf, kcFew, heapOf), value: beyondFew(compressedColdOf, compressedFew, heapOf), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: heap per ConfigMap beyond the same controller's over the few of " + mcrFewNamespace + ", warm (KiB)", base: beyondFew(kcOf, kcFew, heapOf), value: beyondFew(compressedWarmOf, compressedFewWarm, heapOf), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: RSS per ConfigMap beyond the same controller's over the few of " + mcrFewNamespace + ", cold (KiB)", base: beyondFew(kcOf, kcFew, rssOf), value: beyondFew(compressedColdOf, compressedFew, rssOf), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: RSS per ConfigMap beyond the same controller's over the few of " + mcrFewNamespace + ", warm (KiB)", base: beyondFew(kcOf, kcFew, rssOf), value: beyondFew(compressedWarmOf, compressedFewWarm, rssOf), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Compressed fleet: RSS after GC of the controller over the few ConfigMaps of " + mcrFewNamespace + ", cold (MiB)", base: of(kcFew)(rssMiB), value: of(compressedFew)(rssMiB), format: "%.0f"},
		{name: "Peak RSS until then, cold (MiB)", base: kc(peak), value: cold(peak), format: "%.0f"},
		{name: "Compact fleet: peak RSS until then, cold (MiB)", base: kc(peak), value: compactCold(peak), format: "%.0f"},
		{name: "Compressed fleet: peak RSS until then, cold (MiB)", base: kc(peak), value: compressedCold(peak), format: "%.0f"},
		{name: "Start → first reconcile, cold (s)", base: kc(first), value: cold(first), format: "%.2f"},
		{name: "Start → every ConfigMap reconciled, cold (s)", base: kc(all), value: cold(all), format: "%.2f"},
		{name: "Compact fleet: start → first reconcile, cold (s)", base: kc(first), value: compactCold(first), format: "%.2f"},
		{name: "Compact fleet: start → every ConfigMap reconciled, cold (s)", base: kc(all), value: compactCold(all), format: "%.2f"},
		{name: "Compressed fleet: start → first reconcile, cold (s)", base: kc(first), value: compressedCold(first), format: "%.2f"},
		{name: "Compressed fleet: start → every ConfigMap reconciled, cold (s)", base: kc(all), value: compressedCold(all), format: "%.2f"},
		{name: "Restart → first reconcile (s): fleetwatch warm from its snapshot, kubeconfig provider cold", base: kc(first), value: warm(first), format: "%.2f", goal: "≤ 0.1", ok: atMost(0.1)},
		{name: "Restart → every ConfigMap reconciled (s): fleetwatch warm, kubeconfig provider cold", base: kc(all), value: warm(all), format: "%.2f"},
		{name: "Compact fleet: restart → first reconcile (s), warm, kubeconfig provider cold", base: kc(first), value: compactWarm(first), format: "%.2f", goal: "≤ 0.1", ok: atMost(0.1)},
		{name: "Compact fleet: restart → every ConfigMap reconciled (s), warm, kubeconfig provider cold", base: kc(all), value: compactWarm(all), format: "%.2f"},
		{name: "Compressed fleet: restart → first reconcile (s), warm, kubeconfig provider cold", base: kc(first), value: compressedWarm(first), format: "%.2f", goal: "≤ 0.1", ok: atMost(0.1)},
		{name: "Compressed fleet: restart → every ConfigMap reconciled (s), warm, kubeconfig provider cold", base: kc(all), value: compressedWarm(all), format: "%.2f"},
		{name: "Restart within the watch window: objects handed out as lists", base: kc(lists), value: warm(lists), format: "%.0f", goal: "0 for fleetwatch", ok: allZero},
		{name: "Compact fleet: restart within the watch window: objects handed out as lists", base: kc(lists), value: compactWarm(lists), format: "%.0f", goal: "0 for fleetwatch", ok: allZero},
		{name: "Compressed fleet: restart within the watch window: objects handed out as lists", base: kc(lists), value: compressedWarm(lists), format: "%.0f", goal: "0 for fleetwatch", ok: allZero},
		{name: "Pods, compressed fleet: heap per Pod after GC, every one reconciled, cold (KiB)", base: podsKC(heap), value: podsCold(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Pods, compressed fleet: heap per Pod after GC, every one reconciled, warm (KiB)", base: podsKC(heap), value: podsWarm(heap), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Pods, compressed fleet: RSS per Pod after GC, every one reconciled, cold (KiB)", base: podsKC(rss), value: podsCold(rss), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Pods, compressed fleet: RSS per Pod after GC, every one reconciled, warm (KiB)", base: podsKC(rss), value: podsWarm(rss), format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Pods, compressed fleet: peak RSS until then, cold (MiB)", base: podsKC(peak), value: podsCold(peak), format: "%.0f"},
		{name: "Pods, compressed fleet: start → first reconcile, cold (s)", base: podsKC(first), value: podsCold(first), format: "%.2f"},
		{name: "Pods, compressed fleet: start → every Pod reconciled, cold (s)", base: podsKC(all), value: podsCold(all), format: "%.2f"},
		{name: "Pods, compressed fleet: restart → first reconcile (s), warm, kubeconfig provider cold", base: podsKC(first), value: podsWarm(first), format: "%.2f", goal: "≤ 0.1", ok: atMost(0.1)},
		{name: "Pods, compressed fleet: restart → every Pod reconciled (s), warm, kubeconfig provider cold", base: podsKC(all), value: podsWarm(all), format: "%.2f"},
		{name: "Pods, compressed fleet: restart within the watch window: objects handed out as lists", base: podsKC(lists), value: podsWarm(lists), format: "%.0f", goal: "0 for fleetwatch", ok: allZero},
	}
}

// resumes summarises the probe of the resumes: how many the apiservers accepted, and the
// answer to the first they refused.
func resumes(probes []resumeProbe) string {
	if len(probes) == 0 {
		return "—"
	}
	ok := 0
	var refused []string
	for _, p := range probes {
		if p.Resumes {
			ok++
		} else {
			refused = append(refused, p.String())
		}
	}
	out := fmt.Sprintf("%d of %d", ok, len(probes))
	if len(refused) > 0 {
		out += "; " + refused[0]
		if len(refused) > 1 {
			out += fmt.Sprintf(" (and %d more)", len(refused)-1)
		}
	}
	return out
}

// latency is the quantile q of a watch contender's latencies, NaN if it did not run.
func latency(r *Result, q float64) float64 {
	if r == nil {
		return math.NaN()
	}
	return quantile(r.LatenciesMs, q)
}

// clientGoFigures are the rows of "fleetwatch next to client-go": the library's default
// fleet (compact; the snapshot contenders are too) against dynamic informers.
func (rep *report) clientGoFigures() []figure {
	o := rep.Options
	return []figure{
		{name: fmt.Sprintf("Cold sync, %d clusters × %d pods + %d configmaps (s)", o.clusters, o.pods, o.configMaps),
			base: rep.per(func(r *runResult) float64 { return r.ClientGo.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.Compact.SyncedSec }),
			format: "%.2f", goal: "≤ 1.05", ok: atMost(1.05)},
		{name: "Heap per cached object after GC, full objects, default transforms (KiB)",
			base: rep.per(func(r *runResult) float64 { return perObject(r.ClientGo.HeapAfterGC, r.ClientGo) }), value: rep.per(func(r *runResult) float64 { return perObject(r.Compact.HeapAfterGC, r.Compact) }),
			format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "RSS per cached object after GC, full objects (KiB)",
			base: rep.per(func(r *runResult) float64 { return perObject(r.ClientGo.RSSAfterGC, r.ClientGo) }), value: rep.per(func(r *runResult) float64 { return perObject(r.Compact.RSSAfterGC, r.Compact) }),
			format: "%.2f", goal: "≤ 0.5", ok: atMost(0.5)},
		{name: "Heap per cached object after GC, metadata-only (KiB)",
			base: rep.per(func(r *runResult) float64 { return perObject(r.ClientGo.HeapAfterGC, r.ClientGo) }), value: rep.per(func(r *runResult) float64 { return perObject(r.MetadataCompact.HeapAfterGC, r.MetadataCompact) }),
			format: "%.2f", goal: "≤ 0.25", ok: atMost(0.25)},
		{name: "RSS per cached object after GC, metadata-only (KiB)",
			base: rep.per(func(r *runResult) float64 { return perObject(r.ClientGo.RSSAfterGC, r.ClientGo) }), value: rep.per(func(r *runResult) float64 { return perObject(r.MetadataCompact.RSSAfterGC, r.MetadataCompact) }),
			format: "%.2f", goal: "≤ 0.25", ok: atMost(0.25)},
		{name: "Event throughput through handlers, initial lists (events/s)",
			base: rep.per(func(r *runResult) float64 { return throughput(r.ClientGo) }), value: rep.per(func(r *runResult) float64 { return throughput(r.Compact) }),
			format: "%.0f", goal: "≥ 0.9", ok: atLeast(0.9)},
		{name: fmt.Sprintf("Event latency, apiserver write → handler, p50 at %.0f writes/s (ms)", o.writeRate),
			base: rep.per(func(r *runResult) float64 { return latency(r.ClientGoWatch, 0.5) }), value: rep.per(func(r *runResult) float64 { return latency(r.CompactWatch, 0.5) }),
			format: "%.1f", watch: true},
		{name: fmt.Sprintf("Event latency, apiserver write → handler, p99 at %.0f writes/s (ms)", o.writeRate),
			base: rep.per(func(r *runResult) float64 { return latency(r.ClientGoWatch, 0.99) }), value: rep.per(func(r *runResult) float64 { return latency(r.CompactWatch, 0.99) }),
			format: "%.1f", goal: "≤ 1.2", ok: atMost(1.2), watch: true},
		{name: "Restart: process start → complete cache (s); fleetwatch warm from its snapshot, client-go cold",
			base: rep.per(func(r *runResult) float64 { return r.ClientGo.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.Warm.LoadedSec }),
			format: "%.2f", goal: "≤ 0.1", ok: atMost(0.1)},
		{name: "Restart: process start → synced, server-confirmed (s); fleetwatch warm (Ready), client-go cold",
			base: rep.per(func(r *runResult) float64 { return r.ClientGo.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.Warm.SyncedSec }),
			format: "%.2f"},
		{name: "Restart within the watch window: LIST requests to the apiservers",
			base: rep.per(func(r *runResult) float64 { return r.ClientGoList.Requests }), value: rep.per(func(r *runResult) float64 { return r.WarmList.Requests }),
			format: "%.0f", goal: "0 for fleetwatch", ok: allZero},
		{name: "Restart within the watch window: objects handed out as lists (incl. streaming lists)",
			base: rep.per(func(r *runResult) float64 { return r.ClientGoList.Objects }), value: rep.per(func(r *runResult) float64 { return r.WarmList.Objects }),
			format: "%.0f", goal: "0 for fleetwatch", ok: allZero},
		{name: "Peak RSS during the initial sync (MiB)",
			base: rep.per(func(r *runResult) float64 { return float64(r.ClientGo.PeakRSS) / (1 << 20) }), value: rep.per(func(r *runResult) float64 { return float64(r.Compact.PeakRSS) / (1 << 20) }),
			format: "%.0f", goal: "≤ 0.7", ok: atMost(0.7)},
	}
}

// persistenceFigures are the rows of "Warm restarts and persistence".
func (rep *report) persistenceFigures() []figure {
	o := rep.Options
	changes := 0
	if len(rep.Runs) > 0 {
		changes = rep.Runs[0].CatchUp.Expected
	}
	out := []figure{
		{name: "Start → all objects readable (s): warm from the snapshot / cold sync, same objects (both with a snapshot)",
			base: rep.per(func(r *runResult) float64 { return r.SnapCold.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.Warm.LoadedSec }),
			format: "%.2f", goal: "≤ 0.1", ok: atMost(0.1)},
		{name: "Start → Ready (s): warm / cold sync (both with a snapshot)",
			base: rep.per(func(r *runResult) float64 { return r.SnapCold.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.Warm.SyncedSec }),
			format: "%.2f"},
		{name: fmt.Sprintf("Warm restart after %d changes made while down (restart %v after them): start → Ready (s), vs cold sync with a snapshot", changes, o.catchUpGap),
			base: rep.per(func(r *runResult) float64 { return r.SnapCold.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.CatchUp.SyncedSec }),
			format: "%.2f"},
		{name: "… start → every change delivered to the handler (s), vs cold sync with a snapshot",
			base: rep.per(func(r *runResult) float64 { return r.SnapCold.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.CatchUp.CaughtUpSec }),
			format: "%.2f"},
		{name: "… objects handed out as lists, vs a cold client-go start",
			base: rep.per(func(r *runResult) float64 { return r.ClientGoList.Objects }), value: rep.per(func(r *runResult) float64 { return r.CatchUpList.Objects }),
			format: "%.0f"},
		{name: "… peak RSS until caught up (MiB), vs the warm restart without changes",
			base: rep.per(func(r *runResult) float64 { return float64(r.Warm.PeakRSS) / (1 << 20) }), value: rep.per(func(r *runResult) float64 { return float64(r.CatchUp.PeakRSSCaughtUp) / (1 << 20) }),
			format: "%.0f"},
		{name: "Cold sync (s): with a snapshot / without",
			base: rep.per(func(r *runResult) float64 { return r.Compact.SyncedSec }), value: rep.per(func(r *runResult) float64 { return r.SnapCold.SyncedSec }),
			format: "%.2f"},
		{name: fmt.Sprintf("CPU per event at %.0f writes/s (µs): persistence on / off", o.writeRate),
			base: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.CompactWatch) }), value: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.SnapWatch) }),
			format: "%.0f", goal: "≤ 1.2", ok: atMost(1.2), watch: true},
		{name: fmt.Sprintf("CPU per event at %.0f writes/s (µs): fleetwatch without persistence / client-go", o.writeRate),
			base: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.ClientGoWatch) }), value: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.CompactWatch) }),
			format: "%.0f", watch: true},
		{name: fmt.Sprintf("Event latency p99 at %.0f writes/s (ms): persistence on / off", o.writeRate),
			base: rep.per(func(r *runResult) float64 { return latency(r.CompactWatch, 0.99) }), value: rep.per(func(r *runResult) float64 { return latency(r.SnapWatch, 0.99) }),
			format: "%.1f", watch: true},
	}
	// The change log (issue #35), in reports that have it: the snapshot with its log
	// against the snapshot without, in the same window.
	if len(rep.Runs) == 0 || rep.Runs[0].HistoryWatch != nil {
		out = append(out,
			figure{name: fmt.Sprintf("CPU per event at %.0f writes/s (µs): change log on / off (both with a snapshot)", o.writeRate),
				base: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.SnapWatch) }), value: rep.per(func(r *runResult) float64 { return cpuPerEvent(r.HistoryWatch) }),
				format: "%.0f", goal: "≤ 1.2", ok: atMost(1.2), watch: true},
			figure{name: fmt.Sprintf("Event latency p99 at %.0f writes/s (ms): change log on / off (both with a snapshot)", o.writeRate),
				base: rep.per(func(r *runResult) float64 { return latency(r.SnapWatch, 0.99) }), value: rep.per(func(r *runResult) float64 { return latency(r.HistoryWatch, 0.99) }),
				format: "%.1f", watch: true},
		)
	}
	return out
}

// rawRow is a contender's row in the raw measurements; key names it in WatchLists.
type rawRow struct {
	name string
	res  *Result
	key  string
}

// syncRows are the rows of the sync phase's raw measurements.
func (r *runResult) syncRows() []rawRow {
	return []rawRow{{"client-go", r.ClientGo, ""}, {"client-go dynamic + transform", r.ClientGoStripped, ""}, {"client-go typed + transform", r.ClientGoTyped, ""},
		{"client-go metadatainformer + transform", r.ClientGoMetadata, ""}, {"fleetwatch", r.Fleetwatch, ""}, {"fleetwatch metadata-only", r.Metadata, ""},
		{"fleetwatch metadata-only, compact cache", r.MetadataCompact, ""},
		{"fleetwatch, compact cache", r.Compact, ""}, {"fleetwatch, compact cache compressed", r.Compressed, ""},
		{"fleetwatch serve, cache.encoding objects", r.Serve, ""}, {"fleetwatch serve, cache.encoding compact", r.ServeCompact, ""},
		{"fleetwatch serve, cache.encoding compressed", r.ServeCompressed, ""},
		{"fleetwatch + snapshot, cold", r.SnapCold, ""}, {"fleetwatch + snapshot, warm", r.Warm, ""},
		{"fleetwatch + snapshot, warm after changes", r.CatchUp, ""}}
}

// serveWatchRow names the daemon's row of the watch phase's raw measurements.
const serveWatchRow = "`fleetwatch serve`, default configuration (its watch cache's changes; no latencies)"

// watchRows are the rows of the watch phase's raw measurements.
func (r *runResult) watchRows() []rawRow {
	rows := []rawRow{{"client-go", r.ClientGoWatch, "clientgo"}, {"fleetwatch", r.FleetwatchWatch, "fleetwatch"},
		{"fleetwatch + snapshot (fresh file)", r.SnapWatch, "fleetwatch+snapshot"}}
	if r.ClientGoTypedWatch != nil {
		rows = append(rows, rawRow{"client-go typed + transform", r.ClientGoTypedWatch, "clientgo-typed"})
	}
	if r.HistoryWatch != nil {
		rows = append(rows, rawRow{"fleetwatch + snapshot + change log (fresh file)", r.HistoryWatch, "fleetwatch+history"})
	}
	if r.CompactWatch != nil {
		rows = append(rows, rawRow{"fleetwatch, compact cache", r.CompactWatch, "fleetwatch-compact"})
	}
	if r.CompactJSONWatch != nil {
		rows = append(rows, rawRow{"fleetwatch, compact cache, JSON lists", r.CompactJSONWatch, "fleetwatch-compact-json"})
	}
	return rows
}

// missingRows returns what md, the report's Markdown, lacks of the rows it should have:
// every figure of every table, every contender of every run, every scale, each named by
// the start of its row. A row with a value that was not measured (NaN) counts as
// missing. make test's smoke run of the harness (--check) fails on them; it asserts no
// ratio.
func (rep *report) missingRows(md string) []string {
	hasWatch := len(rep.Runs) > 0 && rep.Runs[0].ClientGoWatch != nil
	// Each row is wanted as one of its starts.
	var want [][]string
	row := func(starts ...string) { want = append(want, starts) }
	figures := slices.Concat(rep.clientGoFigures(), peerFigures(rep), rep.persistenceFigures())
	if rep.Options.controllers {
		figures = append(figures, rep.controllerFigures()...)
	}
	if rep.Options.searches > 0 {
		figures = append(figures, rep.searchFigures()...)
	}
	if rep.Options.smallPods > 0 {
		row(smallHeading)
		figures = append(figures, rep.smallFigures()...)
	}
	for _, f := range figures {
		if !f.watch || hasWatch {
			row("| " + f.name + " |")
		}
	}
	for _, c := range syncContenders {
		row("| " + c.name + " |")
	}
	for _, gvr := range benchGVRs {
		row("| " + gvr.Resource + " |")
	}
	for _, s := range rep.Scale {
		row(fmt.Sprintf("| %d | %d |", s.Contexts, s.Fleetwatch.Total))
	}
	for _, r := range rep.shardRows() {
		row("| " + r.name + " |")
	}
	if len(rep.Options.many) > 0 {
		row(manyHeading)
	}
	for _, n := range rep.Options.many {
		row(manyRowStart(n))
		if rep.Options.manyShards > 0 && n <= manyShardsMaxContexts {
			row(manyShardsRowStart(n, rep.Options.manyShards))
		}
	}
	for i, r := range rep.Runs {
		for _, c := range r.syncRows() {
			// The name may be followed by what the restart measured, in parentheses.
			row(fmt.Sprintf("| %d | %s |", i+1, c.name), fmt.Sprintf("| %d | %s (", i+1, c.name))
		}
		row(fmt.Sprintf("| %d | %.0f / ", i+1, r.ClientGoList.InitEvents))
		if hasWatch {
			for _, c := range r.watchRows() {
				row(fmt.Sprintf("| %d | %s |", i+1, c.name))
			}
			if r.ServeWatch != nil {
				row(fmt.Sprintf("| %d | %s |", i+1, serveWatchRow))
			}
		}
	}
	lines := strings.Split(md, "\n")
	var missing []string
	for _, starts := range want {
		i := slices.IndexFunc(lines, func(l string) bool {
			return slices.ContainsFunc(starts, func(s string) bool { return strings.HasPrefix(l, s) })
		})
		switch {
		case i < 0:
			missing = append(missing, starts[0])
		case strings.Contains(lines[i], "NaN"):
			missing = append(missing, lines[i]+" (a value was not measured)")
		}
	}
	return missing
}

// scaleOnlyMarkdown is the report of --scale-only: the run's header and the scale
// tables.
func (rep *report) scaleOnlyMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `test/bench` on %s (--scale-only).\n\n", rep.Date)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Machine: %s; load average %s\n", rep.Machine, rep.LoadAverage)
	fmt.Fprintf(&b, "- Data: %d clusters × (%d pods + %d configmaps)\n", rep.Options.clusters, rep.Options.pods, rep.Options.configMaps)
	fmt.Fprintf(&b, "- Total time: %v\n", rep.Duration.Round(time.Second))
	b.WriteString(rep.scaleMarkdown())
	return b.String()
}

// scaleMarkdown is the scale table, and with --scale-warm the table of the warm
// restarts; empty without --scale.
func (rep *report) scaleMarkdown() string {
	if len(rep.Scale) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("\n### Scale: contexts and objects\n\n")
	p("One run per row. Contexts beyond the number of clusters are more contexts on the same apiservers, each a cluster of its own to both contenders. ")
	if n := rep.Scale[0].Namespaces; n > 0 {
		p("Each context caches the pods and configmaps of %d of the %d bench namespaces (`--scale-namespaces %d`), so that the object count grows from about %d to %d with the contexts. ",
			n, benchNamespaces, n, rep.Scale[0].Fleetwatch.Total, rep.Scale[len(rep.Scale)-1].Fleetwatch.Total)
	}
	if rep.Options.scaleCompact {
		p("fleetwatch keeps a compact fleet (`--scale-compact`). ")
	}
	if rep.Options.scaleMemLimit != "" {
		p("fleetwatch runs with GOMEMLIMIT=%s. ", rep.Options.scaleMemLimit)
	}
	p("Time from process start to synced, also per cached object; heap after GC per cached object.\n\n")
	p("| contexts | objects | client-go sync (s) | fleetwatch sync (s) | ratio | client-go sync/object (µs) | fleetwatch sync/object (µs) | client-go heap/object (KiB) | fleetwatch heap/object (KiB) | ratio | client-go peak RSS (MiB) | fleetwatch peak RSS (MiB) | ratio |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Scale {
		cg, fw := s.ClientGo, s.Fleetwatch
		if cg == nil {
			p("| %d | %d | — | %.2f | — | — | %.0f | — | %.2f | — | — | %.0f | — |\n", s.Contexts, fw.Total, fw.SyncedSec,
				1e6*fw.SyncedSec/float64(max(fw.Total, 1)), perObject(fw.HeapAfterGC, fw), float64(fw.PeakRSS)/(1<<20))
			continue
		}
		p("| %d | %d | %.2f | %.2f | %s | %.0f | %.0f | %.2f | %.2f | %s | %.0f | %.0f | %s |\n", s.Contexts, fw.Total, cg.SyncedSec, fw.SyncedSec, formatRatio(fw.SyncedSec/cg.SyncedSec),
			1e6*cg.SyncedSec/float64(max(cg.Total, 1)), 1e6*fw.SyncedSec/float64(max(fw.Total, 1)),
			perObject(cg.HeapAfterGC, cg), perObject(fw.HeapAfterGC, fw), formatRatio(perObject(fw.HeapAfterGC, fw)/perObject(cg.HeapAfterGC, cg)),
			float64(cg.PeakRSS)/(1<<20), float64(fw.PeakRSS)/(1<<20), formatRatio(float64(fw.PeakRSS)/float64(cg.PeakRSS)))
	}
	if !slices.ContainsFunc(rep.Scale, func(s scaleResult) bool { return s.Warm != nil }) {
		return b.String()
	}
	p("\n#### Scale: warm restarts (`--scale-warm`)\n\n")
	p("fleetwatch synced cold with a snapshot, then restarted from it. *Complete* is process start → every object of the cold run readable (the snapshot loaded); *synced* is start → every watch resumed and the handler past the initial list. Objects re-sent are the objects the apiservers handed out as lists during the warm process's life.\n\n")
	p("| contexts | objects | snapshot (MiB) | cold sync (s) | cold RSS after sync (MiB) | cold peak RSS (MiB) | warm: complete (s) | warm: synced (s) | warm / cold sync | warm RSS after sync (MiB) | warm peak RSS (MiB) | objects re-sent | list requests |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Scale {
		if s.Warm == nil {
			continue
		}
		fw, w := s.Fleetwatch, s.Warm
		complete := "not complete"
		if w.LoadedObjects > 0 {
			complete = fmt.Sprintf("%.2f", w.LoadedSec)
		}
		p("| %d | %d | %.0f | %.2f | %.0f | %.0f | %s | %.2f | %s | %.0f | %.0f | %.0f | %.0f |\n", s.Contexts, fw.Total, float64(s.SnapshotBytes)/(1<<20),
			fw.SyncedSec, float64(fw.RSSAfterGC)/(1<<20), float64(fw.PeakRSS)/(1<<20), complete, w.SyncedSec, formatRatio(w.SyncedSec/fw.SyncedSec),
			float64(w.RSSAfterGC)/(1<<20), float64(w.PeakRSS)/(1<<20), s.WarmList.Objects, s.WarmList.Requests)
	}
	return b.String()
}

// shardRow is a row of the sharded table: a baseline, fleetwatch's value, their ratio.
type shardRow struct {
	name, format string
	base, value  float64
}

// shardRows are the rows of the sharded table: each planned move with the warm
// handover against the same move without it, and the fan-out lists through one of N
// replicas against one replica serving the whole fleet.
func (rep *report) shardRows() []shardRow {
	s := rep.Shards
	if s == nil {
		return nil
	}
	var rows []shardRow
	for i, w := range s.Warm {
		c := moveResult{Seconds: math.NaN(), Lists: listCounters{Objects: math.NaN()}}
		if i < len(s.Cold) {
			c = s.Cold[i]
		}
		rows = append(rows,
			shardRow{fmt.Sprintf("rebalance %d → %d replicas, %d of %d clusters moved (s)", w.From, w.To, w.Moved, s.Clusters), "%.2f", c.Seconds, w.Seconds},
			shardRow{fmt.Sprintf("objects re-sent by the apiservers, %d → %d replicas", w.From, w.To), "%.0f", c.Lists.Objects, w.Lists.Objects})
	}
	ms := func(vs []float64, q float64) float64 {
		if len(vs) == 0 {
			return math.NaN()
		}
		return 1000 * quantile(vs, q)
	}
	for _, q := range []struct {
		name string
		q    float64
	}{{"p50", 0.5}, {"p99", 0.99}} {
		rows = append(rows,
			shardRow{fmt.Sprintf("fan-out list, a page of 500 pods, %s (ms)", q.name), "%.1f", ms(s.SinglePage, q.q), ms(s.FanoutPage, q.q)},
			shardRow{fmt.Sprintf("fan-out list, all pods, %s (ms)", q.name), "%.1f", ms(s.SingleFull, q.q), ms(s.FanoutFull, q.q)})
	}
	return rows
}

// shardsMarkdown renders the sharded table.
func (rep *report) shardsMarkdown(p func(string, ...any)) {
	s := rep.Shards
	p("\n### Sharded replicas\n\n")
	p("One run (`--shards %d`): a home apiserver of its own for the Leases and the delegated authentication, the bench's %d clusters as members, and the real `fleetwatch serve` binary as replicas, each with its snapshot, serving HTTPS. ", s.Replicas, s.Clusters)
	p("A rebalance is the time from the change (the new replica started, or SIGTERM sent to the last one) to every replica ready and saying that each cluster is synced by its assigned replica; ")
	p("the objects re-sent are what the member apiservers handed out as lists or initial events meanwhile (docs/design.md, \"Measuring\"). The baseline of the moves is the same moves with the warm handover off (`shard.handoverTimeout: 0`). ")
	p("The fan-out lists go through %s, which owns %d of the %d clusters at %d replicas (pages: every page of `/clusters/*/api/v1/pods?limit=500`, 3 walks; all pods: the list without limit, 3 times), the baseline through the same replica alone, owning every cluster.\n\n", s.Via, s.ViaOwns, s.Clusters, s.Replicas)
	p("| measurement | baseline | fleetwatch | ratio |\n|---|---|---|---|\n")
	for _, r := range rep.shardRows() {
		p("| %s | "+r.format+" | "+r.format+" | %s |\n", r.name, r.base, r.value, formatRatio(r.value/r.base))
	}
}

// compressedNote says how this run's compressed library fleets compress (--compress-dict).
func (rep *report) compressedNote() string {
	if rep.Options.compressDict {
		return "The library's compressed fleet (rows *compact cache compressed*) compresses with a dictionary per resource (`persist.Codec{Compress: true, Dictionary: true}`); `fleetwatch serve`'s `cache.encoding compressed` does not (`compressed-dict` would)."
	}
	return "The library's compressed fleet (rows *compact cache compressed*) is `persist.Codec{Compress: true}`, without dictionaries (`--compress-dict=false`)."
}

// compressedEncoding is the example's --encoding of this run's compressed controllers.
func (rep *report) compressedEncoding() string {
	if rep.Options.compressDict {
		return "compressed-dict"
	}
	return "compressed"
}

// manyHeading is the heading of the many-clusters section.
var manyHeading = fmt.Sprintf("### Many clusters: contexts over %d apiservers", manyClusters)

// manyRowStart is how the many-clusters table's row of n contexts starts.
func manyRowStart(n int) string {
	p := manyPodsPerAPIServer(n)
	return fmt.Sprintf("| %d | %d | %d |", n, p, n*p)
}

// manyOnlyMarkdown is the report of --many-only: the run's header and the
// many-clusters section.
func (rep *report) manyOnlyMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `test/bench` on %s (--many-only).\n\n", rep.Date)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Machine: %s; load average %s\n", rep.Machine, rep.LoadAverage)
	var vs []string
	for _, k := range []string{"go", "client-go", "kube-apiserver", "etcd", "fleetwatch"} {
		vs = append(vs, fmt.Sprintf("%s %s", k, rep.Versions[k]))
	}
	fmt.Fprintf(&b, "- Versions: %s\n", strings.Join(vs, ", "))
	fmt.Fprintf(&b, "- Total time: %v\n", rep.Duration.Round(time.Second))
	b.WriteString(rep.manyMarkdown())
	return b.String()
}

// manyMarkdown is the many-clusters section: its table, and the raw measurements of
// each contender; empty without --many.
func (rep *report) manyMarkdown() string {
	if len(rep.Many) == 0 {
		return ""
	}
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	podBytes := rep.ManyPod.Cached
	p("\n%s\n\n", manyHeading)
	p("Issue #38: what each cluster costs when there are thousands. On %d apiservers of their own, each holding min(%d, %d / contexts) small pods in namespace `%s` (%.0f B of JSON as served, %.0f B without managedFields); ",
		manyClusters, manyPodsMax, manyMaxObjects, manyNamespace, rep.ManyPod.Served, podBytes)
	p("one kubeconfig of the row's contexts spread round-robin over them, each context a cluster of its own to both contenders, which run one after the other, each once the apiservers have been idle for half a second. ")
	p("In rows of at most %d contexts, which last seconds or less, as short as the host's hiccups, the contenders run %d times, interleaved (typed, cold, warm, typed...), and the row reports each contender's run of median synced time (the raw table lists every run's); larger rows run once. ", manyRepeatMaxContexts, manyRepeatRuns)
	p("*Typed*: client-go typed informers with the managedFields transform, one factory per context, pods only. ")
	p("*fleetwatch*: the real daemon, `fleetwatch serve`, in its default configuration but `--resources pods`, a snapshot file and `--sync-timeout %v` (so that ready means every context synced): cold from a removed snapshot, then warm from the file the cold run left. ", 2*manyRowTimeout)
	p("Synced is process start → every informer and handler synced (typed), `/readyz` 200 and the watch cache holding every object (fleetwatch); RSS is after GC, the peak in parentheses, measured once idle: the typed informers at once, fleetwatch once its snapshot has committed what the sync listed and its goroutines held steady for a second (its clusters' identity reads and first probes wait for the fleet to be ready), which took it the seconds of the raw table's *idle after* column. ")
	p("A contender not synced in %.0f s is recorded so, with its figures of that moment, and the warm run is skipped after a cold one that did not sync. ", manyRowTimeout.Seconds())
	p("Goroutines are counted then. *RSS beyond objects* is (RSS after GC − objects × %.0f B) / contexts: what a context costs beyond its objects' JSON, the process's fixed share included (it dominates at few contexts). ", podBytes)
	p("*Beyond the first row* is what each context past the first row's costs: (RSS − the first row's RSS − the objects past the first row's × %.0f B) / the contexts past the first row's, the process's fixed cost left out. ", podBytes)
	p("*Requests beyond lists and watches* are the apiservers' `apiserver_request_total` over the process's life, per context, less the LISTs and WATCHes of pods and configmaps and less the apiservers' own requests (their Lease renewals, their OpenAPI aggregation): discovery, identity lookups, health probes (fleetwatch probes each cluster every 30 s, so this grows with the process's life). ")
	p("*Objects re-sent* are those the apiservers handed out as lists or initial events during the warm run (0 when every watch resumes).\n\n")
	p("| contexts | pods per apiserver | objects | typed: synced (s) / RSS (MiB) | fleetwatch cold: synced (s) / RSS (MiB) | fleetwatch warm: synced (s) / RSS (MiB) | cold / typed: time, RSS | warm / cold: time | goroutines per context: fleetwatch, typed | RSS beyond objects per context (KiB): fleetwatch, typed | RSS per context beyond the first row (KiB): fleetwatch, typed | requests per context beyond lists and watches: cold, warm, typed | objects re-sent, warm |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, r := range rep.Many {
		n := float64(r.Contexts)
		perContext := func(x *Result, format string, f func(*Result) float64) string {
			if x == nil {
				return "—"
			}
			return fmt.Sprintf(format, f(x)/n)
		}
		beyond := func(x *Result) float64 {
			return (float64(x.RSSAfterGC) - float64(r.Objects)*podBytes) / 1024
		}
		first := rep.Many[0]
		marginal := func(x, base *Result) string {
			if i == 0 || x == nil || base == nil || r.Contexts == first.Contexts {
				return "—"
			}
			rss := float64(x.RSSAfterGC) - float64(base.RSSAfterGC) - float64(r.Objects-first.Objects)*podBytes
			return fmt.Sprintf("%.0f", rss/1024/float64(r.Contexts-first.Contexts))
		}
		requests := func(x *Result, l listCounters) string {
			if x == nil {
				return "—"
			}
			return fmt.Sprintf("%.1f", l.Others/n)
		}
		resent := "—"
		if r.Warm != nil {
			resent = fmt.Sprintf("%.0f", r.WarmList.Objects)
		}
		p("%s %s | %s | %s | %s, %s | %s | %s, %s | %s, %s | %s, %s | %s, %s, %s | %s |\n", manyRowStart(r.Contexts),
			manyCell(r.Typed), manyCell(r.Cold), manyCell(r.Warm),
			manyRatio(r.Cold, r.Typed, func(x *Result) float64 { return x.SyncedSec }),
			manyRatio(r.Cold, r.Typed, func(x *Result) float64 { return float64(x.RSSAfterGC) }),
			manyRatio(r.Warm, r.Cold, func(x *Result) float64 { return x.SyncedSec }),
			perContext(r.Cold, "%.1f", func(x *Result) float64 { return float64(x.Goroutines) }),
			perContext(r.Typed, "%.1f", func(x *Result) float64 { return float64(x.Goroutines) }),
			perContext(r.Cold, "%.0f", beyond), perContext(r.Typed, "%.0f", beyond),
			marginal(r.Cold, first.Cold), marginal(r.Typed, first.Typed),
			requests(r.Cold, r.ColdList), requests(r.Warm, r.WarmList), requests(r.Typed, r.TypedList), resent)
	}
	p("\nRaw measurements of the rows (of the run of median synced time, where a contender ran more than once): time from process start to synced, cached objects, CPU time up to sync, how long after synced it was idle, heap and RSS after GC once idle, peak RSS, goroutines, and the apiservers' figures during the process's life: requests beyond lists and watches, LIST requests, objects handed out as lists or initial events.\n\n")
	p("| contexts | contender | synced (s) | objects | CPU to sync (s) | idle after (s) | heap (MiB) | RSS (MiB) | peak RSS (MiB) | goroutines | requests beyond lists and watches | LIST requests | objects listed |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rep.Many {
		for _, c := range []struct {
			name string
			res  *Result
			list listCounters
			runs []float64
		}{{"typed informers", r.Typed, r.TypedList, r.TypedRuns}, {"fleetwatch serve, cold", r.Cold, r.ColdList, r.ColdRuns}, {"fleetwatch serve, warm", r.Warm, r.WarmList, r.WarmRuns}} {
			x := c.res
			if x == nil {
				p("| %d | %s | skipped: the cold run did not sync | | | | | | | | | | |\n", r.Contexts, c.name)
				continue
			}
			synced := fmt.Sprintf("%.2f", x.SyncedSec)
			if x.NotSyncedSec > 0 {
				synced = fmt.Sprintf("not synced in %.0f s", x.NotSyncedSec)
			}
			if len(c.runs) > 1 {
				runs := make([]string, len(c.runs))
				for i, sec := range c.runs {
					runs[i] = fmt.Sprintf("%.2f", sec)
				}
				synced += fmt.Sprintf(" (runs: %s)", strings.Join(runs, ", "))
			}
			p("| %d | %s | %s | %d | %.2f | %.1f | %.0f | %.0f | %.0f | %d | %.0f | %.0f | %.0f |\n", r.Contexts, c.name, synced, x.Total, x.CPUSyncSec, x.IdleSec,
				float64(x.HeapAfterGC)/(1<<20), float64(x.RSSAfterGC)/(1<<20), float64(x.PeakRSS)/(1<<20), x.Goroutines,
				c.list.Others, c.list.Requests, c.list.Objects)
		}
	}
	rep.manyShardsMarkdown(p)
	return b.String()
}

// manyShardsHeading is the heading of the sharded many-clusters table.
const manyShardsHeading = "#### Many clusters, sharded"

// manyShardsRowStart is how the sharded many-clusters table's row of n contexts
// starts.
func manyShardsRowStart(n, replicas int) string {
	return fmt.Sprintf("| %d | %d | %d |", n, n*manyPodsPerAPIServer(n), replicas)
}

// manyShardsMarkdown renders the sharded rows of the many-clusters section
// (--many-shards); nothing without them.
func (rep *report) manyShardsMarkdown(p func(string, ...any)) {
	rows := slices.DeleteFunc(slices.Clone(rep.Many), func(r manyResult) bool { return r.Sharded == nil })
	if len(rows) == 0 {
		return
	}
	p("\n%s\n\n", manyShardsHeading)
	p("Issue #33: after the row's contenders, `--many-shards N` runs N replicas of the real `fleetwatch serve` binary over the row's kubeconfig (rows of at most %d contexts), sharded, their Leases in a home apiserver of their own (a namespace per row), as the sharded phase runs them (HTTPS, delegated authentication, the warm handover on), with `shard.replicas: N`, `--resources pods` and a snapshot each, and `sync.timeout` %v. ", manyShardsMaxContexts, 2*manyRowTimeout)
	p("*Start together*: the N processes started at once (a StatefulSet with `podManagementPolicy: Parallel`), with no snapshot and no Lease; *settled* is from the first start to every replica answering `/readyz` 200 and listing every context `Synced` by the replica that rendezvous hashing assigns it, which also gives the clusters per replica. ")
	p("*Objects listed* are what the member apiservers handed out as lists or initial events during the start, against the row's objects (each context listed once: 1.00×). *Handovers* are the cluster Leases' takes beyond the first of each during the start (their `leaseTransitions`; 0 expected). ")
	p("*RSS* is each replica's after GC once idle, as for the daemon above; the sum is set against the row's `fleetwatch serve`, cold. ")
	p("*Home Leases* are the home apiserver's `apiserver_request_total` on leases, as the Lease protocol's simulation counts them: reads (GET, LIST) and writes per second, during the start and during %.0f s of steady state after it (the home apiserver's own identity Lease included, renewed every 10 s). ", manyShardsSteady.Seconds())
	p("*Restart together*: every replica stopped with SIGTERM at once and started again at once, on its snapshot; objects re-sent are what the member apiservers handed out meanwhile (0 when every watch resumes).\n\n")
	p("| contexts | objects | replicas | start together: settled (s) | clusters per replica | objects listed (× objects) | handovers | RSS per replica (MiB) | RSS summed (MiB) / one `fleetwatch serve` | home Leases, start: reads/s, writes/s | home Leases, steady: reads/s, writes/s | restart together: settled (s) | objects re-sent | handovers, restart |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		s := r.Sharded
		start := manyShardsRowStart(r.Contexts, s.Replicas)
		if s.Cold == nil {
			p("%s failed: %s | | | | | | | | | | |\n", start, s.Error)
			continue
		}
		c := s.Cold
		lo, hi := c.clusterRange()
		rlo, rhi, sum := c.rssRange()
		one := "—"
		if r.Cold != nil && r.Cold.NotSyncedSec == 0 {
			one = formatRatio(float64(sum) / float64(r.Cold.RSSAfterGC))
		}
		steady := "—"
		if s.SteadySec > 0 {
			steady = fmt.Sprintf("%.1f, %.1f", s.Steady.Reads/s.SteadySec, s.Steady.Writes/s.SteadySec)
		}
		warm := "—, —, —"
		if w := s.Warm; w != nil {
			warm = fmt.Sprintf("%.2f | %.0f | %d", w.Seconds, w.Lists.Objects, w.Handovers)
		} else {
			warm = "failed: " + s.Error + " | | "
		}
		p("%s %.2f | %d–%d | %.0f (%s) | %d | %.0f–%.0f | %.0f / %s | %.1f, %.1f | %s | %s |\n", start,
			c.Seconds, lo, hi, c.Lists.Objects, formatRatio(c.Lists.Objects/float64(r.Objects)), c.Handovers,
			mibf(rlo), mibf(rhi), mibf(sum), one, c.Leases.Reads/c.Seconds, c.Leases.Writes/c.Seconds, steady, warm)
	}
	p("\nRaw measurements of each replica at each start: the clusters it owns, its CPU time and peak RSS when the fleet settled, how long after that it was idle, its heap and RSS after GC and its goroutines then; and the home apiserver's Lease figures of each window.\n\n")
	p("| contexts | start | replica | clusters | CPU to settled (s) | peak RSS (MiB) | idle after (s) | heap (MiB) | RSS (MiB) | goroutines |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		for _, st := range []struct {
			name string
			s    *manyShardStart
		}{{"together", r.Sharded.Cold}, {"restart", r.Sharded.Warm}} {
			if st.s == nil {
				continue
			}
			for _, x := range st.s.Replicas {
				p("| %d | %s | %s | %d | %.2f | %.0f | %.1f | %.0f | %.0f | %d |\n", r.Contexts, st.name, x.ID, x.Clusters, x.CPUSec,
					mibf(x.PeakRSS), x.IdleSec, mibf(x.HeapAfterGC), mibf(x.RSSAfterGC), x.Goroutines)
			}
		}
	}
	p("\n| contexts | window | seconds | Lease reads | Lease writes | Leases listed | Lease watch events | per second |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		s := r.Sharded
		for _, w := range []struct {
			name string
			l    leaseCounters
			sec  float64
		}{{"start together", s.start(false).Leases, s.start(false).Seconds}, {"steady state", s.Steady, s.SteadySec}, {"restart together", s.start(true).Leases, s.start(true).Seconds}} {
			if w.sec == 0 {
				continue
			}
			p("| %d | %s | %.1f | %.0f | %.0f | %.0f | %.0f | %s |\n", r.Contexts, w.name, w.sec, w.l.Reads, w.l.Writes, w.l.Listed, w.l.WatchEvents, w.l.rates(w.sec))
		}
	}
}

// mibf is b in MiB.
func mibf(b uint64) float64 { return float64(b) / (1 << 20) }

// manyCell is a contender's cell of the many-clusters table: time to synced and RSS
// after GC, with the peak RSS; or how long it did not sync, with its objects then.
func manyCell(x *Result) string {
	if x == nil {
		return "—"
	}
	mem := fmt.Sprintf("%.0f (%.0f)", float64(x.RSSAfterGC)/(1<<20), float64(x.PeakRSS)/(1<<20))
	if x.NotSyncedSec > 0 {
		return fmt.Sprintf("not synced in %.0f s (%d objects) / %s", x.NotSyncedSec, x.Total, mem)
	}
	return fmt.Sprintf("%.2f / %s", x.SyncedSec, mem)
}

// manyRatio is f(a) / f(b), or "—" unless both synced.
func manyRatio(a, b *Result, f func(*Result) float64) string {
	if a == nil || b == nil || a.NotSyncedSec > 0 || b.NotSyncedSec > 0 {
		return "—"
	}
	return formatRatio(f(a) / f(b))
}
