package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// writeSecrets stores 50 Secrets that hold secretValue, as with cache.keepSecretData,
// and a pod under deployments, and drops the Secrets: enough pages that some stay free,
// holding the value, after the commits that follow. The change log never holds a
// Secret's values (TestHistoryNeverHoldsSecretValues), so only free pages can.
func writeSecrets(t *testing.T, s *Store) {
	t.Helper()
	secrets := ResourceKey("/v1/secrets")
	w := s.NewWriter(WriterOptions{})
	for i := range 50 {
		w.Upsert("prod", secrets, testSecret(fmt.Sprint("s-", i), false))
	}
	w.Upsert("prod", deployments, testPod(t, "shop", "api"))
	w.Checkpoint("prod", secrets, "5")
	w.Checkpoint("prod", deployments, "5")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.DropResource("prod", secrets); err != nil {
		t.Fatal(err)
	}
}

// checkCompacted checks that the Store s holds the file at path, without the dropped
// value, with what writeSecrets left, and that it commits there, under its lock.
func checkCompacted(t *testing.T, s *Store, path string, w *Writer) {
	t.Helper()
	if fileHoldsSecretValue(t, path) {
		t.Error("the file holds the dropped value")
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the compacted file is left: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the compacted file: %v, %v", fi.Mode(), err)
	}
	if got := contents(t, resourceOf(mustLoad(t, s), "prod", deployments)); len(got) != 1 {
		t.Errorf("deployments after the compaction: %v", got)
	}
	s.view(func(tx *bolt.Tx) error {
		if needsCompaction(tx) {
			t.Error("meta/compact is left")
		}
		return nil
	})
	w.Upsert("prod", pods, testPod(t, "shop", "web"))
	w.Checkpoint("prod", pods, "6")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{LockTimeout: 50 * time.Millisecond}); !errors.Is(err, ErrLocked) {
		t.Errorf("a second Open of the compacted file: %v, want ErrLocked", err)
	}
	s.Close()
	s = openTest(t, path, Options{ReadOnly: true})
	if got := contents(t, resourceOf(mustLoad(t, s), "prod", pods)); len(got) != 1 {
		t.Errorf("pods after a commit to the compacted file: %v", got)
	}
}

func TestCompact(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	writeSecrets(t, s)
	s.Close()
	if !fileHoldsSecretValue(t, path) {
		t.Fatal("no free page holds the dropped value")
	}
	s = openTest(t, path, Options{})
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	if err := s.Compact(); !errors.Is(err, ErrInvalid) {
		t.Errorf("Compact with a Writer: %v, want ErrInvalid", err)
	}
	checkCompacted(t, s, path, w)
}

// TestCompactAtNextOpen: a file marked for compaction, by CompactAtNextOpen or by a
// migration's transaction before the process died, is compacted by the next Open, and
// a compacted file left behind is replaced.
func TestCompactAtNextOpen(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	writeSecrets(t, s)
	if err := s.CompactAtNextOpen(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !fileHoldsSecretValue(t, path) {
		t.Fatal("no free page holds the dropped value")
	}
	if err := os.WriteFile(path+".compact", []byte("left by a crash"), 0o600); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, path, Options{})
	checkCompacted(t, s, path, s.NewWriter(WriterOptions{}))
}
