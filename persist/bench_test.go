package persist

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// benchPods returns n distinct realistic pods.
func benchPods(b *testing.B, n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, n)
	for i := range out {
		out[i] = testPod(b, fmt.Sprintf("ns-%d", i%50), fmt.Sprintf("pod-%06d", i))
	}
	return out
}

// BenchmarkWriter measures the Writer with a commit every second.
//
// "produce" is the rate at which producers hand changes (an upsert and a checkpoint of
// one of 2000 pods) to a Writer that commits once per second: producers never wait for
// the file, and the commits write each changed pod once.
//
// "commit" is the rate at which commits write distinct pods: each iteration changes
// every one of 2000 pods and commits them in one transaction, fsync included.
func BenchmarkWriter(b *testing.B) {
	objs := benchPods(b, 2000)

	b.Run("produce", func(b *testing.B) {
		s := openTest(b, testPath(b), Options{})
		w := s.NewWriter(WriterOptions{Interval: time.Second, MaxPending: math.MaxInt})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Start(ctx) }()
		i := 0
		start := time.Now()
		for b.Loop() {
			w.Upsert("prod", pods, objs[i%len(objs)])
			w.Checkpoint("prod", pods, strconv.Itoa(i))
			i++
		}
		cancel()
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		st := w.Stats()
		b.ReportMetric(float64(i)/elapsed.Seconds(), "changes/s")
		b.ReportMetric(float64(st.Commits), "commits")
	})

	b.Run("commit", func(b *testing.B) {
		s := openTest(b, testPath(b), Options{})
		w := s.NewWriter(WriterOptions{Interval: time.Hour})
		rv := 0
		var commitTime time.Duration
		for b.Loop() {
			for _, obj := range objs {
				w.Upsert("prod", pods, obj)
			}
			rv++
			w.Checkpoint("prod", pods, strconv.Itoa(rv))
			start := time.Now()
			if err := w.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			commitTime += time.Since(start)
		}
		b.ReportMetric(float64(rv*len(objs))/commitTime.Seconds(), "objects/s")
		b.ReportMetric(float64(s.fileSize())/(1<<20), "file-MiB")
	})
}

// BenchmarkSteadyCommit measures what keeping a large snapshot current costs: a file of
// 20000 pods, and commits of 60 changed pods each, as a Writer with a 1 s interval makes
// under 60 watch events per second. It reports the CPU time (user + system, fsync
// included) per changed object; -benchmem gives the heap allocated per commit.
func BenchmarkSteadyCommit(b *testing.B) {
	objs := benchPods(b, 20000)
	s := openTest(b, testPath(b), Options{})
	w := s.NewWriter(WriterOptions{Interval: time.Hour})
	for _, obj := range objs {
		w.Upsert("prod", pods, obj)
	}
	w.Checkpoint("prod", pods, "1")
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	const perCommit = 60
	rv, next := 1, 0
	runtime.GC() // not the setup's garbage
	cpu0 := testenv.ProcessCPU()
	// Labelled, so that a profile can keep the loop apart from the setup:
	// go tool pprof -tagfocus phase=steady.
	pprof.Do(context.Background(), pprof.Labels("phase", "steady"), func(context.Context) {
		for b.Loop() {
			for range perCommit {
				w.Upsert("prod", pods, objs[next])
				next = (next + 7919) % len(objs) // spread over the file, as watch events are
			}
			rv++
			w.Checkpoint("prod", pods, strconv.Itoa(rv))
			if err := w.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.ReportMetric(float64(testenv.ProcessCPU()-cpu0)/float64(time.Microsecond)/float64(b.N*perCommit), "cpu-µs/object")
	b.ReportMetric(float64(s.fileSize())/(1<<20), "file-MiB")
}

// BenchmarkLoad measures Load of 10000 realistic pods.
func BenchmarkLoad(b *testing.B) {
	s := openTest(b, testPath(b), Options{})
	w := s.NewWriter(WriterOptions{})
	objs := benchPods(b, 10000)
	for _, obj := range objs {
		w.Upsert("prod", pods, obj)
	}
	w.Checkpoint("prod", pods, "1")
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	objs = nil
	for b.Loop() {
		snap, err := s.Load()
		if err != nil {
			b.Fatal(err)
		}
		if n := len(resourceOf(snap, "prod", pods).Objects); n != 10000 {
			b.Fatalf("%d objects", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/object")
}

// BenchmarkCheckPages measures Open's check of the page structure (checkPages) of a file
// of 10000 realistic pods, which Load then decodes (BenchmarkLoad).
func BenchmarkCheckPages(b *testing.B) {
	path := testPath(b)
	s := openTest(b, path, Options{})
	w := s.NewWriter(WriterOptions{})
	for _, obj := range benchPods(b, 10000) {
		w.Upsert("prod", pods, obj)
	}
	w.Checkpoint("prod", pods, "1")
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	s.Close()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := checkPages(f, fi.Size()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/object")
	b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
}

// BenchmarkLoadManyClusters measures LoadEach of 1,000 clusters of 20 realistic pods: a
// fleet of many small clusters, whose load is bound by handing each cluster through the
// pipeline of the walk, the decoders and fn, not by decoding.
func BenchmarkLoadManyClusters(b *testing.B) {
	const clusters, perCluster = 1000, 20
	s := openTest(b, testPath(b), Options{})
	w := s.NewWriter(WriterOptions{})
	objs := benchPods(b, perCluster)
	for i := range clusters {
		name := fmt.Sprintf("cluster-%04d", i)
		for _, obj := range objs {
			w.Upsert(name, pods, obj)
		}
		w.Checkpoint(name, pods, "1")
	}
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	objs = nil
	for b.Loop() {
		n := 0
		err := s.LoadEach(LoadOptions{}, func(_ string, cs *ClusterSnapshot) error {
			for _, rs := range cs.Resources {
				n += len(rs.Objects)
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		if n != clusters*perCluster {
			b.Fatalf("%d objects", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/clusters, "ns/cluster")
}
