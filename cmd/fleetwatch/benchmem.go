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
	"strconv"
	"strings"
	"syscall"
)

// Built with -tags fleetwatch_bench (test/bench builds its serve contender so), the
// daemon measures its memory on SIGUSR1 as the benchmark's other contenders measure
// themselves: it collects garbage twice, returns the free memory to the OS, and prints
// "memstats HEAP RSS INUSE IDLE RELEASED SYS" on stdout: HeapAlloc, VmRSS, HeapInuse,
// HeapIdle, HeapReleased and Sys, in bytes. With FLEETWATCH_BENCH_HEAP_PROFILE set to
// a path, it writes a heap profile there first. The daemon built without the tag has
// no such hook.
func init() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR1)
	go func() {
		for range c {
			runtime.GC()
			runtime.GC()
			debug.FreeOSMemory()
			if path := os.Getenv("FLEETWATCH_BENCH_HEAP_PROFILE"); path != "" {
				writeHeapProfile(path)
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Printf("memstats %d %d %d %d %d %d\n", ms.HeapAlloc, vmRSS(), ms.HeapInuse, ms.HeapIdle, ms.HeapReleased, ms.Sys)
		}
	}()
}

// writeHeapProfile writes the heap profile to path, or says on stderr why not.
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.WriteHeapProfile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "heap profile: %v\n", err)
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
