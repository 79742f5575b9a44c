package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcluster "sigs.k8s.io/controller-runtime/pkg/cluster"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	"sigs.k8s.io/multicluster-runtime/pkg/multicluster"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/mcprovider"
	"github.com/fleetwatch/fleetwatch/persist"
)

// The label that asks the controllers of these tests for a write, the annotation they
// write, and the field they index.
const (
	reconcileLabel  = "fleetwatch.io/reconcile"
	reconciledIn    = "fleetwatch.io/reconciled-in"
	clusterField    = "data.cluster"
	demoNamespace   = "demo"
	perCluster      = 5
	pollInterval    = 50 * time.Millisecond
	convergeTimeout = 60 * time.Second
)

func eventually(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), pollInterval, timeout, true, func(context.Context) (bool, error) {
		last = cond()
		return last == "", nil
	})
	if err != nil {
		t.Fatalf("%s: after %v: %s", what, timeout, last)
	}
}

// seed creates the demo namespace and perCluster labelled ConfigMaps in c, each holding
// the name of its cluster.
func seed(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	cs := c.Clientset()
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for i := range perCluster {
		createConfigMap(t, cs, fmt.Sprintf("cm-%d", i), c.Name)
	}
}

func createConfigMap(t *testing.T, cs kubernetes.Interface, name, cluster string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: name, Labels: map[string]string{reconcileLabel: "true"}},
		Data:       map[string]string{"cluster": cluster},
	}
	if _, err := cs.CoreV1().ConfigMaps(demoNamespace).Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// unreconciled lists, in c, the labelled ConfigMaps whose annotation does not name c.
func unreconciled(ctx context.Context, c *testenv.Cluster) string {
	list, err := c.Clientset().CoreV1().ConfigMaps(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: reconcileLabel + "=true"})
	if err != nil {
		return err.Error()
	}
	var bad []string
	for _, cm := range list.Items {
		if got := cm.Annotations[reconciledIn]; got != c.Name {
			bad = append(bad, fmt.Sprintf("%s/%s: %q", c.Name, cm.Name, got))
		}
	}
	return strings.Join(bad, ", ")
}

// requests records the requests of a controller.
type requests struct {
	mu   sync.Mutex
	seen []mcreconcile.Request
	// wrong collects requests whose object was not of the request's cluster.
	wrong []string
}

func (r *requests) add(req mcreconcile.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req)
}

func (r *requests) count(cluster string, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, req := range r.seen {
		if req.ClusterName.String() == cluster && (name == "" || req.Name == name) {
			n++
		}
	}
	return n
}

// uniformReconciler is multicluster-runtime's uniform reconciler: it reads the ConfigMap
// of the request from its cluster's cache, checks through the cluster's field index that
// it belongs to that cluster, and writes the cluster's name into it.
func uniformReconciler(mgr mcmanager.Manager, rec *requests) mcreconcile.Func {
	return func(ctx context.Context, req mcreconcile.Request) (ctrl.Result, error) {
		rec.add(req)
		cl, err := mgr.GetCluster(ctx, req.ClusterName)
		if errors.Is(err, multicluster.ErrClusterNotFound) {
			return ctrl.Result{}, nil
		}
		if err != nil {
			return ctrl.Result{}, err
		}
		cm := &corev1.ConfigMap{}
		if err := cl.GetClient().Get(ctx, req.NamespacedName, cm); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if cm.Labels[reconcileLabel] != "true" {
			return ctrl.Result{}, nil
		}
		if cm.Data["cluster"] != req.ClusterName.String() {
			rec.mu.Lock()
			rec.wrong = append(rec.wrong, fmt.Sprintf("request of %s read %s/%s of %s", req.ClusterName, cm.Namespace, cm.Name, cm.Data["cluster"]))
			rec.mu.Unlock()
		}
		var mine corev1.ConfigMapList
		if err := cl.GetClient().List(ctx, &mine, client.InNamespace(req.Namespace), client.MatchingFields{clusterField: req.ClusterName.String()}); err != nil {
			return ctrl.Result{}, err
		}
		if !slices.ContainsFunc(mine.Items, func(o corev1.ConfigMap) bool { return o.Name == cm.Name }) {
			rec.mu.Lock()
			rec.wrong = append(rec.wrong, fmt.Sprintf("the field index of %s does not list %s/%s", req.ClusterName, cm.Namespace, cm.Name))
			rec.mu.Unlock()
		}
		if cm.Annotations[reconciledIn] == req.ClusterName.String() {
			return ctrl.Result{}, nil
		}
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		cm.Annotations[reconciledIn] = req.ClusterName.String()
		if err := cl.GetClient().Update(ctx, cm); err != nil {
			if apierrors.IsConflict(err) {
				return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, nil
	}
}

// controller is a multicluster-runtime manager with the uniform reconciler, over a plain
// fleet or a compact one.
type controller struct {
	mode string
	p    *mcprovider.Provider
	mgr  mcmanager.Manager
	rec  *requests
}

// startController runs a multicluster-runtime manager over the fleet of kubeconfig with
// the uniform reconciler, until the test ends; with compact, over a compact fleet
// (Fleet.Codec = persist.Codec{}).
func startController(t *testing.T, kubeconfig string, compact bool) *controller {
	t.Helper()
	opts := fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{kubeconfig}, ReloadDelay: 50 * time.Millisecond},
		Resources: []informer.Resource{{Name: "configmaps"}, {Name: "pods"}},
	}
	mode := "plain"
	if compact {
		opts.Fleet.Codec = persist.Codec{}
		mode = "compact"
	}
	fleet, err := fleetwatch.NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := mcprovider.New(fleet, mcprovider.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := mcmanager.New(&rest.Config{Host: "https://local.invalid"}, p, mcmanager.Options{
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.GetFieldIndexer().IndexField(t.Context(), &corev1.ConfigMap{}, clusterField, func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["cluster"]}
	}); err != nil {
		t.Fatal(err)
	}
	rec := &requests{}
	if err := mcbuilder.ControllerManagedBy(mgr).Named("uniform-" + mode).For(&corev1.ConfigMap{}).Complete(uniformReconciler(mgr, rec)); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(1))).WithName(mode)
	ctrl.SetLogger(logger)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("manager: %v", err)
			}
		case <-time.After(40 * time.Second):
			t.Error("the manager did not stop within 40s")
		}
	})
	return &controller{mode: mode, p: p, mgr: mgr, rec: rec}
}

// TestControllerOverTheFleet runs two real mcmanagers with a uniform reconciler over 3
// clusters of the fleet, side by side, one over a plain fleet and one over a compact
// fleet: for each, every request carries the cluster its object lives in, every write
// lands in that cluster, a context added to the kubeconfig is engaged and reconciled,
// one removed is disengaged and gets no request any more, and one whose connection
// changes is replaced and reconciled again. Midway, it reads the real servers' objects
// through each cluster's cache (see checkTypedReads).
func TestControllerOverTheFleet(t *testing.T) {
	env := testenv.New(t, testenv.Options{Clusters: 4})
	ctx := t.Context()
	for _, c := range env.Clusters {
		seed(t, c)
	}
	first, added := env.Clusters[:3], env.Clusters[3]
	if err := env.WriteKubeconfig(env.Kubeconfig, first...); err != nil {
		t.Fatal(err)
	}
	controllers := []*controller{startController(t, env.Kubeconfig, false), startController(t, env.Kubeconfig, true)}

	eventually(t, convergeTimeout, "every labelled ConfigMap annotated with its own cluster", func() string {
		for _, c := range first {
			if bad := unreconciled(ctx, c); bad != "" {
				return bad
			}
		}
		return ""
	})
	for _, c := range controllers {
		if _, err := c.p.Get(ctx, multicluster.ClusterName(added.Name)); !errors.Is(err, multicluster.ErrClusterNotFound) {
			t.Fatalf("%s: Get(%s) before it is in the kubeconfig: %v, want ErrClusterNotFound", c.mode, added.Name, err)
		}
	}

	t.Run("typed reads", func(t *testing.T) { checkTypedReads(t, env, first, controllers[0].mgr, controllers[1].mgr) })

	// A context added to the kubeconfig is engaged and reconciled, by both.
	if err := env.WriteKubeconfig(env.Kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	eventually(t, convergeTimeout, "the added cluster reconciled", func() string { return unreconciled(ctx, added) })
	for _, c := range controllers {
		eventually(t, convergeTimeout, c.mode+": the added cluster's requests", func() string {
			if n := c.rec.count(added.Name, ""); n < perCluster {
				return fmt.Sprintf("%d requests of %s, want at least %d", n, added.Name, perCluster)
			}
			return ""
		})
	}

	// A removed one is disengaged: Get fails, and a new object in it gets no request.
	removed, other := env.Clusters[1], env.Clusters[2]
	kept := []*testenv.Cluster{env.Clusters[0], env.Clusters[2], env.Clusters[3]}
	if err := env.WriteKubeconfig(env.Kubeconfig, kept...); err != nil {
		t.Fatal(err)
	}
	for _, c := range controllers {
		eventually(t, convergeTimeout, c.mode+": the removed cluster disengaged", func() string {
			if _, err := c.p.Get(ctx, multicluster.ClusterName(removed.Name)); !errors.Is(err, multicluster.ErrClusterNotFound) {
				return fmt.Sprintf("Get(%s): %v", removed.Name, err)
			}
			return ""
		})
	}
	// A barrier is a ConfigMap of another cluster that both controllers requested.
	barrier := func(name string) {
		t.Helper()
		createConfigMap(t, other.Clientset(), name, other.Name)
		for _, c := range controllers {
			eventually(t, convergeTimeout, c.mode+": the barrier "+name+" requested", func() string {
				if c.rec.count(other.Name, name) == 0 {
					return "no request yet"
				}
				return ""
			})
		}
	}
	barrier("barrier-1")
	before := []int{controllers[0].rec.count(removed.Name, ""), controllers[1].rec.count(removed.Name, "")}
	createConfigMap(t, removed.Clientset(), "after-removal", removed.Name)
	barrier("barrier-2")
	for i, c := range controllers {
		if after := c.rec.count(removed.Name, ""); after != before[i] {
			t.Errorf("%s: %d requests of the removed cluster %s after it was disengaged", c.mode, after-before[i], removed.Name)
		}
	}
	cm, err := removed.Clientset().CoreV1().ConfigMaps(demoNamespace).Get(ctx, "after-removal", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Annotations[reconciledIn]; got != "" {
		t.Errorf("a ConfigMap created in %s after its removal was written: %q", removed.Name, got)
	}
	for _, c := range kept {
		eventually(t, convergeTimeout, "after the removal", func() string { return unreconciled(ctx, c) })
	}
	// A cluster whose connection changes in the kubeconfig is replaced: disengaged, then
	// engaged again as a new cluster.Cluster, which is reconciled.
	replaced := env.Clusters[0]
	var old []crcluster.Cluster
	for _, c := range controllers {
		o, err := c.p.Get(ctx, multicluster.ClusterName(replaced.Name))
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, o)
	}
	cfg := env.KubeconfigFor(kept...)
	cfg.Clusters[replaced.Name].CertificateAuthorityData = nil
	cfg.Clusters[replaced.Name].InsecureSkipTLSVerify = true
	if err := clientcmd.WriteToFile(*cfg, env.Kubeconfig+".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(env.Kubeconfig+".tmp", env.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	for i, c := range controllers {
		eventually(t, convergeTimeout, c.mode+": the changed cluster replaced", func() string {
			now, err := c.p.Get(ctx, multicluster.ClusterName(replaced.Name))
			if err != nil {
				return err.Error()
			}
			if now == old[i] {
				return "still the old cluster.Cluster"
			}
			if !now.GetConfig().Insecure {
				return "the new cluster.Cluster has the old connection"
			}
			return ""
		})
	}
	createConfigMap(t, replaced.Clientset(), "after-replace", replaced.Name)
	eventually(t, convergeTimeout, "the replaced cluster reconciled", func() string { return unreconciled(ctx, replaced) })
	for _, c := range controllers {
		eventually(t, convergeTimeout, c.mode+": the replaced cluster's new ConfigMap requested", func() string {
			if c.rec.count(replaced.Name, "after-replace") == 0 {
				return "no request yet"
			}
			return ""
		})
	}

	// After the changes, each cluster's cache is its server's state, and the removed
	// cluster's objects have left the fleet.
	for _, ctl := range controllers {
		for _, c := range kept {
			eventually(t, convergeTimeout, ctl.mode+": "+c.Name+": the cache equals the server", func() string { return cacheDiff(ctx, ctl.mgr, c) })
		}
		if n := ctl.p.Manager().Fleet().Indexer(configMapsGVR).ClusterLen(removed.Name); n != 0 {
			t.Errorf("%s: %d ConfigMaps of the removed cluster %s are still in the fleet", ctl.mode, n, removed.Name)
		}
		ctl.rec.mu.Lock()
		if len(ctl.rec.wrong) > 0 {
			t.Errorf("%s: requests that read objects of another cluster: %q", ctl.mode, ctl.rec.wrong)
		}
		clusters := map[string]bool{}
		for _, req := range ctl.rec.seen {
			clusters[req.ClusterName.String()] = true
		}
		names := make([]string, 0, len(clusters))
		for n := range clusters {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Logf("%s: %d requests of clusters %v", ctl.mode, len(ctl.rec.seen), names)
		ctl.rec.mu.Unlock()
	}
}

// cacheDiff says how the ConfigMaps of c's cache differ from its server's, by name and
// resourceVersion; empty if they do not.
func cacheDiff(ctx context.Context, mgr mcmanager.Manager, c *testenv.Cluster) string {
	cl, err := mgr.GetCluster(ctx, multicluster.ClusterName(c.Name))
	if err != nil {
		return err.Error()
	}
	server, err := c.Clientset().CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var cached corev1.ConfigMapList
	if err := cl.GetCache().List(ctx, &cached); err != nil {
		return err.Error()
	}
	want, got := map[string]string{}, map[string]string{}
	for _, o := range server.Items {
		want[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	for _, o := range cached.Items {
		got[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		return fmt.Sprintf("cache %v, server %v", got, want)
	}
	return ""
}
