package persist

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLoadEvictsTheMap loads a file of many small clusters and reads, as each cluster is
// handed out, how much of the file's memory map is resident: the load evicts it every
// evictEvery bytes, not after every cluster (a thousand clusters of twenty objects spent
// most of their load evicting and faulting the same pages in again), and never lets it
// grow with the file.
func TestLoadEvictsTheMap(t *testing.T) {
	defer func(e int) { evictEvery = e }(evictEvery)
	evictEvery = 256 << 10
	path := filepath.Join(t.TempDir(), "snapshot.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	writeSmallClusters(t, s.NewWriter(WriterOptions{}), "1")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// The keys and values that the load counts are a part of the pages it reads (the
	// pages are not full, and the branch pages come with them): a few times evictEvery
	// may be resident, and the pages of the clusters that the walk is ahead of the
	// filing (loadAhead, a cluster a run), not the file.
	most := int64(8*evictEvery) + int64(loadAhead())*st.Size()/smallClusters
	if st.Size() < 4*most {
		t.Fatalf("the file has %d bytes, too few to tell an evicted map from one that is not", st.Size())
	}
	var peak int64
	loaded := 0
	err = s.LoadEach(LoadOptions{}, func(string, *ClusterSnapshot) error {
		loaded++
		peak = max(peak, mappedRSS(t, path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if loaded != smallClusters {
		t.Fatalf("loaded %d clusters, want %d", loaded, smallClusters)
	}
	t.Logf("file %d KiB, peak resident map %d KiB", st.Size()>>10, peak>>10)
	if peak > most {
		t.Errorf("%d KiB of the map resident during the load, want at most %d", peak>>10, most>>10)
	}
	if rss := mappedRSS(t, path); rss > 64<<10 {
		t.Errorf("%d KiB of the map resident after the load", rss>>10)
	}
}

// mappedRSS returns the resident bytes of the process's mappings of path.
func mappedRSS(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rss int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && fields[len(fields)-1] == path
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Rss:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			rss += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rss
}

// TestCommitsEvictTheMap: a commit that changes objects throughout the file (every
// cluster of a fleet updated, as in a cold start's initial syncs) reads their pages
// through the file's map; they do not stay resident after it.
func TestCommitsEvictTheMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snapshot.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := s.NewWriter(WriterOptions{})
	writeSmallClusters(t, w, "1")
	writeSmallClusters(t, w, "2")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	rss := mappedRSS(t, path)
	t.Logf("file %d KiB, resident map %d KiB after a commit that changed every object", st.Size()>>10, rss>>10)
	if st.Size() < 1<<20 {
		t.Fatalf("the file has %d bytes, too few to tell an evicted map from one that is not", st.Size())
	}
	if rss > 64<<10 {
		t.Errorf("%d KiB of the map resident after the commit", rss>>10)
	}
}

// smallClusters clusters of smallObjects pods of about 500 bytes each are what
// writeSmallClusters writes: a fleet of small clusters, whose file is several MiB.
const smallClusters, smallObjects = 150, 40

// writeSmallClusters writes every pod of smallClusters clusters, each cluster with its own
// checkpoint at rv, and commits them.
func writeSmallClusters(t *testing.T, w *Writer, rv string) {
	t.Helper()
	pad := strings.Repeat("x", 400)
	for c := range smallClusters {
		cluster := fmt.Sprintf("cluster-%03d", c)
		for i := range smallObjects {
			w.Upsert(cluster, pods, object("ns", fmt.Sprintf("pod-%02d-%s", i, pad), rv))
		}
		w.Checkpoint(cluster, pods, rv)
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}
