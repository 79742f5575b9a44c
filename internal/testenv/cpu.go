package testenv

import (
	"syscall"
	"time"
)

// ProcessCPU is the user and system CPU time of the process so far, for benchmarks
// that report CPU per operation: a busy machine inflates it less than the wall time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
