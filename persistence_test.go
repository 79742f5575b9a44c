package fleetwatch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestSeedDropsScopesConfiguredDifferently: a snapshot scope saved under another
// configuration than the current one is not loaded into the fleet, but dropped from the
// snapshot; when it held the values of Secrets, the file is compacted, and holds none.
func TestSeedDropsScopesConfiguredDifferently(t *testing.T) {
	const value = "c2VlZC1zZWNyZXQtdmFsdWUtMTIzNDU2"
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	object := func(kind, name string, data map[string]any) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind, "data": data}}
		u.SetNamespace("shop")
		u.SetName(name)
		u.SetResourceVersion("5")
		return u
	}
	keep, drop := &informer.Options{KeepSecretData: true}, &informer.Options{}
	scope := func(gvr schema.GroupVersionResource, opts *informer.Options) persist.ResourceKey {
		return persist.ResourceKey(informer.Scope{Resource: gvr, Spec: opts.Spec(informer.Resource{Name: gvr.Resource})}.String())
	}
	tests := []struct {
		name string
		// saved is the options of the run that saved the Secrets; now, of this one.
		saved, now  *informer.Options
		wantSecrets int
	}{
		{"same configuration", keep, keep, 1},
		{"values kept, now dropped", keep, drop, 0},
		{"values dropped, now kept", drop, keep, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fleetwatch.db")
			store, err := persist.Open(path, persist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			w := store.NewWriter(persist.WriterOptions{})
			data := map[string]any{}
			if tt.saved.KeepSecretData {
				data["password"] = value
			}
			w.Upsert("prod", scope(secrets, tt.saved), object("Secret", "db", data))
			w.Upsert("prod", scope(pods, tt.now), object("Pod", "web", nil))
			w.Checkpoint("prod", scope(secrets, tt.saved), "5")
			w.Checkpoint("prod", scope(pods, tt.now), "5")
			if err := w.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			if err := store.Close(); err != nil {
				t.Fatal(err)
			}

			if store, err = persist.Open(path, persist.Options{}); err != nil {
				t.Fatal(err)
			}
			snap, err := store.Load()
			if err != nil {
				t.Fatal(err)
			}
			fleet := aggregate.New(aggregate.Options{})
			specs := map[string]bool{}
			for _, r := range []string{"secrets", "pods"} {
				specs[tt.now.Spec(informer.Resource{Name: r})] = true
			}
			saved := seed(context.Background(), fleet, snap, specs, store, nil)

			if got, _ := fleet.Lister(secrets).List(labels.Everything()); len(got) != tt.wantSecrets {
				t.Errorf("%d Secrets loaded, want %d", len(got), tt.wantSecrets)
			}
			if got, _ := fleet.Lister(pods).List(labels.Everything()); len(got) != 1 {
				t.Errorf("%d pods loaded, want 1", len(got))
			}
			if n := len(saved["prod"].scopes); n != 1+tt.wantSecrets {
				t.Errorf("%d scopes seed informers, want %d", n, 1+tt.wantSecrets)
			}
			if snap, err = store.Load(); err != nil {
				t.Fatal(err)
			}
			if n := len(snap.Clusters["prod"].Resources); n != 1+tt.wantSecrets {
				t.Errorf("%d scopes left in the snapshot, want %d", n, 1+tt.wantSecrets)
			}
			file, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if holds := bytes.Contains(file, []byte(value)); holds != (tt.wantSecrets > 0 && tt.saved.KeepSecretData) {
				t.Errorf("the file holds the value: %v", holds)
			}
		})
	}
}

// embeddedObject is an object that embeds an Unstructured, as the informer's partial
// objects (wire.EncodedObject) do.
type embeddedObject struct{ *unstructured.Unstructured }

// TestPersistingStorePartial: the snapshot's store of a compact fleet takes a partial
// object as an *unstructured.Unstructured or as an object that embeds one (what the
// informer hands on), and stores both; any other type is refused with an error.
func TestPersistingStorePartial(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	key := persist.ResourceKey(informer.Scope{Resource: pods}.String())
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	snapshot, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer snapshot.Close()
	w := snapshot.NewWriter(persist.WriterOptions{})
	fleet := aggregate.New(aggregate.Options{Codec: persist.Codec{}})
	store := &persistingStore{ClusterStore: fleet.ClusterStore("prod", pods), writer: w, cluster: "prod", key: key, compact: true}
	pod := func(name string) (*unstructured.Unstructured, []byte) {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
		u.SetNamespace("shop")
		u.SetName(name)
		u.SetResourceVersion("5")
		encoded, err := persist.Codec{}.Encode(u)
		if err != nil {
			t.Fatal(err)
		}
		return u, encoded
	}
	u, encoded := pod("plain")
	if err := store.ApplyPartial(u, encoded, true); err != nil {
		t.Fatalf("ApplyPartial(*unstructured.Unstructured): %v", err)
	}
	u, encoded = pod("embedded")
	if err := store.ApplyPartial(embeddedObject{u}, encoded, true); err != nil {
		t.Fatalf("ApplyPartial(an embedded Unstructured): %v", err)
	}
	if err := store.ApplyPartial(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "typed"}}, encoded, true); err == nil {
		t.Error("ApplyPartial(*metav1.PartialObjectMetadata) succeeded, want an error")
	}
	w.Checkpoint("prod", key, "5")
	if err := w.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	snap, err := snapshot.Load()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, obj := range snap.Clusters["prod"].Resources[key].Objects {
		names = append(names, obj.(*unstructured.Unstructured).GetName())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"embedded", "plain"}) {
		t.Errorf("the snapshot holds %q, want embedded and plain", names)
	}
	if n := fleet.Indexer(pods).Len(); n != 2 {
		t.Errorf("the fleet holds %d pods, want 2", n)
	}
}
