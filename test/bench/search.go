package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"time"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/search"
	"github.com/fleetwatch/fleetwatch/server"
)

// measureSearch measures, once the contender has synced and its memory figures are
// taken, what the search index costs and how fast the search API answers:
//
//   - the heap that a search.Index of every cached object adds, fed by a fleet handler
//     of its own, after garbage collection;
//   - the latency of n name-substring searches (GET /apis/fleetwatch.io/v1alpha1/search
//     over loopback HTTP, the whole answer read), on a server.Server of the Manager, as
//     `fleetwatch serve` runs it: substrings of 3 to 5 digits of the bench's names
//     (pod-000123, cm-000123), drawn with a fixed seed, after 20 that warm up.
func measureSearch(ctx context.Context, f *fleetwatchContender, n int, res *Result) error {
	heap0, _, _ := settledMemory()
	idx := search.New(search.Options{})
	reg, err := f.mgr.Fleet().AddHandler(idx, aggregate.HandlerOptions{Name: "bench-search-index"})
	if err != nil {
		return err
	}
	for !reg.HasSynced() || reg.Backlog() > 0 {
		time.Sleep(time.Millisecond)
	}
	heap1, _, _ := settledMemory()
	res.SearchIndexObjects = idx.Len()
	runtime.KeepAlive(idx)
	reg.Remove()
	res.SearchIndexBytes = int64(heap1) - int64(heap0)

	srv, err := server.New(f.mgr, server.Options{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, ln) }()
	defer func() {
		stop()
		<-done
	}()
	base := "http://" + ln.Addr().String() + "/apis/fleetwatch.io/v1alpha1/search?q="
	get := func(q string) (server.SearchResult, error) {
		var sr server.SearchResult
		r, err := http.Get(base + url.QueryEscape(q))
		if err != nil {
			return sr, err
		}
		defer r.Body.Close()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return sr, err
		}
		if r.StatusCode != http.StatusOK {
			return sr, fmt.Errorf("search %q: %s: %s", q, r.Status, b)
		}
		return sr, json.Unmarshal(b, &sr)
	}
	// The server's index is complete once an empty query counts every object.
	deadline := time.Now().Add(time.Minute)
	for {
		sr, err := get("")
		if err != nil {
			return err
		}
		if sr.Total >= res.Total {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server's search index holds %d objects of %d after a minute", sr.Total, res.Total)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	query := func() string {
		digits := 3 + rng.IntN(3)
		return fmt.Sprintf("%0*d", digits, rng.IntN(pow10(digits)))
	}
	for range 20 {
		if _, err := get(query()); err != nil {
			return err
		}
	}
	for range n {
		q := query()
		start := time.Now()
		sr, err := get(q)
		if err != nil {
			return err
		}
		res.SearchLatenciesMs = append(res.SearchLatenciesMs, float64(time.Since(start).Microseconds())/1000)
		res.SearchFound += sr.Total
	}
	return nil
}

func pow10(n int) int {
	p := 1
	for range n {
		p *= 10
	}
	return p
}
