package wire

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// TestWatcher: a Watcher's watch asks for what the dynamic client's would, and its events
// are read by Next, in order, until the context ends or the watch is closed; an error
// response comes as the client's error, a Status as its APIStatus.
func TestWatcher(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("resourceVersion") {
		case "gone":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}`)
			return
		case "broken":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadGateway)
			fmt.Fprint(w, "no upstream")
			return
		}
		if r.URL.Path != "/api/v1/namespaces/shop/pods" || r.URL.Query().Get("watch") != "true" || r.URL.Query().Get("labelSelector") != "app=web" {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"shop","resourceVersion":"5"}}}`)
		fmt.Fprintln(w, `{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"6"}}}`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, _, err := NewDynamicClients(&rest.Config{Host: srv.URL}, false)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s, err := c.Watcher.Watch(ctx, podsResource, "shop", metav1.ListOptions{LabelSelector: "app=web", ResourceVersion: "4"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.Next()
	if u, ok := ev.Object.(*unstructured.Unstructured); err != nil || ev.Type != watch.Added || !ok || u.GetName() != "a" {
		t.Errorf("first event %s %T %v, want pod a added", ev.Type, ev.Object, err)
	}
	if ev, err := s.Next(); err != nil || ev.Type != watch.Bookmark {
		t.Errorf("second event %s %v, want the bookmark", ev.Type, err)
	}
	// Next waits for the next event, until the context ends.
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := s.Next(); err == nil {
		t.Error("Next returned an event after the context ended")
	}
	s.Close()
	s.Close()

	if _, err := c.Watcher.Watch(t.Context(), podsResource, "shop", metav1.ListOptions{ResourceVersion: "gone"}); !apierrors.IsResourceExpired(err) {
		t.Errorf("a 410: %v, want the Status's Expired error", err)
	}
	_, err = c.Watcher.Watch(t.Context(), podsResource, "shop", metav1.ListOptions{ResourceVersion: "broken"})
	if se, ok := err.(apierrors.APIStatus); !ok || se.Status().Code != http.StatusBadGateway {
		t.Errorf("a 502: %v, want an error of its code", err)
	}
}

// TestStreamClose: Close ends a Next that waits, from another goroutine.
func TestStreamClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, _, err := NewDynamicClients(&rest.Config{Host: srv.URL}, false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Watcher.Watch(t.Context(), podsResource, "", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, s.Close)
	done := make(chan error, 1)
	go func() {
		_, err := s.Next()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Next returned an event after Close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Next still waits 10 s after Close")
	}
}
