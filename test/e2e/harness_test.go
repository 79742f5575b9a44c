package e2e

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestHarness proves that the test harness gives real, independent clusters with the
// faults that the rest of the suite relies on.
func TestHarness(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 3})
	ctx := t.Context()

	// One kubeconfig, one context per cluster, each reaching its own cluster.
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if len(kc.Contexts) != 3 {
		t.Fatalf("kubeconfig has %d contexts, want 3", len(kc.Contexts))
	}
	uids := map[types.UID]string{}
	for _, c := range env.Clusters {
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, c.Name, nil, nil).ClientConfig()
		if err != nil {
			t.Fatalf("context %s: %v", c.Name, err)
		}
		cs := kubernetes.NewForConfigOrDie(cfg)
		createConfigMap(t, cs, "harness", "owner", c.Name)
		got, err := cs.CoreV1().ConfigMaps("harness").Get(ctx, "owner", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Data["cluster"] != c.Name {
			t.Errorf("context %s reads a configmap written for %q", c.Name, got.Data["cluster"])
		}
		uid, err := c.UID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if other, dup := uids[uid]; dup {
			t.Fatalf("clusters %s and %s share kube-system UID %s", other, c.Name, uid)
		}
		uids[uid] = c.Name
	}

	t.Run("kill -9 and restart keeps the data", func(t *testing.T) {
		c := env.Clusters[0]
		if err := c.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Clientset().CoreV1().Namespaces().Get(ctx, "harness", metav1.GetOptions{}); err == nil {
			t.Fatal("a killed apiserver answered")
		}
		if err := c.StartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := c.Clientset().CoreV1().ConfigMaps("harness").Get(ctx, "owner", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("after restart: %v", err)
		}
		if got.Data["cluster"] != c.Name {
			t.Errorf("after restart: data %v", got.Data)
		}
	})

	t.Run("pause makes requests time out, resume recovers", func(t *testing.T) {
		c := env.Clusters[1]
		if err := c.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		cfg := c.RESTConfig()
		cfg.Timeout = 2 * time.Second
		start := time.Now()
		_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(ctx, "harness", metav1.GetOptions{})
		if err == nil {
			t.Fatal("a paused apiserver answered")
		}
		var netErr net.Error
		if !(errors.As(err, &netErr) && netErr.Timeout()) && !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("want a timeout from a paused apiserver, got %v", err)
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("the request failed after %v, before its timeout: %v", d, err)
		}
		if err := c.ResumeAPIServer(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Clientset().CoreV1().Namespaces().Get(ctx, "harness", metav1.GetOptions{}); err != nil {
			t.Errorf("after resume: %v", err)
		}
	})

	t.Run("a second apiserver changes the cluster while the first is paused", func(t *testing.T) {
		c := env.Clusters[1]
		second, err := c.AddAPIServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer second.Stop()
		if err := c.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		err = kubernetes.NewForConfigOrDie(second.RESTConfig()).CoreV1().ConfigMaps("harness").Delete(ctx, "owner", metav1.DeleteOptions{})
		if resumeErr := c.ResumeAPIServer(); resumeErr != nil {
			t.Fatal(resumeErr)
		}
		if err != nil {
			t.Fatalf("delete through the second apiserver: %v", err)
		}
		_, err = c.Clientset().CoreV1().ConfigMaps("harness").Get(ctx, "owner", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("the first apiserver after resume: want NotFound, got %v", err)
		}
	})

	t.Run("recreate gives an empty cluster with a new identity", func(t *testing.T) {
		c := env.Clusters[2]
		before, err := c.UID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Recreate(ctx); err != nil {
			t.Fatal(err)
		}
		after, err := c.UID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if after == before {
			t.Errorf("kube-system UID unchanged after recreate: %s", after)
		}
		// The same kubeconfig still reaches it.
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, c.Name, nil, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().ConfigMaps("harness").Get(ctx, "owner", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("old object after recreate: want NotFound, got %v", err)
		}
	})

	t.Run("compaction and restart expire old resourceVersions", func(t *testing.T) {
		c := env.Clusters[0]
		cs := c.Clientset()
		list, err := cs.CoreV1().ConfigMaps("harness").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldRV := list.ResourceVersion
		for i := range 5 {
			cm := configMap("harness", "churn", c.Name)
			cm.Data["i"] = string(rune('a' + i))
			if i == 0 {
				_, err = cs.CoreV1().ConfigMaps("harness").Create(ctx, cm, metav1.CreateOptions{})
			} else {
				_, err = cs.CoreV1().ConfigMaps("harness").Update(ctx, cm, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Compact(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.RestartAPIServer(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := c.Clientset().CoreV1().ConfigMaps("harness").Watch(ctx, metav1.ListOptions{ResourceVersion: oldRV})
		if err != nil {
			if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
				t.Fatalf("watch from a compacted RV: want 410, got %v", err)
			}
			return
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Error {
				t.Fatalf("watch from a compacted RV: want an error event, got %s", ev.Type)
			}
			if st := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(st) && !apierrors.IsGone(st) {
				t.Fatalf("watch from a compacted RV: want 410, got %v", st)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("watch from a compacted RV: no event")
		}
	})

	t.Run("metrics count requests", func(t *testing.T) {
		c := env.Clusters[1]
		before, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := c.Clientset().CoreV1().ConfigMaps("harness").List(ctx, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		after, err := c.Metrics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if d := after.Requests("LIST", "configmaps") - before.Requests("LIST", "configmaps"); d < 3 {
			t.Errorf("apiserver_request_total{verb=LIST,resource=configmaps} grew by %v, want >= 3", d)
		}
	})
}

func configMap(ns, name, cluster string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string]string{"cluster": cluster},
	}
}

func createConfigMap(t *testing.T, cs kubernetes.Interface, ns, name, cluster string) {
	t.Helper()
	ctx := t.Context()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, name, cluster), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
