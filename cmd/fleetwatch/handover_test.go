package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

func TestHandoverOptions(t *testing.T) {
	home := &rest.Config{BearerToken: "replica-token"}
	on := func(c *config.Config) {
		c.Shard.Enabled = true
		c.Snapshot.Path = "/var/lib/fleetwatch/fleetwatch.db"
		c.Server.Auth.Delegated.Enabled = true
		c.Shard.Address = "https://fleetwatch-0.fleetwatch-peers.fleetwatch.svc:8443"
	}
	tests := []struct {
		name string
		set  func(c *config.Config)
		want bool
	}{
		{"sharded, with a snapshot, delegated auth and https", func(*config.Config) {}, true},
		{"not sharded", func(c *config.Config) { c.Shard.Enabled = false }, false},
		{"no snapshot", func(c *config.Config) { c.Snapshot.Path = "" }, false},
		{"turned off", func(c *config.Config) { c.Shard.HandoverTimeout = 0 }, false},
		{"no delegated auth: no replica may read a state", func(c *config.Config) { c.Server.Auth.Delegated.Enabled = false }, false},
		{"an http address: no token in clear", func(c *config.Config) { c.Shard.Address = "http://fleetwatch-0:8080" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			on(&cfg)
			tt.set(&cfg)
			opts, err := handoverOptions(context.Background(), &cfg, home)
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
