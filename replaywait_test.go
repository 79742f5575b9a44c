package fleetwatch

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// blockingHandler holds its first event until release is closed.
type blockingHandler struct {
	once    sync.Once
	release chan struct{}
}

func (h *blockingHandler) OnEvent(aggregate.Event) { h.once.Do(func() { <-h.release }) }

// TestWarmClustersResumeAfterTheHandlersReplay: a cluster served from the snapshot makes
// no request (identity, probe, discovery) while a handler of the fleet is still being
// delivered the snapshot's state, and resumes once it has been; a handler that takes
// longer than replayWait holds it back no longer. The same for a handler added while
// the snapshot loads in the background (as the daemon's server is), which is delivered
// the loaded objects as events rather than as its replay.
func TestWarmClustersResumeAfterTheHandlersReplay(t *testing.T) {
	defer func(w time.Duration) { replayWait = w }(replayWait)
	replayWait = time.Second
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	resources := []informer.Resource{{Name: "configmaps"}}
	key := persist.ResourceKey(informer.Scope{Resource: configMaps, Spec: (&informer.Options{}).Spec(resources[0])}.String())
	for _, tc := range []struct{ release, background bool }{{true, false}, {false, false}, {true, true}, {false, true}} {
		release := tc.release
		t.Run(fmt.Sprintf("release=%v,background=%v", release, tc.background), func(t *testing.T) {
			srv := clustertest.NewServer(t)
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			clustertest.WriteKubeconfig(t, kubeconfig, srv.Context("a"))
			store := writeConfigMapSnapshot(t, key, map[string]persist.Identity{"a": {UID: srv.UID(), Server: srv.URL}}, 20)
			// In the background, the load waits for the handler to be added to the
			// empty fleet.
			added := make(chan struct{})
			if tc.background {
				testHookSeeded = func(string) error { <-added; return nil }
				defer func() { testHookSeeded = nil }()
			}
			m, err := NewManager(Options{
				Clusters:                 cluster.Options{Kubeconfigs: []string{kubeconfig}},
				Resources:                resources,
				Snapshot:                 store,
				LoadSnapshotInBackground: tc.background,
				DisableGCTuning:          true,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := &blockingHandler{release: make(chan struct{})}
			if _, err := m.Fleet().AddHandler(h, aggregate.HandlerOptions{Name: "slow"}); err != nil {
				t.Fatal(err)
			}
			close(added)
			runManager(t, m)
			const identity = "/api/v1/namespaces/kube-system"
			start := time.Now()
			waitFor(t, "the cluster engaged", func() string {
				if _, ok := m.ClusterStatus("a"); !ok {
					return "not engaged"
				}
				return ""
			})
			time.Sleep(replayWait / 2)
			if n := srv.Requests(identity) + srv.Requests("/readyz") + srv.Requests("/api"); n != 0 && time.Since(start) < replayWait {
				t.Errorf("%d requests to the cluster while a handler takes the snapshot's state", n)
			}
			if !m.Ready() {
				t.Error("not ready while served from the snapshot")
			}
			if release {
				close(h.release)
			}
			waitFor(t, "the identity read", func() string {
				if srv.Requests(identity) == 0 {
					return "not read"
				}
				return ""
			})
			if took := time.Since(start); release && took > replayWait {
				t.Errorf("the cluster resumed %v after the start, though the handler had taken the state", took)
			}
			if !release {
				close(h.release)
			}
		})
	}
}
