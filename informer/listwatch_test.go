package informer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
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

// TestBookmarksMarkConsistency checks which bookmarks are reported to onBookmark: those
// of a plain watch and those after a streaming list's initial events, each only once the
// reader has received it.
func TestBookmarksMarkConsistency(t *testing.T) {
	t.Run("no onBookmark: the watch is not wrapped", func(t *testing.T) {
		fw := watch.NewFake()
		w, err := fakeListWatch(fw, time.Minute).WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "5"})
		if err != nil || w != fw {
			t.Fatalf("watch %T %v, want the server's watch", w, err)
		}
	})

	for _, tc := range []struct {
		name      string
		streaming bool
		events    []watch.Event
		want      []string
	}{
		{"plain watch", false, []watch.Event{
			{Type: watch.Added, Object: &unstructured.Unstructured{}},
			{Type: watch.Bookmark, Object: bookmarkAt("11", false)},
			{Type: watch.Modified, Object: &unstructured.Unstructured{}},
			{Type: watch.Bookmark, Object: bookmarkAt("13", false)},
		}, []string{"11", "13"}},
		{"streaming list", true, []watch.Event{
			{Type: watch.Added, Object: &unstructured.Unstructured{}},
			{Type: watch.Bookmark, Object: bookmarkAt("11", false)}, // inside the initial events
			{Type: watch.Bookmark, Object: bookmarkAt("12", true)},  // their end: listMarkingQueue's
			{Type: watch.Modified, Object: &unstructured.Unstructured{}},
			{Type: watch.Bookmark, Object: bookmarkAt("14", false)},
		}, []string{"14"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fw := watch.NewFake()
			lw := fakeListWatch(fw, time.Minute)
			var mu sync.Mutex
			var got []string
			lw.onBookmark = func(rv string) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, rv)
			}
			opts := metav1.ListOptions{ResourceVersion: "10"}
			if tc.streaming {
				opts = metav1.ListOptions{SendInitialEvents: ptr.To(true)}
			}
			w, err := lw.WatchWithContext(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			go func() {
				for _, ev := range tc.events {
					fw.Action(ev.Type, ev.Object)
				}
			}()
			for range tc.events {
				if ev := <-w.ResultChan(); ev.Type == watch.Error {
					t.Fatalf("error event %v", ev.Object)
				}
			}
			// The last onBookmark may run just after the reader received its bookmark.
			deadline := time.Now().Add(5 * time.Second)
			for {
				mu.Lock()
				done := len(got) >= len(tc.want)
				mu.Unlock()
				if done || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(got, tc.want) {
				t.Errorf("onBookmark got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBookmarkReportedAfterItIsReceived checks that onBookmark waits for the reader: until
// the reflector has taken the bookmark, it may not have queued the events before it.
func TestBookmarkReportedAfterItIsReceived(t *testing.T) {
	fw := watch.NewFake()
	lw := fakeListWatch(fw, time.Minute)
	reported := make(chan string, 1)
	lw.onBookmark = func(rv string) { reported <- rv }
	w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{ResourceVersion: "10"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go fw.Action(watch.Bookmark, bookmarkAt("11", false))
	select {
	case rv := <-reported:
		t.Fatalf("onBookmark(%s) before the reader took the bookmark", rv)
	case <-time.After(100 * time.Millisecond):
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark {
		t.Fatalf("got %s, want the bookmark", ev.Type)
	}
	select {
	case rv := <-reported:
		if rv != "11" {
			t.Errorf("onBookmark(%s), want 11", rv)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("onBookmark not called after the reader took the bookmark")
	}
}
