package filewatch

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

func writeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRelevant(t *testing.T) {
	root := t.TempDir()
	dirSource := filepath.Join(root, "kubeconfigs")
	fileSource := filepath.Join(root, "home", "config")
	linked := filepath.Join(root, "linked", "config")
	target := filepath.Join(root, "dotfiles", "kubeconfig")
	for _, f := range []string{filepath.Join(dirSource, "a"), fileSource, target} {
		writeFile(t, f)
	}
	if err := os.MkdirAll(filepath.Dir(linked), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, linked); err != nil {
		t.Fatal(err)
	}
	target, err := filepath.EvalSymlinks(target) // the temporary directory may be a link
	if err != nil {
		t.Fatal(err)
	}

	fw, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer fw.Close()
	fw.Update(klog.Background(), []string{dirSource, fileSource, linked})

	tests := []struct {
		name string
		want bool
	}{
		{filepath.Join(dirSource, "new.yaml"), true},
		{filepath.Join(dirSource, ".new.yaml.tmp-1"), true},
		{filepath.Join(dirSource, "sub", "x"), false},
		{fileSource, true},
		{filepath.Join(root, "home", "..data"), true},
		{filepath.Join(root, "home", "config.lock"), false},
		{filepath.Join(root, "home", "other"), false},
		{linked, true},
		{target, true},
		{filepath.Join(filepath.Dir(target), "unrelated"), false},
	}
	for _, tt := range tests {
		if got := fw.Relevant(fsnotify.Event{Name: tt.name, Op: fsnotify.Write}); got != tt.want {
			t.Errorf("relevant(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if fw.Relevant(fsnotify.Event{Name: fileSource, Op: fsnotify.Chmod}) {
		t.Errorf("a change of mode is relevant")
	}
	if got, want := len(fw.WatchList()), 4; got != want {
		t.Errorf("watching %q, want %d directories", fw.WatchList(), want)
	}
}
