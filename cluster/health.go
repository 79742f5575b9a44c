package cluster

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Defaults of HealthOptions.
const (
	DefaultHealthPath     = "/readyz"
	DefaultHealthInterval = 30 * time.Second
	DefaultHealthTimeout  = 5 * time.Second
)

// DefaultHealthBackoff is the probe backoff while a cluster is unreachable: 1s, doubling
// up to 2 minutes, each delay lengthened by up to 20% at random so that clusters that
// failed together do not retry in lockstep.
var DefaultHealthBackoff = wait.Backoff{
	Duration: time.Second,
	Factor:   2,
	Jitter:   0.2,
	Steps:    math.MaxInt32,
	Cap:      2 * time.Minute,
}

// healthIntervalJitter spreads the probes of healthy clusters, for the same reason.
const healthIntervalJitter = 0.1

// HealthOptions configures Probe and RunHealth. The zero value uses every default.
type HealthOptions struct {
	// Path is the probed path, relative to the server URL (a path prefix in the
	// kubeconfig's server is kept). Default: DefaultHealthPath, "/readyz", which fails
	// while the apiserver cannot serve (etcd down, shutting down), not only when it is
	// unreachable. Any user may read it under the default RBAC
	// (system:public-info-viewer).
	Path string
	// Interval is the time between probes while the cluster is healthy, lengthened by up
	// to 10% at random. Default, when not positive: DefaultHealthInterval.
	Interval time.Duration
	// Timeout bounds each probe. Default, when not positive: DefaultHealthTimeout.
	Timeout time.Duration
	// Backoff spaces the probes while the cluster is unreachable; it starts over each
	// time the cluster becomes unreachable. Its Steps must be positive for the delay to
	// grow (see wait.Backoff). Default, when it is the zero value: DefaultHealthBackoff.
	Backoff wait.Backoff
	// Clock drives the waits between probes. Default: the real clock.
	Clock clock.WithDelayedExecution
}

func (o HealthOptions) withDefaults() HealthOptions {
	o.Path = cmp.Or(o.Path, DefaultHealthPath)
	if o.Interval <= 0 {
		o.Interval = DefaultHealthInterval
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultHealthTimeout
	}
	if o.Backoff == (wait.Backoff{}) {
		o.Backoff = DefaultHealthBackoff
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// Health is the reachability of one cluster, as RunHealth reports it.
type Health struct {
	// Cluster is the cluster name.
	Cluster string
	// Healthy is whether the last probe succeeded.
	Healthy bool
	// Err is why the last probe failed; nil when Healthy.
	Err error
	// Since is when the cluster became healthy or unreachable: the time of the first
	// probe with the current outcome.
	Since time.Time
	// Checked is the time of the probe that produced this report.
	Checked time.Time
}

// Probe checks once whether the cluster serves: a GET of opts.Path through the cluster's
// rest.Config (its credentials, proxy and rate limit), bounded by opts.Timeout. Any
// status other than 2xx is a failure, including 401 and 403: a cluster that rejects
// fleetwatch's credentials cannot be watched either.
func Probe(ctx context.Context, c *Cluster, opts HealthOptions) error {
	p, err := newProber(c, opts.withDefaults())
	if err != nil {
		return err
	}
	return p.probe(ctx)
}

// RunHealth probes the cluster until ctx is done, and calls report when its health
// changes: after the first probe, whenever it turns healthy or unreachable, and, while
// it is unreachable, when the error changes (for example from "connection refused" to
// "Unauthorized"; Since stays the same then). A healthy cluster is probed every
// opts.Interval; an unreachable one with the capped, jittered exponential backoff of
// opts.Backoff, which starts over when the cluster turns unreachable again.
//
// report must not be nil. It is called one call at a time, and should return promptly:
// the next probe waits for it. RunHealth returns nil when ctx is done, after the last
// call of report; a probe cut short by ctx is not reported. It returns an error,
// without probing, only when no client can be built from the cluster's rest.Config.
//
// Consumers start it from Aware.Engage with the context they are given, so that it stops
// when the cluster is removed or replaced. StartHealth does the same without a goroutine
// that waits between the probes.
func RunHealth(ctx context.Context, c *Cluster, opts HealthOptions, report func(Health)) error {
	done := make(chan struct{})
	if err := StartHealth(ctx, c, opts, report, func() { close(done) }); err != nil {
		return err
	}
	<-done
	return nil
}

// StartHealth probes the cluster as RunHealth does, and returns at once: each probe
// runs on a timer of opts.Clock (AfterFunc), so that a cluster costs no goroutine
// between its probes, which matters in a fleet of thousands. Once ctx is done and the
// last call of report has returned, stopped is called, if not nil. It returns an
// error, and neither probes nor calls stopped, only when no client can be built from
// the cluster's rest.Config.
func StartHealth(ctx context.Context, c *Cluster, opts HealthOptions, report func(Health), stopped func()) error {
	opts = opts.withDefaults()
	p, err := newProber(c, opts)
	if err != nil {
		return err
	}
	h := &healthLoop{ctx: ctx, cluster: c.Name, opts: opts, prober: p, report: report, stopped: stopped, probing: true}
	context.AfterFunc(ctx, h.cancel)
	go h.run()
	return nil
}

// healthLoop is the probing of one cluster by StartHealth: a chain of timers, each of
// which runs one probe and sets the next.
type healthLoop struct {
	ctx     context.Context
	cluster string
	opts    HealthOptions
	prober  *prober
	report  func(Health)
	stopped func()

	// last is the last report; backoff is non-nil while the cluster is unreachable. Only
	// the probe that runs touches them, and probes run one after the other.
	last    *Health
	backoff wait.DelayFunc

	// mu guards timer, probing, done and finished.
	mu sync.Mutex
	// timer fires the next probe; nil until the first probe has run.
	timer clock.Timer
	// probing is set while a probe runs; done once ctx is done; finished once stopped
	// has been called, or is being.
	probing, done, finished bool
}

// finishLocked marks the loop finished and returns stopped if it was not already, for
// the caller to call outside mu; nil otherwise.
func (h *healthLoop) finishLocked() func() {
	if h.finished || h.stopped == nil {
		h.finished = true
		return nil
	}
	h.finished = true
	return h.stopped
}

// cancel stops the timer once ctx is done. If no probe runs and the timer had not fired,
// the loop is finished; otherwise the probe that runs, or that the timer started,
// finishes it.
func (h *healthLoop) cancel() {
	h.mu.Lock()
	h.done = true
	var stopped func()
	if !h.probing && !h.finished && (h.timer == nil || h.timer.Stop()) {
		stopped = h.finishLocked()
	}
	h.mu.Unlock()
	if stopped != nil {
		stopped()
	}
}

// probe is the function of the timers: it runs one probe, unless ctx ended.
func (h *healthLoop) probe() {
	h.mu.Lock()
	if h.done {
		stopped := h.finishLocked()
		h.mu.Unlock()
		if stopped != nil {
			stopped()
		}
		return
	}
	h.probing = true
	h.mu.Unlock()
	h.run()
}

// run probes once, with probing set, reports what changed, and sets the timer of the
// next probe.
func (h *healthLoop) run() {
	delay, ok := h.probeOnce()

	h.mu.Lock()
	h.probing = false
	if h.done || !ok {
		// ctx ended: before cancel ran, if !ok, which then finds the loop finished.
		h.done = true
		stopped := h.finishLocked()
		h.mu.Unlock()
		if stopped != nil {
			stopped()
		}
		return
	}
	// In a goroutine of its own: a fake clock runs the function of AfterFunc inside
	// Step, holding its lock, which the probe's Now would wait for.
	h.timer = h.opts.Clock.AfterFunc(delay, func() { go h.probe() })
	h.mu.Unlock()
}

// probeOnce probes, reports a change, and returns the delay until the next probe; false
// if ctx ended meanwhile.
func (h *healthLoop) probeOnce() (time.Duration, bool) {
	err := h.prober.probe(h.ctx)
	if h.ctx.Err() != nil {
		return 0, false
	}
	now := h.opts.Clock.Now()
	r := Health{Cluster: h.cluster, Healthy: err == nil, Err: err, Since: now, Checked: now}
	switch {
	case h.last == nil || h.last.Healthy != r.Healthy:
		h.report(r)
		h.last = &r
	case !r.Healthy && r.Err.Error() != h.last.Err.Error():
		r.Since = h.last.Since
		h.report(r)
		h.last = &r
	}
	if r.Healthy {
		h.backoff = nil
		return wait.Jitter(h.opts.Interval, healthIntervalJitter), true
	}
	if h.backoff == nil {
		h.backoff = h.opts.Backoff.DelayFunc()
	}
	return h.backoff(), true
}

// prober probes one cluster with one client, so that repeated probes reuse connections.
type prober struct {
	client  rest.Interface
	path    string
	timeout time.Duration
}

func newProber(c *Cluster, opts HealthOptions) (*prober, error) {
	rc, err := plainClient(c.Config)
	if err != nil {
		return nil, fmt.Errorf("health of cluster %q: %w", c.Name, err)
	}
	return &prober{client: rc, path: opts.Path, timeout: opts.Timeout}, nil
}

func (p *prober) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	result := p.client.Get().AbsPath(p.path).Do(ctx)
	err := result.Error() // decodes a Status body, which Raw does not
	if err == nil {
		return nil
	}
	body, _ := result.Raw()
	if failed := failedChecks(body); len(failed) > 0 {
		return &checksError{path: p.path, failed: failed, err: err}
	}
	return fmt.Errorf("GET %s: %w", p.path, err)
}

// failedChecks returns the names of the failed checks in the body of a failed /readyz,
// /livez or /healthz, whose lines read "[+]name ok" or "[-]name failed: reason".
func failedChecks(body []byte) []string {
	var failed []string
	for line := range strings.Lines(string(body)) {
		if name, ok := strings.CutPrefix(line, "[-]"); ok {
			name, _, _ = strings.Cut(name, " ")
			failed = append(failed, strings.TrimSpace(name))
		}
	}
	return failed
}

// checksError is a failed health endpoint that listed its failed checks. Its message
// names them instead of repeating the whole body, a few kilobytes from a kube-apiserver
// that is starting; it wraps the client's error, so apierrors functions still work.
type checksError struct {
	path   string
	failed []string
	err    error
}

func (e *checksError) Error() string {
	return fmt.Sprintf("GET %s: failed checks: %s", e.path, strings.Join(e.failed, ", "))
}

func (e *checksError) Unwrap() error { return e.err }
