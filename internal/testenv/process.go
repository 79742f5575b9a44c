package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child process (etcd or kube-apiserver) that can be started again after
// it exits, with the same arguments.
type process struct {
	name    string
	path    string
	args    []string
	logPath string

	// mu guards cmd and done.
	mu sync.Mutex
	// cmd is the running command, nil when the process has not been started or has been
	// reaped.
	cmd *exec.Cmd
	// done is closed when cmd has exited.
	done chan struct{}
}

// start starts the process. Its output is appended to logPath.
func (p *process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s: already running", p.name)
		}
	}
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	fmt.Fprintf(logFile, "==== %s: starting %s\n", time.Now().Format(time.RFC3339Nano), p.name)
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group, so a Ctrl-C in the terminal reaches only us, and we
		// decide the shutdown order; and killed with us if the test binary dies.
		Setpgid:   true,
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("%s: starting %s: %w", p.name, p.path, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// pid returns the process's id, 0 when it is not running.
func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	select {
	case <-p.done:
		return 0
	default:
		return p.cmd.Process.Pid
	}
}

// running reports whether the process has been started and has not exited.
func (p *process) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// exited returns a channel closed when the current process exits; nil if none was started.
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// signal sends sig to the running process.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not started", p.name)
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s: not running", p.name)
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: sending %v: %w", p.name, sig, err)
	}
	return nil
}

// stop ends the process: SIGTERM, then SIGKILL after grace. A paused process is resumed
// first so that it can act on SIGTERM. Stopping a process that is not running is a no-op.
func (p *process) stop(grace time.Duration) error {
	done := p.exited()
	if done == nil || !p.running() {
		return nil
	}
	_ = p.signal(syscall.SIGCONT)
	if err := p.signal(syscall.SIGTERM); err != nil && p.running() {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	return p.kill()
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *process) kill() error {
	done := p.exited()
	if done == nil || !p.running() {
		return nil
	}
	if err := p.signal(syscall.SIGKILL); err != nil && p.running() {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: still running 30s after SIGKILL", p.name)
	}
}

// logTail returns the last n lines of the process log, for error messages.
func (p *process) logTail(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errWithLog adds the tail of the process log to err.
func (p *process) errWithLog(err error) error {
	if err == nil {
		return nil
	}
	tail := p.logTail(25)
	if tail == "" {
		return err
	}
	return errors.Join(err, fmt.Errorf("last lines of %s:\n%s", p.logPath, tail))
}
