package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// wholeLog records the last object that a handler received for each configmap.
type wholeLog struct {
	mu      sync.Mutex
	objects map[aggregate.Key]*unstructured.Unstructured
}

func (l *wholeLog) OnEvent(e aggregate.Event) {
	if e.Resource != configMapsGVR {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e.Type == aggregate.Deleted {
		delete(l.objects, e.Key())
		return
	}
	l.objects[e.Key()] = e.Object.(*unstructured.Unstructured)
}

// TestCompactStreamingList: a compact fleet in the snapshot's encoding, whose informers
// decode watched objects, those of streaming lists included, into their encodings and
// the fields that file them (partial objects), holds the
// servers' objects field for field, hands whole objects to its handler and to a custom
// index function, keeps no value of a Secret, and writes a snapshot that loads as what
// it holds; after an apiserver restart and changes, and after a warm restart, the cache
// equals the servers' truth again. The same with the encodings compressed
// (persist.Codec{Compress: true}), and compressed with a dictionary per resource
// (Dictionary), with more configmaps, and larger: the first 64 KiB of them make the
// dictionary that the others are compressed with, and the snapshot keeps it.
func TestCompactStreamingList(t *testing.T) {
	t.Parallel()
	t.Run("compact", func(t *testing.T) { testCompactStreamingList(t, persist.Codec{}, 40) })
	t.Run("compressed", func(t *testing.T) { testCompactStreamingList(t, persist.Codec{Compress: true}, 40) })
	t.Run("compressed-dict", func(t *testing.T) {
		testCompactStreamingList(t, persist.Codec{Compress: true, Dictionary: true}, 200)
	})
}

// testCompactStreamingList is TestCompactStreamingList with codec and n configmaps per
// cluster, those after the 40th with a setting of 400 bytes.
func testCompactStreamingList(t *testing.T, codec persist.Codec, n int) {
	env := testenv.New(t, testenv.Options{Clusters: 2})
	ctx := t.Context()
	for _, c := range env.Clusters {
		for i := range n {
			cm := configMap("shop", fmt.Sprintf("cm-%d", i), c.Name)
			cm.Labels = map[string]string{"tier": fmt.Sprint(i % 3)}
			cm.Data["owner"] = fmt.Sprintf("team-%d", i%4)
			if i >= 40 {
				cm.Data["settings"] = strings.Repeat(fmt.Sprintf("option-%d=on; ", i%10), 400/len("option-0=on; "))
			}
			if i == 0 {
				createConfigMap(t, c.Clientset(), "shop", "first", c.Name)
			}
			if _, err := c.Clientset().CoreV1().ConfigMaps("shop").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "token"}, StringData: map[string]string{"token": "s3cret-" + c.Name}}
		if _, err := c.Clientset().CoreV1().Secrets("shop").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	byOwner := cache.Indexers{"owner": func(obj any) ([]string, error) {
		owner, _, err := unstructured.NestedString(obj.(*unstructured.Unstructured).Object, "data", "owner")
		return []string{owner}, err
	}}
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	start := func() (*fleetwatch.Manager, *wholeLog, func()) {
		t.Helper()
		log := &wholeLog{objects: map[aggregate.Key]*unstructured.Unstructured{}}
		mgr, stop := startWithSnapshot(t, path, fleetwatch.Options{
			Clusters:  cluster.Options{Kubeconfigs: []string{env.Kubeconfig}},
			Resources: []informer.Resource{{Name: "configmaps"}, {Name: "secrets"}},
			Fleet:     aggregate.Options{Codec: codec, Indexers: byOwner},
		}, log, nil)
		return mgr, log, stop
	}
	// same compares the cache, the handler's objects and the custom index with the
	// servers' objects, field for field.
	same := func(fleet *aggregate.Fleet, log *wholeLog) string {
		owners := map[string]int{}
		n := 0
		for _, c := range env.Clusters {
			list, err := c.Dynamic().Resource(configMapsGVR).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			for i := range list.Items {
				want := &list.Items[i]
				want.SetManagedFields(nil)
				key := aggregate.Key{Cluster: c.Name, Namespace: want.GetNamespace(), Name: want.GetName()}
				got, ok := fleet.Indexer(configMapsGVR).Get(key)
				if !ok || !equality.Semantic.DeepEqual(got, want) {
					return fmt.Sprintf("%s: cached %v, want %v", key, got, want.Object)
				}
				log.mu.Lock()
				handed := log.objects[key]
				log.mu.Unlock()
				if !equality.Semantic.DeepEqual(handed, want) {
					return fmt.Sprintf("%s: the handler's last object %v, want %v", key, handed, want.Object)
				}
				if owner, ok := want.Object["data"].(map[string]any)["owner"].(string); ok {
					owners[owner]++
				}
				n++
			}
		}
		if got := len(fleet.Indexer(configMapsGVR).ListKeys()); got != n {
			return fmt.Sprintf("%d configmaps cached, want %d", got, n)
		}
		log.mu.Lock()
		handed := len(log.objects)
		log.mu.Unlock()
		if handed != n {
			return fmt.Sprintf("the handler holds %d configmaps, want %d: a deletion did not reach it", handed, n)
		}
		for owner, want := range owners {
			objs, err := fleet.Indexer(configMapsGVR).ByIndex("owner", owner)
			if err != nil || len(objs) != want {
				return fmt.Sprintf("index owner=%s: %d objects, %v; want %d", owner, len(objs), err, want)
			}
		}
		for _, c := range env.Clusters {
			obj, ok := fleet.Indexer(secretsGVR).Get(aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "token"})
			if !ok {
				return c.Name + ": the secret is not cached"
			}
			if _, found := obj.(*unstructured.Unstructured).Object["data"]; found {
				return c.Name + ": the secret's values are cached"
			}
		}
		return ""
	}

	mgr, log, stop := start()
	if d := same(mgr.Fleet(), log); d != "" {
		t.Fatal(d)
	}

	// An apiserver restart, then changes: the informers watch again, and list again if
	// they must, partial as on the first list.
	c := env.Clusters[0]
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	cms := c.Clientset().CoreV1().ConfigMaps("shop")
	changeConfigMaps(ctx, t, cms)
	eventually(t, 60*time.Second, "the cache equals the servers after the restart", func() string { return same(mgr.Fleet(), log) })
	stop()
	if codec.Dictionary {
		checkDictionaryStored(t, path)
	}

	// A warm restart from the snapshot the compact fleet wrote, with a change made while
	// fleetwatch was down.
	if _, err := cms.Update(ctx, ownedConfigMap("cm-7", "team-9"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	mgr, log, stop = start()
	defer stop()
	eventually(t, 60*time.Second, "the cache equals the servers after a warm restart", func() string { return same(mgr.Fleet(), log) })
}

// ownedConfigMap is a configmap of shop with owner as its data's owner.
func ownedConfigMap(name, owner string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"tier": "x"}}, Data: map[string]string{"owner": owner}}
}

// changeConfigMaps updates, deletes and creates configmaps of shop.
func changeConfigMaps(ctx context.Context, t *testing.T, cms interface {
	Update(context.Context, *corev1.ConfigMap, metav1.UpdateOptions) (*corev1.ConfigMap, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
	Create(context.Context, *corev1.ConfigMap, metav1.CreateOptions) (*corev1.ConfigMap, error)
}) {
	t.Helper()
	if _, err := cms.Update(ctx, ownedConfigMap("cm-1", "team-8"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "cm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, ownedConfigMap("cm-new", "team-8"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkDictionaryStored checks that the snapshot at path, which no process holds open,
// stores a compression dictionary (persist/dict.go: the bucket "dictionaries").
func checkDictionaryStored(t *testing.T, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte("dictionaries")); b == nil || b.Stats().KeyN == 0 {
			return errors.New("the snapshot stores no compression dictionary: none was made, or none used")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
