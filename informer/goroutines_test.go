package informer

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// storeSink is a Sink of plain stores.
type storeSink struct{}

func (storeSink) Store(Scope) Store {
	return &checkpointStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
}

func (storeSink) RemoveResource(schema.GroupVersionResource) {}

// maxIdleGoroutines is what an idle cluster that watches one resource may cost (issue
// #38 asks for 3 at most): its informer's loop, and the HTTP/2 stream of its watch. A
// Set launched (Launch, as a Manager does) holds none of its own between its
// rediscoveries.
const maxIdleGoroutines = 2

// TestIdleClusterGoroutines starts Sets that watch pods on a real kube-apiserver, as
// many clusters would, and counts the goroutines that they add once they have synced
// and gone idle: at most maxIdleGoroutines per Set. One Set runs before the count, so
// that what the process keeps once for all (the shared transport's connection) is not
// counted.
func TestIdleClusterGoroutines(t *testing.T) {
	env := testenv.New(t, testenv.Options{Clusters: 1})
	cfg := env.Clusters[0].RESTConfig()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	startSet := func(name string) *Set {
		s, err := New(Options{Cluster: name, Config: cfg, Resources: []Resource{{Name: "pods"}}, Sink: storeSink{}})
		if err != nil {
			t.Fatal(err)
		}
		s.Launch(ctx, func(error) {})
		return s
	}
	waitIdle := func(sets ...*Set) {
		t.Helper()
		for _, s := range sets {
			eventually(t, "the Set synced", s.HasSynced)
		}
		// The goroutines of the sync (watchSync, waitInitialSync, discovery's requests)
		// end once it is over.
		time.Sleep(time.Second)
	}
	waitIdle(startSet("warm-up"))
	before := runtime.NumGoroutine()
	const n = 20
	var sets []*Set
	for i := range n {
		sets = append(sets, startSet(fmt.Sprint("cluster-", i)))
	}
	waitIdle(sets...)
	after := runtime.NumGoroutine()
	perCluster := float64(after-before) / n
	t.Logf("%d idle Sets: %d goroutines more, %.2f per cluster", n, after-before, perCluster)
	if perCluster > maxIdleGoroutines {
		t.Errorf("an idle cluster costs %.2f goroutines, want at most %d:\n%s", perCluster, maxIdleGoroutines, goroutines())
	}
}
