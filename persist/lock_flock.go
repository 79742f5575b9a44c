//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package persist

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// lockRetry is how often lockFile tries again while another process holds the lock.
const lockRetry = 20 * time.Millisecond

// lockFile takes the flock(2) lock that bbolt takes, exclusive or shared, giving up with
// errLockTimeout after timeout. Open takes it before bbolt does, so that it can look at
// the file under the lock; bbolt then locks the same open file description again, which
// succeeds at once. flock locks belong to the open file description, so a second Open of
// the same file in the same process waits like another process would.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return &os.PathError{Op: "flock", Path: f.Name(), Err: err}
		case !time.Now().Before(deadline):
			return errLockTimeout
		}
		time.Sleep(lockRetry)
	}
}
