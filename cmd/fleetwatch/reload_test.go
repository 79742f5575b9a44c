package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/config"
)

func TestIsLive(t *testing.T) {
	for _, tt := range []struct {
		key  string
		live bool
	}{
		{"kubeconfig", true},
		{"contexts.include", true},
		{"contexts.exclude", true},
		{"contexts.aliases", true},
		{"resources", true},
		{"sync.timeout", true},
		{"sync.maxConcurrent", true},
		{"health.interval", false},
		{"cache.keepManagedFields", true},
		{"cache.keepSecretData", true},
		{"log.verbosity", true},
		{"log.format", false},
		{"snapshot.path", false},
		{"snapshot.interval", true},
		{"snapshot.maxPending", true},
		{"server.address", false},
		{"server.tls.certFile", false},
		{"server.auth.tokenFile", false},
		// A key added later needs a restart until it is known to apply live.
		{"server.auth.newKey", false},
		{"resourcesExtra", false},
	} {
		if got := isLive(tt.key); got != tt.live {
			t.Errorf("isLive(%q) = %v, want %v", tt.key, got, tt.live)
		}
	}
}

// reloadTest runs a reloader on a config file, polling on a fake clock.
type reloadTest struct {
	t     *testing.T
	file  string
	clock *testingclock.FakeClock
	logs  ktesting.Underlier
	// seen counts the log entries taken by expectLogs.
	seen   int
	rl     *reloader
	reload chan struct{}

	// mu guards applied and applyErr.
	mu       sync.Mutex
	applied  []*config.Config
	applyErr error
}

// newReloadTest starts a reloader on a file holding initial; with watch false, it
// relies on polling alone.
func newReloadTest(t *testing.T, initial string, watch bool) *reloadTest {
	rt := &reloadTest{
		t:      t,
		file:   filepath.Join(t.TempDir(), "fleetwatch.yaml"),
		clock:  testingclock.NewFakeClock(time.Now()),
		reload: make(chan struct{}, 100),
	}
	rt.write(initial)
	load := func() (*config.Config, error) {
		return config.Load(config.LoadOptions{File: rt.file, LookupEnv: func(string) (string, bool) { return "", false }})
	}
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	rt.rl = newReloader(rt.file, cfg, load, func(_ context.Context, old, next *config.Config) error {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if rt.applyErr != nil {
			return rt.applyErr
		}
		rt.applied = append(rt.applied, next)
		return nil
	})
	rt.rl.clock = rt.clock
	rt.rl.noWatch = !watch
	rt.rl.afterReload = func() { rt.reload <- struct{}{} }
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(2)))
	rt.logs = logger.GetSink().(ktesting.Underlier)
	ctx, cancel := context.WithCancel(klog.NewContext(t.Context(), logger))
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		_ = rt.rl.Start(ctx)
	}()
	return rt
}

func (rt *reloadTest) write(content string) {
	rt.t.Helper()
	// Like an editor: write a new file, rename it over the old one.
	tmp := rt.file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		rt.t.Fatal(err)
	}
	if err := os.Rename(tmp, rt.file); err != nil {
		rt.t.Fatal(err)
	}
}

// poll makes the reloader poll, and waits for that reload.
func (rt *reloadTest) poll() {
	rt.t.Helper()
	// The ticker must exist before the clock moves.
	deadline := time.Now().Add(10 * time.Second)
	for !rt.clock.HasWaiters() {
		if time.Now().After(deadline) {
			rt.t.Fatal("the reloader has no ticker")
		}
		time.Sleep(time.Millisecond)
	}
	rt.clock.Step(configPollInterval)
	rt.waitReload()
}

func (rt *reloadTest) waitReload() {
	rt.t.Helper()
	select {
	case <-rt.reload:
	case <-time.After(10 * time.Second):
		rt.t.Fatal("no reload")
	}
}

// takeApplied returns the configurations applied since the last call.
func (rt *reloadTest) takeApplied() []*config.Config {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := rt.applied
	rt.applied = nil
	return out
}

// expectLogs checks the messages logged since the last call, errors marked "ERROR: ",
// and returns their entries.
func (rt *reloadTest) expectLogs(want ...string) ktesting.Log {
	rt.t.Helper()
	entries := rt.logs.GetBuffer().Data()[rt.seen:]
	rt.seen += len(entries)
	var got []string
	for _, e := range entries {
		msg := e.Message
		if e.Type == ktesting.LogError {
			msg = "ERROR: " + msg
		}
		got = append(got, msg)
	}
	if !slices.Equal(got, want) {
		rt.t.Errorf("logs = %q, want %q", got, want)
	}
	return entries
}

const (
	logApplied = "Applied the new configuration"
	logInvalid = "ERROR: Reloading the configuration failed; keeping the current one"
	logAgain   = "Reloading the configuration works again"
	logRestart = "Configuration keys changed that take effect only at the next start; restart fleetwatch to apply them"
)

func TestReloaderAppliesValidAndKeepsOld(t *testing.T) {
	rt := newReloadTest(t, "resources: [{name: pods}]\n", false)

	t.Log("nothing changed: nothing applied")
	rt.poll()
	if got := rt.takeApplied(); len(got) != 0 {
		t.Fatalf("applied %d configurations, want none", len(got))
	}
	rt.expectLogs()

	t.Log("a valid change is applied")
	rt.write("resources: [{name: pods}, {name: configmaps}]\n")
	rt.poll()
	got := rt.takeApplied()
	if len(got) != 1 || len(got[0].Resources) != 2 {
		t.Fatalf("applied %v, want the config with two resources", got)
	}
	rt.expectLogs(logApplied)

	t.Log("an invalid config is reported once and changes nothing")
	rt.write("resources: [{name: Pods}]\nsync: {timeout: soon}\n")
	rt.poll()
	rt.poll()
	if got := rt.takeApplied(); len(got) != 0 {
		t.Fatalf("applied %d configurations from an invalid file", len(got))
	}
	if entries := rt.expectLogs(logInvalid); len(entries) != 1 {
		t.FailNow()
	} else if err := entries[0].Err; err == nil || !strings.Contains(err.Error(), "resources[0].name") || !strings.Contains(err.Error(), "sync.timeout") {
		t.Errorf("the error does not name every problem: %v", err)
	}

	t.Log("an empty file, as one written in place may be for a moment, changes nothing")
	rt.write("")
	rt.poll()
	if got := rt.takeApplied(); len(got) != 0 {
		t.Fatalf("applied %d configurations from an empty file", len(got))
	}
	rt.expectLogs(logInvalid)

	t.Log("a later valid edit applies, against the last applied config")
	rt.write("resources: [{name: pods}, {name: configmaps}]\nsync: {timeout: 1m}\n")
	rt.poll()
	if got := rt.takeApplied(); len(got) != 1 || got[0].Sync.Timeout != time.Minute {
		t.Fatalf("applied %v, want the config with sync.timeout 1m", got)
	}
	rt.expectLogs(logAgain, logApplied)

	t.Log("a failed apply keeps the current config, and is retried")
	rt.mu.Lock()
	rt.applyErr = errors.New("boom")
	rt.mu.Unlock()
	rt.write("resources: [{name: pods}]\nsync: {timeout: 1m}\n")
	rt.poll()
	rt.poll()
	rt.expectLogs("ERROR: Applying the new configuration failed; keeping the current one")
	rt.mu.Lock()
	rt.applyErr = nil
	rt.mu.Unlock()
	rt.poll()
	if got := rt.takeApplied(); len(got) != 1 || len(got[0].Resources) != 1 {
		t.Fatalf("applied %v, want the config with one resource", got)
	}
	rt.expectLogs(logAgain, logApplied)
}

func TestReloaderRestartKeys(t *testing.T) {
	rt := newReloadTest(t, "server: {address: 127.0.0.1:8080}\n", false)

	t.Log("a key that needs a restart is logged, once, and nothing is applied")
	rt.write("server: {address: 127.0.0.1:9090}\n")
	rt.poll()
	rt.poll()
	rt.expectLogs(logRestart)
	if got := rt.takeApplied(); len(got) != 0 {
		t.Fatalf("applied %d configurations for a restart-only change", len(got))
	}

	t.Log("with a live key too: the live one applies, the other is still pending")
	rt.write("server: {address: 127.0.0.1:9090}\nlog: {verbosity: 3}\n")
	rt.poll()
	rt.expectLogs(logApplied)
	if got := rt.takeApplied(); len(got) != 1 || got[0].Log.Verbosity != 3 {
		t.Fatalf("applied %v, want log.verbosity 3", got)
	}

	t.Log("back to the value the daemon runs with: no restart needed, nothing logged")
	rt.write("server: {address: 127.0.0.1:8080}\nlog: {verbosity: 3}\n")
	rt.poll()
	rt.expectLogs()
	if !slices.Equal(rt.rl.restart, nil) {
		t.Errorf("keys waiting for a restart: %q", rt.rl.restart)
	}
}

func TestReloaderDebouncesFileEvents(t *testing.T) {
	rt := newReloadTest(t, "resources: [{name: pods}]\n", true)

	// Wait for the watch: a write before it would not be seen.
	deadline := time.Now().Add(10 * time.Second)
	for !rt.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the reloader has not started")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	for _, r := range []string{"services", "nodes", "configmaps"} {
		rt.write("resources: [{name: pods}, {name: " + r + "}]\n")
	}
	// The first event arms the delay; later ones do not add reloads.
	deadline = time.Now().Add(10 * time.Second)
	for rt.clock.Waiters() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no reload was scheduled after the file changed")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the other events arrive
	rt.clock.Step(configReloadDelay)
	rt.waitReload()
	got := rt.takeApplied()
	if len(got) != 1 || got[0].Resources[1].Name != "configmaps" {
		t.Fatalf("applied %v, want one config: the last written", got)
	}
	select {
	case <-rt.reload:
		t.Fatal("a second reload for one burst of writes")
	case <-time.After(200 * time.Millisecond):
	}
}
