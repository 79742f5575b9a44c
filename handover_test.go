package fleetwatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

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
		if err := store.ExportCluster(cluster, &buf, persist.ExportOptions{}); err != nil {
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

// TestHandoverStateKeptUntilReceived: a moved cluster's state, kept from the snapshot
// once its informers stopped, is what the snapshot held, and is given again, the same
// bytes, until its new owner received it.
func TestHandoverStateKeptUntilReceived(t *testing.T) {
	m, _ := oldOwner(t)
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
	cs, err := into.ImportCluster("prod", bytes.NewReader(state), persist.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rs := cs.Resources[key]; rs == nil || rs.ResourceVersion != "9" || len(rs.Objects) != 1 {
		t.Errorf("the state holds %+v", rs)
	}
	if again, ok := m.HandoverState("prod"); !ok || !bytes.Equal(again, state) {
		t.Error("the state was not given again before it was received")
	}
	if !m.HandoverReceived("prod") {
		t.Error("HandoverReceived: the state was not kept")
	}
	if _, ok := m.HandoverState("prod"); ok || m.HandoverReceived("prod") {
		t.Error("the state was kept after it was received")
	}
	if _, ok := m.HandoverState("staging"); ok {
		t.Error("a state of a cluster not handed over")
	}
}

// ackFetcher is a StateFetcher and StateAcknowledger that answers each attempt as told.
type ackFetcher struct {
	mu       sync.Mutex
	attempts []func() (io.ReadCloser, error)
	fetches  int
	acks     int
}

func (f *ackFetcher) FetchState(ctx context.Context, h shard.Handover) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := min(f.fetches, len(f.attempts)-1)
	f.fetches++
	return f.attempts[i]()
}

func (f *ackFetcher) AcknowledgeState(ctx context.Context, h shard.Handover) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks++
	return nil
}

// brokenReader reads part of a state, then fails as a connection reset does.
type brokenReader struct {
	r io.Reader
}

func (b *brokenReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		return n, &TransientError{Err: errors.New("read: connection reset by peer")}
	}
	return n, err
}

// TestReceiveRetries: a transient failure of the fetch (no connection, a 5xx, a stream
// cut off half-way) is tried again within the timeout, and the state is then imported
// whole and acknowledged; a final one (a 403, a corrupt state) is not tried again; a
// Retry-After past the timeout ends the attempts at once; and the attempts end with the
// timeout.
func TestReceiveRetries(t *testing.T) {
	state := keptState(t)
	whole := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(state)), nil }
	refused := func() (io.ReadCloser, error) {
		return nil, &TransientError{Err: errors.New("dial tcp: connection refused")}
	}
	unavailable := func() (io.ReadCloser, error) {
		return nil, &TransientError{Err: errors.New("answered 503"), RetryAfter: time.Hour}
	}
	cutOff := func() (io.ReadCloser, error) {
		return io.NopCloser(&brokenReader{r: bytes.NewReader(state[:len(state)/2])}), nil
	}
	forbidden := func() (io.ReadCloser, error) { return nil, errors.New("answered 403 Forbidden") }
	corrupt := func() (io.ReadCloser, error) {
		b := bytes.Clone(state)
		b[len(b)/2] ^= 0x10
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	tests := []struct {
		name     string
		attempts []func() (io.ReadCloser, error)
		timeout  time.Duration
		warm     bool
		fetches  int // -1: more than one
		acks     int
		within   time.Duration
	}{
		{"refused twice, then whole", []func() (io.ReadCloser, error){refused, refused, whole}, 10 * time.Second, true, 3, 1, 5 * time.Second},
		{"cut off half-way, then whole", []func() (io.ReadCloser, error){cutOff, whole}, 10 * time.Second, true, 2, 1, 5 * time.Second},
		{"forbidden", []func() (io.ReadCloser, error){forbidden, whole}, 10 * time.Second, false, 1, 0, time.Second},
		{"corrupt", []func() (io.ReadCloser, error){corrupt, whole}, 10 * time.Second, false, 1, 1, time.Second},
		{"a Retry-After past the timeout", []func() (io.ReadCloser, error){unavailable, whole}, 10 * time.Second, false, 1, 0, time.Second},
		{"refused until the timeout", []func() (io.ReadCloser, error){refused}, time.Second, false, -1, 0, 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store, err := persist.Open(filepath.Join(t.TempDir(), "new.db"), persist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer store.Close()
			f := &ackFetcher{attempts: tt.attempts}
			m, err := NewManager(Options{
				Clusters:        cluster.Options{Kubeconfigs: []string{t.TempDir()}},
				Resources:       []informer.Resource{{Name: "pods"}},
				Snapshot:        store,
				DisableGCTuning: true,
				Handover:        HandoverOptions{Fetcher: f, Timeout: tt.timeout},
			})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			m.Receive(t.Context(), shard.Handover{Cluster: "prod", From: "r0", Address: "https://r0"})
			if took := time.Since(start); took > tt.within {
				t.Errorf("Receive took %v, want at most %v", took, tt.within)
			}
			m.mu.Lock()
			warm := m.saved["prod"] != nil
			m.mu.Unlock()
			f.mu.Lock()
			defer f.mu.Unlock()
			if warm != tt.warm {
				t.Errorf("warm: %v, want %v", warm, tt.warm)
			}
			if tt.fetches == -1 && f.fetches < 2 || tt.fetches >= 0 && f.fetches != tt.fetches {
				t.Errorf("%d fetches, want %d (-1: more than one)", f.fetches, tt.fetches)
			}
			if f.acks != tt.acks {
				t.Errorf("%d acknowledgements, want %d", f.acks, tt.acks)
			}
		})
	}
}

// oldOwner returns a Manager over a snapshot of its own, which keeps the states of the
// clusters it hands over, and its snapshot.
func oldOwner(t *testing.T) (*Manager, *persist.Store) {
	t.Helper()
	store, err := persist.Open(filepath.Join(t.TempDir(), "old.db"), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
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
	return m, store
}

// keptState returns the state of cluster "prod", one pod at resourceVersion 9, as its
// old owner keeps it.
func keptState(t *testing.T) []byte {
	t.Helper()
	m, store := oldOwner(t)
	setOpts := informer.Options{}
	key := persist.ResourceKey(informer.Scope{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Spec: setOpts.Spec(informer.Resource{Name: "pods"})}.String())
	pod := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	pod.SetNamespace("shop")
	pod.SetName("web")
	pod.SetResourceVersion("7")
	m.writer.Upsert("prod", key, pod)
	m.writer.Checkpoint("prod", key, "9")
	if err := store.SetIdentity("prod", persist.Identity{UID: "uid-prod", Server: "https://prod"}); err != nil {
		t.Fatal(err)
	}
	m.keepHandoff(t.Context(), "prod")
	state, ok := m.HandoverState("prod")
	if !ok {
		t.Fatal("no state kept")
	}
	return state
}
