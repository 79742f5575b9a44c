package aggregate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// writer drives one cluster's pod store with random creates, updates and deletes of a
// fixed set of names, with increasing resourceVersions.
type writer struct {
	store *aggregate.ClusterStore
	rng   *rand.Rand
	names int
	rv    int
	// live are the names currently present, as the writer believes.
	live map[string]bool
	// events counts the writes that produce an event.
	events int
	// partial applies objects as an informer of a compact fleet does
	// (ClusterStore.ApplyPartial), so that their events carry them encoded.
	partial bool
}

func newWriter(s *aggregate.ClusterStore, seed uint64, names int) *writer {
	return &writer{store: s, rng: rand.New(rand.NewPCG(seed, 1)), names: names, live: make(map[string]bool)}
}

// writeConcurrently runs a writer of 20 names on each of clusters clusters (c0, c1, ...;
// seeds from seed on), steps writes each, all at once, and returns the events written.
func writeConcurrently(t *testing.T, f *aggregate.Fleet, clusters, steps int, seed uint64, partial bool) int {
	t.Helper()
	writers := make([]*writer, clusters)
	var wg sync.WaitGroup
	for c := range clusters {
		w := newWriter(f.ClusterStore(fmt.Sprintf("c%d", c), aggregatetest.Pods), seed+uint64(c), 20)
		w.partial = partial
		writers[c] = w
		wg.Go(func() {
			for range steps {
				if err := w.step(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	total := 0
	for _, w := range writers {
		total += w.events
	}
	return total
}

func (w *writer) step() error {
	name := "p" + strconv.Itoa(w.rng.IntN(w.names))
	w.rv++
	obj := aggregatetest.Pod("ns"+strconv.Itoa(w.rng.IntN(3)), name, strconv.Itoa(w.rv), map[string]string{"v": strconv.Itoa(w.rv % 4)})
	// Keep the namespace stable per name so that a name is one object.
	obj.SetNamespace("ns")
	if w.live[name] && w.rng.IntN(4) == 0 {
		delete(w.live, name)
		w.events++
		return w.store.Delete(obj, w.rng.IntN(2) == 0)
	}
	w.live[name] = true
	w.events++
	if w.partial {
		return applyPartial(w.store, obj)
	}
	return w.store.Apply(obj, false)
}

// checkView compares a handler's replayed view with the fleet's indexers.
func checkView(t *testing.T, f *aggregate.Fleet, view *aggregatetest.View) {
	t.Helper()
	for _, err := range view.Errors() {
		t.Error(err)
	}
	want := make(map[aggregatetest.ObjectRef]string)
	for _, gvr := range f.Resources() {
		ix := f.Indexer(gvr)
		for _, k := range ix.ListKeys() {
			if k.Cluster == "barrier" {
				continue
			}
			o, _ := ix.Get(k)
			want[aggregatetest.ObjectRef{Resource: gvr, Key: k}] = aggregatetest.RV(o)
		}
	}
	got := make(map[aggregatetest.ObjectRef]string)
	for ref, o := range view.Objects() {
		if ref.Key.Cluster != "barrier" {
			got[ref] = aggregatetest.RV(o)
		}
	}
	for ref, rv := range want {
		if got[ref] != rv {
			t.Errorf("%s: handler has rv %q, cache has %q", ref.Key, got[ref], rv)
		}
	}
	for ref := range got {
		if _, ok := want[ref]; !ok {
			t.Errorf("%s: handler has it, cache does not", ref.Key)
		}
	}
}

// viewRecorder replays events into a View and records them for barriers.
type viewRecorder struct {
	view *aggregatetest.View
	rec  *aggregatetest.Recorder
}

func newViewRecorder() *viewRecorder {
	return &viewRecorder{view: &aggregatetest.View{Monotonic: true}, rec: aggregatetest.NewRecorder()}
}

func (v *viewRecorder) OnEvent(e aggregate.Event) {
	v.view.OnEvent(e)
	v.rec.OnEvent(e)
}

func TestLateHandlerGetsCurrentStateExactlyOnce(t *testing.T) {
	for _, maxBacklog := range []int{0, 5} {
		t.Run(fmt.Sprintf("MaxBacklog=%d", maxBacklog), func(t *testing.T) {
			f := aggregate.New(aggregate.Options{})
			startFleet(t, f)
			const clusters, steps = 4, 3000
			var wg sync.WaitGroup
			var progress atomic.Int64
			halfway := make(chan struct{})
			for c := range clusters {
				w := newWriter(f.ClusterStore(fmt.Sprintf("c%d", c), aggregatetest.Pods), uint64(c), 50)
				wg.Go(func() {
					for range steps {
						if err := w.step(); err != nil {
							t.Error(err)
							return
						}
						if progress.Add(1) == clusters*steps/2 {
							close(halfway)
						}
					}
				})
			}
			<-halfway
			vr := newViewRecorder()
			if _, err := f.AddHandler(vr, aggregate.HandlerOptions{MaxBacklog: maxBacklog}); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			barrier(t, f, vr.rec, "end")
			checkView(t, f, vr.view)
			initial := 0
			for _, e := range vr.rec.Events() {
				if e.InitialList {
					initial++
				}
			}
			if initial == 0 {
				t.Error("the late handler got no initial state")
			}
		})
	}
}

func TestPerObjectOrderUnderConcurrentWriters(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	handlers := []struct {
		name string
		opts aggregate.HandlerOptions
	}{
		{"default", aggregate.HandlerOptions{}},
		{"coalescing", aggregate.HandlerOptions{MaxBacklog: 3}},
		{"no-op updates", aggregate.HandlerOptions{DeliverNoOpUpdates: true}},
	}
	views := make([]*viewRecorder, len(handlers))
	regs := make([]*aggregate.Registration, len(handlers))
	for i, h := range handlers {
		views[i] = newViewRecorder()
		var err error
		h.opts.Name = h.name
		if regs[i], err = f.AddHandler(views[i], h.opts); err != nil {
			t.Fatal(err)
		}
	}
	total := writeConcurrently(t, f, 8, 1500, 100, false)
	barrier(t, f, views[0].rec, "end", views[1].rec, views[2].rec)
	for i, h := range handlers {
		t.Run(h.name, func(t *testing.T) {
			checkView(t, f, views[i].view)
			st := regs[i].Stats()
			// Every write produced one event (no write repeats a resourceVersion), plus
			// one for the barrier; each was delivered or coalesced.
			if got := int(st.Delivered + st.Coalesced); got != total+1 {
				t.Errorf("delivered %d + coalesced %d = %d, want %d", st.Delivered, st.Coalesced, got, total+1)
			}
		})
	}
}

// gate is a handler that blocks in OnEvent until it is opened, then forwards to next.
type gate struct {
	open    chan struct{}
	entered chan struct{} // receives once per event, before blocking
	next    aggregate.Handler
}

func newGate(next aggregate.Handler) *gate {
	return &gate{open: make(chan struct{}), entered: make(chan struct{}, 1), next: next}
}

func (g *gate) OnEvent(e aggregate.Event) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.open
	g.next.OnEvent(e)
}

func TestSlowHandlerDoesNotBlockOthers(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	slowRec := aggregatetest.NewRecorder()
	slow := newGate(slowRec)
	slowReg, err := f.AddHandler(slow, aggregate.HandlerOptions{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	fast := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(fast, aggregate.HandlerOptions{Name: "fast"}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	stores := []*aggregate.ClusterStore{f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("b", aggregatetest.Pods)}
	for i := range n {
		// Writes return while the slow handler is stuck in OnEvent.
		mustApply(t, stores[i%2], pod(fmt.Sprintf("p%d", i), "1"), false)
	}
	if err := fast.WaitForLen(waitCtx(t), n); err != nil {
		t.Fatal(err)
	}
	<-slow.entered // the slow handler is inside its first OnEvent
	if got := slowReg.Backlog(); got != n-1 {
		t.Errorf("slow backlog = %d, want %d", got, n-1)
	}
	if len(slowRec.Events()) != 0 {
		t.Error("slow handler got past its gate")
	}
	close(slow.open)
	if err := slowRec.WaitForLen(waitCtx(t), n); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(summary(slowRec.Events()), summary(fast.Events())) {
		t.Error("slow and fast handler saw different events")
	}
}

func TestCoalescingKeepsFinalStates(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	vr := newViewRecorder()
	g := newGate(vr)
	reg, err := f.AddHandler(g, aggregate.HandlerOptions{MaxBacklog: 10})
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(f.ClusterStore("a", aggregatetest.Pods), 7, 30)
	w2 := newWriter(f.ClusterStore("b", aggregatetest.Pods), 8, 30)
	for range 2000 {
		if err := w.step(); err != nil {
			t.Fatal(err)
		}
		if err := w2.step(); err != nil {
			t.Fatal(err)
		}
	}
	<-g.entered
	st := reg.Stats()
	if st.Backlog > 60 {
		t.Errorf("backlog %d exceeds the number of distinct objects (60)", st.Backlog)
	}
	if st.Coalesced == 0 {
		t.Error("nothing was coalesced")
	}
	close(g.open)
	barrier(t, f, vr.rec, "end")
	checkView(t, f, vr.view)
	// The barrier is recorded inside OnEvent; its delivery is counted once OnEvent returns.
	want := uint64(w.events + w2.events + 1)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		st = reg.Stats()
		if st.Delivered+st.Coalesced == want || time.Now().After(deadline) {
			break
		}
	}
	if got := st.Delivered + st.Coalesced; got != want {
		t.Errorf("delivered %d + coalesced %d = %d, want %d events", st.Delivered, st.Coalesced, got, want)
	}
	if st.Delivered >= uint64(w.events+w2.events) {
		t.Errorf("delivered %d events of %d: no coalescing", st.Delivered, w.events+w2.events)
	}
}

func TestHasSynced(t *testing.T) {
	t.Run("waits for stores and for delivery", func(t *testing.T) {
		f := aggregate.New(aggregate.Options{})
		startFleet(t, f)
		a, b := f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("b", aggregatetest.Pods)
		mustApply(t, a, pod("p", "1"), true)
		g := newGate(aggregatetest.NewRecorder())
		reg, err := f.AddHandler(g, aggregate.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mustApply(t, b, pod("q", "1"), true)
		a.MarkSynced()
		if reg.HasSynced() {
			t.Fatal("synced before store b")
		}
		b.MarkSynced()
		<-g.entered
		if reg.HasSynced() {
			t.Fatal("synced before the initial events were delivered")
		}
		// A store that appears now is not waited for.
		mustApply(t, f.ClusterStore("c", aggregatetest.Pods), pod("r", "1"), true)
		close(g.open)
		waitSynced(t, reg)
	})
	t.Run("no stores: synced once the snapshot is delivered", func(t *testing.T) {
		f := aggregate.New(aggregate.Options{})
		startFleet(t, f)
		reg, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitSynced(t, reg)
	})
	t.Run("all synced before the handler", func(t *testing.T) {
		f := aggregate.New(aggregate.Options{})
		startFleet(t, f)
		a := f.ClusterStore("a", aggregatetest.Pods)
		mustApply(t, a, pod("p", "1"), true)
		a.MarkSynced()
		g := newGate(aggregatetest.NewRecorder())
		reg, err := f.AddHandler(g, aggregate.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		<-g.entered
		if reg.HasSynced() {
			t.Fatal("synced before the snapshot was delivered")
		}
		close(g.open)
		waitSynced(t, reg)
	})
	t.Run("removed store is not waited for", func(t *testing.T) {
		f := aggregate.New(aggregate.Options{})
		startFleet(t, f)
		a := f.ClusterStore("a", aggregatetest.Pods)
		f.ClusterStore("b", aggregatetest.Pods) // never synced
		reg, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a.MarkSynced()
		if reg.HasSynced() {
			t.Fatal("synced while store b is pending")
		}
		f.RemoveCluster("b")
		waitSynced(t, reg)
	})
	t.Run("only the handler's resources are waited for", func(t *testing.T) {
		f := aggregate.New(aggregate.Options{})
		startFleet(t, f)
		f.ClusterStore("a", aggregatetest.Nodes) // never synced
		a := f.ClusterStore("a", aggregatetest.Pods)
		reg, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{Resources: []schema.GroupVersionResource{aggregatetest.Pods}})
		if err != nil {
			t.Fatal(err)
		}
		a.MarkSynced()
		waitSynced(t, reg)
	})
	t.Run("not before Start", func(t *testing.T) {
		f := aggregate.New(aggregate.Options{})
		a := f.ClusterStore("a", aggregatetest.Pods)
		mustApply(t, a, pod("p", "1"), true)
		a.MarkSynced()
		reg, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if reg.HasSynced() {
			t.Fatal("synced with undelivered events")
		}
		startFleet(t, f)
		waitSynced(t, reg)
	})
}

func TestPanickingHandler(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	a := f.ClusterStore("a", aggregatetest.Pods)
	var calls atomic.Int64
	reg, err := f.AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
		calls.Add(1)
		if e.Key().Name == "boom" {
			panic("handler bug")
		}
	}), aggregate.HandlerOptions{Name: "panicky"})
	if err != nil {
		t.Fatal(err)
	}
	other := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(other, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, a, pod("boom", "1"), true)
	mustApply(t, a, pod("fine", "1"), true)
	mustApply(t, a, pod("boom", "2"), true)
	a.MarkSynced()
	waitSynced(t, reg)
	st := reg.Stats()
	if st.Panics != 2 || st.Delivered != 3 || calls.Load() != 3 {
		t.Errorf("stats %+v, calls %d; want 2 panics in 3 deliveries", st, calls.Load())
	}
	if st.LastPanic.IsZero() {
		t.Error("LastPanic not set")
	}
	if err := other.WaitForLen(waitCtx(t), 3); err != nil {
		t.Fatal(err)
	}
}

func TestRemoveHandler(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	a := f.ClusterStore("a", aggregatetest.Pods)
	var (
		mu    sync.Mutex
		after bool // set once Remove has returned
		late  []aggregate.Event
	)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	reg, err := f.AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
		mu.Lock()
		if after {
			late = append(late, e)
		}
		mu.Unlock()
		if e.Key().Name == "block" {
			close(inFlight)
			<-release
		}
	}), aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, a, pod("block", "1"), false)
	mustApply(t, a, pod("queued", "1"), false)
	<-inFlight
	removed := make(chan struct{})
	go func() {
		reg.Remove()
		mu.Lock()
		after = true
		mu.Unlock()
		close(removed)
	}()
	close(release)
	<-removed
	mustApply(t, a, pod("later", "1"), false)
	other := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(other, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	barrier(t, f, other, "end")
	mu.Lock()
	defer mu.Unlock()
	if len(late) != 0 {
		t.Errorf("removed handler got %d events after Remove returned", len(late))
	}
	reg.Remove() // idempotent
	if got := len(f.Stats().Handlers); got != 1 {
		t.Errorf("%d handlers in Stats after Remove, want 1", got)
	}
}

func TestRemoveHandlerBeforeStart(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	var calls atomic.Int64
	reg, err := f.AddHandler(aggregate.HandlerFunc(func(aggregate.Event) { calls.Add(1) }), aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("p", "1"), false)
	reg.Remove()
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	startFleet(t, f)
	barrier(t, f, rec, "end")
	if calls.Load() != 0 {
		t.Error("handler removed before Start was called")
	}
}

func TestHandlerResources(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	// Registered before the resources exist.
	podsOnly, all := aggregatetest.NewRecorder(), aggregatetest.NewRecorder()
	if _, err := f.AddHandler(podsOnly, aggregate.HandlerOptions{Resources: []schema.GroupVersionResource{aggregatetest.Pods}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.AddHandler(all, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, f.ClusterStore("a", widgets), pod("w", "1"), false)
	mustApply(t, f.ClusterStore("a", aggregatetest.Nodes), aggregatetest.Node("n", "1", nil), false)
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("p", "1"), false)
	barrier(t, f, podsOnly, "end")
	barrier(t, f, all, "end")
	var got []schema.GroupVersionResource
	for _, e := range withoutCluster(podsOnly.Events(), "barrier") {
		got = append(got, e.Resource)
	}
	if !slices.Equal(got, []schema.GroupVersionResource{aggregatetest.Pods}) {
		t.Errorf("pods-only handler got %v", got)
	}
	got = nil
	for _, e := range withoutCluster(all.Events(), "barrier") {
		got = append(got, e.Resource)
	}
	if !slices.Equal(got, []schema.GroupVersionResource{widgets, aggregatetest.Nodes, aggregatetest.Pods}) {
		t.Errorf("all-resources handler got %v", got)
	}
}

func TestAddHandlerFromHandler(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	inner := aggregatetest.NewRecorder()
	added := make(chan error, 1)
	var once sync.Once
	if _, err := f.AddHandler(aggregate.HandlerFunc(func(aggregate.Event) {
		once.Do(func() {
			_, err := f.AddHandler(inner, aggregate.HandlerOptions{})
			added <- err
		})
	}), aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("p", "1"), false)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	if err := inner.WaitForLen(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
}

func TestFleetLifecycleErrors(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	if _, err := f.AddHandler(nil, aggregate.HandlerOptions{}); !errors.Is(err, aggregate.ErrInvalidHandler) {
		t.Errorf("nil handler: %v", err)
	}
	if _, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{MaxBacklog: -1}); !errors.Is(err, aggregate.ErrInvalidHandler) {
		t.Errorf("negative MaxBacklog: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	rec := aggregatetest.NewRecorder()
	reg, err := f.AddHandler(rec, aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("p", "1"), false)
	go func() { done <- f.Start(ctx) }()
	if err := rec.WaitForLen(waitCtx(t), 1); err != nil { // Start is running
		t.Fatal(err)
	}
	if err := f.Start(ctx); !errors.Is(err, aggregate.ErrAlreadyStarted) {
		t.Errorf("second Start: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{}); !errors.Is(err, aggregate.ErrStopped) {
		t.Errorf("AddHandler after stop: %v", err)
	}
	// The cache keeps working.
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("q", "1"), false)
	if f.Indexer(aggregatetest.Pods).Len() != 2 {
		t.Error("cache does not work after stop")
	}
	reg.Remove() // after stop: returns at once
}

func TestShutdownTimeout(t *testing.T) {
	f := aggregate.New(aggregate.Options{ShutdownTimeout: 10 * time.Millisecond})
	g := newGate(aggregate.HandlerFunc(func(aggregate.Event) {}))
	reg, err := f.AddHandler(g, aggregate.HandlerOptions{Name: "stuck"})
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), pod("p", "1"), false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Start(ctx) }()
	<-g.entered
	cancel()
	err = <-done
	if !errors.Is(err, aggregate.ErrShutdownTimeout) {
		t.Errorf("Start = %v, want ErrShutdownTimeout", err)
	}
	close(g.open)
	reg.Remove() // waits for the goroutine to exit
}

// Objects handed to handlers are the cached ones, not copies.
func TestEventsCarryCachedObjects(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	rec := aggregatetest.NewRecorder()
	if _, err := f.AddHandler(rec, aggregate.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	p := pod("p", "1")
	mustApply(t, f.ClusterStore("a", aggregatetest.Pods), p, false)
	if err := rec.WaitForLen(waitCtx(t), 1); err != nil {
		t.Fatal(err)
	}
	if rec.Events()[0].Object != runtime.Object(p) {
		t.Error("event object is not the stored object")
	}
}

func TestHoldSyncGatesEarlyHandlers(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	release := f.HoldSync()
	rec := aggregatetest.NewRecorder()
	reg, err := f.AddHandler(rec, aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.Start(ctx) }()
	// No store exists yet: without the hold the handler would count as synced now.
	time.Sleep(20 * time.Millisecond)
	if reg.HasSynced() {
		t.Fatal("synced while the fleet's sync is held")
	}
	s := f.ClusterStore("prod", aggregatetest.Pods)
	for i := range 3 {
		if err := s.Apply(aggregatetest.Pod("ns", fmt.Sprint("p", i), "1", nil), true); err != nil {
			t.Fatal(err)
		}
	}
	s.MarkSynced()
	if reg.HasSynced() {
		t.Fatal("synced before the hold was released")
	}
	release()
	release() // idempotent
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		t.Fatal("not synced after release")
	}
	if n := len(rec.Events()); n != 3 {
		t.Errorf("synced after %d events, want 3", n)
	}
	// A handler registered after the release is not gated.
	late, err := f.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), late.HasSynced) {
		t.Fatal("late handler not synced")
	}
}

// TestHandlerCluster checks a handler limited to one cluster: its initial state and its
// events are that cluster's only, it waits for that cluster's stores only, and Replayed
// tells when its initial state was delivered while the stores have not synced.
func TestHandlerCluster(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	a, b := f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("b", aggregatetest.Pods)
	mustApply(t, a, aggregatetest.Pod("ns", "a1", "1", nil), true)
	mustApply(t, b, aggregatetest.Pod("ns", "b1", "1", nil), true)
	b.MarkSynced()

	rec := aggregatetest.NewRecorder()
	reg, err := f.AddHandler(rec, aggregate.HandlerOptions{Cluster: "b"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Replayed():
	case <-time.After(waitTimeout):
		t.Fatal("the initial state of cluster b was not delivered")
	}
	// Store a is not synced, but the handler does not wait for it.
	waitSynced(t, reg)
	mustApply(t, a, aggregatetest.Pod("ns", "a2", "2", nil), false)
	mustApply(t, b, aggregatetest.Pod("ns", "b2", "2", nil), false)
	mustDelete(t, b, aggregatetest.Pod("ns", "b1", "1", nil), false)
	if err := rec.WaitForLen(waitCtx(t), 3); err != nil {
		t.Fatal(err)
	}
	want := []string{"Added b/ns/b1@1 initial", "Added b/ns/b2@2", "Deleted b/ns/b1@1"}
	if got := summary(rec.Events()); !slices.Equal(got, want) {
		t.Errorf("events of the handler of cluster b:\n got %q\nwant %q", got, want)
	}

	// Replayed is closed at once for a handler with nothing to replay, before Start.
	g := aggregate.New(aggregate.Options{})
	reg, err = g.AddHandler(aggregatetest.NewRecorder(), aggregate.HandlerOptions{Cluster: "none"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Replayed():
	default:
		t.Error("Replayed is not closed for a handler without initial state")
	}
}

// TestHandlerCaughtUp checks CaughtUp against Replayed: a handler added to an empty
// fleet has replayed at once, but has caught up only once it was delivered the events
// queued before the call, and the events queued after the call are not waited for.
func TestHandlerCaughtUp(t *testing.T) {
	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	rec := aggregatetest.NewRecorder()
	g := newGate(rec)
	reg, err := f.AddHandler(g, aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-reg.Replayed():
	case <-time.After(waitTimeout):
		t.Fatal("a handler added to an empty fleet has not replayed")
	}
	select {
	case <-reg.CaughtUp():
	default:
		t.Fatal("CaughtUp is not closed for a handler with nothing queued")
	}
	s := f.ClusterStore("prod", aggregatetest.Pods)
	for i := range 3 {
		mustApply(t, s, aggregatetest.Pod("ns", fmt.Sprint("p", i), "1", nil), true)
	}
	caughtUp := reg.CaughtUp()
	mustApply(t, s, aggregatetest.Pod("ns", "later", "2", nil), false)
	<-g.entered
	select {
	case <-caughtUp:
		t.Fatal("caught up while the first event is being delivered")
	default:
	}
	// The event queued after the call is not waited for: a handler that blocks on it
	// has caught up.
	later := make(chan struct{})
	g.next = aggregate.HandlerFunc(func(e aggregate.Event) {
		rec.OnEvent(e)
		if e.Key().Name == "later" {
			<-later
		}
	})
	close(g.open)
	select {
	case <-caughtUp:
	case <-time.After(waitTimeout):
		t.Fatal("not caught up after the events queued before the call were delivered")
	}
	if n := len(rec.Events()); n < 3 {
		t.Errorf("caught up after %d events, want 3", n)
	}
	close(later)

	// Removed, a handler counts as caught up.
	h := newGate(aggregatetest.NewRecorder())
	reg, err = f.AddHandler(h, aggregate.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	<-h.entered
	caughtUp = reg.CaughtUp()
	close(h.open)
	reg.Remove()
	select {
	case <-caughtUp:
	case <-time.After(waitTimeout):
		t.Fatal("CaughtUp is not closed once the handler was removed")
	}
}
