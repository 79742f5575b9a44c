package aggregate

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func filedTestPod(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"metadata":   map[string]any{"namespace": "default", "name": name, "resourceVersion": "1"},
	}}
}

// getByKeyWithin calls s.GetByKey(key) and fails the test if it has not returned within
// a few seconds.
func getByKeyWithin(t *testing.T, s *ClusterStore, key string) (exists bool) {
	t.Helper()
	done := make(chan bool, 1)
	go func() {
		_, ok, _ := s.GetByKey(key)
		done <- ok
	}()
	select {
	case ok := <-done:
		return ok
	case <-time.After(5 * time.Second):
		t.Fatalf("GetByKey(%q) of cluster %s still waiting after 5 s", key, s.cluster)
		return false
	}
}

// TestGetByKeyOfAStoreThatHeldNothing checks that a cluster's store that has never held
// an object answers GetByKey without the Indexer's lock, which the other clusters'
// stores hold while they apply their lists (an informer's transform asks for every
// object of its first list), and that it answers from the Indexer once it holds one.
func TestGetByKeyOfAStoreThatHeldNothing(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	f := New(Options{})
	a, b := f.ClusterStore("a", gvr), f.ClusterStore("b", gvr)
	if err := a.Apply(filedTestPod("p"), true); err != nil {
		t.Fatal(err)
	}

	// Another cluster's writer holds the lock: b, which never held an object, answers.
	b.ix.lock.Lock()
	if getByKeyWithin(t, b, "default/p") {
		t.Error("b holds a's object")
	}
	b.ix.lock.Unlock()

	if err := b.Apply(filedTestPod("q"), true); err != nil {
		t.Fatal(err)
	}
	if !getByKeyWithin(t, b, "default/q") {
		t.Error("b does not hold the object applied to it")
	}
	if getByKeyWithin(t, b, "default/p") {
		t.Error("b holds a's object")
	}

	// Once removed and made again, the store holds nothing, and says so without the lock.
	f.RemoveCluster("b")
	b = f.ClusterStore("b", gvr)
	b.ix.lock.Lock()
	if getByKeyWithin(t, b, "default/q") {
		t.Error("b holds an object of the store that was removed")
	}
	b.ix.lock.Unlock()
	if !getByKeyWithin(t, a, "default/p") {
		t.Error("a lost its object")
	}
}

// TestStoreMadeOverFiledObjects checks that a store made while the Indexer holds
// objects of its cluster (which no write path of the fleet leaves behind today) reads
// them under the lock rather than answering that it holds nothing.
func TestStoreMadeOverFiledObjects(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	f := New(Options{})
	a := f.ClusterStore("a", gvr)
	if err := a.Apply(filedTestPod("p"), true); err != nil {
		t.Fatal(err)
	}
	ix := a.ix
	ix.lock.Lock()
	delete(ix.stores, "a")
	ix.lock.Unlock()
	if again := f.ClusterStore("a", gvr); again == a || !getByKeyWithin(t, again, "default/p") {
		t.Error("a store made over the cluster's objects does not read them")
	}
}
