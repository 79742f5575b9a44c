package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The serve contenders run the real daemon, `fleetwatch serve`, over the same
// kubeconfig, caching pods and configmaps as full objects without a snapshot, with
// cache.encoding objects, compact or compressed; the many-clusters section (many.go)
// runs it over pods alone, in its default encoding, with a snapshot. The daemon is
// built from ./cmd/fleetwatch with the tag fleetwatch_bench, which adds one file
// (cmd/fleetwatch/benchmem.go): on SIGUSR1 it collects garbage twice, returns free
// memory to the OS and prints its HeapAlloc and VmRSS, as the other contenders measure
// themselves (settledMemory). Time to synced is
// when /readyz passes and the server's watch cache has received every cached object
// (the sum of fleetwatch_events_total reaches that of fleetwatch_objects on /metrics),
// polled every 20 ms; the CPU time and peak RSS are read from /proc at that moment.
// With --profile, the daemon writes a heap profile when it measures its memory.

// Values of cache.encoding that the serve contenders run with.
const (
	serveObjects    = "objects"
	serveCompact    = "compact"
	serveCompressed = "compressed"
)

// buildServe builds the daemon with the fleetwatch_bench tag into dir.
func buildServe(dir string) (string, error) {
	out := filepath.Join(dir, "fleetwatch-bench")
	cmd := exec.Command("go", "build", "-tags", "fleetwatch_bench", "-o", out, "./cmd/fleetwatch")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -tags fleetwatch_bench ./cmd/fleetwatch: %w\n%s", err, b)
	}
	return out, nil
}

// serveOptions say how serveContend runs the daemon. The zero value is the sync
// phase's: pods and configmaps, the env's kubeconfig, no snapshot.
type serveOptions struct {
	// kubeconfig is --kubeconfig; empty: the env's, with a context per cluster.
	kubeconfig string
	// resources is --resources; empty: pods,configmaps.
	resources string
	// encoding is --cache-encoding; empty: the daemon's default.
	encoding string
	// snapshotPath is --snapshot-path; empty: no snapshot.
	snapshotPath string
	// args are added to the command line.
	args []string
	// timeout is how long the daemon may take to sync; 0: 10 minutes.
	timeout time.Duration
	// giveUp makes a daemon that has not synced within timeout a result with
	// NotSyncedSec set, measured then, instead of an error.
	giveUp bool
	// idle has the goroutines counted and the memory measured once the daemon is idle
	// after its sync (serveIdle), not at once.
	idle bool
}

// serveContend runs the daemon once, until it has synced, measures it, and stops it
// with SIGTERM, waiting for its exit (which flushes its snapshot). It also returns the
// apiservers' list figures during its life.
func (d *driver) serveContend(ctx context.Context, name string, o serveOptions) (*Result, listCounters, error) {
	if o.kubeconfig == "" {
		o.kubeconfig = d.env.Kubeconfig
	}
	if o.resources == "" {
		o.resources = "pods,configmaps"
	}
	if o.timeout == 0 {
		o.timeout = 10 * time.Minute
	}
	return d.counted(ctx, name, func() (*Result, error) { return d.serveOnce(ctx, name, o) })
}

// serveCommand returns the command of the daemon as o says, serving on a free loopback
// address, base its URL, its stderr going to logFile, name.log in the driver's log
// directory, which the caller closes.
func (d *driver) serveCommand(ctx context.Context, name string, o serveOptions) (cmd *exec.Cmd, logFile *os.File, base string, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, "", err
	}
	addr := l.Addr().String()
	_ = l.Close()
	logFile, err = os.Create(filepath.Join(d.logDir, name+".log"))
	if err != nil {
		return nil, nil, "", err
	}
	args := []string{"serve", "--kubeconfig", o.kubeconfig, "--resources", o.resources, "--snapshot-path", o.snapshotPath,
		"--server-address", addr, "--log-verbosity", strconv.Itoa(d.opts.verbosity)}
	if o.encoding != "" {
		args = append(args, "--cache-encoding", o.encoding)
	}
	cmd = exec.CommandContext(ctx, d.serveBin, append(args, o.args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	cmd.Stderr = logFile
	return cmd, logFile, "http://" + addr, nil
}

// stopServe stops the daemon with SIGTERM and waits for its exit, at most 5 minutes.
func stopServe(cmd *exec.Cmd, name string) error {
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("%s did not stop within 5 minutes of SIGTERM", name)
	}
}

// serveOnce runs and measures the daemon for serveContend, whose defaults o has.
func (d *driver) serveOnce(ctx context.Context, name string, o serveOptions) (*Result, error) {
	cmd, logFile, base, err := d.serveCommand(ctx, name, o)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	impl := "serve"
	if o.encoding != "" {
		impl += "-" + o.encoding
	}
	if d.opts.profileDir != "" {
		if err := os.MkdirAll(d.opts.profileDir, 0o755); err != nil {
			return nil, err
		}
		cmd.Env = append(cmd.Env, "FLEETWATCH_BENCH_HEAP_PROFILE="+filepath.Join(d.opts.profileDir, name+".heap.pprof"),
			"FLEETWATCH_BENCH_CPU_PROFILE="+filepath.Join(d.opts.profileDir, name+".cpu.pprof"))
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	memstats := make(chan [6]uint64, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m, ok := parseMemstats(sc.Text()); ok {
				memstats <- m
			}
		}
	}()

	res := &Result{Impl: impl, Mode: modeSync}
	deadline := start.Add(o.timeout)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s := serveSynced(ctx, base, cmd.Process.Pid); s.synced {
			res.SyncedSec = s.at.Sub(start).Seconds()
			res.CPUSyncSec = s.cpu
			res.Total = s.objects
			break
		}
		if time.Now().After(deadline) {
			if !o.giveUp {
				return nil, fmt.Errorf("%s: not synced within %v; see %s", name, o.timeout, logFile.Name())
			}
			res.NotSyncedSec = time.Since(start).Seconds()
			if m, ok := serveGet(ctx, base, "/metrics"); ok {
				res.Total = int(sumMetric(m, "fleetwatch_objects{"))
			}
			break
		}
		// A hundredth of the time so far, at least 5 ms: each look costs the daemon a
		// /readyz, a few ms at 10,000 clusters, which a typed informer's own look does
		// not cost it; and the time is known only to the look, where a typed informer's
		// is exact (a warm start of 1,000 contexts takes 200 ms, and looks 20 ms apart
		// added 10 ms to it on average).
		time.Sleep(max(5*time.Millisecond, time.Since(start)/100))
	}
	pid := cmd.Process.Pid
	if d.opts.profileDir != "" {
		// The CPU profile covers the start up to ready.
		if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
			return nil, err
		}
	}
	if res.CPUSyncSec == 0 {
		res.CPUSyncSec = procCPU(pid)
	}
	res.PeakRSS = readStatus(fmt.Sprintf("/proc/%d/status", pid))["VmHWM"]
	res.InitialEvents = res.Total
	if o.idle && res.NotSyncedSec == 0 {
		synced := time.Now()
		serveIdle(ctx, func(path string) (string, bool) { return serveGet(ctx, base, path) })
		res.IdleSec = time.Since(synced).Seconds()
	}
	if m, ok := serveGet(ctx, base, "/metrics"); ok {
		res.Goroutines = int(sumMetric(m, "go_goroutines "))
	}
	if err := cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		return nil, err
	}
	select {
	case m := <-memstats:
		res.HeapAfterGC, res.RSSAfterGC = m[0], m[1]
		res.HeapInuseAfterGC, res.HeapIdleAfterGC, res.HeapReleasedAfterGC, res.SysAfterGC = m[2], m[3], m[4], m[5]
	case <-time.After(time.Minute):
		return nil, fmt.Errorf("%s: no memstats within a minute of SIGUSR1 (is it built with -tags fleetwatch_bench?)", name)
	}
	if err := stopServe(cmd, name); err != nil {
		return nil, err
	}
	return res, nil
}

// parseMemstats parses the daemon's answer to SIGUSR1 (benchmem.go), "memstats HEAP RSS
// INUSE IDLE RELEASED SYS", and reports whether line is one.
func parseMemstats(line string) ([6]uint64, bool) {
	var m [6]uint64
	s, ok := strings.CutPrefix(line, "memstats ")
	if !ok {
		return m, false
	}
	_, err := fmt.Sscan(s, &m[0], &m[1], &m[2], &m[3], &m[4], &m[5])
	return m, err == nil
}

// serveIdle waits, at most a minute, until the daemon is idle after its sync: its
// snapshot has committed every change (fleetwatch_snapshot_pending_changes is 0) and its
// goroutines held steady for a second (the identity reads and first health probes that
// wait for the fleet to be ready are done). What an idle cluster costs is measured then.
// get is a GET from the daemon, as serveGet.
func serveIdle(ctx context.Context, get func(path string) (string, bool)) {
	deadline := time.Now().Add(time.Minute)
	last := -1.0
	for time.Now().Before(deadline) && ctx.Err() == nil {
		m, ok := get("/metrics")
		if ok {
			g := sumMetric(m, "go_goroutines ")
			if sumMetric(m, "fleetwatch_snapshot_pending_changes ") == 0 && g == last {
				return
			}
			last = g
		}
		time.Sleep(time.Second)
	}
}

// synced is what serveSynced found.
type synced struct {
	synced bool
	// at is when /readyz answered 200, and cpu the daemon's CPU time then.
	at  time.Time
	cpu float64
	// objects is the number of objects in the fleet.
	objects int
}

// serveSynced reports whether the daemon at base, of process pid, is ready and its watch
// cache has every object of the fleet, and how many that is. The time and CPU are those
// of the ready answer: the daemon is ready once its cache holds the whole fleet (its
// /readyz says so), and the look at /metrics that confirms it, 4 MB at 1,000 clusters,
// is not counted.
func serveSynced(ctx context.Context, base string, pid int) synced {
	if _, ok := serveGet(ctx, base, "/readyz"); !ok {
		return synced{}
	}
	s := synced{at: time.Now(), cpu: procCPU(pid)}
	m, ok := serveGet(ctx, base, "/metrics")
	if !ok {
		return synced{}
	}
	objects, events := sumMetric(m, "fleetwatch_objects{"), sumMetric(m, "fleetwatch_events_total{")
	s.synced, s.objects = objects > 0 && events >= objects, int(objects)
	return s
}

// serveGet returns the body of a GET of path from the daemon at base, and whether it
// answered 200.
func serveGet(ctx context.Context, base, path string) (string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return "", false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err == nil && resp.StatusCode == http.StatusOK
}

// sumMetric sums the samples of the Prometheus text exposition whose lines start with
// prefix.
func sumMetric(exposition, prefix string) float64 {
	var sum float64
	for _, line := range strings.Split(exposition, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// procCPU is the user and system CPU time of process pid so far, in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command, which is in parentheses and may hold spaces.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ, 100 on Linux
}
