//go:build fleetwatch_bench

package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Built with -tags fleetwatch_bench (test/bench builds its serve contender so), the
// daemon measures its memory on SIGUSR1 as the benchmark's other contenders measure
// themselves: it collects garbage twice, returns the free memory to the OS, and prints
// "memstats HEAP RSS INUSE IDLE RELEASED SYS" on stdout: HeapAlloc, VmRSS, HeapInuse,
// HeapIdle, HeapReleased and Sys, in bytes. With FLEETWATCH_BENCH_HEAP_PROFILE set to
// a path, it writes a heap profile there first, and with FLEETWATCH_BENCH_GOROUTINE_PROFILE
// a goroutine profile. With FLEETWATCH_BENCH_CPU_PROFILE, it profiles its CPU from its
// start to the first SIGUSR1 or SIGUSR2 into that file, and with
// FLEETWATCH_BENCH_BLOCK_PROFILE its blocking and its mutexes (that path and the path
// with ".mutex"); with FLEETWATCH_BENCH_TRACE, an execution trace from its start to the
// first SIGUSR1 or SIGUSR2. SIGUSR2 stops the CPU profile and the trace alone: the
// benchmark sends it when the daemon is ready, so that they cover the start only.
// With FLEETWATCH_BENCH_WINDOW_CPU_PROFILE set to a path (and no CPU profile of the
// start running), SIGUSR2 starts a CPU profile into it and the next SIGUSR2 stops it:
// the benchmark's watch phase sends them at its window's start and end.
// FLEETWATCH_BENCH_MEMPROFILERATE sets runtime.MemProfileRate (bytes per sample of the
// heap profile; the default, 512 KiB, is too coarse for what a cluster costs). The
// daemon built without the tag has no such hook.
func init() {
	if r, err := strconv.Atoi(os.Getenv("FLEETWATCH_BENCH_MEMPROFILERATE")); err == nil {
		runtime.MemProfileRate = r
	}
	cpu := startCPUProfile(os.Getenv("FLEETWATCH_BENCH_CPU_PROFILE"))
	windowPath := os.Getenv("FLEETWATCH_BENCH_WINDOW_CPU_PROFILE")
	var window *os.File
	tr := startTrace(os.Getenv("FLEETWATCH_BENCH_TRACE"))
	if os.Getenv("FLEETWATCH_BENCH_BLOCK_PROFILE") != "" {
		runtime.SetBlockProfileRate(int(time.Millisecond))
		runtime.SetMutexProfileFraction(10)
	}
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for sig := range c {
			if sig == syscall.SIGUSR2 && windowPath != "" && cpu == nil {
				if window == nil {
					window = startCPUProfile(windowPath)
				} else {
					pprof.StopCPUProfile()
					_ = window.Close()
					window, windowPath = nil, ""
				}
				continue
			}
			if cpu != nil {
				pprof.StopCPUProfile()
				_ = cpu.Close()
				cpu = nil
			}
			if tr != nil {
				trace.Stop()
				_ = tr.Close()
				tr = nil
			}
			if sig == syscall.SIGUSR2 {
				continue
			}
			runtime.GC()
			runtime.GC()
			debug.FreeOSMemory()
			if path := os.Getenv("FLEETWATCH_BENCH_HEAP_PROFILE"); path != "" {
				writeProfile("heap", path)
			}
			if path := os.Getenv("FLEETWATCH_BENCH_GOROUTINE_PROFILE"); path != "" {
				writeProfile("goroutine", path)
			}
			if path := os.Getenv("FLEETWATCH_BENCH_BLOCK_PROFILE"); path != "" {
				writeProfile("block", path)
				writeProfile("mutex", path+".mutex")
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Printf("memstats %d %d %d %d %d %d\n", ms.HeapAlloc, vmRSS(), ms.HeapInuse, ms.HeapIdle, ms.HeapReleased, ms.Sys)
		}
	}()
}

// startCPUProfile starts a CPU profile of the process into path, if not empty, and
// returns its file; nil if there is none.
func startCPUProfile(path string) *os.File {
	return startRecording("cpu profile", path, func(f *os.File) error { return pprof.StartCPUProfile(f) })
}

// startTrace starts an execution trace of the process into path, if not empty, and
// returns its file; nil if there is none.
func startTrace(path string) *os.File {
	return startRecording("trace", path, func(f *os.File) error { return trace.Start(f) })
}

// startRecording creates path, if not empty, and starts the recording of what into it;
// it returns the file, or nil, having said why on stderr, if it could not.
func startRecording(what, path string, start func(*os.File) error) *os.File {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err == nil {
		if err = start(f); err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		return nil
	}
	return f
}

// writeProfile writes the named profile (heap, goroutine) to path, or says on stderr
// why not.
func writeProfile(name, path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s profile: %v\n", name, err)
	}
}

// vmRSS reads VmRSS from /proc/self/status, in bytes; 0 if it cannot.
func vmRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
