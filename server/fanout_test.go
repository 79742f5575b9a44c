package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/internal/testcert"
)

// fanOutPair is two replicas of a sharded fleet: local, which watches prod, staging and
// edge and sees the cluster far owned by peer, which watches far. The peer still holds
// objects of the others, as a replica restarted from its snapshot does before it gives
// them up: it must not answer for them.
func fanOutPair(t testing.TB) (local, peer *fixture, seen func() []http.Header) {
	t.Helper()
	peer = newFixture(t, func(o *Options) { o.Replica = "fleetwatch-1" })
	far := clusterStatus("far", aggregate.PhaseSynced, false)
	far.Replica = "fleetwatch-1"
	peer.src.setStatus(far)
	for _, cl := range []string{prod, staging, edge} {
		peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: "https://127.0.0.1:1"})
	}
	peer.apply("far", podsGVR, pod("default", "far-1", "401", web))
	peer.apply("far", podsGVR, pod("default", "far-2", "402", web))
	peer.fleet.ClusterStore("far", podsGVR).MarkSynced()
	peer.sync()
	var mu sync.Mutex
	var headers []http.Header
	observe := func(r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Clone())
		mu.Unlock()
	}
	peer.observe.Store(&observe)
	local = newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	local.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})
	return local, peer, func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(headers)
	}
}

func itemClusters(l *unstructured.UnstructuredList) []string {
	var out []string
	for _, o := range l.Items {
		out = append(out, o.GetAnnotations()[ClusterAnnotation]+"/"+o.GetName())
	}
	return out
}

// TestFanOutProxiesARemoteCluster: a request under /clusters/{name}/ of a cluster that
// another replica owns is answered by that replica, with the caller's credentials and
// the replicas' header; a request that a replica forwarded is never sent on.
func TestFanOutProxiesARemoteCluster(t *testing.T) {
	local, _, seen := fanOutPair(t)
	var l unstructured.UnstructuredList
	local.getOK(clusterPath("far")+"/api/v1/pods", &l, "Authorization", "Bearer t0ken")
	if got := itemClusters(&l); !slices.Equal(got, []string{"far/far-1", "far/far-2"}) {
		t.Errorf("far's pods through the other replica: %v", got)
	}
	hs := seen()
	if len(hs) != 1 || hs[0].Get("Authorization") != "Bearer t0ken" || hs[0].Get(forwardedHeader) == "" {
		t.Errorf("the owner saw %v, want one request with the caller's token and %s", hs, forwardedHeader)
	}
	// Discovery and Tables are the owner's too.
	var tbl metav1.Table
	local.getOK(clusterPath("far")+"/api/v1/namespaces/default/pods/far-1", &tbl, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if len(tbl.Rows) != 1 {
		t.Errorf("a Table of far-1: %+v", tbl)
	}
	var rl metav1.APIResourceList
	local.getOK(clusterPath("far")+"/api/v1", &rl)
	if !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "pods" }) {
		t.Errorf("far's discovery: %+v", rl)
	}
	// The Cluster is the owner's, in the list and by name.
	var cl ClusterList
	local.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &cl)
	i := slices.IndexFunc(cl.Items, func(c Cluster) bool { return c.Name == "far" })
	if i < 0 || cl.Items[i].Status.Phase != "Synced" || cl.Items[i].Status.Replica != "fleetwatch-1" || cl.Items[i].Status.Server != "https://far.example.com" {
		t.Errorf("far in the list of clusters: %s", mustJSON(cl))
	}
	var c Cluster
	local.getOK("/apis/fleetwatch.io/v1alpha1/clusters/far", &c)
	if c.Status.Phase != "Synced" {
		t.Errorf("far by name: %s", mustJSON(c))
	}
	// A search covers far too, through its owner, which answers for far only.
	r := local.get(searchPath+"?q=far", "Authorization", "Bearer t0ken")
	var res SearchResult
	if err := json.Unmarshal(r.body, &res); err != nil || r.code != http.StatusOK || r.header.Get("Warning") != "" ||
		strings.Join(searchRefs(res), " ") != "far|Pod|default/far-1 far|Pod|default/far-2" {
		t.Errorf("a search: %d, Warning %q, %s", r.code, r.header.Get("Warning"), r.body)
	}
	if hs := seen(); hs[len(hs)-1].Get("Authorization") != "Bearer t0ken" || hs[len(hs)-1].Get(forwardedHeader) == "" {
		t.Errorf("the owner was asked for the search with %v", hs[len(hs)-1])
	}
	// A forwarded request is answered here: far is not watched here.
	st := local.get(clusterPath("far")+"/api/v1/pods", forwardedHeader, "1").status(t, http.StatusServiceUnavailable)
	if !strings.Contains(st.Message, `replica "fleetwatch-1" watches it`) {
		t.Errorf("a forwarded request: %+v", st)
	}
}

// TestFanOutList: a list under /clusters/*/ merges the replicas' parts in key order,
// pages across them, checks its tokens, and names in a Warning the clusters it could not
// include.
// pages lists path through f in pages of limit, and returns the keys of every page.
func pages(t *testing.T, f *fixture, path, limit string) []string {
	t.Helper()
	var got []string
	cont := ""
	for range 30 {
		var page unstructured.UnstructuredList
		r := f.get(path + "?limit=" + limit + "&continue=" + cont)
		if r.code != http.StatusOK {
			t.Fatalf("limit %s: %d %s", limit, r.code, r.body)
		}
		if err := page.UnmarshalJSON(r.body); err != nil {
			t.Fatal(err)
		}
		got = append(got, itemClusters(&page)...)
		if cont = page.GetContinue(); cont == "" {
			return got
		}
		if _, err := parseContinue(cont); err != nil {
			t.Fatalf("limit %s: the continue token %q: %v", limit, cont, err)
		}
	}
	t.Fatalf("limit %s: more than 30 pages: %v", limit, got)
	return nil
}

// TestFanOutListPagesPastDroppedObjects: a peer's page holds objects of a cluster this
// replica does not see it own (it has just taken the cluster), which are dropped; the
// merged page ends at the last key the peer returned, so that the next page misses
// none of the peer's objects after it.
func TestFanOutListPagesPastDroppedObjects(t *testing.T) {
	local, peer, _ := fanOutPair(t)
	peer.src.setStatus(clusterStatus("fa", aggregate.PhaseSynced, false))
	for i := range 5 {
		peer.apply("fa", podsGVR, pod("default", fmt.Sprintf("fa-%d", i), fmt.Sprint(500+i), web))
	}
	peer.fleet.ClusterStore("fa", podsGVR).MarkSynced()
	peer.sync()
	local.src.setStatus(aggregate.ClusterStatus{Name: "fa", Phase: aggregate.PhaseMoving})
	want := []string{edge + "/web-3", "far/far-1", "far/far-2", "prod/web-1", "prod/web-2", "prod/dns-1", "staging/api-1", "staging/web-1"}
	for _, limit := range []string{"1", "2", "3", "4"} {
		if got := pages(t, local, clusterPath(allClusters)+"/api/v1/pods", limit); !slices.Equal(got, want) {
			t.Errorf("limit %s: %v, want %v", limit, got, want)
		}
	}
}

func TestFanOutList(t *testing.T) {
	local, peer, _ := fanOutPair(t)
	// In (cluster, namespace, name) order: prod's default namespace before kube-system.
	want := []string{edge + "/web-3", "far/far-1", "far/far-2", "prod/web-1", "prod/web-2", "prod/dns-1", "staging/api-1", "staging/web-1"}
	all := clusterPath(allClusters) + "/api/v1/pods"
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	if got := itemClusters(&l); !slices.Equal(got, want) {
		t.Errorf("the whole list: %v, want %v", got, want)
	}
	for _, limit := range []string{"1", "2", "3"} {
		if got := pages(t, local, all, limit); !slices.Equal(got, want) {
			t.Errorf("limit %s: %v, want %v", limit, got, want)
		}
	}
	// A Table merges the same rows.
	var tbl metav1.Table
	local.getOK(all, &tbl, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if len(tbl.Rows) != len(want) {
		t.Errorf("the Table has %d rows, want %d", len(tbl.Rows), len(want))
	}
	// A token that was not handed out gets 400.
	page := local.get(all + "?limit=2")
	var first unstructured.UnstructuredList
	if err := first.UnmarshalJSON(page.body); err != nil {
		t.Fatal(err)
	}
	tok := first.GetContinue()
	for _, bad := range []string{tok[:len(tok)-3], "x" + tok, tok + "AAAA"} {
		local.get(all+"?limit=2&continue="+bad).status(t, http.StatusBadRequest)
	}
	// The list's resourceVersion is a cursor with the peer's inside.
	c, err := parseCursor(first.GetResourceVersion())
	if err != nil || c.peers["fleetwatch-1"] == "" {
		t.Errorf("the list's resourceVersion %q: %+v, %v", first.GetResourceVersion(), c, err)
	}

	// A cluster that is moving is named, not dropped silently.
	local.src.setStatus(aggregate.ClusterStatus{Name: "moving", Phase: aggregate.PhaseMoving})
	r := local.get(all)
	if w := r.header.Get("Warning"); r.code != http.StatusOK || !strings.HasPrefix(w, "299 - ") || !strings.Contains(w, "moving (no live replica watches it now") {
		t.Errorf("with a moving cluster: %d, Warning %q", r.code, w)
	}
	// An owner that is down: the others are served, and its clusters named.
	peer.http.Close()
	r = local.get(all)
	if err := l.UnmarshalJSON(r.body); err != nil {
		t.Fatal(err)
	}
	if w := r.header.Get("Warning"); r.code != http.StatusOK || !strings.Contains(w, `far (replica \"fleetwatch-1\" did not answer`) || slices.Contains(itemClusters(&l), "far/far-1") {
		t.Errorf("with the owner down: %d, Warning %q, %v", r.code, w, itemClusters(&l))
	}
	local.get(clusterPath("far")+"/api/v1/pods").status(t, http.StatusServiceUnavailable)
}

// TestFanOutAuthorization: the owner authorizes the caller again, so a token reads no
// more through a replica than from the owner; a replica that serves HTTPS sends no token
// to a plain HTTP address.
func TestFanOutAuthorization(t *testing.T) {
	dir := t.TempDir()
	// The owner's token file limits the token more than the replica's: the replicas
	// should share it, and if they do not, the owner's rules hold for its clusters.
	peerTokens := writeFile(t, dir, "peer-tokens", "all-s3cret user=admin\nedge-s3cret user=ci clusters=edge\n")
	localTokens := writeFile(t, dir, "local-tokens", "all-s3cret user=admin\nedge-s3cret user=ci clusters=edge,far\n")
	peer := newFixture(t, func(o *Options) { o.TokenFile = peerTokens })
	peer.src.setStatus(clusterStatus("far", aggregate.PhaseSynced, false))
	peer.apply("far", podsGVR, pod("default", "far-1", "401", web))
	peer.fleet.ClusterStore("far", podsGVR).MarkSynced()
	peer.sync()
	var mu sync.Mutex
	requests := 0
	observe := func(*http.Request) { mu.Lock(); requests++; mu.Unlock() }
	peer.observe.Store(&observe)
	local := newFixture(t, func(o *Options) { o.TokenFile = localTokens })
	local.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})

	var l unstructured.UnstructuredList
	local.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, "Authorization", "Bearer all-s3cret")
	if got := itemClusters(&l); !slices.Contains(got, "far/far-1") {
		t.Errorf("the admin token: %v", got)
	}
	local.get(clusterPath("far")+"/api/v1/pods", "Authorization", "Bearer edge-s3cret").status(t, http.StatusForbidden)
	local.get(clusterPath(allClusters)+"/api/v1/pods").status(t, http.StatusUnauthorized)
	local.get(clusterPath("far")+"/api/v1/pods").status(t, http.StatusUnauthorized)
	mu.Lock()
	before := requests
	mu.Unlock()

	// A replica that serves HTTPS sends no token to an http address.
	certFile, keyFile := testcert.Write(t, dir, "tls")
	secure := newFixture(t, func(o *Options) { o.TokenFile, o.TLSCertFile, o.TLSKeyFile = localTokens, certFile, keyFile })
	secure.src.setStatus(aggregate.ClusterStatus{Name: "far", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})
	st := secure.get(clusterPath("far")+"/api/v1/pods", "Authorization", "Bearer all-s3cret").status(t, http.StatusServiceUnavailable)
	if !strings.Contains(st.Message, "fleetwatch-1") {
		t.Errorf("an http owner of a replica that serves HTTPS: %+v", st)
	}
	r := secure.get(clusterPath(allClusters)+"/api/v1/pods", "Authorization", "Bearer all-s3cret")
	if w := r.header.Get("Warning"); r.code != http.StatusOK || !strings.Contains(w, "not HTTPS") {
		t.Errorf("a list with an http owner of a replica that serves HTTPS: %d, Warning %q", r.code, w)
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != before {
		t.Errorf("the owner at an http address got %d requests from a replica that serves HTTPS", requests-before)
	}
}

// TestFanOutWatch: a watch under /clusters/*/ streams the changes of every replica's
// clusters as one, each object with the merged cursor just after it; a watch resumed
// from a cursor sends what changed since, in every part, and nothing before.
func TestFanOutWatch(t *testing.T) {
	local, peer, _ := fanOutPair(t)
	all := clusterPath(allClusters) + "/api/v1/pods"
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + l.GetResourceVersion())
	peer.apply("far", podsGVR, pod("default", "far-3", "403", web))
	local.apply(prod, podsGVR, pod("default", "web-9", "109", web))
	// Changes of the peer's copies of local's clusters are not local's to send.
	peer.apply(staging, podsGVR, pod("default", "not-mine", "299", web))
	got := map[string]string{}
	var last string
	for len(got) < 2 {
		e := w.nextNot("BOOKMARK")
		key := e.Object.GetAnnotations()[ClusterAnnotation] + "/" + e.Object.GetName()
		if key == staging+"/not-mine" {
			t.Fatalf("the watch sent %s, which the peer does not own", key)
		}
		got[key] = e.Type
		last = e.Object.GetResourceVersion()
		c, err := parseCursor(last)
		if err != nil || c.peers["fleetwatch-1"] == "" {
			t.Fatalf("the event's resourceVersion %q is not a merged cursor: %+v %v", last, c, err)
		}
	}
	if got["far/far-3"] != "ADDED" || got[prod+"/web-9"] != "ADDED" {
		t.Errorf("events: %v", got)
	}
	w.stop()
	// While no one watches, each part changes; the watch resumed from the last cursor
	// sends those changes only.
	peer.apply("far", podsGVR, pod("default", "far-4", "404", web))
	local.apply(prod, podsGVR, pod("default", "web-10", "110", web))
	w = local.watch(all + "?watch=true&resourceVersion=" + last)
	got = map[string]string{}
	for len(got) < 2 {
		e := w.nextNot("BOOKMARK")
		got[e.Object.GetAnnotations()[ClusterAnnotation]+"/"+e.Object.GetName()] = e.Type
	}
	if got["far/far-4"] != "ADDED" || got[prod+"/web-10"] != "ADDED" {
		t.Errorf("events after resuming: %v", got)
	}
	w.stop()
	// As Tables (kubectl get -w): the column definitions come once, every row's object
	// has the merged cursor.
	w = local.watch(all+"?watch=true&resourceVersion="+last, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	columns := 0
	rows := map[string]bool{}
	for len(rows) < 2 {
		e := w.nextNot("BOOKMARK")
		var tbl metav1.Table
		if err := json.Unmarshal(e.Raw, &tbl); err != nil {
			t.Fatal(err)
		}
		if len(tbl.ColumnDefinitions) > 0 {
			columns++
		}
		for _, row := range tbl.Rows {
			var m metav1.PartialObjectMetadata
			if err := json.Unmarshal(row.Object.Raw, &m); err != nil {
				t.Fatal(err)
			}
			if c, err := parseCursor(m.ResourceVersion); err != nil || c.peers["fleetwatch-1"] == "" {
				t.Errorf("a row's resourceVersion %q: %v", m.ResourceVersion, err)
			}
			rows[m.Annotations[ClusterAnnotation]+"/"+m.Name] = true
		}
	}
	if columns != 1 || !rows["far/far-4"] || !rows[prod+"/web-10"] {
		t.Errorf("the Table watch: %d events with columns, rows %v", columns, rows)
	}
	w.stop()
	// A cursor of another server is 410 Gone, as a local one is.
	r := local.get(all + "?watch=true&resourceVersion=" + cursor{epoch: "other"}.String())
	r.status(t, http.StatusGone)
}

// TestFanOutWatchResumesThroughAnyReplica: a merged resourceVersion names the replica
// that handed it out, so that a client sent to another replica (a Service in front of
// them) resumes its watch there: each part from where it stopped, nothing missed and
// nothing sent twice, and the cursors that replica hands out resume through the first
// again.
func TestFanOutWatchResumesThroughAnyReplica(t *testing.T) {
	local, peer, _ := fanOutPair(t)
	// Each replica asks the other for the clusters it owns.
	for _, cl := range []string{prod, staging, edge} {
		peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	all := clusterPath(allClusters) + "/api/v1/pods"
	names := func(w *watcher, n int) (map[string]string, string) {
		t.Helper()
		got := map[string]string{}
		var last string
		for len(got) < n {
			e := w.nextNot("BOOKMARK")
			got[e.Object.GetAnnotations()[ClusterAnnotation]+"/"+e.Object.GetName()] = e.Type
			last = e.Object.GetResourceVersion()
		}
		return got, last
	}

	// A list through one replica, a watch from it through the other.
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	c, err := parseCursor(l.GetResourceVersion())
	if err != nil || c.replica != "fleetwatch-0" || c.peers["fleetwatch-1"] == "" {
		t.Fatalf("the list's resourceVersion %q: %+v %v; want the cursor of fleetwatch-0 with fleetwatch-1's", l.GetResourceVersion(), c, err)
	}
	peer.apply("far", podsGVR, pod("default", "far-3", "403", web))
	local.apply(prod, podsGVR, pod("default", "web-9", "109", web))
	w := peer.watch(all + "?watch=true&resourceVersion=" + l.GetResourceVersion())
	got, last := names(w, 2)
	if !maps.Equal(got, map[string]string{"far/far-3": "ADDED", prod + "/web-9": "ADDED"}) {
		t.Errorf("through fleetwatch-1, from fleetwatch-0's list: %v, want the two changes since", got)
	}
	w.none(200 * time.Millisecond)
	w.stop()
	c, err = parseCursor(last)
	if err != nil || c.replica != "fleetwatch-1" || c.peers["fleetwatch-0"] == "" || c.peers["fleetwatch-1"] != "" {
		t.Fatalf("fleetwatch-1's cursor %q: %+v %v", last, c, err)
	}

	// And back: fleetwatch-1's cursor through fleetwatch-0.
	peer.apply("far", podsGVR, pod("default", "far-4", "404", web))
	local.apply(staging, podsGVR, pod("default", "api-2", "204", api))
	local.remove(prod, podsGVR, pod("default", "web-1", "101", web))
	w = local.watch(all + "?watch=true&resourceVersion=" + last)
	got, last = names(w, 3)
	if !maps.Equal(got, map[string]string{"far/far-4": "ADDED", staging + "/api-2": "ADDED", prod + "/web-1": "DELETED"}) {
		t.Errorf("through fleetwatch-0, from fleetwatch-1's cursor: %v", got)
	}
	w.none(200 * time.Millisecond)
	w.stop()
	if c, err := parseCursor(last); err != nil || c.replica != "fleetwatch-0" {
		t.Errorf("fleetwatch-0's cursor %q: %+v %v", last, c, err)
	}

	// A replica that restarted (another epoch in its part) cannot resume its part: 410,
	// wherever the cursor is sent.
	c, _ = parseCursor(last)
	c.epoch = "restarted"
	for _, f := range []*fixture{local, peer} {
		f.get(all+"?watch=true&timeoutSeconds=2&resourceVersion="+c.String()).status(t, http.StatusGone)
	}
}

// TestFanOutWatchAfterAMove: a cluster that moved from one replica to another since a
// cursor was handed out cannot be resumed in order (its old owner no longer answers for
// it, its new owner replays it beside), so the watch gets 410 Gone, through either
// replica, and the client lists again; a watch open during the move ends, so that its
// client comes to that; a cursor handed out after the move resumes.
func TestFanOutWatchAfterAMove(t *testing.T) {
	local, peer, _ := fanOutPair(t)
	for _, cl := range []string{prod, staging, edge} {
		peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	all := clusterPath(allClusters) + "/api/v1/pods"
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	before := l.GetResourceVersion()
	if c, err := parseCursor(before); err != nil || len(c.positions) == 0 {
		t.Fatalf("the list's cursor %q holds no position of local's clusters: %+v %v", before, c, err)
	}

	// A watch open during the move ends once the move is seen: its parts answer for the
	// clusters their replicas owned when they started.
	open := local.watch(all + "?watch=true&resourceVersion=" + before)
	// While edge moves, a watch from the cursor waits for the move to end rather than
	// answer 410 at once.
	local.src.setStatus(aggregate.ClusterStatus{Name: edge, Phase: aggregate.PhaseMoving})
	during := make(chan response, 1)
	go func() { during <- local.get(all + "?watch=true&timeoutSeconds=2&resourceVersion=" + before) }()
	select {
	case r := <-during:
		t.Fatalf("a watch from a cursor of a cluster moving now answered at once: %d %s", r.code, r.body)
	case <-time.After(300 * time.Millisecond):
	}
	// edge moves from local to peer: local gives it up (its objects leave local's fleet),
	// peer takes it with what it holds of it.
	local.src.setStatus(aggregate.ClusterStatus{Name: edge, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})
	local.remove(edge, podsGVR, pod("default", "web-3", "301", web))
	peer.src.setStatus(clusterStatus(edge, aggregate.PhaseSynced, false))
	local.sync()
	peer.sync()
	if !open.ended(3 * ownersCheckInterval) {
		t.Errorf("the watch open during the move did not end within %v", 3*ownersCheckInterval)
	}
	// The waiting watch is answered once the move ended: as any watch from before it
	// (a move without a change log: 410).
	if r := <-during; r.code != http.StatusGone || !strings.Contains(string(r.body), edge) {
		t.Errorf("the watch that waited for the move: %d %s", r.code, r.body)
	}
	for _, f := range []*fixture{local, peer} {
		// Bounded, so that a watch served by mistake fails the test rather than hangs it.
		r := f.get(all + "?watch=true&timeoutSeconds=2&resourceVersion=" + before)
		r.status(t, http.StatusGone)
		if !strings.Contains(string(r.body), edge) {
			t.Errorf("the 410 does not name the cluster that moved: %s", r.body)
		}
	}

	// A list after the move hands out a cursor that resumes.
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + l.GetResourceVersion())
	local.apply(prod, podsGVR, pod("default", "web-11", "111", web))
	peer.apply(edge, podsGVR, pod("default", "web-12", "312", web))
	got := map[string]string{}
	for len(got) < 2 {
		e := w.nextNot("BOOKMARK")
		got[e.Object.GetAnnotations()[ClusterAnnotation]+"/"+e.Object.GetName()] = e.Type
	}
	if !maps.Equal(got, map[string]string{prod + "/web-11": "ADDED", edge + "/web-12": "ADDED"}) {
		t.Errorf("after the move: %v", got)
	}
	w.stop()

	// A move that does not end within moveWait: 503 with Retry-After, and the client
	// watches again from the same cursor.
	defer func(d time.Duration) { moveWait = d }(moveWait)
	moveWait = 200 * time.Millisecond
	local.src.setStatus(aggregate.ClusterStatus{Name: prod, Phase: aggregate.PhaseMoving})
	r := local.get(all + "?watch=true&timeoutSeconds=2&resourceVersion=" + l.GetResourceVersion())
	r.status(t, http.StatusServiceUnavailable)
	if r.header.Get("Retry-After") != "1" || !strings.Contains(string(r.body), prod) {
		t.Errorf("a move that does not end: Retry-After %q, %s", r.header.Get("Retry-After"), r.body)
	}
}

// BenchmarkFanOutList measures the latency that the fan-out adds to a list: each
// iteration lists the pods of every cluster, 4 clusters of 500 pods, from a replica that
// holds them all (single), and from a replica that holds half and asks another replica
// for the rest (fanout), both over loopback HTTP, and reports the ratio of the two.
//
//	go test -run XXX -bench FanOutList -benchtime 50x ./server/
func BenchmarkFanOutList(b *testing.B) {
	const clusters, perCluster = 4, 500
	single, local, peer := newFixture(b, nil), newFixture(b, nil), newFixture(b, nil)
	for c := range clusters {
		name := fmt.Sprintf("member-%d", c)
		st := clusterStatus(name, aggregate.PhaseSynced, false)
		st.Replica = "fleetwatch-0"
		single.src.setStatus(st)
		holder := local
		if c >= clusters/2 {
			holder = peer
			st.Replica = "fleetwatch-1"
			local.src.setStatus(aggregate.ClusterStatus{Name: name, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})
		}
		holder.src.setStatus(st)
		for i := range perCluster {
			p := pod("default", fmt.Sprintf("pod-%04d", i), fmt.Sprint(1000+i), web)
			single.apply(name, podsGVR, p)
			holder.apply(name, podsGVR, p)
		}
		single.fleet.ClusterStore(name, podsGVR).MarkSynced()
		holder.fleet.ClusterStore(name, podsGVR).MarkSynced()
	}
	for _, f := range []*fixture{single, local, peer} {
		f.sync()
	}
	list := func(f *fixture) time.Duration {
		start := time.Now()
		r := f.get(clusterPath(allClusters) + "/api/v1/pods")
		d := time.Since(start)
		if r.code != http.StatusOK || !bytes.Contains(r.body, []byte(`"member-3"`)) {
			b.Fatalf("%d %.200s", r.code, r.body)
		}
		return d
	}
	list(single)
	list(local)
	var one, fan time.Duration
	b.ResetTimer()
	for b.Loop() {
		one += list(single)
		fan += list(local)
	}
	b.ReportMetric(float64(one.Microseconds())/float64(b.N), "single-µs/op")
	b.ReportMetric(float64(fan.Microseconds())/float64(b.N), "fanout-µs/op")
	b.ReportMetric(float64(fan)/float64(one), "fanout/single")
}

// TestFanOutFromAReplicaWithoutClusters: a replica that watches no cluster serves the
// whole fleet's API from the resources that the owners publish (their Leases' description,
// in the clusters' statuses): discovery, lists, Tables and watches under /clusters/*/.
// A token sees the resources of its clusters only; a replica is not asked for a resource
// that none of its clusters serves.
func TestFanOutFromAReplicaWithoutClusters(t *testing.T) {
	local, peer, seen := fanOutPair(t)
	tokens := writeFile(t, t.TempDir(), "tokens", "all-s3cret user=admin\nstaging-s3cret user=ci clusters=staging\n")
	lonely := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	for _, cl := range []string{prod, staging, edge} {
		lonely.fleet.RemoveCluster(cl)
		st := clusterStatus(cl, aggregate.PhaseRemote, cl == prod)
		st.Replica, st.ReplicaAddress = "fleetwatch-0", local.http.URL
		for i := range st.Resources {
			st.Resources[i].State = ""
		}
		lonely.src.setStatus(st)
	}
	far := clusterStatus("far", aggregate.PhaseRemote, false)
	far.Replica, far.ReplicaAddress = "fleetwatch-1", peer.http.URL
	far.Resources = far.Resources[1:2] // nodes only: far is not asked for pods
	lonely.src.setStatus(far)
	lonely.sync()
	admin := []string{"Authorization", "Bearer all-s3cret"}

	// Discovery: the resources of every cluster, in both forms.
	var rl metav1.APIResourceList
	lonely.getOK(clusterPath(allClusters)+"/api/v1", &rl, admin...)
	for _, name := range []string{"pods", "nodes"} {
		if !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == name }) {
			t.Errorf("/clusters/*/api/v1 lacks %s: %+v", name, rl.APIResources)
		}
	}
	var groups metav1.APIGroupList
	lonely.getOK(clusterPath(allClusters)+"/apis", &groups, admin...)
	if !slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == "apps" }) {
		t.Errorf("/clusters/*/apis lacks apps (prod's deployments): %+v", groups.Groups)
	}
	r := lonely.get(clusterPath(allClusters)+"/apis", append([]string{"Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}, admin...)...)
	if r.code != http.StatusOK || !bytes.Contains(r.body, []byte(`"deployments"`)) {
		t.Errorf("aggregated discovery: %d %s", r.code, r.body)
	}

	// A list of every cluster, whole, paged and as a Table, is local's: far has no pods
	// as its owner publishes it, and is not asked.
	before := len(seen())
	want := []string{edge + "/web-3", "prod/web-1", "prod/web-2", "prod/dns-1", "staging/api-1", "staging/web-1"}
	var l unstructured.UnstructuredList
	lonely.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, admin...)
	if got := itemClusters(&l); !slices.Equal(got, want) {
		t.Errorf("the pods of every cluster: %v, want %v", got, want)
	}
	var got []string
	cont := ""
	for range 10 {
		var page unstructured.UnstructuredList
		lonely.getOK(clusterPath(allClusters)+"/api/v1/pods?limit=4&continue="+cont, &page, admin...)
		got = append(got, itemClusters(&page)...)
		if cont = page.GetContinue(); cont == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("in pages of 4: %v, want %v", got, want)
	}
	var tbl metav1.Table
	lonely.getOK(clusterPath(allClusters)+"/api/v1/pods", &tbl, append([]string{"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"}, admin...)...)
	if len(tbl.Rows) != len(want) || len(tbl.ColumnDefinitions) < 3 {
		t.Errorf("the Table: %d rows, columns %+v", len(tbl.Rows), tbl.ColumnDefinitions)
	}
	if n := len(seen()); n != before {
		t.Errorf("far's owner was asked %d times for pods, which far does not serve", n-before)
	}
	// Its nodes are asked for.
	var nodes unstructured.UnstructuredList
	lonely.getOK(clusterPath(allClusters)+"/api/v1/nodes", &nodes, admin...)
	if len(seen()) == before {
		t.Error("far's owner was not asked for nodes")
	}
	var deployments unstructured.UnstructuredList
	lonely.getOK(clusterPath(allClusters)+"/apis/apps/v1/deployments", &deployments, admin...)
	if got := itemClusters(&deployments); !slices.Equal(got, []string{"prod/web"}) {
		t.Errorf("deployments: %v", got)
	}

	// A search is the owners': every cluster's objects, none twice.
	res := lonely.search("q=web", admin...)
	if got := strings.Join(searchRefs(res), " "); got != edge+"|Pod|default/web-3 prod|Deployment|default/web prod|Pod|default/web-1 prod|Pod|default/web-2 staging|Pod|default/web-1" {
		t.Errorf("a search of web: %q", got)
	}
	if res := lonely.search("q=far", admin...); res.Total != 2 || res.Counts.Clusters["far"] != 2 {
		t.Errorf("a search of far: %+v", res)
	}

	// A watch of every cluster streams a change of a cluster watched elsewhere.
	w := lonely.watch(clusterPath(allClusters)+"/api/v1/pods?watch=true&resourceVersion="+l.GetResourceVersion(), admin...)
	local.apply(staging, podsGVR, pod("default", "api-2", "205", api))
	if e := w.nextNot("BOOKMARK"); e.Type != "ADDED" || e.Object.GetName() != "api-2" {
		t.Errorf("the watch: %s %s", e.Type, e.Object.GetName())
	}

	// A token limited to staging sees staging's resources only: no apps group, and no
	// other cluster's objects.
	stagingOnly := []string{"Authorization", "Bearer staging-s3cret"}
	lonely.getOK(clusterPath(allClusters)+"/apis", &groups, stagingOnly...)
	if slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool { return g.Name == "apps" }) {
		t.Errorf("staging's token sees the apps group, which only prod serves: %+v", groups.Groups)
	}
	lonely.get(clusterPath(allClusters)+"/apis/apps/v1/deployments", stagingOnly...).status(t, http.StatusNotFound)
	r = lonely.get(clusterPath(allClusters)+"/api/v1/pods", stagingOnly...)
	if err := l.UnmarshalJSON(r.body); err != nil || r.code != http.StatusOK {
		t.Fatalf("staging's pods: %d %s", r.code, r.body)
	}
	if got := itemClusters(&l); !slices.Equal(got, []string{"staging/api-1", "staging/api-2", "staging/web-1"}) {
		t.Errorf("staging's token lists %v", got)
	}
	if res := lonely.search("", stagingOnly...); res.Total != 4 || !maps.Equal(res.Counts.Clusters, map[string]int{staging: 4}) {
		t.Errorf("staging's token searches %+v", res)
	}
}

// TestFanOutKeepsNumbers: an object of another replica's cluster is served through a
// fan-out list and watch with its numbers as the cluster has them, integers beyond 2^53
// included (a float64 would round them).
func TestFanOutKeepsNumbers(t *testing.T) {
	local, peer, _ := fanOutPair(t)
	all := clusterPath(allClusters) + "/api/v1/pods"
	var l unstructured.UnstructuredList
	local.getOK(all, &l)
	w := local.watch(all + "?watch=true&resourceVersion=" + l.GetResourceVersion())
	// And as Tables with their objects, whose events the fan-out decodes and encodes
	// again (the others it writes as they came, their resourceVersion replaced).
	tw := local.watch(all+"?watch=true&includeObject=Object&resourceVersion="+l.GetResourceVersion(), "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	p := pod("default", "far-big", "405", web)
	_ = unstructured.SetNestedField(p.Object, int64(9007199254740993), "spec", "activeDeadlineSeconds")
	_ = unstructured.SetNestedField(p.Object, 0.1, "spec", "fraction")
	peer.apply("far", podsGVR, p)
	for _, w := range []*watcher{w, tw} {
		e := w.nextNot("BOOKMARK")
		for _, want := range []string{`"activeDeadlineSeconds":9007199254740993`, `"fraction":0.1`} {
			if !bytes.Contains(e.Raw, []byte(want)) {
				t.Errorf("the fan-out watch's event lacks %s: %s", want, e.Raw)
			}
		}
	}
	r := local.get(all)
	for _, want := range []string{`"activeDeadlineSeconds":9007199254740993`, `"fraction":0.1`} {
		if !bytes.Contains(r.body, []byte(want)) {
			t.Errorf("the fan-out list lacks %s", want)
		}
	}
}
