package persist

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// BenchmarkHistoryRecordSize measures what a record of a changed pod costs: the pod's
// compact encoding, the bytes the log counts for its record (what MaxBytes bounds), and
// the growth of the file, against the same changes without the log, and both as ratios
// to the encoding. 20000 pods, then 20000 changes of them in commits of 1000.
// DefaultHistoryMaxBytes is computed from it.
func BenchmarkHistoryRecordSize(b *testing.B) {
	objs := benchPods(b, 20000)
	enc, err := encodeObject(objs[0])
	if err != nil {
		b.Fatal(err)
	}
	sizes := map[bool]int64{}
	var logged uint64
	for b.Loop() {
		for _, on := range []bool{false, true} {
			s := openTest(b, testPath(b), Options{})
			w := s.NewWriter(WriterOptions{Interval: time.Hour, History: HistoryOptions{Enabled: on}})
			for _, obj := range objs {
				w.Upsert("prod", pods, obj)
			}
			w.Checkpoint("prod", pods, "1")
			if err := w.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
			before := s.fileSize()
			var logBefore uint64
			if on {
				logBefore = logBytesOf(s)
			}
			for i := range objs {
				w.Upsert("prod", pods, objs[(i*7919)%len(objs)])
				if i%1000 == 999 {
					w.Checkpoint("prod", pods, strconv.Itoa(2+i))
					if err := w.Flush(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}
			sizes[on] = s.fileSize() - before
			if on {
				logged = logBytesOf(s) - logBefore
			}
			s.Close()
		}
	}
	n := float64(len(objs))
	b.ReportMetric(float64(len(enc)), "encoding-B")
	b.ReportMetric(float64(logged)/n, "log-B/record")
	b.ReportMetric(float64(sizes[true]-sizes[false])/n, "file-B/record")
	// The goal: a change costs at most its object's compact encoding.
	b.ReportMetric(float64(logged)/n/float64(len(enc)), "log/encoding")
	b.ReportMetric(float64(sizes[true]-sizes[false])/n/float64(len(enc)), "file/encoding")
}

const (
	benchRecords  = 1_000_000
	benchClusters = 100
	benchPerObj   = 1000
)

// writeHistoryBench writes a file whose log holds 1,000,000 records over 24 hours:
// changes of 100,000 small objects, 1,000 in each of 100 clusters, at random. It
// returns the time of the last record.
func writeHistoryBench(b *testing.B, path string) time.Time {
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	s := openTest(b, path, Options{})
	defer s.Close()
	w := s.NewWriter(WriterOptions{Interval: time.Hour, Clock: clock, History: HistoryOptions{Enabled: true}})
	objs := make([]*unstructured.Unstructured, benchClusters*benchPerObj)
	for i := range objs {
		objs[i] = object(fmt.Sprint("ns-", i%20), fmt.Sprint("obj-", i/benchClusters), "1")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	step := 24 * time.Hour / benchRecords
	for i := range benchRecords {
		o := rng.IntN(len(objs))
		cluster := fmt.Sprint("cluster-", o%benchClusters)
		w.Upsert(cluster, pods, objs[o])
		w.Checkpoint(cluster, pods, strconv.Itoa(10+i))
		clock.Step(step)
		if i%20000 == 19999 {
			if err := w.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	return clock.Now()
}

// BenchmarkHistoryQuery measures the queries of a log of 1,000,000 records over 24
// hours (about 41,700 in the last hour): the first page (500) of the last hour's changes
// of all clusters, of one cluster of 100 (about 420), of a namespace (1 of 20) by
// Filter, which reads every record of the hour, one object's history (about 10
// records), and the changes of one cluster's resource in the last 5 minutes, as a
// watch resumed from the log reads them (ChangesAfter, about 35). It reports the 99th
// percentile of the latencies besides the mean.
func BenchmarkHistoryQuery(b *testing.B) {
	path := testPath(b)
	end := writeHistoryBench(b, path)
	s := openTest(b, path, Options{ReadOnly: true})
	b.ReportMetric(float64(s.fileSize())/(1<<20), "file-MiB")
	since := end.Add(-time.Hour)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, q := range []struct {
		name string
		run  func() (int, error)
	}{
		{"last-hour", func() (int, error) {
			c, _, err := s.Changes(ChangesQuery{Since: since})
			return len(c), err
		}},
		{"last-hour/cluster", func() (int, error) {
			c, _, err := s.Changes(ChangesQuery{Since: since, Cluster: fmt.Sprint("cluster-", rng.IntN(benchClusters))})
			return len(c), err
		}},
		{"last-hour/cluster-and-resource", func() (int, error) {
			c, _, err := s.Changes(ChangesQuery{Since: since, Cluster: fmt.Sprint("cluster-", rng.IntN(benchClusters)), Resource: pods})
			return len(c), err
		}},
		{"last-hour/namespace-filter", func() (int, error) {
			ns := fmt.Sprint("ns-", rng.IntN(20))
			c, _, err := s.Changes(ChangesQuery{Since: since, Filter: func(c *Change) bool { return c.Namespace == ns }})
			return len(c), err
		}},
		{"object-history", func() (int, error) {
			o := rng.IntN(benchClusters * benchPerObj)
			c, err := s.ObjectHistory(fmt.Sprint("cluster-", o%benchClusters), pods, fmt.Sprint("ns-", o%20), fmt.Sprint("obj-", o/benchClusters))
			return len(c), err
		}},
		{"resume-5min", func() (int, error) {
			// A watch of one cluster's pods resumed 5 minutes back (about 35 records).
			c, err := s.ChangesAfter(fmt.Sprint("cluster-", rng.IntN(benchClusters)), pods, strconv.Itoa(10+benchRecords-benchRecords/288))
			return len(c), err
		}},
	} {
		b.Run(q.name, func(b *testing.B) {
			var lat []time.Duration
			total := 0
			for b.Loop() {
				start := time.Now()
				n, err := q.run()
				lat = append(lat, time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				total += n
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(total)/float64(len(lat)), "changes/op")
		})
	}
}

// BenchmarkHistoryWriteCost measures what the change log costs the Writer, as the
// ratio of two Writers run in the same loop, one commit each in turn (the order
// alternating), over files of the same 20000 pods: one without the log, one with it.
// Each commit changes perCommit pods spread over the file, as watch events do. It
// reports the CPU (user + system, fsync included) per changed pod of each and their
// ratio, and the commits' throughput (changed pods per second of commit) of each and
// the ratio of the one without the log to the one with it: the goal is that
// both ratios stay within 1.2.
//
// "on" is a log that retention does not trim yet; "full" is one at its MaxBytes (8
// MiB here), from which each commit drops about as much as it adds, as a log does
// after its first day.
func BenchmarkHistoryWriteCost(b *testing.B) {
	objs := benchPods(b, 20000)
	for _, perCommit := range []int{60, 1000} {
		for _, mode := range []struct {
			name string
			opts HistoryOptions
		}{
			{"on", HistoryOptions{Enabled: true}},
			{"full", HistoryOptions{Enabled: true, MaxBytes: 8 << 20}},
		} {
			b.Run(fmt.Sprintf("commit=%d/%s", perCommit, mode.name), func(b *testing.B) {
				type side struct {
					name string
					w    *Writer
					cpu  time.Duration
					wall time.Duration
					next int
					rv   int
				}
				sides := [2]*side{}
				for i, opts := range []HistoryOptions{{}, mode.opts} {
					s := openTest(b, testPath(b), Options{})
					w := s.NewWriter(WriterOptions{Interval: time.Hour, History: opts})
					for _, obj := range objs {
						w.Upsert("prod", pods, obj)
					}
					w.Checkpoint("prod", pods, "1")
					if err := w.Flush(context.Background()); err != nil {
						b.Fatal(err)
					}
					sides[i] = &side{name: [...]string{"off", "on"}[i], w: w, rv: 1}
				}
				if mode.opts.MaxBytes > 0 {
					// Fill the log to its bound (within what a commit adds) before measuring.
					for logBytesOf(sides[1].w.store) < uint64(mode.opts.MaxBytes)*9/10 {
						commitSpread(b, sides[1].w, objs, perCommit, &sides[1].next, &sides[1].rv)
					}
				}
				runtime.GC()
				commits := 0
				for b.Loop() {
					for j := range 2 {
						sd := sides[(commits+j)%2]
						cpu0, wall0 := testenv.ProcessCPU(), time.Now()
						// Labelled, for a profile of each: go tool pprof -tagfocus log=on.
						pprof.Do(context.Background(), pprof.Labels("log", sd.name), func(context.Context) {
							commitSpread(b, sd.w, objs, perCommit, &sd.next, &sd.rv)
						})
						sd.wall += time.Since(wall0)
						sd.cpu += testenv.ProcessCPU() - cpu0
					}
					commits++
				}
				changes := float64(commits * perCommit)
				off, on := sides[0], sides[1]
				b.ReportMetric(float64(off.cpu.Microseconds())/changes, "off-cpu-µs/change")
				b.ReportMetric(float64(on.cpu.Microseconds())/changes, "on-cpu-µs/change")
				b.ReportMetric(float64(on.cpu)/float64(off.cpu), "cpu-ratio")
				b.ReportMetric(changes/off.wall.Seconds(), "off-changes/s")
				b.ReportMetric(changes/on.wall.Seconds(), "on-changes/s")
				b.ReportMetric(float64(on.wall)/float64(off.wall), "throughput-ratio")
			})
		}
	}
}

// commitSpread changes n of objs, from *next on with a stride that spreads them over
// the file, and commits them with the next resourceVersion, *rv.
func commitSpread(b *testing.B, w *Writer, objs []*unstructured.Unstructured, n int, next, rv *int) {
	for range n {
		w.Upsert("prod", pods, objs[*next])
		*next = (*next + 7919) % len(objs)
	}
	*rv++
	w.Checkpoint("prod", pods, strconv.Itoa(*rv))
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}
