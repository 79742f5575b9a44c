package client

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
)

func pod(cluster, namespace, name string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if cluster != "" {
		p.Annotations = map[string]string{v1alpha1.ClusterAnnotation: cluster}
	}
	return p
}

func TestKeyFunc(t *testing.T) {
	tests := []struct {
		name string
		obj  any
		want string
	}{
		{"namespaced", pod("prod", "shop", "web"), "prod/shop/web"},
		{"cluster-scoped", pod("prod", "", "node-1"), "prod//node-1"},
		{"a cluster name with a slash", pod("arn:aws:eks:eu-west-1:1:cluster/prod", "shop", "web"), "arn:aws:eks:eu-west-1:1:cluster%2Fprod/shop/web"},
		{"deleted, final state unknown", cache.DeletedFinalStateUnknown{Key: "prod/shop/web", Obj: pod("prod", "shop", "web")}, "prod/shop/web"},
		{"explicit key", cache.ExplicitKey("prod/shop/web"), "prod/shop/web"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := KeyFunc(tt.obj)
			if err != nil || got != tt.want {
				t.Fatalf("KeyFunc() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if a, b := must(KeyFunc(pod("a", "shop", "web"))), must(KeyFunc(pod("b", "shop", "web"))); a == b {
		t.Errorf("the same object in two clusters has one key %q", a)
	}
	if _, err := KeyFunc(pod("", "shop", "web")); !errors.Is(err, ErrNoCluster) {
		t.Errorf("KeyFunc of an object without the annotation: %v, want ErrNoCluster", err)
	}
	if _, err := KeyFunc("not an object"); err == nil {
		t.Error("KeyFunc of a string succeeded")
	}
}

func must(s string, err error) string {
	if err != nil {
		panic(err)
	}
	return s
}

func TestClusterOf(t *testing.T) {
	if got := ClusterOf(pod("prod", "shop", "web")); got != "prod" {
		t.Errorf("ClusterOf() = %q", got)
	}
	if got := ClusterOf(cache.DeletedFinalStateUnknown{Key: "k", Obj: pod("prod", "shop", "web")}); got != "prod" {
		t.Errorf("ClusterOf(DeletedFinalStateUnknown) = %q", got)
	}
	if got := ClusterOf(42); got != "" {
		t.Errorf("ClusterOf(42) = %q", got)
	}
}

func TestConfigFor(t *testing.T) {
	cfg := &rest.Config{Host: "https://fleetwatch.example:8443/", BearerToken: "t"}
	for cluster, want := range map[string]string{
		"prod":                                 "https://fleetwatch.example:8443/clusters/prod",
		v1alpha1.AllClusters:                   "https://fleetwatch.example:8443/clusters/*",
		"arn:aws:eks:eu-west-1:1:cluster/prod": "https://fleetwatch.example:8443/clusters/arn:aws:eks:eu-west-1:1:cluster%2Fprod",
	} {
		got := ConfigFor(cfg, cluster)
		if got.Host != want || got.BearerToken != "t" {
			t.Errorf("ConfigFor(%q).Host = %q, want %q", cluster, got.Host, want)
		}
	}
	if cfg.Host != "https://fleetwatch.example:8443/" {
		t.Errorf("ConfigFor changed its argument: %q", cfg.Host)
	}
}

// FuzzKeyFunc: the key of any object of any cluster splits back into its cluster,
// namespace and name.
func FuzzKeyFunc(f *testing.F) {
	f.Add("prod", "shop", "web")
	f.Add("arn:aws:eks:eu-west-1:1:cluster/prod", "", "node-1")
	f.Add("a%2Fb", "ns", "n")
	f.Fuzz(func(t *testing.T, cluster, namespace, name string) {
		if cluster == "" {
			return
		}
		key, err := KeyFunc(pod(cluster, namespace, name))
		if err != nil {
			t.Fatal(err)
		}
		c, ns, n, err := SplitKey(key)
		if err != nil {
			// A namespace or name with a '/' is no Kubernetes name: its key need not
			// split, as aggregate.ParseKey says.
			return
		}
		if c != cluster || ns != namespace || n != name {
			t.Fatalf("SplitKey(%q) = %q, %q, %q; want %q, %q, %q", key, c, ns, n, cluster, namespace, name)
		}
	})
}
