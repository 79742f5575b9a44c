package informer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// countingCodec is a JSON Codec that counts its decodings.
type countingCodec struct{ decodes *atomic.Int64 }

func (countingCodec) Encode(obj runtime.Object) ([]byte, error) {
	return json.Marshal(obj.(*unstructured.Unstructured).Object)
}

func (c countingCodec) Decode(data []byte) (runtime.Object, error) {
	c.decodes.Add(1)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// TestSeededListDecodesNothing: the seeded first list of an informer over a compact
// fleet's store is the keys and resourceVersions of the stored objects: no object is
// decoded, the store keeps what it held, and a handler sees no event.
func TestSeededListDecodesNothing(t *testing.T) {
	var decodes atomic.Int64
	fleet := aggregate.New(aggregate.Options{Codec: countingCodec{&decodes}, HotObjects: 1})
	store := fleet.ClusterStore("prod", podsMapping.Resource)
	go fleet.Start(t.Context())
	var added, updated atomic.Int64 // before the seeded list, and during it
	if _, err := fleet.AddHandler(aggregate.HandlerFunc(func(ev aggregate.Event) {
		switch ev.Type {
		case aggregate.Added:
			added.Add(1)
		case aggregate.Updated:
			updated.Add(1)
		}
	}), aggregate.HandlerOptions{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]*unstructured.Unstructured{}
	for i := range 5 {
		u := podAt(fmt.Sprintf("pod-%d", i), fmt.Sprint(10+i))
		u.Object["spec"] = map[string]any{"nodeName": "node-1"}
		want[u.GetName()] = u
		if err := store.Apply(u.DeepCopy(), true); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); added.Load() < int64(len(want)); {
		if time.Now().After(deadline) {
			t.Fatalf("%d Added events of the applied objects, want %d", added.Load(), len(want))
		}
		time.Sleep(time.Millisecond)
	}
	decodes.Store(0)
	added.Store(0)
	updated.Store(0)

	fw := watch.NewFake()
	lw := fakeListWatch(fw, time.Minute)
	lw.seed(store, podsMapping, false, "20")
	l := newLoop("test", lw, store, store, transform(Options{}, podsMapping, store, true), nil, func(context.Context, error) {})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go l.run(ctx)
	select {
	case <-l.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("the informer did not sync")
	}
	if n := decodes.Load(); n != 0 {
		t.Errorf("the seeded list decoded %d objects", n)
	}
	if a, u := added.Load(), updated.Load(); a+u != 0 {
		t.Errorf("%d Added and %d Updated events", a, u)
	}
	if n := store.Len(); n != len(want) {
		t.Fatalf("the store holds %d objects, want %d", n, len(want))
	}
	for name, w := range want {
		got, ok, _ := store.GetByKey("shop/" + name)
		if !ok || !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %v, want %v", name, got, w)
		}
	}
}
