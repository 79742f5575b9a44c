package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// driverOptions are the driver's flags.
type driverOptions struct {
	pods, configMaps, clusters, runs int
	dir, out, profileDir             string
	loadWorkers                      int
	writeRate                        float64
	writeDuration                    time.Duration
	scale                            []int
	// scaleNamespaces is the number of bench namespaces that each context caches in
	// the scale runs; 0 means all.
	scaleNamespaces int
	// scaleOnly skips the runs: the scale table alone, printed with its own header and
	// never written to --out (it would replace the whole generated section).
	scaleOnly bool
	// scaleClientGo runs client-go next to fleetwatch in the scale runs; without it the
	// rows are fleetwatch's alone (a million objects would need about 50 GiB of client-go).
	scaleClientGo bool
	// scaleCompact gives the scale runs' fleetwatch a compact fleet (--compact).
	scaleCompact bool
	// compressDict gives the compressed contenders a dictionary per resource (the
	// example's default; --compress-dict=false measures them without).
	compressDict bool
	// scaleWarm gives each scale run a snapshot, then restarts fleetwatch warm from it.
	scaleWarm bool
	// scaleMemLimit is the GOMEMLIMIT of the scale runs' fleetwatch processes; empty:
	// none.
	scaleMemLimit string
	// catchUpGap is how long the catch-up restart waits after the changes it must catch
	// up with.
	catchUpGap time.Duration
	// watch runs the watch phase.
	watch bool
	// watchCompact adds the compact fleet asking for JSON only to the watch phase.
	watchCompact bool
	// controllers runs the controller contenders (examples/multicluster-runtime).
	controllers bool
	// verbosity is the klog verbosity of the contenders' logs.
	verbosity int
	// check fails the invocation if the report lacks a row (see report.missingRows).
	check bool
	// searches is the number of timed searches after the plain fleetwatch sync.
	searches int
	// shards is the number of replicas of the sharded phase; 0: none.
	shards int
	// contenders, if not empty, are the only sync contenders that run (syncUnitNames);
	// the report is then not written, only each contender's line and report.json.
	contenders []string
	// many are the numbers of contexts of the many-clusters section's rows (many.go);
	// empty: no such section.
	many []int
	// manyOnly skips everything but the many-clusters section, whose table alone is
	// printed; the bench's clusters are not even started.
	manyOnly bool
	// manyShards is the number of replicas of the sharded many-clusters rows
	// (manyshard.go); 0: none.
	manyShards int
	// smallPods is the number of small pods per cluster of the small-pods section
	// (small.go); 0: no such section.
	smallPods int
	// smallOnly skips everything but the small-pods section, whose table alone is
	// printed; the bench's clusters are not even started.
	smallOnly bool
}

// syncUnitNames are the sync contenders of a run, in the order of the first run, as
// --contenders names them; "snapshot" is the cold, warm and catch-up runs of the
// snapshot.
var syncUnitNames = []string{"clientgo", "clientgo-stripped", "clientgo-typed", "clientgo-metadata", "fleetwatch", "fleetwatch-metadata", "fleetwatch-compact", "fleetwatch-compressed", "serve-objects", "serve-compact", "serve-compressed", "fleetwatch-metadata-compact", "fleetwatch-json", "fleetwatch-compact-json", "snapshot"}

// driver runs the contenders against one Env.
type driver struct {
	opts    driverOptions
	env     *testenv.Env
	exe     string
	workDir string
	logDir  string
	stamper *stamper
	// mcrExample is the built examples/multicluster-runtime; empty without --controllers.
	mcrExample string
	// serveBin is the daemon built for the serve contenders (buildServe).
	serveBin string
	// stampOffset moves the stamped pods along from one watch to the next.
	stampOffset int
	// contenderEnv is added to the environment of the next contenders (GOMEMLIMIT).
	contenderEnv []string
}

// listCounters are the apiservers' list figures, summed over clusters and resources.
type listCounters struct {
	// Requests counts LIST requests.
	Requests float64 `json:"requests"`
	// Others counts the requests other than the LISTs and WATCHes of the bench
	// resources and the apiservers' own (apiserverOwnRequests), from
	// apiserver_request_total: discovery, GETs such as a cluster's identity, health
	// probes.
	Others float64 `json:"others"`
	// Objects counts the objects handed out as lists, streaming lists included: the sum
	// of InitEvents, CacheList and StorageList.
	Objects float64 `json:"objects"`
	// InitEvents are apiserver_init_events_total: the objects of streaming lists, and the
	// events replayed to a watch that starts from an older resourceVersion.
	InitEvents float64 `json:"initEvents"`
	// CacheList and StorageList are the objects returned by lists served from the watch
	// cache and from etcd; the latter include the apiserver's own (its watch cache
	// filling up again).
	CacheList   float64 `json:"cacheList"`
	StorageList float64 `json:"storageList"`
}

// apiserverOwnRequests are the series of apiserver_request_total that an idle
// apiserver of the testenv adds by itself: the renewals of its identity Lease, and the
// GETs of its OpenAPI v3 aggregation. No contender of the bench makes such requests.
var apiserverOwnRequests = []map[string]string{{"resource": "leases"}, {"subresource": "openapi/v3"}}

func (c listCounters) minus(o listCounters) listCounters {
	return listCounters{
		Requests: c.Requests - o.Requests, Others: c.Others - o.Others, Objects: c.Objects - o.Objects,
		InitEvents: c.InitEvents - o.InitEvents, CacheList: c.CacheList - o.CacheList, StorageList: c.StorageList - o.StorageList,
	}
}

func runDriver(args []string) error {
	var o driverOptions
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.pods, "pods", 1000, "pods per cluster")
	fs.IntVar(&o.configMaps, "configmaps", 300, "configmaps per cluster")
	fs.IntVar(&o.clusters, "clusters", 3, "clusters (each its own etcd and kube-apiserver)")
	fs.IntVar(&o.runs, "runs", 3, "runs of every measurement")
	fs.StringVar(&o.dir, "dir", "", "directory for the clusters, snapshots and logs; the clusters' data is kept there and reused by the next invocation with the same sizes (default: a temporary directory, removed)")
	fs.StringVar(&o.out, "out", "", "Markdown file to write the results to, between the bench:begin and bench:end markers if it has them (default: stdout only)")
	fs.StringVar(&o.profileDir, "profile", "", "write CPU and heap profiles of every contender of the last run to this directory, and CPU profiles of its watch window")
	fs.IntVar(&o.loadWorkers, "load-workers", 24, "concurrent writers per cluster while loading")
	fs.Float64Var(&o.writeRate, "write-rate", 60, "writes per second, over all clusters, in the watch phase")
	fs.DurationVar(&o.writeDuration, "write-duration", 20*time.Second, "duration of the writes of each watch phase")
	fs.DurationVar(&o.catchUpGap, "catch-up-gap", 0, "time between the changes made while fleetwatch is down and its warm restart; beyond the apiservers' watch cache history (about 75s) it must relist")
	fs.IntVar(&o.searches, "searches", 200, "name-substring searches through the HTTP API timed after the plain fleetwatch sync (0: none)")
	fs.BoolVar(&o.scaleOnly, "scale-only", false, "skip the runs: print the scale table alone (not written to --out)")
	fs.BoolVar(&o.scaleClientGo, "scale-clientgo", true, "run client-go next to fleetwatch in the scale runs")
	fs.BoolVar(&o.compressDict, "compress-dict", true, "give the compressed contenders (fleetwatch-compressed, the controllers' fleetwatch-compressed) a compression dictionary per resource (persist.Codec{Compress: true, Dictionary: true}; cache.encoding compressed-dict)")
	fs.BoolVar(&o.scaleCompact, "scale-compact", true, "give the scale runs' fleetwatch a compact fleet (the library's default; false: Encoding objects)")
	fs.BoolVar(&o.scaleWarm, "scale-warm", false, "in the scale runs, sync fleetwatch with a snapshot, then restart it warm from that snapshot")
	fs.StringVar(&o.scaleMemLimit, "scale-memlimit", "", "GOMEMLIMIT of the scale runs' fleetwatch processes, such as 7GiB (default: none)")
	fs.IntVar(&o.shards, "shards", 0, "run the sharded phase with this many replicas of the fleetwatch binary (at least 2): planned moves N-1 → N → N-1 with and without the warm handover, and fan-out lists through a replica against a single replica (default: none)")
	fs.BoolVar(&o.watch, "watch", true, "run the watch phase (latency, CPU per event)")
	fs.BoolVar(&o.watchCompact, "watch-compact", false, "add to the watch phase fleetwatch's compact fleet asking the apiservers for JSON only (its watches stay protobuf), beside the one asking for protobuf")
	fs.BoolVar(&o.controllers, "controllers", true, "run the controller contenders: examples/multicluster-runtime on multicluster-runtime's kubeconfig provider and on fleetwatch's")
	fs.BoolVar(&o.check, "check", false, "fail if the report lacks a row or a measurement (a smoke test of the harness; no ratio is asserted)")
	fs.IntVar(&o.verbosity, "v", 0, "klog verbosity of the contenders' logs in <dir>/logs (4 shows each watch that ends, and why)")
	fs.IntVar(&o.scaleNamespaces, "scale-namespaces", 0, fmt.Sprintf("in the scale runs, each context caches the objects of this many of the %d bench namespaces (default: all)", benchNamespaces))
	fs.Func("contenders", "comma-separated sync contenders to run, of "+strings.Join(syncUnitNames, ", ")+" (default: all but fleetwatch-json and fleetwatch-compact-json); with it, no report is written, only each contender's line and the logs' report.json", func(v string) error {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); !slices.Contains(syncUnitNames, f) {
				return fmt.Errorf("unknown contender %q", f)
			}
			o.contenders = append(o.contenders, f)
		}
		return nil
	})
	fs.Func("scale", "comma-separated numbers of contexts for the scale table, such as 1,3,10 (default: no scale table)", func(v string) (err error) {
		o.scale, err = parseCounts(v)
		return err
	})
	fs.Func("many", fmt.Sprintf("comma-separated numbers of contexts for the many-clusters table, such as 10,100,1000, over %d apiservers of their own (default: no such table)", manyClusters), func(v string) (err error) {
		o.many, err = parseCounts(v)
		return err
	})
	fs.IntVar(&o.manyShards, "many-shards", 0, fmt.Sprintf("after each row of --many of at most %d contexts, run this many replicas of the fleetwatch binary, sharded, over its kubeconfig (at least 2): started together, a minute of steady state, restarted together (default: none)", manyShardsMaxContexts))
	fs.BoolVar(&o.manyOnly, "many-only", false, "skip everything else: print the many-clusters table alone (not written to --out), without starting the bench's clusters")
	fs.IntVar(&o.smallPods, "small-pods", 0, "small pods (about 1 KB of JSON) per cluster of the small-pods section, in clusters of their own: typed informers against the library's plain and compact fleets and fleetwatch serve (default: no such section)")
	fs.BoolVar(&o.smallOnly, "small-only", false, "skip everything else: print the small-pods table alone (not written to --out), without starting the bench's clusters")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.pods <= 0 || o.clusters <= 0 || o.runs <= 0 || o.writeRate <= 0 {
		return errors.New("--pods, --clusters, --runs and --write-rate must be positive")
	}
	if o.shards == 1 || o.shards < 0 {
		return errors.New("--shards must be 0 (none) or at least 2")
	}
	if o.manyShards == 1 || o.manyShards < 0 {
		return errors.New("--many-shards must be 0 (none) or at least 2")
	}
	if o.manyShards > 0 && !slices.ContainsFunc(o.many, func(n int) bool { return n <= manyShardsMaxContexts }) {
		return fmt.Errorf("--many-shards needs a row of --many of at most %d contexts", manyShardsMaxContexts)
	}
	if o.scaleNamespaces < 0 || o.scaleNamespaces > benchNamespaces {
		return fmt.Errorf("--scale-namespaces must be from 0 to %d", benchNamespaces)
	}
	if o.scaleOnly && (len(o.scale) == 0 || o.out != "" || o.check || len(o.many) > 0) {
		return errors.New("--scale-only needs --scale, and prints to stdout only: not with --out, --check or --many")
	}
	if o.manyOnly && (len(o.many) == 0 || o.out != "" || o.check || o.scaleOnly) {
		return errors.New("--many-only needs --many, and prints to stdout only: not with --out, --check or --scale-only")
	}
	if o.smallPods < 0 {
		return errors.New("--small-pods must not be negative")
	}
	if o.smallOnly && (o.smallPods == 0 || o.out != "" || o.check || o.scaleOnly || o.manyOnly) {
		return errors.New("--small-only needs --small-pods, and prints to stdout only: not with --out, --check, --scale-only or --many-only")
	}
	command := "go run ./test/bench " + strings.Join(args, " ")
	log.SetFlags(log.Ltime)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	d := &driver{opts: o}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	d.exe = exe
	d.workDir = o.dir
	if d.workDir == "" {
		if d.workDir, err = os.MkdirTemp("", "fleetwatch-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(d.workDir)
	}
	if d.workDir, err = filepath.Abs(d.workDir); err != nil {
		return err
	}
	d.logDir = filepath.Join(d.workDir, "logs", time.Now().Format("20060102-150405"))
	if err := os.MkdirAll(d.logDir, 0o700); err != nil {
		return err
	}
	started := time.Now()
	loadBefore := loadAverage()
	rep := &report{
		Command: command,
		Machine: machine(),
		Date:    started.UTC().Format("2006-01-02 15:04 MST"),
		Options: o,
	}
	if o.manyOnly {
		if d.serveBin, err = buildServe(d.workDir); err != nil {
			return err
		}
		if err := d.manyPhase(ctx, rep); err != nil {
			return fmt.Errorf("many: %w", err)
		}
		rep.Duration = time.Since(started)
		rep.LoadAverage = loadBefore + " at start, " + loadAverage() + " at end"
		fmt.Print(rep.manyOnlyMarkdown())
		return d.saveReport(rep)
	}
	if o.smallOnly {
		if d.serveBin, err = buildServe(d.workDir); err != nil {
			return err
		}
		if err := d.smallPhase(ctx, rep); err != nil {
			return fmt.Errorf("small: %w", err)
		}
		rep.Duration = time.Since(started)
		rep.LoadAverage = loadBefore + " at start, " + loadAverage() + " at end"
		fmt.Print(rep.smallOnlyMarkdown())
		return d.saveReport(rep)
	}

	envDir := filepath.Join(d.workDir, fmt.Sprintf("env-%dc-%dp-%dcm", o.clusters, o.pods, o.configMaps))
	log.Printf("starting %d clusters in %s", o.clusters, envDir)
	env, err := testenv.Start(ctx, testenv.Options{Clusters: o.clusters, Dir: envDir})
	if err != nil {
		return err
	}
	defer env.Close()
	d.env = env

	loadStart := time.Now()
	if err := load(ctx, env, dataset{pods: o.pods, configMaps: o.configMaps}, o.loadWorkers); err != nil {
		return err
	}
	loadTime := time.Since(loadStart)
	if d.stamper, err = newStamper(env, o.pods); err != nil {
		return err
	}
	if d.serveBin, err = buildServe(d.workDir); err != nil {
		return err
	}
	if o.controllers && !o.scaleOnly {
		if d.mcrExample, err = buildMCRExample(d.workDir); err != nil {
			return err
		}
		if err := d.mcrSetup(ctx); err != nil {
			return err
		}
	}

	rep.Versions = versions(ctx, env)
	rep.LoadTime = loadTime
	if rep.Sizes, err = jsonSizes(ctx, env.Clusters[0], "bench-"); err != nil {
		return err
	}
	if o.scaleOnly {
		// Only the scale table: the header says the run, the table says the rest.
		for _, n := range o.scale {
			log.Printf("scale: %d contexts", n)
			s, err := d.scale(ctx, n)
			if err != nil {
				return fmt.Errorf("scale %d: %w", n, err)
			}
			rep.Scale = append(rep.Scale, s)
		}
		rep.Duration = time.Since(started)
		rep.LoadAverage = loadBefore + " at start, " + loadAverage() + " at end"
		fmt.Print(rep.scaleOnlyMarkdown())
		return d.saveReport(rep)
	}
	for r := range o.runs {
		if o.scaleOnly {
			break
		}
		log.Printf("run %d/%d", r+1, o.runs)
		rr, err := d.run(ctx, r)
		if err != nil {
			return fmt.Errorf("run %d: %w", r+1, err)
		}
		rep.Runs = append(rep.Runs, rr)
	}
	if o.smallPods > 0 {
		if err := d.smallPhase(ctx, rep); err != nil {
			return fmt.Errorf("small: %w", err)
		}
	}
	for _, n := range o.scale {
		log.Printf("scale: %d contexts", n)
		s, err := d.scale(ctx, n)
		if err != nil {
			return fmt.Errorf("scale %d: %w", n, err)
		}
		rep.Scale = append(rep.Scale, s)
	}
	if o.shards > 0 {
		log.Printf("shards: %d replicas", o.shards)
		if rep.Shards, err = d.shards(ctx, o.shards); err != nil {
			return fmt.Errorf("shards: %w", err)
		}
	}
	if len(o.many) > 0 {
		if err := d.manyPhase(ctx, rep); err != nil {
			return fmt.Errorf("many: %w", err)
		}
	}
	rep.Duration = time.Since(started)
	rep.LoadAverage = loadBefore + " at start, " + loadAverage() + " at end"

	if len(o.contenders) > 0 {
		log.Printf("--contenders: no report; the results are in %s", filepath.Join(d.logDir, "report.json"))
		return d.saveReport(rep)
	}
	md := rep.markdown()
	fmt.Print(md)
	if o.out != "" {
		if err := writeMarked(o.out, md); err != nil {
			return err
		}
		log.Printf("wrote %s", o.out)
	}
	if err := d.saveReport(rep); err != nil {
		return err
	}
	if o.check {
		if missing := rep.missingRows(md); len(missing) > 0 {
			return fmt.Errorf("--check: the report lacks %d rows:\n%s", len(missing), strings.Join(missing, "\n"))
		}
		log.Printf("--check: the report has every row")
	}
	return nil
}

// saveReport writes rep, every raw measurement, to report.json in the log directory.
func (d *driver) saveReport(rep *report) error {
	raw, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(d.logDir, "report.json"), raw, 0o600)
}

// parseCounts parses a comma-separated list of positive numbers of contexts.
func parseCounts(v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bad number of contexts %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// runResult holds everything one run measured.
type runResult struct {
	// Sync phase.
	ClientGo *Result `json:"clientGo"`
	// The stronger client-go peers: dynamic and typed informers that strip
	// managedFields, and the metadatainformer that does.
	ClientGoStripped *Result `json:"clientGoStripped"`
	ClientGoTyped    *Result `json:"clientGoTyped"`
	ClientGoMetadata *Result `json:"clientGoMetadata"`
	Fleetwatch       *Result `json:"fleetwatch"`
	Metadata         *Result `json:"metadataOnly"`
	// Compact is fleetwatch with full objects in a compact cache.
	Compact *Result `json:"compact"`
	// Serve and ServeCompact are the daemon, fleetwatch serve, with cache.encoding
	// objects and compact (serve.go).
	Serve        *Result `json:"serve,omitempty"`
	ServeCompact *Result `json:"serveCompact,omitempty"`
	// Compressed and ServeCompressed are the compact cache with its encodings
	// compressed (persist.Codec{Compress: true}; cache.encoding compressed).
	Compressed      *Result `json:"compressed,omitempty"`
	ServeCompressed *Result `json:"serveCompressed,omitempty"`
	// MetadataCompact is fleetwatch, metadata-only, in a compact cache.
	MetadataCompact *Result `json:"metadataCompact,omitempty"`
	// JSON and CompactJSON are fleetwatch and its compact cache asking the apiservers
	// for JSON only (Options.JSONOnly), run only when named in --contenders.
	JSON        *Result `json:"json,omitempty"`
	CompactJSON *Result `json:"compactJSON,omitempty"`
	// SnapCold and Warm are the library's default fleet (compact) with a snapshot:
	// a cold sync writing it, then a restart warm from it.
	SnapCold     *Result      `json:"snapshotCold"`
	Warm         *Result      `json:"warm"`
	ClientGoList listCounters `json:"clientGoList"`
	WarmList     listCounters `json:"warmList"`
	// CatchUp restarted warm after changes made while it was down.
	CatchUp     *Result      `json:"catchUp"`
	CatchUpList listCounters `json:"catchUpList"`
	// CatchUpResume is what the apiservers answered, just before the catch-up restart,
	// to a watch from each resourceVersion of the snapshot (see probeResume).
	CatchUpResume []resumeProbe `json:"catchUpResume"`
	Snapshot      persist.Info  `json:"snapshot"`
	// Encoded is the payload of the snapshot's objects, by resource key.
	Encoded map[string]resourceSize `json:"encoded"`
	// Controllers: examples/multicluster-runtime on the kubeconfig provider, and on
	// fleetwatch's, cold and warm, over a plain fleet and a compact one; nil without
	// --controllers.
	MCRKubeconfig     *mcrResult `json:"mcrKubeconfig,omitempty"`
	MCRFleetwatch     *mcrResult `json:"mcrFleetwatch,omitempty"`
	MCRFleetwatchWarm *mcrResult `json:"mcrFleetwatchWarm,omitempty"`
	// MCRCompact and MCRCompactWarm: fleetwatch's provider over a compact fleet.
	MCRCompact     *mcrResult `json:"mcrCompact,omitempty"`
	MCRCompactWarm *mcrResult `json:"mcrCompactWarm,omitempty"`
	// MCRCompressed and MCRCompressedWarm: over a compact fleet that compresses its
	// encodings (persist.Codec{Compress: true}).
	MCRCompressed     *mcrResult `json:"mcrCompressed,omitempty"`
	MCRCompressedWarm *mcrResult `json:"mcrCompressedWarm,omitempty"`
	// MCRPods*: the controller of Pods (--resource pods) on the kubeconfig provider,
	// and on fleetwatch's over a compressed fleet, cold and warm.
	MCRPodsKubeconfig     *mcrResult `json:"mcrPodsKubeconfig,omitempty"`
	MCRPodsCompressed     *mcrResult `json:"mcrPodsCompressed,omitempty"`
	MCRPodsCompressedWarm *mcrResult `json:"mcrPodsCompressedWarm,omitempty"`
	// MCRKubeconfigFew, MCRCompressedFew and MCRCompressedFewWarm: the controller of
	// ConfigMaps over the few of mcrFewNamespace (--namespaces), on the kubeconfig
	// provider and on fleetwatch's over a compressed fleet: what a process holds
	// besides its objects.
	MCRKubeconfigFew     *mcrResult `json:"mcrKubeconfigFew,omitempty"`
	MCRCompressedFew     *mcrResult `json:"mcrCompressedFew,omitempty"`
	MCRCompressedFewWarm *mcrResult `json:"mcrCompressedFewWarm,omitempty"`
	// Watch phase.
	ClientGoWatch   *Result `json:"clientGoWatch"`
	FleetwatchWatch *Result `json:"fleetwatchWatch"`
	// SnapWatch is the compact fleet (the default) with a snapshot.
	SnapWatch *Result `json:"snapshotWatch"`
	// ServeWatch is `fleetwatch serve` in its default configuration (servewatch.go):
	// its CPU time and events in the window, no latencies; nil in reports from before
	// it.
	ServeWatch *Result `json:"serveWatch,omitempty"`
	// CompactWatch and CompactJSONWatch are the compact fleet in the watch phase,
	// protobuf and JSON only (the latter with --watch-compact).
	CompactWatch     *Result `json:"compactWatch,omitempty"`
	CompactJSONWatch *Result `json:"compactJSONWatch,omitempty"`
	// HistoryWatch is fleetwatch + snapshot with its change log, in the same window as
	// SnapWatch, the same without; nil in reports from before it.
	HistoryWatch *Result `json:"historyWatch,omitempty"`
	// ClientGoTypedWatch is the strongest peer for full objects, typed informers with
	// the managedFields transform, in the same window; nil in reports from before it.
	ClientGoTypedWatch *Result `json:"clientGoTypedWatch,omitempty"`
	// WatchLists are the list figures of the watch window, over all the contenders
	// that ran it side by side, under the key "window": a relist in the window shows
	// here. (Reports from before the side-by-side window have one entry per contender,
	// for its whole life.)
	WatchLists map[string]listCounters `json:"watchLists"`
}

// run measures every contender once. The order of the contenders rotates from one run
// to the next, so that a drift of the machine does not always favour the same one.
func (d *driver) run(ctx context.Context, r int) (*runResult, error) {
	rr := &runResult{WatchLists: map[string]listCounters{}}
	snapPath := filepath.Join(d.workDir, "fleetwatch.db")
	profile := r == d.opts.runs-1 && d.opts.profileDir != ""
	name := func(s string) string { return fmt.Sprintf("run%d-%s", r+1, s) }
	var err error
	syncUnits := []func() error{
		func() error {
			rr.ClientGo, rr.ClientGoList, err = d.contend(ctx, name("clientgo"), modeSync, profile, "--impl", implClientGo)
			return err
		},
		func() error {
			rr.ClientGoStripped, _, err = d.contend(ctx, name("clientgo-stripped"), modeSync, profile, "--impl", implClientGoStripped)
			return err
		},
		func() error {
			rr.ClientGoTyped, _, err = d.contend(ctx, name("clientgo-typed"), modeSync, profile, "--impl", implClientGoTyped)
			return err
		},
		func() error {
			rr.ClientGoMetadata, _, err = d.contend(ctx, name("clientgo-metadata"), modeSync, profile, "--impl", implClientGoMetadata)
			return err
		},
		func() error {
			rr.Fleetwatch, _, err = d.contend(ctx, name("fleetwatch"), modeSync, profile, "--impl", implFleetwatch, "--search", strconv.Itoa(d.opts.searches))
			return err
		},
		func() error {
			rr.Metadata, _, err = d.contend(ctx, name("fleetwatch-metadata"), modeSync, profile, "--impl", implFleetwatch, "--metadata-only")
			return err
		},
		func() error {
			rr.Compact, _, err = d.contend(ctx, name("fleetwatch-compact"), modeSync, profile, "--impl", implFleetwatch, "--compact")
			return err
		},
		func() error {
			args := []string{"--impl", implFleetwatch, "--compact", "--compress"}
			if d.opts.compressDict {
				args = append(args, "--dict")
			}
			rr.Compressed, _, err = d.contend(ctx, name("fleetwatch-compressed"), modeSync, profile, args...)
			return err
		},
		func() error {
			rr.Serve, _, err = d.serveContend(ctx, name("serve-objects"), serveOptions{encoding: serveObjects})
			return err
		},
		func() error {
			rr.ServeCompact, _, err = d.serveContend(ctx, name("serve-compact"), serveOptions{encoding: serveCompact})
			return err
		},
		func() error {
			rr.ServeCompressed, _, err = d.serveContend(ctx, name("serve-compressed"), serveOptions{encoding: serveCompressed})
			return err
		},
		func() error {
			rr.MetadataCompact, _, err = d.contend(ctx, name("fleetwatch-metadata-compact"), modeSync, profile, "--impl", implFleetwatch, "--metadata-only", "--compact")
			return err
		},
		func() error {
			rr.JSON, _, err = d.contend(ctx, name("fleetwatch-json"), modeSync, profile, "--impl", implFleetwatch, "--json-only")
			return err
		},
		func() error {
			rr.CompactJSON, _, err = d.contend(ctx, name("fleetwatch-compact-json"), modeSync, profile, "--impl", implFleetwatch, "--compact", "--json-only")
			return err
		},
		func() error {
			// The apiservers start afresh, so that the catch-up restart below finds their
			// watch caches in the same state whatever ran before it (see restartAPIServers).
			if err := d.restartAPIServers(ctx); err != nil {
				return err
			}
			for _, p := range []string{snapPath, snapPath + "-lock"} {
				if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
					return err
				}
			}
			if rr.SnapCold, _, err = d.contend(ctx, name("fleetwatch-snapshot-cold"), modeSync, profile, "--impl", implFleetwatch, "--compact", "--snapshot", snapPath); err != nil {
				return err
			}
			if rr.Snapshot, err = inspect(snapPath); err != nil {
				return err
			}
			if rr.Encoded, err = encodedSizes(snapPath); err != nil {
				return err
			}
			rr.Warm, rr.WarmList, err = d.contend(ctx, name("fleetwatch-snapshot-warm"), modeSync, profile,
				"--impl", implFleetwatch, "--compact", "--snapshot", snapPath, "--expect", strconv.Itoa(rr.SnapCold.Total))
			if err != nil {
				return err
			}
			// Changes while fleetwatch is down, then a warm restart that must catch up.
			n, err := d.stamp(ctx)
			if err != nil {
				return err
			}
			time.Sleep(d.opts.catchUpGap)
			if rr.CatchUpResume, err = d.probeResume(ctx, snapPath); err != nil {
				return err
			}
			for _, p := range rr.CatchUpResume {
				if !p.Resumes {
					log.Printf("%s: %s", name("catch-up"), p)
				}
			}
			rr.CatchUp, rr.CatchUpList, err = d.contend(ctx, name("fleetwatch-snapshot-catchup"), modeSync, profile,
				"--impl", implFleetwatch, "--compact", "--snapshot", snapPath, "--expect", strconv.Itoa(rr.SnapCold.Total), "--catch-up", strconv.Itoa(n))
			return err
		},
	}
	if len(syncUnits) != len(syncUnitNames) {
		return nil, fmt.Errorf("%d sync contenders, %d names in syncUnitNames", len(syncUnits), len(syncUnitNames))
	}
	for k := range syncUnits {
		i := (k + r) % len(syncUnits)
		if !d.runsUnit(syncUnitNames[i]) {
			continue
		}
		if err := syncUnits[i](); err != nil {
			return nil, err
		}
	}
	if d.mcrExample != "" {
		if err := d.mcrPhase(ctx, r, rr); err != nil {
			return nil, err
		}
	}
	if d.opts.watch {
		if err := d.watchPhase(ctx, r, rr); err != nil {
			return nil, err
		}
	}
	return rr, nil
}

// runsUnit reports whether the sync contender name (syncUnitNames) runs.
func (d *driver) runsUnit(name string) bool {
	if len(d.opts.contenders) > 0 {
		return slices.Contains(d.opts.contenders, name)
	}
	switch name {
	case "fleetwatch-json", "fleetwatch-compact-json":
		return false
	}
	return true
}

// restartAPIServers restarts every apiserver and waits until each serves the bench
// resources from its watch cache.
//
// The catch-up restart resumes each watch from the snapshot's resourceVersion. A watch
// cache replays changes from any version since it last listed, until it drops an event
// from its ring; from then on, only from its oldest event on, even if nothing of that
// resource changed in between. It drops events when the ring is full, and halves the
// ring when its newest quarter is older than 75 s. So if a quarter of the pods' ring is
// older than 75 s when the first change arrives after the cold run (after a load, or a
// watch phase followed by long enough sync runs), the ring drops everything before that
// change, and the resume gets 410 Gone: the relists of the run of 2026-11-23 18:15
// (fleetwatch 1259569), in run 1 after the load and in run 2 after its sync runs; the
// probe before the catch-up showed "too old resource version: 8743 (8745)". Whether that
// happened depended on how long the units before it took. A restarted apiserver's ring
// starts empty, and the changes of the catch-up fit in it.
func (d *driver) restartAPIServers(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range d.env.Clusters {
		g.Go(func() error {
			if err := c.RestartAPIServer(gctx); err != nil {
				return fmt.Errorf("restarting the apiserver of %s: %w", c.Name, err)
			}
			zero := int64(1)
			for _, gvr := range benchGVRs {
				if _, err := c.Dynamic().Resource(gvr).List(gctx, metav1.ListOptions{ResourceVersion: "0", Limit: zero}); err != nil {
					return fmt.Errorf("listing %s of %s after its restart: %w", gvr.Resource, c.Name, err)
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// scale syncs both contenders once on a kubeconfig with n contexts, spread round-robin
// over the clusters.
func (d *driver) scale(ctx context.Context, n int) (scaleResult, error) {
	path := filepath.Join(d.workDir, fmt.Sprintf("kubeconfig-%d", n))
	if err := writeContexts(d.env, n, path); err != nil {
		return scaleResult{}, err
	}
	s := scaleResult{Contexts: n, Namespaces: d.opts.scaleNamespaces}
	args := []string{"--kubeconfig", path}
	if s.Namespaces > 0 {
		ns := make([]string, s.Namespaces)
		for i := range ns {
			ns[i] = benchNamespace(i)
		}
		args = append(args, "--namespaces", strings.Join(ns, ","))
	}
	var err error
	if d.opts.scaleClientGo {
		if s.ClientGo, _, err = d.contend(ctx, fmt.Sprintf("scale%d-clientgo", n), modeSync, false, append([]string{"--impl", implClientGo}, args...)...); err != nil {
			return s, err
		}
	}
	// Synced means every context synced: with 77 contexts, 8 syncing at a time
	// (DefaultMaxConcurrentSyncs), the last ones start after the default SyncTimeout.
	fw := append([]string{"--impl", implFleetwatch, "--sync-timeout", "30m"}, args...)
	if d.opts.scaleCompact {
		fw = append(fw, "--compact")
	}
	if d.opts.scaleMemLimit != "" {
		d.contenderEnv = []string{"GOMEMLIMIT=" + d.opts.scaleMemLimit}
		defer func() { d.contenderEnv = nil }()
	}
	if !d.opts.scaleWarm {
		s.Fleetwatch, _, err = d.contend(ctx, fmt.Sprintf("scale%d-fleetwatch", n), modeSync, d.opts.profileDir != "", fw...)
		return s, err
	}
	snapPath := filepath.Join(d.workDir, fmt.Sprintf("scale%d.snapshot", n))
	for _, p := range []string{snapPath, snapPath + "-lock"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return s, err
		}
	}
	fw = append(fw, "--snapshot", snapPath)
	if s.Fleetwatch, _, err = d.contend(ctx, fmt.Sprintf("scale%d-fleetwatch", n), modeSync, d.opts.profileDir != "", fw...); err != nil {
		return s, err
	}
	if st, err := os.Stat(snapPath); err == nil {
		s.SnapshotBytes = st.Size()
	}
	s.Warm, s.WarmList, err = d.contend(ctx, fmt.Sprintf("scale%d-fleetwatch-warm", n), modeSync, d.opts.profileDir != "",
		append(fw, "--expect", strconv.Itoa(s.Fleetwatch.Total))...)
	return s, err
}

// writeContexts writes to path a kubeconfig with n contexts, spread round-robin over
// the env's clusters: each context is a cluster of its own to the contenders, and
// contexts beyond the number of clusters share their apiservers.
func writeContexts(env *testenv.Env, n int, path string) error {
	all := env.KubeconfigFor(env.Clusters...)
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos = all.AuthInfos
	cfg.Clusters = all.Clusters
	for i := range n {
		name := contextName(i)
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: env.Clusters[i%len(env.Clusters)].Name, AuthInfo: "admin"}
		if cfg.CurrentContext == "" {
			cfg.CurrentContext = name
		}
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// contextName is the name of writeContexts' context i.
func contextName(i int) string { return fmt.Sprintf("ctx-%02d", i) }

// contend runs one contender process and returns its result and the list figures of
// the apiservers during its life.
func (d *driver) contend(ctx context.Context, name, mode string, profile bool, args ...string) (*Result, listCounters, error) {
	return d.counted(ctx, name, func() (*Result, error) {
		p, err := d.spawn(ctx, name, mode, profile, args...)
		if err != nil {
			return nil, err
		}
		return p.result()
	})
}

// counted runs run, logs its result as name's, and returns it with the list figures of
// the apiservers during run.
func (d *driver) counted(ctx context.Context, name string, run func() (*Result, error)) (*Result, listCounters, error) {
	before, err := d.listCounters(ctx)
	if err != nil {
		return nil, listCounters{}, err
	}
	res, err := run()
	if err != nil {
		return nil, listCounters{}, err
	}
	after, err := d.listCounters(ctx)
	if err != nil {
		return nil, listCounters{}, err
	}
	logResult(name, res)
	return res, after.minus(before), nil
}

// watchPhase runs the watch contenders side by side, each in its own process: they sync
// at the same time, and once every one is ready (synced, memory settled, snapshot
// committed), one window of stamped writes is measured in all of them at once. So they
// receive the same writes, from apiservers in the same state, on a machine under the same
// load: a stall of an apiserver or of the machine hits them all, and the per-run ratios
// compare like with like.
func (d *driver) watchPhase(ctx context.Context, r int, rr *runResult) error {
	name := func(s string) string { return fmt.Sprintf("run%d-%s", r+1, s) }
	// A fresh file: the window measures the cost of keeping the snapshot current, not a
	// warm start's catching up (measured apart, in the sync phase).
	watchSnap := filepath.Join(d.workDir, "fleetwatch-watch.db")
	historySnap := filepath.Join(d.workDir, "fleetwatch-history-watch.db")
	for _, p := range []string{watchSnap, watchSnap + "-lock", historySnap, historySnap + "-lock"} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	units := []struct {
		name string
		args []string
		res  **Result
	}{
		{name("clientgo-watch"), []string{"--impl", implClientGo}, &rr.ClientGoWatch},
		{name("clientgo-typed-watch"), []string{"--impl", implClientGoTyped}, &rr.ClientGoTypedWatch},
		{name("fleetwatch-watch"), []string{"--impl", implFleetwatch}, &rr.FleetwatchWatch},
		{name("fleetwatch-snapshot-watch"), []string{"--impl", implFleetwatch, "--compact", "--snapshot", watchSnap}, &rr.SnapWatch},
		{name("fleetwatch-history-watch"), []string{"--impl", implFleetwatch, "--compact", "--snapshot", historySnap, "--history"}, &rr.HistoryWatch},
		{name("fleetwatch-compact-watch"), []string{"--impl", implFleetwatch, "--compact"}, &rr.CompactWatch},
	}
	if d.opts.watchCompact {
		units = append(units, struct {
			name string
			args []string
			res  **Result
		}{name("fleetwatch-compact-json-watch"), []string{"--impl", implFleetwatch, "--compact", "--json-only"}, &rr.CompactJSONWatch})
	}
	if d.opts.profileDir != "" && r == d.opts.runs-1 {
		if err := os.MkdirAll(d.opts.profileDir, 0o755); err != nil {
			return err
		}
		for k := range units {
			units[k].args = append(units[k].args, "--window-cpuprofile", filepath.Join(d.opts.profileDir, units[k].name+".window.cpu.pprof"))
		}
	}
	// The daemon (servewatch.go) is the last participant, after the units' processes.
	procs := make([]watchParticipant, len(units)+1)
	// Whatever happens, no process outlives the phase.
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.kill()
			}
		}
	}()
	for k := range units {
		u := units[(k+r)%len(units)]
		p, err := d.spawn(ctx, u.name, modeWatch, false, u.args...)
		if err != nil {
			return err
		}
		procs[(k+r)%len(units)] = p
	}
	profileDir := ""
	if d.opts.profileDir != "" && r == d.opts.runs-1 {
		profileDir = d.opts.profileDir
	}
	serve, err := d.spawnServeWatch(ctx, name("serve-watch"), profileDir)
	if err != nil {
		return err
	}
	procs[len(units)] = serve
	for _, p := range procs {
		if err := p.ready(); err != nil {
			return err
		}
	}
	before, err := d.listCounters(ctx)
	if err != nil {
		return err
	}
	for _, p := range procs {
		if err := p.send("start"); err != nil {
			return err
		}
	}
	n, err := d.stamp(ctx)
	if err != nil {
		return err
	}
	for _, p := range procs {
		if err := p.send(fmt.Sprintf("finish %d", n)); err != nil {
			return err
		}
	}
	// The windows end together, once every contender has all the writes and the
	// snapshot has committed them.
	for _, p := range procs {
		if err := p.expect("finished"); err != nil {
			return err
		}
	}
	for _, p := range procs {
		if err := p.send("end"); err != nil {
			return err
		}
	}
	for k, p := range procs {
		res, err := p.result()
		if err != nil {
			return err
		}
		procs[k] = nil
		if k == len(units) {
			rr.ServeWatch = res
			log.Printf("%-34s watch: %d/%d changes, %.0fµs CPU/event", name("serve-watch"), res.Events, res.Expected, cpuPerEvent(res))
			continue
		}
		*units[k].res = res
		logResult(units[k].name, res)
	}
	after, err := d.listCounters(ctx)
	if err != nil {
		return err
	}
	rr.WatchLists["window"] = after.minus(before)
	return nil
}

// proc is a running contender process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	stdout  *bufio.Scanner
	stdin   io.WriteCloser
	logFile *os.File
}

// spawn starts a contender process.
func (d *driver) spawn(ctx context.Context, name, mode string, profile bool, args ...string) (*proc, error) {
	args = append([]string{"contender", "--mode", mode, "--kubeconfig", d.env.Kubeconfig, "--v", strconv.Itoa(d.opts.verbosity)}, args...)
	if profile {
		if err := os.MkdirAll(d.opts.profileDir, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "--cpuprofile", filepath.Join(d.opts.profileDir, name+".cpu.pprof"),
			"--memprofile", filepath.Join(d.opts.profileDir, name+".heap.pprof"))
	}
	logFile, err := os.Create(filepath.Join(d.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, d.exe, append(args, "--t0", "")...)
	if d.contenderEnv != nil {
		cmd.Env = append(os.Environ(), d.contenderEnv...)
	}
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		logFile.Close()
		return nil, err
	}
	// The process start is the contender's time zero: taken last, just before exec.
	cmd.Args[len(cmd.Args)-1] = strconv.FormatInt(time.Now().UnixNano(), 10)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return &proc{name: name, cmd: cmd, stdout: sc, stdin: stdin, logFile: logFile}, nil
}

// next returns the process's next message.
func (p *proc) next() (message, error) {
	if !p.stdout.Scan() {
		if err := p.stdout.Err(); err != nil {
			return message{}, err
		}
		return message{}, errors.New("no result")
	}
	var m message
	if err := json.Unmarshal(p.stdout.Bytes(), &m); err != nil {
		return message{}, fmt.Errorf("unexpected output %q: %w", p.stdout.Text(), err)
	}
	return m, nil
}

// ready waits for the "ready" of a watch-mode process.
func (p *proc) ready() error { return p.expect("ready") }

// expect waits for a message of type typ from the process.
func (p *proc) expect(typ string) error {
	m, err := p.next()
	if err == nil && m.Type != typ {
		err = fmt.Errorf("got %q, want %q", m.Type, typ)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w (log: %s)", p.name, err, p.logFile.Name())
		p.kill()
	}
	return err
}

// send writes one command line to the process.
func (p *proc) send(cmd string) error {
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	return nil
}

// result waits for the process's result and its exit.
func (p *proc) result() (*Result, error) {
	defer p.logFile.Close()
	defer p.stdin.Close()
	var res *Result
	m, readErr := p.next()
	if readErr == nil && m.Type != "result" {
		readErr = fmt.Errorf("got %q instead of a result", m.Type)
	}
	if readErr == nil {
		res = m.Result
	}
	// Drain stdout so that Wait does not block on a full pipe.
	for p.stdout.Scan() {
	}
	if err := p.cmd.Wait(); err != nil {
		return nil, fmt.Errorf("%s: %w (log: %s)", p.name, err, p.logFile.Name())
	}
	if readErr != nil {
		return nil, fmt.Errorf("%s: %w (log: %s)", p.name, readErr, p.logFile.Name())
	}
	return res, nil
}

// kill ends a process that will not be asked for its result.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.stdin.Close()
	p.logFile.Close()
}

func logResult(name string, res *Result) {
	log.Printf("%-34s synced %.2fs (informers %.2fs, %d events then; CPU %.2fs, %.2fs then), %d objects, heap %s (in use %s, idle %s, released %s), RSS %s (at sync %s), peak RSS %s%s", name, res.SyncedSec,
		res.InformersSyncedSec, res.EventsAtInformersSynced, res.CPUSyncSec, res.CPUInformersSyncedSec, res.Total, mib(res.HeapAfterGC), mib(res.HeapInuseAfterGC), mib(res.HeapIdleAfterGC), mib(res.HeapReleasedAfterGC), mib(res.RSSAfterGC), mib(res.RSSAtSync), mib(res.PeakRSS), watchSummary(res))
}

// stamp makes the stamped writes of one measurement: --write-rate for --write-duration.
// It returns how many succeeded; it fails if fewer than 99% did.
func (d *driver) stamp(ctx context.Context) (int, error) {
	want := int(d.opts.writeRate * d.opts.writeDuration.Seconds())
	n, err := d.stamper.run(ctx, d.opts.writeRate, d.opts.writeDuration, d.stampOffset)
	d.stampOffset += want
	if err != nil {
		log.Printf("%d of %d writes failed; first error: %v", want-n, want, err)
		if n < want*99/100 {
			return n, err
		}
	}
	return n, nil
}

// listCounters reads the list figures of every apiserver of the driver's env for the
// bench resources, and the count of its other requests.
func (d *driver) listCounters(ctx context.Context) (listCounters, error) {
	var out listCounters
	for _, c := range d.env.Clusters {
		m, err := c.Metrics(ctx)
		if err != nil {
			return out, err
		}
		out.Others += m.Sum("apiserver_request_total", nil)
		for _, own := range apiserverOwnRequests {
			out.Others -= m.Sum("apiserver_request_total", own)
		}
		for _, gvr := range benchGVRs {
			match := map[string]string{"group": gvr.Group, "resource": gvr.Resource}
			out.Others -= m.Requests("LIST", gvr.Resource) + m.Requests("WATCH", gvr.Resource)
			out.Requests += m.Requests("LIST", gvr.Resource)
			out.Objects += m.ListedObjects(gvr.Group, gvr.Resource)
			out.InitEvents += m.Sum("apiserver_init_events_total", match)
			out.CacheList += m.Sum("apiserver_cache_list_returned_objects_total", match)
			out.StorageList += m.Sum("apiserver_storage_list_returned_objects_total", match)
		}
	}
	return out, nil
}

func inspect(path string) (persist.Info, error) {
	store, err := persist.Open(path, persist.Options{ReadOnly: true})
	if err != nil {
		return persist.Info{}, err
	}
	defer store.Close()
	return store.Inspect()
}

// objectSizes are the mean JSON sizes of the loaded objects of one resource.
type objectSizes struct {
	Objects int `json:"objects"`
	// Served is the mean size of an object as the apiserver serves it; Cached the mean
	// size without metadata.managedFields, as fleetwatch caches it by default.
	Served float64 `json:"served"`
	Cached float64 `json:"cached"`
}

// jsonSizes measures the JSON size of the objects of one cluster in the namespaces
// whose names start with prefix.
func jsonSizes(ctx context.Context, c *testenv.Cluster, prefix string) (map[string]objectSizes, error) {
	dyn := c.Dynamic()
	out := map[string]objectSizes{}
	for _, gvr := range benchGVRs {
		var served, cached, n int
		opts := metav1.ListOptions{Limit: 1000}
		for {
			list, err := dyn.Resource(gvr).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			for _, item := range list.Items {
				if !strings.HasPrefix(item.GetNamespace(), prefix) {
					continue
				}
				b, err := json.Marshal(item.Object)
				if err != nil {
					return nil, err
				}
				unstructured.RemoveNestedField(item.Object, "metadata", "managedFields")
				s, err := json.Marshal(item.Object)
				if err != nil {
					return nil, err
				}
				served, cached, n = served+len(b), cached+len(s), n+1
			}
			if list.GetContinue() == "" {
				break
			}
			opts.Continue = list.GetContinue()
		}
		if n > 0 {
			out[gvr.Resource] = objectSizes{Objects: n, Served: float64(served) / float64(n), Cached: float64(cached) / float64(n)}
		}
	}
	return out, nil
}

// versions names the versions of everything measured.
func versions(ctx context.Context, env *testenv.Env) map[string]string {
	out := map[string]string{"go": runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "k8s.io/client-go" {
				out["client-go"] = dep.Version
			}
		}
	}
	if dc, err := discovery.NewDiscoveryClientForConfig(env.Clusters[0].RESTConfig()); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			out["kube-apiserver"] = v.GitVersion
		}
	}
	if _, etcd, err := testenv.Binaries(); err == nil {
		out["etcd"] = strings.TrimPrefix(filepath.Base(filepath.Dir(etcd)), "etcd-")
	}
	if rev, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		out["fleetwatch"] = strings.TrimSpace(string(rev))
	}
	return out
}

func watchSummary(r *Result) string {
	if r.CaughtUpSec > 0 {
		return fmt.Sprintf("; caught up with %d/%d changes at %.2fs", r.Stamped, r.Expected, r.CaughtUpSec)
	}
	if r.Mode != modeWatch {
		return ""
	}
	return fmt.Sprintf("; watch: %d/%d stamped, %d events, p50 %.1fms p99 %.1fms, %.0fµs CPU/event",
		r.Stamped, r.Expected, r.Events, quantile(r.LatenciesMs, 0.5), quantile(r.LatenciesMs, 0.99), 1e6*r.CPUWindowSec/float64(max(r.Events, 1)))
}

func mib(b uint64) string { return fmt.Sprintf("%.0fMiB", float64(b)/(1<<20)) }
