package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// The small-pods section (--small-pods N, issue #37) measures the default fleets on
// small objects, where fixed and per-object overheads weigh more than on the large pods
// of the runs. It starts an env of its own, --clusters apiservers in
// <dir>/env-small-<clusters>c-<N>p, each holding N small pods (testenv.SmallPod) spread
// over the bench namespaces, and runs, --runs times in rotating order, each in its own
// process over pods alone: typed informers with the managedFields transform (the
// strongest peer), the library's plain fleet (Encoding objects), its compact fleet (the
// default, persist.Codec{}), and `fleetwatch serve` in its default cache encoding.

// smallRun is one run of the small-pods section.
type smallRun struct {
	Typed      *Result `json:"typed"`
	Fleetwatch *Result `json:"fleetwatch"`
	Compact    *Result `json:"compact"`
	Serve      *Result `json:"serve"`
}

// smallHeading is the heading of the small-pods section.
const smallHeading = "### Small pods: the default fleets next to typed informers"

// smallPhase loads the small pods into an env of its own, started for the phase and
// stopped after it, runs the section's contenders --runs times and puts them in rep,
// with the size of a pod.
func (d *driver) smallPhase(ctx context.Context, rep *report) error {
	o := d.opts
	dir := filepath.Join(d.workDir, fmt.Sprintf("env-small-%dc-%dp", o.clusters, o.smallPods))
	log.Printf("small: starting %d clusters in %s", o.clusters, dir)
	env, err := testenv.Start(ctx, testenv.Options{Clusters: o.clusters, Dir: dir})
	if err != nil {
		return err
	}
	defer env.Close()
	if rep.Versions == nil {
		rep.Versions = versions(ctx, env)
	}
	if err := load(ctx, env, dataset{pods: o.smallPods, smallPods: true}, o.loadWorkers); err != nil {
		return err
	}
	sizes, err := jsonSizes(ctx, env.Clusters[0], "bench-")
	if err != nil {
		return err
	}
	rep.SmallPod = sizes["pods"]
	// A driver of its own: its contenders, and the apiservers' figures around them,
	// are this env's.
	sd := &driver{opts: o, env: env, exe: d.exe, workDir: d.workDir, logDir: d.logDir, serveBin: d.serveBin}
	for r := range o.runs {
		log.Printf("small: run %d/%d", r+1, o.runs)
		sr, err := sd.smallRun(ctx, r)
		if err != nil {
			return fmt.Errorf("run %d: %w", r+1, err)
		}
		rep.Small = append(rep.Small, sr)
	}
	return nil
}

// smallRun runs each contender of the section once, in an order that rotates with r.
func (d *driver) smallRun(ctx context.Context, r int) (*smallRun, error) {
	sr := &smallRun{}
	// The library's contenders of the last run are profiled with --profile.
	profile := r == d.opts.runs-1 && d.opts.profileDir != ""
	name := func(s string) string { return fmt.Sprintf("small%d-%s", r+1, s) }
	pods := []string{"--resources", "pods"}
	units := []struct {
		name string
		res  **Result
		args []string
	}{
		{"clientgo-typed", &sr.Typed, []string{"--impl", implClientGoTyped}},
		{"fleetwatch", &sr.Fleetwatch, []string{"--impl", implFleetwatch}},
		{"fleetwatch-compact", &sr.Compact, []string{"--impl", implFleetwatch, "--compact"}},
		{"serve", &sr.Serve, nil},
	}
	for k := range units {
		u := units[(k+r)%len(units)]
		var err error
		if u.args == nil {
			*u.res, _, err = d.serveContend(ctx, name(u.name), serveOptions{resources: "pods", idle: true})
		} else {
			*u.res, _, err = d.contend(ctx, name(u.name), modeSync, profile, append(u.args, pods...)...)
		}
		if err != nil {
			return nil, err
		}
	}
	return sr, nil
}

// perSmall collects f over the small-pods section's runs.
func (rep *report) perSmall(f func(*smallRun) float64) []float64 {
	out := make([]float64, len(rep.Small))
	for i, r := range rep.Small {
		out[i] = f(r)
	}
	return out
}

// smallFigures compare each default fleet on small pods with typed informers and the
// managedFields transform, with the goals of the large pods' peer table.
func (rep *report) smallFigures() []figure {
	var out []figure
	for _, c := range []struct {
		what string
		mine func(*smallRun) *Result
	}{
		{"Small pods, fleetwatch, plain fleet, vs typed informers + transform", func(r *smallRun) *Result { return r.Fleetwatch }},
		{"Small pods, fleetwatch, compact fleet, vs typed informers + transform", func(r *smallRun) *Result { return r.Compact }},
		{"Small pods, `fleetwatch serve`, default cache.encoding, vs typed informers + transform", func(r *smallRun) *Result { return r.Serve }},
	} {
		fig := func(name, format string, v func(*Result) float64, limit float64) figure {
			f := figure{name: fmt.Sprintf("%s: %s", c.what, name), format: format,
				base:  rep.perSmall(func(r *smallRun) float64 { return v(r.Typed) }),
				value: rep.perSmall(func(r *smallRun) float64 { return v(c.mine(r)) })}
			if limit > 0 {
				f.goal, f.ok = fmt.Sprintf("≤ %g", limit), atMost(limit)
			}
			return f
		}
		out = append(out,
			fig("cold sync (s)", "%.2f", func(x *Result) float64 { return x.SyncedSec }, 1.0),
			fig("heap per cached object after GC (KiB)", "%.2f", func(x *Result) float64 { return perObject(x.HeapAfterGC, x) }, 0.5),
			fig("RSS per cached object after GC (KiB)", "%.2f", func(x *Result) float64 { return perObject(x.RSSAfterGC, x) }, 0.5),
			fig("peak RSS during the initial sync (MiB)", "%.0f", func(x *Result) float64 { return float64(x.PeakRSS) / (1 << 20) }, 0),
			fig("CPU time to synced (s)", "%.2f", func(x *Result) float64 { return x.CPUSyncSec }, 0),
		)
	}
	return out
}

// smallMarkdown is the small-pods section; empty without --small-pods.
func (rep *report) smallMarkdown() string {
	if len(rep.Small) == 0 {
		return ""
	}
	var b strings.Builder
	o := rep.Options
	fmt.Fprintf(&b, "\n%s\n\n", smallHeading)
	fmt.Fprintf(&b, "%d clusters × %d small pods (%.0f B of JSON as served, %.0f B as cached), pods alone, in an env of their own; %d runs, the contenders in rotating order, each in its own process. The peer is typed informers with the transform dropping managedFields; the plain and compact fleets are the library's (`fleetwatch.NewManager` with `Encoding: EncodingObjects`, and with its default, `EncodingCompact`), the daemon runs in its default configuration, its memory measured once it is idle after the sync (its snapshot committed, its goroutines steady for a second: the work that follows its sync, done).\n\n",
		o.clusters, o.smallPods, rep.SmallPod.Served, rep.SmallPod.Cached, len(rep.Small))
	b.WriteString("| Figure | typed informers + transform | fleetwatch | ratio per run | ratio | goal | met |\n|---|---|---|---|---|---|---|\n")
	for _, f := range rep.smallFigures() {
		b.WriteString(f.row())
	}
	return b.String()
}

// smallOnlyMarkdown is the report of --small-only: the run's header and the small-pods
// section.
func (rep *report) smallOnlyMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Generated by `test/bench` on %s (--small-only).\n\n", rep.Date)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Machine: %s; load average %s\n", rep.Machine, rep.LoadAverage)
	fmt.Fprintf(&b, "- Total time: %v\n", rep.Duration.Round(time.Second))
	b.WriteString(rep.smallMarkdown())
	return b.String()
}
