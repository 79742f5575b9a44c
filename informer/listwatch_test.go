package informer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/fleetwatch/fleetwatch/internal/wire"
)

func bookmark(initialEventsEnd bool) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetResourceVersion("10")
	if initialEventsEnd {
		u.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	return u
}

// TestStreamingListWithoutBookmarkFallsBack: a streaming list whose initial events do
// not end within the bookmark timeout is cancelled (its watch stopped), and the loop
// lists instead; later streaming lists through the same listWatch fail at once, with a
// BadRequest that the loop does not retry, while plain watches still work.
func TestStreamingListWithoutBookmarkFallsBack(t *testing.T) {
	streamed, watched := watch.NewFake(), watch.NewFake()
	s := &scriptedListWatch{
		lists:   []func(metav1.ListOptions) (runtime.Object, error){podList("10", "listed")},
		watches: []func(context.Context, metav1.ListOptions) (eventStream, error){watchOf(streamed), watchOf(watched)},
	}
	lw := s.listWatch()
	lw.bookmarkTimeout = 50 * time.Millisecond
	store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	l := newTestLoop(lw, store, true, nil)
	start(t, l)
	go func() {
		streamed.Add(podAt("streamed", "5"))
		streamed.Action(watch.Bookmark, bookmark(false)) // a bookmark, but not the end of the initial events
	}()
	waitSynced(t, l)
	if got, want := storeKeys(store), []string{"shop/listed"}; !slices.Equal(got, want) {
		t.Errorf("the store holds %v, want the list's %v", got, want)
	}
	if !streamed.IsStopped() {
		t.Error("the streaming list's watch was not stopped")
	}
	if !lw.noStreaming.Load() {
		t.Error("streaming lists still on after one timed out")
	}
	lists, watches := s.calls()
	if len(lists) != 1 || len(watches) < 1 || watches[0].SendInitialEvents == nil || !*watches[0].SendInitialEvents {
		t.Errorf("lists %+v, watches %+v: want a streaming list, then a list", lists, watches)
	}
	eventually(t, "the plain watch opened", func() bool { _, w := s.calls(); return len(w) == 2 })
	if _, watches := s.calls(); watches[1].SendInitialEvents != nil || watches[1].ResourceVersion != "10" {
		t.Errorf("the watch after the list: %+v, want a plain one from 10", watches[1])
	}
	if _, _, err := lw.openStreamingList(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true)}); !apierrors.IsBadRequest(err) {
		t.Errorf("streaming after a failed stream: %v, want BadRequest", err)
	}
	if l.retryStreamingList(t.Context(), apierrors.NewBadRequest("x")) {
		t.Error("a BadRequest of a streaming list is retried")
	}
}

// TestStreamingListWithBookmarkKeepsWatching: a streaming list whose initial events end
// in time is applied, and its watch goes on past the timeout.
func TestStreamingListWithBookmarkKeepsWatching(t *testing.T) {
	fw := watch.NewFake()
	lw := fakeListWatch(fw, 50*time.Millisecond)
	store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	l := newTestLoop(lw, store, true, nil)
	start(t, l)
	fw.Add(podAt("a", "5"))
	fw.Action(watch.Bookmark, bookmarkAt("7", true))
	waitSynced(t, l)
	time.Sleep(150 * time.Millisecond) // past the timeout: nothing may happen now
	fw.Modify(podAt("a", "8"))
	eventually(t, "the Modified applied", func() bool { return l.LastSyncResourceVersion() == "8" })
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
// which end the list: its checkpoint is the list's.
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
			l := newTestLoop(lw, store, tc.streaming, nil)
			start(t, l)
			for _, ev := range tc.events {
				fw.Action(ev.Type, ev.Object)
			}
			eventually(t, "the last event applied", func() bool {
				store.mu.Lock()
				defer store.mu.Unlock()
				return len(store.checkpoints) >= len(tc.want)
			})
			store.mu.Lock()
			defer store.mu.Unlock()
			if !slices.Equal(store.checkpoints, tc.want) {
				t.Errorf("checkpoints %v, want %v", store.checkpoints, tc.want)
			}
		})
	}
}

// encodingStore is a Store and an EncodedStore that records whether objects came with
// their encodings.
type encodingStore struct {
	cache.Store
	mu      sync.Mutex
	applied []string
}

func (s *encodingStore) record(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied = append(s.applied, what)
}

func (s *encodingStore) Apply(obj runtime.Object, _ bool) error {
	s.record(fmt.Sprintf("Apply %T", obj))
	return s.Store.Update(obj)
}

func (s *encodingStore) ApplyEncoded(obj *unstructured.Unstructured, encoded []byte, _ bool) error {
	s.record(fmt.Sprintf("ApplyEncoded %d bytes", len(encoded)))
	return s.Store.Update(obj)
}

func (s *encodingStore) Delete(obj runtime.Object, _ bool) error { return s.Store.Delete(obj) }
func (s *encodingStore) MarkSynced()                             {}

// TestStreamingListDropsEncodings checks that the objects of a streaming list's initial
// events lose their encodings, which the loop would keep until the list ends, and that
// those of the watch events after them keep theirs.
func TestStreamingListDropsEncodings(t *testing.T) {
	fw := watch.NewFake()
	store := &encodingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	l := newTestLoop(fakeListWatch(fw, time.Minute), store, true, nil)
	start(t, l)
	encoded := func(name, rv string) *wire.EncodedObject {
		return &wire.EncodedObject{Unstructured: podAt(name, rv), Encoded: []byte{0xa0}}
	}
	fw.Add(encoded("a", "5"))
	fw.Action(watch.Bookmark, &wire.EncodedObject{Unstructured: bookmarkAt("7", true), Encoded: []byte{0xa0}})
	fw.Modify(encoded("a", "8"))
	eventually(t, "the watch event applied", func() bool { return l.LastSyncResourceVersion() == "8" })
	store.mu.Lock()
	defer store.mu.Unlock()
	if want := []string{"Apply *unstructured.Unstructured", "ApplyEncoded 1 bytes"}; !slices.Equal(store.applied, want) {
		t.Errorf("applied %q, want %q: the listed object without its encoding, the watched one with it", store.applied, want)
	}
}

// TestStreamingListInProtobufGoesOnInJSON: the watch of a streaming list opened by
// streamingWatch (protobuf) is closed once its initial events end, and the loop goes on
// with a watch from watch (JSON) from the bookmark's resourceVersion, with the
// selectors and a timeout, and without sendInitialEvents. Plain watches use watch. If
// that watch cannot be opened because the resourceVersion is gone, the loop lists.
func TestStreamingListInProtobufGoesOnInJSON(t *testing.T) {
	streamed, followed := watch.NewFake(), watch.NewFake()
	var (
		mu       sync.Mutex
		opened   []metav1.ListOptions
		streams  []metav1.ListOptions
		fail     error
		listed   atomic.Int32
		selector = func(o *metav1.ListOptions) { o.LabelSelector = "app=web" }
	)
	lw := fakeListWatch(nil, time.Minute)
	lw.tweak = selector
	lw.list = func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		listed.Add(1)
		return podList("20")(metav1.ListOptions{})
	}
	lw.streamingWatch = func(ctx context.Context, o metav1.ListOptions) (eventStream, error) {
		mu.Lock()
		defer mu.Unlock()
		streams = append(streams, o)
		return fakeStream{ctx, streamed}, nil
	}
	lw.watch = func(ctx context.Context, o metav1.ListOptions) (eventStream, error) {
		mu.Lock()
		defer mu.Unlock()
		opened = append(opened, o)
		if fail != nil {
			return nil, fail
		}
		return fakeStream{ctx, followed}, nil
	}
	store := &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	l := newTestLoop(lw, store, true, nil)
	stop := start(t, l)
	streamed.Add(podAt("a", "5"))
	streamed.Action(watch.Bookmark, bookmarkAt("7", true))
	waitSynced(t, l)
	eventually(t, "the streaming list's watch stopped", streamed.IsStopped)
	followed.Modify(podAt("a", "8"))
	eventually(t, "the follow-up watch's event applied", func() bool { return l.LastSyncResourceVersion() == "8" })
	mu.Lock()
	if len(streams) != 1 || streams[0].SendInitialEvents == nil || !*streams[0].SendInitialEvents || streams[0].LabelSelector != "app=web" {
		t.Errorf("streaming lists %+v, want one with sendInitialEvents and the selector", streams)
	}
	if len(opened) != 1 || opened[0].ResourceVersion != "7" || opened[0].SendInitialEvents != nil ||
		opened[0].ResourceVersionMatch != "" || opened[0].LabelSelector != "app=web" || !opened[0].AllowWatchBookmarks ||
		opened[0].TimeoutSeconds == nil || *opened[0].TimeoutSeconds < 300 {
		t.Errorf("follow-up watch opened with %+v, want one from 7 with the selector, bookmarks and a timeout", opened)
	}
	mu.Unlock()
	stop()

	// The follow-up watch cannot be opened, its resourceVersion gone: the loop lists.
	streamed, followed = watch.NewFake(), watch.NewFake()
	mu.Lock()
	fail = apierrors.NewResourceExpired("too old")
	mu.Unlock()
	l = newTestLoop(lw, &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}, true, nil)
	start(t, l)
	streamed.Action(watch.Bookmark, bookmarkAt("7", true))
	eventually(t, "a list after the follow-up watch's 410", func() bool { return listed.Load() > 0 })
}

// TestPartialWatchesInProtobuf: the listWatch of a plain informer asks for a streaming
// list in protobuf, to be followed by a watch in JSON after its initial events, and asks
// for plain watches in JSON; that of a partial one (wire.NewPartialDynamicClients, whose
// protobuf events cost less than JSON ones) keeps the streaming list's watch, and asks
// for plain watches in protobuf too. The watches are read through wire's Streams.
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
		dyn     *wire.Client
		partial bool
		// want: the Accept headers of the streaming list's watch, then of a plain
		// watch.
		want []string
	}{
		{"plain", plain, false, []string{protobuf, json}},
		{"partial", partial, true, []string{protobuf, protobuf}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			accepts = nil
			mu.Unlock()
			lw := newListWatch(tc.dyn, nil, m, Resource{}, "", time.Minute, true, tc.partial)
			w, follow, err := lw.openStreamingList(t.Context(), metav1.ListOptions{SendInitialEvents: ptr.To(true),
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			if ev, err := w.Next(); err != nil || ev.Type != watch.Bookmark || !isInitialEventsEnd(ev.Object) {
				t.Fatalf("got %s %v, want the initial-events-end bookmark", ev.Type, err)
			}
			w.Close()
			if follow == tc.partial {
				t.Errorf("follow %v, want %v", follow, !tc.partial)
			}
			pw, err := lw.openWatch(t.Context(), metav1.ListOptions{ResourceVersion: "7", AllowWatchBookmarks: true})
			if err != nil {
				t.Fatal(err)
			}
			if ev, err := pw.Next(); err != nil || ev.Type != watch.Bookmark {
				t.Fatalf("got %s %v, want the bookmark", ev.Type, err)
			}
			pw.Close()
			if _, err := pw.Next(); err == nil {
				t.Error("a closed watch goes on")
			}
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

	// The events of a watch, and those of a streaming list's initial events.
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			event := lw.convert
			if streaming {
				event = lw.initialEvent
			}
			whole := item("c")
			partial := &wire.EncodedObject{Unstructured: &unstructured.Unstructured{Object: item("d").Object}, Encoded: []byte{wire.MetadataFormat, 0xa0}, Partial: true}
			if ev := event(watch.Event{Type: watch.Added, Object: &whole}); !equality.Semantic.DeepEqual(ev.Object, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", ResourceVersion: "5", Labels: map[string]string{"a": "b"}}}) {
				t.Errorf("a whole object of a watch: %#v", ev.Object)
			}
			if ev := event(watch.Event{Type: watch.Added, Object: partial}); ev.Object != partial {
				t.Errorf("a partial object of a watch: %#v, want it as it came", ev.Object)
			}
			ev := event(watch.Event{Type: watch.Bookmark, Object: bookmarkAt("7", true)})
			if p, ok := ev.Object.(*metav1.PartialObjectMetadata); ev.Type != watch.Bookmark || !ok || !isInitialEventsEnd(p) || p.ResourceVersion != "7" {
				t.Errorf("the bookmark of a watch: %s %#v, want the PartialObjectMetadata of the initial events' end", ev.Type, ev.Object)
			}
		})
	}
}
