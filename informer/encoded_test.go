package informer

import (
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	err := processDeltas(store)(cache.Deltas{
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
