package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The daemon in the watch phase: `fleetwatch serve` in its default configuration (its
// default cache.encoding, no snapshot), beside the library's contenders in the same
// window, so that its CPU per event is measured against the same typed informers. It
// has no handler to time events by, so it gives no latencies: its window is the CPU
// time the process spent from "start" until its watch cache has received the window's
// changes (the sum of fleetwatch_events_total grew by the stamped writes, looked at on
// /metrics every 200 ms, which the window counts too), and its events are that growth.

// watchParticipant is a process of the watch phase, driven by the phase's commands:
// ready, then "start", "finish N", "finished", "end", and its result.
type watchParticipant interface {
	ready() error
	send(cmd string) error
	expect(typ string) error
	result() (*Result, error)
	kill()
}

// serveWatch is the daemon as a watchParticipant.
type serveWatch struct {
	name    string
	cmd     *exec.Cmd
	logFile *os.File
	base    string
	ctx     context.Context
	// cpu0 and events0 are the CPU time and fleetwatch_events_total at "start"; want is
	// the growth of the events "finish" asks for; cpu1 the CPU time at "end".
	cpu0, cpu1 float64
	events0    float64
	want       int
	events     int
	// profile has the daemon profile its window's CPU (FLEETWATCH_BENCH_WINDOW_CPU_PROFILE):
	// SIGUSR2 at "start" and at "end".
	profile bool
}

// spawnServeWatch starts the daemon for the watch phase; with profileDir not empty, it
// profiles its window's CPU into name.window.cpu.pprof there.
func (d *driver) spawnServeWatch(ctx context.Context, name, profileDir string) (*serveWatch, error) {
	cmd, logFile, base, err := d.serveCommand(ctx, name, serveOptions{kubeconfig: d.env.Kubeconfig, resources: "pods,configmaps"})
	if err != nil {
		return nil, err
	}
	if profileDir != "" {
		cmd.Env = append(cmd.Env, "FLEETWATCH_BENCH_WINDOW_CPU_PROFILE="+filepath.Join(profileDir, name+".window.cpu.pprof"))
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	return &serveWatch{name: name, cmd: cmd, logFile: logFile, base: base, ctx: ctx, profile: profileDir != ""}, nil
}

// ready waits, at most 10 minutes, until the daemon has synced.
func (s *serveWatch) ready() error {
	deadline := time.Now().Add(10 * time.Minute)
	for !serveSynced(s.ctx, s.base, s.cmd.Process.Pid).synced {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not synced within 10 minutes; see %s", s.name, s.logFile.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// eventsTotal is the sum of fleetwatch_events_total.
func (s *serveWatch) eventsTotal() (float64, error) {
	m, ok := serveGet(s.ctx, s.base, "/metrics")
	if !ok {
		return 0, fmt.Errorf("%s: GET /metrics failed; see %s", s.name, s.logFile.Name())
	}
	return sumMetric(m, "fleetwatch_events_total{"), nil
}

func (s *serveWatch) send(cmd string) error {
	switch {
	case cmd == "start":
		events, err := s.eventsTotal()
		if err != nil {
			return err
		}
		s.cpu0, s.events0 = procCPU(s.cmd.Process.Pid), events
		if s.profile {
			return s.cmd.Process.Signal(syscall.SIGUSR2)
		}
	case strings.HasPrefix(cmd, "finish "):
		n, err := strconv.Atoi(strings.TrimPrefix(cmd, "finish "))
		if err != nil {
			return fmt.Errorf("%s: %q: %w", s.name, cmd, err)
		}
		s.want = n
	case cmd == "end":
		s.cpu1 = procCPU(s.cmd.Process.Pid)
		if s.profile {
			return s.cmd.Process.Signal(syscall.SIGUSR2)
		}
	default:
		return fmt.Errorf("%s: unknown command %q", s.name, cmd)
	}
	return nil
}

// expect waits for "finished": at most 5 minutes, until the watch cache has received
// the changes that "finish" named.
func (s *serveWatch) expect(typ string) error {
	if typ != "finished" {
		return fmt.Errorf("%s: cannot wait for %q", s.name, typ)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		events, err := s.eventsTotal()
		if err != nil {
			return err
		}
		if s.events = int(events - s.events0); s.events >= s.want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d changes within 5 minutes; see %s", s.name, s.events, s.want, s.logFile.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// result stops the daemon with SIGTERM and returns its window.
func (s *serveWatch) result() (*Result, error) {
	defer s.logFile.Close()
	res := &Result{Impl: "serve", Mode: modeWatch, Events: s.events, Expected: s.want, CPUWindowSec: s.cpu1 - s.cpu0}
	if err := stopServe(s.cmd, s.name); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *serveWatch) kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.logFile.Close()
}
