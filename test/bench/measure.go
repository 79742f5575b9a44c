package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the user plus system CPU time of this process so far.
func cpuTime() time.Duration {
	ru := rusage()
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// minorFaults is the number of minor page faults of this process so far: first
// touches of memory that the kernel must map (and zero) for it.
func minorFaults() int64 { return rusage().Minflt }

// rusage returns getrusage(RUSAGE_SELF), zero if it fails.
func rusage() syscall.Rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return syscall.Rusage{}
	}
	return ru
}

// procStatus returns the fields of /proc/self/status that are sizes in kB, in bytes:
// VmRSS, VmHWM (the peak RSS), ...
func procStatus() map[string]uint64 { return readStatus("/proc/self/status") }

// readStatus returns the fields of a /proc/<pid>/status file that are sizes in kB, in
// bytes.
func readStatus(path string) map[string]uint64 {
	out := map[string]uint64{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64)
		if err == nil {
			out[k] = n << 10
		}
	}
	return out
}

// settledMemory collects garbage until the heap stops shrinking, returns freed memory to
// the OS, and returns the live heap, the RSS, and the runtime's view of its memory.
func settledMemory() (heap, rss uint64, ms runtime.MemStats) {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc, procStatus()["VmRSS"], ms
}

// machine describes the machine for the report.
func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown memory"
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(data), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
				mem = fmt.Sprintf("%.1f GiB RAM", float64(kb)/(1<<20))
			}
		}
	}
	return fmt.Sprintf("%d CPUs (nproc), %s, %s, %s/%s", runtime.NumCPU(), mem, model, runtime.GOOS, runtime.GOARCH)
}

// loadAverage is the 1-minute load average, for the report.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(data))[0]
}
