package search

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// benchFleet is the fleet of make bench: 3 clusters of 10000 pods and 3000 configmaps
// each, over 10 namespaces, with the bench's labels and two images per pod.
func benchFleet(clusters, pods, configMaps int) []struct {
	cluster string
	gvr     schema.GroupVersionResource
	obj     *unstructured.Unstructured
} {
	apps := []string{"web", "api", "worker", "cache", "db"}
	var out []struct {
		cluster string
		gvr     schema.GroupVersionResource
		obj     *unstructured.Unstructured
	}
	add := func(cl string, gvr schema.GroupVersionResource, u *unstructured.Unstructured) {
		out = append(out, struct {
			cluster string
			gvr     schema.GroupVersionResource
			obj     *unstructured.Unstructured
		}{cl, gvr, u})
	}
	for c := range clusters {
		cl := fmt.Sprintf("cluster-%d", c)
		for i := range pods {
			app := apps[i%len(apps)]
			ns := fmt.Sprintf("bench-%02d", i%10)
			add(cl, podsGVR, object(podsGVR, "Pod", ns, fmt.Sprintf("pod-%06d", i), map[string]string{
				"app.kubernetes.io/name": app, "app.kubernetes.io/instance": app + "-" + ns, "tier": "backend",
				"pod-template-hash": fmt.Sprintf("%x", i%50),
			}, "registry.example/"+app+":1.14.2", "registry.example/proxy:2.3"))
		}
		for i := range configMaps {
			add(cl, configMapsGVR, object(configMapsGVR, "ConfigMap", fmt.Sprintf("bench-%02d", i%10), fmt.Sprintf("cm-%06d", i), map[string]string{"app": apps[i%len(apps)]}))
		}
	}
	return out
}

func benchIndex(b *testing.B) *Index {
	b.Helper()
	x := New(Options{})
	for _, o := range benchFleet(3, 10000, 3000) {
		put(x, o.cluster, o.gvr, o.obj)
	}
	return x
}

// BenchmarkSearchNameSubstring: a name-substring search of 3 to 5 digits (as make bench
// times it over HTTP) over the bench fleet, 39000 objects, with the default page.
func BenchmarkSearchNameSubstring(b *testing.B) {
	x := benchIndex(b)
	rng := rand.New(rand.NewPCG(1, 2))
	queries := make([]*Query, 256)
	for i := range queries {
		digits := 3 + rng.IntN(3)
		q, err := Parse(fmt.Sprintf("%0*d", digits, rng.IntN([]int{1000, 10000, 100000}[digits-3])))
		if err != nil {
			b.Fatal(err)
		}
		queries[i] = q
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		x.Search(Request{Query: queries[i%len(queries)]})
	}
}

// BenchmarkSearchWorstCase: the searches that find the most: one character of every
// name, and every object (the empty query), each counted and paged.
func BenchmarkSearchWorstCase(b *testing.B) {
	x := benchIndex(b)
	for _, q := range []string{"", "0", "pod", "kind:Pod", "image:proxy l:tier=backend"} {
		pq, err := Parse(q)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%q", q), func(b *testing.B) {
			for b.Loop() {
				x.Search(Request{Query: pq})
			}
		})
	}
}

// BenchmarkIndexMemory reports the heap the index adds per object of the bench fleet:
// the objects themselves are the fleet's, not counted.
func BenchmarkIndexMemory(b *testing.B) {
	fleet := benchFleet(3, 10000, 3000)
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		x := New(Options{})
		for _, o := range fleet {
			put(x, o.cluster, o.gvr, o.obj)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(fleet)), "heapB/object")
		runtime.KeepAlive(x)
	}
}
