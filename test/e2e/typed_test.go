package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

var servicesGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// typedListers are the typed reads of TestTypedReadsAndWriteBack.
type typedListers struct {
	pods        *aggregate.TypedLister[corev1.Pod]
	deployments *aggregate.TypedLister[appsv1.Deployment]
	configMaps  *aggregate.TypedLister[corev1.ConfigMap]
	services    *aggregate.TypedLister[metav1.PartialObjectMetadata]
}

func newTypedListers(t *testing.T, fleet *aggregate.Fleet) typedListers {
	t.Helper()
	var l typedListers
	var errs [4]error
	l.pods, errs[0] = aggregate.NewTypedLister[corev1.Pod](fleet, podsGVR, scheme.Scheme)
	l.deployments, errs[1] = aggregate.NewTypedLister[appsv1.Deployment](fleet, deploymentsGVR, scheme.Scheme)
	l.configMaps, errs[2] = aggregate.NewTypedLister[corev1.ConfigMap](fleet, configMapsGVR, scheme.Scheme)
	l.services, errs[3] = aggregate.NewTypedLister[metav1.PartialObjectMetadata](fleet, servicesGVR, nil)
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	return l
}

// writeBack is a fleet handler that labels each ConfigMap that asks for it
// (writeback=please) with the cluster its event came from, written to that cluster
// through Manager.RESTConfig.
type writeBack struct {
	mgr        *fleetwatch.Manager
	configMaps *aggregate.TypedLister[corev1.ConfigMap]

	mu     sync.Mutex
	writes map[string]int // by cluster
	errs   []string
}

func (w *writeBack) OnEvent(e aggregate.Event) {
	if e.Type == aggregate.Deleted {
		return
	}
	wrote, err := w.write(e)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.errs = append(w.errs, fmt.Sprintf("%s: %v", e.Key(), err))
	}
	if wrote {
		w.writes[e.Cluster]++
	}
}

func (w *writeBack) write(e aggregate.Event) (bool, error) {
	k := e.Key()
	cm, err := w.configMaps.Cluster(k.Cluster).Namespace(k.Namespace).Get(k.Name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if cm.Labels["writeback"] != "please" || cm.Labels["written-by"] != "" {
		return false, nil
	}
	cfg, err := w.mgr.RESTConfig(e.Cluster)
	if err != nil {
		return false, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	// cm is the handler's own copy: labelling it leaves the cache alone.
	cm.Labels["written-by"] = labelSafe(e.Cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cs.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	return err == nil, err
}

func (w *writeBack) state() (map[string]int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.writes), slices.Clone(w.errs)
}

// normalized strips what the cache does not keep (managedFields) and the TypeMeta
// (typed clients drop it from list items; typed listers set it), then keys the objects
// by namespace/name.
func normalized(objs []runtime.Object) map[string]runtime.Object {
	out := map[string]runtime.Object{}
	for _, o := range objs {
		o = o.DeepCopyObject()
		m, _ := meta.Accessor(o)
		m.SetManagedFields(nil)
		o.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
		out[m.GetNamespace()+"/"+m.GetName()] = o
	}
	return out
}

// diffTyped says how the typed objects got differ from those the server returned.
func diffTyped(want, got []runtime.Object) string {
	w, g := normalized(want), normalized(got)
	if wk, gk := slices.Sorted(maps.Keys(w)), slices.Sorted(maps.Keys(g)); !slices.Equal(wk, gk) {
		return fmt.Sprintf("server has %v, typed lister %v", wk, gk)
	}
	for k, wo := range w {
		if !apiequality.Semantic.DeepEqual(wo, g[k]) {
			wj, _ := json.Marshal(wo)
			gj, _ := json.Marshal(g[k])
			return fmt.Sprintf("%s differs:\nserver: %s\ntyped:  %s", k, wj, gj)
		}
	}
	return ""
}

func objects[T any](items []T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i := range items {
		out[i] = any(&items[i]).(runtime.Object)
	}
	return out
}

func pointers[T any](items []*T) []runtime.Object {
	out := make([]runtime.Object, len(items))
	for i, o := range items {
		out[i] = any(o).(runtime.Object)
	}
	return out
}

// TestTypedReadsAndWriteBack reads pods, deployments, configmaps and metadata-only
// services of three real clusters through typed listers over a Manager's fleet, which
// must equal what the apiservers return, and writes back from a handler to the cluster
// each event came from, through Manager.RESTConfig.
func TestTypedReadsAndWriteBack(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"alpha", "bravo", arnName}})
	ctx := t.Context()
	for i, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Namespaces: []string{"shop"}, Deployments: 1 + i, Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		createConfigMap(t, c.Clientset(), "shop", "settings", c.Name)
	}
	mgr, _ := startManager(t, fleetwatch.Options{
		Clusters: cluster.Options{Kubeconfigs: []string{env.Kubeconfig}},
		Resources: []informer.Resource{
			{Name: "pods"}, {Name: "configmaps"}, {Name: "deployments.apps"}, {Name: "services", MetadataOnly: true},
		},
		SyncTimeout: 30 * time.Second,
	}, nil)
	fleet := mgr.Fleet()
	l := newTypedListers(t, fleet)
	wb := &writeBack{mgr: mgr, configMaps: l.configMaps, writes: map[string]int{}}
	reg, err := fleet.AddHandler(wb, aggregate.HandlerOptions{Name: "write-back", Resources: []schema.GroupVersionResource{configMapsGVR}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "fleet synced", func() string {
		if !mgr.HasSynced() || !reg.HasSynced() {
			return fmt.Sprintf("ready=%v handler synced=%v status=%+v", mgr.HasSynced(), reg.HasSynced(), mgr.Status())
		}
		return ""
	})

	t.Run("typed reads equal the servers' objects", func(t *testing.T) {
		items, err := l.configMaps.List(nil)
		if err != nil {
			t.Fatal(err)
		}
		byCluster := map[string][]runtime.Object{}
		for _, it := range items {
			if it.Object.Kind != "ConfigMap" || it.Object.APIVersion != "v1" {
				t.Errorf("%s/%s: TypeMeta %+v", it.Cluster, it.Object.Name, it.Object.TypeMeta)
			}
			byCluster[it.Cluster] = append(byCluster[it.Cluster], it.Object)
		}
		for _, c := range env.Clusters {
			cs := c.Clientset()
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cached, err := l.pods.Cluster(c.Name).List(nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != 2*(1+slices.Index(env.Clusters, c)) {
				t.Errorf("%s: %d pods on the server, want 2 per deployment", c.Name, len(pods.Items))
			}
			if d := diffTyped(objects(pods.Items), pointers(cached)); d != "" {
				t.Errorf("%s pods: %s", c.Name, d)
			}

			deps, err := cs.AppsV1().Deployments("shop").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cachedDeps, err := l.deployments.Cluster(c.Name).Namespace("shop").List(nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTyped(objects(deps.Items), pointers(cachedDeps)); d != "" {
				t.Errorf("%s deployments: %s", c.Name, d)
			}
			web, err := l.deployments.Cluster(c.Name).Namespace("shop").Get("web")
			if err != nil || web.Spec.Replicas == nil || *web.Spec.Replicas != 2 || web.Spec.Template.Spec.Containers[0].Image == "" {
				t.Errorf("%s: Get deployment shop/web: %+v, %v", c.Name, web, err)
			}

			cms, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTyped(objects(cms.Items), byCluster[c.Name]); d != "" {
				t.Errorf("%s configmaps (fleet-wide list): %s", c.Name, d)
			}
			settings, err := l.configMaps.Get(aggregate.Key{Cluster: c.Name, Namespace: "shop", Name: "settings"})
			if err != nil || settings.Data["cluster"] != c.Name {
				t.Errorf("%s: Get configmap shop/settings: %+v, %v", c.Name, settings, err)
			}

			// Services are cached metadata-only: PartialObjectMetadata, as the metadata
			// client returns them.
			svcs, err := metadata.NewForConfigOrDie(c.RESTConfig()).Resource(servicesGVR).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cachedSvcs, err := l.services.Cluster(c.Name).List(nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := diffTyped(objects(svcs.Items), pointers(cachedSvcs)); d != "" {
				t.Errorf("%s services (metadata): %s", c.Name, d)
			}
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := l.configMaps.Cluster("alpha").Namespace("shop").Get("nope")
		var status apierrors.APIStatus
		if !apierrors.IsNotFound(err) || !errors.As(err, &status) || status.Status().Details.Kind != "configmaps" || status.Status().Details.Name != "nope" {
			t.Errorf("missing configmap: %v, want NotFound of configmaps \"nope\"", err)
		}
		full, err := aggregate.NewTypedLister[corev1.Service](fleet, servicesGVR, scheme.Scheme)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := full.Cluster("alpha").Namespace("shop").Get("web"); !errors.Is(err, aggregate.ErrTypeMismatch) {
			t.Errorf("a metadata-only service as corev1.Service: got %v, want ErrTypeMismatch", err)
		}
		if _, err := mgr.RESTConfig("nope"); !errors.Is(err, fleetwatch.ErrUnknownCluster) {
			t.Errorf("RESTConfig of an unknown cluster: got %v, want ErrUnknownCluster", err)
		}
	})

	t.Run("write-back lands on the cluster the event came from", func(t *testing.T) {
		// The same configmap in every cluster; alpha's and the third's ask for the label.
		created := map[string]string{}
		for i, c := range env.Clusters {
			cm := configMap("shop", "trigger", c.Name)
			if i != 1 {
				cm.Labels = map[string]string{"writeback": "please"}
			}
			got, err := c.Clientset().CoreV1().ConfigMaps("shop").Create(ctx, cm, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			created[c.Name] = got.ResourceVersion
		}
		asked := []*testenv.Cluster{env.Clusters[0], env.Clusters[2]}
		eventually(t, 30*time.Second, "labels written back", func() string {
			for _, c := range asked {
				got, err := c.Clientset().CoreV1().ConfigMaps("shop").Get(ctx, "trigger", metav1.GetOptions{})
				if err != nil {
					return err.Error()
				}
				if v := got.Labels["written-by"]; v != labelSafe(c.Name) {
					return fmt.Sprintf("%s: written-by=%q", c.Name, v)
				}
				// And the write comes back through the watch into the typed reads.
				cached, err := l.configMaps.Cluster(c.Name).Namespace("shop").Get("trigger")
				if err != nil || cached.ResourceVersion != got.ResourceVersion || cached.Labels["written-by"] != labelSafe(c.Name) {
					return fmt.Sprintf("%s: cached %+v, %v; server at %s", c.Name, cached, err, got.ResourceVersion)
				}
			}
			return ""
		})
		bravo := env.Clusters[1]
		got, err := bravo.Clientset().CoreV1().ConfigMaps("shop").Get(ctx, "trigger", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != created[bravo.Name] || len(got.Labels) != 0 {
			t.Errorf("bravo's configmap was changed: rv %s (created at %s), labels %v", got.ResourceVersion, created[bravo.Name], got.Labels)
		}
		writes, errs := wb.state()
		if want := map[string]int{env.Clusters[0].Name: 1, env.Clusters[2].Name: 1}; !maps.Equal(writes, want) || len(errs) != 0 {
			t.Errorf("writes by cluster %v, errors %v; want %v and none", writes, errs, want)
		}
	})
}

// typedReadsEqual says how the typed reads of pods and deployments of each cluster in
// got differ from those in want.
func typedReadsEqual(t *testing.T, clusters []*testenv.Cluster, want, got *aggregate.Fleet) string {
	t.Helper()
	wl, gl := newTypedListers(t, want), newTypedListers(t, got)
	for _, c := range clusters {
		wp, err1 := wl.pods.Cluster(c.Name).List(nil)
		gp, err2 := gl.pods.Cluster(c.Name).List(nil)
		wd, err3 := wl.deployments.Cluster(c.Name).List(nil)
		gd, err4 := gl.deployments.Cluster(c.Name).List(nil)
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return err.Error()
		}
		if len(wp) == 0 || len(wd) == 0 {
			return fmt.Sprintf("%s: %d pods and %d deployments to compare", c.Name, len(wp), len(wd))
		}
		if d := diffTyped(pointers(wp), pointers(gp)); d != "" {
			return c.Name + " pods: " + d
		}
		if d := diffTyped(pointers(wd), pointers(gd)); d != "" {
			return c.Name + " deployments: " + d
		}
	}
	return ""
}
