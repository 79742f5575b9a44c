package informer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/internal/wire"
)

func fakeListWatch(w *watch.FakeWatcher, timeout time.Duration) *listWatch {
	return &listWatch{
		list: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &unstructured.UnstructuredList{}, nil
		},
		watch:           func(context.Context, metav1.ListOptions) (watch.Interface, error) { return w, nil },
		tweak:           func(*metav1.ListOptions) {},
		bookmarkTimeout: timeout,
	}
}

func bookmark(initialEventsEnd bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetResourceVersion("10")
	if initialEventsEnd {
		u.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return u
}

func TestStreamingListWithoutBookmarkFallsBack(t *testing.T) {
	fw := watch.NewFake()
	lw := fakeListWatch(fw, 50*time.Millisecond)
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	go fw.Add(&unstructured.Unstructured{})
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("first event %s, want the Added passed through", ev.Type)
	}
	go fw.Action(watch.Bookmark, bookmark(false)) // a bookmark, but not the end of the initial events
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("second event %s, want the bookmark passed through", ev.Type)
	}
	ev, ok := <-w.ResultChan()
	if !ok || ev.Type != watch.Error {
		t.Fatalf("after the timeout: got %v %v, want an error event", ev.Type, ok)
	}
	if err := apierrors.FromObject(ev.Object); !apierrors.IsBadRequest(err) {
		t.Fatalf("error event %v: want a non-retriable BadRequest", err)
	}
	if _, ok := <-w.ResultChan(); ok {
		t.Fatal("the watch goes on after the error")
	}
	if !fw.IsStopped() {
		t.Error("the server watch was not stopped")
	}
	// Later streaming attempts fail at once; plain watches still work.
	if _, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)}); !apierrors.IsBadRequest(err) {
		t.Errorf("streaming after a failed stream: %v, want BadRequest", err)
	}
	lw.watch = func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil }
	if _, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "10"}); err != nil {
		t.Errorf("plain watch: %v", err)
	}
}

func TestStreamingListWithBookmarkKeepsWatching(t *testing.T) {
	fw := watch.NewFake()
	lw := fakeListWatch(fw, 50*time.Millisecond)
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go fw.Action(watch.Bookmark, bookmark(true))
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("got %s, want the bookmark", ev.Type)
	}
	time.Sleep(150 * time.Millisecond) // past the timeout: nothing may happen now
	go fw.Modify(&unstructured.Unstructured{})
	if ev := <-w.ResultChan(); ev.Type != watch.Modified {
		t.Fatalf("got %s after the bookmark, want the Modified passed through", ev.Type)
	}
	if lw.noStreaming.Load() {
		t.Error("streaming disabled although the bookmark arrived")
	}
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"pods", true},
		{"deployments.apps", true},
		{"widgets.v1alpha1.example.com", true},
		{"deploy", true},
		{"", false},
		{"Pods", false},
		{"pods/status", false},
		{"pods..apps", false},
		{"-pods", false},
		{"pods.", false},
	} {
		if err := ValidateName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func bookmarkAt(rv string, initialEventsEnd bool) *unstructured.Unstructured {
	u := bookmark(initialEventsEnd)
	u.SetResourceVersion(rv)
	return u
}

// checkpointStore is a Store and a Checkpointer that records the checkpoints.
type checkpointStore struct {
	cache.Store
	mu          sync.Mutex
	checkpoints []string
}

func (c *checkpointStore) Apply(obj runtime.Object, _ bool) error  { return c.Store.Update(obj) }
func (c *checkpointStore) Delete(obj runtime.Object, _ bool) error { return c.Store.Delete(obj) }
func (c *checkpointStore) MarkSynced()                             {}

func (c *checkpointStore) Checkpoint(rv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checkpoints = append(c.checkpoints, rv)
}

func podAt(name, rv string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	u.SetNamespace("shop")
	u.SetName(name)
	u.SetResourceVersion(rv)
	return u
}

// TestBookmarksCheckpoint runs an informer as a Set does, with a Checkpointer store, and
// checks where it checkpoints: after a list, after each watch event, and at each bookmark
// of a watch, but not at those of a streaming list before and at its initial-events-end,
// which the reflector keeps to itself until it replaces the queue's content.
func TestBookmarksCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name      string
		streaming bool
		events    []watch.Event
		want      []string
	}{
		{"plain watch", false, []watch.Event{
			{Type: watch.Added, Object: podAt("a", "11")},
			{Type: watch.Bookmark, Object: bookmarkAt("12", false)},
			{Type: watch.Modified, Object: podAt("a", "13")},
			{Type: watch.Bookmark, Object: bookmarkAt("14", false)},
		}, []string{"10", "11", "12", "13", "14"}},
		{"streaming list", true, []watch.Event{
			{Type: watch.Added, Object: podAt("a", "5")},
			{Type: watch.Bookmark, Object: bookmarkAt("6", false)}, // inside the initial events
			{Type: watch.Bookmark, Object: bookmarkAt("7", true)},  // their end: the list's checkpoint
			{Type: watch.Modified, Object: podAt("a", "8")},
			{Type: watch.Bookmark, Object: bookmarkAt("9", false)},
		}, []string{"7", "8", "9"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := watch.NewFake()
			lw := fakeListWatch(fw, time.Minute)
			store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
			if !tc.streaming {
				// A seeded informer lists from the store, at 10, then watches.
				lw.seed(store, podsMapping, false, "10")
			}
			queue := &listMarkingQueue{
				RealFIFO: cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
					KeyFunction:  cache.DeletionHandlingMetaNamespaceKeyFunc,
					KnownObjects: store,
				}),
				markBookmarks: true,
			}
			ctrl := cache.New(&cache.Config{Queue: queue, ListerWatcher: lw, ObjectDescription: "pods",
				Process: processDeltas(store), ProcessBatch: processBatch(store)})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go ctrl.RunWithContext(ctx)
			for _, ev := range tc.events {
				fw.Action(ev.Type, ev.Object)
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				store.mu.Lock()
				got := slices.Clone(store.checkpoints)
				store.mu.Unlock()
				if len(got) >= len(tc.want) || time.Now().After(deadline) {
					if !slices.Equal(got, tc.want) {
						t.Errorf("checkpoints %v, want %v", got, tc.want)
					}
					return
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// TestRelayRunsAhead: a relay takes up to relayBuffer events from its watch while the
// reflector has not read any (one wait for a core per batch, not per event), and hands
// them on in order, then the timeout's error after them.
func TestRelayRunsAhead(t *testing.T) {
	in := watch.NewFakeWithChanSize(relayBuffer+1, false)
	timedOut := make(chan struct{})
	r := newRelay(in, time.Hour, false, nil, func() { close(timedOut) }, nil, nil)
	defer r.Stop()
	for i := range relayBuffer + 1 {
		in.Add(podAt(fmt.Sprint(i), fmt.Sprint(i+1)))
	}
	// The relay holds relayBuffer events, and the last one waits in the watch.
	deadline := time.Now().Add(10 * time.Second)
	for len(r.out) < relayBuffer || len(in.ResultChan()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the relay holds %d events and the watch %d, want %d and 0 (the last one read by the relay)", len(r.out), len(in.ResultChan()), relayBuffer)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range relayBuffer + 1 {
		ev := <-r.ResultChan()
		if u, ok := ev.Object.(*unstructured.Unstructured); ev.Type != watch.Added || !ok || u.GetName() != fmt.Sprint(i) {
			t.Fatalf("event %d: %s %v, want pod %d added", i, ev.Type, ev.Object, i)
		}
	}

	// The timeout's error comes after the events read before it.
	in = watch.NewFakeWithChanSize(2, false)
	in.Add(podAt("a", "1"))
	in.Add(podAt("b", "2"))
	r2 := newRelay(in, 50*time.Millisecond, false, nil, func() {}, nil, nil)
	defer r2.Stop()
	var got []string
	for ev := range r2.ResultChan() {
		if ev.Type == watch.Error {
			got = append(got, "error")
			continue
		}
		got = append(got, ev.Object.(*unstructured.Unstructured).GetName())
	}
	if want := []string{"a", "b", "error"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	select {
	case <-timedOut:
		t.Error("the first relay timed out")
	default:
	}
}

// TestPlainWatchIsNotWrapped checks that only streaming lists go through a relay.
func TestPlainWatchIsNotWrapped(t *testing.T) {
	fw := watch.NewFake()
	w, err := fakeListWatch(fw, time.Minute).WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "5"})
	if err != nil || w != fw {
		t.Fatalf("watch %T %v, want the server's watch", w, err)
	}
}

// TestStreamingListDropsEncodings checks that the objects of a streaming list's initial
// events lose their encodings, which the reflector would keep until the list ends, and
// that those of the watch events after them keep theirs.
func TestStreamingListDropsEncodings(t *testing.T) {
	fw := watch.NewFake()
	w, err := fakeListWatch(fw, time.Minute).WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	encoded := func(name, rv string) *wire.EncodedObject {
		return &wire.EncodedObject{Unstructured: podAt(name, rv), Encoded: []byte{0xa0}}
	}
	initial, later := encoded("a", "5"), encoded("a", "8")
	go func() {
		fw.Add(initial)
		fw.Action(watch.Bookmark, &wire.EncodedObject{Unstructured: bookmarkAt("7", true), Encoded: []byte{0xa0}})
		fw.Modify(later)
	}()
	if ev := <-w.ResultChan(); ev.Object != initial.Unstructured {
		t.Errorf("initial event: %T, want the object without its encoding", ev.Object)
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("got %s, want the initial-events-end bookmark", ev.Type)
	}
	if ev := <-w.ResultChan(); ev.Object != later {
		t.Errorf("watch event after the list: %T, want it with its encoding", ev.Object)
	}
}

// TestStreamingListInProtobufGoesOnInJSON: the watch of a streaming list opened by
// streamingWatch (protobuf) is replaced, once its initial events end, by a watch from
// watch (JSON) from the bookmark's resourceVersion, without the selectors or the
// timeout lost; to the reflector it is one watch. Plain watches use watch. If the
// follow-up watch cannot be opened, the relay ends with its error.
func TestStreamingListInProtobufGoesOnInJSON(t *testing.T) {
	streamed, followed := watch.NewFake(), watch.NewFake()
	var (
		mu     sync.Mutex
		opened []metav1.ListOptions
		fail   error
	)
	lw := fakeListWatch(nil, time.Minute)
	lw.streamingWatch = func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) { return streamed, nil }
	lw.watch = func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, o)
		if fail != nil {
			return nil, fail
		}
		return followed, nil
	}
	opts := metav1.ListOptions{SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks: true, LabelSelector: "app=web", TimeoutSeconds: ptr.To[int64](300)}
	w, err := lw.WatchWithContext(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		streamed.Add(podAt("a", "5"))
		streamed.Action(watch.Bookmark, bookmarkAt("7", true))
	}()
	if ev := <-w.ResultChan(); ev.Type != watch.Added {
		t.Fatalf("got %s, want the initial event", ev.Type)
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("got %s, want the initial-events-end bookmark", ev.Type)
	}
	go followed.Modify(podAt("a", "8"))
	if ev := <-w.ResultChan(); ev.Type != watch.Modified {
		t.Fatalf("got %s, want the follow-up watch's event", ev.Type)
	}
	if !streamed.IsStopped() {
		t.Error("the streaming list's watch was not stopped")
	}
	mu.Lock()
	want := metav1.ListOptions{ResourceVersion: "7", AllowWatchBookmarks: true, LabelSelector: "app=web", TimeoutSeconds: ptr.To[int64](300)}
	if len(opened) != 1 || opened[0].ResourceVersion != want.ResourceVersion || opened[0].SendInitialEvents != nil ||
		opened[0].ResourceVersionMatch != "" || opened[0].LabelSelector != want.LabelSelector || !opened[0].AllowWatchBookmarks ||
		opened[0].TimeoutSeconds == nil || *opened[0].TimeoutSeconds != 300 {
		t.Errorf("follow-up watch opened with %+v, want %+v", opened, want)
	}
	mu.Unlock()

	// A plain watch is opened by watch, unwrapped.
	if pw, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "9"}); err != nil || pw != followed {
		t.Errorf("plain watch %T %v, want watch's", pw, err)
	}

	// The follow-up watch fails: the relay ends with its error.
	streamed, gone := watch.NewFake(), apierrors.NewResourceExpired("too old")
	mu.Lock()
	fail = gone
	mu.Unlock()
	w2, err := lw.WatchWithContext(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	go streamed.Action(watch.Bookmark, bookmarkAt("7", true))
	<-w2.ResultChan()
	ev, ok := <-w2.ResultChan()
	if !ok || ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Fatalf("got %v %v, want the follow-up watch's 410", ev.Type, ok)
	}
	if _, ok := <-w2.ResultChan(); ok {
		t.Error("the relay goes on after its error")
	}
}

// TestPartialWatchesInProtobuf: the listWatch of a plain informer asks for a streaming
// list in protobuf and goes on in JSON after its initial events, and asks for plain
// watches in JSON; that of a partial one (wire.NewPartialDynamicClients, whose
// protobuf events cost less than JSON ones) keeps the streaming list's watch, and asks
// for plain watches in protobuf too.
func TestPartialWatchesInProtobuf(t *testing.T) {
	var (
		mu      sync.Mutex
		accepts []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		// JSON, which every request accepts: the initial-events-end bookmark, and no
		// more events until the request ends.
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"7","annotations":{"k8s.io/initial-events-end":"true"}}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	plain, _, err := wire.NewDynamicClients(&rest.Config{Host: srv.URL}, true)
	if err != nil {
		t.Fatal(err)
	}
	partial, _, err := wire.NewPartialDynamicClients(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	m := Mapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespaced: true}
	const protobuf, json = "application/vnd.kubernetes.protobuf, application/json", "application/json"
	for _, tc := range []struct {
		name    string
		dyn     dynamic.Interface
		partial bool
		// want: the Accept headers of the streaming list's watch (and its follow-up),
		// then of a plain watch.
		want []string
	}{
		{"plain", plain, false, []string{protobuf, json, json}},
		{"partial", partial, true, []string{protobuf, protobuf}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			accepts = nil
			mu.Unlock()
			lw := newListWatch(tc.dyn, nil, m, Resource{}, "", time.Minute, true, tc.partial)
			w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true),
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
				t.Fatalf("got %s, want the initial-events-end bookmark", ev.Type)
			}
			if !tc.partial {
				// The follow-up watch's bookmark: it was opened.
				if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
					t.Fatalf("got %s, want the follow-up watch's bookmark", ev.Type)
				}
			}
			pw, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "7", AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			<-pw.ResultChan()
			pw.Stop()
			w.Stop()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(accepts, tc.want) {
				t.Errorf("Accept headers %q, want %q", accepts, tc.want)
			}
		})
	}
}

// TestMetadataOnlyListWatch: a listWatch over wire's metadata clients hands out what
// client-go's metadata client does: a list as a PartialObjectMetadataList of objects
// without TypeMeta, its ListMeta kept, and the objects of watch events that come whole
// as PartialObjectMetadata; partial objects go on as they are.
func TestMetadataOnlyListWatch(t *testing.T) {
	item := func(name string) unstructured.Unstructured {
		return unstructured.Unstructured{Object: map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
			"metadata": map[string]any{"name": name, "namespace": "ns", "resourceVersion": "5", "labels": map[string]any{"a": "b"}}}}
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
		"metadata": map[string]any{"resourceVersion": "9", "continue": "next"}}, Items: []unstructured.Unstructured{item("a"), item("b")}}
	lw := &listWatch{
		list:  func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list, nil },
		tweak: func(*metav1.ListOptions) {},
		// As for the clients of wire.NewPartialMetadataClients, for a PartialStore.
		partial: true,
	}
	lw.metadataOnly()
	got, err := lw.list(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "9", Continue: "next"}}
	for _, name := range []string{"a", "b"} {
		want.Items = append(want.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "5", Labels: map[string]string{"a": "b"}}})
	}
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("list: %#v, want %#v", got, want)
	}

	// A watch, and a streaming list's, whose relay converts the events itself.
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			fw := watch.NewFake()
			lw.watch = func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil }
			lw.bookmarkTimeout = time.Minute
			opts := metav1.ListOptions{}
			if streaming {
				opts.SendInitialEvents = ptr.To(true)
			}
			w, err := lw.WatchWithContext(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			whole := item("c")
			partial := &wire.EncodedObject{Unstructured: &unstructured.Unstructured{Object: item("d").Object}, Encoded: []byte{wire.MetadataFormat, 0xa0}, Partial: true}
			go func() {
				fw.Add(&whole)
				fw.Add(partial)
				fw.Action(watch.Bookmark, bookmarkAt("7", true))
			}()
			if ev := <-w.ResultChan(); !equality.Semantic.DeepEqual(ev.Object, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", ResourceVersion: "5", Labels: map[string]string{"a": "b"}}}) {
				t.Errorf("a whole object of a watch: %#v", ev.Object)
			}
			if ev := <-w.ResultChan(); ev.Object != partial {
				t.Errorf("a partial object of a watch: %#v, want it as it came", ev.Object)
			}
			ev := <-w.ResultChan()
			if p, ok := ev.Object.(*metav1.PartialObjectMetadata); ev.Type != watch.Bookmark || !ok || !isInitialEventsEnd(p) || p.ResourceVersion != "7" {
				t.Errorf("the bookmark of a watch: %s %#v, want the PartialObjectMetadata of the initial events' end", ev.Type, ev.Object)
			}
		})
	}
}

// TestProcessBatchAppliesAList pops a list from a queue as client-go's controller does
// with batches on (RealFIFO.PopBatch): the list's objects in one batch, applied in
// order, then the marker after the list, which checkpoints only once they all are. A
// delta that fails does not keep the others of its batch from the store.
func TestProcessBatchAppliesAList(t *testing.T) {
	store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	queue := &listMarkingQueue{RealFIFO: cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		KeyFunction:  queueKey,
		KnownObjects: store,
	})}
	var list []any
	for i := range 5 {
		list = append(list, podAt(fmt.Sprint("p", i), fmt.Sprint(10+i)))
	}
	// Not an object: processDeltas reports it, as the batch must.
	list = append(list, cache.DeletedFinalStateUnknown{Key: "shop/gone", Obj: "not an object"})
	if err := queue.Replace(list, "20"); err != nil {
		t.Fatal(err)
	}
	var batches, singles [][]string
	keysOf := func(deltas []cache.Delta) []string {
		var keys []string
		for _, d := range deltas {
			k, _ := queueKey(d.Object)
			keys = append(keys, k)
		}
		return keys
	}
	batch, single := processBatch(store), processDeltas(store)
	var errs []error
	for range 2 {
		err := queue.PopBatch(func(deltas []cache.Delta, initial bool) error {
			if !initial {
				t.Error("the list's batch is not marked as the initial list")
			}
			batches = append(batches, keysOf(deltas))
			return batch(deltas, initial)
		}, func(obj any, initial bool) error {
			singles = append(singles, keysOf(obj.(cache.Deltas)))
			return single(obj, initial)
		})
		errs = append(errs, err)
	}
	wantBatch := []string{"shop/p0", "shop/p1", "shop/p2", "shop/p3", "shop/p4", "shop/gone"}
	if len(batches) != 1 || !slices.Equal(batches[0], wantBatch) {
		t.Errorf("batches %q, want one of %q", batches, wantBatch)
	}
	if want := [][]string{{listDonePrefix + "20"}}; !reflect.DeepEqual(singles, want) {
		t.Errorf("single pops %q, want %q", singles, want)
	}
	if errs[0] == nil || errs[1] != nil {
		t.Errorf("errors %v, want one for the batch with the bad delta and none for the marker", errs)
	}
	if n := len(store.List()); n != 5 {
		t.Errorf("the store holds %d objects, want 5", n)
	}
	if !slices.Equal(store.checkpoints, []string{"20"}) {
		t.Errorf("checkpoints %v, want [20]", store.checkpoints)
	}
	if !queue.HasSynced() {
		t.Error("the queue has not synced after the list and its marker")
	}
}
