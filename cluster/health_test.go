package cluster

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
)

func TestProbe(t *testing.T) {
	s := clustertest.NewServer(t)
	c := fakeCluster(t, s, "a")

	if err := Probe(t.Context(), c, HealthOptions{}); err != nil {
		t.Fatalf("Probe of a healthy server: %v", err)
	}
	if n := s.Requests("/readyz"); n != 1 {
		t.Errorf("GET /readyz requests = %d, want 1", n)
	}
	if err := Probe(t.Context(), c, HealthOptions{Path: "/livez"}); err != nil || s.Requests("/livez") != 1 {
		t.Errorf("Probe of /livez = %v, requests %d", err, s.Requests("/livez"))
	}

	s.SetFailure(http.StatusInternalServerError)
	err := Probe(t.Context(), c, HealthOptions{})
	if want := "GET /readyz: failed checks: etcd"; err == nil || err.Error() != want || !apierrors.IsInternalError(err) {
		t.Errorf("Probe of a failing server = %v, want %q wrapping an InternalError", err, want)
	}
	s.SetFailure(http.StatusServiceUnavailable)
	err = Probe(t.Context(), c, HealthOptions{})
	if err == nil || !strings.HasPrefix(err.Error(), "GET /readyz: ") || !apierrors.IsServiceUnavailable(err) {
		t.Errorf("Probe of an unavailable server = %v, want a ServiceUnavailable error naming GET /readyz", err)
	}
	s.SetFailure(0)

	bad := *c
	bad.Config = rest.CopyConfig(c.Config)
	bad.Config.BearerToken = "revoked"
	if err := Probe(t.Context(), &bad, HealthOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("Probe with a wrong token = %v, want Unauthorized", err)
	}
}

func TestRunHealthTransitionsAndBackoff(t *testing.T) {
	s := clustertest.NewServer(t)
	c := fakeCluster(t, s, "a")
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const interval = 10 * time.Second
	opts := HealthOptions{
		Interval: interval,
		// No jitter, so that each delay is known exactly.
		Backoff: wait.Backoff{Duration: time.Second, Factor: 2, Steps: 100, Cap: 4 * time.Second},
		Clock:   clk,
	}
	reports := make(chan Health, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- RunHealth(ctx, c, opts, func(h Health) { reports <- h }) }()

	expect := func(healthy bool, since time.Time, errSubstr string) Health {
		t.Helper()
		var h Health
		select {
		case h = <-reports:
		case <-time.After(10 * time.Second):
			t.Fatalf("no report, want healthy=%v", healthy)
		}
		if h.Cluster != "a" || h.Healthy != healthy || !h.Since.Equal(since) || !h.Checked.Equal(clk.Now()) {
			t.Fatalf("report = %+v, want cluster a, healthy=%v, since %v, checked %v", h, healthy, since, clk.Now())
		}
		if healthy != (h.Err == nil) || (errSubstr != "" && !strings.Contains(h.Err.Error(), errSubstr)) {
			t.Fatalf("report error = %v, want one containing %q", h.Err, errSubstr)
		}
		return h
	}
	// waiting waits until RunHealth waits for its next probe, and checks that it
	// reported nothing since the last expect.
	waiting := func() {
		t.Helper()
		waitFor(t, "RunHealth to wait", clk.HasWaiters)
		select {
		case h := <-reports:
			t.Fatalf("unexpected report %+v", h)
		default:
		}
	}
	// nextProbeAfter checks that the next probe comes after exactly d.
	nextProbeAfter := func(d time.Duration) {
		t.Helper()
		waiting()
		n := s.Requests("/readyz")
		clk.Step(d - time.Millisecond)
		if clk.Waiters() != 1 {
			t.Fatalf("probe started before %v", d)
		}
		clk.Step(time.Millisecond)
		waitFor(t, "the probe", func() bool { return s.Requests("/readyz") > n })
	}

	start := clk.Now()
	expect(true, start, "")

	// Healthy: probed every interval (plus up to 10%), nothing reported.
	waiting()
	clk.Step(interval + interval/10)
	waiting()

	s.SetFailure(http.StatusInternalServerError)
	clk.Step(interval + interval/10)
	down := clk.Now()
	expect(false, down, "GET /readyz")

	// Unreachable: capped exponential backoff, no report while the error stays.
	for _, d := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		nextProbeAfter(d)
	}
	// A new error is reported, with the time it became unreachable.
	s.SetFailure(http.StatusForbidden)
	nextProbeAfter(4 * time.Second)
	expect(false, down, "Forbidden")

	s.SetFailure(0)
	nextProbeAfter(4 * time.Second)
	up := clk.Now()
	expect(true, up, "")

	// The backoff starts over.
	s.SetFailure(http.StatusInternalServerError)
	waiting()
	clk.Step(interval + interval/10)
	expect(false, clk.Now(), "GET /readyz")
	nextProbeAfter(time.Second)

	waiting()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("RunHealth() = %v, want nil after cancel", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunHealth did not return after cancel")
	}
	select {
	case h := <-reports:
		t.Errorf("report after cancel: %+v", h)
	default:
	}
}

func TestRunHealthBadConfig(t *testing.T) {
	c := &Cluster{Name: "bad", Config: &rest.Config{Host: "https://a.example", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("not PEM")}}}
	err := RunHealth(t.Context(), c, HealthOptions{}, func(h Health) { t.Errorf("report %+v", h) })
	if err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("RunHealth() = %v, want an error naming the cluster", err)
	}
}

func TestDefaultHealthBackoff(t *testing.T) {
	next := DefaultHealthBackoff.DelayFunc()
	base := time.Second
	for i := range 20 {
		d := next()
		if d < base || d > base+base/5 {
			t.Fatalf("delay %d = %v, want in [%v, %v]", i, d, base, base+base/5)
		}
		base = min(2*base, 2*time.Minute)
	}
	if base != 2*time.Minute {
		t.Errorf("backoff did not reach its cap")
	}
}

// waitFor polls cond until it holds; it fails the test after 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestFailedChecks(t *testing.T) {
	body := "[+]ping ok\n[-]etcd failed: reason withheld\n[+]log ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\nreadyz check failed"
	got := failedChecks([]byte(body))
	if want := []string{"etcd", "poststarthook/rbac/bootstrap-roles"}; !slices.Equal(got, want) {
		t.Errorf("failedChecks() = %q, want %q", got, want)
	}
	if got := failedChecks([]byte(`{"kind":"Status"}`)); got != nil {
		t.Errorf("failedChecks(Status) = %q, want none", got)
	}
}

// TestStartHealthStopsOnce: however ctx ends (before the first probe is done, while a
// probe runs, between probes), StartHealth calls stopped exactly once, after the last
// report, and never reports after it.
func TestStartHealthStopsOnce(t *testing.T) {
	s := clustertest.NewServer(t)
	c := fakeCluster(t, s, "a")
	for i := range 40 {
		var mu sync.Mutex
		var stops, reportsAfterStop int
		stopped := make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		err := StartHealth(ctx, c, HealthOptions{Interval: time.Millisecond}, func(Health) {
			mu.Lock()
			defer mu.Unlock()
			if stops > 0 {
				reportsAfterStop++
			}
		}, func() {
			mu.Lock()
			stops++
			mu.Unlock()
			close(stopped)
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i%8) * time.Millisecond / 2)
		cancel()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			t.Fatal("stopped was not called after cancel")
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		if stops != 1 || reportsAfterStop != 0 {
			t.Errorf("run %d: stopped called %d times, %d reports after it", i, stops, reportsAfterStop)
		}
		mu.Unlock()
	}
}
