package cluster

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

func TestFingerprint(t *testing.T) {
	base := func() (*clientcmdapi.Cluster, *clientcmdapi.AuthInfo) {
		c := clientcmdapi.NewCluster()
		c.Server = "https://a.example:6443"
		c.CertificateAuthorityData = []byte("ca")
		u := clientcmdapi.NewAuthInfo()
		u.Token = "token"
		u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"client-id": "fw", "id-token": "x"}}
		u.Exec = &clientcmdapi.ExecConfig{Command: "aws", Args: []string{"eks", "get-token"}, APIVersion: "client.authentication.k8s.io/v1"}
		return c, u
	}
	baseFP := fingerprint(base())
	tests := []struct {
		name   string
		change func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)
		same   bool
	}{
		{"nothing", func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo) {}, true},
		{"location of origin", func(c *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			c.LocationOfOrigin = "/x"
			u.LocationOfOrigin = "/y"
		}, true},
		{"refreshed auth-provider token", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.AuthProvider.Config["id-token"] = "y"
			u.AuthProvider.Config["refresh-token"] = "z"
		}, true},
		{"server", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "https://b.example:6443" }, false},
		{"CA data", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthorityData = []byte("ca2") }, false},
		{"CA file", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthority = "/ca.crt" }, false},
		{"TLS server name", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.TLSServerName = "api" }, false},
		{"insecure", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.InsecureSkipTLSVerify = true }, false},
		{"proxy", func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.ProxyURL = "http://proxy:3128" }, false},
		{"token", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Token = "token2" }, false},
		{"token file", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.TokenFile = "/token" }, false},
		{"client cert", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientCertificateData = []byte("cert") }, false},
		{"client key", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.ClientKey = "/key" }, false},
		{"password", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Password = "pw" }, false},
		{"impersonation", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.Impersonate = "admin" }, false},
		{"auth-provider config", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) { u.AuthProvider.Config["client-id"] = "other" }, false},
		{"exec args", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Exec.Args = append(u.Exec.Args, "--cluster-name=prod")
		}, false},
		{"exec env", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			u.Exec.Env = []clientcmdapi.ExecEnvVar{{Name: "AWS_PROFILE", Value: "prod"}}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, u := base()
			tt.change(c, u)
			if got := fingerprint(c, u) == baseFP; got != tt.same {
				t.Errorf("fingerprint unchanged = %v, want %v", got, tt.same)
			}
		})
	}
	t.Run("no user", func(t *testing.T) {
		c, _ := base()
		if fingerprint(c, nil) == baseFP {
			t.Error("a context without user has the fingerprint of one with a user")
		}
	})
}

// TestFingerprintFromFiles checks the fingerprints that Load computes, as the Provider
// compares them across reloads.
func TestFingerprintFromFiles(t *testing.T) {
	base := kctx("a")
	tests := []struct {
		name   string
		change func(*clustertest.Context)
		same   bool
	}{
		{"rewritten unchanged", func(*clustertest.Context) {}, true},
		{"namespace", func(c *clustertest.Context) { c.Namespace = "other" }, true},
		{"server", func(c *clustertest.Context) { c.Server = "https://a2.example:6443" }, false},
		{"token", func(c *clustertest.Context) { c.Token = "rotated" }, false},
		{"insecure", func(c *clustertest.Context) { c.Insecure = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kc")
			clustertest.WriteKubeconfig(t, path, base)
			before := loadOne(t, path)
			changed := base
			tt.change(&changed)
			clustertest.WriteKubeconfig(t, path, changed)
			after := loadOne(t, path)
			if got := before.Fingerprint == after.Fingerprint; got != tt.same {
				t.Errorf("fingerprint unchanged = %v, want %v", got, tt.same)
			}
			for _, secret := range []string{base.Token, changed.Token} {
				if strings.Contains(after.Fingerprint, secret) {
					t.Errorf("fingerprint %q holds the token", after.Fingerprint)
				}
			}
		})
	}
}

func loadOne(t *testing.T, path string) *Cluster {
	t.Helper()
	clusters, err := Load(Options{Kubeconfigs: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 {
		t.Fatalf("Load() = %d clusters, want 1", len(clusters))
	}
	return clusters[0]
}

func TestClusterServerIsRedacted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kc")
	ctx := kctx("a")
	ctx.Server = "https://user:hunter2@a.example:6443"
	clustertest.WriteKubeconfig(t, path, ctx)
	c := loadOne(t, path)
	if s := c.Server(); strings.Contains(s, "hunter2") || !strings.Contains(s, "a.example:6443") {
		t.Errorf("Server() = %q, want the URL without its password", s)
	}
	if got := redactURL("a.example:6443"); got != "a.example:6443" {
		t.Errorf("redactURL of a host without scheme = %q", got)
	}
}
