package informer

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/wire"
)

// encodedObject decodes data as the dynamic clients of a Set that encodes decode the
// objects of watch events.
func encodedObject(t *testing.T, data []byte) *wire.EncodedObject {
	t.Helper()
	m, encoded, err := new(jsondec.Decoder).ObjectCBOR(data)
	if err != nil || encoded == nil {
		t.Fatalf("not decoded with its encoding: %v", err)
	}
	return &wire.EncodedObject{Unstructured: &unstructured.Unstructured{Object: m}, Encoded: encoded}
}

func TestTransformOfEncoded(t *testing.T) {
	secretsMapping := Mapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespaced: true}
	known := cache.NewStore(cache.MetaNamespaceKeyFunc)
	tests := []struct {
		name  string
		opts  Options
		m     Mapping
		keeps bool
	}{
		{"plain", Options{}, podsMapping, true},
		{"managed fields kept", Options{KeepManagedFields: true}, podsMapping, true},
		{"secrets", Options{}, secretsMapping, false},
		{"secrets with their data", Options{KeepSecretData: true}, secretsMapping, true},
		{"user transform", Options{Transform: func(obj any) (any, error) { return obj, nil }}, podsMapping, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := encodedObject(t, podJSON)
			out, err := transform(tt.opts, tt.m, known, true)(in)
			if err != nil {
				t.Fatal(err)
			}
			if tt.keeps {
				if out != in {
					t.Errorf("got %T, want the wire.EncodedObject as it came", out)
				}
				return
			}
			if u, ok := out.(*unstructured.Unstructured); !ok || u != in.Unstructured {
				t.Errorf("got %T, want the object without its encoding", out)
			}
		})
	}
}

// recordingStore is a Store and an EncodedStore that records how objects were applied.
type recordingStore struct {
	cache.Store
	applied []string
}

func (r *recordingStore) Apply(obj runtime.Object, _ bool) error {
	r.applied = append(r.applied, fmt.Sprintf("Apply %T", obj))
	return nil
}

func (r *recordingStore) ApplyEncoded(obj *unstructured.Unstructured, encoded []byte, _ bool) error {
	r.applied = append(r.applied, fmt.Sprintf("ApplyEncoded %d bytes", len(encoded)))
	return nil
}

func (r *recordingStore) Delete(obj runtime.Object, finalStateUnknown bool) error {
	r.applied = append(r.applied, fmt.Sprintf("Delete %T %v", obj, finalStateUnknown))
	return nil
}

func (r *recordingStore) MarkSynced() {}

func TestProcessDeltasHandsOverEncodings(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "a", "resourceVersion": "1"}}}
	e := &wire.EncodedObject{Unstructured: u, Encoded: []byte{0xa0}}
	store := &recordingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	err := applyDeltas(store, cache.Deltas{
		{Type: cache.Added, Object: e},
		{Type: cache.Updated, Object: u},
		{Type: cache.Replaced, Object: e},
		{Type: cache.Deleted, Object: e},
		{Type: cache.Deleted, Object: cache.DeletedFinalStateUnknown{Key: "a", Obj: e}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ApplyEncoded 1 bytes",
		"Apply *unstructured.Unstructured",
		"ApplyEncoded 1 bytes",
		"Delete *unstructured.Unstructured false",
		"Delete *unstructured.Unstructured true",
	}
	if !reflect.DeepEqual(store.applied, want) {
		t.Errorf("got %q\nwant %q", store.applied, want)
	}
}

// partialRecordingStore is a recordingStore that is a PartialStore.
type partialRecordingStore struct{ recordingStore }

func (r *partialRecordingStore) ApplyPartial(partial runtime.Object, encoded []byte, _ bool) error {
	r.applied = append(r.applied, fmt.Sprintf("ApplyPartial %T %s %d bytes", partial, partial.(metav1.Object).GetName(), len(encoded)))
	return nil
}

func TestProcessDeltasHandsOverPartials(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "a", "resourceVersion": "1"}}}
	whole := &wire.EncodedObject{Unstructured: u, Encoded: []byte{0xa0}}
	partial := whole.ToPartial()
	deltas := cache.Deltas{{Type: cache.Replaced, Object: partial}, {Type: cache.Added, Object: whole}}

	store := &partialRecordingStore{recordingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}}
	if err := applyDeltas(store, deltas, true); err != nil {
		t.Fatal(err)
	}
	// The partial object is handed on as it is, so that the store reads what files it
	// from what the object read when it was made, not from its map.
	want := []string{"ApplyPartial *wire.EncodedObject a 1 bytes", "ApplyEncoded 1 bytes"}
	if !reflect.DeepEqual(store.applied, want) {
		t.Errorf("got %q\nwant %q", store.applied, want)
	}

	// A store that needs whole objects must not take a partial one for one.
	other := &recordingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
	if err := applyDeltas(other, deltas, true); err == nil {
		t.Error("a partial object went to a store that is not a PartialStore without an error")
	}
	if want := []string{"ApplyEncoded 1 bytes"}; !reflect.DeepEqual(other.applied, want) {
		t.Errorf("got %q\nwant %q", other.applied, want)
	}
}

func TestToPartial(t *testing.T) {
	whole := encodedObject(t, podJSON)
	p := whole.ToPartial()
	if !p.Partial || &p.Encoded[0] != &whole.Encoded[0] {
		t.Fatal("ToPartial did not keep the encoding, or did not mark the object partial")
	}
	want := map[string]any{"apiVersion": whole.GetAPIVersion(), "kind": whole.GetKind(), "metadata": map[string]any{
		"name": whole.GetName(), "namespace": whole.GetNamespace(), "uid": string(whole.GetUID()),
		"resourceVersion": whole.GetResourceVersion(), "labels": whole.Object["metadata"].(map[string]any)["labels"],
	}}
	if !reflect.DeepEqual(p.Object, want) {
		t.Errorf("partial object %v\nwant %v", p.Object, want)
	}
	for _, transformed := range []Options{{}, {Transform: func(obj any) (any, error) { return obj, nil }}} {
		out, err := transform(transformed, podsMapping, cache.NewStore(cache.MetaNamespaceKeyFunc), true)(p)
		switch {
		case transformed.Transform == nil && (err != nil || out != p):
			t.Errorf("transform without a user Transform: %T, %v; want the partial object as it came", out, err)
		case transformed.Transform != nil && err == nil:
			t.Errorf("a user Transform was given a partial object: %T", out)
		}
	}
}

// TestInitialEventsPartial: the objects of a streaming list's initial events come partial
// with their encodings for a PartialStore, and whole without them otherwise; the bookmark
// that ends them is read whole.
func TestInitialEventsPartial(t *testing.T) {
	bookmark := func() *wire.EncodedObject {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{
			"resourceVersion": "9", "annotations": map[string]any{metav1.InitialEventsAnnotationKey: "true"}}}}
		return &wire.EncodedObject{Unstructured: u, Encoded: []byte{0xa0}}
	}
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			lw := &listWatch{partial: partial}
			listed := encodedObject(t, podJSON)
			ev := lw.initialEvent(watch.Event{Type: watch.Added, Object: listed})
			if partial {
				if e, ok := ev.Object.(*wire.EncodedObject); !ok || !e.Partial || e.GetName() != listed.GetName() {
					t.Errorf("listed object: %T %v, want it partial with its encoding", ev.Object, ev.Object)
				}
			} else if ev.Object != listed.Unstructured {
				t.Errorf("listed object: %T, want it whole without its encoding", ev.Object)
			}
			if ev := lw.initialEvent(watch.Event{Type: watch.Bookmark, Object: bookmark()}); ev.Type != watch.Bookmark || !isInitialEventsEnd(ev.Object) {
				t.Errorf("got %s %T, want the bookmark that ends the initial events", ev.Type, ev.Object)
			}
		})
	}
}

// applyDeltas applies deltas to store as an informer does, each whatever the others
// did, and returns their errors.
func applyDeltas(store Store, deltas cache.Deltas, initialList bool) error {
	a := newApplier(store)
	var errs []error
	for _, d := range deltas {
		errs = append(errs, a.apply(d, initialList))
	}
	return errors.Join(errs...)
}

// TestDeletedPartial: the object of a watched deletion that came partial reaches the
// store whole, decoded from its encoding.
func TestDeletedPartial(t *testing.T) {
	whole := encodedObject(t, podJSON)
	var deleted runtime.Object
	store := &deletingStore{recordingStore: recordingStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}, deleted: &deleted}
	if err := applyDeltas(store, cache.Deltas{{Type: cache.Deleted, Object: whole.ToPartial()}}, false); err != nil {
		t.Fatal(err)
	}
	if u, ok := deleted.(*unstructured.Unstructured); !ok || !reflect.DeepEqual(u.Object, whole.Object) {
		t.Errorf("deleted %T %v\nwant the whole object %v", deleted, deleted, whole.Object)
	}
}

// deletingStore is a partialRecordingStore that keeps the object of the last Delete.
type deletingStore struct {
	recordingStore
	deleted *runtime.Object
}

func (s *deletingStore) ApplyPartial(partial runtime.Object, encoded []byte, _ bool) error {
	return nil
}

func (s *deletingStore) Delete(obj runtime.Object, _ bool) error {
	*s.deleted = obj
	return nil
}

// TestObjectKey: the informers key an object as
// cache.DeletionHandlingMetaNamespaceKeyFunc does, a wire.EncodedObject, whole or
// partial, by the key it read when it was made.
func TestObjectKey(t *testing.T) {
	namespaced := encodedObject(t, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}`))
	clusterScoped := encodedObject(t, []byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n","resourceVersion":"4"}}`))
	for name, obj := range map[string]any{
		"whole":                  namespaced,
		"partial":                namespaced.ToPartial(),
		"cluster-scoped partial": clusterScoped.ToPartial(),
		"unstructured":           namespaced.Unstructured,
		"metadata":               &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}},
		"tombstone":              cache.DeletedFinalStateUnknown{Key: "ns/gone", Obj: namespaced.ToPartial()},
		"a partial with no name": (&wire.EncodedObject{Unstructured: &unstructured.Unstructured{Object: map[string]any{}}}).ToPartial(),
	} {
		t.Run(name, func(t *testing.T) {
			want, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := objectKey(obj); got != want || err != nil {
				t.Errorf("key %q (%v), want %q", got, err, want)
			}
		})
	}
}
