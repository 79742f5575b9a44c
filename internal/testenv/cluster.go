package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// stopGrace is how long a stopped process gets to exit after SIGTERM before SIGKILL.
const stopGrace = 10 * time.Second

// Cluster is one control plane: an etcd and a kube-apiserver.
//
// The methods that change its processes are safe for concurrent use, but a test should
// not run two faults on the same cluster at once.
type Cluster struct {
	// Name is the cluster's context name in the Env's kubeconfig.
	Name string

	env         *Env
	dir         string
	etcdDataDir string
	etcdPort    int
	etcdPeer    int
	apiPort     int

	etcd      *process
	apiserver *process

	// mu serializes the fault methods, which stop and start several processes, and
	// guards extra.
	mu sync.Mutex
	// extra are the additional apiservers started by AddAPIServer.
	extra []*APIServer
}

// APIServer is an additional kube-apiserver of a Cluster, on the same etcd: the same
// cluster reached at another address, as in a highly available control plane. Tests use
// it to change a cluster while the apiserver that fleetwatch watches is paused.
type APIServer struct {
	cluster *Cluster
	port    int
	proc    *process
}

// Server is the additional apiserver's URL.
func (a *APIServer) Server() string { return fmt.Sprintf("https://127.0.0.1:%d", a.port) }

// RESTConfig returns an admin rest.Config for the additional apiserver.
func (a *APIServer) RESTConfig() *rest.Config {
	cfg := a.cluster.RESTConfig()
	cfg.Host = a.Server()
	return cfg
}

// Stop stops the additional apiserver.
func (a *APIServer) Stop() error { return a.proc.stop(stopGrace) }

// AddAPIServer starts another kube-apiserver on the cluster's etcd and waits until it
// is ready. It is stopped by Env.Close, or earlier by its Stop.
func (c *Cluster) AddAPIServer(ctx context.Context) (*APIServer, error) {
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.extra) + 1
	a := &APIServer{cluster: c, port: ports[0]}
	args := c.apiserverArgs()
	for i, arg := range args {
		if strings.HasPrefix(arg, "--secure-port=") {
			args[i] = "--secure-port=" + strconv.Itoa(a.port)
		}
	}
	a.proc = &process{
		name:    fmt.Sprintf("kube-apiserver %s #%d", c.Name, n+1),
		path:    c.apiserver.path,
		args:    args,
		logPath: filepath.Join(c.dir, fmt.Sprintf("kube-apiserver-%d.log", n+1)),
	}
	c.extra = append(c.extra, a)
	if err := a.proc.start(); err != nil {
		return nil, err
	}
	if err := a.proc.errWithLog(c.waitReadyAt(ctx, a.Server(), a.proc)); err != nil {
		_ = a.proc.kill()
		return nil, err
	}
	return a, nil
}

// Server is the apiserver URL, such as https://127.0.0.1:34567.
func (c *Cluster) Server() string { return fmt.Sprintf("https://127.0.0.1:%d", c.apiPort) }

// EtcdURL is the etcd client URL.
func (c *Cluster) EtcdURL() string { return fmt.Sprintf("http://127.0.0.1:%d", c.etcdPort) }

// RESTConfig returns a new admin rest.Config for the cluster.
func (c *Cluster) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            c.Server(),
		BearerToken:     c.env.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.env.pki.caPEM},
		QPS:             200,
		Burst:           400,
		UserAgent:       "fleetwatch-testenv",
	}
}

// Clientset returns a typed admin client.
func (c *Cluster) Clientset() *kubernetes.Clientset {
	return kubernetes.NewForConfigOrDie(c.RESTConfig())
}

// Dynamic returns a dynamic admin client.
func (c *Cluster) Dynamic() *dynamic.DynamicClient {
	return dynamic.NewForConfigOrDie(c.RESTConfig())
}

// UID returns the UID of the cluster's kube-system namespace: its identity.
func (c *Cluster) UID(ctx context.Context) (types.UID, error) {
	ns, err := c.Clientset().CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ns.UID, nil
}

// APIServerRunning reports whether the apiserver process is running (it may be paused).
func (c *Cluster) APIServerRunning() bool { return c.apiserver.running() }

// PIDs returns the process ids of the cluster's etcd and apiservers that run, for a
// benchmark that reads what they spend (/proc/PID/stat).
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	procs := []*process{c.etcd, c.apiserver}
	for _, a := range c.extra {
		procs = append(procs, a.proc)
	}
	c.mu.Unlock()
	var pids []int
	for _, p := range procs {
		if pid := p.pid(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// APIServerLog is the path of the apiserver's log file.
func (c *Cluster) APIServerLog() string { return c.apiserver.logPath }

func (c *Cluster) etcdArgs() []string {
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.etcdPeer)
	return []string{
		"--name=" + c.Name,
		"--data-dir=" + c.etcdDataDir,
		"--listen-client-urls=" + c.EtcdURL(),
		"--advertise-client-urls=" + c.EtcdURL(),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.Name + "=" + peer,
		"--log-level=warn",
		// Test data is worth nothing after a crash of the machine; skipping fsync keeps
		// three control planes fast on a small machine.
		"--unsafe-no-fsync",
		"--quota-backend-bytes=" + strconv.Itoa(4<<30),
	}
}

func (c *Cluster) apiserverArgs() []string {
	p := c.env.pki
	args := []string{
		"--etcd-servers=" + c.EtcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		"--cert-dir=" + filepath.Join(c.dir, "certs"),
		"--token-auth-file=" + c.env.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.saPub,
		"--service-account-signing-key-file=" + p.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// No controller-manager runs, so nothing creates service accounts: don't require
		// them for pods.
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		// The apiserver's own check of its watch cache against etcd (on by default
		// since 1.34) lists every resource from both every few minutes, which its list
		// metrics count as objects handed out: without it they count only what clients
		// were sent (ListedObjects), which the tests and the bench prove zero.
		"--feature-gates=DetectCacheInconsistency=false",
		"--profiling=false",
		"--v=1",
	}
	if c.env.opts.AuditWatches {
		args = append(args, c.auditArgs()...)
	}
	return append(args, c.env.opts.APIServerArgs...)
}

// start starts etcd and the apiserver, and waits until both are ready.
func (c *Cluster) start(ctx context.Context) error {
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	return c.startAPIServer(ctx)
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	if err := c.etcd.start(); err != nil {
		return err
	}
	err := waitUntil(ctx, 60*time.Second, c.etcd, func(ctx context.Context) error {
		var health struct {
			Health string `json:"health"`
		}
		if err := c.etcdHTTP(ctx, http.MethodGet, "/health", nil, &health); err != nil {
			return err
		}
		if health.Health != "true" {
			return fmt.Errorf("etcd health is %q", health.Health)
		}
		return nil
	})
	return c.etcd.errWithLog(err)
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	return c.apiserver.errWithLog(c.waitReady(ctx))
}

// waitReady waits until /readyz passes and the namespaces that every cluster has exist.
func (c *Cluster) waitReady(ctx context.Context) error {
	return c.waitReadyAt(ctx, c.Server(), c.apiserver)
}

func (c *Cluster) waitReadyAt(ctx context.Context, server string, p *process) error {
	return waitUntil(ctx, 120*time.Second, p, func(ctx context.Context) error {
		if code, body, err := c.getAt(ctx, server, "/readyz"); err != nil {
			return err
		} else if code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %s", code, body)
		}
		for _, ns := range []string{metav1.NamespaceSystem, metav1.NamespaceDefault} {
			if code, _, err := c.getAt(ctx, server, "/api/v1/namespaces/"+ns); err != nil {
				return err
			} else if code != http.StatusOK {
				return fmt.Errorf("namespace %s: %d", ns, code)
			}
		}
		return nil
	})
}

// StopAPIServer stops the apiserver gracefully (SIGTERM). etcd keeps running.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiserver.stop(stopGrace)
}

// KillAPIServer kills the apiserver with SIGKILL. etcd keeps running.
func (c *Cluster) KillAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiserver.kill()
}

// StartAPIServer starts a stopped apiserver on the same port and etcd data, and waits
// until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startAPIServer(ctx)
}

// RestartAPIServer stops the apiserver gracefully and starts it again.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.apiserver.stop(stopGrace); err != nil {
		return err
	}
	return c.startAPIServer(ctx)
}

// PauseAPIServer stops the apiserver process with SIGSTOP: connections stay open but
// nothing answers, as with a cluster behind a dead network.
func (c *Cluster) PauseAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiserver.signal(syscall.SIGSTOP)
}

// ResumeAPIServer continues a paused apiserver (SIGCONT).
func (c *Cluster) ResumeAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiserver.signal(syscall.SIGCONT)
}

// Recreate replaces the cluster with a new, empty one at the same address and with the
// same credentials: the apiserver and etcd are stopped, the etcd data is deleted, and
// both are started again. The new cluster has a new kube-system UID.
func (c *Cluster) Recreate(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.extra {
		if err := a.proc.stop(stopGrace); err != nil {
			return err
		}
	}
	if err := c.apiserver.stop(stopGrace); err != nil {
		return err
	}
	if err := c.etcd.stop(stopGrace); err != nil {
		return err
	}
	if err := os.RemoveAll(c.etcdDataDir); err != nil {
		return err
	}
	return c.start(ctx)
}

// Compact compacts the cluster's etcd up to its current revision, so that watches from
// any older resourceVersion that the apiserver serves from etcd fail with 410 Gone. The
// apiserver's watch cache still serves recent history; restart the apiserver as well to
// make every older resourceVersion too old. It returns the compacted revision.
func (c *Cluster) Compact(ctx context.Context) (int64, error) {
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	key := base64.StdEncoding.EncodeToString([]byte("/registry/"))
	if err := c.etcdHTTP(ctx, http.MethodPost, "/v3/kv/range", map[string]any{"key": key, "limit": 1}, &rng); err != nil {
		return 0, fmt.Errorf("reading etcd revision: %w", err)
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("etcd revision %q: %w", rng.Header.Revision, err)
	}
	if err := c.etcdHTTP(ctx, http.MethodPost, "/v3/kv/compaction", map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}, nil); err != nil {
		return 0, fmt.Errorf("compacting etcd at revision %d: %w", rev, err)
	}
	return rev, nil
}

// Metrics reads and parses the apiserver's /metrics.
func (c *Cluster) Metrics(ctx context.Context) (Metrics, error) {
	code, body, err := c.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %d %s", code, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("parsing /metrics: %w", err)
	}
	return Metrics(families), nil
}

// get sends an authenticated GET to the apiserver with a short timeout.
func (c *Cluster) get(ctx context.Context, path string) (int, []byte, error) {
	return c.getAt(ctx, c.Server(), path)
}

func (c *Cluster) getAt(ctx context.Context, server, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.env.token)
	resp, err := c.env.httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// etcdHTTP calls etcd's JSON gateway.
func (c *Cluster) etcdHTTP(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.EtcdURL()+path, body)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd %s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// waitUntil polls check until it succeeds, the process exits, or timeout passes.
func waitUntil(ctx context.Context, timeout time.Duration, p *process, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	exited := p.exited()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = check(ctx); last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited while starting (last check: %v)", p.name, last)
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v: %w", p.name, timeout, errors.Join(ctx.Err(), last))
		case <-tick.C:
		}
	}
}

// insecureLoopbackClient is used only for readiness and metrics requests to our own
// apiservers; it trusts the Env's CA.
func newHTTPClient(caPEM []byte) (*http.Client, error) {
	cfg := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true}}, nil
}

// Metrics is a parsed Prometheus exposition, by metric family name.
type Metrics map[string]*dto.MetricFamily

// Sum adds up the samples of the counter, gauge or untyped metric name whose labels
// include every label in match. A missing metric sums to 0.
func (m Metrics) Sum(name string, match map[string]string) float64 {
	fam, ok := m[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, metric := range fam.GetMetric() {
		if !labelsMatch(metric.GetLabel(), match) {
			continue
		}
		switch {
		case metric.Counter != nil:
			sum += metric.Counter.GetValue()
		case metric.Gauge != nil:
			sum += metric.Gauge.GetValue()
		case metric.Untyped != nil:
			sum += metric.Untyped.GetValue()
		}
	}
	return sum
}

func labelsMatch(labels []*dto.LabelPair, match map[string]string) bool {
	for k, v := range match {
		found := false
		for _, l := range labels {
			if l.GetName() == k && l.GetValue() == v {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Requests returns apiserver_request_total for verb (LIST, WATCH, GET, ...) and
// resource (pods, deployments, ...), over every group, version and code.
func (m Metrics) Requests(verb, resource string) float64 {
	return m.Sum("apiserver_request_total", map[string]string{"verb": verb, "resource": resource})
}

// ListedObjects is the number of objects of a resource that the apiserver has handed out
// as lists, by any path: streaming lists (apiserver_init_events_total), lists from the
// watch cache and lists from etcd (apiserver_{cache,storage}_list_returned_objects_total).
// A LIST request count alone proves nothing since informers stream their lists.
func (m Metrics) ListedObjects(group, resource string) float64 {
	match := map[string]string{"group": group, "resource": resource}
	return m.Sum("apiserver_init_events_total", match) +
		m.Sum("apiserver_cache_list_returned_objects_total", match) +
		m.Sum("apiserver_storage_list_returned_objects_total", match)
}
