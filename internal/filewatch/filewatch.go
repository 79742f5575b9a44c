// Package filewatch watches configuration files the way they are really updated:
// editors and kubectl replace a file by rename, and the kubelet updates a mounted Secret
// or ConfigMap by swapping a symbolic link named "..data" in its directory. A watch on
// the file itself survives neither, so a Watch watches the directories and tells which
// of their events concern the files.
//
// A Watch only says that something may have changed; its users re-read the files, and
// poll as well, since file events are not delivered on every file system.
//
// It imports nothing of fleetwatch.
package filewatch

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Watch watches the directories of a set of paths. It is not safe for concurrent use:
// one goroutine calls Update and Relevant and reads Events and Errors.
type Watch struct {
	w *fsnotify.Watcher
	// dirs are configured directories: any change in them counts.
	dirs map[string]bool
	// files are configured files and the targets of those that are symbolic links.
	files map[string]bool
	// fileDirs are the directories of files, where changes to names starting with ".."
	// count too.
	fileDirs map[string]bool
}

// New returns a Watch of nothing; Update says what to watch. Close it when done.
func New() (*Watch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &Watch{w: w}, nil
}

// Close stops the watch and closes Events and Errors.
func (fw *Watch) Close() error { return fw.w.Close() }

// Events are the file events of the watched directories; filter them with Relevant.
func (fw *Watch) Events() <-chan fsnotify.Event { return fw.w.Events }

// Errors are the errors of the watch.
func (fw *Watch) Errors() <-chan error { return fw.w.Errors }

// Update sets the paths to follow: files, and directories that stand for every file in
// them. It computes what to watch from them and adds the watches; a directory that does
// not exist is skipped (polling covers it), so call Update again before each re-read:
// a directory that was missing or replaced is watched anew, and the targets of symbolic
// links may have changed. Watches that are no longer needed are kept: they only cost
// events that Relevant filters out.
func (fw *Watch) Update(logger klog.Logger, paths []string) {
	fw.dirs, fw.files, fw.fileDirs = map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, path := range paths {
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			fw.dirs[path] = true
			continue
		}
		fw.files[path] = true
		fw.fileDirs[filepath.Dir(path)] = true
		if target, err := filepath.EvalSymlinks(path); err == nil && target != path {
			fw.files[target] = true
			fw.fileDirs[filepath.Dir(target)] = true
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(fw.dirs)) {
		fw.add(logger, dir)
	}
	for _, dir := range slices.Sorted(maps.Keys(fw.fileDirs)) {
		if !fw.dirs[dir] {
			fw.add(logger, dir)
		}
	}
}

func (fw *Watch) add(logger klog.Logger, dir string) {
	// Adding an existing watch is a no-op.
	if err := fw.w.Add(dir); err != nil {
		logger.V(4).Info("Cannot watch directory; polling covers it", "dir", dir, "err", err)
	}
}

// Relevant reports whether ev may change the followed files. A change of mode alone
// does not.
func (fw *Watch) Relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	dir := filepath.Dir(ev.Name)
	return fw.dirs[dir] || fw.files[ev.Name] || (fw.fileDirs[dir] && strings.HasPrefix(filepath.Base(ev.Name), ".."))
}

// WatchList returns the watched directories.
func (fw *Watch) WatchList() []string { return fw.w.WatchList() }

// Follower re-reads files when they change: after a change is seen (once for a burst of
// them), every poll interval, and when asked.
type Follower struct {
	// What names the files in logs, such as "kubeconfig files".
	What string
	// Paths returns the paths to follow. It is called again before each re-read.
	Paths func() []string
	// Clock, Delay and PollInterval time the re-reads: Delay after the first change of a
	// burst, and every PollInterval.
	Clock        clock.WithTicker
	Delay        time.Duration
	PollInterval time.Duration
	// NoWatch relies on polling alone.
	NoWatch bool
	// Trigger, if not nil, asks for a re-read at once.
	Trigger <-chan struct{}
	// Reread re-reads the files. It runs on Run's goroutine.
	Reread func()
}

// Run follows the files until ctx is done. It starts watching before it calls first, so
// that no change made after first has read the files goes unseen; an error of first
// ends Run with that error. first may be nil.
func (f *Follower) Run(ctx context.Context, logger klog.Logger, first func() error) error {
	var fw *Watch
	if !f.NoWatch {
		w, err := New()
		if err != nil {
			logger.Error(err, "Cannot watch "+f.What+"; relying on polling", "interval", f.PollInterval)
		} else {
			defer w.Close()
			fw = w
			fw.Update(logger, f.Paths())
		}
	}
	if first != nil {
		if err := first(); err != nil {
			return err
		}
	}
	poll := f.Clock.NewTicker(f.PollInterval)
	defer poll.Stop()
	var (
		events  <-chan fsnotify.Event
		errs    <-chan error
		pending <-chan time.Time // non-nil while a re-read is due
	)
	if fw != nil {
		events, errs = fw.Events(), fw.Errors()
	}
	reread := func() {
		if fw != nil {
			// A directory that was missing or replaced has to be watched anew, and the
			// targets of symbolic links may have changed.
			fw.Update(logger, f.Paths())
		}
		f.Reread()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if !fw.Relevant(ev) {
				continue
			}
			logger.V(5).Info("File changed", "files", f.What, "event", ev.String())
			if pending == nil {
				pending = f.Clock.After(f.Delay)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			logger.Error(err, "Watching "+f.What)
		case <-pending:
			pending = nil
			reread()
		case <-f.Trigger:
			logger.V(2).Info("Re-reading on request", "files", f.What)
			reread()
		case <-poll.C():
			reread()
		}
	}
}
