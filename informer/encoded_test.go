package informer

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// checkEncoding fails t unless encoded is the CBOR of u's map.
func checkEncoding(t *testing.T, u *unstructured.Unstructured, encoded []byte) {
	t.Helper()
	var m map[string]any
	if err := direct.Unmarshal(encoded, &m); err != nil {
		t.Fatalf("the encoding does not decode: %v", err)
	}
	if !reflect.DeepEqual(m, u.Object) {
		t.Errorf("the encoding decodes to\n%v\nnot to the object\n%v", m, u.Object)
	}
}

// TestDynamicClientEncodes checks that the dynamic clients of a Set that encodes return
// the objects of watch events with their encoding, and everything else as before.
func TestDynamicClientEncodes(t *testing.T) {
	repeated := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"twice","name":"twice","resourceVersion":"13"}}`
	events := []string{
		`{"type":"ADDED","object":` + string(podJSON) + `}`,
		`{"type":"MODIFIED","object":` + repeated + `}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			for _, ev := range events {
				fmt.Fprintln(w, ev)
			}
			return
		}
		fmt.Fprint(w, podListJSON(2))
	}))
	defer srv.Close()
	drop, keep, err := newDynamicClients(&rest.Config{Host: srv.URL}, 1, true)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}

	// Lists are decoded into the caller's list, as before.
	list, err := drop.Resource(gvr).Namespace("shop-prod").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Items[0].GetManagedFields() != nil {
		t.Fatalf("listed %d items", len(list.Items))
	}

	for _, c := range []struct {
		name          string
		managedFields bool
	}{{"drop", false}, {"keep", true}} {
		t.Run(c.name, func(t *testing.T) {
			client := drop
			if c.managedFields {
				client = keep
			}
			w, err := client.Resource(gvr).Namespace("shop-prod").Watch(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			ev := <-w.ResultChan()
			e, ok := ev.Object.(*encodedObject)
			if ev.Type != watch.Added || !ok {
				t.Fatalf("first event %s %T, want an encodedObject", ev.Type, ev.Object)
			}
			if got := e.GetManagedFields() != nil; got != c.managedFields {
				t.Errorf("managedFields decoded: %v", got)
			}
			checkEncoding(t, e.Unstructured, e.encoded)

			// An object that has no faithful encoding comes without.
			ev = <-w.ResultChan()
			if u, ok := ev.Object.(*unstructured.Unstructured); ev.Type != watch.Modified || !ok || u.GetName() != "twice" {
				t.Errorf("second event %s %T", ev.Type, ev.Object)
			}
			if ev := <-w.ResultChan(); ev.Type != watch.Error {
				t.Errorf("third event %s %T, want an error", ev.Type, ev.Object)
			}
		})
	}
}

func TestTransformOfEncoded(t *testing.T) {
	encoded := func(t *testing.T) *encodedObject {
		obj, _, ok := decodeEncoded(newDecoderPool(1).get(), podJSON)
		if !ok {
			t.Fatal("not decoded")
		}
		return obj.(*encodedObject)
	}
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
			in := encoded(t)
			out, err := transform(tt.opts, tt.m, known, true)(in)
			if err != nil {
				t.Fatal(err)
			}
			if tt.keeps {
				if out != in {
					t.Errorf("got %T, want the encodedObject as it came", out)
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
	e := &encodedObject{Unstructured: u, encoded: []byte{0xa0}}
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
