package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// resumeNamespace holds the configmaps that TestWatchResumesAcrossRestarts changes.
const resumeNamespace = "resume"

// sequences records each object's changes as "ADDED@rv", "MODIFIED@rv" and "DELETED",
// by cluster/name.
type sequences struct {
	mu   sync.Mutex
	seqs map[string][]string
}

func (s *sequences) add(cluster, name, typ, rv string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seqs == nil {
		s.seqs = map[string][]string{}
	}
	change := typ + "@" + rv
	if typ == string(watch.Deleted) {
		change = typ
	}
	s.seqs[cluster+"/"+name] = append(s.seqs[cluster+"/"+name], change)
}

func (s *sequences) snapshot() map[string][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]string, len(s.seqs))
	for k, v := range s.seqs {
		out[k] = slices.Clone(v)
	}
	return out
}

// compare returns how many changes of want got misses and how many it has more than
// once or out of order, with a few examples.
func compareSequences(want, got map[string][]string) (missed, repeated int, examples []string) {
	for k, w := range want {
		g := got[k]
		if slices.Equal(w, g) {
			continue
		}
		seen := map[string]int{}
		for _, c := range g {
			seen[c]++
		}
		for _, c := range w {
			if seen[c] == 0 {
				missed++
			} else {
				seen[c]--
			}
		}
		for _, n := range seen {
			repeated += n
		}
		if len(examples) < 5 {
			examples = append(examples, fmt.Sprintf("%s: servers %v, watch %v", k, w, g))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			repeated += len(g)
			if len(examples) < 5 {
				examples = append(examples, fmt.Sprintf("%s: not on the servers, watch %v", k, g))
			}
		}
	}
	return missed, repeated, examples
}

// watchTruth records the changes of the configmaps in namespace of c, as its
// apiserver sends them, until ctx is done.
func watchTruth(ctx context.Context, t *testing.T, c *testenv.Cluster, namespace string, into *sequences) {
	cms := c.Clientset().CoreV1().ConfigMaps(namespace)
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("listing configmaps of %s: %v", c.Name, err)
		return
	}
	rv := list.ResourceVersion
	for ctx.Err() == nil {
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("watching configmaps of %s: %v", c.Name, err)
			}
			return
		}
		for e := range w.ResultChan() {
			cm, ok := e.Object.(*corev1.ConfigMap)
			if !ok {
				if e.Type == watch.Error && ctx.Err() == nil {
					t.Errorf("the truth's watch of %s failed: %v", c.Name, apierrors.FromObject(e.Object))
				}
				continue
			}
			rv = cm.ResourceVersion
			if e.Type != watch.Bookmark {
				into.add(c.Name, cm.Namespace+"/"+cm.Name, string(e.Type), cm.ResourceVersion)
			}
		}
	}
}

// fleetWatcher watches the configmaps of resumeNamespace across the fleet through the
// daemon, and when the stream ends (the daemon was killed, or stopped), watches again
// from the resourceVersion of the last event or bookmark, as a reflector does.
type fleetWatcher struct {
	base string
	// path is what is watched, below base; default the configmaps of resumeNamespace
	// across the fleet.
	path string
	seen sequences
	// client and token, if set, are what the watch is sent with; default
	// http.DefaultClient, without a token.
	client *http.Client
	token  string

	mu sync.Mutex
	// cursors are the resourceVersions of the events, in order; gone the answers 410.
	cursors []string
	gone    []string
	opened  int
	// paused holds the watch back (pause); stop ends the one open.
	paused bool
	stop   context.CancelFunc
}

// pause ends the open watch and opens none until resume, so that the watch falls
// behind the snapshot's commits.
func (fw *fleetWatcher) pause() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.paused = true
	if fw.stop != nil {
		fw.stop()
	}
}

func (fw *fleetWatcher) resume() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.paused = false
}

func (fw *fleetWatcher) last() string {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.cursors[len(fw.cursors)-1]
}

// run watches until ctx is done.
func (fw *fleetWatcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		fw.mu.Lock()
		paused := fw.paused
		wctx, stop := context.WithCancel(ctx)
		fw.stop = stop
		fw.mu.Unlock()
		err := fmt.Errorf("paused")
		if !paused {
			err = fw.watchOnce(wctx, fw.last())
		}
		stop()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// watchOnce watches from rv until the stream ends.
func (fw *fleetWatcher) watchOnce(ctx context.Context, rv string) error {
	path := fw.path
	if path == "" {
		path = "/clusters/*/api/v1/namespaces/" + resumeNamespace + "/configmaps"
	}
	u := fw.base + path + "?watch=1&allowWatchBookmarks=true&resourceVersion=" + url.QueryEscape(rv)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if fw.token != "" {
		req.Header.Set("Authorization", "Bearer "+fw.token)
	}
	client := fw.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusGone:
		fw.mu.Lock()
		fw.gone = append(fw.gone, rv)
		fw.mu.Unlock()
		return fmt.Errorf("410")
	default:
		return fmt.Errorf("%d", resp.StatusCode) // 503 while the daemon starts
	}
	fw.mu.Lock()
	fw.opened++
	fw.mu.Unlock()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var e struct {
			Type   string                    `json:"type"`
			Object unstructured.Unstructured `json:"object"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return err
		}
		if e.Type == string(watch.Error) {
			fw.mu.Lock()
			fw.gone = append(fw.gone, sc.Text())
			fw.mu.Unlock()
			return fmt.Errorf("an ERROR event")
		}
		if e.Type != string(watch.Bookmark) {
			ann := e.Object.GetAnnotations()
			fw.seen.add(ann[v1alpha1.ClusterAnnotation], e.Object.GetNamespace()+"/"+e.Object.GetName(), e.Type, ann[v1alpha1.ResourceVersionAnnotation])
		}
		fw.mu.Lock()
		fw.cursors = append(fw.cursors, e.Object.GetResourceVersion())
		fw.mu.Unlock()
	}
	return sc.Err()
}

// churnResume creates, updates and deletes configmaps of namespace in c, about
// perSecond writes a second, until ctx is done or a write fails (an error of the test).
func churnResume(ctx context.Context, t *testing.T, c *testenv.Cluster, namespace string, perSecond int, seed uint64) {
	churnPaced(ctx, c, namespace, perSecond, seed, func(err error) bool {
		if ctx.Err() == nil {
			t.Errorf("churn in %s: %v", c.Name, err)
		}
		return false
	})
}

// churnPaced creates, updates and deletes configmaps of namespace in c, about
// perSecond writes a second, until ctx is done. A write that fails (each has 10s) is
// passed to failed, which ends the churn unless it returns true; the configmap of a
// create that failed is not written again.
func churnPaced(ctx context.Context, c *testenv.Cluster, namespace string, perSecond int, seed uint64, failed func(error) bool) {
	cms := c.Clientset().CoreV1().ConfigMaps(namespace)
	rng := rand.New(rand.NewPCG(seed, 35))
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	var live []string
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		switch op := rng.IntN(10); {
		case len(live) < 10 || op < 3:
			name := fmt.Sprintf("r-%d-%d", seed, i)
			if _, err = cms.Create(wctx, configMap(namespace, name, c.Name), metav1.CreateOptions{}); err == nil {
				live = append(live, name)
			}
		case op < 8:
			cm := configMap(namespace, live[rng.IntN(len(live))], c.Name)
			cm.Data["i"] = fmt.Sprint(i)
			_, err = cms.Update(wctx, cm, metav1.UpdateOptions{})
		default:
			j := rng.IntN(len(live))
			err = cms.Delete(wctx, live[j], metav1.DeleteOptions{})
			live = slices.Delete(live, j, j+1)
		}
		cancel()
		if err != nil && !failed(err) {
			return
		}
	}
}

// TestWatchResumesAcrossRestarts (#35): a fleet watch over 3 clusters under about 150
// changes a second, through a daemon killed -9 five times and stopped with SIGTERM
// once, each time restarted with history.enabled, and watched again from the last
// resourceVersion the watch had: in the end it has, per object, exactly the changes the
// servers sent, none missed and none repeated. A resourceVersion older than
// history.retention gets 410.
func TestWatchResumesAcrossRestarts(t *testing.T) {
	t.Parallel()
	testWatchResumesAcrossRestarts(t, nil)
}

// TestWatchResumesAcrossRestartsByNamespace is TestWatchResumesAcrossRestarts with the
// daemon restricted to two namespaces, each of them watched by an informer of its own,
// whose streams interleave in the fleet in another order after each restart; the
// changes are made in both, and the fleet watch is of every namespace.
func TestWatchResumesAcrossRestartsByNamespace(t *testing.T) {
	t.Parallel()
	testWatchResumesAcrossRestarts(t, []string{resumeNamespace, resumeNamespace + "-b"})
}

// testWatchResumesAcrossRestarts runs TestWatchResumesAcrossRestarts, with the daemon
// restricted to namespaces if not nil (then the changes are made in each, and the
// fleet watch is of every namespace).
func testWatchResumesAcrossRestarts(t *testing.T, namespaces []string) {
	env := testenv.New(t, testenv.Options{Clusters: 3})
	ctx := t.Context()
	changed := namespaces
	if changed == nil {
		changed = []string{resumeNamespace}
	}
	for _, c := range env.Clusters {
		for _, name := range changed {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
			if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	const retention = 25 * time.Second
	restricted := ""
	path := "/clusters/*/api/v1/namespaces/" + resumeNamespace + "/configmaps"
	if namespaces != nil {
		restricted = fmt.Sprintf("\n    namespaces: [%s]", strings.Join(namespaces, ", "))
		path = "/clusters/*/api/v1/configmaps"
	}
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: configmaps%s
snapshot:
  path: %q
  interval: 1s
history:
  enabled: true
  retention: %s
server:
  address: 127.0.0.1:%d
`, env.Kubeconfig, restricted, filepath.Join(dir, "fleetwatch.db"), retention, port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)

	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	var truth sequences
	var wg sync.WaitGroup
	for _, c := range env.Clusters {
		for _, ns := range changed {
			wg.Go(func() { watchTruth(watchCtx, t, c, ns, &truth) })
		}
	}
	fw := &fleetWatcher{base: base, path: path, cursors: []string{listResourceVersion(t, base+path)}}
	wg.Go(func() { fw.run(watchCtx) })
	time.Sleep(time.Second) // the truth's watches and the fleet watch are open

	churnCtx, stopChurn := context.WithCancel(ctx)
	var churnWG sync.WaitGroup
	for i, c := range env.Clusters {
		for w := range 2 {
			ns := changed[w%len(changed)]
			churnWG.Go(func() { churnResume(churnCtx, t, c, ns, 25, uint64(10*i+w)) })
		}
	}
	time.Sleep(time.Second)
	early := fw.last()
	earlyAt := time.Now()

	rng := rand.New(rand.NewPCG(35, 5))
	// behind: the watch falls behind the snapshot's commits before the daemon stops,
	// so that it resumes from the change log; else it is ahead of them, and resumes
	// from what the restarted informers receive again.
	restart := func(sig syscall.Signal, behind bool) {
		t.Helper()
		time.Sleep(time.Duration(2000+rng.IntN(2000)) * time.Millisecond)
		if behind {
			fw.pause()
			time.Sleep(2500 * time.Millisecond) // past a commit (snapshot.interval)
		}
		_ = d.signal(t, sig)
		d.start(t)
		waitReadyz(t, http.DefaultClient, base)
		fw.resume()
	}
	for i := range 5 {
		restart(syscall.SIGKILL, i%2 == 1)
	}
	restart(syscall.SIGTERM, false)
	time.Sleep(2 * time.Second)
	stopChurn()
	churnWG.Wait()

	// The watch catches up with the servers.
	var missed, repeated int
	var examples []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		missed, repeated, examples = compareSequences(truth.snapshot(), fw.seen.snapshot())
		if missed == 0 && repeated == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	fw.mu.Lock()
	gone, opened := slices.Clone(fw.gone), fw.opened
	fw.mu.Unlock()
	changes := 0
	for _, s := range truth.snapshot() {
		changes += len(s)
	}
	t.Logf("%d changes of %d objects on the servers; the watch was opened %d times: %d missed, %d repeated", changes, len(truth.snapshot()), opened, missed, repeated)
	if missed != 0 || repeated != 0 {
		t.Errorf("the resumed watch is not the servers' sequence of changes: %d missed, %d repeated; for example:\n%s", missed, repeated, strings.Join(examples, "\n"))
	}
	if len(gone) > 0 {
		t.Errorf("the watch got 410 within the retention: %q", gone)
	}
	if opened < 7 {
		t.Errorf("the watch was opened %d times, want one per run", opened)
	}
	// The watches that fell behind resumed with changes from the log (the daemon logs
	// them at verbosity 4).
	daemonLog, err := os.ReadFile(d.log.Name())
	if err != nil {
		t.Fatal(err)
	}
	fromLog := 0
	for line := range strings.Lines(string(daemonLog)) {
		if strings.Contains(line, "Resuming a watch from the change log") && !strings.Contains(line, " changes=0") {
			fromLog++
		}
	}
	t.Logf("%d clusters' watches resumed with changes from the log", fromLog)
	if fromLog == 0 {
		t.Error("no watch resumed with changes from the change log")
	}
	stopWatching()
	wg.Wait()
	if namespaces != nil {
		return
	}

	// A resourceVersion older than the retention: the log no longer holds what follows.
	if wait := retention + 2*time.Second - time.Since(earlyAt); wait > 0 {
		time.Sleep(wait)
	}
	// A change, so that a commit prunes the log.
	createConfigMap(t, env.Clusters[0].Clientset(), resumeNamespace, "after", env.Clusters[0].Name)
	eventually(t, 20*time.Second, "410 for a resourceVersion older than history.retention", func() string {
		resp, err := http.Get(base + "/clusters/*/api/v1/namespaces/" + resumeNamespace + "/configmaps?watch=1&timeoutSeconds=1&resourceVersion=" + url.QueryEscape(early))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusGone {
			return fmt.Sprintf("status %d", resp.StatusCode)
		}
		return ""
	})
}

// TestWatchResumesAfterAColdStart: a cursor that a cold daemon handed out after its
// first list of a cluster where nothing changed since resumes after a restart: the
// list's objects stand at the list's resourceVersion, where the change log's coverage
// starts, not at the greatest of their own (which the log cannot place: 410). The
// configmaps are watched in two namespaces, one of them empty.
func TestWatchResumesAfterAColdStart(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 1})
	c := env.Clusters[0]
	for _, name := range []string{"a", "b", "c"} {
		createConfigMap(t, c.Clientset(), "quiet", name, c.Name)
	}
	// What the daemon does not watch changes: the cluster's resourceVersion, which its
	// list has, moves past its objects', as in any cluster that runs controllers.
	createConfigMap(t, c.Clientset(), "elsewhere", "x", c.Name)
	// A watched namespace without configmaps: its list is empty.
	if _, err := c.Clientset().CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "empty"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: configmaps
    namespaces: [quiet, empty]
snapshot:
  path: %q
  interval: 1s
history:
  enabled: true
server:
  address: 127.0.0.1:%d
`, env.Kubeconfig, filepath.Join(dir, "fleetwatch.db"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)
	path := base + "/clusters/*/api/v1/configmaps"
	listed := listResourceVersion(t, path)
	time.Sleep(2500 * time.Millisecond) // past a commit (snapshot.interval)
	_ = d.signal(t, syscall.SIGTERM)
	d.start(t)
	waitReadyz(t, http.DefaultClient, base)
	createConfigMap(t, c.Clientset(), "quiet", "after", c.Name)

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, path+"?watch=1&resourceVersion="+url.QueryEscape(listed), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("watch from the cold run's list: %d %s", resp.StatusCode, body)
	}
	var e struct {
		Type   string                    `json:"type"`
		Object unstructured.Unstructured `json:"object"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if e.Type != string(watch.Added) || e.Object.GetName() != "after" {
		t.Errorf("the first event: %s %s/%s, want the configmap created after the restart", e.Type, e.Object.GetNamespace(), e.Object.GetName())
	}
}

// listResourceVersion lists url and returns the list's resourceVersion.
func listResourceVersion(t *testing.T, url string) string {
	t.Helper()
	var list struct {
		Metadata metav1.ListMeta `json:"metadata"`
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return list.Metadata.ResourceVersion
}
