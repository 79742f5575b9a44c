package fleetwatch

import (
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestLoadSnapshotSeedsOrTakesBack: NewManager returns with every object of the
// snapshot readable, in a plain fleet and in a compact one (which takes the stored
// encodings as they are), label selectors included; the saved scopes keep the objects'
// names, not the objects. A file found corrupt in the middle (a cluster whose object
// does not decode, after the clusters before it were seeded) is moved aside, and the
// fleet holds none of its objects afterwards.
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
		return u
	}
	for _, fleetCodec := range []aggregate.Codec{nil, persist.Codec{}} {
		for _, corrupt := range []bool{false, true} {
			t.Run(fmt.Sprintf("compact=%v,corrupt=%v", fleetCodec != nil, corrupt), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "fleetwatch.db")
				store, err := persist.Open(path, persist.Options{})
				if err != nil {
					t.Fatal(err)
				}
				w := store.NewWriter(persist.WriterOptions{})
				for _, c := range clusters {
					for i := range perCluster {
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
					putSnapshotValue(t, path, "b", key, "ns-1/pod-0601", []byte("not a sealed object"))
				}
				if store, err = persist.Open(path, persist.Options{}); err != nil {
					t.Fatal(err)
				}
				defer store.Close()

				m, err := NewManager(Options{
					Clusters:        cluster.Options{Kubeconfigs: []string{t.TempDir()}},
					Resources:       resources,
					Snapshot:        store,
					DisableGCTuning: true,
					Fleet:           aggregate.Options{Codec: fleetCodec},
				})
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
