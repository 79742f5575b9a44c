package cluster

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
)

// fakeCluster loads a cluster connecting to s through a kubeconfig file, as a real
// cluster would be.
func fakeCluster(t *testing.T, s *clustertest.Server, name string) *Cluster {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kc")
	clustertest.WriteKubeconfig(t, path, s.Context(name))
	return loadOne(t, path)
}

func TestReadIdentity(t *testing.T) {
	s := clustertest.NewServer(t)
	c := fakeCluster(t, s, "a")

	id, err := ReadIdentity(t.Context(), c.Config)
	if err != nil {
		t.Fatalf("ReadIdentity: %v", err)
	}
	want := Identity{UID: s.UID(), Server: s.URL}
	if id != want {
		t.Errorf("ReadIdentity() = %v, want %v", id, want)
	}
	if !id.Equal(want) {
		t.Errorf("%v.Equal(%v) = false", id, want)
	}
	// From the apiserver's watch cache, not a quorum read of etcd.
	if n := s.Requests("/api/v1/namespaces/kube-system?resourceVersion=0"); n != 1 {
		t.Errorf("%d reads of kube-system at resourceVersion 0, want 1", n)
	}

	s.SetUID("00000000-0000-0000-0000-000000000002")
	again, err := ReadIdentity(t.Context(), c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if again.Equal(id) {
		t.Errorf("a rebuilt cluster (new kube-system UID) has an equal identity: %v, %v", again, id)
	}
}

func TestReadIdentityErrors(t *testing.T) {
	s := clustertest.NewServer(t)
	t.Run("unauthorized", func(t *testing.T) {
		cfg := rest.CopyConfig(fakeCluster(t, s, "a").Config)
		cfg.BearerToken = "wrong-token"
		_, err := ReadIdentity(t.Context(), cfg)
		if !apierrors.IsUnauthorized(err) {
			t.Fatalf("ReadIdentity() error = %v, want Unauthorized", err)
		}
		if strings.Contains(err.Error(), "wrong-token") || !strings.Contains(err.Error(), s.URL) {
			t.Errorf("error %q: want the server and no token", err)
		}
	})
	t.Run("failing server", func(t *testing.T) {
		s.SetFailure(http.StatusInternalServerError)
		defer s.SetFailure(0)
		if _, err := ReadIdentity(t.Context(), fakeCluster(t, s, "a").Config); err == nil {
			t.Fatal("ReadIdentity() succeeded against a failing server")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := ReadIdentity(ctx, fakeCluster(t, s, "a").Config); err == nil {
			t.Fatal("ReadIdentity() succeeded with a cancelled context")
		}
	})
}

func TestIdentityEqual(t *testing.T) {
	a := Identity{UID: "u1", Server: "https://a.example"}
	tests := []struct {
		name string
		x, y Identity
		want bool
	}{
		{"same", a, a, true},
		{"other UID", a, Identity{UID: "u2", Server: a.Server}, false},
		{"other server", a, Identity{UID: a.UID, Server: "https://b.example"}, false},
		{"zero", Identity{}, Identity{}, false},
		{"no UID", Identity{Server: a.Server}, Identity{Server: a.Server}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.x.Equal(tt.y); got != tt.want {
				t.Errorf("%v.Equal(%v) = %v, want %v", tt.x, tt.y, got, tt.want)
			}
		})
	}
	if !(Identity{}).IsZero() || a.IsZero() {
		t.Error("IsZero is wrong")
	}
}

func TestNormalizeServer(t *testing.T) {
	tests := []struct {
		host string
		tls  bool
		want string
	}{
		{"https://a.example:6443", false, "https://a.example:6443"},
		{"HTTPS://A.Example:6443/", false, "https://a.example:6443"},
		{"https://user:pw@a.example/prefix/", false, "https://a.example/prefix"},
		{"a.example:6443", true, "https://a.example:6443"},
		{"a.example:8080", false, "http://a.example:8080"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			cfg := &rest.Config{Host: tt.host}
			if tt.tls {
				cfg.CAData = []byte("ca")
			}
			got, err := normalizeServer(cfg)
			if err != nil || got != tt.want {
				t.Errorf("normalizeServer(%q) = %q, %v; want %q", tt.host, got, err, tt.want)
			}
		})
	}
}
