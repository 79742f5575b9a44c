package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/internal/testcert"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// shardResult is what the sharded phase measured (--shards N): the real fleetwatch
// binary as replicas of a sharded fleet of the bench's clusters, with a home apiserver
// of their own for the Leases and the delegated authentication.
type shardResult struct {
	Replicas int `json:"replicas"`
	Clusters int `json:"clusters"`
	// Warm are the planned moves N-1 → N → N-1 with the warm handover, Cold the same
	// moves without it (shard.handoverTimeout 0): the baseline.
	Warm []moveResult `json:"warm"`
	Cold []moveResult `json:"cold"`
	// Via is the replica the fan-out lists go through, and ViaOwns the clusters it owns
	// at N replicas.
	Via     string `json:"via"`
	ViaOwns int    `json:"viaOwns"`
	// Page and Full are the latencies, in seconds, of the pages of
	// /clusters/*/api/v1/pods?limit=500 and of the whole list without limit, through
	// Via at N replicas (Fanout) and through Via alone, serving the whole fleet (Single).
	FanoutPage []float64 `json:"fanoutPage"`
	FanoutFull []float64 `json:"fanoutFull"`
	SinglePage []float64 `json:"singlePage"`
	SingleFull []float64 `json:"singleFull"`
}

// moveResult is one planned move: from one number of replicas to another.
type moveResult struct {
	From, To int
	// Moved is the number of clusters whose owner changed.
	Moved int `json:"moved"`
	// Seconds is the time from the change (the new replica started, or SIGTERM sent) to
	// every cluster owned by its assigned replica, synced, and served by every replica.
	Seconds float64 `json:"seconds"`
	// Lists are the member apiservers' list figures over the move: the objects re-sent.
	Lists listCounters `json:"lists"`
}

// shardHome is the home apiserver of sharded replicas, of the bench's own: it holds
// their Leases and answers their delegated authentication, and the replicas use its
// admin credential for both. The replicas serve HTTPS with certFile, which is also
// their shard.peerCaFile; client trusts it, and token is what the driver's requests
// present (delegated authentication admits the admin token).
type shardHome struct {
	env               *testenv.Env
	certFile, keyFile string
	client            *http.Client
	token             string
}

// startShardHome starts a home apiserver in dir/home, with a serving certificate for
// the replicas in dir.
func startShardHome(ctx context.Context, dir string) (*shardHome, error) {
	log.Printf("shards: starting the home apiserver")
	env, err := testenv.Start(ctx, testenv.Options{Names: []string{"home"}, Dir: filepath.Join(dir, "home")})
	if err != nil {
		return nil, err
	}
	h := &shardHome{env: env, token: env.Token()}
	if h.certFile, h.keyFile, err = testcert.Generate(dir, "replicas"); err != nil {
		env.Close()
		return nil, err
	}
	pem, err := os.ReadFile(h.certFile)
	if err != nil {
		env.Close()
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		env.Close()
		return nil, fmt.Errorf("no certificate in %s", h.certFile)
	}
	h.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 4}}
	return h, nil
}

// createNamespace creates the namespace of a fleet's Leases.
func (h *shardHome) createNamespace(ctx context.Context, name string) error {
	_, err := h.env.Clusters[0].Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	return err
}

func (h *shardHome) Close() {
	h.client.CloseIdleConnections()
	h.env.Close()
}

// shardFleet is the replicas of one sharded setup.
type shardFleet struct {
	d    *driver
	bin  string
	home *shardHome
	// dir holds the replicas' configurations and snapshots; logPrefix starts the names
	// of their logs.
	dir, logPrefix string
	// namespace is shard.namespace, members the kubeconfig of the member clusters, and
	// clusters their names (its contexts).
	namespace string
	members   string
	clusters  []string
	// resources are the resources each replica caches.
	resources []string
	// replicas is shard.replicas: 0 for replicas that come and go one at a time.
	replicas int
	// syncTimeout is sync.timeout; empty: the default.
	syncTimeout string
	// warm is the warm handover (shard.handoverTimeout 10s, else 0s).
	warm bool
	// running are the replicas started and not stopped, by identity.
	running map[string]*shardReplica
}

type shardReplica struct {
	id, base string
	cmd      *exec.Cmd
	done     chan error
	// memstats has the daemon's answers to SIGUSR1 (benchmem.go): HeapAlloc, VmRSS,
	// HeapInuse, HeapIdle, HeapReleased and Sys.
	memstats chan [6]uint64
}

// shards runs the sharded phase with n replicas.
func (d *driver) shards(ctx context.Context, n int) (*shardResult, error) {
	if n < 2 {
		return nil, errors.New("--shards must be at least 2")
	}
	dir := filepath.Join(d.workDir, "shards")
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	home, err := startShardHome(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer home.Close()
	if err := home.createNamespace(ctx, "fleetwatch"); err != nil {
		return nil, err
	}
	members := filepath.Join(dir, "members.kubeconfig")
	if err := d.env.WriteKubeconfig(members, d.env.Clusters...); err != nil {
		return nil, err
	}
	names := make([]string, len(d.env.Clusters))
	for i, c := range d.env.Clusters {
		names[i] = c.Name
	}
	res := &shardResult{Replicas: n, Clusters: len(d.env.Clusters)}
	ids := replicaIDs(n)
	for _, warm := range []bool{true, false} {
		f := &shardFleet{d: d, bin: d.serveBin, home: home, dir: filepath.Join(dir, fmt.Sprintf("warm-%t", warm)),
			logPrefix: fmt.Sprintf("shards-warm-%t-", warm), namespace: "fleetwatch", members: members, clusters: names,
			resources: []string{"pods", "configmaps"}, warm: warm, running: map[string]*shardReplica{}}
		if err := os.MkdirAll(f.dir, 0o700); err != nil {
			return nil, err
		}
		moves, err := f.measure(ctx, ids, res, warm)
		if err := f.stopAll(); err != nil {
			log.Printf("shards: %v", err)
		}
		if err != nil {
			return nil, err
		}
		if warm {
			res.Warm = moves
		} else {
			res.Cold = moves
		}
	}
	return res, nil
}

// replicaIDs are the identities of n replicas, as a StatefulSet names its pods; the
// last one is the one that comes and goes in the planned moves.
func replicaIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("fleetwatch-%d", i)
	}
	return ids
}

// measure starts N-1 replicas, scales to N and back, and, with the warm handover, times
// the fan-out lists at N replicas and at one.
func (f *shardFleet) measure(ctx context.Context, ids []string, res *shardResult, latency bool) ([]moveResult, error) {
	n := len(ids)
	for _, id := range ids[:n-1] {
		if err := f.start(ctx, id); err != nil {
			return nil, err
		}
	}
	if _, err := f.settle(ctx, ids[:n-1]); err != nil {
		return nil, err
	}
	var moves []moveResult
	move := func(before, after []string, change func() error) error {
		lists0, err := f.d.listCounters(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		if err := change(); err != nil {
			return err
		}
		if _, err := f.settle(ctx, after); err != nil {
			return err
		}
		lists1, err := f.d.listCounters(ctx)
		if err != nil {
			return err
		}
		m := moveResult{From: len(before), To: len(after), Seconds: time.Since(start).Seconds(), Lists: lists1.minus(lists0)}
		for _, c := range f.clusters {
			if shard.Owner(c, before) != shard.Owner(c, after) {
				m.Moved++
			}
		}
		log.Printf("shards (warm handover %t): %d → %d replicas moved %d clusters in %.2fs, re-sent %.0f objects in %.0f LISTs",
			f.warm, m.From, m.To, m.Moved, m.Seconds, m.Lists.Objects, m.Lists.Requests)
		moves = append(moves, m)
		return nil
	}
	if err := move(ids[:n-1], ids, func() error { return f.start(ctx, ids[n-1]) }); err != nil {
		return nil, err
	}
	// The fan-out lists go through the replica that stays, of those that own a cluster
	// at N, that owns the fewest: its answers are the most fanned out, and the baseline
	// is the same replica owning every cluster.
	via := ""
	if latency {
		owned := map[string]int{}
		for _, owner := range shard.Assign(f.clusters, ids) {
			owned[owner]++
		}
		for _, id := range ids[:n-1] {
			if owned[id] > 0 && (via == "" || owned[id] < owned[via]) {
				via = id
			}
		}
		if via == "" {
			return nil, fmt.Errorf("none of %v owns a cluster at %d replicas", ids[:n-1], n)
		}
		res.Via, res.ViaOwns = via, owned[via]
		var err error
		if res.FanoutPage, res.FanoutFull, err = f.lists(ctx, f.running[via].base); err != nil {
			return nil, err
		}
	}
	if err := move(ids, ids[:n-1], func() error { return f.stop(ids[n-1]) }); err != nil {
		return nil, err
	}
	if latency {
		for _, id := range ids[:n-1] {
			if id == via {
				continue
			}
			if err := f.stop(id); err != nil {
				return nil, err
			}
		}
		if _, err := f.settle(ctx, []string{via}); err != nil {
			return nil, err
		}
		var err error
		if res.SinglePage, res.SingleFull, err = f.lists(ctx, f.running[via].base); err != nil {
			return nil, err
		}
	}
	return moves, nil
}

// start starts the replica id: the real binary, with a snapshot of its own, serving
// HTTPS with delegated authentication through the home apiserver, whose admin
// credential it uses for its Leases and for the states it fetches.
func (f *shardFleet) start(ctx context.Context, id string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	path := filepath.Join(f.dir, id+".yaml")
	if err := os.WriteFile(path, []byte(f.config(id, port, base)), 0o600); err != nil {
		return err
	}
	out, err := os.OpenFile(filepath.Join(f.d.logDir, f.logPrefix+id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, f.bin, "serve", "--config", path)
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		out.Close()
		return err
	}
	if err := cmd.Start(); err != nil {
		out.Close()
		return err
	}
	r := &shardReplica{id: id, base: base, cmd: cmd, done: make(chan error, 1), memstats: make(chan [6]uint64, 1)}
	go func() {
		// The daemon's stdout goes to its log, but for its memstats lines; Wait is
		// called once it is read to its end, as StdoutPipe requires.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m, ok := parseMemstats(sc.Text()); ok {
				r.memstats <- m
				continue
			}
			fmt.Fprintln(out, sc.Text())
		}
		r.done <- cmd.Wait()
		out.Close()
	}()
	f.running[id] = r
	return nil
}

// config is the configuration of the replica id, serving on port at base.
func (f *shardFleet) config(id string, port int, base string) string {
	handover := "10s"
	if !f.warm {
		handover = "0s"
	}
	var resources []string
	for _, r := range f.resources {
		resources = append(resources, "{name: "+r+"}")
	}
	var sync string
	if f.syncTimeout != "" {
		sync = fmt.Sprintf("sync: {timeout: %s}\n", f.syncTimeout)
	}
	return fmt.Sprintf(`kubeconfig: [%s]
resources: [%s]
snapshot: {path: %s}
%sserver:
  address: "127.0.0.1:%d"
  tls: {certFile: %q, keyFile: %q}
  auth: {delegated: {enabled: true, kubeconfig: %q}}
shard:
  enabled: true
  identity: %s
  namespace: %s
  homeKubeconfig: %s
  address: %s
  peerCaFile: %q
  handoverTimeout: %s
  replicas: %d
`, f.members, strings.Join(resources, ", "), filepath.Join(f.dir, id+".db"), sync, port, f.home.certFile, f.home.keyFile,
		f.home.env.Kubeconfig, id, f.namespace, f.home.env.Kubeconfig, base, f.home.certFile, handover, f.replicas)
}

// stop stops the replica id with SIGTERM, as a scale-down does, and waits for it.
func (f *shardFleet) stop(id string) error {
	if err := f.running[id].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	return f.wait(id)
}

// wait waits, at most 2 minutes, for the replica id to exit.
func (f *shardFleet) wait(id string) error {
	r := f.running[id]
	select {
	case err := <-r.done:
		delete(f.running, id)
		if err != nil {
			return fmt.Errorf("%s exited with %w", id, err)
		}
		return nil
	case <-time.After(2 * time.Minute):
		_ = r.cmd.Process.Kill()
		return fmt.Errorf("%s did not exit within 2 minutes of SIGTERM", id)
	}
}

// stopAll stops every running replica together, as a full restart of the StatefulSet
// does: SIGTERM to each, then it waits for each.
func (f *shardFleet) stopAll() error {
	var errs []error
	for _, r := range f.running {
		if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range f.running {
		errs = append(errs, f.wait(id))
	}
	return errors.Join(errs...)
}

// settle waits until every replica of live is ready and says that each cluster is
// synced by the replica that rendezvous hashing assigns it to, and returns how long
// that took. It looks every hundredth of the time so far, at least every 20 ms: a look
// lists every cluster through every replica, and each replica asks the others for the
// status of theirs, which at a thousand clusters costs the replicas what they are
// being timed for.
func (f *shardFleet) settle(ctx context.Context, live []string) (time.Duration, error) {
	start := time.Now()
	assigned := shard.Assign(f.clusters, live)
	deadline := start.Add(5 * time.Minute)
	last, kind := "", ""
	for {
		if last = f.settled(ctx, live, assigned); last == "" {
			return time.Since(start), nil
		}
		// What holds the settling back, logged when it changes, without the cluster's
		// name: which replica is waited for, and for what.
		if k := settleKind(last); k != kind {
			log.Printf("settle: %.2fs: %s", time.Since(start).Seconds(), k)
			kind = k
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("not settled on %v after 5 minutes: %s", live, last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(max(20*time.Millisecond, time.Since(start)/100)):
		}
	}
}

// settleKind is what settled's reason says without the cluster it names, if it names
// one: "fleetwatch-0 says ctx-07 is Remote by "fleetwatch-1"" is "fleetwatch-0 says a
// cluster is Remote by "fleetwatch-1"".
func settleKind(reason string) string {
	w := strings.Fields(reason)
	if len(w) == 7 && w[1] == "says" {
		w[2] = "a cluster"
		return strings.Join(w, " ")
	}
	if len(w) > 3 {
		w = w[:3]
	}
	return strings.Join(w, " ")
}

func (f *shardFleet) settled(ctx context.Context, live []string, assigned map[string]string) string {
	for _, id := range live {
		r := f.running[id]
		if code, body, _ := f.get(ctx, r.base+"/readyz"); code != http.StatusOK {
			return fmt.Sprintf("%s /readyz: %d %s", id, code, body)
		}
		var clusters server.ClusterList
		code, body, _ := f.get(ctx, r.base+"/apis/fleetwatch.io/v1alpha1/clusters")
		if code != http.StatusOK || json.Unmarshal(body, &clusters) != nil {
			return fmt.Sprintf("%s clusters: %d %s", id, code, body)
		}
		if len(clusters.Items) != len(assigned) {
			return fmt.Sprintf("%s lists %d clusters", id, len(clusters.Items))
		}
		for _, c := range clusters.Items {
			if c.Status.Phase != "Synced" || c.Status.Replica != assigned[c.Name] {
				return fmt.Sprintf("%s says %s is %s by %q", id, c.Name, c.Status.Phase, c.Status.Replica)
			}
		}
	}
	return ""
}

// lists times, through the replica at base, every page of
// /clusters/*/api/v1/pods?limit=500 and the whole list without limit, a few times
// each after one that warms up.
func (f *shardFleet) lists(ctx context.Context, base string) (pages, full []float64, err error) {
	const walks = 3
	for w := range walks + 1 {
		cont := ""
		for {
			u := base + "/clusters/*/api/v1/pods?limit=500"
			if cont != "" {
				u += "&continue=" + url.QueryEscape(cont)
			}
			start := time.Now()
			code, body, err := f.get(ctx, u)
			took := time.Since(start).Seconds()
			if err != nil || code != http.StatusOK {
				return nil, nil, fmt.Errorf("%s: %d %s %v", u, code, truncate(body), err)
			}
			var l struct {
				Metadata struct {
					Continue string `json:"continue"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(body, &l); err != nil {
				return nil, nil, err
			}
			if w > 0 {
				pages = append(pages, took)
			}
			if cont = l.Metadata.Continue; cont == "" {
				break
			}
		}
		start := time.Now()
		code, body, err := f.get(ctx, base+"/clusters/*/api/v1/pods")
		if err != nil || code != http.StatusOK {
			return nil, nil, fmt.Errorf("the full list: %d %s %v", code, truncate(body), err)
		}
		if w > 0 {
			full = append(full, time.Since(start).Seconds())
		}
	}
	return pages, full, nil
}

func (f *shardFleet) get(ctx context.Context, u string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.home.token)
	res, err := f.home.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error()), err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, body, err
}

func truncate(b []byte) string {
	if len(b) > 300 {
		b = b[:300]
	}
	return string(b)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
