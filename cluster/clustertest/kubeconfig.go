package clustertest

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Context describes one context of a test kubeconfig. The context gets a cluster entry
// and a user entry of its own, both named after it.
type Context struct {
	Name      string
	Server    string
	CAData    []byte // PEM; empty for plain HTTP or Insecure
	Insecure  bool
	Token     string
	Namespace string
}

// Config returns a kubeconfig holding the contexts; the first one is the current
// context.
func Config(contexts ...Context) clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	for i, c := range contexts {
		if i == 0 {
			cfg.CurrentContext = c.Name
		}
		cl := clientcmdapi.NewCluster()
		cl.Server = c.Server
		cl.CertificateAuthorityData = c.CAData
		cl.InsecureSkipTLSVerify = c.Insecure
		cfg.Clusters[c.Name] = cl
		u := clientcmdapi.NewAuthInfo()
		u.Token = c.Token
		cfg.AuthInfos[c.Name] = u
		ctx := clientcmdapi.NewContext()
		ctx.Cluster = c.Name
		ctx.AuthInfo = c.Name
		ctx.Namespace = c.Namespace
		cfg.Contexts[c.Name] = ctx
	}
	return *cfg
}

// WriteKubeconfig writes a kubeconfig of the contexts to path, replacing the file
// atomically as WriteConfig does.
func WriteKubeconfig(t testing.TB, path string, contexts ...Context) {
	t.Helper()
	WriteConfig(t, path, Config(contexts...))
}

// WriteConfig writes cfg to path with clientcmd.WriteToFile, atomically: to a temporary
// file in the same directory, then renamed over path, as kubectl and most editors do.
func WriteConfig(t testing.TB, path string, cfg clientcmdapi.Config) {
	t.Helper()
	tmp := tempName(t, path)
	if err := clientcmd.WriteToFile(cfg, tmp); err != nil {
		t.Fatalf("writing kubeconfig: %v", err)
	}
	rename(t, tmp, path)
}

// WriteFile writes data to path atomically, like WriteConfig; for garbage and
// hand-written kubeconfigs.
func WriteFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := tempName(t, path)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("writing %s: %v", tmp, err)
	}
	rename(t, tmp, path)
}

// tempName returns an unused name next to path, creating the directory if needed. It starts with '.', so that a
// directory of kubeconfigs never lists it.
func tempName(t testing.TB, path string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatalf("creating directory of %s: %v", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		t.Fatalf("creating temporary file: %v", err)
	}
	name := f.Name()
	if err := f.Close(); err != nil {
		t.Fatalf("closing %s: %v", name, err)
	}
	return name
}

func rename(t testing.TB, from, to string) {
	t.Helper()
	if err := os.Rename(from, to); err != nil {
		t.Fatalf("renaming %s to %s: %v", from, to, err)
	}
}
