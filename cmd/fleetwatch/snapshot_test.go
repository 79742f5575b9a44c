package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/persist"
)

func execute(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

func writeSnapshot(t *testing.T, path string) {
	t.Helper()
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(persist.WriterOptions{})
	key := persist.ResourceKeyFor(schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	for _, name := range []string{"a", "b"} {
		pod := &unstructured.Unstructured{}
		pod.SetAPIVersion("v1")
		pod.SetKind("Pod")
		pod.SetNamespace("shop")
		pod.SetName(name)
		pod.SetResourceVersion("7")
		w.Upsert("prod", key, pod)
	}
	w.Checkpoint("prod", key, "7")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotInspectAndVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	writeSnapshot(t, path)

	out, err := execute(t, "snapshot", "inspect", "--path", path)
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, out)
	}
	for _, want := range []string{"1 clusters, 2 objects", "prod", "/v1/pods", " 7 "} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
	out, err = execute(t, "snapshot", "inspect", "--path", path, "-o", "json")
	if err != nil || !strings.Contains(out, `"Objects": 2`) {
		t.Errorf("inspect -o json: %v\n%s", err, out)
	}
	if out, err := execute(t, "snapshot", "verify", "--path", path); err != nil || !strings.Contains(out, "ok") {
		t.Errorf("verify: %v\n%s", err, out)
	}
}

func TestSnapshotBadInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte("not a snapshot at all"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "verify", "--path", garbage}, "garbage.db"},
		{[]string{"snapshot", "inspect", "--path", filepath.Join(dir, "missing.db")}, "missing.db"},
		{[]string{"snapshot", "inspect", "--path", garbage, "-o", "yaml"}, "--output"},
		{[]string{"snapshot", "inspect", "--path", ""}, "--path"},
	} {
		out, err := execute(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want an error naming %q\n%s", tc.args, err, tc.want, out)
		}
	}
	// A read-only tool never moves a file aside.
	if _, err := os.Stat(garbage); err != nil {
		t.Errorf("verify moved or removed the garbage file: %v", err)
	}
}
