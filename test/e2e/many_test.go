package e2e

import (
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
)

// manyContexts is the number of contexts of TestManyContextsWarmWhilePaused.
const manyContexts = 1000

// TestManyContextsWarmWhilePaused: a fleet of 1,000 contexts over 3 apiservers (each
// context a cluster of its own) syncs cold into a snapshot. Then, with every apiserver
// paused (SIGSTOP), a warm restart is ready and serves every object of every context
// from the snapshot, each cluster Stale, "served from the snapshot": nothing waits for a
// round trip to a cluster. Once the apiservers resume, every cluster confirms its
// identity and resumes its watches, no LIST reaches an apiserver, and the cache equals
// the servers. Not timed: the bounds are only there so that a hang fails.
func TestManyContextsWarmWhilePaused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	ctx := t.Context()
	const pods = 4
	createManyPods(t, env, pods)
	dir := t.TempDir()
	kubeconfig, contextsOf := writeManyContexts(t, env, dir, manyContexts)
	// truth is what every context should hold: its apiserver's pods.
	truth := func() map[string]string { return manyTruth(t, env, contextsOf) }
	want := truth()
	if len(want) != manyContexts*pods {
		t.Fatalf("%d objects in truth, want %d", len(want), manyContexts*pods)
	}

	path := filepath.Join(dir, "fleetwatch.db")
	run := func() (*fleetwatch.Manager, func()) {
		store, err := persist.Open(path, persist.Options{})
		if err != nil {
			t.Fatal(err)
		}
		mgr, stop := startManager(t, fleetwatch.Options{
			Clusters:       cluster.Options{Kubeconfigs: []string{kubeconfig}},
			Resources:      []informer.Resource{{Name: "pods"}},
			SyncTimeout:    10 * time.Minute,
			Snapshot:       store,
			SnapshotWriter: persist.WriterOptions{Interval: 100 * time.Millisecond},
		}, nil)
		return mgr, func() {
			stop()
			if err := store.Close(); err != nil {
				t.Errorf("closing the snapshot: %v", err)
			}
		}
	}
	equalsTruth := func(mgr *fleetwatch.Manager, want map[string]string) string {
		got := fleetCache(t, mgr.Fleet(), podsGVR)
		if maps.Equal(got, want) {
			return ""
		}
		return fmt.Sprintf("the cache holds %d objects, want %d; %s", len(got), len(want), diffRVs(want, got))
	}

	// Cold: every context syncs.
	mgr, stop := run()
	eventually(t, 10*time.Minute, "the cold fleet synced and equal to the servers", func() string {
		if !mgr.HasSynced() {
			return "not synced"
		}
		return equalsTruth(mgr, want)
	})
	eventually(t, time.Minute, "the snapshot committed", func() string {
		st, _ := mgr.SnapshotStats()
		if st.Pending > 0 {
			return fmt.Sprintf("%d changes pending", st.Pending)
		}
		return ""
	})
	stop()

	// Warm, with every apiserver paused: served at once from the snapshot.
	before := listCounters(ctx, t, env)
	for _, c := range env.Clusters {
		if err := c.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume := func() {
		if resumed {
			return
		}
		resumed = true
		for _, c := range env.Clusters {
			if err := c.ResumeAPIServer(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	mgr, stop = run()
	defer stop()
	eventually(t, 2*time.Minute, "the warm fleet ready and serving every object while the apiservers are paused", func() string {
		if !mgr.Ready() {
			return "not ready"
		}
		return equalsTruth(mgr, want)
	})
	var notServing []string
	for _, st := range mgr.Status() {
		var reason string
		for _, c := range st.Conditions {
			if c.Type == aggregate.ConditionSynced {
				reason = c.Reason
			}
		}
		if st.Phase != aggregate.PhaseStale || reason != fleetwatch.ReasonServingSnapshot {
			notServing = append(notServing, fmt.Sprintf("%s: %s %s", st.Name, st.Phase, reason))
		}
	}
	if len(notServing) > 0 {
		t.Errorf("%d clusters not Stale, served from the snapshot, while every apiserver is paused: %s", len(notServing), strings.Join(notServing[:min(5, len(notServing))], "; "))
	}
	if mgr.HasSynced() {
		t.Error("HasSynced while every apiserver is paused")
	}

	// Resumed: every cluster confirms and resumes its watches, without a list.
	resume()
	eventually(t, 10*time.Minute, "every cluster confirmed against its server", func() string {
		if !mgr.HasSynced() {
			return "not synced"
		}
		for _, st := range mgr.Status() {
			if st.Phase != aggregate.PhaseSynced {
				return fmt.Sprintf("%s: %s", st.Name, st.Phase)
			}
		}
		return ""
	})
	// Before truth lists the pods itself.
	after := listCounters(ctx, t, env)
	for k, b := range before {
		if a := after[k]; a[0] != b[0] {
			t.Errorf("%s: %v LIST requests during the warm restart", k, a[0]-b[0])
		}
	}
	if d := equalsTruth(mgr, truth()); d != "" {
		t.Error(d)
	}
}

// createManyPods creates the namespace "many" and pods pods in it in every cluster of env.
func createManyPods(t *testing.T, env *testenv.Env, pods int) {
	t.Helper()
	ctx := t.Context()
	for _, c := range env.Clusters {
		cs := c.Clientset()
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "many"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := range pods {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Labels: map[string]string{"app": "many"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			}
			if _, err := cs.CoreV1().Pods("many").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeManyContexts writes into dir a kubeconfig of n contexts spread over the clusters
// of env, each context a cluster of its own to fleetwatch, and returns its path and
// the contexts of each cluster of env.
func writeManyContexts(t *testing.T, env *testenv.Env, dir string, n int) (string, map[string][]string) {
	t.Helper()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	all := env.KubeconfigFor(env.Clusters...)
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos, cfg.Clusters = all.AuthInfos, all.Clusters
	var authInfo string
	for name := range all.AuthInfos {
		authInfo = name
	}
	contextsOf := map[string][]string{}
	for i := range n {
		name := fmt.Sprintf("ctx-%04d", i)
		c := env.Clusters[i%len(env.Clusters)]
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: authInfo}
		contextsOf[c.Name] = append(contextsOf[c.Name], name)
		if cfg.CurrentContext == "" {
			cfg.CurrentContext = name
		}
	}
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, contextsOf
}

// manyTruth is what the contexts of contextsOf should hold: each its apiserver's pods.
func manyTruth(t *testing.T, env *testenv.Env, contextsOf map[string][]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range env.Clusters {
		for k, rv := range serverTruth(t.Context(), t, c, podsGVR, metav1.ListOptions{}) {
			for _, name := range contextsOf[c.Name] {
				out[name+"/"+k] = rv
			}
		}
	}
	return out
}

// TestManyContextsOneAPIServerPaused: a cold start of hundreds of contexts, a third of
// which are on an apiserver that is paused (SIGSTOP: it accepts connections and never
// answers): the contexts of the other apiservers all sync, and the paused ones hold
// none of them back (the initial syncs take turns, and the requests of one transport
// take their connections one server at a time, internal/dialgate); once the apiserver
// resumes, its contexts sync too, and the cache equals the servers. Not timed: the
// bounds, far below the sync timeout that would release a paused context's turn, are
// only there so that a hang fails.
func TestManyContextsOneAPIServerPaused(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	createManyPods(t, env, 3)
	kubeconfig, contextsOf := writeManyContexts(t, env, t.TempDir(), 300)
	want := manyTruth(t, env, contextsOf)
	paused := env.Clusters[len(env.Clusters)-1]
	if err := paused.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := paused.ResumeAPIServer(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	mgr, stop := startManager(t, fleetwatch.Options{
		Clusters:    cluster.Options{Kubeconfigs: []string{kubeconfig}},
		Resources:   []informer.Resource{{Name: "pods"}},
		SyncTimeout: 30 * time.Minute,
	}, nil)
	defer stop()
	eventually(t, 3*time.Minute, "every context of the live apiservers synced", func() string {
		for _, c := range env.Clusters {
			if c == paused {
				continue
			}
			for _, name := range contextsOf[c.Name] {
				if !mgr.ClusterHasSynced(name) {
					return name + " not synced"
				}
			}
		}
		return ""
	})
	for _, name := range contextsOf[paused.Name] {
		if mgr.ClusterHasSynced(name) {
			t.Fatalf("%s, of the paused apiserver, synced", name)
		}
	}
	resume()
	eventually(t, 5*time.Minute, "every context synced and the cache equal to the servers", func() string {
		if !mgr.HasSynced() {
			return "not synced"
		}
		got := fleetCache(t, mgr.Fleet(), podsGVR)
		if !maps.Equal(got, want) {
			return fmt.Sprintf("the cache holds %d objects, want %d; %s", len(got), len(want), diffRVs(want, got))
		}
		return ""
	})
}
