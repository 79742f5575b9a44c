package server

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
)

// BenchmarkServerHeap measures what a Server holds beyond the fleet it serves, per
// object and fixed, as `fleetwatch serve` runs it: over a compact fleet (cache.encoding
// compact, the daemon's default) of small pods (about 1.1 KB of JSON, as test/bench's
// small-pods section loads them) and of large ones (aggregatetest.RealisticPod, 5.7 KB),
// and over a plain fleet (objects) of small pods, where the view keeps the fleet's
// objects and no summary (large ones add nothing to learn there, and 100,000 of them
// take minutes to build and collect), at 1,000, 15,000 and 100,000 objects over three
// clusters and ten namespaces.
//
// The fleet is filled and synced first; then the Server is made over it, and its watch
// cache takes every object as the fleet replays it. Each structure is then released in
// turn, and the live heap (after two collections) drops by what it held alone:
//
//   - index-B/object: the search index (its documents, names and posting lists);
//   - history-B/object: the watch cache's history of changes (entries; the states they
//     point to are the view's), at most HistorySize entries per resource;
//   - view-B/object: the watch cache's current objects by cluster, namespace and name
//     (map entries; under a compact fleet, each object's summary, compactObject);
//   - fixed-B: what is left of the Server once those are gone (its routes, metrics,
//     limits, the clusters' discovery), over this fixture's three clusters.
//
// server-B/object is everything the Server added, fixed part included, and
// fleet-B/object the fleet's own cache, for scale. docs/benchmarks.md has the figures.
//
//	go test -run '^$' -bench ServerHeap -benchtime 1x ./server/
func BenchmarkServerHeap(b *testing.B) {
	for _, c := range []struct {
		encoding, size string
		codec          aggregate.Codec
		pod            func(ns, name, rv string) *unstructured.Unstructured
	}{
		{"compact", "small", persist.Codec{}, smallPod},
		{"compact", "large", persist.Codec{}, largePod},
		{"objects", "small", nil, smallPod},
	} {
		for _, n := range []int{1_000, 15_000, 100_000} {
			b.Run(fmt.Sprintf("%s/%s/%d", c.encoding, c.size, n), func(b *testing.B) {
				var sum serverHeap
				for range b.N {
					h := measureServerHeap(b, c.codec, c.pod, n)
					sum.fleet, sum.server, sum.index = sum.fleet+h.fleet, sum.server+h.server, sum.index+h.index
					sum.history, sum.view, sum.fixed = sum.history+h.history, sum.view+h.view, sum.fixed+h.fixed
				}
				per := func(v float64) float64 { return v / float64(b.N) / float64(n) }
				b.ReportMetric(per(sum.fleet), "fleet-B/object")
				b.ReportMetric(per(sum.server), "server-B/object")
				b.ReportMetric(per(sum.index), "index-B/object")
				b.ReportMetric(per(sum.history), "history-B/object")
				b.ReportMetric(per(sum.view), "view-B/object")
				b.ReportMetric(sum.fixed/float64(b.N), "fixed-B")
			})
		}
	}
}

// serverHeap is what measureServerHeap measured, in bytes.
type serverHeap struct {
	fleet, server, index, history, view, fixed float64
}

// measureServerHeap fills a fleet of codec with n pods, makes a Server over it, and
// measures the Server's structures by releasing them one by one.
func measureServerHeap(b *testing.B, codec aggregate.Codec, pod func(ns, name, rv string) *unstructured.Unstructured, n int) serverHeap {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clusters := []string{prod, staging, edge}
	base := liveHeap()
	fleet := aggregate.New(aggregate.Options{Codec: codec})
	src := &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}, ready: true}
	for _, cl := range clusters {
		src.setStatus(clusterStatus(cl, aggregate.PhaseSynced, false))
	}
	var err error
	for i := range n {
		obj := pod(fmt.Sprintf("ns-%02d", i%10), fmt.Sprintf("pod-%06d", i), fmt.Sprint(1000+i))
		store := fleet.ClusterStore(clusters[i%len(clusters)], podsGVR)
		if codec == nil {
			err = store.Apply(obj, true)
		} else if data, encErr := codec.Encode(obj); encErr != nil {
			err = encErr
		} else {
			// As a compact fleet's informers file an object: its encoding alone.
			err = aggregatetest.ApplyEncoded(store, obj, data, true)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, cl := range clusters {
		fleet.ClusterStore(cl, podsGVR).MarkSynced()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fleet.Start(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	withFleet := liveHeap()

	s, err := New(src, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.stop()
	deadline := time.Now().Add(5 * time.Minute)
	for s.cache.objects(podsGVR) < n {
		if time.Now().After(deadline) {
			b.Fatalf("the watch cache holds %d of %d objects", s.cache.objects(podsGVR), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The search index is built once the cache has caught up.
	<-s.cache.indexed
	withServer := liveHeap()

	// Nothing reads the server's structures any more: no request, and the fleet has
	// delivered every event.
	s.cache.index = nil
	noIndex := liveHeap()
	for _, rc := range s.cache.all() {
		rc.mu.Lock()
		rc.ring, rc.head = nil, 0
		rc.mu.Unlock()
	}
	noHistory := liveHeap()
	s.cache.mu.Lock()
	clear(s.cache.resources)
	s.cache.mu.Unlock()
	noView := liveHeap()
	runtime.KeepAlive(s)
	runtime.KeepAlive(fleet)
	return serverHeap{
		fleet:   withFleet - base,
		server:  withServer - withFleet,
		index:   withServer - noIndex,
		history: noIndex - noHistory,
		view:    noHistory - noView,
		fixed:   noView - withFleet,
	}
}

// objects returns the number of objects of gvr in the watch cache's view.
func (wc *watchCache) objects(gvr schema.GroupVersionResource) int {
	rc := wc.lookup(gvr)
	if rc == nil {
		return 0
	}
	rc.mu.RLock()
	defer rc.mu.RUnlock()
	total := 0
	for _, co := range rc.clusters {
		total += co.count
	}
	return total
}

// liveHeap returns the live heap, in bytes, after two collections.
func liveHeap() float64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// largePod is aggregatetest.RealisticPod: about 5.7 KB of JSON without managedFields.
func largePod(ns, name, rv string) *unstructured.Unstructured {
	return aggregatetest.RealisticPod(ns, name, rv, nil)
}

// smallPod is a pod as the apiserver serves test/bench's small pods (smallPodApply),
// without managedFields: one container with an image, a port and resources, three
// labels, the spec's defaults and a pending status; about 1.1 KB of JSON.
func smallPod(ns, name, rv string) *unstructured.Unstructured {
	h := fnv.New64a()
	_, _ = h.Write([]byte(ns + "/" + name))
	sum := h.Sum64()
	app := []string{"checkout", "cart", "catalog", "payments", "search", "recommend", "frontend", "shipping"}[sum%8]
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "uid": fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", sum>>32, sum>>16&0xffff, sum>>4&0xfff, sum&0xfff, sum&0xffffffffffff),
			"resourceVersion": rv, "creationTimestamp": "2026-07-01T12:00:00Z",
			"labels": map[string]any{"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "shop", "tier": "service"},
		},
		"spec": map[string]any{
			"containers": []any{map[string]any{
				"name": app, "image": "registry.example.com/shop/" + app + ":1.14.2",
				"ports":                    []any{map[string]any{"name": "http", "containerPort": int64(8080), "protocol": "TCP"}},
				"resources":                map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "128Mi"}, "limits": map[string]any{"memory": "256Mi"}},
				"terminationMessagePath":   "/dev/termination-log",
				"terminationMessagePolicy": "File",
				"imagePullPolicy":          "IfNotPresent",
			}},
			"restartPolicy": "Always", "terminationGracePeriodSeconds": int64(30), "dnsPolicy": "ClusterFirst",
			"securityContext": map[string]any{}, "schedulerName": "default-scheduler", "enableServiceLinks": true,
			"preemptionPolicy": "PreemptLowerPriority", "priority": int64(0),
			"tolerations": []any{
				map[string]any{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
				map[string]any{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": int64(300)},
			},
		},
		"status": map[string]any{"phase": "Pending", "qosClass": "Burstable"},
	}}
}
