package fleetwatch

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestColdClustersProbeAndIdentifyOnceReady: a cluster without saved state sends no
// health probe and no identity read while the fleet's initial sync runs, and sends both
// once the fleet is ready; one whose sync is slow is probed firstProbeDelay into it,
// ready or not.
func TestColdClustersProbeAndIdentifyOnceReady(t *testing.T) {
	const identity = "/api/v1/namespaces/kube-system?resourceVersion=0"
	run := func(t *testing.T, probeDelay, syncTimeout time.Duration) (*Manager, []*clustertest.Server) {
		restore := firstProbeDelay
		t.Cleanup(func() { firstProbeDelay = restore })
		firstProbeDelay = probeDelay
		var servers []*clustertest.Server
		var contexts []clustertest.Context
		for _, name := range []string{"a", "b"} {
			s := clustertest.NewServer(t)
			servers = append(servers, s)
			contexts = append(contexts, s.Context(name))
		}
		kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
		clustertest.WriteKubeconfig(t, kubeconfig, contexts...)
		m, err := NewManager(Options{
			Clusters:    cluster.Options{Kubeconfigs: []string{kubeconfig}},
			Resources:   []informer.Resource{{Name: "configmaps"}},
			SyncTimeout: syncTimeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		runManager(t, m)
		waitFor(t, "both clusters engaged", func() string {
			if len(m.Status()) != 2 {
				return "not engaged"
			}
			return ""
		})
		return m, servers
	}

	t.Run("ready", func(t *testing.T) {
		// The fake serves no discovery: the clusters never sync, and the fleet is
		// ready once their sync timeout has passed.
		const syncTimeout = time.Second
		m, servers := run(t, time.Minute, syncTimeout)
		time.Sleep(syncTimeout / 2)
		for i, s := range servers {
			if !m.Ready() && s.Requests("/readyz")+s.Requests(identity) != 0 {
				t.Errorf("cluster %d: %d probes and %d identity reads before the fleet is ready", i, s.Requests("/readyz"), s.Requests(identity))
			}
		}
		waitFor(t, "probed and identified once ready", func() string {
			for _, name := range []string{"a", "b"} {
				st, _ := m.ClusterStatus(name)
				if st.UID == "" || len(st.Conditions) == 0 || st.Conditions[0].Type != aggregate.ConditionReachable || st.Conditions[0].Reason != "ProbeSucceeded" {
					return fmt.Sprintf("%s: %s, UID %q, conditions %+v", name, st.Phase, st.UID, st.Conditions)
				}
			}
			return ""
		})
	})
	t.Run("slow sync", func(t *testing.T) {
		m, servers := run(t, 100*time.Millisecond, time.Minute)
		waitFor(t, "probed while syncing", func() string {
			for _, s := range servers {
				if s.Requests("/readyz") == 0 {
					return "not probed"
				}
			}
			return ""
		})
		if m.Ready() {
			t.Fatal("ready before the sync timeout")
		}
		for i, s := range servers {
			if n := s.Requests(identity); n != 0 {
				t.Errorf("cluster %d: %d identity reads before the fleet is ready", i, n)
			}
		}
	})
}

// TestSnapshotCommitsPerIntervalUntilReady: until a fleet of commitHoldClusters is
// ready, the snapshot writer commits once per interval, however many changes are
// checkpointed; once it is ready, MaxPending changes make it commit again. A smaller
// fleet commits every MaxPending changes throughout.
func TestSnapshotCommitsPerIntervalUntilReady(t *testing.T) {
	for _, hold := range []bool{true, false} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			restore := commitHoldClusters
			t.Cleanup(func() { commitHoldClusters = restore })
			if hold {
				commitHoldClusters = 1
			} else {
				commitHoldClusters = 2
			}
			srv := clustertest.NewServer(t)
			kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
			clustertest.WriteKubeconfig(t, kubeconfig, srv.Context("a"))
			store, err := persist.Open(filepath.Join(t.TempDir(), "fleetwatch.db"), persist.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			// The fake serves no discovery: the cluster never syncs, and the fleet is
			// ready once its sync timeout has passed.
			const syncTimeout = time.Second
			m, err := NewManager(Options{
				Clusters:        cluster.Options{Kubeconfigs: []string{kubeconfig}},
				Resources:       []informer.Resource{{Name: "configmaps"}},
				SyncTimeout:     syncTimeout,
				Snapshot:        store,
				SnapshotWriter:  persist.WriterOptions{Interval: time.Hour, MaxPending: 10},
				DisableGCTuning: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			runManager(t, m)
			waitFor(t, "the cluster engaged", func() string {
				if _, ok := m.ClusterStatus("a"); !ok {
					return "not engaged"
				}
				return ""
			})
			w := m.snapshotWriter()
			key := persist.ResourceKey("/v1/configmaps")
			for i := range 30 {
				u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}}
				u.SetNamespace("default")
				u.SetName(fmt.Sprintf("cm-%03d", i))
				u.SetResourceVersion(fmt.Sprint(100 + i))
				w.Upsert("a", key, u)
				w.Checkpoint("a", key, fmt.Sprint(100+i))
			}
			if !hold {
				waitFor(t, "a commit before the fleet is ready", func() string {
					if st := w.Stats(); st.Commits == 0 {
						return fmt.Sprintf("ready %v, %d pending", m.Ready(), st.Pending)
					}
					return ""
				})
				if m.Ready() {
					t.Error("ready before the sync timeout")
				}
				return
			}
			time.Sleep(syncTimeout / 2)
			if st := w.Stats(); !m.Ready() && st.Commits != 0 {
				t.Errorf("%d commits of %d checkpointed changes before the fleet is ready, want none until the interval", st.Commits, st.Checkpointed)
			}
			waitFor(t, "a commit once ready", func() string {
				if st := w.Stats(); st.Commits == 0 {
					return fmt.Sprintf("ready %v, %d pending", m.Ready(), st.Pending)
				}
				return ""
			})
		})
	}
}

// TestStopReadsUnreadIdentities: a cluster started cold whose identity is still unread
// when the Manager stops (its read after the fleet was ready failed, and its retry is a
// second away) has it read at the stop, and saved with the snapshot's last commit, so
// that the next start resumes it rather than taking it as changed.
func TestStopReadsUnreadIdentities(t *testing.T) {
	const identity = "/api/v1/namespaces/kube-system?resourceVersion=0"
	srv := clustertest.NewServer(t)
	srv.SetFailure(http.StatusServiceUnavailable)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	clustertest.WriteKubeconfig(t, kubeconfig, srv.Context("a"))
	path := filepath.Join(t.TempDir(), "fleetwatch.db")
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// The fake serves no discovery: the cluster never syncs, and the fleet is ready once
	// its sync timeout has passed.
	m, err := NewManager(Options{
		Clusters:        cluster.Options{Kubeconfigs: []string{kubeconfig}},
		Resources:       []informer.Resource{{Name: "configmaps"}},
		SyncTimeout:     time.Second,
		Snapshot:        store,
		DisableGCTuning: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	waitFor(t, "an identity read that failed once the fleet is ready", func() string {
		if !m.Ready() || srv.Requests(identity) == 0 {
			return fmt.Sprintf("ready %v, %d identity reads", m.Ready(), srv.Requests(identity))
		}
		return ""
	})
	srv.SetFailure(0)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	snap, err := store.Load()
	if err != nil {
		t.Fatal(err)
	}
	cs := snap.Clusters["a"]
	if cs == nil || cs.Identity.UID != srv.UID() {
		t.Fatalf("saved %+v, want the identity of UID %s", cs, srv.UID())
	}
}
