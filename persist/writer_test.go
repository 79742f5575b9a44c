package persist

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	berrors "go.etcd.io/bbolt/errors"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
)

// step is one call to a Writer, or a Flush.
type step func(w *Writer)

func upsert(cluster, ns, name, version string) step {
	return func(w *Writer) { w.Upsert(cluster, pods, object(ns, name, version)) }
}

func del(cluster, ns, name string) step {
	return func(w *Writer) { w.Delete(cluster, pods, ns, name) }
}

func checkpoint(cluster, rv string) step {
	return func(w *Writer) { w.Checkpoint(cluster, pods, rv) }
}

func flush(w *Writer) {
	if err := w.Flush(context.Background()); err != nil {
		panic(err)
	}
}

func TestWriterConsistency(t *testing.T) {
	// want maps each cluster to its stored rv and objects after the steps, the steps
	// ending with a Flush; a cluster missing from want has no stored pods.
	type stored struct {
		rv      string
		objects []string
	}
	tests := []struct {
		name  string
		steps []step
		want  map[string]stored
	}{
		{
			name:  "changes without a checkpoint are not stored",
			steps: []step{upsert("a", "ns", "p1", "1"), del("a", "ns", "p2"), flush},
			want:  map[string]stored{},
		},
		{
			name:  "a checkpoint stores the changes before it",
			steps: []step{upsert("a", "ns", "p1", "1"), upsert("a", "", "node", "1"), checkpoint("a", "10"), flush},
			want:  map[string]stored{"a": {"10", []string{"/node=1", "ns/p1=1"}}},
		},
		{
			name: "a checkpoint stores exactly up to itself",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"),
				upsert("a", "ns", "p1", "2"), upsert("a", "ns", "p2", "1"), flush,
			},
			want: map[string]stored{"a": {"10", []string{"ns/p1=1"}}},
		},
		{
			name: "the latest checkpoint wins",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"),
				upsert("a", "ns", "p1", "2"), upsert("a", "ns", "p2", "1"), checkpoint("a", "11"),
				del("a", "ns", "p2"), flush,
			},
			want: map[string]stored{"a": {"11", []string{"ns/p1=2", "ns/p2=1"}}},
		},
		{
			name: "across commits",
			steps: []step{
				upsert("a", "ns", "p1", "1"), upsert("a", "ns", "p2", "1"), checkpoint("a", "10"), flush,
				del("a", "ns", "p1"), upsert("a", "ns", "p3", "1"), checkpoint("a", "12"), flush,
				upsert("a", "ns", "p3", "2"), flush,
			},
			want: map[string]stored{"a": {"12", []string{"ns/p2=1", "ns/p3=1"}}},
		},
		{
			name: "a delete wins over an earlier upsert",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"), flush,
				upsert("a", "ns", "p1", "2"), del("a", "ns", "p1"), checkpoint("a", "11"), flush,
			},
			want: map[string]stored{"a": {"11", nil}},
		},
		{
			name: "an upsert wins over an earlier delete",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"), flush,
				del("a", "ns", "p1"), upsert("a", "ns", "p1", "3"), checkpoint("a", "11"), flush,
			},
			want: map[string]stored{"a": {"11", []string{"ns/p1=3"}}},
		},
		{
			name: "an empty resource is stored",
			steps: []step{
				upsert("a", "ns", "p1", "1"), del("a", "ns", "p1"), checkpoint("a", "10"), flush,
			},
			want: map[string]stored{"a": {"10", nil}},
		},
		{
			name: "clusters are independent",
			steps: []step{
				upsert("a", "ns", "p1", "1"), upsert("b", "ns", "p1", "1"), checkpoint("a", "10"), flush,
				checkpoint("b", "20"), flush,
			},
			want: map[string]stored{"a": {"10", []string{"ns/p1=1"}}, "b": {"20", []string{"ns/p1=1"}}},
		},
		{
			name: "a drop discards what came before it",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"), flush,
				upsert("a", "ns", "p2", "1"), checkpoint("a", "11"),
				upsert("a", "ns", "p3", "1"),
				func(w *Writer) { w.DropResource("a", pods) },
				upsert("a", "ns", "p4", "1"), checkpoint("a", "30"), flush,
			},
			want: map[string]stored{"a": {"30", []string{"ns/p4=1"}}},
		},
		{
			name: "a drop without a checkpoint after it deletes the resource",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"), flush,
				func(w *Writer) { w.DropResource("a", pods) }, upsert("a", "ns", "p2", "1"), flush,
			},
			want: map[string]stored{},
		},
		{
			name: "a cluster drop",
			steps: []step{
				upsert("a", "ns", "p1", "1"), checkpoint("a", "10"), upsert("b", "ns", "p1", "1"), checkpoint("b", "10"), flush,
				upsert("a", "ns", "p2", "1"), checkpoint("a", "11"),
				func(w *Writer) { w.DropCluster("a") }, flush,
			},
			want: map[string]stored{"b": {"10", []string{"ns/p1=1"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t, testPath(t), Options{})
			w := s.NewWriter(WriterOptions{})
			for _, step := range tt.steps {
				step(w)
			}
			snap := mustLoad(t, s)
			got := map[string]stored{}
			for cluster := range snap.Clusters {
				if rs := resourceOf(snap, cluster, pods); rs != nil {
					got[cluster] = stored{rs.ResourceVersion, contents(t, rs)}
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("stored:\n got %v\nwant %v", got, tt.want)
			}
			if err := s.Verify(); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestWriterRoundTrip(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	want := map[string]runtime.Object{}
	for i, name := range []string{"a", "b", "c"} {
		pod := testPod(t, "shop", name)
		w.Upsert("prod", pods, pod)
		want["pods/"+name] = pod
		md := testMetadata(t, "shop", name)
		w.Upsert("arn:aws:eks:eu-west-1:123:cluster/prod", deployments, md)
		want["deployments/"+name] = md
		_ = i
	}
	w.Checkpoint("prod", pods, "100")
	w.Checkpoint("arn:aws:eks:eu-west-1:123:cluster/prod", deployments, "200")
	if err := s.SetIdentity("prod", Identity{UID: "kube-system-uid", Server: "https://prod.example.com"}); err != nil {
		t.Fatal(err)
	}
	// SetIdentity went through the Writer and committed its checkpoints with it.
	if st := w.Stats(); st.Pending != 0 || st.Commits != 1 {
		t.Errorf("after SetIdentity: %+v", st)
	}
	s.Close()

	s = openTest(t, path, Options{})
	snap := mustLoad(t, s)
	if id := snap.Clusters["prod"].Identity; id != (Identity{UID: "kube-system-uid", Server: "https://prod.example.com"}) {
		t.Errorf("identity %+v", id)
	}
	prodPods := resourceOf(snap, "prod", pods)
	eksDeploy := resourceOf(snap, "arn:aws:eks:eu-west-1:123:cluster/prod", deployments)
	if prodPods.ResourceVersion != "100" || eksDeploy.ResourceVersion != "200" {
		t.Fatalf("rvs %q %q", prodPods.ResourceVersion, eksDeploy.ResourceVersion)
	}
	if prodPods.MetadataOnly() || !eksDeploy.MetadataOnly() {
		t.Errorf("MetadataOnly: pods %v, deployments %v", prodPods.MetadataOnly(), eksDeploy.MetadataOnly())
	}
	for i, name := range []string{"a", "b", "c"} {
		if !reflect.DeepEqual(prodPods.Objects[i], want["pods/"+name]) {
			t.Errorf("pod %s differs", name)
		}
		if !reflect.DeepEqual(eksDeploy.Objects[i], want["deployments/"+name]) {
			t.Errorf("deployment %s differs", name)
		}
	}
}

func TestStoreOperationsWithoutWriter(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	for _, c := range []string{"a", "b"} {
		w.Upsert(c, pods, object("ns", "p", "1"))
		w.Checkpoint(c, pods, "1")
		w.Upsert(c, deployments, metadataObject("ns", "d", "1"))
		w.Checkpoint(c, deployments, "2")
	}
	flush(w)

	// A Store without a Writer commits each operation at once.
	s.Close()
	s2 := openTest(t, s.Path(), Options{})
	steps := []struct {
		name string
		do   func() error
		want []string // cluster/resource pairs stored after the step
	}{
		{"identity", func() error { return s2.SetIdentity("c", Identity{UID: "u"}) }, []string{"a/pods", "a/deployments", "b/pods", "b/deployments", "c"}},
		{"drop resource", func() error { return s2.DropResource("a", deployments) }, []string{"a/pods", "b/pods", "b/deployments", "c"}},
		{"drop missing resource", func() error { return s2.DropResource("x", deployments) }, []string{"a/pods", "b/pods", "b/deployments", "c"}},
		{"drop cluster", func() error { return s2.DropCluster("b") }, []string{"a/pods", "c"}},
		{"drop missing cluster", func() error { return s2.DropCluster("x") }, []string{"a/pods", "c"}},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		var got []string
		for name, cs := range mustLoad(t, s2).Clusters {
			if len(cs.Resources) == 0 {
				got = append(got, name)
			}
			for key := range cs.Resources {
				got = append(got, name+"/"+key.GroupVersionResource().Resource)
			}
		}
		if !reflect.DeepEqual(sorted(got), sorted(st.want)) {
			t.Errorf("after %s: %v, want %v", st.name, sorted(got), sorted(st.want))
		}
	}
	for name, err := range map[string]error{
		"empty cluster":  s2.SetIdentity("", Identity{}),
		"empty cluster2": s2.DropCluster(""),
		"bad resource":   s2.DropResource("a", "pods"),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
}

// startOnFakeClock starts a Writer with opts on a fake clock, and returns once its
// ticker waits on the clock. cancel stops Start, whose error comes on done.
func startOnFakeClock(t *testing.T, opts WriterOptions) (s *Store, w *Writer, clock *clocktesting.FakeClock, cancel func(), done <-chan error) {
	t.Helper()
	clock = clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	opts.Clock = clock
	s = openTest(t, testPath(t), Options{})
	w = s.NewWriter(opts)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- w.Start(ctx) }()
	for !clock.HasWaiters() { // the ticker
		time.Sleep(time.Millisecond)
	}
	return s, w, clock, cancel, errc
}

func TestWriterCommitsPerIntervalOrMaxPending(t *testing.T) {
	s, w, clock, cancel, done := startOnFakeClock(t, WriterOptions{Interval: time.Second, MaxPending: 10})
	waitFor := func(what string, cond func(Stats) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond(w.Stats()) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: %+v", what, w.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}

	// Below MaxPending: nothing until the interval is over.
	for i := range 5 {
		w.Upsert("a", pods, object("ns", "p"+string(rune('0'+i)), "1"))
	}
	w.Checkpoint("a", pods, "5")
	clock.Step(300 * time.Millisecond)
	if st := w.Stats(); st.Commits != 0 || st.Checkpointed != 5 || st.Lag != 300*time.Millisecond {
		t.Fatalf("before the interval: %+v", st)
	}
	clock.Step(700 * time.Millisecond)
	waitFor("the interval's commit", func(st Stats) bool { return st.Commits == 1 && st.Pending == 0 && st.Lag == 0 })

	// MaxPending checkpointed changes commit at once.
	for i := range 10 {
		w.Upsert("a", pods, object("ns", "q"+string(rune('0'+i)), "1"))
	}
	w.Checkpoint("a", pods, "15")
	waitFor("the commit at MaxPending", func(st Stats) bool { return st.Commits == 2 && st.Pending == 0 })

	// Unchecked changes count as pending, not as lag, and do not trigger a commit.
	for i := range 20 {
		w.Upsert("a", pods, object("ns", "r"+string(rune('0'+i)), "1"))
	}
	clock.Step(5 * time.Second)
	if st := w.Stats(); st.Pending != 20 || st.Checkpointed != 0 || st.Lag != 0 || st.OldestPending != 5*time.Second {
		t.Errorf("unchecked changes: %+v", st)
	}

	// Stopping flushes what is checkpointed.
	w.Checkpoint("a", pods, "35")
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rs := resourceOf(mustLoad(t, s), "a", pods); rs.ResourceVersion != "35" || len(rs.Objects) != 35 {
		t.Errorf("after Start returned: rv %s, %d objects", rs.ResourceVersion, len(rs.Objects))
	}
	if err := w.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start: got %v, want ErrStarted", err)
	}
}

// TestWriterSetTiming changes the interval and MaxPending of a running Writer.
func TestWriterSetTiming(t *testing.T) {
	_, w, clock, cancel, done := startOnFakeClock(t, WriterOptions{Interval: time.Hour, MaxPending: 100})
	defer func() {
		cancel()
		<-done
	}()
	commits := func() uint64 { return w.Stats().Commits }
	upsert := func(prefix string, n int, rv string) {
		for i := range n {
			w.Upsert("a", pods, object("ns", prefix+string(rune('0'+i)), "1"))
		}
		w.Checkpoint("a", pods, rv)
	}

	// A shorter interval: the next commit comes within it, not an hour later.
	upsert("p", 5, "5")
	w.SetTiming(time.Second, 100)
	for step := 0; commits() == 0; step++ {
		if step == 5 {
			t.Fatalf("no commit 5 s after the interval became 1 s: %+v", w.Stats())
		}
		clock.Step(time.Second)
		time.Sleep(20 * time.Millisecond)
	}

	// A MaxPending that the checkpointed changes reach commits at once.
	w.SetTiming(time.Hour, 100)
	upsert("q", 5, "10")
	time.Sleep(50 * time.Millisecond)
	if n := commits(); n != 1 {
		t.Fatalf("%d commits before MaxPending was lowered", n)
	}
	w.SetTiming(time.Hour, 3)
	deadline := time.Now().Add(10 * time.Second)
	for commits() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no commit once MaxPending was below the pending changes: %+v", w.Stats())
		}
		time.Sleep(time.Millisecond)
	}

	// Zero values mean the defaults.
	w.SetTiming(0, 0)
	if got := w.interval(); got != 5*time.Second {
		t.Errorf("interval %v, want the default 5s", got)
	}
}

// A commit in progress still counts as pending: its changes are not in the file yet.
func TestWriterStatsCountTheCommitInProgress(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{Clock: clock})
	for i := range 3 {
		w.Upsert("a", pods, object("ns", "p"+string(rune('0'+i)), "1"))
	}
	w.Checkpoint("a", pods, "3")
	clock.Step(2 * time.Second)

	// A write transaction of our own holds the commit inside bbolt.
	tx, err := s.db.Begin(true)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Flush(context.Background()) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		inflight := w.inflight != nil
		w.mu.Unlock()
		if inflight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the commit did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if st := w.Stats(); st.Pending != 3 || st.Checkpointed != 3 || st.Lag != 2*time.Second || st.OldestPending != 2*time.Second {
		t.Errorf("during the commit: %+v", st)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Pending != 0 || st.Checkpointed != 0 || st.Lag != 0 || st.Commits != 1 {
		t.Errorf("after the commit: %+v", st)
	}
}

func TestWriterKeepsChangesWhenCommitsFail(t *testing.T) {
	// A file capped at its current size fails each commit that needs to grow it, the way
	// a full disk does.
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	w.Upsert("a", pods, object("ns", "p0", "1"))
	w.Checkpoint("a", pods, "1")
	flush(w)
	capAtUsed(t, s)

	w.Upsert("a", pods, testPod(t, "ns", "p1"))
	w.Upsert("a", pods, testPod(t, "ns", "p2"))
	w.Delete("a", pods, "ns", "p0")
	w.Checkpoint("a", pods, "2")
	for i := range 200 {
		w.Upsert("b", pods, testPod(t, "ns", "big"+string(rune('a'+i%26))+strings.Repeat("x", i)))
	}
	w.Checkpoint("b", pods, "2")
	err := w.Flush(context.Background())
	if !errors.Is(err, berrors.ErrMaxSizeReached) {
		t.Fatalf("Flush on a full file: got %v", err)
	}
	st := w.Stats()
	if st.CommitErrors != 1 || st.LastError == nil || st.Checkpointed != 203 || st.Commits != 1 {
		t.Fatalf("after a failed commit: %+v", st)
	}
	// Nothing of the failed commit is in the file.
	if rs := resourceOf(mustLoad(t, s), "a", pods); rs.ResourceVersion != "1" || len(rs.Objects) != 1 {
		t.Fatalf("after a failed commit: rv %s, %d objects", rs.ResourceVersion, len(rs.Objects))
	}

	// Changes that arrive meanwhile win over the kept ones.
	w.Upsert("a", pods, object("ns", "p1", "newer"))
	w.Checkpoint("a", pods, "3")
	w.DropResource("b", pods)

	s.db.MaxSize = 0 // space is free again
	flush(w)
	snap := mustLoad(t, s)
	rs := resourceOf(snap, "a", pods)
	if got := contents(t, rs); rs.ResourceVersion != "3" || !reflect.DeepEqual(got, []string{"ns/p1=newer", "ns/p2="}) {
		t.Errorf("after the retry: rv %s, %v", rs.ResourceVersion, got)
	}
	if resourceOf(snap, "b", pods) != nil {
		t.Error("the dropped resource was stored")
	}
	if st := w.Stats(); st.Pending != 0 || st.Commits != 2 {
		t.Errorf("after the retry: %+v", st)
	}
}

func TestWriterDropsResourcesItCannotStore(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	w.Upsert("a", pods, object("ns", "p1", "1"))
	w.Checkpoint("a", pods, "1")
	w.Upsert("a", deployments, metadataObject("ns", "d1", "1"))
	w.Checkpoint("a", deployments, "1")
	flush(w)

	tests := []struct {
		name string
		obj  runtime.Object
	}{
		{"typed object", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}},
		{"no name", object("ns", "", "1")},
		{"not encodable", func() runtime.Object {
			o := object("ns", "nan", "1")
			o.Object["spec"] = map[string]any{"x": func() {}}
			return o
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := w.Stats().Rejected
			w.Upsert("a", pods, tt.obj)
			w.Upsert("a", pods, object("ns", "p2", "1"))
			w.Checkpoint("a", pods, "2")
			flush(w)
			st := w.Stats()
			if st.Rejected != before+1 || !errors.Is(st.LastError, ErrInvalid) {
				t.Errorf("stats: %+v", st)
			}
			snap := mustLoad(t, s)
			if resourceOf(snap, "a", pods) != nil {
				t.Error("the resource is still stored")
			}
			if resourceOf(snap, "a", deployments) == nil {
				t.Error("another resource was dropped")
			}
			// Until the caller drops it, the resource is not stored again.
			w.Upsert("a", pods, object("ns", "p3", "1"))
			w.Checkpoint("a", pods, "3")
			flush(w)
			if resourceOf(mustLoad(t, s), "a", pods) != nil {
				t.Error("the broken resource was stored again")
			}
			w.DropResource("a", pods)
			w.Upsert("a", pods, object("ns", "p4", "1"))
			w.Checkpoint("a", pods, "4")
			flush(w)
			if got := contents(t, resourceOf(mustLoad(t, s), "a", pods)); !reflect.DeepEqual(got, []string{"ns/p4=1"}) {
				t.Errorf("after the drop: %v", got)
			}
		})
	}
}

func TestWriterRejectsInvalidCalls(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	calls := []func(){
		func() { w.Upsert("", pods, object("ns", "p", "1")) },
		func() { w.Upsert("a", "/pods", object("ns", "p", "1")) },
		func() { w.Delete("a", pods, "ns", "") },
		func() { w.Checkpoint("a", pods, "") },
		func() { w.Checkpoint("a", "apps/v1/deployments/x", "1") },
		func() { w.DropCluster("") },
		func() { w.DropResource("", pods) },
	}
	for i, call := range calls {
		call()
		if st := w.Stats(); st.Rejected != uint64(i+1) || !errors.Is(st.LastError, ErrInvalid) {
			t.Errorf("call %d: %+v", i, st)
		}
	}
	flush(w)
	if snap := mustLoad(t, s); len(snap.Clusters) != 0 {
		t.Errorf("stored %v", snap.Clusters)
	}
}

func TestWriterConcurrentProducers(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{Interval: 5 * time.Millisecond, MaxPending: 50})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Start(ctx) }()
	var wg sync.WaitGroup
	for c := range 4 {
		cluster := "c" + string(rune('0'+c))
		wg.Go(func() {
			for i := range 300 {
				name := "p" + string(rune('a'+i%20))
				if i%7 == 0 {
					w.Delete(cluster, pods, "ns", name)
				} else {
					w.Upsert(cluster, pods, object("ns", name, cluster))
				}
				w.Checkpoint(cluster, pods, "1")
				_ = w.Stats()
			}
		})
	}
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Pending != 0 || st.CommitErrors != 0 {
		t.Errorf("%+v", st)
	}
}

func TestNewWriterTwicePanics(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	s.NewWriter(WriterOptions{})
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	s.NewWriter(WriterOptions{})
}

// TestWriterOnFullDisk fills a 1 MiB tmpfs. It needs root to mount, so it runs only when
// FLEETWATCH_TEST_TMPFS=1 (CI does not set it; TestWriterKeepsChangesWhenCommitsFail
// covers the same path with a size cap).
func TestWriterOnFullDisk(t *testing.T) {
	if os.Getenv("FLEETWATCH_TEST_TMPFS") != "1" {
		t.Skip("set FLEETWATCH_TEST_TMPFS=1, as root, to mount a 1 MiB tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	path := filepath.Join(dir, "fleetwatch.db")
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})

	var err error
	var n int
	for n = 0; n < 1000 && err == nil; n++ {
		w.Upsert("a", pods, testPod(t, "ns", "p"+strings.Repeat("x", n%200)+string(rune('a'+n/200))))
		w.Checkpoint("a", pods, "1")
		err = w.Flush(context.Background())
	}
	if err == nil {
		t.Fatal("1000 pods fit in 1 MiB")
	}
	t.Logf("after %d commits: %v", n, err)
	st := w.Stats()
	if st.CommitErrors == 0 || st.Pending == 0 {
		t.Errorf("stats: %+v", st)
	}
	// What was committed before the disk filled up loads, and is consistent.
	snap := mustLoad(t, s)
	if rs := resourceOf(snap, "a", pods); rs == nil || len(rs.Objects) != n-1 {
		t.Errorf("stored %v objects, want %d", rs, n-1)
	}
	if err := s.Verify(); err != nil {
		t.Error(err)
	}
	s.Close()
	s2 := openTest(t, path, Options{})
	if moved, _ := s2.Recovered(); moved != "" {
		t.Errorf("the full file was moved aside")
	}
}

func TestStoreOperationsGoThroughTheWriter(t *testing.T) {
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	w.Upsert("a", pods, object("ns", "p1", "1"))
	w.Checkpoint("a", pods, "1")
	w.Upsert("b", pods, object("ns", "p1", "1"))
	w.Checkpoint("b", pods, "1")
	flush(w)

	// Pending for a: a checkpointed change and an unchecked one. DropCluster discards
	// both, and commits b's checkpoint with it.
	w.Upsert("a", pods, object("ns", "p2", "1"))
	w.Checkpoint("a", pods, "2")
	w.Upsert("a", pods, object("ns", "p3", "1"))
	w.Upsert("b", pods, object("ns", "p2", "1"))
	w.Checkpoint("b", pods, "2")
	if err := s.DropCluster("a"); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Pending != 0 {
		t.Errorf("pending after DropCluster: %+v", st)
	}
	if err := s.SetIdentity("a", Identity{UID: "new"}); err != nil {
		t.Fatal(err)
	}
	w.Upsert("a", pods, object("ns", "p9", "1"))
	w.Checkpoint("a", pods, "9")
	flush(w)
	snap := mustLoad(t, s)
	if got := contents(t, resourceOf(snap, "a", pods)); !reflect.DeepEqual(got, []string{"ns/p9=1"}) || snap.Clusters["a"].Identity.UID != "new" {
		t.Errorf("a after the drop: %v, %+v", got, snap.Clusters["a"].Identity)
	}
	if got := contents(t, resourceOf(snap, "b", pods)); !reflect.DeepEqual(got, []string{"ns/p1=1", "ns/p2=1"}) {
		t.Errorf("b: %v", got)
	}
}

func TestLoadDoesNotRecoverUnderAWriter(t *testing.T) {
	path := testPath(t)
	writeSample(t, path)
	garbleObjectName(t, path)
	s := openTest(t, path, Options{})
	s.NewWriter(WriterOptions{})
	if _, err := s.Load(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	if moved, _ := s.Recovered(); moved != "" {
		t.Error("moved aside under a Writer")
	}
}

// TestQualifiedKeysAreIndependent: two informers of one resource (two namespaces) have
// their own keys, each with its own resourceVersion and its own checkpoints.
func TestQualifiedKeysAreIndependent(t *testing.T) {
	shop, web := ResourceKey("/v1/pods?ns=shop"), ResourceKey("/v1/pods?ns=web")
	s := openTest(t, testPath(t), Options{})
	w := s.NewWriter(WriterOptions{})
	w.Upsert("a", shop, object("shop", "p1", "1"))
	w.Checkpoint("a", shop, "100")
	w.Upsert("a", web, object("web", "p1", "1")) // web is in the middle of its list
	flush(w)
	snap := mustLoad(t, s)
	if rs := resourceOf(snap, "a", shop); rs == nil || rs.ResourceVersion != "100" || len(rs.Objects) != 1 {
		t.Errorf("shop: %+v", rs)
	}
	if rs := resourceOf(snap, "a", web); rs != nil {
		t.Errorf("web was stored before its checkpoint: %+v", rs)
	}
	w.Checkpoint("a", web, "7")
	w.DropResource("a", shop)
	flush(w)
	snap = mustLoad(t, s)
	if resourceOf(snap, "a", shop) != nil || resourceOf(snap, "a", web).ResourceVersion != "7" {
		t.Errorf("after dropping shop: %+v", snap.Clusters["a"].Resources)
	}
}
