package main

import (
	"cmp"
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// The many-clusters section (--many, issue #38) measures fleetwatch at many contexts
// against typed client-go informers. It starts an env of its own, manyClusters
// apiservers in <dir>/env-many-3c, independent of the bench's loaded clusters, with a
// few small pods each in namespace manyNamespace. For each row of N contexts, a
// kubeconfig has N contexts spread round-robin over the apiservers, each a cluster of
// its own to both contenders, and these run one after the other, never side by side:
// typed informers over pods (the contender subcommand), `fleetwatch serve` cold with a
// fresh snapshot, and `fleetwatch serve` warm from the snapshot the cold run left.
const (
	manyClusters  = 3
	manyNamespace = "many"
	// manyMaxObjects bounds the objects of a row, over its contexts: at many contexts
	// the per-context costs are measured, not the objects'.
	manyMaxObjects = 30000
	// manyPodsMax is the pods per apiserver of the rows of few contexts.
	manyPodsMax = 20
)

// manyRepeatMaxContexts is the most contexts of a row whose contenders each run
// manyRepeatRuns times, interleaved (typed, cold, warm, typed...), the row reporting
// the run of median synced time of each: those rows last seconds or less, as short as
// the host's hiccups, which with one run per row made their ratios (a warm start of
// 1,000 contexts took 0.20 s, 0.21 s, 0.36 s and 0.42 s in four runs of the same code).
const manyRepeatMaxContexts, manyRepeatRuns = 1000, 3

// manyRepeats returns how many times each contender of a row of n contexts runs.
func manyRepeats(n int) int {
	if n <= manyRepeatMaxContexts {
		return manyRepeatRuns
	}
	return 1
}

// manyRun is one run of a contender of a row.
type manyRun struct {
	res  *Result
	list listCounters
}

// medianRun returns the run of runs of median synced time (the later of the two middle
// ones of an even count) and its list figures, with the synced seconds of every run, in
// the order they ran, when there are more than one; nil without runs.
func medianRun(runs []manyRun) (*Result, listCounters, []float64) {
	if len(runs) == 0 {
		return nil, listCounters{}, nil
	}
	synced := func(r manyRun) float64 { return max(r.res.SyncedSec, r.res.NotSyncedSec) }
	m := slices.SortedFunc(slices.Values(runs), func(a, b manyRun) int { return cmp.Compare(synced(a), synced(b)) })[len(runs)/2]
	if len(runs) == 1 {
		return m.res, m.list, nil
	}
	secs := make([]float64, len(runs))
	for i, r := range runs {
		secs[i] = synced(r)
	}
	return m.res, m.list, secs
}

// manyRowTimeout is how long a contender of a row may take to sync; one that has not by
// then is recorded as not synced, with its memory at that moment.
const manyRowTimeout = 15 * time.Minute

// manyResult is one row of the many-clusters table.
type manyResult struct {
	Contexts         int `json:"contexts"`
	PodsPerAPIServer int `json:"podsPerAPIServer"`
	// Objects is what each contender should cache: every context sees the pods of
	// its apiserver.
	Objects int `json:"objects"`
	// Typed is typed informers over pods; Cold and Warm the daemon from a removed
	// snapshot and then from the one Cold left. Warm is nil if Cold did not sync.
	Typed *Result `json:"typed"`
	Cold  *Result `json:"cold"`
	Warm  *Result `json:"warm,omitempty"`
	// The apiservers' list figures and other requests during each contender's life.
	TypedList listCounters `json:"typedList"`
	ColdList  listCounters `json:"coldList"`
	WarmList  listCounters `json:"warmList"`
	// SnapshotBytes is the size of the snapshot file the cold run left.
	SnapshotBytes int64 `json:"snapshotBytes,omitempty"`
	// TypedRuns, ColdRuns and WarmRuns are the synced seconds of each contender's runs,
	// in the order they ran, when it ran more than once (manyRepeats): Typed, Cold and
	// Warm are then the runs of median synced time.
	TypedRuns []float64 `json:"typedRuns,omitempty"`
	ColdRuns  []float64 `json:"coldRuns,omitempty"`
	WarmRuns  []float64 `json:"warmRuns,omitempty"`
	// Sharded is the row's replicas with --many-shards (manyshard.go); nil without it,
	// beyond manyShardsMaxContexts, or if Cold did not sync.
	Sharded *manyShardResult `json:"sharded,omitempty"`
}

// manyPodsPerAPIServer is the number of pods each apiserver holds for a row of n
// contexts: manyPodsMax, fewer when n contexts would see more than manyMaxObjects in
// all, and at least 1 (fleetwatch serve's sync needs an object).
func manyPodsPerAPIServer(n int) int {
	return max(1, min(manyPodsMax, manyMaxObjects/n))
}

// manyPhase runs the rows of --many on an env of its own, started for the phase and
// stopped after it, and puts them in rep, with the size of a pod; rep.Versions too if
// it has none yet (--many-only).
func (d *driver) manyPhase(ctx context.Context, rep *report) error {
	dir := filepath.Join(d.workDir, fmt.Sprintf("env-many-%dc", manyClusters))
	log.Printf("many: starting %d clusters in %s", manyClusters, dir)
	env, err := testenv.Start(ctx, testenv.Options{Clusters: manyClusters, Dir: dir})
	if err != nil {
		return err
	}
	defer env.Close()
	if rep.Versions == nil {
		rep.Versions = versions(ctx, env)
	}
	// A driver of its own: its contenders, and the apiservers' figures around them,
	// are this env's.
	md := &driver{opts: d.opts, env: env, exe: d.exe, workDir: d.workDir, logDir: d.logDir, serveBin: d.serveBin}
	// The sharded rows' home apiserver, started afresh: a start together finds no
	// Lease.
	var home *shardHome
	if d.opts.manyShards > 0 {
		dir := filepath.Join(d.workDir, "many-shards")
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if home, err = startShardHome(ctx, dir); err != nil {
			return err
		}
		defer home.Close()
	}
	for _, n := range d.opts.many {
		log.Printf("many: %d contexts, %d pods per apiserver", n, manyPodsPerAPIServer(n))
		r, err := md.manyRow(ctx, n, home)
		if err != nil {
			return fmt.Errorf("%d contexts: %w", n, err)
		}
		rep.Many = append(rep.Many, r)
		if rep.ManyPod.Objects == 0 {
			sizes, err := jsonSizes(ctx, env.Clusters[0], manyNamespace)
			if err != nil {
				return err
			}
			rep.ManyPod = sizes["pods"]
		}
	}
	return nil
}

// manyRow makes each apiserver hold the row's pods, and runs its contenders one after
// the other; with home, and at most manyShardsMaxContexts contexts, the sharded
// replicas last.
func (d *driver) manyRow(ctx context.Context, n int, home *shardHome) (manyResult, error) {
	r := manyResult{Contexts: n, PodsPerAPIServer: manyPodsPerAPIServer(n)}
	r.Objects = n * r.PodsPerAPIServer
	if err := setManyPods(ctx, d.env, r.PodsPerAPIServer); err != nil {
		return r, err
	}
	kubeconfig := filepath.Join(d.workDir, fmt.Sprintf("kubeconfig-many-%d", n))
	if err := writeContexts(d.env, n, kubeconfig); err != nil {
		return r, err
	}
	snapshot := filepath.Join(d.workDir, fmt.Sprintf("many-%d.db", n))
	// Ready means every context synced: the sync timeout, after which a context no
	// longer holds back readiness, is beyond the row's.
	so := serveOptions{kubeconfig: kubeconfig, resources: "pods", snapshotPath: snapshot,
		args: []string{"--sync-timeout", (2 * manyRowTimeout).String()}, timeout: manyRowTimeout, giveUp: true, idle: true}
	var typed, cold, warm []manyRun
	for i := range manyRepeats(n) {
		name := func(s string) string { return fmt.Sprintf("many%d-%s", n, s) }
		if i > 0 {
			name = func(s string) string { return fmt.Sprintf("many%d-%s-%d", n, s, i+1) }
		}
		var run manyRun
		var err error
		settle(ctx, d.env)
		run.res, run.list, err = d.contend(ctx, name("clientgo-typed"), modeSync, false, "--impl", implClientGoTyped,
			"--resources", "pods", "--kubeconfig", kubeconfig, "--give-up", manyRowTimeout.String())
		if err != nil {
			return r, err
		}
		typed = append(typed, run)
		for _, p := range []string{snapshot, snapshot + "-lock"} {
			if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
				return r, err
			}
		}
		settle(ctx, d.env)
		if run.res, run.list, err = d.serveContend(ctx, name("serve-cold"), so); err != nil {
			return r, err
		}
		cold = append(cold, run)
		if run.res.NotSyncedSec > 0 {
			log.Printf("%s: not synced in %.0f s; no warm restart", name("serve-cold"), run.res.NotSyncedSec)
			break
		}
		if st, err := os.Stat(snapshot); err == nil {
			r.SnapshotBytes = st.Size()
		}
		settle(ctx, d.env)
		if run.res, run.list, err = d.serveContend(ctx, name("serve-warm"), so); err != nil {
			return r, err
		}
		warm = append(warm, run)
	}
	r.Typed, r.TypedList, r.TypedRuns = medianRun(typed)
	r.Cold, r.ColdList, r.ColdRuns = medianRun(cold)
	r.Warm, r.WarmList, r.WarmRuns = medianRun(warm)
	if len(warm) < len(cold) {
		// A cold run did not sync: it is the row's, and no warm one.
		last := cold[len(cold)-1]
		r.Cold, r.ColdList, r.Warm, r.WarmList, r.WarmRuns = last.res, last.list, nil, listCounters{}, nil
		return r, nil
	}
	if home != nil && n <= manyShardsMaxContexts {
		r.Sharded = d.manyShards(ctx, home, r, kubeconfig)
	}
	return r, nil
}

// setManyPods makes every cluster of env hold exactly pods pods in manyNamespace:
// the missing ones are written by server-side apply, the extra ones deleted at once
// (they have no node, so nothing waits for a kubelet).
func setManyPods(ctx context.Context, env *testenv.Env, pods int) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, c := range env.Clusters {
		g.Go(func() error {
			if err := setClusterPods(ctx, c, pods); err != nil {
				return fmt.Errorf("%s: %w", c.Name, err)
			}
			return nil
		})
	}
	return g.Wait()
}

func setClusterPods(ctx context.Context, c *testenv.Cluster, pods int) error {
	cs, err := kubernetes.NewForConfig(writeConfig(c))
	if err != nil {
		return err
	}
	apply := metav1.ApplyOptions{FieldManager: managerController, Force: true}
	if _, err := cs.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(manyNamespace), apply); err != nil {
		return err
	}
	list, err := cs.CoreV1().Pods(manyNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, p := range list.Items {
		have[p.Name] = true
	}
	want := map[string]bool{}
	for i := range pods {
		name := manyPodName(i)
		want[name] = true
		if have[name] {
			continue
		}
		if _, err := cs.CoreV1().Pods(manyNamespace).Apply(ctx, testenv.SmallPod(manyNamespace, name, i), apply); err != nil {
			return err
		}
	}
	now := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	for name := range have {
		if want[name] {
			continue
		}
		if err := cs.CoreV1().Pods(manyNamespace).Delete(ctx, name, now); err != nil {
			return err
		}
	}
	return nil
}

func manyPodName(i int) string { return "pod-" + strconv.Itoa(i) }

// Bounds of settle.
const (
	settleWindow = 500 * time.Millisecond
	// settleIdle is the CPU time that the apiservers and etcds of an env may spend in a
	// window and be idle: their Lease renewals and the like.
	settleIdle = 25 * time.Millisecond
	settleMax  = 15 * time.Second
)

// settle waits until the etcds and apiservers of env have been idle for a window, at
// most settleMax (logged), so that a contender does not share the machine with their
// work for the one before it: the ending of its thousands of watches, the writes of the
// row's pods. Every contender of a row waits so, the first as the others.
func settle(ctx context.Context, env *testenv.Env) {
	var pids []int
	for _, c := range env.Clusters {
		pids = append(pids, c.PIDs()...)
	}
	cpu := func() float64 {
		var sum float64
		for _, pid := range pids {
			sum += procCPU(pid)
		}
		return sum
	}
	start := time.Now()
	last := cpu()
	for time.Since(start) < settleMax {
		select {
		case <-ctx.Done():
			return
		case <-time.After(settleWindow):
		}
		now := cpu()
		if now-last <= settleIdle.Seconds() {
			return
		}
		last = now
	}
	log.Printf("many: the apiservers were still busy after %v", settleMax)
}
