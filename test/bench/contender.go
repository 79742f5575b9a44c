package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// Contender implementations. The client-go ones are what a user writes instead of
// fleetwatch, from the plainest to the strongest for the same objects: typed informers
// with the managedFields transform for full objects, the metadatainformer with it for
// metadata-only.
const (
	// implClientGo is dynamic informers without a transform.
	implClientGo = "clientgo"
	// implClientGoStripped is dynamic informers with stripManagedFields as transform.
	implClientGoStripped = "clientgo-stripped"
	// implClientGoTyped is typed informers (informers.SharedInformerFactory) with
	// stripManagedFields.
	implClientGoTyped = "clientgo-typed"
	// implClientGoMetadata is metadatainformer with stripManagedFields.
	implClientGoMetadata = "clientgo-metadata"
	implFleetwatch       = "fleetwatch"
)

// Contender modes.
const (
	// modeSync caches everything, measures, and exits.
	modeSync = "sync"
	// modeWatch caches everything, measures, says it is ready, and then measures the
	// events of the writes that the driver makes, between a "start" and a "finish <n>"
	// command on stdin.
	modeWatch = "watch"
)

// stampAnnotation carries the time at which the driver sent a write, in Unix
// nanoseconds: the handler's latency is its time of delivery minus the stamp.
const stampAnnotation = "bench.fleetwatch.io/stamp"

// benchGVRs are the resources every contender caches, unless --resources names fewer.
var benchGVRs = []schema.GroupVersionResource{
	{Version: "v1", Resource: "pods"},
	{Version: "v1", Resource: "configmaps"},
}

// parseResources returns the benchGVRs named in the comma-separated list v, in the
// order of benchGVRs; empty v gives them all.
func parseResources(v string) ([]schema.GroupVersionResource, error) {
	names := splitList(v)
	if len(names) == 0 {
		return benchGVRs, nil
	}
	var out []schema.GroupVersionResource
	for _, n := range names {
		if !slices.ContainsFunc(benchGVRs, func(g schema.GroupVersionResource) bool { return g.Resource == n }) {
			return nil, fmt.Errorf("unknown resource %q", n)
		}
	}
	for _, g := range benchGVRs {
		if slices.Contains(names, g.Resource) {
			out = append(out, g)
		}
	}
	return out, nil
}

// message is one JSON line of a contender on stdout.
type message struct {
	// Type is "ready" (watch mode: synced and measured, waiting for commands) or
	// "result" (the last line).
	Type   string  `json:"type"`
	Result *Result `json:"result,omitempty"`
}

// Result is what a contender measured. Times are seconds since the driver started the
// process.
type Result struct {
	Impl string `json:"impl"`
	Mode string `json:"mode"`
	// Objects is the number of objects cached once synced, by resource.
	Objects map[string]int `json:"objects"`
	Total   int            `json:"total"`

	// LoadedSec is when the cache first held every expected object (fleetwatch with a
	// snapshot: when NewManager returned), 0 if it did not before sync.
	LoadedSec     float64 `json:"loadedSec,omitempty"`
	LoadedObjects int     `json:"loadedObjects,omitempty"`
	// SyncedSec is when every informer had synced and the handler had received the
	// initial list (fleetwatch: Manager.Ready and Registration.HasSynced).
	SyncedSec float64 `json:"syncedSec"`
	// InformersSyncedSec is when every informer had synced, whether or not the handler
	// had received the initial list by then (fleetwatch: Manager.Ready), and
	// EventsAtInformersSynced the handler's initial-list events at that moment: what
	// remains of SyncedSec after it is the handler's delivery alone.
	// CPUInformersSyncedSec is the process's CPU time then.
	InformersSyncedSec      float64 `json:"informersSyncedSec,omitempty"`
	EventsAtInformersSynced int     `json:"eventsAtInformersSynced,omitempty"`
	CPUInformersSyncedSec   float64 `json:"cpuInformersSyncedSec,omitempty"`
	// InitialEvents counts the handler's initial-list events; FirstEventSec and
	// LastInitialEventSec are the times of the first event and of the last initial one.
	InitialEvents       int     `json:"initialEvents"`
	FirstEventSec       float64 `json:"firstEventSec"`
	LastInitialEventSec float64 `json:"lastInitialEventSec"`
	// CPUSyncSec is the CPU time of the process up to sync.
	CPUSyncSec float64 `json:"cpuSyncSec"`
	// NotSyncedSec, when not 0, is how long the contender waited without syncing before
	// it gave up (--give-up): SyncedSec is then 0, and the other figures are of that
	// moment.
	NotSyncedSec float64 `json:"notSyncedSec,omitempty"`
	// IdleSec is how long after SyncedSec the daemon went idle, when the many-clusters
	// rows wait for it before they count goroutines and measure memory (see serveIdle).
	IdleSec float64 `json:"idleSec,omitempty"`
	// Goroutines is the number of goroutines once synced (serve: go_goroutines on its
	// /metrics).
	Goroutines int `json:"goroutines,omitempty"`

	// PeakRSS is VmHWM at sync: the peak RSS of the initial sync. HeapAfterGC and
	// RSSAfterGC are the live heap and the RSS after garbage collection, once synced.
	PeakRSS uint64 `json:"peakRSS"`
	// RSSAtSync is VmRSS at sync, before the collection of HeapAfterGC: what the
	// process holds if nothing forces the garbage out and the memory back.
	RSSAtSync   uint64 `json:"rssAtSync,omitempty"`
	HeapAfterGC uint64 `json:"heapAfterGC"`
	RSSAfterGC  uint64 `json:"rssAfterGC"`
	// The runtime's MemStats at the same moment: the bytes of in-use spans (HeapAlloc
	// plus the free slots within them), of idle spans and of those returned to the OS,
	// and all memory obtained from the OS. RSS beyond HeapInuse + (HeapIdle −
	// HeapReleased) is the runtime's own (stacks, metadata) or not Go's.
	HeapInuseAfterGC    uint64 `json:"heapInuseAfterGC"`
	HeapIdleAfterGC     uint64 `json:"heapIdleAfterGC"`
	HeapReleasedAfterGC uint64 `json:"heapReleasedAfterGC"`
	SysAfterGC          uint64 `json:"sysAfterGC"`

	// Watch mode: the window between "start" and the delivery of the last write.
	WindowSec float64 `json:"windowSec,omitempty"`
	// Events counts every event the handler received in the window; Stamped those of
	// the driver's writes, of which LatenciesMs are the delivery latencies, in the order
	// of delivery (so that a stall shows as a run of high values).
	Events         int       `json:"events,omitempty"`
	Stamped        int       `json:"stamped,omitempty"`
	Expected       int       `json:"expected,omitempty"`
	CPUWindowSec   float64   `json:"cpuWindowSec,omitempty"`
	LatenciesMs    []float64 `json:"latenciesMs,omitempty"`
	SnapshotLagSec float64   `json:"snapshotLagSec,omitempty"`
	// GCsInWindow counts the garbage collections that ended in the window.
	GCsInWindow uint32 `json:"gcsInWindow,omitempty"`
	// FaultsInWindow counts the minor page faults in the window.
	FaultsInWindow int64 `json:"faultsInWindow,omitempty"`

	// Catch-up (sync mode with --catch-up): when the handler had received every change
	// made while the contender was down, the CPU time and the peak RSS by then.
	CaughtUpSec     float64 `json:"caughtUpSec,omitempty"`
	CPUCaughtUpSec  float64 `json:"cpuCaughtUpSec,omitempty"`
	PeakRSSCaughtUp uint64  `json:"peakRSSCaughtUp,omitempty"`

	// Search (fleetwatch with --search, measured after the memory figures above, which
	// do not include it): the heap that a search index of SearchIndexObjects objects
	// adds, and the latencies of name-substring searches through the HTTP API, with the
	// objects they found in all.
	SearchIndexBytes   int64     `json:"searchIndexBytes,omitempty"`
	SearchIndexObjects int       `json:"searchIndexObjects,omitempty"`
	SearchLatenciesMs  []float64 `json:"searchLatenciesMs,omitempty"`
	SearchFound        int       `json:"searchFound,omitempty"`

	// Snapshot writer statistics, with a snapshot.
	SnapshotCommits  uint64 `json:"snapshotCommits,omitempty"`
	SnapshotFileSize int64  `json:"snapshotFileSize,omitempty"`
}

// recorder is the handler of a contender: it counts events, and in the watch window it
// records the latency of each stamped update.
type recorder struct {
	t0 time.Time

	initial      atomic.Int64
	events       atomic.Int64 // in the window
	firstEvent   atomic.Int64 // ns since t0, 0 if none
	lastInitial  atomic.Int64 // ns since t0
	stamped      atomic.Int64
	windowActive atomic.Bool

	// mu guards latencies.
	mu        sync.Mutex
	latencies []time.Duration
}

func (r *recorder) now() int64 { return int64(time.Since(r.t0)) }

func (r *recorder) added(initial bool) {
	now := r.now()
	r.firstEvent.CompareAndSwap(0, now)
	if initial {
		r.initial.Add(1)
		r.lastInitial.Store(now)
		return
	}
	if r.windowActive.Load() {
		r.events.Add(1)
	}
}

func (r *recorder) updated(oldObj, newObj any) {
	received := time.Now()
	if !r.windowActive.Load() {
		return
	}
	r.events.Add(1)
	stamp := stampOf(newObj)
	if stamp == "" || stamp == stampOf(oldObj) {
		return
	}
	ns, err := strconv.ParseInt(stamp, 10, 64)
	if err != nil {
		return
	}
	r.stamped.Add(1)
	r.mu.Lock()
	r.latencies = append(r.latencies, received.Sub(time.Unix(0, ns)))
	r.mu.Unlock()
}

func (r *recorder) deleted() {
	if r.windowActive.Load() {
		r.events.Add(1)
	}
}

func stampOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	a, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return a.GetAnnotations()[stampAnnotation]
}

// contender is one implementation under test.
type contender interface {
	// start begins caching, with rec as the only handler, and returns at once.
	start(ctx context.Context, rec *recorder) error
	// synced reports whether the caches have synced and the handler has received the
	// initial list.
	synced() bool
	// informersSynced reports whether the caches have synced, whether or not the handler
	// has received the initial list.
	informersSynced() bool
	// counts returns the number of cached objects by resource.
	counts() map[string]int
	// stop stops everything and waits for it.
	stop()
}

func runContender(args []string) (err error) {
	fs := flag.NewFlagSet("contender", flag.ContinueOnError)
	impl := fs.String("impl", implClientGo, "implementation: clientgo, clientgo-stripped, clientgo-typed, clientgo-metadata or fleetwatch")
	mode := fs.String("mode", modeSync, "sync or watch")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig with one context per cluster")
	metadataOnly := fs.Bool("metadata-only", false, "fleetwatch: cache every resource metadata-only")
	compact := fs.Bool("compact", false, "fleetwatch: keep the objects in the snapshot's encoding (Fleet.Codec = persist.Codec{}, the library's default); without it, decoded (Encoding = EncodingObjects)")
	compress := fs.Bool("compress", false, "fleetwatch: with --compact, compress the encodings that S2 shortens (persist.Codec{Compress: true})")
	dict := fs.Bool("dict", false, "fleetwatch: with --compress, compress with a dictionary per resource (persist.Codec{Compress: true, Dictionary: true})")
	jsonOnly := fs.Bool("json-only", false, "fleetwatch: ask the apiservers for JSON only (Options.JSONOnly), not protobuf")
	snapshot := fs.String("snapshot", "", "fleetwatch: snapshot file (empty: no persistence)")
	history := fs.Bool("history", false, "fleetwatch: with --snapshot, keep the snapshot's change log (Options.SnapshotWriter.History.Enabled)")
	expect := fs.Int("expect", 0, "objects expected in the cache, to time when a warm cache is complete")
	t0ns := fs.Int64("t0", 0, "Unix nanoseconds at which the driver started this process (default: now)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole process here")
	memProfile := fs.String("memprofile", "", "write a heap profile after sync here")
	windowProfile := fs.String("window-cpuprofile", "", "watch mode: write a CPU profile of the measurement window here")
	namespaces := fs.String("namespaces", "", "comma-separated namespaces to cache (default: all)")
	syncTimeout := fs.Duration("sync-timeout", 0, "fleetwatch: Options.SyncTimeout (default: fleetwatch's, 2m), after which a cluster still syncing no longer holds back readiness")
	searches := fs.Int("search", 0, "fleetwatch, sync mode: after the memory figures, measure the search index's heap and this many name-substring searches through the HTTP API")
	catchUp := fs.Int("catch-up", 0, "sync mode: after sync, wait until the handler has received this many stamped updates (changes made while the contender was down)")
	verbosity := fs.String("v", "0", "klog verbosity of the contender's log (4 shows each watch that ends, with a 410's reason)")
	resources := fs.String("resources", "", "comma-separated resources to cache, of pods and configmaps (default: both)")
	giveUp := fs.Duration("give-up", 0, "sync mode: after this long without sync, report the figures of that moment with notSyncedSec set, instead of failing after 15 minutes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	if err := klogFlags.Set("v", *verbosity); err != nil {
		return fmt.Errorf("--v: %w", err)
	}
	gvrs, err := parseResources(*resources)
	if err != nil {
		return fmt.Errorf("--resources: %w", err)
	}
	t0 := time.Now()
	if *t0ns != 0 {
		t0 = time.Unix(0, *t0ns)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			err = errors.Join(err, f.Close())
		}()
	}
	since := func() float64 { return time.Since(t0).Seconds() }
	res := &Result{Impl: *impl, Mode: *mode}
	rec := &recorder{t0: t0}
	rec.windowActive.Store(*catchUp > 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var c contender
	switch *impl {
	case implClientGo, implClientGoStripped, implClientGoTyped, implClientGoMetadata:
		c = &clientGo{impl: *impl, kubeconfig: *kubeconfig, namespaces: splitList(*namespaces), resources: gvrs}
	case implFleetwatch:
		fw := &fleetwatchContender{kubeconfig: *kubeconfig, resources: gvrs, metadataOnly: *metadataOnly, compact: *compact, compress: *compress, dict: *dict, jsonOnly: *jsonOnly, snapshotPath: *snapshot, history: *history, namespaces: splitList(*namespaces), syncTimeout: *syncTimeout}
		if err := fw.open(); err != nil {
			return err
		}
		// Everything the snapshot held is readable once NewManager has returned.
		if n := fw.total(); n > 0 && n >= *expect {
			res.LoadedSec, res.LoadedObjects = since(), n
		}
		c = fw
	default:
		return fmt.Errorf("unknown --impl %q", *impl)
	}
	if err := c.start(ctx, rec); err != nil {
		return err
	}
	defer c.stop()

	wait := 15 * time.Minute
	if *giveUp > 0 {
		wait = *giveUp
	}
	deadline := time.Now().Add(wait)
	for !c.synced() {
		if time.Now().After(deadline) {
			if *giveUp == 0 || *mode != modeSync {
				return fmt.Errorf("not synced after %v", wait)
			}
			res.NotSyncedSec = since()
			break
		}
		if res.InformersSyncedSec == 0 && c.informersSynced() {
			res.InformersSyncedSec, res.EventsAtInformersSynced = since(), int(rec.initial.Load())
			res.CPUInformersSyncedSec = cpuTime().Seconds()
		}
		time.Sleep(2 * time.Millisecond)
	}
	if res.NotSyncedSec == 0 {
		res.SyncedSec = since()
	}
	res.CPUSyncSec = cpuTime().Seconds()
	res.Goroutines = runtime.NumGoroutine()
	if res.InformersSyncedSec == 0 && res.NotSyncedSec == 0 {
		// The informers and the handler synced between two polls.
		res.InformersSyncedSec, res.CPUInformersSyncedSec = res.SyncedSec, res.CPUSyncSec
		res.EventsAtInformersSynced = int(rec.initial.Load())
	}
	st := procStatus()
	res.PeakRSS, res.RSSAtSync = st["VmHWM"], st["VmRSS"]
	res.InitialEvents = int(rec.initial.Load())
	res.FirstEventSec = time.Duration(rec.firstEvent.Load()).Seconds()
	res.LastInitialEventSec = time.Duration(rec.lastInitial.Load()).Seconds()
	res.Objects = c.counts()
	for _, n := range res.Objects {
		res.Total += n
	}
	if *catchUp > 0 {
		deadline := time.Now().Add(10 * time.Minute)
		for rec.stamped.Load() < int64(*catchUp) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		res.CaughtUpSec, res.Stamped, res.Expected = since(), int(rec.stamped.Load()), *catchUp
		res.CPUCaughtUpSec = cpuTime().Seconds()
		res.PeakRSSCaughtUp = procStatus()["VmHWM"]
	}
	if fw, ok := c.(*fleetwatchContender); ok && *mode == modeWatch {
		// The initial list's commit is the sync's cost, not the window's: in the window
		// the writer keeps the snapshot current, and no more.
		fw.waitSnapshotCommitted(5 * time.Minute)
	}
	var ms runtime.MemStats
	res.HeapAfterGC, res.RSSAfterGC, ms = settledMemory()
	res.HeapInuseAfterGC, res.HeapIdleAfterGC, res.HeapReleasedAfterGC = ms.HeapInuse, ms.HeapIdle, ms.HeapReleased
	res.SysAfterGC = ms.Sys
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}
	if fw, ok := c.(*fleetwatchContender); ok && *searches > 0 && *mode == modeSync {
		if err := measureSearch(ctx, fw, *searches, res); err != nil {
			return fmt.Errorf("search: %w", err)
		}
	}

	out := json.NewEncoder(os.Stdout)
	if *mode == modeWatch {
		if err := out.Encode(message{Type: "ready"}); err != nil {
			return err
		}
		if err := watchWindow(rec, c, res, *windowProfile, out); err != nil {
			return err
		}
	}
	if fw, ok := c.(*fleetwatchContender); ok {
		// Leave a complete snapshot for the next (warm) start: at a million objects the
		// writer may still have minutes of the initial lists to commit.
		if lag := fw.waitSnapshotCommitted(10 * time.Minute); lag > 0 && res.SnapshotLagSec == 0 {
			res.SnapshotLagSec = lag.Seconds()
		}
		if st, ok := fw.mgr.SnapshotStats(); ok {
			res.SnapshotCommits, res.SnapshotFileSize = st.Commits, st.FileSize
		}
	}
	c.stop()
	return out.Encode(message{Type: "result", Result: res})
}

// watchWindow serves the driver's commands: "start" opens the measurement window;
// "finish <n>" waits until the handler has seen n stamped writes (or a timeout) and the
// snapshot, if any, has committed them, then answers "finished"; "end" closes the window.
// The driver sends "end" to every contender once all have finished, so that their
// windows are as long as each other: the one that commits a snapshot does so within its
// window, and the others idle as long as it takes. With profile set, the window's CPU
// profile is written there.
func watchWindow(rec *recorder, c contender, res *Result, profile string, out *json.Encoder) (err error) {
	sc := bufio.NewScanner(os.Stdin)
	var cpu0 time.Duration
	var start time.Time
	var gc0 uint32
	var faults0 int64
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch cmd {
		case "start":
			if profile != "" {
				f, err := os.Create(profile)
				if err != nil {
					return err
				}
				if err := pprof.StartCPUProfile(f); err != nil {
					f.Close()
					return err
				}
				defer func() {
					pprof.StopCPUProfile()
					err = errors.Join(err, f.Close())
				}()
			}
			cpu0, start, gc0, faults0 = cpuTime(), time.Now(), numGC(), minorFaults()
			rec.windowActive.Store(true)
		case "finish":
			n, err := strconv.Atoi(arg)
			if err != nil {
				return fmt.Errorf("finish %q: %w", arg, err)
			}
			res.Expected = n
			deadline := time.Now().Add(60 * time.Second)
			for rec.stamped.Load() < int64(n) && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			rec.windowActive.Store(false)
			// The snapshot writer's work for these events is part of their cost.
			if fw, ok := c.(*fleetwatchContender); ok {
				res.SnapshotLagSec = fw.waitSnapshotCommitted(30 * time.Second).Seconds()
			}
			if err := out.Encode(message{Type: "finished"}); err != nil {
				return err
			}
		case "end":
			end := time.Now()
			res.CPUWindowSec = (cpuTime() - cpu0).Seconds()
			res.WindowSec = end.Sub(start).Seconds()
			res.GCsInWindow = numGC() - gc0
			res.FaultsInWindow = minorFaults() - faults0
			res.Events = int(rec.events.Load())
			res.Stamped = int(rec.stamped.Load())
			rec.mu.Lock()
			for _, l := range rec.latencies {
				res.LatenciesMs = append(res.LatenciesMs, float64(l)/float64(time.Millisecond))
			}
			rec.mu.Unlock()
			return nil
		default:
			return fmt.Errorf("unknown command %q", cmd)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return errors.New("stdin closed before end")
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// clientGo is what a user writes without fleetwatch: one informer factory per kubeconfig
// context (and namespace), an informer per resource, and a handler on each. impl says
// which factory, and whether the informers strip managedFields.
type clientGo struct {
	impl       string
	kubeconfig string
	// namespaces, if not empty, are the only namespaces cached, with a factory each,
	// since an informer watches one namespace or all.
	namespaces []string
	// resources are the cached resources, of benchGVRs.
	resources []schema.GroupVersionResource

	factories []informerFactory
	informers []cache.SharedIndexInformer
	// gvrs has the resource of each informer.
	gvrs     []schema.GroupVersionResource
	regs     []cache.ResourceEventHandlerRegistration
	stopCh   chan struct{}
	stopOnce sync.Once
}

func (c *clientGo) start(ctx context.Context, rec *recorder) error {
	raw, err := clientcmd.LoadFromFile(c.kubeconfig)
	if err != nil {
		return err
	}
	contexts := make([]string, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		contexts = append(contexts, name)
	}
	slices.Sort(contexts)
	c.stopCh = make(chan struct{})
	handler := cache.ResourceEventHandlerDetailedFuncs{
		AddFunc:    func(_ any, initial bool) { rec.added(initial) },
		UpdateFunc: rec.updated,
		DeleteFunc: func(any) { rec.deleted() },
	}
	for _, name := range contexts {
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		if err != nil {
			return fmt.Errorf("context %s: %w", name, err)
		}
		newFactory, err := c.newFactories(cfg)
		if err != nil {
			return fmt.Errorf("context %s: %w", name, err)
		}
		namespaces := c.namespaces
		if len(namespaces) == 0 {
			namespaces = []string{metav1.NamespaceAll}
		}
		for _, ns := range namespaces {
			f := newFactory(ns)
			for _, gvr := range c.resources {
				gi, err := f.ForResource(gvr)
				if err != nil {
					return err
				}
				inf := gi.Informer()
				if c.impl != implClientGo {
					if err := inf.SetTransform(stripManagedFields); err != nil {
						return err
					}
				}
				reg, err := inf.AddEventHandler(handler)
				if err != nil {
					return err
				}
				c.informers = append(c.informers, inf)
				c.regs = append(c.regs, reg)
				c.gvrs = append(c.gvrs, gvr)
			}
			f.Start(c.stopCh)
			c.factories = append(c.factories, f)
		}
	}
	go func() {
		<-ctx.Done()
		c.stop()
	}()
	return nil
}

// informerFactory is what the client-go factories have in common, with ForResource
// returning an error as the typed factory's does.
type informerFactory interface {
	ForResource(schema.GroupVersionResource) (informers.GenericInformer, error)
	Start(stopCh <-chan struct{})
	Shutdown()
}

// infallible adapts the dynamic and metadata factories to informerFactory.
type infallible[F interface {
	ForResource(schema.GroupVersionResource) informers.GenericInformer
	Start(stopCh <-chan struct{})
	Shutdown()
}] struct{ f F }

func (i infallible[F]) ForResource(gvr schema.GroupVersionResource) (informers.GenericInformer, error) {
	return i.f.ForResource(gvr), nil
}
func (i infallible[F]) Start(stopCh <-chan struct{}) { i.f.Start(stopCh) }
func (i infallible[F]) Shutdown()                    { i.f.Shutdown() }

// newFactories makes the client of c.impl for one context, and returns a function that
// makes an informer factory of that client for a namespace: one client per context, as a
// user would write it.
func (c *clientGo) newFactories(cfg *rest.Config) (func(ns string) informerFactory, error) {
	switch c.impl {
	case implClientGoTyped:
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return func(ns string) informerFactory {
			return informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
		}, nil
	case implClientGoMetadata:
		mc, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return func(ns string) informerFactory {
			return infallible[metadatainformer.SharedInformerFactory]{metadatainformer.NewFilteredSharedInformerFactory(mc, 0, ns, nil)}
		}, nil
	default:
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		return func(ns string) informerFactory {
			return infallible[dynamicinformer.DynamicSharedInformerFactory]{dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)}
		}, nil
	}
}

// stripManagedFields is the transform that a careful client-go user sets, as fleetwatch
// does by default: objects are cached without metadata.managedFields.
func stripManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

func (c *clientGo) synced() bool {
	for i, inf := range c.informers {
		if !inf.HasSynced() || !c.regs[i].HasSynced() {
			return false
		}
	}
	return true
}

func (c *clientGo) informersSynced() bool {
	for _, inf := range c.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (c *clientGo) counts() map[string]int {
	out := map[string]int{}
	for i, inf := range c.informers {
		out[c.gvrs[i].Resource] += len(inf.GetStore().ListKeys())
	}
	return out
}

func (c *clientGo) stop() {
	c.stopOnce.Do(func() {
		close(c.stopCh)
		for _, f := range c.factories {
			f.Shutdown()
		}
	})
}

// fleetwatchContender embeds fleetwatch as the README shows.
type fleetwatchContender struct {
	kubeconfig string
	// resources are the cached resources, of benchGVRs.
	resources    []schema.GroupVersionResource
	metadataOnly bool
	compact      bool
	compress     bool
	dict         bool
	jsonOnly     bool
	snapshotPath string
	// history keeps the snapshot's change log.
	history     bool
	namespaces  []string
	syncTimeout time.Duration

	store    *persist.Store
	mgr      *fleetwatch.Manager
	reg      *aggregate.Registration
	done     chan error
	cancel   context.CancelFunc
	stopOnce sync.Once
}

// open creates the Manager, which loads the snapshot if there is one.
func (f *fleetwatchContender) open() error {
	var resources []informer.Resource
	for _, gvr := range f.resources {
		resources = append(resources, informer.Resource{Name: gvr.Resource, MetadataOnly: f.metadataOnly, Namespaces: f.namespaces})
	}
	opts := fleetwatch.Options{
		Clusters:    cluster.Options{Kubeconfigs: []string{f.kubeconfig}},
		Resources:   resources,
		SyncTimeout: f.syncTimeout,
		JSONOnly:    f.jsonOnly,
	}
	if f.compact {
		opts.Fleet.Codec = persist.Codec{Compress: f.compress, Dictionary: f.dict}
	} else {
		opts.Encoding = fleetwatch.EncodingObjects
	}
	if f.snapshotPath != "" {
		store, err := persist.Open(f.snapshotPath, persist.Options{})
		if err != nil {
			return err
		}
		f.store = store
		opts.Snapshot = store
		opts.SnapshotWriter.History.Enabled = f.history
	}
	mgr, err := fleetwatch.NewManager(opts)
	if err != nil {
		return err
	}
	f.mgr = mgr
	return nil
}

func (f *fleetwatchContender) total() int {
	n := 0
	for _, gvr := range f.resources {
		n += f.mgr.Fleet().Indexer(gvr).Len()
	}
	return n
}

func (f *fleetwatchContender) start(ctx context.Context, rec *recorder) error {
	reg, err := f.mgr.Fleet().AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
		switch e.Type {
		case aggregate.Added:
			rec.added(e.InitialList)
		case aggregate.Updated:
			rec.updated(e.OldObject, e.Object)
		case aggregate.Deleted:
			rec.deleted()
		}
	}), aggregate.HandlerOptions{Name: "bench"})
	if err != nil {
		return err
	}
	f.reg = reg
	ctx, f.cancel = context.WithCancel(ctx)
	f.done = make(chan error, 1)
	go func() { f.done <- f.mgr.Start(ctx) }()
	return nil
}

func (f *fleetwatchContender) synced() bool { return f.mgr.Ready() && f.reg.HasSynced() }

func (f *fleetwatchContender) informersSynced() bool { return f.mgr.HasSynced() }

func (f *fleetwatchContender) counts() map[string]int {
	out := map[string]int{}
	for _, gvr := range f.resources {
		out[gvr.Resource] = f.mgr.Fleet().Indexer(gvr).Len()
	}
	return out
}

// waitSnapshotCommitted waits until the snapshot writer has nothing pending, and returns
// how long that took (0 without a snapshot).
func (f *fleetwatchContender) waitSnapshotCommitted(timeout time.Duration) time.Duration {
	start := time.Now()
	for {
		st, ok := f.mgr.SnapshotStats()
		if !ok {
			return 0
		}
		if st.Pending == 0 || time.Since(start) > timeout {
			return time.Since(start)
		}
		// Not much more often: the polling counts in the window's CPU time.
		time.Sleep(10 * time.Millisecond)
	}
}

func (f *fleetwatchContender) stop() {
	f.stopOnce.Do(func() {
		if f.cancel != nil {
			f.cancel()
			if err := <-f.done; err != nil {
				fmt.Fprintln(os.Stderr, "manager:", err)
			}
		}
		if f.store != nil {
			if err := f.store.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "closing the snapshot:", err)
			}
		}
	})
}

// splitList splits a comma-separated flag value; empty gives nil.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// numGC is the number of garbage collections completed so far.
func numGC() uint32 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.NumGC
}
