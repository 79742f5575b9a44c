package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// TestHandoverOptions: the daemon hands clusters over warm when its configuration has
// the handover (config.Config.WarmHandover, whose cases config tests) and it reaches a
// home cluster, whose credential it presents to the other replicas.
func TestHandoverOptions(t *testing.T) {
	home := &rest.Config{BearerToken: "replica-token"}
	on := config.Default()
	on.Shard.Enabled = true
	on.Snapshot.Path = "/var/lib/fleetwatch/fleetwatch.db"
	on.Server.Auth.Delegated.Enabled = true
	on.Shard.Address = "https://fleetwatch-0.fleetwatch-peers.fleetwatch.svc:8443"
	lacking := on
	lacking.Server.Auth.Delegated.Enabled = false
	for _, tt := range []struct {
		name string
		cfg  config.Config
		home *rest.Config
		want bool
	}{
		{"the configuration has it", on, home, true},
		{"the configuration lacks delegated auth", lacking, home, false},
		{"no home cluster", on, nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts, err := handoverOptions(context.Background(), &tt.cfg, tt.home)
			if err != nil {
				t.Fatal(err)
			}
			if got := opts.Fetcher != nil; got != tt.want {
				t.Errorf("warm handover on: %v, want %v", got, tt.want)
			}
		})
	}
}

// TestStateFetcher: the fetcher presents the home credential's token over HTTPS to the
// old owner's address only, and reports any other answer than 200 as an error.
func TestStateFetcher(t *testing.T) {
	var gotAuth, gotPath string
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath = r.Header.Get("Authorization"), r.URL.EscapedPath()
		if strings.Contains(r.URL.Path, "gone") {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		_, _ = w.Write([]byte("state"))
	}))
	defer peer.Close()
	f := &stateFetcher{client: peer.Client(), home: &rest.Config{BearerToken: "replica-token"}, userAgent: "test"}
	f.client.Timeout = 5 * time.Second

	rc, err := f.FetchState(t.Context(), shard.Handover{Cluster: "prod/eu", From: "r0", Address: peer.URL})
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if gotAuth != "Bearer replica-token" || gotPath != server.StatePath("prod/eu") {
		t.Errorf("request with %q to %q", gotAuth, gotPath)
	}
	if _, err := f.FetchState(t.Context(), shard.Handover{Cluster: "gone", From: "r0", Address: peer.URL}); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404: got %v", err)
	}
	gotAuth = ""
	for _, addr := range []string{"", "http://" + strings.TrimPrefix(peer.URL, "https://")} {
		if _, err := f.FetchState(t.Context(), shard.Handover{Cluster: "prod", From: "r0", Address: addr}); err == nil {
			t.Errorf("address %q: no error", addr)
		}
	}
	if gotAuth != "" {
		t.Error("the token was sent to an address that is not https")
	}
}

// TestStateFetcherFailures: against a real TLS server, what another attempt may not meet
// (no connection, a 5xx with its Retry-After, a stream cut short) is a TransientError,
// and what it would meet again (401, 403, 404, a certificate not trusted) is not; the
// acknowledgement is a DELETE of the state.
func TestStateFetcherFailures(t *testing.T) {
	state := []byte("FWCS the state of a cluster, long enough to be cut in two")
	var gotMethod string
	peer := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotMethod = r.Method
		switch {
		case strings.Contains(r.URL.Path, "unavailable"):
			w.Header().Set("Retry-After", "3")
			http.Error(w, "draining", http.StatusServiceUnavailable)
		case strings.Contains(r.URL.Path, "failing"):
			http.Error(w, "internal", http.StatusInternalServerError)
		case strings.Contains(r.URL.Path, "unauthorized"):
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		case strings.Contains(r.URL.Path, "forbidden"):
			http.Error(w, "forbidden", http.StatusForbidden)
		case strings.Contains(r.URL.Path, "gone"):
			http.Error(w, "not found", http.StatusNotFound)
		case strings.Contains(r.URL.Path, "cut"):
			w.Header().Set("Content-Length", strconv.Itoa(len(state)))
			_, _ = w.Write(state[:len(state)/2])
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		default:
			_, _ = w.Write(state)
		}
	}))
	defer peer.Close()
	closed := httptest.NewTLSServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	f := &stateFetcher{client: peer.Client(), home: &rest.Config{BearerToken: "replica-token"}, userAgent: "test"}
	f.client.Timeout = 5 * time.Second
	untrusting := &stateFetcher{client: &http.Client{Timeout: 5 * time.Second}, home: f.home, userAgent: "test"}

	for _, tc := range []struct {
		name       string
		f          *stateFetcher
		cluster    string
		address    string
		transient  bool
		retryAfter time.Duration
	}{
		{"connection refused", f, "prod", closedURL, true, 0},
		{"503 with Retry-After", f, "unavailable", peer.URL, true, 3 * time.Second},
		{"500", f, "failing", peer.URL, true, 0},
		{"401", f, "unauthorized", peer.URL, false, 0},
		{"403", f, "forbidden", peer.URL, false, 0},
		{"404", f, "gone", peer.URL, false, 0},
		{"a certificate not trusted", untrusting, "prod", peer.URL, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := tc.f.FetchState(t.Context(), shard.Handover{Cluster: tc.cluster, From: "r0", Address: tc.address})
			if err == nil {
				rc.Close()
				t.Fatal("no error")
			}
			var te *fleetwatch.TransientError
			if errors.As(err, &te) != tc.transient {
				t.Fatalf("transient: %v, want %v: %v", te != nil, tc.transient, err)
			}
			if te != nil && te.RetryAfter != tc.retryAfter {
				t.Errorf("RetryAfter %v, want %v", te.RetryAfter, tc.retryAfter)
			}
		})
	}
	t.Run("a stream cut short", func(t *testing.T) {
		rc, err := f.FetchState(t.Context(), shard.Handover{Cluster: "cut", From: "r0", Address: peer.URL})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		_, err = io.ReadAll(rc)
		var te *fleetwatch.TransientError
		if !errors.As(err, &te) {
			t.Fatalf("reading a stream cut short: %v, want a TransientError", err)
		}
	})
	t.Run("the acknowledgement", func(t *testing.T) {
		if err := f.AcknowledgeState(t.Context(), shard.Handover{Cluster: "prod", From: "r0", Address: peer.URL}); err != nil {
			t.Fatal(err)
		}
		if gotMethod != http.MethodDelete {
			t.Errorf("acknowledged with %s, want DELETE", gotMethod)
		}
		if err := f.AcknowledgeState(t.Context(), shard.Handover{Cluster: "forbidden", From: "r0", Address: peer.URL}); err == nil {
			t.Error("an acknowledgement refused: no error")
		}
	})
}
