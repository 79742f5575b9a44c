package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/client"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestClientOverTheDaemon: over /clusters/* of the real daemon, with the same 100 pod
// names in each of 2 clusters, a client-go informer keyed by namespace and name holds
// 100 objects for 200 (the pitfall), and package client's informers (dynamic, typed and
// metadata clients) hold all 200, each deletion taking away its own cluster's object
// only; the search client pages through the same objects.
func TestClientOverTheDaemon(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"east", "west"}})
	createManyPods(t, env, 100)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf("kubeconfig: [%q]\nresources:\n  - name: pods\nsnapshot:\n  path: %q\nserver:\n  address: 127.0.0.1:%d\n",
		kubeconfig, filepath.Join(dir, "fleetwatch.db"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)
	fleet := &rest.Config{Host: base}
	all := client.ConfigFor(fleet, v1alpha1.AllClusters)
	ctx := t.Context()

	dc, err := dynamic.NewForConfig(all)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(all)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := metadata.NewForConfig(all)
	if err != nil {
		t.Fatal(err)
	}
	listWatches := map[string]struct {
		lw  cache.ListerWatcher
		obj runtime.Object
	}{
		"dynamic": {&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return dc.Resource(podsGVR).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return dc.Resource(podsGVR).Watch(ctx, o)
			},
		}, &unstructured.Unstructured{}},
		"typed": {cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", "", fields.Everything()), &corev1.Pod{}},
		"metadata": {&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return mc.Resource(podsGVR).List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return mc.Resource(podsGVR).Watch(ctx, o)
			},
		}, &metav1.PartialObjectMetadata{}},
	}

	t.Run("client-go's own keys collapse the clusters", func(t *testing.T) {
		store, ctrl := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: listWatches["typed"].lw, ObjectType: &corev1.Pod{}, Handler: cache.ResourceEventHandlerFuncs{}})
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go ctrl.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
			t.Fatal("not synced")
		}
		if n := len(store.List()); n != 100 {
			t.Errorf("a namespace/name store of 2 clusters of 100 pods holds %d, want 100 (the pitfall this package answers)", n)
		}
	})

	stores := map[string]cache.Indexer{}
	for name, lw := range listWatches {
		store, ctrl := client.NewInformer(client.InformerOptions{ListerWatcher: lw.lw, ObjectType: lw.obj})
		go ctrl.RunWithContext(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
			t.Fatalf("%s: not synced", name)
		}
		stores[name] = store
	}
	check := func(what string, want int, gone string) {
		t.Helper()
		eventually(t, 60*time.Second, what, func() string {
			for name, store := range stores {
				if n := len(store.List()); n != want {
					return fmt.Sprintf("%s: %d objects, want %d", name, n, want)
				}
				for _, c := range []string{"east", "west"} {
					objs, err := store.ByIndex(client.ClusterIndex, c)
					wantC := 100
					if c == "east" {
						wantC = want - 100
					}
					if err != nil || len(objs) != wantC {
						return fmt.Sprintf("%s: %d objects of %s (%v), want %d", name, len(objs), c, err, wantC)
					}
				}
				_, inEast, _ := store.GetByKey("east/many/" + gone)
				_, inWest, _ := store.GetByKey("west/many/" + gone)
				if want < 200 && inEast || !inWest {
					return fmt.Sprintf("%s: %s in east %v, in west %v", name, gone, inEast, inWest)
				}
			}
			return ""
		})
	}
	check("every pod of both clusters", 200, "p-7")
	if err := env.Clusters[0].Clientset().CoreV1().Pods("many").Delete(ctx, "p-7", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	check("east's p-7 deleted, west's kept", 199, "p-7")

	t.Run("search", func(t *testing.T) {
		s, err := client.NewSearcher(fleet)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Search(ctx, "p-1* cluster:west", client.SearchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// p-1 and p-10 to p-19.
		if res.Total != 11 || len(res.Items) != 11 || res.Items[0].Cluster != "west" || res.Counts.Clusters["west"] != 11 {
			t.Errorf("p-1* in west: total %d, %d items, counts %v", res.Total, len(res.Items), res.Counts.Clusters)
		}
		seen := map[string]bool{}
		for it, err := range s.All(ctx, "ns:many kind:Pod", client.SearchOptions{Limit: 30}) {
			if err != nil {
				t.Fatal(err)
			}
			key := it.Cluster + "/" + it.Namespace + "/" + it.Name
			if seen[key] {
				t.Fatalf("%s twice", key)
			}
			seen[key] = true
		}
		if len(seen) != 199 {
			t.Errorf("paged through %d pods, want 199", len(seen))
		}
		if _, err := s.Search(ctx, "l:a=b=c", client.SearchOptions{}); err == nil {
			t.Error("a bad query succeeded")
		}
	})
}
