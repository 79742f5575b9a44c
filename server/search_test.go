package server

import (
	"encoding/base64"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/search"
)

const searchPath = "/apis/fleetwatch.io/v1alpha1/search"

func (f *fixture) search(query string, header ...string) SearchResult {
	f.t.Helper()
	var res SearchResult
	f.getOK(searchPath+"?"+query, &res, header...)
	return res
}

func searchRefs(res SearchResult) []string {
	out := make([]string, len(res.Items))
	for i, it := range res.Items {
		out[i] = it.Cluster + "|" + it.Kind + "|" + it.Namespace + "/" + it.Name
	}
	return out
}

func TestSearchAPI(t *testing.T) {
	f := newFixture(t, nil)
	r := f.get(searchPath + "?q=web")
	if r.code != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %q %s", r.code, r.header.Get("Content-Type"), r.body)
	}
	res := f.search("q=web")
	if res.Kind != "SearchResult" || res.APIVersion != "fleetwatch.io/v1alpha1" {
		t.Errorf("kind %q, apiVersion %q", res.Kind, res.APIVersion)
	}
	want := []string{
		edge + "|Pod|default/web-3",
		"prod|Deployment|default/web", "prod|Pod|default/web-1", "prod|Pod|default/web-2",
		"staging|Pod|default/web-1",
	}
	if got := searchRefs(res); !slices.Equal(got, want) {
		t.Errorf("items\n got %q\nwant %q", got, want)
	}
	if res.Total != 5 || !maps.Equal(res.Counts.Clusters, map[string]int{edge: 1, prod: 3, staging: 1}) ||
		!maps.Equal(res.Counts.Kinds, map[string]int{"Pod": 4, "Deployment.apps": 1}) {
		t.Errorf("total %d, counts %+v", res.Total, res.Counts)
	}
	d := res.Items[1]
	if d.Group != "apps" || d.Version != "v1" || d.Resource != "deployments" || d.ResourceVersion != "105" ||
		d.UID != "uid-default-web" || !slices.Equal(d.Images, []string{"registry.example.com/web:1"}) ||
		d.CreationTimestamp == nil || !d.CreationTimestamp.Time.Equal(now.Add(-2*time.Hour)) {
		t.Errorf("deployment item: %+v", d)
	}
	if p := res.Items[2]; !maps.Equal(p.Labels, web) {
		t.Errorf("pod item labels: %+v", p)
	}

	for _, tc := range []struct{ query, want string }{
		{"q=" + url.QueryEscape("kind:deploy"), "prod|Deployment|default/web"},
		{"q=" + url.QueryEscape("web* cluster:stag*"), "staging|Pod|default/web-1"},
		{"q=" + url.QueryEscape("ns:kube-system"), "prod|Pod|kube-system/dns-1"},
		{"q=" + url.QueryEscape("l:app=api"), "staging|Pod|default/api-1"},
		{"q=" + url.QueryEscape("image:registry.example.com"), "prod|Deployment|default/web"},
		{"q=" + url.QueryEscape("node") + "&kind=nodes&cluster=prod", "prod|Node|/node-1"},
		{"name=web-&namespace=default&labelSelector=" + url.QueryEscape("app in (web)") + "&cluster=" + url.QueryEscape("arn:*"), edge + "|Pod|default/web-3"},
		{"image=nope", ""},
	} {
		res := f.search(tc.query)
		if got := strings.Join(searchRefs(res), " "); got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.query, got, tc.want)
		}
	}

	t.Run("changes", func(t *testing.T) {
		changed := pod("default", "web-2", "106", map[string]string{"app": "web", "moved": "yes"})
		f.apply(prod, podsGVR, changed)
		f.remove(staging, podsGVR, pod("default", "web-1", "201", web))
		f.sync()
		if got := strings.Join(searchRefs(f.search("q=l:moved")), " "); got != "prod|Pod|default/web-2" {
			t.Errorf("changed labels: %q", got)
		}
		if got := f.search("q=web-1").Counts.Clusters; !maps.Equal(got, map[string]int{prod: 1}) {
			t.Errorf("after a delete: %v", got)
		}
	})
}

func TestSearchPaging(t *testing.T) {
	f := newFixture(t, nil)
	all := searchRefs(f.search("limit=500"))
	if len(all) != 9 { // 6 pods, 2 nodes, 1 deployment; not the barriers, which no list serves
		t.Fatalf("every object: %q", all)
	}
	var got []string
	query := "limit=2"
	for pages := 0; ; pages++ {
		if pages > len(all) {
			t.Fatal("no end of pages")
		}
		res := f.search(query)
		if res.Total != len(all) {
			t.Errorf("page %d: total %d, want %d", pages, res.Total, len(all))
		}
		got = append(got, searchRefs(res)...)
		if res.Metadata.Continue == "" {
			break
		}
		query = "limit=2&continue=" + url.QueryEscape(res.Metadata.Continue)
	}
	if !slices.Equal(got, all) {
		t.Errorf("pages\n got %q\nwant %q", got, all)
	}

	first := f.search("q=web&limit=1")
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"q":"0000000000000000","k":{}}`))
	for _, tc := range []struct{ name, query, param string }{
		{"another query", "q=api&continue=" + url.QueryEscape(first.Metadata.Continue), "continue"},
		{"parameters change the query", "q=web&cluster=prod&continue=" + url.QueryEscape(first.Metadata.Continue), "continue"},
		{"not base64", "q=web&continue=%25%25%25", "continue"},
		{"not JSON", "q=web&continue=" + base64.RawURLEncoding.EncodeToString([]byte("{")), "continue"},
		{"unknown field", "q=web&continue=" + base64.RawURLEncoding.EncodeToString([]byte(`{"q":"x","k":{},"z":1}`)), "continue"},
		{"forged digest", "q=web&continue=" + forged, "continue"},
		{"huge", "q=web&continue=" + strings.Repeat("A", 5000), "continue"},
		{"bad limit", "limit=-1", "limit"},
		{"limit not a number", "limit=1e3", "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := f.get(searchPath+"?"+tc.query).status(t, http.StatusBadRequest)
			if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.param {
				t.Errorf("Status does not name %s: %+v", tc.param, st)
			}
		})
	}
	if n := len(f.search("limit=100000").Items); n != len(all) {
		t.Errorf("limit over the maximum: %d items", n)
	}
}

// TestSearchBadQueries: every bad query is refused with a 400 Status that names the
// parameter and the term; the largest queries allowed are answered at once.
func TestSearchBadQueries(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct{ name, query, param, term string }{
		{"unknown prefix", "q=" + url.QueryEscape("web owner:me"), "q", "owner:me"},
		{"bad selector", "q=" + url.QueryEscape("l:a=b=c"), "q", "l:a=b=c"},
		{"bad glob", "q=" + url.QueryEscape("cluster:[z-a]"), "q", "cluster:[z-a]"},
		{"star inside", "q=" + url.QueryEscape("w*b"), "q", "w*b"},
		{"empty value", "q=" + url.QueryEscape("kind:"), "q", "kind:"},
		{"too many terms", "q=" + url.QueryEscape(strings.Repeat("a ", search.MaxTerms+1)), "q", "a"},
		{"too many with parameters", "q=" + url.QueryEscape(strings.TrimSpace(strings.Repeat("a ", search.MaxTerms))) + "&kind=Pod", "kind", "kind=Pod"},
		{"too long", "q=" + strings.Repeat("x", search.MaxQueryLen+1), "q", ""},
		{"bad parameter value", "labelSelector=" + url.QueryEscape("a in ("), "labelSelector", "labelSelector=a in ("},
		{"empty parameter", "name=", "name", "name="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := f.get(searchPath+"?"+tc.query).status(t, http.StatusBadRequest)
			if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.param {
				t.Fatalf("Status does not name %s: %+v", tc.param, st)
			}
			if !strings.HasPrefix(st.Message, tc.param+": ") || tc.term != "" && !strings.Contains(st.Details.Causes[0].Message, `"`+tc.term+`"`) {
				t.Errorf("Status does not name the term %q: %+v", tc.term, st)
			}
		})
	}
	// The most expensive queries allowed: as many terms as allowed, each a substring
	// that most names hold or that no trigram index can narrow, and one of the maximum
	// length.
	for _, q := range []string{
		strings.TrimSpace(strings.Repeat("e ", search.MaxTerms)),
		strings.TrimSpace(strings.Repeat("we ", search.MaxTerms)),
		strings.TrimSpace(strings.Repeat("l:app ", search.MaxTerms)),
		strings.Repeat("web-", search.MaxQueryLen/4),
		strings.Repeat("%", 100) + " " + strings.Repeat("\u00e9", 100),
	} {
		start := time.Now()
		res := f.search("q=" + url.QueryEscape(q))
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%.40q: %v", q, d)
		}
		_ = res
	}
	if r := f.do(http.MethodPost, searchPath+"?q=web"); r.code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", r.code)
	}
	for _, path := range []string{searchPath + "/x", "/apis/fleetwatch.io/v1alpha1/namespaces/default/search"} {
		if r := f.get(path); r.code != http.StatusNotFound {
			t.Errorf("%s: %d", path, r.code)
		}
	}
}

// TestSearchClusterLimited: a token limited to some clusters gets items, counts, totals
// and pages of those clusters only, whatever its query and continue token say.
func TestSearchClusterLimited(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "admin-token user=admin\nci-token user=ci clusters=stag*\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	ci := []string{"Authorization", "Bearer ci-token"}
	admin := []string{"Authorization", "Bearer admin-token"}

	if r := f.get(searchPath + "?q=web"); r.code != http.StatusUnauthorized {
		t.Errorf("without a token: %d", r.code)
	}
	if r := f.get(searchPath+"?q=web", "Authorization", "Bearer wrong"); r.code != http.StatusUnauthorized {
		t.Errorf("with a wrong token: %d", r.code)
	}
	if res := f.search("q=web", admin...); res.Total != 5 {
		t.Errorf("admin: total %d", res.Total)
	}
	onlyStaging := func(what string, res SearchResult) {
		t.Helper()
		for _, it := range res.Items {
			if it.Cluster != staging {
				t.Errorf("%s: item of %s: %+v", what, it.Cluster, it)
			}
		}
		for cl := range res.Counts.Clusters {
			if cl != staging {
				t.Errorf("%s: count of %s: %v", what, cl, res.Counts)
			}
		}
		n := 0
		for _, c := range res.Counts.Kinds {
			n += c
		}
		if n != res.Total || res.Total != res.Counts.Clusters[staging] {
			t.Errorf("%s: total %d, counts %v", what, res.Total, res.Counts)
		}
	}
	for _, q := range []string{"q=web", "q=", "q=" + url.QueryEscape("cluster:*"), "q=" + url.QueryEscape("cluster:prod"), "cluster=prod", "q=kind:deployments", "limit=1"} {
		res := f.search(q, ci...)
		onlyStaging(q, res)
		if strings.Contains(q, "prod") || strings.Contains(q, "deployments") {
			if res.Total != 0 {
				t.Errorf("%s: total %d", q, res.Total)
			}
		}
	}
	// Pages: a continue token whose key lies in another cluster, forged or handed to
	// another client, only moves where the page starts.
	res := f.search("q=web&limit=1", admin...)
	if res.Items[0].Cluster != edge || res.Metadata.Continue == "" {
		t.Fatalf("admin's first page: %+v", res)
	}
	onlyStaging("admin's continue", f.search("q=web&limit=1&continue="+url.QueryEscape(res.Metadata.Continue), ci...))
	for _, k := range []search.Key{{Cluster: "prod"}, {Cluster: ""}, {Cluster: "zzz"}} {
		tok := searchContinue{Query: queryDigest(mustParse(t, "")), After: k}.String()
		onlyStaging("forged "+k.Cluster, f.search("continue="+url.QueryEscape(tok), ci...))
	}
	// Under a cluster prefix, the prefix's cluster only, and a cluster of another is
	// forbidden, as any path of it.
	onlyStaging("staging prefix", f.search("", ci...))
	var sr, pr SearchResult // apart: decoding into a used map adds to it
	f.getOK(clusterPath(staging)+searchPath+"?q=web", &sr, ci...)
	onlyStaging("staging prefix", sr)
	f.getOK(clusterPath(prod)+searchPath+"?q=web", &pr, admin...)
	if pr.Total != 3 || len(pr.Counts.Clusters) != 1 {
		t.Errorf("prod prefix for admin: %+v", pr)
	}
	for _, cl := range []string{prod, "no-such-cluster"} {
		st := f.get(clusterPath(cl)+searchPath+"?q=web", ci...).status(t, http.StatusForbidden)
		if !strings.Contains(st.Message, "ci may not") {
			t.Errorf("%s: %+v", cl, st)
		}
	}
}

func mustParse(t *testing.T, q string) *search.Query {
	t.Helper()
	pq, err := search.Parse(q)
	if err != nil {
		t.Fatal(err)
	}
	return pq
}

// TestSearchSecrets: a Secret is found by its metadata, and nothing of its contents is
// in the answer, even when the cache holds them (cache.keepSecretData).
func TestSearchSecrets(t *testing.T) {
	f := newFixture(t, nil)
	secretsGVR := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	st := clusterStatus(prod, "Synced", true)
	st.Resources = append(st.Resources, resourceStatus(secretsGVR, "Secret", true))
	f.src.setStatus(st)
	s := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"data":       map[string]any{"password": base64.StdEncoding.EncodeToString([]byte("hunter2-value"))},
		"stringData": map[string]any{"token": "plain-token-value"},
	}}
	s.SetNamespace("default")
	s.SetName("db-credentials")
	s.SetResourceVersion("107")
	s.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"aHVudGVyMi12YWx1ZQ=="}}`})
	s.SetLabels(map[string]string{"app": "db"})
	f.apply(prod, secretsGVR, s)
	f.sync()
	r := f.get(searchPath + "?q=" + url.QueryEscape("cred kind:Secret"))
	if r.code != http.StatusOK || !strings.Contains(string(r.body), `"db-credentials"`) {
		t.Fatalf("%d %s", r.code, r.body)
	}
	for _, v := range []string{"hunter2", "aHVudGVyMi", "plain-token", "password", "last-applied"} {
		if strings.Contains(string(r.body), v) {
			t.Errorf("the answer holds %q: %s", v, r.body)
		}
	}
}

// TestSearchDelegated: with RBAC in the home cluster, a search reads the clusters the
// user is granted, decided before the index is read; a review that fails fails the
// search rather than answer with fewer clusters.
func TestSearchDelegated(t *testing.T) {
	f, home := newDelegatedFixture(t, nil)
	home.set(func(h *fakeHome) {
		h.users["ops-token"] = "ops"
		h.grants["ops"] = []string{staging, edge}
		h.users["flaky-token"] = "flaky"
		h.grants["flaky"] = []string{prod}
		h.fail["flaky"] = true
	})
	res := f.search("q=web", bearer("ops-token")...)
	if got := strings.Join(searchRefs(res), " "); got != edge+"|Pod|default/web-3 staging|Pod|default/web-1" ||
		res.Total != 2 || !maps.Equal(res.Counts.Clusters, map[string]int{edge: 1, staging: 1}) {
		t.Errorf("ops: %q, total %d, counts %v", got, res.Total, res.Counts)
	}
	f.get(clusterPath(prod)+searchPath+"?q=web", bearer("ops-token")...).status(t, http.StatusForbidden)
	st := f.get(searchPath+"?q=web", bearer("flaky-token")...).status(t, http.StatusInternalServerError)
	if !strings.Contains(st.Message, "could not review") {
		t.Errorf("failed review: %+v", st)
	}
}

// TestSearchClusterLeaves: the objects of a cluster that leaves the fleet are found no
// more, in items, counts or totals.
func TestSearchClusterLeaves(t *testing.T) {
	f := newFixture(t, nil)
	if res := f.search("q=web"); res.Counts.Clusters[staging] != 1 {
		t.Fatalf("before: %v", res.Counts)
	}
	f.fleet.RemoveCluster(staging)
	f.sync()
	res := f.search("q=")
	if _, ok := res.Counts.Clusters[staging]; ok || res.Total != 6 {
		t.Errorf("after staging left: total %d, counts %v, items %q", res.Total, res.Counts, searchRefs(res))
	}
}
