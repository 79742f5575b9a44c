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
// cache.encoding objects, compact or compressed. The daemon is built from ./cmd/fleetwatch with the
// tag fleetwatch_bench, which adds one file (cmd/fleetwatch/benchmem.go): on SIGUSR1 it
// collects garbage twice, returns free memory to the OS and prints its HeapAlloc and
// VmRSS, as the other contenders measure themselves (settledMemory). Time to synced is
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

// serveContend runs the daemon once with cache.encoding encoding, until it has synced,
// measures it, and stops it with SIGTERM.
func (d *driver) serveContend(ctx context.Context, name, encoding string) (*Result, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	_ = l.Close()
	logFile, err := os.Create(filepath.Join(d.logDir, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.CommandContext(ctx, d.serveBin, "serve",
		"--kubeconfig", d.env.Kubeconfig, "--resources", "pods,configmaps", "--snapshot-path", "",
		"--server-address", addr, "--cache-encoding", encoding, "--log-verbosity", strconv.Itoa(d.opts.verbosity))
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	if d.opts.profileDir != "" {
		cmd.Env = append(cmd.Env, "FLEETWATCH_BENCH_HEAP_PROFILE="+filepath.Join(d.opts.profileDir, name+".heap.pprof"))
	}
	cmd.Stderr = logFile
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
			var m [6]uint64
			if s, ok := strings.CutPrefix(sc.Text(), "memstats "); ok {
				if _, err := fmt.Sscan(s, &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]); err == nil {
					memstats <- m
				}
			}
		}
	}()

	res := &Result{Impl: "serve-" + encoding, Mode: modeSync}
	base := "http://" + addr
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: not synced within 10 minutes; see %s", name, logFile.Name())
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if synced, objects := serveSynced(ctx, base); synced {
			res.SyncedSec = time.Since(start).Seconds()
			res.Total = objects
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	res.CPUSyncSec = procCPU(pid)
	res.PeakRSS = readStatus(fmt.Sprintf("/proc/%d/status", pid))["VmHWM"]
	res.InitialEvents = res.Total
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
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("%s did not stop within 60s of SIGTERM", name)
	}
	logResult(name, res)
	return res, nil
}

// serveSynced reports whether the daemon at base is ready and its watch cache has every
// object of the fleet, and how many that is.
func serveSynced(ctx context.Context, base string) (bool, int) {
	get := func(path string) (string, bool) {
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
	if _, ok := get("/readyz"); !ok {
		return false, 0
	}
	m, ok := get("/metrics")
	if !ok {
		return false, 0
	}
	objects, events := sumMetric(m, "fleetwatch_objects{"), sumMetric(m, "fleetwatch_events_total{")
	return objects > 0 && events >= objects, int(objects)
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
