package server

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// searchShards is the fixture's fleet and a fourth cluster, far, held whole by single
// and divided between two replicas: local owns prod and staging, peer owns edge and far.
// Each replica still holds the fixture's objects of the other's clusters, as a replica
// restarted from its snapshot does before it gives them up: neither may answer for
// them. far holds pods (far-1, web-4), a node, a deployment and a Secret. local and
// peer set the options of single and local, and of peer. seen returns the requests
// that peer received.
func searchShards(t *testing.T, localOpts, peerOpts func(*Options)) (single, local, peer *fixture, seen func() []*http.Request) {
	t.Helper()
	far := clusterStatus("far", aggregate.PhaseSynced, true)
	far.Resources = append(far.Resources, resourceStatus(secretsGVR, "Secret", true))
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"data": map[string]any{"password": base64.StdEncoding.EncodeToString([]byte("hunter2-value"))},
	}}
	secret.SetNamespace("default")
	secret.SetName("web-credentials")
	secret.SetResourceVersion("405")
	withFar := func(f *fixture) {
		f.src.setStatus(far)
		f.apply("far", podsGVR, pod("default", "far-1", "401", api))
		f.apply("far", podsGVR, pod("default", "web-4", "402", web))
		f.apply("far", nodesGVR, node("node-1", "403"))
		f.apply("far", deploymentsGVR, deployment("shop", "web", "404", 1, 1))
		f.apply("far", secretsGVR, secret)
		for _, gvr := range []schema.GroupVersionResource{podsGVR, nodesGVR, deploymentsGVR, secretsGVR} {
			f.fleet.ClusterStore("far", gvr).MarkSynced()
		}
		f.sync()
	}
	single = newFixture(t, localOpts)
	withFar(single)
	peer = newFixture(t, peerOpts)
	withFar(peer)
	local = newFixture(t, localOpts)
	for _, cl := range []string{edge, "far"} {
		local.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})
	}
	for _, cl := range []string{prod, staging} {
		peer.src.setStatus(aggregate.ClusterStatus{Name: cl, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-0", ReplicaAddress: local.http.URL})
	}
	var mu sync.Mutex
	var requests []*http.Request
	observe := func(r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Clone(r.Context()))
		mu.Unlock()
	}
	peer.observe.Store(&observe)
	return single, local, peer, func() []*http.Request {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(requests)
	}
}

// TestFanOutSearch: a search through a replica that owns half the fleet answers, item
// for item, total and counts, as one replica that holds the whole fleet does; pages
// across the replicas hold every item once, in order; the other replica is asked with
// the caller's token, the page's limit and a token of its own.
func TestFanOutSearch(t *testing.T) {
	single, local, _, seen := searchShards(t, nil, nil)
	for _, q := range []string{
		"q=web", "", "q=kind:Pod", "q=" + url.QueryEscape("l:app=web"), "q=" + url.QueryEscape("cluster:*a*"),
		"q=node", "q=" + url.QueryEscape("image:registry"), "q=web&cluster=far", "image=nope", "q=web&limit=2", "limit=3",
	} {
		want, got := single.search(q), local.search(q)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s through the replica that owns prod and staging:\n got %s\nwant %s", q, mustJSON(got), mustJSON(want))
		}
	}
	r := local.get(searchPath + "?q=web")
	if w := r.header.Get("Warning"); w != "" {
		t.Errorf("a search of the whole fleet warns %q", w)
	}
	if strings.Contains(string(r.body), "hunter2") || strings.Contains(string(r.body), base64.StdEncoding.EncodeToString([]byte("hunter2"))) {
		t.Errorf("a Secret's contents through the other replica: %s", r.body)
	}
	if !strings.Contains(string(r.body), `"web-credentials"`) {
		t.Errorf("far's Secret is not found by its name: %s", r.body)
	}

	all := single.search("limit=500")
	want := searchRefs(all)
	if len(want) != 14 {
		t.Fatalf("the whole fleet: %q", want)
	}
	for _, path := range []string{searchPath, clusterPath(allClusters) + searchPath} {
		for _, limit := range []string{"1", "2", "3", "5"} {
			var got []string
			query := "limit=" + limit
			for pages := 0; ; pages++ {
				if pages > len(want) {
					t.Fatalf("%s limit %s: no end of pages", path, limit)
				}
				var res SearchResult
				local.getOK(path+"?"+query, &res, "Authorization", "Bearer t0ken")
				if res.Total != all.Total || !reflect.DeepEqual(res.Counts, all.Counts) {
					t.Errorf("%s limit %s, page %d: total %d, counts %v; want %d, %v", path, limit, pages, res.Total, res.Counts, all.Total, all.Counts)
				}
				got = append(got, searchRefs(res)...)
				if res.Metadata.Continue == "" {
					break
				}
				query = "limit=" + limit + "&continue=" + url.QueryEscape(res.Metadata.Continue)
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s in pages of %s:\n got %q\nwant %q", path, limit, got, want)
			}
		}
	}
	// The peer was asked as the caller, for the page's limit, after the last key.
	var paged *http.Request
	for _, req := range seen() {
		if req.URL.Query().Get("continue") != "" {
			paged = req
			break
		}
	}
	switch {
	case paged == nil:
		t.Error("the peer was never asked for a next page")
	case paged.Header.Get("Authorization") != "Bearer t0ken" || paged.Header.Get(forwardedHeader) == "" ||
		paged.Header.Get("Accept") != contentTypeJSON || paged.URL.Query().Get("limit") == "":
		t.Errorf("the peer was asked %s with %v", paged.URL, paged.Header)
	default:
		if _, err := parseSearchContinue(paged.URL.Query().Get("continue"), queryDigest(mustParse(t, ""))); err != nil {
			t.Errorf("the peer's continue token: %v", err)
		}
	}
}

// TestFanOutSearchForwarded: a search that another replica forwarded is answered from
// the clusters this replica owns only, not from what it still holds of others, and is
// never sent on.
func TestFanOutSearchForwarded(t *testing.T) {
	single, local, peer, seen := searchShards(t, nil, nil)
	onlyOf := func(what string, res SearchResult, clusters ...string) {
		t.Helper()
		var want []string
		for _, ref := range searchRefs(single.search("")) {
			if slices.Contains(clusters, ref[:strings.Index(ref, "|")]) {
				want = append(want, ref)
			}
		}
		total := 0
		for _, cl := range clusters {
			total += res.Counts.Clusters[cl]
		}
		if got := searchRefs(res); !slices.Equal(got, want) || res.Total != len(want) || total != res.Total || len(res.Counts.Clusters) != len(clusters) {
			t.Errorf("%s: %q, total %d, counts %v; want %q", what, got, res.Total, res.Counts, want)
		}
	}
	for _, path := range []string{searchPath, clusterPath(allClusters) + searchPath} {
		var res SearchResult
		peer.getOK(path, &res, forwardedHeader, "1")
		onlyOf("the peer, forwarded, at "+path, res, edge, "far")
		before := len(seen())
		res = SearchResult{}
		local.getOK(path, &res, forwardedHeader, "1")
		onlyOf("local, forwarded, at "+path, res, prod, staging)
		if n := len(seen()) - before; n != 0 {
			t.Errorf("a forwarded search at %s was sent on %d times", path, n)
		}
	}
	// Under a cluster's prefix, the owner answers: the cluster's items only.
	var res SearchResult
	local.getOK(clusterPath("far")+searchPath+"?q=web", &res)
	if got := strings.Join(searchRefs(res), " "); got != "far|Deployment|shop/web far|Pod|default/web-4 far|Secret|default/web-credentials" {
		t.Errorf("far's prefix: %q", got)
	}
}

// TestFanOutSearchUnanswered: the clusters that no replica can be asked for, and those
// of a replica that does not answer, are named in a Warning; the others are served.
func TestFanOutSearchUnanswered(t *testing.T) {
	single, local, peer, _ := searchShards(t, nil, nil)
	local.src.setStatus(aggregate.ClusterStatus{Name: "moving", Phase: aggregate.PhaseMoving})
	local.src.setStatus(aggregate.ClusterStatus{Name: "unaddressed", Phase: aggregate.PhaseRemote, Replica: "fleetwatch-2"})
	r := local.get(searchPath + "?q=web")
	w := r.header.Get("Warning")
	if r.code != http.StatusOK || !strings.HasPrefix(w, "299 - ") || !strings.Contains(w, "moving (no live replica watches it now") ||
		!strings.Contains(w, `unaddressed (replica \"fleetwatch-2\" watches it, and publishes no address)`) || strings.Contains(w, "far") {
		t.Errorf("with a moving cluster and one without an address: %d, Warning %q", r.code, w)
	}

	// The peer answers for edge, which this replica sees moving (it has just taken it):
	// edge's items are dropped, and the pages still hold every other item once.
	local.src.setStatus(aggregate.ClusterStatus{Name: edge, Phase: aggregate.PhaseMoving})
	var want []string
	for _, ref := range searchRefs(single.search("")) {
		if !strings.HasPrefix(ref, edge+"|") {
			want = append(want, ref)
		}
	}
	for _, limit := range []string{"1", "2"} {
		var got []string
		query := "limit=" + limit
		for pages := 0; ; pages++ {
			if pages > 2*len(want) {
				t.Fatalf("limit %s: no end of pages", limit)
			}
			r := local.get(searchPath + "?" + query)
			var res SearchResult
			if r.code != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
				t.Fatalf("limit %s: %d %s", limit, r.code, r.body)
			}
			if w := r.header.Get("Warning"); !strings.Contains(w, edge+" (no live replica watches it now") {
				t.Errorf("limit %s: the Warning does not name edge: %q", limit, w)
			}
			if _, ok := res.Counts.Clusters[edge]; ok || res.Total != len(want) {
				t.Errorf("limit %s: total %d, counts %v", limit, res.Total, res.Counts)
			}
			got = append(got, searchRefs(res)...)
			if res.Metadata.Continue == "" {
				break
			}
			query = "limit=" + limit + "&continue=" + url.QueryEscape(res.Metadata.Continue)
		}
		if !slices.Equal(got, want) {
			t.Errorf("edge moving, in pages of %s:\n got %q\nwant %q", limit, got, want)
		}
	}
	local.src.setStatus(aggregate.ClusterStatus{Name: edge, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: peer.http.URL})

	peer.http.Close()
	r = local.get(searchPath + "?q=web")
	w = r.header.Get("Warning")
	for _, cl := range []string{edge, "far"} {
		if !strings.Contains(w, cl+` (replica \"fleetwatch-1\" did not answer`) {
			t.Errorf("with the peer down, the Warning does not name %s: %q", cl, w)
		}
	}
	var res SearchResult
	if r.code != http.StatusOK || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("with the peer down: %d %s", r.code, r.body)
	}
	if got := strings.Join(searchRefs(res), " "); got != "prod|Deployment|default/web prod|Pod|default/web-1 prod|Pod|default/web-2 staging|Pod|default/web-1" ||
		res.Total != 4 || !maps.Equal(res.Counts.Clusters, map[string]int{prod: 3, staging: 1}) {
		t.Errorf("with the peer down: %q, total %d, counts %v", got, res.Total, res.Counts)
	}
}

// TestFanOutSearchAuthorization: the owner authorizes the caller again: a token limited
// to some clusters gets no item, count or total of others through any replica, and a
// token that the owner refuses fails the search with the owner's Status.
func TestFanOutSearchAuthorization(t *testing.T) {
	dir := t.TempDir()
	shared := "all-s3cret user=admin\nci-s3cret user=ci clusters=staging,far\n"
	localTokens := writeFile(t, dir, "local-tokens", shared+"local-s3cret user=local\n")
	peerTokens := writeFile(t, dir, "peer-tokens", shared)
	single, local, _, _ := searchShards(t, func(o *Options) { o.TokenFile = localTokens }, func(o *Options) { o.TokenFile = peerTokens })
	for _, q := range []string{"q=web", "", "q=" + url.QueryEscape("cluster:prod"), "q=" + url.QueryEscape("cluster:*"), "limit=2"} {
		want, got := single.search(q, bearer("ci-s3cret")...), local.search(q, bearer("ci-s3cret")...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s for ci:\n got %s\nwant %s", q, mustJSON(got), mustJSON(want))
		}
		for _, it := range got.Items {
			if it.Cluster != staging && it.Cluster != "far" {
				t.Errorf("%s for ci: an item of %s", q, it.Cluster)
			}
		}
		for cl := range got.Counts.Clusters {
			if cl != staging && cl != "far" {
				t.Errorf("%s for ci: counts of %s: %v", q, cl, got.Counts)
			}
		}
	}
	if res := local.search("", bearer("ci-s3cret")...); res.Counts.Clusters["far"] != 5 || res.Total != 5+3 {
		t.Errorf("ci reads far through the peer: total %d, counts %v", res.Total, res.Counts)
	}
	local.get(searchPath+"?q=web", bearer("local-s3cret")...).status(t, http.StatusUnauthorized)
	local.get(searchPath+"?q=web").status(t, http.StatusUnauthorized)
}
