package informer

import (
	"context"
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
