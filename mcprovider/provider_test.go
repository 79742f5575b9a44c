package mcprovider

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"

	"github.com/fleetwatch/fleetwatch"
	fwcluster "github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// awareFunc is a multicluster.Aware of a function.
type awareFunc func(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error

func (f awareFunc) Engage(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
	return f(ctx, name, cl)
}

// TestProviderEngagesAsTheSnapshotLoads: over a Manager that loads its snapshot in the
// background (fleetwatch.Options.LoadSnapshotInBackground), each cluster of the snapshot
// is engaged with a cache that, from the moment Engage is called, finds every object the
// snapshot holds of it: no Get answers NotFound, and the typed objects are the saved ones.
// The clusters' servers answer the identity read, not discovery: nothing is listed. The
// first cluster is small and the others large.
func TestProviderEngagesAsTheSnapshotLoads(t *testing.T) {
	names := []string{"a", "b", "c"}
	perCluster := map[string]int{"a": 100, "b": 5000, "c": 5000}
	var contexts []clustertest.Context
	servers := map[string]*clustertest.Server{}
	for _, name := range names {
		servers[name] = clustertest.NewServer(t)
		contexts = append(contexts, servers[name].Context(name))
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	clustertest.WriteKubeconfig(t, kubeconfig, contexts...)

	path := filepath.Join(t.TempDir(), "fleet.db")
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	resources := []informer.Resource{{Name: "configmaps"}}
	key := persist.ResourceKey(informer.Scope{Resource: configMaps, Spec: (&informer.Options{}).Spec(resources[0])}.String())
	w := store.NewWriter(persist.WriterOptions{})
	for _, name := range names {
		if err := store.SetIdentity(name, persist.Identity{UID: servers[name].UID(), Server: servers[name].URL}); err != nil {
			t.Fatal(err)
		}
		for i := range perCluster[name] {
			w.Upsert(name, key, configMap("ns", fmt.Sprintf("cm-%03d", i), fmt.Sprint(10+i), nil, map[string]string{"owner": name}))
		}
		w.Checkpoint(name, key, "1000")
	}
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	if store, err = persist.Open(path, persist.Options{}); err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	mgr, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:                 fwcluster.Options{Kubeconfigs: []string{kubeconfig}},
		Resources:                resources,
		Snapshot:                 store,
		LoadSnapshotInBackground: true,
		DisableGCTuning:          true,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(mgr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	found := map[multicluster.ClusterName]string{}
	aware := awareFunc(func(ctx context.Context, name multicluster.ClusterName, cl cluster.Cluster) error {
		// What a controller's first requests read: every saved object, through the cache.
		problem := ""
		for i := range perCluster[string(name)] {
			var cm corev1.ConfigMap
			err := cl.GetCache().Get(ctx, client.ObjectKey{Namespace: "ns", Name: fmt.Sprintf("cm-%03d", i)}, &cm)
			if err != nil || cm.Data["owner"] != string(name) || cm.ResourceVersion != fmt.Sprint(10+i) {
				problem = fmt.Sprintf("Get of cm-%03d: %v, %+v", i, err, cm)
				break
			}
		}
		mu.Lock()
		found[name] = problem
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx, aware) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(found)
		mu.Unlock()
		if n == len(names) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d clusters engaged", n, len(names))
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for name, problem := range found {
		if problem != "" {
			t.Errorf("cluster %s, as it was engaged: %s", name, problem)
		}
	}
}
