package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// arnName is a cluster name with the characters EKS puts in context names.
const arnName = "arn:aws:eks:eu-west-1:123456789012:cluster/prod"

// eventLog records, per object key, the events a handler received.
type eventLog struct {
	mu     sync.Mutex
	events map[aggregate.Key][]string // "Added@rv", "Updated@rv", "Deleted"
	// wrongCluster lists events whose object says it belongs to another cluster.
	wrongCluster []string
	initialAdds  int
	tombstones   int
}

func newEventLog() *eventLog { return &eventLog{events: map[aggregate.Key][]string{}} }

func (l *eventLog) OnEvent(e aggregate.Event) {
	a, err := meta.Accessor(e.Object)
	if err != nil {
		panic(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := e.Key()
	entry := fmt.Sprintf("%s@%s", e.Type, a.GetResourceVersion())
	if e.Type == aggregate.Deleted {
		// A watch reports a delete with the resourceVersion of the deletion, which the
		// client that deleted never learns: compare the type only.
		entry = string(aggregate.Deleted)
	}
	l.events[k] = append(l.events[k], entry)
	if owner := a.GetLabels()["owner"]; owner != "" && owner != labelSafe(e.Cluster) {
		l.wrongCluster = append(l.wrongCluster, fmt.Sprintf("%s from %s", k, e.Cluster))
	}
	if e.InitialList && e.Type == aggregate.Added {
		l.initialAdds++
	}
	if e.FinalStateUnknown {
		l.tombstones++
	}
}

func (l *eventLog) get(k aggregate.Key) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events[k])
}

func (l *eventLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = map[aggregate.Key][]string{}
	l.initialAdds, l.tombstones = 0, 0
}

// labelSafe turns a cluster name into a label value.
func labelSafe(s string) string {
	r := strings.NewReplacer(":", "-", "/", "-")
	return strings.Trim(r.Replace(s), "-")
}

// fleetTruth returns, for the given clusters, key → resourceVersion of gvr, keyed like
// the fleet's cache.
func fleetTruth(ctx context.Context, t *testing.T, clusters []*testenv.Cluster, gvr schema.GroupVersionResource) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, c := range clusters {
		for k, rv := range serverTruth(ctx, t, c, gvr, metav1.ListOptions{}) {
			key, err := aggregate.ParseMetaNamespaceKey(c.Name, k)
			if err != nil {
				t.Fatal(err)
			}
			out[key.String()] = rv
		}
	}
	return out
}

// fleetCache returns key → resourceVersion of gvr in the fleet's cache.
//
// The lister and the indexer must agree; while the fleet changes (a relist being
// applied), they are read again until a lister list before and after the indexer's
// agree with it, for up to a second.
func fleetCache(t *testing.T, fleet *aggregate.Fleet, gvr schema.GroupVersionResource) map[string]string {
	t.Helper()
	count := func() int {
		objs, err := fleet.Lister(gvr).List(labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		return len(objs)
	}
	var before, after, held int
	for range 50 {
		before = count()
		out := map[string]string{}
		for _, key := range fleet.Indexer(gvr).ListKeys() {
			obj, ok := fleet.Indexer(gvr).Get(key)
			if !ok {
				continue
			}
			a, _ := meta.Accessor(obj)
			out[key.String()] = a.GetResourceVersion()
		}
		after = count()
		if before == len(out) && after == len(out) {
			return out
		}
		held = len(out)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("lister lists %d then %d objects, indexer holds %d (for a second of tries)", before, after, held)
	return nil
}

// startManager starts a Manager until the test ends or the returned stop is called.
// before, if set, runs between NewManager and Start.
//
// FLEETWATCH_TEST_CACHE_ENCODING, if set, is the Encoding of a Manager whose opts set
// neither Encoding nor Fleet.Codec (objects: a plain fleet; the default is compact).
func startManager(t *testing.T, opts fleetwatch.Options, before func(*fleetwatch.Manager)) (*fleetwatch.Manager, func()) {
	t.Helper()
	if e := os.Getenv("FLEETWATCH_TEST_CACHE_ENCODING"); e != "" && opts.Fleet.Codec == nil && opts.Encoding == "" {
		opts.Encoding = fleetwatch.Encoding(e)
	}
	mgr, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(mgr)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("manager: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Error("manager did not stop within 60s")
			}
		})
	}
	t.Cleanup(stop)
	return mgr, stop
}

func phaseOf(mgr *fleetwatch.Manager, name string) aggregate.Phase {
	st, ok := mgr.ClusterStatus(name)
	if !ok {
		return ""
	}
	return st.Phase
}

// TestFleet runs the whole data path against three real clusters: clusters from a
// kubeconfig, one informer set each, the federated cache and handlers.
func TestFleet(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"alpha", "bravo", arnName}})
	ctx := t.Context()
	for i, c := range env.Clusters {
		opts := testenv.SampleOptions{Deployments: 2 + i, Replicas: 2}
		if i < 2 { // the CRD exists in two of the three clusters
			if err := c.InstallWidgetCRD(ctx); err != nil {
				t.Fatal(err)
			}
			opts.Widgets = 3
		}
		if err := c.Seed(ctx, opts); err != nil {
			t.Fatal(err)
		}
		createConfigMap(t, c.Clientset(), "shop", "owner-gone", c.Name)
	}

	// The manager reads its own kubeconfig file, which the test rewrites to add and
	// remove clusters. It starts with all three.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	mgr, _ := startManager(t, fleetwatch.Options{
		Clusters: cluster.Options{Kubeconfigs: []string{kubeconfig}, PollInterval: time.Second, ReloadDelay: 50 * time.Millisecond},
		Resources: []informer.Resource{
			{Name: "pods"}, {Name: "configmaps"}, {Name: "deployments.apps"}, {Name: "widgets.v1alpha1.example.com"},
		},
		Health:            cluster.HealthOptions{Interval: 500 * time.Millisecond, Timeout: time.Second},
		DiscoveryInterval: 2 * time.Second,
		SyncTimeout:       30 * time.Second,
	}, nil)
	fleet := mgr.Fleet()
	log := newEventLog()
	reg, err := fleet.AddHandler(log, aggregate.HandlerOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}

	eventually(t, 60*time.Second, "fleet synced", func() string {
		if !mgr.HasSynced() || !reg.HasSynced() {
			return fmt.Sprintf("ready=%v handler synced=%v status=%+v", mgr.HasSynced(), reg.HasSynced(), mgr.Status())
		}
		return ""
	})

	t.Run("the cache is the union of the clusters", func(t *testing.T) {
		for _, gvr := range []schema.GroupVersionResource{podsGVR, configMapsGVR, deploymentsGVR} {
			if d := diffRVs(fleetTruth(ctx, t, env.Clusters, gvr), fleetCache(t, fleet, gvr)); d != "" {
				t.Errorf("%s: %s", gvr.Resource, d)
			}
		}
		if d := diffRVs(fleetTruth(ctx, t, env.Clusters[:2], testenv.WidgetGVR), fleetCache(t, fleet, testenv.WidgetGVR)); d != "" {
			t.Errorf("widgets: %s", d)
		}
		for _, st := range mgr.Status() {
			w := st.Resources[3]
			wantState := string(informer.StateSynced)
			if st.Name == arnName {
				wantState = string(informer.StateNotFound)
			}
			if w.State != wantState {
				t.Errorf("%s: widgets state %s, want %s", st.Name, w.State, wantState)
			}
			if st.Phase != aggregate.PhaseSynced {
				t.Errorf("%s: phase %s, want Synced", st.Name, st.Phase)
			}
		}
		// A cluster's identity is read once the fleet is ready.
		eventually(t, 10*time.Second, "every cluster identified", func() string {
			for _, st := range mgr.Status() {
				if st.UID == "" {
					return st.Name + ": no identity"
				}
			}
			return ""
		})
	})

	t.Run("a cluster name with / and : round-trips through keys", func(t *testing.T) {
		pods, err := fleet.Lister(podsGVR).Cluster(arnName).ByNamespace("shop").List(labels.Everything())
		if err != nil || len(pods) == 0 {
			t.Fatalf("pods of %s in shop: %d, %v", arnName, len(pods), err)
		}
		a, _ := meta.Accessor(pods[0])
		key := aggregate.KeyFor(arnName, a)
		parsed, err := aggregate.ParseKey(key.String())
		if err != nil || parsed != key {
			t.Fatalf("ParseKey(%q) = %v, %v; want %v", key.String(), parsed, err, key)
		}
		if _, err := fleet.Lister(podsGVR).Get(parsed); err != nil {
			t.Errorf("Get(%v): %v", parsed, err)
		}
	})

	t.Run("under churn every handler sees each object's exact history", func(t *testing.T) {
		late := newEventLog()
		lateReg, err := fleet.AddHandler(late, aggregate.HandlerOptions{Name: "late", Resources: []schema.GroupVersionResource{configMapsGVR}})
		if err != nil {
			t.Fatal(err)
		}
		want := churn(t, env.Clusters, 8*time.Second)
		eventually(t, 60*time.Second, "handlers caught up", func() string {
			for k, w := range want {
				for _, l := range []*eventLog{log, late} {
					if got := l.get(k); !slices.Equal(tail(got, len(w)), w) {
						return fmt.Sprintf("%v: got %v, want %v", k, got, w)
					}
				}
			}
			return ""
		})
		for k, w := range want {
			// The first handler saw the objects from their creation: exactly the history.
			if got := log.get(k); !slices.Equal(got, w) {
				t.Errorf("%v: got %v, want %v", k, got, w)
			}
		}
		if len(log.wrongCluster) > 0 || len(late.wrongCluster) > 0 {
			t.Errorf("events tagged with the wrong cluster: %v %v", log.wrongCluster, late.wrongCluster)
		}
		if !lateReg.HasSynced() {
			t.Error("late handler not synced")
		}
		if d := diffRVs(fleetTruth(ctx, t, env.Clusters, configMapsGVR), fleetCache(t, fleet, configMapsGVR)); d != "" {
			t.Errorf("after churn: %s", d)
		}
		lateReg.Remove()
	})

	t.Run("a paused cluster turns Unreachable and recovers; the others go on", func(t *testing.T) {
		paused, other := env.Clusters[1], env.Clusters[0]
		second, err := paused.AddAPIServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer second.Stop()
		victim := aggregate.Key{Cluster: paused.Name, Namespace: "shop", Name: "web"}
		if _, err := fleet.Lister(deploymentsGVR).Get(victim); err != nil {
			t.Fatalf("%v before pause: %v", victim, err)
		}
		log.reset()
		if err := paused.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = paused.ResumeAPIServer()
			}
		}()
		eventually(t, 30*time.Second, "paused cluster Unreachable", func() string {
			if p := phaseOf(mgr, paused.Name); p != aggregate.PhaseUnreachable {
				return fmt.Sprintf("phase %s", p)
			}
			return ""
		})
		if _, err := fleet.Lister(deploymentsGVR).Get(victim); err != nil {
			t.Errorf("objects of an unreachable cluster must stay readable: %v", err)
		}
		// The other clusters keep syncing.
		createConfigMap(t, other.Clientset(), "shop", "during-pause", other.Name)
		eventually(t, 30*time.Second, "other cluster syncs", func() string {
			if _, err := fleet.Lister(configMapsGVR).Get(aggregate.Key{Cluster: other.Name, Namespace: "shop", Name: "during-pause"}); err != nil {
				return err.Error()
			}
			return ""
		})
		// Meanwhile the paused cluster changes behind fleetwatch's back.
		if err := kubernetes.NewForConfigOrDie(second.RESTConfig()).AppsV1().Deployments("shop").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := paused.ResumeAPIServer(); err != nil {
			t.Fatal(err)
		}
		resumed = true
		eventually(t, 60*time.Second, "paused cluster recovers", func() string {
			if p := phaseOf(mgr, paused.Name); p != aggregate.PhaseSynced {
				return fmt.Sprintf("phase %s", p)
			}
			if got := log.get(victim); len(got) != 1 || !strings.HasPrefix(got[0], "Deleted") {
				return fmt.Sprintf("events for %v: %v", victim, got)
			}
			return ""
		})
	})

	t.Run("410 Gone: the relist converges without duplicate Added events", func(t *testing.T) {
		c := env.Clusters[2]
		// While the watched apiserver is down, change the cluster through a second one,
		// then compact: the informers' resourceVersions are gone, so they must relist.
		second, err := c.AddAPIServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer second.Stop()
		log.reset()
		if err := c.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		cs := kubernetes.NewForConfigOrDie(second.RESTConfig())
		createConfigMap(t, cs, "shop", "after-410", c.Name)
		if err := cs.CoreV1().ConfigMaps("shop").Delete(ctx, "owner-gone", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if _, err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		fresh := aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "after-410"}
		gone := aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "owner-gone"}
		eventually(t, 60*time.Second, "converged after 410", func() string {
			if d := diffRVs(fleetTruth(ctx, t, env.Clusters, configMapsGVR), fleetCache(t, fleet, configMapsGVR)); d != "" {
				return d
			}
			return diffRVs(fleetTruth(ctx, t, env.Clusters, podsGVR), fleetCache(t, fleet, podsGVR))
		})
		eventually(t, 10*time.Second, "events delivered", func() string {
			if got := log.get(gone); len(got) != 1 {
				return fmt.Sprintf("events for %v: %v", gone, got)
			}
			return ""
		})
		log.mu.Lock()
		defer log.mu.Unlock()
		for k, evs := range log.events {
			if k != fresh && k != gone {
				t.Errorf("event for unchanged object %v: %v", k, evs)
			}
		}
		if got := log.events[fresh]; len(got) != 1 || !strings.HasPrefix(got[0], "Added") {
			t.Errorf("events for %v: %v, want one Added", fresh, got)
		}
		if got := log.events[gone]; len(got) != 1 || got[0] != "Deleted" || log.tombstones != 1 {
			t.Errorf("events for %v: %v (%d with final state unknown), want one Deleted detected by the relist", gone, got, log.tombstones)
		}
	})

	t.Run("contexts added and removed at runtime", func(t *testing.T) {
		gone := env.Clusters[0]
		n := len(fleet.Indexer(podsGVR).ListKeys())
		want := fleet.Indexer(podsGVR).ClusterLen(gone.Name)
		log.reset()
		if err := env.WriteKubeconfig(kubeconfig, env.Clusters[1:]...); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "removed cluster leaves", func() string {
			if _, ok := mgr.ClusterStatus(gone.Name); ok {
				return "still in status"
			}
			if got := fleet.Indexer(podsGVR).ClusterLen(gone.Name); got != 0 {
				return fmt.Sprintf("%d pods left", got)
			}
			return ""
		})
		eventually(t, 10*time.Second, "Deleted events", func() string {
			deleted := 0
			log.mu.Lock()
			for k, evs := range log.events {
				if k.Cluster == gone.Name && len(evs) == 1 && strings.HasPrefix(evs[0], "Deleted") {
					deleted++
				}
			}
			log.mu.Unlock()
			if deleted < want {
				return fmt.Sprintf("%d Deleted events, want at least %d pods", deleted, want)
			}
			return ""
		})
		if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
			t.Fatal(err)
		}
		eventually(t, 60*time.Second, "re-added cluster syncs", func() string {
			if p := phaseOf(mgr, gone.Name); p != aggregate.PhaseSynced {
				return fmt.Sprintf("phase %q", p)
			}
			if got := len(fleet.Indexer(podsGVR).ListKeys()); got != n {
				return fmt.Sprintf("%d pods, want %d", got, n)
			}
			return ""
		})
	})
}

func tail(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// churn creates, updates and deletes configmaps in every cluster for d, at a few hundred
// writes per second in all, and returns each object's history as the servers wrote it.
func churn(t *testing.T, clusters []*testenv.Cluster, d time.Duration) map[aggregate.Key][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var mu sync.Mutex
	want := map[aggregate.Key][]string{}
	var wg sync.WaitGroup
	for _, c := range clusters {
		for w := range 4 {
			wg.Go(func() {
				cs := c.Clientset()
				rng := rand.New(rand.NewPCG(uint64(w), 7))
				var live []string
				for i := 0; ctx.Err() == nil; i++ {
					var name, rv, typ string
					switch op := rng.IntN(10); {
					case len(live) == 0 || op < 4:
						name = fmt.Sprintf("churn-%d-%d", w, i)
						cm := configMap("shop", name, c.Name)
						cm.Labels = map[string]string{"owner": labelSafe(c.Name)}
						got, err := cs.CoreV1().ConfigMaps("shop").Create(context.WithoutCancel(ctx), cm, metav1.CreateOptions{})
						if err != nil {
							t.Errorf("create: %v", err)
							return
						}
						live = append(live, name)
						rv, typ = got.ResourceVersion, "Added"
					case op < 8:
						name = live[rng.IntN(len(live))]
						cm := configMap("shop", name, c.Name)
						cm.Labels = map[string]string{"owner": labelSafe(c.Name)}
						cm.Data["i"] = fmt.Sprint(i)
						got, err := cs.CoreV1().ConfigMaps("shop").Update(context.WithoutCancel(ctx), cm, metav1.UpdateOptions{})
						if err != nil {
							t.Errorf("update: %v", err)
							return
						}
						rv, typ = got.ResourceVersion, "Updated"
					default:
						j := rng.IntN(len(live))
						name = live[j]
						live = slices.Delete(live, j, j+1)
						err := cs.CoreV1().ConfigMaps("shop").Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
						if err != nil && !apierrors.IsNotFound(err) {
							t.Errorf("delete: %v", err)
							return
						}
						typ = "Deleted"
					}
					k := aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: name}
					entry := typ + "@" + rv
					if typ == "Deleted" {
						entry = typ
					}
					mu.Lock()
					want[k] = append(want[k], entry)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	t.Logf("churn: %d objects, %d writes", len(want), func() int {
		n := 0
		for _, v := range want {
			n += len(v)
		}
		return n
	}())
	return want
}
