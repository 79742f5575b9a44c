package main

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/persist"
)

// freeAddress returns a local address that was free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestServeClosesTheSnapshotAfterASlowShutdown: a client that holds the server's
// shutdown spends the whole shutdownTimeout; serve then returns, within it, and the
// snapshot is closed.
func TestServeClosesTheSnapshotAfterASlowShutdown(t *testing.T) {
	defer func(d time.Duration) { shutdownTimeout = d }(shutdownTimeout)
	shutdownTimeout = time.Second
	defer klog.ClearLogger()

	dir := t.TempDir()
	srv := clustertest.NewServer(t)
	cfg := config.Default()
	cfg.Kubeconfig = []string{filepath.Join(dir, "kubeconfig")}
	clustertest.WriteKubeconfig(t, cfg.Kubeconfig[0], srv.Context("a"))
	cfg.Snapshot.Path = filepath.Join(dir, "fleetwatch.db")
	cfg.Server.Address = freeAddress(t)

	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, config.LoadOptions{}, &cfg) }()

	// A client that sent half of its request headers holds http.Server.Shutdown for
	// five seconds.
	var conn net.Conn
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		if conn, err = net.Dial("tcp", cfg.Server.Address); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned before it served: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon does not listen on %s: %v", cfg.Server.Address, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: " + cfg.Server.Address + "\r\n")); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, fleetwatch.ErrShutdownTimeout) {
			t.Errorf("serve = %v, want ErrShutdownTimeout", err)
		}
		if took := time.Since(began); took > shutdownTimeout+closeTimeout {
			t.Errorf("serve returned %v after the stop began, more than the budget and the close", took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not return")
	}
	// The file is no longer locked: serve closed it.
	store, err := persist.Open(cfg.Snapshot.Path, persist.Options{})
	if err != nil {
		t.Fatalf("opening the snapshot after serve: %v", err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
}
