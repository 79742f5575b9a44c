package fleetwatch_test

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/history"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/search"
)

func TestManagerHistory(t *testing.T) {
	path, _ := fleetOf(t, "a")
	snapshot := filepath.Join(t.TempDir(), "fleetwatch.db")
	store, err := persist.Open(snapshot, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	on := persist.HistoryOptions{Enabled: true}
	w := store.NewWriter(persist.WriterOptions{Interval: time.Hour, History: on})
	cms := persist.ResourceKeyFor(configMaps)
	w.Upsert("a", cms, configMap("one"))
	w.Upsert("a", cms, configMap("two"))
	w.Checkpoint("a", cms, "5")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// reopen opens the file again, as a restart does: a Store has one Writer.
	reopen := func() *persist.Store {
		t.Helper()
		if err := store.Close(); err != nil {
			t.Fatal(err)
		}
		if store, err = persist.Open(snapshot, persist.Options{}); err != nil {
			t.Fatal(err)
		}
		return store
	}

	for _, tc := range []struct {
		name     string
		snapshot bool
		history  persist.HistoryOptions
	}{
		{name: "without a snapshot"},
		{name: "with the log off", snapshot: true},
	} {
		opts := options(path)
		if tc.snapshot {
			opts.Snapshot = reopen()
		}
		opts.SnapshotWriter.History = tc.history
		m, err := fleetwatch.NewManager(opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.History(); !errors.Is(err, fleetwatch.ErrHistoryOff) {
			t.Errorf("%s: History() = %v, want ErrHistoryOff", tc.name, err)
		}
	}

	opts := options(path)
	opts.Snapshot = reopen()
	opts.SnapshotWriter.History = on
	m, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	log, err := m.History()
	if err != nil {
		t.Fatal(err)
	}
	q, err := search.Parse("two cluster:a kind:configmaps")
	if err != nil {
		t.Fatal(err)
	}
	page, err := log.Changes(history.ChangesRequest{Query: q})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].Name != "two" || page.Items[0].Type != "Added" {
		t.Errorf("changes: %+v; want configmap two Added", page.Items)
	}
	obj, err := log.Object(history.ObjectRequest{Cluster: "a", Resource: configMaps, Namespace: "default", Name: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if len(obj.Steps) != 1 || obj.Kind != "ConfigMap" || len(obj.Steps[0].Fields) == 0 {
		t.Errorf("history of configmap one: %+v", obj)
	}
}
