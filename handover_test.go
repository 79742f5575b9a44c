package fleetwatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/shard"
)

// fetcherFunc is a StateFetcher of a function.
type fetcherFunc func(ctx context.Context, h shard.Handover) (io.ReadCloser, error)

func (f fetcherFunc) FetchState(ctx context.Context, h shard.Handover) (io.ReadCloser, error) {
	return f(ctx, h)
}

// TestReceiveImportsOrStartsCold: a handed-over state that is whole, of the cluster and
// of the same configuration is imported into the snapshot and the fleet, to be resumed
// from; any other (a failed fetch, an empty, truncated or corrupt state, another
// cluster's, one of another configuration) leaves the cluster to start cold, with a
// clear log line and nothing of it imported.
func TestReceiveImportsOrStartsCold(t *testing.T) {
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	resources := []informer.Resource{{Name: "pods"}}
	setOpts := informer.Options{}
	scope := func(spec string) persist.ResourceKey {
		return persist.ResourceKey(informer.Scope{Resource: pods, Spec: spec}.String())
	}
	same := scope(setOpts.Spec(resources[0]))
	other := scope(setOpts.Spec(informer.Resource{Name: "pods", LabelSelector: "app=web"}))
	// export returns the state of cluster, as another replica exports it.
	export := func(t *testing.T, cluster string, key persist.ResourceKey) []byte {
		t.Helper()
		store, err := persist.Open(filepath.Join(t.TempDir(), "old.db"), persist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		w := store.NewWriter(persist.WriterOptions{})
		pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
		pod.SetNamespace("shop")
		pod.SetName("web")
		pod.SetResourceVersion("7")
		w.Upsert(cluster, key, pod)
		w.Checkpoint(cluster, key, "9")
		if err := w.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := store.SetIdentity(cluster, persist.Identity{UID: "uid-prod", Server: "https://prod"}); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := store.ExportCluster(cluster, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	good := export(t, "prod", same)
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)/2] ^= 0x10
	tests := []struct {
		name  string
		state []byte
		err   error
		warm  bool
	}{
		{"whole", good, nil, true},
		{"fetch failed", nil, errors.New("replica \"r0\" answered 403 Forbidden"), false},
		{"empty", []byte{}, nil, false},
		{"truncated", good[:len(good)-3], nil, false},
		{"corrupt", corrupt, nil, false},
		{"of another cluster", export(t, "staging", same), nil, false},
		{"of another configuration", export(t, "prod", other), nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := persist.Open(filepath.Join(t.TempDir(), "new.db"), persist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			m, err := NewManager(Options{
				Clusters:        cluster.Options{Kubeconfigs: []string{t.TempDir()}},
				Resources:       resources,
				Snapshot:        store,
				DisableGCTuning: true,
				Handover: HandoverOptions{Fetcher: fetcherFunc(func(ctx context.Context, h shard.Handover) (io.ReadCloser, error) {
					if h.Cluster != "prod" || h.From != "r0" {
						t.Errorf("fetching %+v", h)
					}
					if tt.err != nil {
						return nil, tt.err
					}
					return io.NopCloser(bytes.NewReader(tt.state)), nil
				})},
			})
			if err != nil {
				t.Fatal(err)
			}
			m.Receive(t.Context(), shard.Handover{Cluster: "prod", From: "r0", Address: "https://r0"})
			// Receive's import is committed; what the writer still holds (the drop of a
			// state of another configuration) is committed too.
			if err := m.writer.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			m.mu.Lock()
			sv := m.saved["prod"]
			m.mu.Unlock()
			objs, err := m.fleet.Lister(pods).Cluster("prod").List(labels.Everything())
			if err != nil {
				t.Fatal(err)
			}
			snap, err := store.Load()
			if err != nil {
				t.Fatal(err)
			}
			stored := snap.Clusters["prod"]
			if !tt.warm {
				if sv != nil || len(objs) > 0 || stored != nil {
					t.Fatalf("a bad state was taken: saved %v, %d objects in the fleet, stored %v", sv != nil, len(objs), stored != nil)
				}
				return
			}
			if sv == nil || sv.identity.UID != "uid-prod" || len(objs) != 1 {
				t.Fatalf("the state was not taken: saved %+v, %d objects in the fleet", sv, len(objs))
			}
			if rs := stored.Resources[same]; rs == nil || rs.ResourceVersion != "9" || len(rs.Objects) != 1 {
				t.Fatalf("the snapshot holds %+v, want the pod at resourceVersion 9", rs)
			}
		})
	}
}

// TestHandoverStateIsGivenOnce: a moved cluster's state, kept from the snapshot once
// its informers stopped, is given once, and is what the snapshot held.
func TestHandoverStateIsGivenOnce(t *testing.T) {
	store, err := persist.Open(filepath.Join(t.TempDir(), "old.db"), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	m, err := NewManager(Options{
		Clusters:        cluster.Options{Kubeconfigs: []string{t.TempDir()}},
		Resources:       []informer.Resource{{Name: "pods"}},
		Snapshot:        store,
		DisableGCTuning: true,
		Handover:        HandoverOptions{Fetcher: fetcherFunc(nil)},
	})
	if err != nil {
		t.Fatal(err)
	}
	key := persist.ResourceKey("/v1/pods")
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	pod.SetNamespace("shop")
	pod.SetName("web")
	m.writer.Upsert("prod", key, pod)
	m.writer.Checkpoint("prod", key, "9")
	m.keepHandoff(t.Context(), "prod")
	state, ok := m.HandoverState("prod")
	if !ok {
		t.Fatal("no state kept")
	}
	into, err := persist.Open(filepath.Join(t.TempDir(), "new.db"), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer into.Close()
	cs, err := into.ImportCluster("prod", bytes.NewReader(state))
	if err != nil {
		t.Fatal(err)
	}
	if rs := cs.Resources[key]; rs == nil || rs.ResourceVersion != "9" || len(rs.Objects) != 1 {
		t.Errorf("the state holds %+v", rs)
	}
	if _, ok := m.HandoverState("prod"); ok {
		t.Error("the state was given twice")
	}
	if _, ok := m.HandoverState("staging"); ok {
		t.Error("a state of a cluster not handed over")
	}
}
