package fleetwatch

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestLoadSnapshotSeedsOrTakesBack: NewManager returns with every object of the
// snapshot readable, in a plain fleet and in a compact one (which takes the stored
// encodings as they are), label selectors included; the saved scopes keep the objects'
// names, not the objects. A file found corrupt in the middle (a cluster whose last object
// does not decode, after the clusters before it and its own first runs were filed) is
// moved aside, and the fleet holds none of its objects afterwards.
func TestLoadSnapshotSeedsOrTakesBack(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	resources := []informer.Resource{{Name: "pods"}}
	key := persist.ResourceKey(informer.Scope{Resource: pods, Spec: (&informer.Options{}).Spec(resources[0])}.String())
	clusters := []string{"a", "b", "c"}
	const perCluster = 700
	pod := func(cluster string, i int) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod",
			"spec": map[string]any{"nodeName": "node-" + cluster, "containers": []any{map[string]any{"name": "c", "image": "nginx"}}},
		}}
		u.SetNamespace(fmt.Sprintf("ns-%d", i%3))
		u.SetName(fmt.Sprintf("pod-%04d", i))
		u.SetResourceVersion(fmt.Sprint(100 + i))
		u.SetLabels(map[string]string{"app": fmt.Sprintf("web-%d", i%5)})
		u.SetAnnotations(map[string]string{"description": strings.Repeat(fmt.Sprintf("pod %d of cluster %s. ", i, cluster), 8)})
		return u
	}
	for name, fleetCodec := range map[string]aggregate.Codec{"plain": nil, "compact": persist.Codec{}, "compressed": persist.Codec{Compress: true}, "compressed-dict": persist.Codec{Compress: true, Dictionary: true}} {
		for _, corrupt := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s,corrupt=%v", name, corrupt), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "fleetwatch.db")
				store, err := persist.Open(path, persist.Options{})
				if err != nil {
					t.Fatal(err)
				}
				w := store.NewWriter(persist.WriterOptions{})
				for _, c := range clusters {
					for i := range perCluster {
						// A compressing fleet's snapshot holds its encodings as it keeps them.
						if codec, ok := fleetCodec.(persist.Codec); ok && codec.Compress {
							// With a dictionary, the pods before the process has one are
							// compressed without (5), the others with it (6).
							var encoder aggregate.Codec = codec
							if own := codec.ForResource(pods); own != nil {
								encoder = own
							}
							enc, err := encoder.Encode(pod(c, i))
							if err != nil || enc[0] != 5 && (!codec.Dictionary || enc[0] != 6) || codec.Dictionary && c == "c" && enc[0] != 6 {
								t.Fatalf("encoding: %v, format %d", err, enc[0])
							}
							w.UpsertEncoded(c, key, pod(c, i), enc)
							continue
						}
						w.Upsert(c, key, pod(c, i))
					}
					w.Checkpoint(c, key, "5000")
				}
				if err := w.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				if err := store.Close(); err != nil {
					t.Fatal(err)
				}
				if corrupt {
					// b's last object, in its last run: the runs before it are filed, as
					// they are decoded, before the load finds it unreadable.
					putSnapshotValue(t, path, "b", key, "ns-2/pod-0698", []byte("not a sealed object"))
				}
				if store, err = persist.Open(path, persist.Options{}); err != nil {
					t.Fatal(err)
				}
				defer store.Close()

				opts := Options{
					Clusters:        cluster.Options{Kubeconfigs: []string{t.TempDir()}},
					Resources:       resources,
					Snapshot:        store,
					DisableGCTuning: true,
					Fleet:           aggregate.Options{Codec: fleetCodec},
				}
				if fleetCodec == nil {
					opts.Encoding = EncodingObjects
				}
				m, err := NewManager(opts)
				if err != nil {
					t.Fatal(err)
				}
				all, err := m.fleet.Lister(pods).List(labels.Everything())
				if err != nil {
					t.Fatal(err)
				}
				if corrupt {
					if len(all) != 0 || len(m.saved) != 0 {
						t.Errorf("after a corrupt file, the fleet holds %d objects and %d saved clusters, want none", len(all), len(m.saved))
					}
					if moved, _ := store.Recovered(); moved == "" {
						t.Error("the corrupt file was not moved aside")
					}
					return
				}
				if len(all) != len(clusters)*perCluster {
					t.Fatalf("the fleet holds %d objects, want %d", len(all), len(clusters)*perCluster)
				}
				for _, c := range clusters {
					lister := m.fleet.Lister(pods).Cluster(c)
					for _, i := range []int{0, 1, perCluster / 2, perCluster - 1} {
						want := pod(c, i)
						got, err := lister.ByNamespace(want.GetNamespace()).Get(want.GetName())
						if err != nil || !reflect.DeepEqual(got, want) {
							t.Errorf("cluster %s: Get %s: %v (%v), want %v", c, want.GetName(), got, err, want)
						}
					}
					web, err := lister.List(labels.SelectorFromSet(labels.Set{"app": "web-2"}))
					if err != nil || len(web) != perCluster/5 {
						t.Errorf("cluster %s: %d objects labeled app=web-2 (%v), want %d", c, len(web), err, perCluster/5)
					}
					sv := m.saved[c]
					if sv == nil || len(sv.scopes) != 1 {
						t.Fatalf("cluster %s: saved %+v", c, sv)
					}
					for _, s := range sv.scopes {
						if s.resourceVersion != "5000" || len(s.objects) != perCluster {
							t.Errorf("cluster %s: saved scope at %q with %d names, want 5000 with %d", c, s.resourceVersion, len(s.objects), perCluster)
						}
					}
				}
			})
		}
	}
}

// putSnapshotValue writes value, as it is, as the stored object name of resource key of
// cluster in the snapshot file at path, which no Store has open (the layout of
// persist's package doc).
func putSnapshotValue(t *testing.T, path, cluster string, key persist.ResourceKey, name string, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("clusters")).Bucket([]byte(cluster)).Bucket([]byte("resources")).Bucket([]byte(key)).Bucket([]byte("objects"))
		if b.Get([]byte(name)) == nil {
			return fmt.Errorf("no object %q", name)
		}
		return b.Put([]byte(name), value)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// awareFunc is a cluster.Aware of a function.
type awareFunc func(ctx context.Context, c *cluster.Cluster) error

func (f awareFunc) Engage(ctx context.Context, c *cluster.Cluster) error { return f(ctx, c) }

// TestLoadSnapshotInBackground: with Options.LoadSnapshotInBackground, NewManager
// returns before the snapshot is loaded; while it loads, no cluster is engaged and the
// fleet is not ready. Once the load has ended, the fleet is ready before its clusters
// are engaged (the snapshot serves them), and each is engaged with its objects complete
// and synced. A snapshot cluster that the kubeconfig no longer selects is dropped. A
// load that fails (a file found unreadable) takes back what it seeded: every cluster
// syncs cold.
func TestLoadSnapshotInBackground(t *testing.T) {
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	resources := []informer.Resource{{Name: "configmaps"}}
	key := persist.ResourceKey(informer.Scope{Resource: configMaps, Spec: (&informer.Options{}).Spec(resources[0])}.String())
	const perCluster = 50
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail=%v", fail), func(t *testing.T) {
			servers := map[string]*clustertest.Server{}
			var contexts []clustertest.Context
			for _, name := range []string{"a", "b", "c"} {
				servers[name] = clustertest.NewServer(t)
				contexts = append(contexts, servers[name].Context(name))
			}
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			clustertest.WriteKubeconfig(t, kubeconfig, contexts...)
			ids := map[string]persist.Identity{"gone": {UID: "gone-uid", Server: "https://gone"}}
			for name, s := range servers {
				ids[name] = persist.Identity{UID: s.UID(), Server: s.URL}
			}
			store := writeConfigMapSnapshot(t, key, ids, perCluster)
			t.Cleanup(func() { store.Close() })

			// The load waits after a until the test has looked; with fail, it then
			// fails as on a file found unreadable.
			seededA, resume := make(chan struct{}), make(chan struct{})
			testHookSeeded = func(name string) error {
				if name != "a" {
					return nil
				}
				close(seededA)
				<-resume
				if fail {
					return fmt.Errorf("%w: as if b did not decode", persist.ErrCorrupt)
				}
				return nil
			}
			t.Cleanup(func() { testHookSeeded = nil })
			m, err := NewManager(Options{
				Clusters:                 cluster.Options{Kubeconfigs: []string{kubeconfig}},
				Resources:                resources,
				Snapshot:                 store,
				LoadSnapshotInBackground: true,
				DisableGCTuning:          true,
			})
			if err != nil {
				t.Fatal(err)
			}
			type engaged struct {
				synced, loaded, ready bool
				objects               int
			}
			var mu sync.Mutex
			seen := map[string]engaged{}
			// others are the statuses of the clusters not engaged yet when the first is.
			var others []aggregate.ClusterStatus
			err = m.AddAware(awareFunc(func(_ context.Context, c *cluster.Cluster) error {
				e := engaged{synced: m.ClusterHasSynced(c.Name), loaded: isClosed(m.SnapshotLoaded()), ready: m.Ready(), objects: m.fleet.Indexer(configMaps).ClusterLen(c.Name)}
				mu.Lock()
				defer mu.Unlock()
				seen[c.Name] = e
				if c.Name == "a" {
					for _, name := range []string{"b", "c"} {
						st, _ := m.ClusterStatus(name)
						others = append(others, st)
					}
				}
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			runManager(t, m)
			select {
			case <-seededA:
			case <-time.After(10 * time.Second):
				t.Fatal("the load did not reach a")
			}
			// The kubeconfig is read and its clusters selected meanwhile; none is engaged
			// before the load ends.
			time.Sleep(200 * time.Millisecond)
			mu.Lock()
			early := len(seen)
			mu.Unlock()
			if early != 0 || m.Ready() {
				t.Errorf("while the snapshot loads: %d clusters engaged, ready %v; want none, not ready", early, m.Ready())
			}
			close(resume)
			select {
			case <-m.SnapshotLoaded():
			case <-time.After(10 * time.Second):
				t.Fatal("the snapshot did not load")
			}
			waitFor(t, "every cluster engaged, and gone dropped", func() string {
				mu.Lock()
				defer mu.Unlock()
				if len(seen) != 3 {
					return fmt.Sprintf("%d clusters engaged", len(seen))
				}
				if n := m.fleet.Indexer(configMaps).ClusterLen("gone"); n != 0 {
					return fmt.Sprintf("%d objects of gone cached", n)
				}
				if _, ok := m.ClusterStatus("gone"); ok {
					return "gone has a status"
				}
				return ""
			})
			mu.Lock()
			defer mu.Unlock()
			if fail {
				// The clusters sync cold: the fake servers serve no discovery, so they
				// never do.
				for _, name := range []string{"a", "b", "c"} {
					if e := seen[name]; e.synced || e.objects != 0 || e.ready {
						t.Errorf("cluster %s, after a failed load: synced %v, ready %v, with %d objects; want a cold cluster", name, e.synced, e.ready, e.objects)
					}
				}
				return
			}
			// Meanwhile, b and c are served from the snapshot: Stale, and said so.
			for _, st := range others {
				if cond := meta.FindStatusCondition(st.Conditions, aggregate.ConditionSynced); st.Phase != aggregate.PhaseStale || cond == nil || cond.Reason != ReasonServingSnapshot {
					t.Errorf("cluster %s, not engaged yet: phase %q, Synced condition %+v; want Stale, %s", st.Name, st.Phase, cond, ReasonServingSnapshot)
				}
			}
			for _, name := range []string{"a", "b", "c"} {
				// a, engaged first, finds the fleet ready: b and c are served from the
				// snapshot before they are engaged.
				if e := seen[name]; !e.synced || !e.loaded || !e.ready || e.objects != perCluster {
					t.Errorf("when %s was engaged: synced %v, snapshot loaded %v, ready %v, %d objects; want synced, loaded, ready, %d objects", name, e.synced, e.loaded, e.ready, e.objects, perCluster)
				}
			}
		})
	}
}

// runManager runs m.Start until the end of the test, which fails if Start returns an
// error.
func runManager(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// waitFor polls cond until it returns "", failing the test with its last answer after
// 15 seconds.
func waitFor(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// writeConfigMapSnapshot writes a snapshot in a new file with, for each cluster of ids
// and under its identity, perCluster ConfigMaps of key at resourceVersions from 100 and
// the checkpoint 500, and returns it opened again, as a restart finds it.
func writeConfigMapSnapshot(t *testing.T, key persist.ResourceKey, ids map[string]persist.Identity, perCluster int) *persist.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := store.NewWriter(persist.WriterOptions{})
	for name, id := range ids {
		if err := store.SetIdentity(name, id); err != nil {
			t.Fatal(err)
		}
		for i := range perCluster {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
			u.SetNamespace("default")
			u.SetName(fmt.Sprintf("cm-%03d", i))
			u.SetResourceVersion(fmt.Sprint(100 + i))
			w.Upsert(name, key, u)
		}
		w.Checkpoint(name, key, "500")
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
	t.Cleanup(func() { store.Close() })
	return store
}
