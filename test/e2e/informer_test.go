package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// recordingSink is an informer.Sink that keeps objects in maps and records every call,
// to test package informer on its own against real clusters.
type recordingSink struct {
	mu      sync.Mutex
	stores  map[schema.GroupVersionResource]*recordingStore
	removed []schema.GroupVersionResource
	// seeds, if set, makes the sink a Seeder: scope → resourceVersion.
	seeds map[informer.Scope]string
}

var _ informer.Seeder = (*recordingSink)(nil)

func (s *recordingSink) Seed(scope informer.Scope) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rv, ok := s.seeds[scope]
	return rv, ok
}

// checkpoints returns the last checkpoint of every scope.
func (s *recordingSink) checkpoints() map[informer.Scope]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpointsLocked()
}

func newRecordingSink() *recordingSink {
	return &recordingSink{stores: map[schema.GroupVersionResource]*recordingStore{}}
}

func (s *recordingSink) Store(scope informer.Scope) informer.Store {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.stores[scope.Resource]
	if !ok {
		st = &recordingStore{objects: map[string]runtime.Object{}, checkpoints: map[informer.Scope]string{}}
		s.stores[scope.Resource] = st
	}
	return scopedStore{st, scope}
}

// scopedStore records the checkpoints of one scope in its recordingStore.
type scopedStore struct {
	*recordingStore
	scope informer.Scope
}

func (s scopedStore) Checkpoint(rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkpoints[s.scope] = rv
}

func (s *recordingSink) RemoveResource(gvr schema.GroupVersionResource) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removed = append(s.removed, gvr)
	delete(s.stores, gvr)
}

func (s *recordingSink) checkpointsLocked() map[informer.Scope]string {
	out := map[informer.Scope]string{}
	for _, st := range s.stores {
		st.mu.Lock()
		for sc, rv := range st.checkpoints {
			out[sc] = rv
		}
		st.mu.Unlock()
	}
	return out
}

func (s *recordingSink) store(gvr schema.GroupVersionResource) *recordingStore {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stores[gvr]
}

type recordingStore struct {
	mu      sync.Mutex
	objects map[string]runtime.Object
	synced  bool
	// calls counts Apply calls for keys that were already present with the same
	// resourceVersion (no-ops), added, updated and deleted keys.
	noops, adds, updates, deletes, tombstones int
	updated                                   []string
	checkpoints                               map[informer.Scope]string
}

func (s *recordingStore) ListKeys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.objects))
	for k := range s.objects {
		keys = append(keys, k)
	}
	return keys
}

func (s *recordingStore) GetByKey(key string) (interface{}, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	return o, ok, nil
}

func (s *recordingStore) Apply(obj runtime.Object, _ bool) error {
	key, _ := cache.MetaNamespaceKeyFunc(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[key]
	switch {
	case !ok:
		s.adds++
	case rvOf(old) == rvOf(obj):
		s.noops++
	default:
		s.updates++
		s.updated = append(s.updated, fmt.Sprintf("%s %s->%s", key, rvOf(old), rvOf(obj)))
	}
	s.objects[key] = obj
	return nil
}

func (s *recordingStore) Delete(obj runtime.Object, finalStateUnknown bool) error {
	key, _ := cache.MetaNamespaceKeyFunc(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	s.deletes++
	if finalStateUnknown {
		s.tombstones++
	}
	return nil
}

func (s *recordingStore) MarkSynced() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = true
}

// snapshot returns key → resourceVersion.
func (s *recordingStore) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for k, o := range s.objects {
		out[k] = rvOf(o)
	}
	return out
}

func rvOf(obj runtime.Object) string {
	a, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return a.GetResourceVersion()
}

var (
	podsGVR       = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	configMapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// serverTruth lists gvr in c and returns namespace/name → resourceVersion.
func serverTruth(ctx context.Context, t *testing.T, c *testenv.Cluster, gvr schema.GroupVersionResource, opts metav1.ListOptions) map[string]string {
	t.Helper()
	list, err := c.Dynamic().Resource(gvr).List(ctx, opts)
	if err != nil {
		t.Fatalf("listing %s in %s: %v", gvr.Resource, c.Name, err)
	}
	out := map[string]string{}
	for _, item := range list.Items {
		key, _ := cache.MetaNamespaceKeyFunc(&item)
		out[key] = item.GetResourceVersion()
	}
	return out
}

func diffRVs(want, got map[string]string) string {
	var d string
	for k, rv := range want {
		if g, ok := got[k]; !ok {
			d += fmt.Sprintf("missing %s@%s; ", k, rv)
		} else if g != rv {
			d += fmt.Sprintf("stale %s: have %s, server %s; ", k, g, rv)
		}
	}
	for k, rv := range got {
		if _, ok := want[k]; !ok {
			d += fmt.Sprintf("ghost %s@%s; ", k, rv)
		}
	}
	return d
}

// eventually polls cond until it returns "" (no difference) or timeout, then fails with
// the last difference.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("%s: after %v: %s", what, timeout, last)
	}
}

// startSet starts a Set until the test ends or the returned stop is called.
func startSet(t *testing.T, opts informer.Options) (*informer.Set, func()) {
	t.Helper()
	set, err := informer.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = set.Start(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return set, stop
}

// TestInformerSet runs one informer set against a real cluster: resources resolved
// through discovery (a CRD that is missing, then installed, then removed), transforms,
// namespace and label filters, and a relist after 410 Gone diffed against the store.
func TestInformerSet(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 1})
	c := env.Clusters[0]
	ctx := t.Context()
	if err := c.Seed(ctx, testenv.SampleOptions{Namespaces: []string{"shop", "payments"}, Deployments: 3, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	createConfigMap(t, c.Clientset(), "shop", "settings", c.Name)
	createConfigMap(t, c.Clientset(), "payments", "settings", c.Name)

	sink := newRecordingSink()
	set, stop := startSet(t, informer.Options{
		Cluster: c.Name,
		Config:  c.RESTConfig(),
		Sink:    sink,
		Resources: []informer.Resource{
			{Name: "pods", LabelSelector: "tier=frontend"},
			{Name: "configmaps", Namespaces: []string{"shop"}, MetadataOnly: true},
			{Name: "deploy"}, // a short name
			{Name: "widgets.v1alpha1.example.com"},
		},
		DiscoveryInterval: 500 * time.Millisecond,
	})
	eventually(t, 60*time.Second, "initial sync", func() string {
		if !set.HasSynced() {
			return fmt.Sprintf("not synced: %+v", set.Status())
		}
		return ""
	})

	st := set.Status()
	if st[2].Mapping.Resource != (schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}) {
		t.Errorf("deploy resolved to %v", st[2].Mapping.Resource)
	}
	if st[3].State != informer.StateNotFound {
		t.Errorf("widgets without a CRD: state %s, want NotFound", st[3].State)
	}

	pods := sink.store(podsGVR)
	if d := diffRVs(serverTruth(ctx, t, c, podsGVR, metav1.ListOptions{LabelSelector: "tier=frontend"}), pods.snapshot()); d != "" {
		t.Errorf("pods (tier=frontend): %s", d)
	}
	for _, o := range pods.objects {
		if a, _ := meta.Accessor(o); len(a.GetManagedFields()) != 0 {
			t.Fatalf("managedFields not stripped from %s", a.GetName())
		}
	}
	cms := sink.store(configMapsGVR)
	want := serverTruth(ctx, t, c, configMapsGVR, metav1.ListOptions{})
	for k := range want {
		if ns, _, _ := cache.SplitMetaNamespaceKey(k); ns != "shop" {
			delete(want, k)
		}
	}
	if d := diffRVs(want, cms.snapshot()); d != "" {
		t.Errorf("configmaps in shop: %s", d)
	}
	for k, o := range cms.objects {
		if _, ok := o.(*metav1.PartialObjectMetadata); !ok {
			t.Errorf("metadata-only configmap %s is a %T", k, o)
		}
	}

	t.Run("CRD installed later is picked up, removed is dropped", func(t *testing.T) {
		if err := c.InstallWidgetCRD(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Dynamic().Resource(testenv.WidgetGVR).Namespace("shop").Create(ctx, testenv.Widget("shop", "w1", nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "widget cached", func() string {
			if s := sink.store(testenv.WidgetGVR); s == nil || len(s.snapshot()) != 1 {
				return fmt.Sprintf("status %+v", set.Status()[3])
			}
			return ""
		})
		if err := c.DeleteWidgetCRD(ctx); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "widgets dropped", func() string {
			if s := set.Status()[3]; s.State != informer.StateNotFound {
				return fmt.Sprintf("state %s", s.State)
			}
			if s := sink.store(testenv.WidgetGVR); s != nil && len(s.snapshot()) != 0 {
				return fmt.Sprintf("still cached: %v", s.snapshot())
			}
			return ""
		})
	})

	resetCounts := func() {
		pods.mu.Lock()
		defer pods.mu.Unlock()
		pods.adds, pods.updates, pods.noops, pods.deletes, pods.tombstones, pods.updated = 0, 0, 0, 0, 0, nil
	}
	checkCounts := func(t *testing.T, adds, deletes, tombstones int) {
		t.Helper()
		pods.mu.Lock()
		defer pods.mu.Unlock()
		if pods.updates != 0 {
			t.Errorf("%d updates for unchanged pods: %v", pods.updates, pods.updated)
		}
		if pods.adds != adds || pods.deletes != deletes || pods.tombstones != tombstones {
			t.Errorf("adds/deletes/tombstones = %d/%d/%d, want %d/%d/%d", pods.adds, pods.deletes, pods.tombstones, adds, deletes, tombstones)
		}
	}
	frontend := metav1.ListOptions{LabelSelector: "tier=frontend"}
	cs := c.Clientset()
	newPod := func(name string) {
		t.Helper()
		_, err := cs.CoreV1().Pods("shop").Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"tier": "frontend"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}

	t.Run("relist after 410 Gone is diffed against the store", func(t *testing.T) {
		// Change the cluster through a second apiserver while the watched one is down,
		// then compact, so that the informer's resourceVersion is gone and it relists.
		second, err := c.AddAPIServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer second.Stop()
		resetCounts()
		if err := c.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		cs2 := kubernetes.NewForConfigOrDie(second.RESTConfig())
		if err := cs2.CoreV1().Pods("shop").Delete(ctx, "api-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		newPod("web-new")
		eventually(t, 60*time.Second, "pods converge after 410", func() string {
			return diffRVs(serverTruth(ctx, t, c, podsGVR, frontend), pods.snapshot())
		})
		checkCounts(t, 1, 1, 1)
	})

	var stopWarm func()
	t.Run("changes while the informers were down arrive as a diff", func(t *testing.T) {
		stop()
		if err := cs.CoreV1().Pods("shop").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		newPod("web-new-2")
		if _, err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		resetCounts()
		_, stopWarm = startSet(t, informer.Options{
			Cluster:   c.Name,
			Config:    c.RESTConfig(),
			Sink:      sink,
			Resources: []informer.Resource{{Name: "pods", LabelSelector: "tier=frontend"}},
		})
		eventually(t, 60*time.Second, "pods converge after restart", func() string {
			return diffRVs(serverTruth(ctx, t, c, podsGVR, frontend), pods.snapshot())
		})
		checkCounts(t, 1, 1, 1)
	})

	t.Run("warm start: the first list is the saved state, the watch resumes", func(t *testing.T) {
		eventually(t, 30*time.Second, "synced before stopping", func() string {
			if _, ok := sink.checkpoints()[informer.Scope{Resource: podsGVR, Spec: "labels=tier%3Dfrontend"}]; !ok {
				return fmt.Sprintf("no checkpoint for pods: %v", sink.checkpoints())
			}
			return ""
		})
		stopWarm()
		sink.mu.Lock()
		sink.seeds = sink.checkpointsLocked()
		sink.mu.Unlock()
		// Changes while down, inside the watch window.
		newPod("web-while-down")
		if err := cs.CoreV1().Pods("shop").Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		before, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		resetCounts()
		set, _ := startSet(t, informer.Options{
			Cluster:   c.Name,
			Config:    c.RESTConfig(),
			Sink:      sink,
			Resources: []informer.Resource{{Name: "pods", LabelSelector: "tier=frontend"}},
		})
		// Wait without asking the server, so that its metrics count only the informer.
		eventually(t, 30*time.Second, "warm informer sees the changes made while down", func() string {
			got := pods.snapshot()
			_, added := got["shop/web-while-down"]
			_, deleted := got["shop/web-2"]
			if !set.HasSynced() || !added || deleted {
				return fmt.Sprintf("synced=%v added=%v deleted=%v", set.HasSynced(), added, !deleted)
			}
			return ""
		})
		after, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := after.Requests("LIST", "pods") - before.Requests("LIST", "pods"); d != 0 {
			t.Errorf("%v LIST requests for pods during a warm start", d)
		}
		// A watch that resumes from an older resourceVersion is first sent the events since
		// then, which the apiserver counts as init events: here the three changes made
		// while down (a create, and a graceful delete: an update, then the delete). A list
		// would hand out every pod.
		if d := after.ListedObjects("", "pods") - before.ListedObjects("", "pods"); d > 3 {
			t.Errorf("%v pods handed out as lists or replayed during a warm start, want at most the 3 changes made while down (%d pods)", d, len(pods.snapshot()))
		}
		if d := diffRVs(serverTruth(ctx, t, c, podsGVR, frontend), pods.snapshot()); d != "" {
			t.Errorf("after warm start: %s", d)
		}
		// The pod deleted while down: its graceful delete is an update, then a delete.
		pods.mu.Lock()
		defer pods.mu.Unlock()
		if pods.adds != 1 || pods.deletes != 1 || pods.tombstones != 0 || pods.updates > 1 {
			t.Errorf("adds/updates/deletes/tombstones = %d/%d/%d/%d, want 1/<=1/1/0: only the changes made while down, as watch events", pods.adds, pods.updates, pods.deletes, pods.tombstones)
		}
	})

	t.Run("two names of one resource: the first is cached, the second reported", func(t *testing.T) {
		sink := newRecordingSink()
		set, _ := startSet(t, informer.Options{
			Cluster: c.Name,
			Config:  c.RESTConfig(),
			Sink:    sink,
			// Two informers of pods would each delete the other's objects when they list.
			Resources: []informer.Resource{{Name: "pods", LabelSelector: "tier=frontend"}, {Name: "po"}},
		})
		eventually(t, 60*time.Second, "initial sync", func() string {
			if !set.HasSynced() {
				return fmt.Sprintf("not synced: %+v", set.Status())
			}
			return ""
		})
		st := set.Status()
		if st[0].State != informer.StateSynced || st[1].State != informer.StateDuplicate || !errors.Is(st[1].LastError, informer.ErrDuplicateResource) {
			t.Fatalf("status %+v", st)
		}
		if d := diffRVs(serverTruth(ctx, t, c, podsGVR, metav1.ListOptions{LabelSelector: "tier=frontend"}), sink.store(podsGVR).snapshot()); d != "" {
			t.Errorf("pods of the first name: %s", d)
		}

		// Put the other name first: it starts, the one that is now second stops, and the
		// store ends up with the first name's objects only.
		if err := set.Reconfigure(informer.Options{Resources: []informer.Resource{{Name: "po"}, {Name: "pods", LabelSelector: "tier=frontend"}}}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "po first", func() string {
			st := set.Status()
			if !set.HasSynced() || st[0].State != informer.StateSynced || st[1].State != informer.StateDuplicate {
				return fmt.Sprintf("status %+v", st)
			}
			return diffRVs(serverTruth(ctx, t, c, podsGVR, metav1.ListOptions{}), sink.store(podsGVR).snapshot())
		})
	})

	t.Run("Reconfigure changes the resources in place", func(t *testing.T) {
		sink := newRecordingSink()
		set, _ := startSet(t, informer.Options{
			Cluster:   c.Name,
			Config:    c.RESTConfig(),
			Sink:      sink,
			Resources: []informer.Resource{{Name: "pods"}, {Name: "configmaps"}},
		})
		eventually(t, 60*time.Second, "initial sync", func() string {
			if !set.HasSynced() {
				return fmt.Sprintf("not synced: %+v", set.Status())
			}
			return ""
		})
		pods, cms := sink.store(podsGVR), sink.store(configMapsGVR)
		before, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// pods unchanged, configmaps now in shop only, deployments added, and a
		// resource that is not served.
		err = set.Reconfigure(informer.Options{Resources: []informer.Resource{
			{Name: "pods"},
			{Name: "configmaps", Namespaces: []string{"shop"}},
			{Name: "deployments.apps"},
			{Name: "widgets.v1alpha1.example.com"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "reconfigured", func() string {
			st := set.Status()
			if len(st) != 4 || !set.HasSynced() || st[2].State != informer.StateSynced || st[3].State != informer.StateNotFound {
				return fmt.Sprintf("status %+v", st)
			}
			return ""
		})
		after, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := after.ListedObjects("", "pods") - before.ListedObjects("", "pods"); d != 0 {
			t.Errorf("%v pods listed again, want none: their settings did not change", d)
		}
		if sink.store(podsGVR) != pods || sink.store(configMapsGVR) == cms {
			t.Errorf("pods should keep their store, configmaps get a new one (removed: %v)", sink.removed)
		}
		shop := serverTruth(ctx, t, c, configMapsGVR, metav1.ListOptions{})
		for k := range shop {
			if ns, _, _ := cache.SplitMetaNamespaceKey(k); ns != "shop" {
				delete(shop, k)
			}
		}
		if d := diffRVs(shop, sink.store(configMapsGVR).snapshot()); d != "" {
			t.Errorf("configmaps in shop: %s", d)
		}
		if d := diffRVs(serverTruth(ctx, t, c, deploymentsGVR, metav1.ListOptions{}), sink.store(deploymentsGVR).snapshot()); d != "" {
			t.Errorf("deployments: %s", d)
		}

		// Removing a resource drops it; keeping managed fields changes every resource.
		if err := set.Reconfigure(informer.Options{Resources: []informer.Resource{{Name: "pods"}}, KeepManagedFields: true}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "deployments and configmaps dropped, pods relisted with managed fields", func() string {
			if st := set.Status(); len(st) != 1 || !set.HasSynced() {
				return fmt.Sprintf("status %+v", st)
			}
			if sink.store(deploymentsGVR) != nil || sink.store(configMapsGVR) != nil {
				return fmt.Sprintf("removed only %v", sink.removed)
			}
			p := sink.store(podsGVR)
			if p == nil || p == pods {
				return "pods not restarted"
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.objects) == 0 {
				return "no pods"
			}
			for _, o := range p.objects {
				if a, _ := meta.Accessor(o); len(a.GetManagedFields()) == 0 {
					return "managedFields still stripped from " + a.GetName()
				}
			}
			return ""
		})

		if err := set.Reconfigure(informer.Options{Resources: []informer.Resource{{Name: "Pods"}}}); err == nil {
			t.Error("Reconfigure with an invalid resource name succeeded")
		}
		if st := set.Status(); len(st) != 1 || st[0].Name != "pods" {
			t.Errorf("a failed Reconfigure changed the status: %+v", st)
		}
	})
}
