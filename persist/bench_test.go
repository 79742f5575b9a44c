package persist

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
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

// historyModes are the change log's settings that the Writer's benchmarks compare:
// off, and on with the defaults.
var historyModes = []struct {
	name string
	opts HistoryOptions
}{
	{"history=off", HistoryOptions{}},
	{"history=on", HistoryOptions{Enabled: true}},
}

// BenchmarkWriter measures the Writer with a commit every second, without and with the
// change log.
//
// "produce" is the rate at which producers hand changes (an upsert and a checkpoint of
// one of 2000 pods) to a Writer that commits once per second: producers never wait for
// the file, and the commits write each changed pod once (and, with the log, a record of
// each change).
//
// "commit" is the rate at which commits write distinct pods: each iteration changes
// every one of 2000 pods and commits them in one transaction, fsync included.
func BenchmarkWriter(b *testing.B) {
	objs := benchPods(b, 2000)
	for _, mode := range historyModes {
		b.Run(mode.name, func(b *testing.B) {
			b.Run("produce", func(b *testing.B) {
				if mode.opts.Enabled {
					// Hundreds of thousands of changes a second are as many records of
					// pods to commit, gigabytes a second: what a producer costs with the
					// log is in BenchmarkSteadyCommit's CPU per object.
					b.Skip("the log cannot commit a record per change at this rate")
				}
				s := openTest(b, testPath(b), Options{})
				w := s.NewWriter(WriterOptions{Interval: time.Second, MaxPending: math.MaxInt, History: mode.opts})
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
				w := s.NewWriter(WriterOptions{Interval: time.Hour, History: mode.opts})
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
		})
	}
}

// BenchmarkSteadyCommit measures what keeping a large snapshot current costs: a file of
// 20000 pods, and commits of 60 changed pods each, as a Writer with a 1 s interval makes
// under 60 watch events per second. It reports the CPU time (user + system, fsync
// included) per changed object; -benchmem gives the heap allocated per commit.
//
// It runs without the change log, with it, and with a log at its MaxBytes (8 MiB here),
// from which each commit drops about as much as it adds. With the log, it reports the
// bytes a record takes: counted by the log (what MaxBytes bounds), and of the file,
// against the same run without the log.
func BenchmarkSteadyCommit(b *testing.B) {
	objs := benchPods(b, 20000)
	modes := append(slices.Clone(historyModes), struct {
		name string
		opts HistoryOptions
	}{"history=full", HistoryOptions{Enabled: true, MaxBytes: 8 << 20}})
	for _, mode := range modes {
		b.Run(mode.name, func(b *testing.B) {
			s := openTest(b, testPath(b), Options{})
			w := s.NewWriter(WriterOptions{Interval: time.Hour, History: mode.opts})
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
			if mode.opts.Enabled {
				var records int
				_ = s.view(func(tx *bolt.Tx) error {
					records = tx.Bucket(bucketHistory).Bucket(bucketChanges).Stats().KeyN
					return nil
				})
				b.ReportMetric(float64(logBytesOf(s))/float64(records), "log-B/record")
			}
		})
	}
}

// logBytesOf returns the size of the log that the file records.
func logBytesOf(s *Store) uint64 {
	var n uint64
	_ = s.view(func(tx *bolt.Tx) error {
		n, _ = getUint64(tx.Bucket(bucketHistory), keyBytes)
		return nil
	})
	return n
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

// BenchmarkFirstCommitManyClusters measures the commit that a cold start of many small
// clusters makes once its fleet is ready: 1,000 clusters of 20 pods into a new file, in
// one transaction. With -benchmem, the heap it allocates: bbolt's remaps of a growing
// file each copied the commit's keys and values out of the old map
// (TestWriterGrowsTheFileWithoutRemapping)..
func BenchmarkFirstCommitManyClusters(b *testing.B) {
	const clusters, perCluster = 1000, 20
	objs := benchPods(b, perCluster)
	for b.Loop() {
		b.StopTimer()
		path := testPath(b)
		s := openTest(b, path, Options{})
		w := s.NewWriter(WriterOptions{})
		for i := range clusters {
			name := fmt.Sprintf("cluster-%04d", i)
			for _, obj := range objs {
				w.Upsert(name, pods, obj)
			}
			w.Checkpoint(name, pods, "1")
		}
		b.StartTimer()
		if err := w.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		os.Remove(path)
		b.StartTimer()
	}
}
