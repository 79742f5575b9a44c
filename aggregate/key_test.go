package aggregate_test

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

func TestKeyString(t *testing.T) {
	tests := []struct {
		name string
		key  aggregate.Key
		want string
	}{
		{"namespaced", aggregate.Key{Cluster: "prod", Namespace: "default", Name: "web-0"}, "prod/default/web-0"},
		{"cluster-scoped", aggregate.Key{Cluster: "prod", Name: "node-1"}, "prod//node-1"},
		{"EKS ARN", aggregate.Key{Cluster: "arn:aws:eks:eu-west-1:123:cluster/prod", Namespace: "ns", Name: "name"}, "arn:aws:eks:eu-west-1:123:cluster%2Fprod/ns/name"},
		{"percent", aggregate.Key{Cluster: "100%", Namespace: "ns", Name: "n"}, "100%25/ns/n"},
		{"percent then slash", aggregate.Key{Cluster: "%2F/", Namespace: "ns", Name: "n"}, "%252F%2F/ns/n"},
		{"other characters kept", aggregate.Key{Cluster: "gke_p_europe-west1_c@x:y", Namespace: "ns", Name: "n"}, "gke_p_europe-west1_c@x:y/ns/n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.key.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			back, err := aggregate.ParseKey(tt.want)
			if err != nil {
				t.Fatalf("ParseKey(%q): %v", tt.want, err)
			}
			if back != tt.key {
				t.Errorf("ParseKey(%q) = %#v, want %#v", tt.want, back, tt.key)
			}
		})
	}
}

func TestParseKeyErrors(t *testing.T) {
	tests := []struct {
		in      string
		wantMsg string
	}{
		{"", "found no '/'"},
		{"prod", "found no '/'"},
		{"prod/name", "found 2 segments"},
		{"prod/ns/a/b", "found 4 segments"},
		{"prod/ns/a/", "found 4 segments"},
		{"/ns/name", "empty cluster"},
		{"prod/ns/", "empty name"},
		{"prod//", "empty name"},
		{"a%2fb/ns/n", `escape "%2f"`},
		{"a%41/ns/n", `escape "%41"`},
		{"a%/ns/n", `escape "%"`},
		{"a%2/ns/n", `escape "%2"`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := aggregate.ParseKey(tt.in)
			if !errors.Is(err, aggregate.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error = %v, want ErrInvalidKey", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("ParseKey(%q) error = %q, want it to mention %q", tt.in, err, tt.wantMsg)
			}
		})
	}
}

func TestKeyClientGoConversion(t *testing.T) {
	tests := []struct {
		name      string
		obj       metav1.Object
		wantKey   aggregate.Key
		clientKey string
	}{
		{"namespaced", aggregatetest.Pod("default", "web", "1", nil), aggregate.Key{Cluster: "c/1", Namespace: "default", Name: "web"}, "default/web"},
		{"cluster-scoped", aggregatetest.Node("node-1", "1", nil), aggregate.Key{Cluster: "c/1", Name: "node-1"}, "node-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := aggregate.KeyFor("c/1", tt.obj)
			if k != tt.wantKey {
				t.Fatalf("KeyFor = %#v, want %#v", k, tt.wantKey)
			}
			want, err := cache.MetaNamespaceKeyFunc(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if want != tt.clientKey || k.MetaNamespaceKey() != want {
				t.Errorf("MetaNamespaceKey() = %q, client-go = %q, want %q", k.MetaNamespaceKey(), want, tt.clientKey)
			}
			if got := k.ObjectName().String(); got != want {
				t.Errorf("ObjectName().String() = %q, want %q", got, want)
			}
			back, err := aggregate.ParseMetaNamespaceKey("c/1", want)
			if err != nil || back != k {
				t.Errorf("ParseMetaNamespaceKey(%q) = %#v, %v; want %#v", want, back, err, k)
			}
		})
	}
	for _, bad := range []string{"a/b/c", "ns/", "", "/name"} {
		if _, err := aggregate.ParseMetaNamespaceKey("c", bad); !errors.Is(err, aggregate.ErrInvalidKey) {
			t.Errorf("ParseMetaNamespaceKey(%q) error = %v, want ErrInvalidKey", bad, err)
		}
	}
	if _, err := aggregate.ParseMetaNamespaceKey("", "ns/n"); !errors.Is(err, aggregate.ErrInvalidKey) {
		t.Errorf("ParseMetaNamespaceKey with empty cluster: error = %v, want ErrInvalidKey", err)
	}
}

// FuzzParseKey checks that parsing is strict and canonical: a string parses exactly when
// it is the String of the key it parses to.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"prod/default/web", "prod//node", "arn:aws:eks:eu-west-1:123:cluster%2Fprod/ns/name",
		"100%25/ns/n", "a%2fb/ns/n", "a/b/c/d", "//", "a%/b/c", "%252F/x/y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := aggregate.ParseKey(s)
		if err != nil {
			if !errors.Is(err, aggregate.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error %v does not wrap ErrInvalidKey", s, err)
			}
			return
		}
		if got := k.String(); got != s {
			t.Fatalf("ParseKey(%q).String() = %q", s, got)
		}
		k2, err := aggregate.ParseKey(k.String())
		if err != nil || k2 != k {
			t.Fatalf("ParseKey(String()) = %#v, %v; want %#v", k2, err, k)
		}
	})
}

// FuzzKeyRoundTrip checks that every valid key, whatever its cluster name, survives
// String and ParseKey.
func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("prod", "default", "web")
	f.Add("arn:aws:eks:eu-west-1:123:cluster/prod", "", "node-1")
	f.Add("%2F%25/%", "ns", "n")
	f.Add("a//b", "kube-system", "x")
	f.Fuzz(func(t *testing.T, cluster, namespace, name string) {
		if cluster == "" || name == "" || strings.Contains(namespace, "/") || strings.Contains(name, "/") {
			t.Skip("not a valid key")
		}
		k := aggregate.Key{Cluster: cluster, Namespace: namespace, Name: name}
		s := k.String()
		if strings.Count(s, "/") != 2 {
			t.Fatalf("%#v.String() = %q has %d slashes, want 2", k, s, strings.Count(s, "/"))
		}
		back, err := aggregate.ParseKey(s)
		if err != nil {
			t.Fatalf("ParseKey(%q): %v", s, err)
		}
		if back != k {
			t.Fatalf("ParseKey(%q) = %#v, want %#v", s, back, k)
		}
	})
}
