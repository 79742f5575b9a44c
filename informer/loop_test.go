package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/internal/wire"
)

// fakeStream is an eventStream over a watch.FakeWatcher, which the context that opened
// it ends: Next then returns the context's error, as a wire.Stream does.
type fakeStream struct {
	ctx context.Context
	w   *watch.FakeWatcher
}

func (f fakeStream) Next() (watch.Event, error) {
	select {
	case <-f.ctx.Done():
		return watch.Event{}, f.ctx.Err()
	case ev, ok := <-f.w.ResultChan():
		if !ok {
			return watch.Event{}, io.EOF
		}
		return ev, nil
	}
}

func (f fakeStream) Close() { f.w.Stop() }

// fakeListWatch is a listWatch whose lists are empty and whose watches are w.
func fakeListWatch(w *watch.FakeWatcher, timeout time.Duration) *listWatch {
	return &listWatch{
		list: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			return &unstructured.UnstructuredList{}, nil
		},
		watch: func(ctx context.Context, _ metav1.ListOptions) (eventStream, error) {
			return fakeStream{ctx, w}, nil
		},
		tweak:           func(*metav1.ListOptions) {},
		bookmarkTimeout: timeout,
	}
}

// noTransform is the transform of the tests' loops that need none.
func noTransform(obj any) (any, error) { return obj, nil }

// newTestLoop returns a loop of lw for store as a Set makes it, but without streaming
// lists unless streaming is set, and with a backoff of a millisecond. Its errors go to
// errs, if not nil.
func newTestLoop(lw *listWatch, store Store, streaming bool, errs chan<- error) *loop {
	l := newLoop("test", lw, store, store, noTransform, nil, func(_ context.Context, err error) {
		if errs != nil {
			errs <- err
		}
	})
	l.streaming = streaming
	l.delay = func() time.Duration { return time.Millisecond }
	return l
}

// start runs l until the test ends, or until the returned stop is called, which waits for
// run to return.
func start(t *testing.T, l *loop) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.run(ctx)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the loop still runs 10 s after its context ended")
		}
	}
	t.Cleanup(stop)
	return stop
}

// eventually fails the test if cond does not hold within 10 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
	}
}

// waitSynced waits until l has synced.
func waitSynced(t *testing.T, l *loop) {
	t.Helper()
	select {
	case <-l.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the loop has not synced within 10 s")
	}
}

// scriptedListWatch is a listWatch whose lists and watches a test scripts: each list
// and each watch takes the next of its answers (the last one again once they run out),
// and records its options.
type scriptedListWatch struct {
	mu      sync.Mutex
	lists   []func(opts metav1.ListOptions) (kruntime.Object, error)
	watches []func(ctx context.Context, opts metav1.ListOptions) (eventStream, error)
	listed  []metav1.ListOptions
	watched []metav1.ListOptions
}

func (s *scriptedListWatch) listWatch() *listWatch {
	return &listWatch{
		list: func(_ context.Context, opts metav1.ListOptions) (kruntime.Object, error) {
			s.mu.Lock()
			s.listed = append(s.listed, opts)
			answer := s.lists[min(len(s.listed), len(s.lists))-1]
			s.mu.Unlock()
			return answer(opts)
		},
		watch: func(ctx context.Context, opts metav1.ListOptions) (eventStream, error) {
			s.mu.Lock()
			s.watched = append(s.watched, opts)
			answer := s.watches[min(len(s.watched), len(s.watches))-1]
			s.mu.Unlock()
			return answer(ctx, opts)
		},
		tweak:           func(*metav1.ListOptions) {},
		bookmarkTimeout: time.Minute,
	}
}

// calls returns the options of the lists and watches so far.
func (s *scriptedListWatch) calls() (lists, watches []metav1.ListOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.listed), slices.Clone(s.watched)
}

// podList returns a list of the pods names, each at resourceVersion 1, at
// resourceVersion rv.
func podList(rv string, names ...string) func(metav1.ListOptions) (kruntime.Object, error) {
	return func(metav1.ListOptions) (kruntime.Object, error) {
		list := &unstructured.UnstructuredList{Object: map[string]any{}}
		list.SetResourceVersion(rv)
		for _, name := range names {
			list.Items = append(list.Items, *podAt(name, "1"))
		}
		return list, nil
	}
}

// watchOf answers a watch with w.
func watchOf(w *watch.FakeWatcher) func(context.Context, metav1.ListOptions) (eventStream, error) {
	return func(ctx context.Context, _ metav1.ListOptions) (eventStream, error) { return fakeStream{ctx, w}, nil }
}

// storeKeys returns the keys of store, sorted.
func storeKeys(store cache.KeyListerGetter) []string {
	return slices.Sorted(slices.Values(store.ListKeys()))
}

// TestLoopListsThenWatches: the first list asks for resourceVersion "0"; the watch
// starts from the list's resourceVersion, with bookmarks and a timeout of 5 to 10
// minutes; the list and then each event reach the store, with a checkpoint after the
// list and after each event; the loop has synced once the list is applied, and its
// LastSyncResourceVersion follows the events.
func TestLoopListsThenWatches(t *testing.T) {
	fw := watch.NewFake()
	s := &scriptedListWatch{
		lists:   []func(metav1.ListOptions) (kruntime.Object, error){podList("10", "a", "b")},
		watches: []func(context.Context, metav1.ListOptions) (eventStream, error){watchOf(fw)},
	}
	store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	l := newTestLoop(s.listWatch(), store, false, nil)
	start(t, l)
	waitSynced(t, l)
	if got, want := storeKeys(store), []string{"shop/a", "shop/b"}; !slices.Equal(got, want) {
		t.Errorf("after the list the store holds %v, want %v", got, want)
	}
	if rv := l.LastSyncResourceVersion(); rv != "10" {
		t.Errorf("LastSyncResourceVersion %q after the list, want 10", rv)
	}
	fw.Add(podAt("c", "11"))
	fw.Delete(podAt("a", "12"))
	eventually(t, "the events applied", func() bool { return l.LastSyncResourceVersion() == "12" })
	if got, want := storeKeys(store), []string{"shop/b", "shop/c"}; !slices.Equal(got, want) {
		t.Errorf("after the events the store holds %v, want %v", got, want)
	}
	store.mu.Lock()
	if want := []string{"10", "11", "12"}; !slices.Equal(store.checkpoints, want) {
		t.Errorf("checkpoints %v, want %v", store.checkpoints, want)
	}
	store.mu.Unlock()
	lists, watches := s.calls()
	if len(lists) != 1 || lists[0].ResourceVersion != "0" {
		t.Errorf("lists %+v, want one at resourceVersion 0", lists)
	}
	if len(watches) != 1 || watches[0].ResourceVersion != "10" || !watches[0].AllowWatchBookmarks || watches[0].TimeoutSeconds == nil ||
		*watches[0].TimeoutSeconds < 300 || *watches[0].TimeoutSeconds > 600 {
		t.Errorf("watches %+v, want one from 10 with bookmarks and a timeout of 300 to 600 s", watches)
	}
}

// TestLoopResumesWatch: a watch that the server ends (EOF), or whose connection is lost,
// is opened again from the last resourceVersion seen, at once and without a list, unless
// it ended at once without an event (cache.VeryShortWatchError, as client-go's
// reflector).
func TestLoopResumesWatch(t *testing.T) {
	first, second := watch.NewFake(), watch.NewFake()
	s := &scriptedListWatch{
		lists: []func(metav1.ListOptions) (kruntime.Object, error){podList("10", "a")},
		watches: []func(context.Context, metav1.ListOptions) (eventStream, error){
			watchOf(first),
			func(context.Context, metav1.ListOptions) (eventStream, error) {
				return &lostStream{event: watch.Event{Type: watch.Modified, Object: podAt("a", "12")}}, nil
			},
			watchOf(second),
		},
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	errs := make(chan error, 10)
	l := newTestLoop(s.listWatch(), &checkpointStore{Store: store}, false, errs)
	l.delay = func() time.Duration {
		t.Error("the loop backed off")
		return time.Millisecond
	}
	start(t, l)
	waitSynced(t, l)
	first.Modify(podAt("a", "11"))
	first.Stop()
	eventually(t, "the third watch opened", func() bool { _, w := s.calls(); return len(w) == 3 })
	second.Add(podAt("b", "13"))
	eventually(t, "the third watch's event applied", func() bool { return l.LastSyncResourceVersion() == "13" })
	lists, watches := s.calls()
	if len(lists) != 1 {
		t.Errorf("%d lists, want 1", len(lists))
	}
	if watches[1].ResourceVersion != "11" || watches[2].ResourceVersion != "12" {
		t.Errorf("watches opened from %q and %q, want 11 and 12", watches[1].ResourceVersion, watches[2].ResourceVersion)
	}
	select {
	case err := <-errs:
		t.Errorf("error reported: %v", err)
	default:
	}
}

// lostStream is a watch whose connection is lost after its event.
type lostStream struct {
	event watch.Event
	sent  bool
}

func (s *lostStream) Next() (watch.Event, error) {
	if !s.sent {
		s.sent = true
		return s.event, nil
	}
	return watch.Event{}, errors.New("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
}

func (s *lostStream) Close() {}

// TestLoopRelistsAfterGone: a watch that ends with 410 Gone is followed, after the
// backoff, by a list from the last resourceVersion seen; if that one is gone too, by one
// at "" (from etcd). The objects that the list no longer holds are deleted, with their
// last known state and finalStateUnknown; the watch resumes from the new list.
func TestLoopRelistsAfterGone(t *testing.T) {
	first, second := watch.NewFake(), watch.NewFake()
	gone := func(metav1.ListOptions) (kruntime.Object, error) {
		return nil, apierrors.NewResourceExpired("too old resource version")
	}
	s := &scriptedListWatch{
		lists: []func(metav1.ListOptions) (kruntime.Object, error){podList("10", "a", "b"), gone, podList("30", "a", "c")},
		watches: []func(context.Context, metav1.ListOptions) (eventStream, error){
			watchOf(first),
			watchOf(second),
		},
	}
	store := &logStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	var backoffs atomic.Int32
	l := newTestLoop(s.listWatch(), store, false, nil)
	l.delay = func() time.Duration { backoffs.Add(1); return time.Millisecond }
	start(t, l)
	waitSynced(t, l)
	first.Modify(podAt("a", "12"))
	first.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	eventually(t, "the second watch", func() bool { _, w := s.calls(); return len(w) == 2 })
	lists, watches := s.calls()
	var rvs []string
	for _, o := range lists {
		rvs = append(rvs, o.ResourceVersion)
	}
	if want := []string{"0", "12", ""}; !slices.Equal(rvs, want) {
		t.Errorf("lists at %q, want %q", rvs, want)
	}
	if watches[1].ResourceVersion != "30" {
		t.Errorf("the watch after the relist starts from %q, want 30", watches[1].ResourceVersion)
	}
	if n := backoffs.Load(); n != 1 {
		t.Errorf("%d backoffs, want 1, between the watch's 410 and the list", n)
	}
	want := []string{
		"Apply shop/a initial", "Apply shop/b initial", "Checkpoint 10", // the first list
		"Apply shop/a", "Checkpoint 12", // the event
		"Delete shop/b finalStateUnknown", "Apply shop/a", "Apply shop/c", "Checkpoint 30", // the relist
	}
	if got := store.calls(); !slices.Equal(got, want) {
		t.Errorf("store calls %q\nwant %q", got, want)
	}
	if got, want := storeKeys(store), []string{"shop/a", "shop/c"}; !slices.Equal(got, want) {
		t.Errorf("the store holds %v, want %v", got, want)
	}
}

// logStore is a Store and a Checkpointer that keeps its objects in a cache.Store and
// logs each call.
type logStore struct {
	cache.Store
	mu  sync.Mutex
	log []string
}

func (s *logStore) record(call, key string, flag bool, flagName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if flag {
		key += " " + flagName
	}
	s.log = append(s.log, call+" "+key)
}

func (s *logStore) Apply(obj kruntime.Object, initialList bool) error {
	key, _ := cache.MetaNamespaceKeyFunc(obj)
	s.record("Apply", key, initialList, "initial")
	return s.Store.Update(obj)
}

func (s *logStore) Delete(obj kruntime.Object, finalStateUnknown bool) error {
	key, _ := cache.MetaNamespaceKeyFunc(obj)
	s.record("Delete", key, finalStateUnknown, "finalStateUnknown")
	return s.Store.Delete(obj)
}

func (s *logStore) Checkpoint(rv string) { s.record("Checkpoint", rv, false, "") }

func (s *logStore) MarkSynced() {}

func (s *logStore) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// TestLoopBacksOff: a list that fails is reported and made again after the backoff; a
// watch that the server refuses (connection refused, 429) is opened again after the
// backoff, without a list and unreported; one that fails otherwise is reported, and a
// list follows after the backoff.
func TestLoopBacksOff(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	fw := watch.NewFake()
	failWith := func(err error) func(context.Context, metav1.ListOptions) (eventStream, error) {
		// A nil *wire.Stream in the eventStream, as a careless opener would return it.
		return func(context.Context, metav1.ListOptions) (eventStream, error) { return (*wire.Stream)(nil), err }
	}
	s := &scriptedListWatch{
		lists: []func(metav1.ListOptions) (kruntime.Object, error){
			func(metav1.ListOptions) (kruntime.Object, error) { return nil, forbidden },
			podList("10", "a"),
		},
		watches: []func(context.Context, metav1.ListOptions) (eventStream, error){
			failWith(refused), failWith(apierrors.NewTooManyRequests("slow down", 1)), failWith(forbidden), watchOf(fw),
		},
	}
	errs := make(chan error, 10)
	var backoffs atomic.Int32
	l := newTestLoop(s.listWatch(), &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}, false, errs)
	l.delay = func() time.Duration { backoffs.Add(1); return time.Millisecond }
	start(t, l)
	eventually(t, "the fourth watch", func() bool { _, w := s.calls(); return len(w) == 4 })
	lists, _ := s.calls()
	// The failed list, the list, the refused, throttled and forbidden watches, the list
	// after the forbidden one.
	if len(lists) != 3 {
		t.Errorf("%d lists, want 3", len(lists))
	}
	if n := backoffs.Load(); n != 4 {
		t.Errorf("%d backoffs, want 4: after the failed list, the refused and throttled watches, and the forbidden one", n)
	}
	var reported []error
	for len(errs) > 0 {
		reported = append(reported, <-errs)
	}
	if len(reported) != 2 || !apierrors.IsForbidden(reported[0]) || !apierrors.IsForbidden(reported[1]) {
		t.Errorf("reported %v, want the forbidden list and watch", reported)
	}
}

// TestLoopBackoff: the backoff is the reflector's: 800 ms at first, doubled each time up
// to 30 s, each with up to as much again of jitter.
func TestLoopBackoff(t *testing.T) {
	delay := loopBackoff(testingclock.NewFakeClock(time.Unix(1000, 0)))
	for i, base := range []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second} {
		if d := delay(); d < base || d >= 2*base {
			t.Errorf("backoff %d: %v, want within [%v, %v)", i, d, base, 2*base)
		}
	}
}

// TestLoopStopsWithContext runs a loop over a server that lists and then holds the watch
// open, through wire's clients: once its context ends, the loop returns, and no
// goroutine of its own or of its watch is left.
func TestLoopStopsWithContext(t *testing.T) {
	watching := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") != "true" {
			fmt.Fprint(w, `{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"10"},"items":[`+
				`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"shop","resourceVersion":"9"}}]}`)
			return
		}
		fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"b","namespace":"shop","resourceVersion":"11"}}}`)
		w.(http.Flusher).Flush()
		watching <- struct{}{}
		<-r.Context().Done()
	}))
	defer srv.Close()
	dyn, _, err := wire.NewDynamicClients(&rest.Config{Host: srv.URL}, false)
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	lw := newListWatch(dyn, nil, podsMapping, Resource{Name: "pods"}, "", time.Minute, false, false)
	store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	l := newTestLoop(lw, store, false, nil)
	stop := start(t, l)
	waitSynced(t, l)
	<-watching
	eventually(t, "the watch's event applied", func() bool { return l.LastSyncResourceVersion() == "11" })
	stop()
	eventually(t, "no goroutine of the loop or its watch left", func() bool {
		stacks := goroutines()
		return !strings.Contains(stacks, "informer.(*loop)") && !strings.Contains(stacks, "wire.(*Stream)") &&
			!strings.Contains(stacks, "StreamWatcher")
	})
	// What is left beside the goroutines that ran before are the idle connections'.
	eventually(t, "the goroutines back to those before and the idle connections'", func() bool {
		return runtime.NumGoroutine() <= before+2
	})
}

// goroutines returns the stacks of all goroutines.
func goroutines() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

// TestLoopDeletesWhatARelistLacksInItsNamespace: the relist of an informer of one
// namespace deletes the objects of its namespace that the list lacks, and leaves those
// of the other namespaces of the store alone.
func TestLoopDeletesWhatARelistLacksInItsNamespace(t *testing.T) {
	store := &logStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	other := podAt("x", "1")
	other.SetNamespace("other")
	for _, obj := range []*unstructured.Unstructured{podAt("a", "1"), podAt("gone", "1"), other} {
		if err := store.Store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	s := &scriptedListWatch{
		lists:   []func(metav1.ListOptions) (kruntime.Object, error){podList("10", "a")},
		watches: []func(context.Context, metav1.ListOptions) (eventStream, error){watchOf(watch.NewFake())},
	}
	l := newLoop("test", s.listWatch(), store, namespaceKeys{store: store, namespace: "shop"}, noTransform, nil, func(context.Context, error) {})
	l.streaming = false
	start(t, l)
	waitSynced(t, l)
	if got, want := storeKeys(store), []string{"other/x", "shop/a"}; !slices.Equal(got, want) {
		t.Errorf("the store holds %v, want %v", got, want)
	}
}
