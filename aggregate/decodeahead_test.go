package aggregate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// countingCodec is the snapshot's codec, counting its decodes. While stall is set, each
// decode first reports on stalled and then waits for release to be closed.
type countingCodec struct {
	persist.Codec
	// decodes counts both kinds, plain those with Decode (not DecodeShared).
	decodes, plain atomic.Int64

	mu       sync.Mutex
	stall    bool
	stalled  chan struct{}
	released chan struct{}
}

func (c *countingCodec) Decode(data []byte) (runtime.Object, error) {
	c.plain.Add(1)
	c.count()
	return c.Codec.Decode(data)
}

// DecodeShared is the one the fleet decodes with (aggregate.SharingDecoder).
func (c *countingCodec) DecodeShared(data []byte) (runtime.Object, error) {
	c.count()
	return c.Codec.DecodeShared(data)
}

// count counts a decode, and stalls it while stall is set.
func (c *countingCodec) count() {
	c.decodes.Add(1)
	c.mu.Lock()
	stall, stalled, released := c.stall, c.stalled, c.released
	c.mu.Unlock()
	if stall {
		select {
		case stalled <- struct{}{}:
		default:
		}
		<-released
	}
}

// stallDecodes makes every later decode wait until the returned function is called.
func (c *countingCodec) stallDecodes() (stalled <-chan struct{}, release func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stall, c.stalled, c.released = true, make(chan struct{}, 1), make(chan struct{})
	released := c.released
	var once sync.Once
	return c.stalled, func() {
		once.Do(func() {
			c.mu.Lock()
			c.stall = false
			c.mu.Unlock()
			close(released)
		})
	}
}

// applyPartial applies obj as the informers of a compact fleet do: its encoding, and of
// the object only what files it, so that its event carries it encoded.
func applyPartial(s *aggregate.ClusterStore, obj *unstructured.Unstructured) error {
	encoded, err := persist.Codec{}.Encode(obj)
	if err != nil {
		return err
	}
	return aggregatetest.ApplyEncoded(s, obj, encoded, false)
}

func mustApplyPartial(t testing.TB, s *aggregate.ClusterStore, obj *unstructured.Unstructured) {
	t.Helper()
	if err := applyPartial(s, obj); err != nil {
		t.Fatalf("ApplyPartial: %v", err)
	}
}

// compactFleet returns a compact fleet with the counting codec that holds up to window
// events decoded ahead of its handlers, with helpers goroutines per handler.
func compactFleet(window, helpers int) (*aggregate.Fleet, *countingCodec) {
	c := &countingCodec{}
	f := aggregate.New(aggregate.Options{Codec: c, DecodeAhead: window})
	aggregate.SetDecodeHelpers(f, helpers)
	return f, c
}

// waitDecodeAhead waits until cond holds of r's events taken to decode ahead and of
// its helpers that do not wait for the handler.
func waitDecodeAhead(t *testing.T, r *aggregate.Registration, cond func(claimed, busyHelpers int) bool) {
	t.Helper()
	for deadline := time.Now().Add(waitTimeout); ; time.Sleep(time.Millisecond) {
		claimed, busy := aggregate.DecodeAhead(r)
		if cond(claimed, busy) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("decoding ahead: %d events taken, %d helpers busy", claimed, busy)
		}
	}
}

// TestDecodeAheadIsBounded: behind stuck handlers, helpers decode their next events up
// to the fleet's bound, all handlers together, and no further, however long the
// backlogs; once the handlers go on, they get every event once, in order, each decoded
// once per handler.
func TestDecodeAheadIsBounded(t *testing.T) {
	const window, n = 8, 500
	f, codec := compactFleet(window, 2)
	startFleet(t, f)
	recs := []*aggregatetest.Recorder{aggregatetest.NewRecorder(), aggregatetest.NewRecorder()}
	gates := []*gate{newGate(recs[0]), newGate(recs[1])}
	regs := make([]*aggregate.Registration, 2)
	for i, g := range gates {
		var err error
		if regs[i], err = f.AddHandler(g, aggregate.HandlerOptions{MaxBacklog: 2 * n}); err != nil {
			t.Fatal(err)
		}
	}
	s := f.ClusterStore("a", aggregatetest.Pods)
	for i := range n {
		mustApplyPartial(t, s, aggregatetest.RealisticPod("ns", fmt.Sprintf("p%d", i), strconv.Itoa(i+1), nil))
	}
	for _, g := range gates {
		<-g.entered
	}
	for deadline := time.Now().Add(waitTimeout); aggregate.AheadTaken(f) < window; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events decoded ahead, want %d", aggregate.AheadTaken(f), window)
		}
	}
	for _, reg := range regs {
		waitDecodeAhead(t, reg, func(_, busy int) bool { return busy == 0 })
	}
	time.Sleep(20 * time.Millisecond)
	// The events inside OnEvent, and the bound.
	if got := codec.decodes.Load(); got > window+2 {
		t.Fatalf("%d objects decoded behind two stuck handlers with %d events waiting each, want at most %d", got, n-1, window+2)
	}
	if got := aggregate.AheadTaken(f); got > window {
		t.Fatalf("%d events decoded ahead, want at most %d", got, window)
	}
	for _, g := range gates {
		close(g.open)
	}
	for _, rec := range recs {
		if err := rec.WaitForLen(waitCtx(t), n); err != nil {
			t.Fatal(err)
		}
		for i, e := range rec.Events() {
			if want := fmt.Sprintf("p%d", i); e.Type != aggregate.Added || e.Key().Name != want || aggregatetest.RV(e.Object) != strconv.Itoa(i+1) {
				t.Fatalf("event %d: %s %s@%s, want Added %s@%d", i, e.Type, e.Key().Name, aggregatetest.RV(e.Object), want, i+1)
			}
		}
	}
	if got := codec.decodes.Load(); got != 2*n {
		t.Errorf("%d decodes for %d events to 2 handlers, want one each", got, n)
	}
	for _, reg := range regs {
		waitDecodeAhead(t, reg, func(claimed, busy int) bool { return claimed == 0 && busy == 0 })
	}
	if got := aggregate.AheadTaken(f); got != 0 {
		t.Errorf("%d events counted as decoded ahead once every event was delivered", got)
	}
}

// TestDecodeAheadOfAReplay: without Options.DecodeAhead, helpers decode ahead of a
// handler's replay of the objects the fleet held when it was added (a warm start's),
// up to ReplayDecodeAhead, and not ahead of a handler that takes the same objects as
// they come; each handler gets every event once, in order, each object decoded once.
func TestDecodeAheadOfAReplay(t *testing.T) {
	const n = 3 * aggregate.ReplayDecodeAhead
	f, codec := compactFleet(0, 1)
	aggregate.NoDecodeAhead(f)
	startFleet(t, f)
	liveRec, replayRec := aggregatetest.NewRecorder(), aggregatetest.NewRecorder()
	live, replay := newGate(liveRec), newGate(replayRec)
	liveReg, err := f.AddHandler(live, aggregate.HandlerOptions{MaxBacklog: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	s := f.ClusterStore("a", aggregatetest.Pods)
	for i := range n {
		mustApplyPartial(t, s, aggregatetest.RealisticPod("ns", fmt.Sprintf("p%d", i), strconv.Itoa(i+1), nil))
	}
	<-live.entered
	replayReg, err := f.AddHandler(replay, aggregate.HandlerOptions{MaxBacklog: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	<-replay.entered
	for deadline := time.Now().Add(waitTimeout); aggregate.AheadTaken(f) < aggregate.ReplayDecodeAhead; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d events decoded ahead of a replay, want %d", aggregate.AheadTaken(f), aggregate.ReplayDecodeAhead)
		}
	}
	waitDecodeAhead(t, replayReg, func(_, busy int) bool { return busy == 0 })
	time.Sleep(20 * time.Millisecond)
	if claimed, _ := aggregate.DecodeAhead(liveReg); claimed != 0 {
		t.Errorf("%d events decoded ahead of a handler that is not replaying, without DecodeAhead", claimed)
	}
	if got := aggregate.AheadTaken(f); got > aggregate.ReplayDecodeAhead {
		t.Fatalf("%d events decoded ahead, want at most %d", got, aggregate.ReplayDecodeAhead)
	}
	close(live.open)
	close(replay.open)
	// The live handler gets the objects as they came, the replay in the fleet's order.
	for _, rec := range []*aggregatetest.Recorder{liveRec, replayRec} {
		if err := rec.WaitForLen(waitCtx(t), n); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i, e := range rec.Events() {
			name := e.Key().Name
			k, _ := strconv.Atoi(name[1:])
			if e.Type != aggregate.Added || seen[name] || aggregatetest.RV(e.Object) != strconv.Itoa(k+1) || rec == liveRec && k != i {
				t.Fatalf("event %d: %s %s@%s", i, e.Type, name, aggregatetest.RV(e.Object))
			}
			seen[name] = true
		}
	}
	if got := codec.decodes.Load(); got != 2*n {
		t.Errorf("%d decodes for %d events to 2 handlers, want one each", got, n)
	}
	waitDecodeAhead(t, replayReg, func(claimed, busy int) bool { return claimed == 0 && busy == 0 })
	if got := aggregate.AheadTaken(f); got != 0 {
		t.Errorf("%d events counted as decoded ahead once every event was delivered", got)
	}
	// The replay delivered, the changes that follow are decoded by the handler's own
	// goroutine, which a stalled decode holds.
	<-replayReg.Replayed()
	stalled, release := codec.stallDecodes()
	defer release()
	for i := range 8 {
		mustApplyPartial(t, s, aggregatetest.RealisticPod("ns", fmt.Sprintf("p%d", i), strconv.Itoa(n+i+1), nil))
	}
	<-stalled
	time.Sleep(20 * time.Millisecond)
	if claimed, _ := aggregate.DecodeAhead(replayReg); claimed != 0 {
		t.Errorf("%d changes decoded ahead of a handler whose replay was delivered, without DecodeAhead", claimed)
	}
	release()
	if err := replayRec.WaitForLen(waitCtx(t), n+8); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeAheadSkipsCoalescedChanges: objects that change faster than their handler
// takes their events are decoded ahead at most once per pending event, not once per
// change, and the handler still gets consistent events ending at the final states.
func TestDecodeAheadSkipsCoalescedChanges(t *testing.T) {
	const window, maxBacklog, names, changes = 16, 4, 8, 200
	f, codec := compactFleet(window, 2)
	startFleet(t, f)
	vr := newViewRecorder()
	g := newGate(vr)
	reg, err := f.AddHandler(g, aggregate.HandlerOptions{MaxBacklog: maxBacklog})
	if err != nil {
		t.Fatal(err)
	}
	s := f.ClusterStore("a", aggregatetest.Pods)
	for i := range changes {
		mustApplyPartial(t, s, aggregatetest.Pod("ns", fmt.Sprintf("p%d", i%names), strconv.Itoa(i+1), map[string]string{"v": strconv.Itoa((i + 1) % 4)}))
		if i == 0 {
			<-g.entered
		}
		// Let the helpers catch up, so that every change lands on an event decoded ahead.
		waitDecodeAhead(t, reg, func(_, helpers int) bool { return helpers == 0 })
	}
	// Without deletions nothing cancels out, so the backlog had at most maxBacklog+1
	// events before it coalesced, and then one per object: each decoded ahead at most
	// once (two objects for an Updated), beside the event inside OnEvent. Decoding each
	// change, or each pending event again after every merge, would be ~changes.
	const slots = maxBacklog + 1 + names
	if got, most := codec.decodes.Load(), int64(1+2*slots); got > most {
		t.Errorf("%d objects decoded for a backlog of %d changes to %d objects, want at most %d", got, changes, names, most)
	}
	close(g.open)
	barrier(t, f, vr.rec, "end")
	checkView(t, f, vr.view)
	if got := aggregate.AheadTaken(f); got != 0 {
		t.Errorf("%d events counted as decoded ahead once every event was delivered", got)
	}
	st := reg.Stats()
	if st.Coalesced == 0 {
		t.Error("nothing was coalesced")
	}
	// Every delivered event decodes at most two objects; a pending event whose decoding
	// ahead a merge dropped wasted at most two.
	if got, most := codec.decodes.Load(), int64(2*st.Delivered+2*slots); got > most {
		t.Errorf("%d decodes for %d delivered events, want at most %d", got, st.Delivered, most)
	}
}

// TestDecodeAheadOrderUnderConcurrentWriters: with helpers decoding ahead, each handler
// still gets every object's events in order and consistent with what it saw before,
// coalescing or not, and every object decoded from the encoding of its own event.
func TestDecodeAheadOrderUnderConcurrentWriters(t *testing.T) {
	f, _ := compactFleet(12, 3)
	startFleet(t, f)
	type handler struct {
		opts aggregate.HandlerOptions
		slow bool
	}
	handlers := []handler{
		{opts: aggregate.HandlerOptions{Name: "default"}},
		{opts: aggregate.HandlerOptions{Name: "coalescing", MaxBacklog: 3}},
		{opts: aggregate.HandlerOptions{Name: "slow coalescing", MaxBacklog: 20}, slow: true},
	}
	views := make([]*viewRecorder, len(handlers))
	regs := make([]*aggregate.Registration, len(handlers))
	var mismatches atomic.Int64
	for i, h := range handlers {
		views[i] = newViewRecorder()
		rng := rand.New(rand.NewPCG(uint64(i), 2))
		var mu sync.Mutex
		handle := aggregate.HandlerFunc(func(e aggregate.Event) {
			// The writer labels each version with its resourceVersion modulo 4: an object
			// decoded from another event's encoding would not match.
			for _, o := range []runtime.Object{e.Object, e.OldObject} {
				if o == nil || e.Cluster == "barrier" {
					continue
				}
				rv, _ := strconv.Atoi(aggregatetest.RV(o))
				if e.Type != aggregate.Deleted && labelsOf(o)["v"] != strconv.Itoa(rv%4) {
					mismatches.Add(1)
				}
			}
			if h.slow {
				mu.Lock()
				d := time.Duration(rng.IntN(50)) * time.Microsecond
				mu.Unlock()
				time.Sleep(d)
			}
			views[i].OnEvent(e)
		})
		var err error
		if regs[i], err = f.AddHandler(handle, h.opts); err != nil {
			t.Fatal(err)
		}
	}
	total := writeConcurrently(t, f, 6, 1000, 200, true)
	barrier(t, f, views[0].rec, "end", views[1].rec, views[2].rec)
	if n := mismatches.Load(); n > 0 {
		t.Errorf("%d objects did not match their resourceVersion", n)
	}
	if got := aggregate.AheadTaken(f); got != 0 {
		t.Errorf("%d events counted as decoded ahead once every event was delivered", got)
	}
	for i, h := range handlers {
		t.Run(h.opts.Name, func(t *testing.T) {
			checkView(t, f, views[i].view)
			// Every write produced one event, plus the barrier; each was delivered or
			// coalesced, none twice. The barrier's delivery is counted once OnEvent returns.
			for deadline := time.Now().Add(waitTimeout); ; time.Sleep(time.Millisecond) {
				st := regs[i].Stats()
				got := int(st.Delivered + st.Coalesced)
				if got == total+1 {
					break
				}
				if got > total+1 || time.Now().After(deadline) {
					t.Fatalf("delivered %d + coalesced %d = %d, want %d", st.Delivered, st.Coalesced, got, total+1)
				}
			}
		})
	}
}

// labelsOf returns the labels of an object of the fleet.
func labelsOf(o runtime.Object) map[string]string {
	if u, ok := o.(interface{ GetLabels() map[string]string }); ok {
		return u.GetLabels()
	}
	return nil
}

// TestDecodeAheadClusterRemoved: a cluster removed while its objects' events wait,
// some decoded ahead: the handler gets each of them, then its deletion (or nothing,
// when the two coalesce), and the other cluster's events unchanged.
func TestDecodeAheadClusterRemoved(t *testing.T) {
	for _, maxBacklog := range []int{1000, 4} {
		t.Run(fmt.Sprintf("MaxBacklog=%d", maxBacklog), func(t *testing.T) {
			f, _ := compactFleet(8, 2)
			startFleet(t, f)
			vr := newViewRecorder()
			g := newGate(vr)
			reg, err := f.AddHandler(g, aggregate.HandlerOptions{MaxBacklog: maxBacklog})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				for _, c := range []string{"a", "b"} {
					mustApplyPartial(t, f.ClusterStore(c, aggregatetest.Pods), aggregatetest.RealisticPod("ns", fmt.Sprintf("p%d", i), strconv.Itoa(i+1), nil))
				}
			}
			<-g.entered
			waitDecodeAhead(t, reg, func(claimed, busy int) bool { return claimed > 0 && busy == 0 })
			f.RemoveCluster("a")
			close(g.open)
			barrier(t, f, vr.rec, "end")
			checkView(t, f, vr.view)
			for ref := range vr.view.Objects() {
				if ref.Key.Cluster == "a" {
					t.Fatalf("%s is left after its cluster was removed", ref.Key)
				}
			}
			deleted := 0
			for _, e := range vr.rec.Events() {
				if e.Type == aggregate.Deleted && e.Cluster == "a" {
					deleted++
					if !e.FinalStateUnknown || e.Object == nil || aggregatetest.RV(e.Object) == "" {
						t.Errorf("Deleted %s: final state unknown %v, object %v", e.Key(), e.FinalStateUnknown, e.Object)
					}
				}
			}
			if maxBacklog == 1000 && deleted != 50 {
				t.Errorf("%d deletions of cluster a's 50 objects", deleted)
			}
		})
	}
}

// TestDecodeAheadStopsMidDecode: a handler removed, or a fleet stopped, while a helper
// is inside a decode: Remove and Start return once that decode has (no helper outlives
// them), and nothing is delivered after.
func TestDecodeAheadStopsMidDecode(t *testing.T) {
	for _, how := range []string{"Remove", "shutdown"} {
		t.Run(how, func(t *testing.T) {
			f, codec := compactFleet(8, 2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			startErr := make(chan error, 1)
			go func() { startErr <- f.Start(ctx) }()
			rec := aggregatetest.NewRecorder()
			g := newGate(rec)
			reg, err := f.AddHandler(g, aggregate.HandlerOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s := f.ClusterStore("a", aggregatetest.Pods)
			mustApplyPartial(t, s, aggregatetest.RealisticPod("ns", "first", "1", nil))
			<-g.entered
			stalled, release := codec.stallDecodes()
			defer release()
			for i := range 20 {
				mustApplyPartial(t, s, aggregatetest.RealisticPod("ns", fmt.Sprintf("p%d", i), strconv.Itoa(i+2), nil))
			}
			select {
			case <-stalled:
			case <-time.After(waitTimeout):
				t.Fatal("no helper decoded ahead")
			}
			stopped := make(chan error, 1)
			if how == "Remove" {
				go func() { reg.Remove(); stopped <- nil }()
			} else {
				cancel()
				go func() { stopped <- <-startErr }()
			}
			// Let the handler leave its first event; a helper is still inside a decode.
			close(g.open)
			select {
			case <-stopped:
				t.Fatal("stopped while a helper was still decoding")
			case <-time.After(50 * time.Millisecond):
			}
			release()
			select {
			case err := <-stopped:
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("did not stop once the decode returned")
			}
			if _, busy := aggregate.DecodeAhead(reg); busy != 0 {
				t.Errorf("%d helpers left", busy)
			}
			if got := aggregate.AheadTaken(f); got != 0 {
				t.Errorf("%d events counted as decoded ahead after the handler stopped", got)
			}
			n := len(rec.Events())
			time.Sleep(20 * time.Millisecond)
			if got := len(rec.Events()); got != n {
				t.Errorf("%d events delivered when it stopped, then %d", n, got)
			}
		})
	}
}

// BenchmarkHandlerReplay measures a compact fleet's handler taking the replay of 10,000
// realistic pods held encoded, each decoded for it (one op), with and without decoding
// ahead: the wall time (ns/event) and the process's CPU (cpu-ns/event) per event.
func BenchmarkHandlerReplay(b *testing.B) {
	const n = 10_000
	for _, ahead := range []int{0, 64} {
		b.Run(fmt.Sprintf("DecodeAhead=%d", ahead), func(b *testing.B) {
			f := aggregate.New(aggregate.Options{Codec: persist.Codec{}, DecodeAhead: ahead})
			startFleet(b, f)
			s := f.ClusterStore("a", aggregatetest.Pods)
			for i := range n {
				mustApplyPartial(b, s, aggregatetest.RealisticPod("ns", fmt.Sprintf("p%d", i), strconv.Itoa(i+1), nil))
			}
			b.ResetTimer()
			cpu0, t0 := testenv.ProcessCPU(), time.Now()
			for range b.N {
				var got atomic.Int64
				done := make(chan struct{})
				reg, err := f.AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
					if e.Object == nil {
						b.Error("no object")
					}
					if got.Add(1) == n {
						close(done)
					}
				}), aggregate.HandlerOptions{})
				if err != nil {
					b.Fatal(err)
				}
				<-done
				reg.Remove()
			}
			b.ReportMetric(float64(time.Since(t0))/float64(b.N*n), "ns/event")
			b.ReportMetric(float64(testenv.ProcessCPU()-cpu0)/float64(b.N*n), "cpu-ns/event")
		})
	}
}
