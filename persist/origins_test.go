package persist

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// originsChildEnv, when set to a path, makes TestLogOriginsSurviveAKill the child that
// imports the state at that path's ".state" into the snapshot at the path, and then
// waits to be killed.
const originsChildEnv = "FLEETWATCH_PERSIST_ORIGINS_CHILD"

// TestLogOriginsSurviveAKill imports a cluster with its change log in a process that is
// then killed with SIGKILL: the snapshot that the next process opens names the logs
// that the cluster's records came from, as ImportCluster did, and its log gives the
// exporter's changes.
func TestLogOriginsSurviveAKill(t *testing.T) {
	if path := os.Getenv(originsChildEnv); path != "" {
		originsChild(t, path)
		return
	}
	src, state := logSample(t, ExportOptions{LogOrigins: []string{"earlier"}})
	srcID, err := src.ID()
	if err != nil {
		t.Fatal(err)
	}
	path := testPath(t)
	if err := os.WriteFile(path+".state", state, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLogOriginsSurviveAKill$")
	cmd.Env = append(os.Environ(), originsChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	said := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		said <- line
	}()
	select {
	case line := <-said:
		if line != "imported\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the child said %q", line)
		}
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child did not import")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	dst := openTest(t, path, Options{})
	if movedTo, cause := dst.Recovered(); cause != nil {
		t.Fatalf("the snapshot was recovered from (%v), moved to %s", cause, movedTo)
	}
	if got, want := mustLoad(t, dst).Clusters["a"].LogOrigins, []string{srcID, "earlier"}; !slices.Equal(got, want) {
		t.Errorf("LogOrigins after the kill: %q, want %q", got, want)
	}
	want, _ := src.ChangesAfter("a", pods, "101")
	got, err := dst.ChangesAfter("a", pods, "101")
	if err != nil || !slices.Equal(describe(t, got), describe(t, want)) {
		t.Errorf("after 101: %q, %v; want %q", describe(t, got), err, describe(t, want))
	}
	if err := dst.Verify(); err != nil {
		t.Errorf("Verify: %v", err)
	}
}

func originsChild(t *testing.T, path string) {
	state, err := os.ReadFile(path + ".state")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{Interval: time.Hour, History: HistoryOptions{Enabled: true}})
	w.Upsert("c", pods, object("ns", "mine", "1"))
	w.Checkpoint("c", pods, "40")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportCluster("a", bytes.NewReader(state), ImportOptions{Log: true}); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("imported\n")
	select {} // until killed
}

// TestLogOriginsLifetime: the logs that a cluster's records were imported from stay
// through the importer's own commits and reopens, and go with what ends the records'
// descent from the import: the cluster dropped, replaced, imported again without them,
// the log cleared. An entry that a build before it left behind, whose coverage is gone,
// is not taken; a damaged one is not either, and Verify reports it.
func TestLogOriginsLifetime(t *testing.T) {
	src, state := logSample(t, ExportOptions{})
	srcID, _ := src.ID()
	_, noLog := logSample(t, ExportOptions{LogMaxBytes: -1})
	origins := func(s *Store) []string {
		t.Helper()
		cs := mustLoad(t, s).Clusters["a"]
		if cs == nil {
			return nil
		}
		return cs.LogOrigins
	}
	imported := func(t *testing.T) (*Store, *Writer, string) {
		t.Helper()
		path := testPath(t)
		s, w, _ := historyWriter(t, path, HistoryOptions{Enabled: true})
		if _, err := s.ImportCluster("a", bytes.NewReader(state), ImportOptions{Log: true}); err != nil {
			t.Fatal(err)
		}
		return s, w, path
	}
	want := []string{srcID}

	t.Run("kept", func(t *testing.T) {
		s, w, _ := imported(t)
		w.Upsert("a", pods, object("ns", "p1", "4"))
		w.Checkpoint("a", pods, "105")
		w.Upsert("b", pods, object("ns", "x", "1"))
		w.Checkpoint("b", pods, "3")
		commitNow(t, w)
		if got := origins(s); !slices.Equal(got, want) {
			t.Errorf("after a commit: %q, want %q", got, want)
		}
		if got := mustLoad(t, s).Clusters["b"].LogOrigins; got != nil {
			t.Errorf("another cluster's: %q", got)
		}
		checkIndex(t, s)
	})
	for _, tt := range []struct {
		name string
		end  func(s *Store, w *Writer)
	}{
		{"dropped", func(_ *Store, w *Writer) { w.DropCluster("a") }},
		{"replaced", func(_ *Store, w *Writer) {
			w.ReplaceCluster("a")
			w.Upsert("a", pods, object("ns", "new", "1"))
			w.Checkpoint("a", pods, "9")
		}},
		{"imported without a log", func(s *Store, _ *Writer) {
			if _, err := s.ImportCluster("a", bytes.NewReader(noLog), ImportOptions{Log: true}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, w, _ := imported(t)
			tt.end(s, w)
			commitNow(t, w)
			if got := origins(s); got != nil {
				t.Errorf("LogOrigins %q", got)
			}
			if err := s.view(func(tx *bolt.Tx) error {
				_, index := historyBuckets(tx)
				if index.Get(originsKey("a")) != nil {
					t.Error("the entry is still in the index")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("log cleared", func(t *testing.T) {
		path := testPath(t)
		first := openTest(t, path, Options{})
		if _, err := first.ImportCluster("a", bytes.NewReader(state), ImportOptions{Log: true}); err != nil {
			t.Fatal(err)
		}
		if got := origins(first); !slices.Equal(got, want) {
			t.Fatalf("imported: %q, want %q", got, want)
		}
		first.Close()
		s := openTest(t, path, Options{})
		off := s.NewWriter(WriterOptions{Interval: time.Hour})
		off.Upsert("a", pods, object("ns", "p1", "5"))
		off.Checkpoint("a", pods, "106")
		commitNow(t, off)
		if got := origins(s); got != nil {
			t.Errorf("LogOrigins %q after the log was cleared", got)
		}
	})
	t.Run("left by an older build", func(t *testing.T) {
		s, w, _ := imported(t)
		// What a build before the entry does as it drops the cluster: the coverage
		// goes, the entry stays; the cluster is then stored anew.
		if err := s.update(func(tx *bolt.Tx) error {
			_, index := historyBuckets(tx)
			return index.Delete(indexPrefix(indexCoverage, "a", string(pods), ""))
		}); err != nil {
			t.Fatal(err)
		}
		w.Upsert("a", pods, object("ns", "again", "1"))
		w.Checkpoint("a", pods, "200")
		commitNow(t, w)
		if got := origins(s); got != nil {
			t.Errorf("LogOrigins %q of an entry whose coverage is gone", got)
		}
	})
	t.Run("damaged", func(t *testing.T) {
		s, _, _ := imported(t)
		if err := s.update(func(tx *bolt.Tx) error {
			_, index := historyBuckets(tx)
			v := bytes.Clone(index.Get(originsKey("a")))
			v[len(v)-1] ^= 0x40
			return index.Put(originsKey("a"), v)
		}); err != nil {
			t.Fatal(err)
		}
		if got := origins(s); got != nil {
			t.Errorf("LogOrigins %q of a damaged entry", got)
		}
		if movedTo, _ := s.Recovered(); movedTo != "" {
			t.Errorf("the file was moved aside to %s", movedTo)
		}
		if err := s.Verify(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Verify: %v, want ErrCorrupt", err)
		}
	})
}
