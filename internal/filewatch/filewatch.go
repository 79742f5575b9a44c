// Package filewatch watches configuration files the way they are really updated:
// editors and kubectl replace a file by rename, and the kubelet updates a mounted Secret
// or ConfigMap by swapping a symbolic link named "..data" in its directory. A watch on
// the file itself survives neither, so a Watch watches the directories and tells which
// of their events concern the files.
//
// A Watch only says that something may have changed; its users re-read the files, and
// poll as well, since file events are not delivered on every file system.
package filewatch

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
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
