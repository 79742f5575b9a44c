package persist

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkHistoryRecordSize measures what a record of a changed pod costs: the pod's
// compact encoding, the bytes the log counts for its record (what MaxBytes bounds), and
// the growth of the file, against the same changes without the log. 20000 pods, then
// 20000 changes of them in commits of 1000. DefaultHistoryMaxBytes is computed from it.
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
// Filter, which reads every record of the hour, and one object's history (about 10
// records). It reports the 99th percentile of the latencies besides the mean.
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
