package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/history"
	"github.com/fleetwatch/fleetwatch/persist"
)

// Resources of the test fleet.
var (
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodesGVR       = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	// barrierGVR holds objects without a kind, which the server never serves; see sync.
	barrierGVR = schema.GroupVersionResource{Group: "test.fleetwatch.io", Version: "v1", Resource: "barriers"}
)

// Clusters of the test fleet. edge has a '/' and ':' in its name, as EKS contexts do.
const (
	prod    = "prod"
	staging = "staging"
	edge    = "arn:aws:eks:eu-west-1:123:cluster/edge"
)

// testCodec is the Codec of the fixture's fleet: nil, or with
// FLEETWATCH_TEST_CACHE_ENCODING=compact the snapshot's, so that the server's tests run
// against a compact fleet.
func testCodec() aggregate.Codec {
	if os.Getenv("FLEETWATCH_TEST_CACHE_ENCODING") == "compact" {
		return persist.Codec{}
	}
	return nil
}

// now is the fake time of the server's clock; objects are created an hour before.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fakeSource is a Source with a real fleet and statuses set by the test.
type fakeSource struct {
	fleet *aggregate.Fleet

	mu       sync.Mutex
	statuses map[string]aggregate.ClusterStatus
	ready    bool
	// states are the handed-over states, by cluster.
	states map[string][]byte
	// log is the change log, nil for a fleet that keeps none.
	log *history.Log
}

var (
	_ Source        = (*fakeSource)(nil)
	_ StateSource   = (*fakeSource)(nil)
	_ HistorySource = (*fakeSource)(nil)
)

func (f *fakeSource) History() (*history.Log, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.log == nil {
		return nil, errors.New("the fake fleet keeps no change log")
	}
	return f.log, nil
}

func (f *fakeSource) HandoverState(name string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.states[name]
	return b, ok
}

func (f *fakeSource) HandoverReceived(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.states[name]
	delete(f.states, name)
	return ok
}

func (f *fakeSource) Fleet() *aggregate.Fleet { return f.fleet }

func (f *fakeSource) Status() []aggregate.ClusterStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []aggregate.ClusterStatus
	for _, name := range sortedKeys(f.statuses) {
		out = append(out, f.withCounts(f.statuses[name]))
	}
	return out
}

func (f *fakeSource) ClusterStatus(name string) (aggregate.ClusterStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.statuses[name]
	return f.withCounts(st), ok
}

func (f *fakeSource) withCounts(st aggregate.ClusterStatus) aggregate.ClusterStatus {
	st.Resources = slices.Clone(st.Resources)
	for i, r := range st.Resources {
		if !r.Resource.Empty() {
			st.Resources[i].Count = f.fleet.Indexer(r.Resource).ClusterLen(st.Name)
		}
	}
	return st
}

func (f *fakeSource) Ready() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ready
}

func (f *fakeSource) setStatus(st aggregate.ClusterStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[st.Name] = st
}

func (f *fakeSource) setReady(ready bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ready = ready
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func resourceStatus(gvr schema.GroupVersionResource, kind string, namespaced bool) aggregate.ResourceStatus {
	name := gvr.Resource
	if gvr.Group != "" {
		name += "." + gvr.Group
	}
	return aggregate.ResourceStatus{
		Name:       name,
		Resource:   gvr,
		Kind:       gvr.GroupVersion().WithKind(kind),
		Namespaced: namespaced,
		State:      "Synced",
	}
}

func clusterStatus(name string, phase aggregate.Phase, withDeployments bool) aggregate.ClusterStatus {
	st := aggregate.ClusterStatus{
		Name:         name,
		Phase:        phase,
		Server:       "https://" + strings.NewReplacer("/", "-", ":", "-").Replace(name) + ".example.com",
		UID:          types.UID("uid-" + name),
		LastSyncTime: now.Add(-5 * time.Minute),
		Conditions: []metav1.Condition{{
			Type: aggregate.ConditionSynced, Status: metav1.ConditionTrue, Reason: "AllResourcesSynced",
			LastTransitionTime: metav1.NewTime(now.Add(-5 * time.Minute)),
		}},
		Resources: []aggregate.ResourceStatus{
			resourceStatus(podsGVR, "Pod", true),
			resourceStatus(nodesGVR, "Node", false),
		},
	}
	if withDeployments {
		st.Resources = append(st.Resources, resourceStatus(deploymentsGVR, "Deployment", true))
	} else {
		st.Resources = append(st.Resources, aggregate.ResourceStatus{Name: "deployments.apps", State: "NotFound"})
	}
	return st
}

// pod returns a running pod with one ready container.
func pod(namespace, name, rv string, labels map[string]string) *unstructured.Unstructured {
	u := aggregatetest.Pod(namespace, name, rv, labels)
	u.SetCreationTimestamp(metav1.NewTime(now.Add(-time.Hour)))
	_ = unstructured.SetNestedField(u.Object, map[string]any{
		"phase": "Running",
		"podIP": "10.0.0.1",
		"containerStatuses": []any{map[string]any{
			"name": "main", "ready": true, "restartCount": int64(2),
			"state": map[string]any{"running": map[string]any{}},
		}},
	}, "status")
	_ = unstructured.SetNestedField(u.Object, "node-1", "spec", "nodeName")
	return u
}

func node(name, rv string) *unstructured.Unstructured {
	u := aggregatetest.Node(name, rv, map[string]string{"node-role.kubernetes.io/control-plane": ""})
	u.SetCreationTimestamp(metav1.NewTime(now.Add(-48 * time.Hour)))
	_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"type": "Ready", "status": "True"}}, "status", "conditions")
	_ = unstructured.SetNestedField(u.Object, "v1.33.1", "status", "nodeInfo", "kubeletVersion")
	return u
}

func deployment(namespace, name, rv string, replicas, ready int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"spec": map[string]any{
			"replicas": replicas,
			"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
			"template": map[string]any{"spec": map[string]any{"containers": []any{
				map[string]any{"name": "main", "image": "registry.example.com/" + name + ":1"},
			}}},
		},
		"status": map[string]any{"readyReplicas": ready, "updatedReplicas": replicas, "availableReplicas": ready},
	}}
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetResourceVersion(rv)
	u.SetUID(types.UID("uid-" + namespace + "-" + name))
	u.SetCreationTimestamp(metav1.NewTime(now.Add(-2 * time.Hour)))
	return u
}

var (
	web = map[string]string{"app": "web"}
	api = map[string]string{"app": "api"}
	dns = map[string]string{"app": "dns"}
)

// fixture is a fleet of three clusters, a Source for it, and a Server over HTTP.
type fixture struct {
	t      testing.TB
	ctx    context.Context
	fleet  *aggregate.Fleet
	src    *fakeSource
	server *Server
	http   *httptest.Server
	// barriers counts the barrier objects applied by sync.
	barriers int
	// observe, if set, sees every request first.
	observe atomic.Pointer[func(*http.Request)]
}

// newFixture starts a fleet holding:
//
//	prod:    pods default/web-1 (web), default/web-2 (web), kube-system/dns-1 (dns);
//	         nodes node-1; deployments default/web
//	staging: pods default/web-1 (web), default/api-1 (api); nodes node-1
//	         (deployments are not served there)
//	edge:    pods default/web-3 (web)
//
// and a server of it. setOpts, if not nil, changes the server's options.
func newFixture(t testing.TB, setOpts func(*Options)) *fixture {
	t.Helper()
	return newFixtureOf(t, testCodec(), setOpts)
}

// newFixtureOf is newFixture with a fleet of codec (nil: a plain fleet).
func newFixtureOf(t testing.TB, codec aggregate.Codec, setOpts func(*Options)) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fleet := aggregate.New(aggregate.Options{Codec: codec})
	f := &fixture{t: t, ctx: ctx, fleet: fleet, src: &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}, ready: true}}
	f.src.setStatus(clusterStatus(prod, aggregate.PhaseSynced, true))
	f.src.setStatus(clusterStatus(staging, aggregate.PhaseSynced, false))
	f.src.setStatus(clusterStatus(edge, aggregate.PhaseSynced, false))
	f.apply(prod, podsGVR, pod("default", "web-1", "101", web))
	f.apply(prod, podsGVR, pod("default", "web-2", "102", web))
	f.apply(prod, podsGVR, pod("kube-system", "dns-1", "103", dns))
	f.apply(prod, nodesGVR, node("node-1", "104"))
	f.apply(prod, deploymentsGVR, deployment("default", "web", "105", 2, 2))
	f.apply(staging, podsGVR, pod("default", "web-1", "201", web))
	f.apply(staging, podsGVR, pod("default", "api-1", "202", api))
	f.apply(staging, nodesGVR, node("node-1", "203"))
	f.apply(edge, podsGVR, pod("default", "web-3", "301", web))
	for _, cl := range []string{prod, staging, edge} {
		for _, gvr := range []schema.GroupVersionResource{podsGVR, nodesGVR, deploymentsGVR} {
			fleet.ClusterStore(cl, gvr).MarkSynced()
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fleet.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	opts := Options{Clock: clocktesting.NewFakePassiveClock(now), BookmarkInterval: 50 * time.Millisecond}
	if setOpts != nil {
		setOpts(&opts)
	}
	s, err := New(f.src, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	f.server = s
	f.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := f.observe.Load(); o != nil {
			(*o)(r)
		}
		s.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(f.http.Close)
	t.Cleanup(s.stop) // ends watches before the HTTP server waits for them
	// Serve follows the token and TLS files; the fixture serves Handler, so it follows
	// them itself.
	following := make(chan struct{})
	go func() {
		defer close(following)
		s.followFiles(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-following
	})
	f.sync()
	return f
}

// eventually polls cond until it holds, and fails the test if it does not within 10s:
// a changed file applies once the server has seen the change.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apply adds or updates an object in the fleet.
func (f *fixture) apply(cluster string, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	f.t.Helper()
	if err := f.fleet.ClusterStore(cluster, gvr).Apply(obj, false); err != nil {
		f.t.Fatalf("apply %s %s/%s to %s: %v", gvr.Resource, obj.GetNamespace(), obj.GetName(), cluster, err)
	}
}

// remove deletes an object from the fleet.
func (f *fixture) remove(cluster string, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) {
	f.t.Helper()
	if err := f.fleet.ClusterStore(cluster, gvr).Delete(obj, false); err != nil {
		f.t.Fatalf("delete %s %s/%s from %s: %v", gvr.Resource, obj.GetNamespace(), obj.GetName(), cluster, err)
	}
}

// sync waits until the server's watch cache has seen every change made to the fleet so
// far: the fleet delivers the events of one handler in order, so once a new barrier
// object has arrived, so has everything before it.
func (f *fixture) sync() {
	f.t.Helper()
	f.barriers++
	name := "barrier-" + strings.Repeat("x", f.barriers)
	b := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := f.fleet.ClusterStore(prod, barrierGVR).Apply(b, false); err != nil {
		f.t.Fatalf("apply barrier: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if rc := f.server.cache.lookup(barrierGVR); rc != nil {
			rc.mu.RLock()
			found := len(rc.getLocked(scope{cluster: prod}, "", name)) == 1
			rc.mu.RUnlock()
			if found {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	f.t.Fatalf("the watch cache did not catch up with the fleet")
}

// response is a response read whole.
type response struct {
	code   int
	header http.Header
	body   []byte
}

// do sends a request; header alternates names and values.
func (f *fixture) do(method, path string, header ...string) response {
	f.t.Helper()
	req, err := http.NewRequestWithContext(f.ctx, method, f.http.URL+path, nil)
	if err != nil {
		f.t.Fatalf("request %s %s: %v", method, path, err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{code: res.StatusCode, header: res.Header, body: body}
}

func (f *fixture) get(path string, header ...string) response {
	f.t.Helper()
	return f.do(http.MethodGet, path, header...)
}

// getOK gets path, expecting 200, and decodes the body into v.
func (f *fixture) getOK(path string, v any, header ...string) {
	f.t.Helper()
	r := f.get(path, header...)
	if r.code != http.StatusOK {
		f.t.Fatalf("GET %s: %d %s", path, r.code, r.body)
	}
	if err := json.Unmarshal(r.body, v); err != nil {
		f.t.Fatalf("GET %s: decode %T: %v\n%s", path, v, err, r.body)
	}
}

// status decodes a Status body and checks its kind and code.
func (r response) status(t *testing.T, code int) metav1.Status {
	t.Helper()
	if r.code != code {
		t.Fatalf("got %d, want %d: %s", r.code, code, r.body)
	}
	var st metav1.Status
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("decode Status: %v\n%s", err, r.body)
	}
	if st.Kind != "Status" || st.APIVersion != "v1" || st.Code != int32(code) || st.Status != metav1.StatusFailure {
		t.Fatalf("not a failure Status with kind, apiVersion and code %d: %s", code, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type of a Status = %q, want application/json", ct)
	}
	return st
}

// clusterPath returns the path prefix of a cluster, escaped.
func clusterPath(cluster string) string {
	if cluster == allClusters {
		return "/clusters/*"
	}
	return "/clusters/" + url.PathEscape(cluster)
}

// itemList is a list as served, decoded.
type itemList struct {
	Kind       string                      `json:"kind"`
	APIVersion string                      `json:"apiVersion"`
	Metadata   metav1.ListMeta             `json:"metadata"`
	Items      []unstructured.Unstructured `json:"items"`
}

// refs returns "cluster/namespace/name" of each item, in order, from its annotation.
func (l itemList) refs() []string {
	out := make([]string, len(l.Items))
	for i, it := range l.Items {
		out[i] = it.GetAnnotations()[ClusterAnnotation] + "|" + it.GetNamespace() + "/" + it.GetName()
	}
	return out
}

// watcher reads a watch stream.
type watcher struct {
	t      testing.TB
	res    *http.Response
	cancel context.CancelFunc
	lines  chan string
	errs   chan error
}

type watchEvent struct {
	Type   string
	Object unstructured.Unstructured
	Raw    json.RawMessage
}

// watch starts a watch, expecting 200.
func (f *fixture) watch(path string, header ...string) *watcher {
	f.t.Helper()
	return f.watchURL(f.http.URL+path, header...)
}

// watchURL starts a watch of a full URL, expecting 200.
func (f *fixture) watchURL(url string, header ...string) *watcher {
	f.t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		f.t.Fatalf("watch %s: %v", url, err)
	}
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		cancel()
		f.t.Fatalf("watch %s: %d %s", url, res.StatusCode, body)
	}
	w := &watcher{t: f.t, res: res, cancel: cancel, lines: make(chan string, 1000), errs: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		w.errs <- sc.Err()
		close(w.lines)
	}()
	f.t.Cleanup(w.stop)
	return w
}

func (w *watcher) stop() {
	w.cancel()
	w.res.Body.Close()
}

// next returns the next event, failing after a timeout or at the end of the stream.
func (w *watcher) next() watchEvent {
	w.t.Helper()
	select {
	case line, ok := <-w.lines:
		if !ok {
			w.t.Fatalf("watch ended: %v", <-w.errs)
		}
		var raw struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			w.t.Fatalf("watch line is not a WatchEvent: %v\n%s", err, line)
		}
		e := watchEvent{Type: raw.Type, Raw: raw.Object}
		if err := json.Unmarshal(raw.Object, &e.Object.Object); err != nil {
			w.t.Fatalf("watch event object: %v\n%s", err, line)
		}
		return e
	case <-time.After(10 * time.Second):
		w.t.Fatalf("no watch event within 10s")
	}
	return watchEvent{}
}

// nextNot returns the next event that is not a BOOKMARK.
func (w *watcher) nextNot(typ string) watchEvent {
	w.t.Helper()
	for {
		if e := w.next(); e.Type != typ {
			return e
		}
	}
}

// none checks that no event but bookmarks arrives within d.
func (w *watcher) none(d time.Duration) {
	w.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				return
			}
			if !strings.Contains(line, `"type":"BOOKMARK"`) {
				w.t.Fatalf("unexpected watch event: %s", line)
			}
		case <-timeout:
			return
		}
	}
}

// ended waits for the end of the stream.
func (w *watcher) ended(d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-w.lines:
			if !ok {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// ref returns "type cluster|namespace/name" of an event.
func (e watchEvent) ref() string {
	return e.Type + " " + e.Object.GetAnnotations()[ClusterAnnotation] + "|" + e.Object.GetNamespace() + "/" + e.Object.GetName()
}
