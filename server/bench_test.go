package server

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
)

// BenchmarkListPage measures the first page of 500 pods of a fleet list
// (/clusters/*/api/v1/pods?limit=500) through the server's handler, with 10,000
// realistic pods (aggregatetest.RealisticPod) over the fixture's three clusters: the
// request's whole path, authorization, the watch cache's read and the JSON written, with
// no network. pods/s is the throughput of issue #15's goal (2× that of 2026-11-23).
// It runs over a plain fleet (objects) and a compact one (compact: the JSON written from
// the snapshot's CBOR, a Table from objects decoded for it), as cache.encoding chooses.
func BenchmarkListPage(b *testing.B) {
	for _, enc := range []struct {
		name  string
		codec aggregate.Codec
	}{{"objects", nil}, {"compact", persist.Codec{}}} {
		b.Run(enc.name, func(b *testing.B) { benchmarkListPage(b, enc.codec) })
	}
}

func benchmarkListPage(b *testing.B, codec aggregate.Codec) {
	const pods, limit = 10_000, 500
	f := newFixtureOf(b, codec, nil)
	clusters := []string{prod, staging, edge}
	for i := range pods {
		f.apply(clusters[i%len(clusters)], podsGVR, aggregatetest.ScheduledPod(fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("pod-%05d", i), fmt.Sprint(1000+i), nil, i))
	}
	f.sync()
	for _, accept := range []string{"application/json", "application/json;as=Table;v=v1;g=meta.k8s.io"} {
		name := "json"
		if accept != "application/json" {
			name = "table"
		}
		b.Run(name, func(b *testing.B) {
			h := f.server.Handler()
			var w discard
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := httptest.NewRequest(http.MethodGet, fmt.Sprintf("/clusters/*/api/v1/pods?limit=%d", limit), nil)
				req.Host = "localhost"
				req.Header.Set("Accept", accept)
				w.reset()
				h.ServeHTTP(&w, req)
				if w.code != http.StatusOK || w.n == 0 {
					b.Fatalf("%d, %d bytes", w.code, w.n)
				}
			}
			b.StopTimer()
			b.SetBytes(int64(w.n))
			b.ReportMetric(float64(limit*b.N)/b.Elapsed().Seconds(), "pods/s")
		})
	}
}

// discard is a ResponseWriter that counts the body and throws it away.
type discard struct {
	header http.Header
	code   int
	n      int
}

func (d *discard) reset() { d.header, d.code, d.n = http.Header{}, 0, 0 }

func (d *discard) Header() http.Header { return d.header }

func (d *discard) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

func (d *discard) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	d.n += len(p)
	return len(p), nil
}

func (d *discard) Flush() {}

// BenchmarkWatchEvent measures an event of a watch of every cluster's pods, from the
// change in the fleet to its line read off the HTTP stream, at 10, 1,000 and 10,000
// clusters of one pod each, with each form of cursor (cursorForms): the event's
// resourceVersion is the cursor after it. bytes/event is the length of its line.
func BenchmarkWatchEvent(b *testing.B) {
	for _, form := range []struct {
		name string
		opts func(*Options)
	}{{"short", nil}, {"positions", func(o *Options) { o.Replica = "r0" }}} {
		for _, n := range []int{10, 1000, 10_000} {
			b.Run(fmt.Sprintf("%s/clusters=%d", form.name, n), func(b *testing.B) { benchmarkWatchEvent(b, n, form.opts) })
		}
	}
}

func benchmarkWatchEvent(b *testing.B, clusters int, opts func(*Options)) {
	f := newFixtureOf(b, persist.Codec{}, opts)
	name := func(i int) string { return fmt.Sprintf("cluster-%05d", i%clusters) }
	for i := range clusters {
		f.apply(name(i), podsGVR, pod("default", "p", "1", web))
	}
	f.sync()
	timeWatchEvents(b, f, func(i int) { f.apply(name(i), podsGVR, pod("default", "p", fmt.Sprint(2+i), web)) })
}

// timeWatchEvents watches every cluster's pods through f from its current list, and
// for each iteration makes a change (change(i)) and reads its event's line.
func timeWatchEvents(b *testing.B, f *fixture, change func(i int)) {
	var l itemList
	f.getOK("/clusters/*/api/v1/pods?limit=1", &l)
	res, err := http.Get(f.http.URL + "/clusters/*/api/v1/pods?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
	if err != nil {
		b.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		b.Fatalf("%d %s", res.StatusCode, body)
	}
	r := bufio.NewReaderSize(res.Body, 1<<20)
	var bytes int
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		change(i)
		line, err := r.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		bytes += len(line)
	}
	b.StopTimer()
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/event")
}

// BenchmarkFanOutWatchEvent is BenchmarkWatchEvent through a replica of a sharded fleet
// that holds half of the clusters and merges the watch of the other replica, which holds
// the rest: each event is of a cluster of the replica asked (its local part), and
// carries the merged cursor, which names the position of each of its clusters and the
// other replica's cursor.
func BenchmarkFanOutWatchEvent(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) { benchmarkFanOutWatchEvent(b, n) })
	}
}

func benchmarkFanOutWatchEvent(b *testing.B, clusters int) {
	local := newFixtureOf(b, persist.Codec{}, func(o *Options) { o.Replica = "fleetwatch-0" })
	peer := newFixtureOf(b, persist.Codec{}, func(o *Options) { o.Replica = "fleetwatch-1" })
	for _, cl := range []string{prod, staging, edge} {
		// The fixture's clusters are local's.
		peer.fleet.RemoveCluster(cl)
		peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	name := func(i int) string { return fmt.Sprintf("cluster-%05d", i) }
	for i := range clusters {
		owner, other, id := local, peer, "fleetwatch-0"
		if i%2 == 1 {
			owner, other, id = peer, local, "fleetwatch-1"
		}
		st := clusterStatus(name(i), aggregate.PhaseSynced, false)
		st.Replica = id
		owner.src.setStatus(st)
		other.src.setStatus(aggregate.ClusterStatus{Name: name(i), Phase: aggregate.PhaseRemote, Replica: id, ReplicaAddress: owner.http.URL})
		owner.apply(name(i), podsGVR, pod("default", "p", "1", web))
		owner.fleet.ClusterStore(name(i), podsGVR).MarkSynced()
	}
	local.sync()
	peer.sync()
	timeWatchEvents(b, local, func(i int) {
		local.apply(name(2*(i%((clusters+1)/2))), podsGVR, pod("default", "p", fmt.Sprint(2+i), web))
	})
}
