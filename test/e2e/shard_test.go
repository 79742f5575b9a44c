package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/internal/testcert"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// The Lease timing of the sharded tests: short, so that failovers are quick, with 3 s
// between a replica's renew deadline and its Lease's expiry, which a loaded machine's
// scheduling delays stay within.
const (
	shardLease   = 6 * time.Second
	shardRenew   = 3 * time.Second
	shardRetry   = 500 * time.Millisecond
	shardSettle  = 60 * time.Second
	replicaAgent = "replica="
)

// fleetReplica is one replica of a sharded fleet: the real binary, with its own
// snapshot, API address and identity.
type fleetReplica struct {
	*daemon
	id   string
	base string
}

// shardedFleet is a home cluster, member clusters and the replicas that divide them.
type shardedFleet struct {
	t        *testing.T
	env      *testenv.Env
	home     *testenv.Cluster
	members  []*testenv.Cluster
	bin, dir string
	replicas map[string]*fleetReplica
	// others checks the replicas that are not processes of the binary, if set.
	others func(assigned map[string]string) string
	// tokenFile, if set, is the replicas' server.auth.tokenFile, and token the one the
	// checks send; the replicas then serve HTTPS with certFile, which is also their
	// shard.peerCaFile, and client trusts it.
	tokenFile, token  string
	certFile, keyFile string
	client            *http.Client
	// warm, if set, has the replicas serve HTTPS with delegated authentication, and
	// hand their clusters over warm (see newSecureShardedFleet).
	warm *secureFleet
	// expect, if set, is the replicas' shard.replicas.
	expect int
	// history, if set, has the replicas keep the change log (history.enabled).
	history bool
}

// secure has the replicas started from now on authenticate with tokens (a file of
// them, "TOKEN user=NAME [clusters=...]" a line) and serve HTTPS, with token the one
// the checks send.
func (f *shardedFleet) secure(tokens, token string) {
	f.tokenFile, f.token = filepath.Join(f.dir, "tokens"), token
	if err := os.WriteFile(f.tokenFile, []byte(tokens), 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.certFile, f.keyFile = testcert.Write(f.t, f.dir, "replicas")
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: testcert.Pool(f.t, f.certFile)}
	f.client = &http.Client{Transport: tr}
	f.t.Cleanup(tr.CloseIdleConnections)
}

// fetch is fetchAs with the fleet's client and token.
// A warm fleet's are read as a reader of every cluster.
func (f *shardedFleet) fetch(ctx context.Context, url string) (int, []byte) {
	if f.warm != nil {
		return f.warm.get(ctx, url, f.warm.readerToken)
	}
	client := f.client
	if client == nil {
		client = http.DefaultClient
	}
	return fetchAs(ctx, client, url, f.token)
}

// address is where the replica id publishes its API; "" for one without.
func (f *shardedFleet) address(id string) string {
	if r := f.replicas[id]; r != nil {
		return r.base
	}
	return ""
}

func newShardedFleet(t *testing.T, members int) *shardedFleet {
	names := []string{"home"}
	for i := 1; i <= members; i++ {
		names = append(names, fmt.Sprintf("member-%d", i))
	}
	env := testenv.New(t, testenv.Options{Names: names, AuditWatches: true})
	f := &shardedFleet{t: t, env: env, home: env.Clusters[0], members: env.Clusters[1:], dir: t.TempDir(), replicas: map[string]*fleetReplica{}, client: http.DefaultClient}
	f.bin = buildBinary(t, "./cmd/fleetwatch")
	if err := env.WriteKubeconfig(filepath.Join(f.dir, "members.kubeconfig"), f.members...); err != nil {
		t.Fatal(err)
	}
	if err := env.WriteKubeconfig(filepath.Join(f.dir, "home.kubeconfig"), f.home); err != nil {
		t.Fatal(err)
	}
	_, err := f.home.Clientset().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range f.members {
		createConfigMap(t, m.Clientset(), "shop", "seed", m.Name)
	}
	return f
}

// start starts the replica id, with the same configuration as the others.
func (f *shardedFleet) start(id string) *fleetReplica {
	t := f.t
	t.Helper()
	if r := f.replicas[id]; r != nil {
		r.start(t)
		return r
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	home := filepath.Join(f.dir, "home.kubeconfig")
	tlsCfg := ""
	switch {
	case f.warm != nil:
		base = fmt.Sprintf("https://127.0.0.1:%d", port)
		home = f.warm.replicaKubeconfig
		tlsCfg = fmt.Sprintf(", tls: {certFile: %q, keyFile: %q}, auth: {delegated: {enabled: true, kubeconfig: %q}}",
			f.warm.certFile, f.warm.keyFile, filepath.Join(f.dir, "home.kubeconfig"))
	case f.certFile != "":
		base = fmt.Sprintf("https://127.0.0.1:%d", port)
		tlsCfg = fmt.Sprintf(", tls: {certFile: %q, keyFile: %q}, auth: {tokenFile: %q}", f.certFile, f.keyFile, f.tokenFile)
	}
	cfg := fmt.Sprintf(`kubeconfig: [%s]
resources: [{name: configmaps}]
snapshot: {path: %s, interval: 200ms}
server: {address: "127.0.0.1:%d"%s}
shard:
  enabled: true
  identity: %s
  namespace: fleetwatch
  homeKubeconfig: %s
  address: %s
  peerCaFile: "%s"
  leaseDuration: %s
  renewDeadline: %s
  retryPeriod: %s
  replicas: %d
`, filepath.Join(f.dir, "members.kubeconfig"), filepath.Join(f.dir, id+".db"), port, tlsCfg, id,
		home, base, f.certFile, shardLease, shardRenew, shardRetry, f.expect)
	if f.history {
		cfg += "history: {enabled: true}\n"
	}
	path := filepath.Join(f.dir, id+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &daemon{bin: f.bin, config: path, log: logFile(t, id+".log")}
	d.start(t)
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGCONT)
			_ = d.signal(t, syscall.SIGKILL)
		}
	})
	r := &fleetReplica{daemon: d, id: id, base: base}
	f.replicas[id] = r
	return r
}

// watchers returns, for each member, the replicas whose watches of configmaps the
// member's apiserver had open at t, by its audit log.
func (f *shardedFleet) watchers(at time.Time) map[string][]string {
	out := map[string][]string{}
	for _, m := range f.members {
		ws, err := m.Watches()
		if err != nil {
			f.t.Fatal(err)
		}
		for _, w := range ws {
			if id := replicaOf(w); id != "" && w.Resource == "configmaps" && w.Open(at) && !slices.Contains(out[m.Name], id) {
				out[m.Name] = append(out[m.Name], id)
			}
		}
		slices.Sort(out[m.Name])
	}
	return out
}

// replicaOf returns the replica named in a watch's user agent, "" if none.
func replicaOf(w testenv.Watch) string {
	_, id, ok := strings.Cut(w.UserAgent, replicaAgent)
	if !ok {
		return ""
	}
	id, _, _ = strings.Cut(id, " ")
	return id
}

// settled says what keeps the fleet from being settled on the replicas live, "" once it
// is: each member is watched by exactly the replica that rendezvous hashing assigns it
// to, as its apiserver sees it; each replica is ready, says where every cluster is
// watched, and serves its own clusters as their apiservers hold them.
func (f *shardedFleet) settled(live []string) string {
	ctx := f.t.Context()
	names := make([]string, len(f.members))
	for i, m := range f.members {
		names[i] = m.Name
	}
	assigned := shard.Assign(names, live)
	watching := f.watchers(time.Now())
	for _, m := range f.members {
		if got := watching[m.Name]; !slices.Equal(got, []string{assigned[m.Name]}) {
			return fmt.Sprintf("%s is watched by %v, want [%s]", m.Name, got, assigned[m.Name])
		}
	}
	for _, id := range live {
		r := f.replicas[id]
		if r == nil {
			continue
		}
		if code, body := f.fetch(ctx, r.base+"/readyz"); code != http.StatusOK {
			return fmt.Sprintf("%s /readyz: %d %s", id, code, body)
		}
		var clusters server.ClusterList
		if code, body := f.fetch(ctx, r.base+"/apis/fleetwatch.io/v1alpha1/clusters"); code != http.StatusOK || json.Unmarshal(body, &clusters) != nil {
			return fmt.Sprintf("%s clusters: %d %s", id, code, body)
		}
		if len(clusters.Items) != len(f.members) {
			return fmt.Sprintf("%s lists %d clusters, want %d", id, len(clusters.Items), len(f.members))
		}
		for _, c := range clusters.Items {
			// Each replica shows the owner's status of a cluster, which it asks the
			// owner for; the owner that publishes no address cannot be asked.
			owner := assigned[c.Name]
			wantPhase := "Synced"
			if owner != id && f.address(owner) == "" {
				wantPhase = "Remote"
			}
			if c.Status.Phase != wantPhase || c.Status.Replica != owner || c.Status.ReplicaAddress != f.address(owner) {
				return fmt.Sprintf("%s says %s is %s, watched by %q at %q; want %s by %s at %q", id, c.Name, c.Status.Phase, c.Status.Replica, c.Status.ReplicaAddress, wantPhase, owner, f.address(owner))
			}
		}
		// Every replica serves every member: its own, and the others' through their
		// owner, unless the owner publishes no address to ask it at.
		for _, m := range f.members {
			if owner := assigned[m.Name]; owner != id && f.address(owner) == "" {
				if code, _ := f.fetch(ctx, r.base+"/clusters/"+m.Name+"/api/v1/configmaps"); code != http.StatusServiceUnavailable {
					return fmt.Sprintf("%s answers %d for the objects of %s, which %s watches without an address", id, code, m.Name, owner)
				}
				continue
			}
			if diff := f.sameConfigMaps(ctx, r.base, m); diff != "" {
				return fmt.Sprintf("%s serves %s: %s", id, m.Name, diff)
			}
		}
	}
	if f.others != nil {
		return f.others(assigned)
	}
	return ""
}

// sameConfigMaps compares the configmaps that the replica at base serves for m with
// those of m's apiserver, resourceVersions included.
func (f *shardedFleet) sameConfigMaps(ctx context.Context, base string, m *testenv.Cluster) string {
	code, body := f.fetch(ctx, base+"/clusters/"+m.Name+"/api/v1/configmaps")
	var list unstructured.UnstructuredList
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		return fmt.Sprintf("%d %s", code, body)
	}
	got := map[string]string{}
	for _, o := range list.Items {
		got[o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
	}
	return sameAsServer(ctx, m, got)
}

// sameAsServer compares configmaps, namespace/name to resourceVersion, with those of
// m's apiserver.
func sameAsServer(ctx context.Context, m *testenv.Cluster, got map[string]string) string {
	truth, err := m.Clientset().CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	want := map[string]string{}
	for _, cm := range truth.Items {
		want[cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
	}
	for k, rv := range want {
		if got[k] != rv {
			return fmt.Sprintf("%s at resourceVersion %q, the apiserver has %q (%d served, %d there)", k, got[k], rv, len(got), len(want))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			return fmt.Sprintf("%s is served, the apiserver has none (%d served, %d there)", k, len(got), len(want))
		}
	}
	return ""
}

// fetchAs is fetch with client and a bearer token, if not empty.
func fetchAs(ctx context.Context, client *http.Client, url, token string) (int, []byte) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, body
}

// waitSettled waits until the fleet is settled on live, with the churn paused so that
// the served objects can equal the servers' at one moment.
func (f *shardedFleet) waitSettled(churn *churner, live ...string) time.Duration {
	f.t.Helper()
	start := time.Now()
	churn.pause()
	defer churn.resume()
	eventually(f.t, shardSettle, fmt.Sprintf("settling on %v", live), func() string { return f.settled(live) })
	return time.Since(start)
}

// overlaps returns the times at which a member's apiserver served watches of two
// replicas at once for longer than slack, of the watches that started after from,
// leaving out the watches of the replicas in except that started before exceptBefore.
func (f *shardedFleet) overlaps(from time.Time, slack time.Duration, except string, exceptBefore time.Time) []string {
	var out []string
	for _, m := range f.members {
		ws, err := m.Watches()
		if err != nil {
			f.t.Fatal(err)
		}
		var mine []testenv.Watch
		for _, w := range ws {
			if replicaOf(w) == "" || w.Resource != "configmaps" || (!w.End.IsZero() && w.End.Before(from)) {
				continue
			}
			if replicaOf(w) == except && w.Start.Before(exceptBefore) {
				continue
			}
			mine = append(mine, w)
		}
		for i, a := range mine {
			for _, b := range mine[i+1:] {
				if replicaOf(a) == replicaOf(b) {
					continue
				}
				start, end := later(a.Start, b.Start), earlier(a.End, b.End)
				if d := end.Sub(start); d > slack {
					out = append(out, fmt.Sprintf("%s: %s and %s watched at once for %v from %s", m.Name, replicaOf(a), replicaOf(b), d.Round(time.Millisecond), start.Format(time.StampMilli)))
				}
			}
		}
	}
	return out
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earlier returns the earlier end; a zero end is open, so now.
func earlier(a, b time.Time) time.Time {
	if a.IsZero() {
		a = time.Now()
	}
	if b.IsZero() {
		b = time.Now()
	}
	if a.Before(b) {
		return a
	}
	return b
}

// churner changes configmaps in every member until the test ends, unless paused.
type churner struct {
	// change is held for reading across each change, so that pause waits for those in
	// flight.
	change sync.RWMutex
	paused atomic.Bool
	// made counts, per member, the changes that its apiserver accepted.
	made map[string]*atomic.Int64
}

func startChurn(t *testing.T, members []*testenv.Cluster) *churner {
	c := &churner{made: map[string]*atomic.Int64{}}
	for _, m := range members {
		c.made[m.Name] = &atomic.Int64{}
	}
	for _, m := range members {
		go func() {
			cms := m.Clientset().CoreV1().ConfigMaps("shop")
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-t.Context().Done():
					return
				case <-tick.C:
				}
				c.change.RLock()
				if !c.paused.Load() {
					name := fmt.Sprintf("churn-%d", i%7)
					var err error
					switch i % 3 {
					case 0, 1:
						cm := configMap("shop", name, m.Name)
						cm.Data["i"] = fmt.Sprint(i)
						if _, err = cms.Update(t.Context(), cm, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
							_, err = cms.Create(t.Context(), cm, metav1.CreateOptions{})
						}
						if err == nil {
							c.made[m.Name].Add(1)
						}
					case 2:
						if err = cms.Delete(t.Context(), name, metav1.DeleteOptions{}); apierrors.IsNotFound(err) {
							err = nil
						} else if err == nil {
							c.made[m.Name].Add(1)
						}
					}
					if err != nil && t.Context().Err() == nil {
						t.Errorf("churn in %s: %v", m.Name, err)
					}
				}
				c.change.RUnlock()
			}
		}()
	}
	return c
}

// pause stops the churn once the changes in flight are done.
func (c *churner) pause() {
	c.change.Lock()
	c.paused.Store(true)
	c.change.Unlock()
}

func (c *churner) resume() { c.paused.Store(false) }

// changes returns how many changes the churn has made in each member so far.
func (c *churner) changes() map[string]int64 {
	out := map[string]int64{}
	for name, n := range c.made {
		out[name] = n.Load()
	}
	return out
}

// TestShardedReplicas runs the real binary as replicas of a secure sharded fleet (HTTPS,
// delegated authentication, warm handover on, as deploy/components/sharded sets it up)
// against a home apiserver and six member apiservers, with configmaps changing
// throughout. Who watches a member is read from the member apiserver's audit log, by
// the replica's user agent. Scaling 3 → 4 → 2 (a StatefulSet's scale-down, one replica
// at a time) leaves each member watched by exactly its assigned replica, no two
// replicas watch a member at once, every replica serves the whole fleet as the servers
// hold it, and the clusters that moved are started warm by their new owners: their
// apiservers hand out no list, and as initial events no more objects than the changes
// made during the move, none of the unchanged ones. The state endpoint answers no one
// but a replica. kill -9 of a replica has its clusters owned again within the Lease
// duration plus the sync, while the others keep answering; a replica paused past its
// Lease stops watching within a retry period of resuming.
func TestShardedReplicas(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	f := newSecureShardedFleet(t, 6)
	// Objects that never change: a cold start lists them again, a warm one does not.
	const unchanged = 100
	createConfigMaps(t, f.members, "unchanged", unchanged)
	churn := startChurn(t, f.members)

	ids := []string{"fleetwatch-0", "fleetwatch-1", "fleetwatch-2", "fleetwatch-3"}
	for _, id := range ids[:3] {
		f.start(id)
	}
	t.Logf("3 replicas settled in %v", f.waitSettled(churn, ids[:3]...))

	// Two replicas never watch a member at once, beyond the time the apiserver takes to
	// see a watch end that its client closed.
	const slack = time.Second
	checkOverlaps := func(what string, from time.Time, except string, exceptBefore time.Time) {
		t.Helper()
		if o := f.overlaps(from, slack, except, exceptBefore); len(o) > 0 {
			t.Errorf("%s: members watched twice:\n%s", what, strings.Join(o, "\n"))
		}
	}

	t.Run("scale 3 to 4 to 2, warm", func(t *testing.T) {
		from := time.Now()
		moved := 0
		for _, step := range []struct {
			before, after []string
			change        func()
		}{
			{ids[:3], ids, func() { f.start(ids[3]) }},
			{ids, ids[:3], func() { f.stopReplica(ids[3]) }},
			{ids[:3], ids[:2], func() { f.stopReplica(ids[2]) }},
		} {
			since := time.Now()
			made, handed := churn.changes(), f.listed()
			step.change()
			f.placed(step.after...)
			// What the member apiservers handed out as lists or initial events during
			// the move, against the changes the churn made meanwhile: a watch resumed
			// from a resourceVersion gets those as its initial events, and nothing else.
			madeAfter, handedAfter := churn.changes(), f.listed()
			var resent []string
			for _, m := range f.members {
				n, changes := handedAfter[m.Name]-handed[m.Name], madeAfter[m.Name]-made[m.Name]
				resent = append(resent, fmt.Sprintf("%s %v (%d changed)", m.Name, n, changes))
				if n > float64(changes) {
					t.Errorf("%v → %v: %s handed out %v configmaps as lists or initial events, more than the %d changes made meanwhile: %d unchanged re-sent; lists: %v",
						step.before, step.after, m.Name, n, changes, int64(n)-changes, f.lists(m, since))
				}
			}
			t.Logf("%v → %v: the member apiservers re-sent %s; %d configmaps per member never changed", step.before, step.after, strings.Join(resent, ", "), unchanged)
			moved += f.movedWarm(step.before, step.after, since)
			t.Logf("%d replicas settled in %v", len(step.after), f.waitSettled(churn, step.after...))
			if len(step.after) == len(ids) {
				f.stateOnlyForReplicas(step.after)
			}
		}
		if moved == 0 {
			t.Fatal("no cluster moved; pick other names")
		}
		// The replicas' logs say so too (and may tell of more).
		took := 0
		for _, id := range ids {
			b, err := os.ReadFile(f.replicas[id].log.Name())
			if err != nil {
				t.Fatal(err)
			}
			took += strings.Count(string(b), "Took the cluster's state over from its old owner")
		}
		if took < moved {
			t.Errorf("the replicas logged %d warm takeovers, want at least %d", took, moved)
		}
		checkOverlaps("scaling", from, "", time.Time{})
	})

	t.Run("kill -9", func(t *testing.T) {
		from := time.Now()
		killed := time.Now()
		_ = f.replicas[ids[1]].signal(t, syscall.SIGKILL)
		// Meanwhile the other replica answers for every cluster: its own, and those of
		// the killed one, marked as watched elsewhere until it takes them.
		deadline := killed.Add(shardLease + 30*time.Second)
		for {
			var clusters server.ClusterList
			code, body := f.fetch(t.Context(), f.replicas[ids[0]].base+"/apis/fleetwatch.io/v1alpha1/clusters")
			if code != http.StatusOK || json.Unmarshal(body, &clusters) != nil || len(clusters.Items) != len(f.members) {
				t.Fatalf("%s during the failover: %d %s", ids[0], code, body)
			}
			for _, c := range clusters.Items {
				if c.Status.Phase != "Synced" && c.Status.Phase != "Remote" && c.Status.Phase != "Moving" &&
					c.Status.Phase != "Connecting" && c.Status.Phase != "Syncing" {
					t.Errorf("%s during the failover: %s is %s", ids[0], c.Name, c.Status.Phase)
				}
			}
			w := f.watchers(time.Now())
			all := true
			for _, m := range f.members {
				all = all && slices.Equal(w[m.Name], []string{ids[0]})
			}
			if all {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %v the members are watched by %v", time.Since(killed), w)
			}
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(killed)
		t.Logf("the clusters of the killed replica were watched again %v after kill -9 (lease duration %v)", took, shardLease)
		// The Lease duration, and the sync of the clusters taken over.
		if limit := shardLease + 10*time.Second; took > limit {
			t.Errorf("the clusters of the killed replica were watched again only %v after kill -9, beyond %v", took, limit)
		}
		f.waitSettled(churn, ids[0])
		checkOverlaps("kill -9", from, "", time.Time{})
	})

	t.Run("SIGSTOP past the Lease", func(t *testing.T) {
		// A replica that left with SIGTERM released its Lease: it joins again at once.
		f.start(ids[2])
		f.waitSettled(churn, ids[0], ids[2])
		paused := f.replicas[ids[2]]
		var theirs []string
		for m, w := range f.watchers(time.Now()) {
			if slices.Equal(w, []string{ids[2]}) {
				theirs = append(theirs, m)
			}
		}
		from := time.Now()
		if err := paused.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		// The other replica takes the paused one's clusters once its Lease expired. The
		// paused process still has its watches open: the apiserver keeps them.
		eventually(t, shardLease+30*time.Second, "takeover from the paused replica", func() string {
			w := f.watchers(time.Now())
			for _, m := range theirs {
				if !slices.Contains(w[m], ids[0]) {
					return fmt.Sprintf("%s is watched by %v", m, w[m])
				}
			}
			return ""
		})
		if took := time.Since(stopped); took < shardLease-shardRetry {
			t.Errorf("the clusters of the paused replica were taken %v after it stopped, before its Lease of %v expired", took, shardLease)
		}
		if err := paused.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed := time.Now()
		// Resumed without its Lease, it stops watching at once: its watches from before
		// the pause end within the documented window.
		window := shardRetry + slack
		eventually(t, 30*time.Second, "the resumed replica stops its old watches", func() string {
			for _, m := range f.members {
				ws, err := m.Watches()
				if err != nil {
					return err.Error()
				}
				for _, w := range ws {
					if replicaOf(w) == ids[2] && w.Start.Before(stopped) && w.Open(time.Now()) {
						return fmt.Sprintf("%s still has the watch of %s from %s open", m.Name, ids[2], w.Start.Format(time.StampMilli))
					}
				}
			}
			return ""
		})
		for _, m := range f.members {
			ws, _ := m.Watches()
			for _, w := range ws {
				if replicaOf(w) == ids[2] && w.Start.Before(stopped) && !w.End.Before(from) && w.End.Sub(resumed) > window {
					t.Errorf("%s: the watch of the resumed replica from %s ended %v after it resumed, beyond %v",
						m.Name, w.Start.Format(time.StampMilli), w.End.Sub(resumed), window)
				}
			}
		}
		// It joins again, and gets its clusters back from the other replica.
		f.waitSettled(churn, ids[0], ids[2])
		checkOverlaps("SIGSTOP", from, ids[2], stopped)
	})

	t.Run("a restart takes its clusters back warm", func(t *testing.T) {
		// A rolling update: the replica stops with SIGTERM, which keeps its clusters in
		// its snapshot, and the other takes them meanwhile, with a list. Back, it gets
		// the same share, and resumes each watch from its snapshot: its apiservers see
		// no list of configmaps from it, neither a LIST nor a streaming one.
		r := f.replicas[ids[2]]
		if err := r.signal(t, syscall.SIGTERM); err != nil {
			t.Errorf("%s exited with %v", ids[2], err)
		}
		f.waitSettled(churn, ids[0])
		restarted := time.Now()
		f.start(ids[2])
		f.waitSettled(churn, ids[0], ids[2])
		for _, m := range f.members {
			if shard.Owner(m.Name, []string{ids[0], ids[2]}) != ids[2] {
				continue
			}
			reqs, err := m.Requests()
			if err != nil {
				t.Fatal(err)
			}
			resumed := 0
			for _, req := range reqs {
				if replicaOf(req) != ids[2] || req.Resource != "configmaps" || req.Start.Before(restarted) {
					continue
				}
				if req.Verb == "list" || strings.Contains(req.URI, "sendInitialEvents=true") {
					t.Errorf("%s: %s %s after the restart; want the watch resumed from the snapshot", m.Name, req.Verb, req.URI)
				} else {
					resumed++
				}
			}
			if resumed == 0 {
				t.Errorf("%s: no watch of %s after the restart", m.Name, ids[2])
			}
		}
	})

	t.Run("a library Manager as one more shard", func(t *testing.T) {
		// A controller built on the library shards the same way: its Manager engages
		// only the clusters it owns, and its handlers see their events only.
		const id = "controller-0"
		from := time.Now()
		mgr, err := fleetwatch.NewManager(fleetwatch.Options{
			Clusters:  cluster.Options{Kubeconfigs: []string{filepath.Join(f.dir, "members.kubeconfig")}, UserAgent: "example-controller " + replicaAgent + id},
			Resources: []informer.Resource{{Name: "configmaps"}},
			Shard: &shard.Options{
				Identity: id, Namespace: "fleetwatch", Client: f.home.Clientset(),
				LeaseDuration: shardLease, RenewDeadline: shardRenew, RetryPeriod: shardRetry,
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string]bool{}
		if _, err := mgr.Fleet().AddHandler(aggregate.HandlerFunc(func(e aggregate.Event) {
			mu.Lock()
			seen[e.Cluster] = true
			mu.Unlock()
		}), aggregate.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		f.others = func(assigned map[string]string) string {
			if !mgr.Ready() {
				return id + " is not ready"
			}
			for _, m := range f.members {
				st, ok := mgr.ClusterStatus(m.Name)
				if !ok || st.Replica != assigned[m.Name] {
					return fmt.Sprintf("%s says %s is watched by %q, want %s", id, m.Name, st.Replica, assigned[m.Name])
				}
				got := map[string]string{}
				objs, err := mgr.Fleet().Lister(configMapsGVR).Cluster(m.Name).List(labels.Everything())
				if err != nil {
					return err.Error()
				}
				for _, o := range objs {
					a, _ := meta.Accessor(o)
					got[a.GetNamespace()+"/"+a.GetName()] = a.GetResourceVersion()
				}
				if assigned[m.Name] != id {
					if st.Phase != aggregate.PhaseRemote || len(got) > 0 {
						return fmt.Sprintf("%s holds %d objects of %s, %s, which %s watches", id, len(got), m.Name, st.Phase, assigned[m.Name])
					}
					continue
				}
				if diff := sameAsServer(t.Context(), m, got); diff != "" {
					return fmt.Sprintf("%s holds %s: %s", id, m.Name, diff)
				}
			}
			return ""
		}
		t.Logf("settled with %s in %v", id, f.waitSettled(churn, ids[0], ids[2], id))
		f.others = nil
		// Every selected cluster has its config, also one another replica watches: a
		// controller of one shard may write anywhere, and the API reads CRDs with it.
		for _, m := range f.members {
			cfg, err := mgr.RESTConfig(m.Name)
			if err != nil {
				t.Errorf("RESTConfig(%s): %v", m.Name, err)
				continue
			}
			got, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().Get(t.Context(), metav1.NamespaceSystem, metav1.GetOptions{})
			if err != nil {
				t.Errorf("kube-system through RESTConfig(%s): %v", m.Name, err)
				continue
			}
			want, err := m.Clientset().CoreV1().Namespaces().Get(t.Context(), metav1.NamespaceSystem, metav1.GetOptions{})
			if err != nil || got.UID != want.UID {
				t.Errorf("RESTConfig(%s) reaches the cluster with kube-system %s, want %s (%v)", m.Name, got.UID, want.UID, err)
			}
		}
		if _, err := mgr.RESTConfig("not-selected"); !errors.Is(err, fleetwatch.ErrUnknownCluster) {
			t.Errorf("RESTConfig of a cluster not selected: %v, want ErrUnknownCluster", err)
		}
		mu.Lock()
		for c := range seen {
			if shard.Owner(c, []string{ids[0], ids[2], id}) != id {
				t.Errorf("a handler of %s saw events of %s, which it does not own", id, c)
			}
		}
		mu.Unlock()
		// It stops: it releases its clusters, which the others take at once.
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("the Manager did not stop within a minute")
		}
		f.waitSettled(churn, ids[0], ids[2])
		checkOverlaps("a library shard", from, "", time.Time{})
	})
	t.Logf("the whole test took %v", time.Since(begin))
}

// createConfigMaps creates n configmaps named prefix-0 … in namespace shop of each
// member, the members at once.
func createConfigMaps(t *testing.T, members []*testenv.Cluster, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for _, m := range members {
		wg.Go(func() {
			for i := range n {
				createConfigMap(t, m.Clientset(), "shop", fmt.Sprintf("%s-%d", prefix, i), m.Name)
			}
		})
	}
	wg.Wait()
}
