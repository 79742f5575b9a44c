package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Environment variables read by the harness.
const (
	// EnvKubeAPIServer and EnvEtcd name the binaries to run. When unset, the harness runs
	// hack/build-tools.sh, which builds them once into a cache outside the repo.
	EnvKubeAPIServer = "FLEETWATCH_KUBE_APISERVER"
	EnvEtcd          = "FLEETWATCH_ETCD"
	// EnvKubectl names the kubectl that end-to-end tests drive.
	EnvKubectl = "FLEETWATCH_KUBECTL"
	// EnvSkip, when set to a non-empty value, makes New skip the test instead of failing
	// it when the clusters cannot start. CI never sets it.
	EnvSkip = "FLEETWATCH_E2E_SKIP"
)

// Options configure an Env.
type Options struct {
	// Names are the cluster (context) names. Default: cluster-1 ... cluster-N for
	// Clusters clusters.
	Names []string
	// Clusters is the number of clusters when Names is empty. Default 3.
	Clusters int
	// Dir holds the kubeconfig, the key material, etcd data and process logs. Default: a
	// new temporary directory, removed by Close.
	Dir string
	// APIServerArgs are appended to every kube-apiserver's arguments.
	APIServerArgs []string
	// AuditWatches, if set, has every kube-apiserver write an audit log of the watches
	// and lists it serves (Cluster.Watches and Cluster.Requests read it): the
	// apiserver's own account of who watches and lists, by user agent. Default false.
	AuditWatches bool
}

// Env is a set of running clusters and the kubeconfig that reaches them.
type Env struct {
	// Clusters are in the order of Options.Names.
	Clusters []*Cluster
	// Kubeconfig is the path of a kubeconfig file with one context per cluster, named
	// after the cluster; its current context is the first cluster.
	Kubeconfig string
	// Dir is the Env's directory.
	Dir string

	opts       Options
	removeDir  bool
	pki        *pki
	token      string
	tokenFile  string
	httpClient *http.Client
	closeOnce  sync.Once
}

// New starts an Env for a test and stops it when the test ends. If the clusters cannot
// start, the test fails with the reason, unless FLEETWATCH_E2E_SKIP is set.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	env, err := Start(context.Background(), opts)
	if err != nil {
		if os.Getenv(EnvSkip) != "" {
			t.Skipf("real clusters unavailable and %s is set: %v", EnvSkip, err)
		}
		t.Fatalf("starting real clusters (set %s=1 to skip instead): %v", EnvSkip, err)
	}
	t.Cleanup(func() {
		if err := env.Close(); err != nil {
			t.Errorf("stopping clusters: %v", err)
		}
	})
	return env
}

// Start starts the clusters of opts in parallel and waits until all are ready. On error
// everything it started is stopped again.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	names := opts.Names
	if len(names) == 0 {
		n := opts.Clusters
		if n == 0 {
			n = 3
		}
		for i := 1; i <= n; i++ {
			names = append(names, fmt.Sprintf("cluster-%d", i))
		}
	}
	kasPath, etcdPath, err := Binaries()
	if err != nil {
		return nil, err
	}
	env := &Env{opts: opts, Dir: opts.Dir}
	if env.Dir == "" {
		if env.Dir, err = os.MkdirTemp("", "fleetwatch-testenv-"); err != nil {
			return nil, err
		}
		env.removeDir = true
	} else if err := os.MkdirAll(env.Dir, 0o700); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = env.Close()
		}
	}()
	if env.pki, err = newPKI(env.Dir); err != nil {
		return nil, err
	}
	if env.httpClient, err = newHTTPClient(env.pki.caPEM); err != nil {
		return nil, err
	}
	env.token = randomHex(16)
	env.tokenFile = filepath.Join(env.Dir, "tokens.csv")
	if err := os.WriteFile(env.tokenFile, []byte(env.token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}

	if opts.AuditWatches {
		if err := os.WriteFile(filepath.Join(env.Dir, auditPolicyFile), []byte(auditPolicy), 0o600); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(3 * len(names))
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		dir := filepath.Join(env.Dir, "clusters", fmt.Sprintf("%d", i))
		if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
			return nil, err
		}
		c := &Cluster{
			Name:        name,
			env:         env,
			dir:         dir,
			etcdDataDir: filepath.Join(dir, "etcd"),
			etcdPort:    ports[3*i],
			etcdPeer:    ports[3*i+1],
			apiPort:     ports[3*i+2],
		}
		c.etcd = &process{name: "etcd " + name, path: etcdPath, args: c.etcdArgs(), logPath: filepath.Join(dir, "etcd.log")}
		c.apiserver = &process{name: "kube-apiserver " + name, path: kasPath, args: c.apiserverArgs(), logPath: filepath.Join(dir, "kube-apiserver.log")}
		env.Clusters = append(env.Clusters, c)
	}

	g, gctx := errgroup.WithContext(ctx)
	for _, c := range env.Clusters {
		g.Go(func() error {
			if err := c.start(gctx); err != nil {
				return fmt.Errorf("cluster %s: %w", c.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	env.Kubeconfig = filepath.Join(env.Dir, "kubeconfig")
	if err := env.WriteKubeconfig(env.Kubeconfig, env.Clusters...); err != nil {
		return nil, err
	}
	return env, nil
}

// Cluster returns the cluster called name, or nil.
func (e *Env) Cluster(name string) *Cluster {
	for _, c := range e.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// KubeconfigFor returns an admin kubeconfig with one context per given cluster, named
// after the cluster; the first is the current context.
func (e *Env) KubeconfigFor(clusters ...*Cluster) *clientcmdapi.Config {
	cfg := clientcmdapi.NewConfig()
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: e.token}
	for _, c := range clusters {
		cfg.Clusters[c.Name] = &clientcmdapi.Cluster{Server: c.Server(), CertificateAuthorityData: e.pki.caPEM}
		cfg.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: "admin"}
		if cfg.CurrentContext == "" {
			cfg.CurrentContext = c.Name
		}
	}
	return cfg
}

// WriteKubeconfig writes KubeconfigFor(clusters...) to path, atomically (a temporary
// file renamed into place), as kubectl does.
func (e *Env) WriteKubeconfig(path string, clusters ...*Cluster) error {
	tmp := path + ".tmp"
	if err := clientcmd.WriteToFile(*e.KubeconfigFor(clusters...), tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Token is the admin bearer token. Tests use it to check that it never leaks.
func (e *Env) Token() string { return e.token }

// CAData is the PEM CA certificate that the apiservers' serving certificate chains to.
func (e *Env) CAData() []byte { return e.pki.caPEM }

// Close stops every process of the Env, apiservers first, and removes the directory if
// Start created it.
func (e *Env) Close() error {
	var errs []error
	e.closeOnce.Do(func() {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, c := range e.Clusters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.mu.Lock()
				extra := slices.Clone(c.extra)
				c.mu.Unlock()
				var err error
				for _, a := range extra {
					err = errors.Join(err, a.proc.stop(stopGrace))
				}
				err = errors.Join(err, c.apiserver.stop(stopGrace), c.etcd.stop(stopGrace))
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}()
		}
		wg.Wait()
		if e.removeDir {
			errs = append(errs, os.RemoveAll(e.Dir))
		}
	})
	return errors.Join(errs...)
}

// Binaries returns the paths of kube-apiserver and etcd: from FLEETWATCH_KUBE_APISERVER
// and FLEETWATCH_ETCD when set, else from hack/build-tools.sh, which builds them on first
// use.
func Binaries() (kubeAPIServer, etcd string, err error) {
	paths, err := tools(EnvKubeAPIServer, EnvEtcd)
	if err != nil {
		return "", "", err
	}
	return paths[EnvKubeAPIServer], paths[EnvEtcd], nil
}

// Kubectl returns the path of the kubectl built from the same Kubernetes release as the
// apiservers: FLEETWATCH_KUBECTL when set, else from hack/build-tools.sh.
func Kubectl() (string, error) {
	paths, err := tools(EnvKubectl)
	if err != nil {
		return "", err
	}
	return paths[EnvKubectl], nil
}

// tools returns the path of each tool named by its environment variable, running
// hack/build-tools.sh for those that are not set.
func tools(envs ...string) (map[string]string, error) {
	paths := map[string]string{}
	missing := false
	for _, e := range envs {
		paths[e] = os.Getenv(e)
		missing = missing || paths[e] == ""
	}
	if missing {
		root, err := repoRoot()
		if err != nil {
			return nil, err
		}
		script := filepath.Join(root, "hack", "build-tools.sh")
		cmd := exec.Command(script, "--print")
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", script, err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			k, v, _ := strings.Cut(sc.Text(), "=")
			if p, ok := paths[k]; ok && p == "" {
				paths[k] = v
			}
		}
	}
	for e, p := range paths {
		if p == "" {
			return nil, fmt.Errorf("no path for %s from hack/build-tools.sh", e)
		}
		if st, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("test binary: %w", err)
		} else if st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("test binary %s is not executable", p)
		}
	}
	return paths, nil
}

// repoRoot finds the fleetwatch repository from the working directory upwards.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build-tools.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("hack/build-tools.sh not found above the working directory; set %s and %s", EnvKubeAPIServer, EnvEtcd)
		}
		dir = parent
	}
}

// freePorts returns n distinct free loopback ports. The listeners are held until all n
// are picked, so the ports differ from each other; another process may still take one
// before it is used, which is unlikely enough for tests.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
