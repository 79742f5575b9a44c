package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/internal/wire"
	"github.com/fleetwatch/fleetwatch/persist"
)

// metadataLog records the last object that a handler received for each configmap, and
// the type of every object it received.
type metadataLog struct {
	mu      sync.Mutex
	objects map[aggregate.Key]*metav1.PartialObjectMetadata
	// other counts the objects that were not a *metav1.PartialObjectMetadata.
	other int
	// formats counts the first bytes of the encodings of the Added and Updated events.
	formats map[byte]int
}

func (l *metadataLog) OnEvent(e aggregate.Event) {
	if e.Resource != configMapsGVR {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := e.Object.(*metav1.PartialObjectMetadata)
	if !ok {
		l.other++
		return
	}
	if e.Type == aggregate.Deleted {
		delete(l.objects, e.Key())
		return
	}
	l.objects[e.Key()] = p
	if len(e.Encoded) > 0 {
		l.formats[e.Encoded[0]]++
	}
}

// truthAgent is the user agent of the test's own reads of the servers' truth.
const truthAgent = "e2e-truth"

// TestCompactMetadataOnly: a compact fleet in the snapshot's encoding caches metadata-only
// configmaps through wire's metadata clients, as partial objects whose encodings are the
// PartialObjectMetadata the servers sent: the cache, a typed lister of
// PartialObjectMetadata and a handler hold the servers' metadata (names, labels,
// resourceVersions, every field, no TypeMeta, as client-go's metadata client returns
// it), through the initial list, watched updates, deletions and creations, and an
// apiserver restart; a warm restart from the snapshot lists nothing, and the cache then
// follows a change made while fleetwatch was down. Metadata-only Secrets, whose values
// a transform drops, go through client-go's metadata client beside them.
func TestCompactMetadataOnly(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 2, AuditWatches: true})
	ctx := t.Context()
	for _, c := range env.Clusters {
		createConfigMap(t, c.Clientset(), "shop", "first", c.Name)
		for i := range 30 {
			cm := configMap("shop", fmt.Sprintf("cm-%d", i), c.Name)
			cm.Labels = map[string]string{"tier": fmt.Sprint(i % 3)}
			cm.Annotations = map[string]string{"note": fmt.Sprintf(`{"n":%d}`, i)}
			if _, err := c.Clientset().CoreV1().ConfigMaps("shop").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "token", Labels: map[string]string{"kind": "token"}}, StringData: map[string]string{"token": "s3cret"}}
		if _, err := c.Clientset().CoreV1().Secrets("shop").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	start := func() (*fleetwatch.Manager, *metadataLog, func()) {
		t.Helper()
		log := &metadataLog{objects: map[aggregate.Key]*metav1.PartialObjectMetadata{}, formats: map[byte]int{}}
		mgr, stop := startWithSnapshot(t, path, fleetwatch.Options{
			Clusters:  cluster.Options{Kubeconfigs: []string{env.Kubeconfig}},
			Resources: []informer.Resource{{Name: "configmaps", MetadataOnly: true}, {Name: "secrets", MetadataOnly: true}},
			Fleet:     aggregate.Options{Codec: persist.Codec{}},
		}, log, nil)
		return mgr, log, stop
	}
	// same compares the cache, a typed lister and the handler's objects with the
	// servers' metadata, field for field.
	same := func(fleet *aggregate.Fleet, log *metadataLog) string {
		lister, err := aggregate.NewTypedLister[metav1.PartialObjectMetadata](fleet, configMapsGVR, nil)
		if err != nil {
			return err.Error()
		}
		n := 0
		for _, c := range env.Clusters {
			for _, gvr := range []struct {
				resource  string
				configMap bool
			}{{"configmaps", true}, {"secrets", false}} {
				res := configMapsGVR
				if !gvr.configMap {
					res = secretsGVR
				}
				cfg := c.RESTConfig()
				cfg.UserAgent = truthAgent
				list, err := metadata.NewForConfigOrDie(cfg).Resource(res).List(ctx, metav1.ListOptions{})
				if err != nil {
					return err.Error()
				}
				for i := range list.Items {
					want := &list.Items[i]
					want.ManagedFields = nil
					key := aggregate.Key{Cluster: c.Name, Namespace: want.Namespace, Name: want.Name}
					got, ok := fleet.Indexer(res).Get(key)
					if !ok || !equality.Semantic.DeepEqual(got, want) {
						return fmt.Sprintf("%s %s: cached %#v, want %#v", gvr.resource, key, got, want)
					}
					if !gvr.configMap {
						continue
					}
					typed, err := lister.Get(key)
					if err != nil || !equality.Semantic.DeepEqual(typed, want) {
						return fmt.Sprintf("%s: typed lister %#v, %v; want %#v", key, typed, err, want)
					}
					log.mu.Lock()
					handed := log.objects[key]
					log.mu.Unlock()
					if !equality.Semantic.DeepEqual(handed, want) {
						return fmt.Sprintf("%s: the handler's last object %#v, want %#v", key, handed, want)
					}
					n++
				}
			}
		}
		if got := len(fleet.Indexer(configMapsGVR).ListKeys()); got != n {
			return fmt.Sprintf("%d configmaps cached, want %d", got, n)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.objects) != n || log.other != 0 {
			return fmt.Sprintf("the handler holds %d configmaps, want %d, and got %d objects of another type", len(log.objects), n, log.other)
		}
		return ""
	}

	mgr, log, stop := start()
	if d := same(mgr.Fleet(), log); d != "" {
		t.Fatal(d)
	}
	// The fleet holds the encodings that the informers decoded, none of its own.
	log.mu.Lock()
	if len(log.formats) != 1 || log.formats[wire.CompactMetadataFormat] == 0 {
		t.Errorf("the first bytes of the configmaps' encodings: %v, want only %d", log.formats, wire.CompactMetadataFormat)
	}
	log.mu.Unlock()
	// Watched changes, then an apiserver restart and more changes.
	c := env.Clusters[0]
	cms := c.Clientset().CoreV1().ConfigMaps("shop")
	relabel := func(name, tier string) {
		t.Helper()
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Labels["tier"] = tier
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("cm-1", "changed")
	if err := cms.Delete(ctx, "cm-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, configMap("shop", "cm-new", c.Name), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the cache follows the watched changes", func() string { return same(mgr.Fleet(), log) })
	if err := c.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	relabel("cm-3", "after-restart")
	if err := cms.Delete(ctx, "cm-4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the cache equals the servers after the restart", func() string { return same(mgr.Fleet(), log) })
	stop()

	// A warm restart from the snapshot, with a change made while fleetwatch was down.
	relabel("cm-5", "while-down")
	restarted := time.Now()
	mgr, log, stop = start()
	defer stop()
	eventually(t, 60*time.Second, "the cache equals the servers after a warm restart", func() string { return same(mgr.Fleet(), log) })
	for _, c := range env.Clusters {
		reqs, err := c.Requests()
		if err != nil {
			t.Fatal(err)
		}
		resumed := 0
		for _, r := range reqs {
			if r.Resource != "configmaps" || r.Start.Before(restarted) || r.UserAgent == truthAgent {
				continue
			}
			if r.Verb == "list" || strings.Contains(r.URI, "sendInitialEvents=true") {
				t.Errorf("%s: %s %s after the warm restart; want the watch resumed from the snapshot", c.Name, r.Verb, r.URI)
			} else {
				resumed++
			}
		}
		if resumed == 0 {
			t.Errorf("%s: no watch of configmaps after the warm restart", c.Name)
		}
	}
}
