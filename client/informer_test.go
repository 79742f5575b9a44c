package client

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestNewInformerKeepsClustersApart: over a list of the same names in two clusters, the
// store holds both, and an event of one cluster changes that cluster's object only.
func TestNewInformerKeepsClustersApart(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}
	for _, c := range []string{"a", "b"} {
		for _, n := range []string{"web-1", "web-2"} {
			p := pod(c, "shop", n)
			p.ResourceVersion = "5"
			list.Items = append(list.Items, *p)
		}
	}
	events := watch.NewFake()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) { return list.DeepCopy(), nil },
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return events, nil
		},
	}
	var added, deleted atomic.Int32
	store, ctrl := NewInformer(InformerOptions{
		ListerWatcher: noWatchList{lw},
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { added.Add(1) },
			DeleteFunc: func(any) { deleted.Add(1) },
		},
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go ctrl.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), ctrl.HasSynced) {
		t.Fatal("not synced")
	}
	if n := len(store.List()); n != 4 {
		t.Fatalf("%d objects in the store, want 4: %v", n, store.ListKeys())
	}
	if objs, err := store.ByIndex(ClusterIndex, "b"); err != nil || len(objs) != 2 {
		t.Fatalf("ByIndex(cluster, b) = %d objects, %v; want 2", len(objs), err)
	}
	gone := pod("a", "shop", "web-1")
	gone.ResourceVersion = "11"
	events.Delete(gone)
	deadline := time.Now().Add(10 * time.Second)
	for deleted.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok, _ := store.GetByKey("a/shop/web-1"); ok {
		t.Error("a/shop/web-1 still in the store after its Deleted event")
	}
	if _, ok, _ := store.GetByKey("b/shop/web-1"); !ok {
		t.Error("b/shop/web-1 left with a/shop/web-1")
	}
	if added.Load() != 4 || deleted.Load() != 1 {
		t.Errorf("handler told %d adds and %d deletes, want 4 and 1", added.Load(), deleted.Load())
	}
}

// noWatchList is a ListWatch whose watch does not stream the initial list (a fake
// watcher sends no initial-events bookmark), so that the reflector lists instead.
type noWatchList struct{ *cache.ListWatch }

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }
