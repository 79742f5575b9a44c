package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/history"
	"github.com/fleetwatch/fleetwatch/persist"
)

const changesPath = "/apis/fleetwatch.io/v1alpha1/changes"

// historyPath is the path of the history of an object of cluster.
func historyPath(cluster string) string {
	return clusterPath(cluster) + "/apis/fleetwatch.io/v1alpha1/history"
}

// secretValue is the value of the Secret of withHistory's log: no answer may hold it.
const secretValue = "c3VwZXItc2VjcmV0LXZhbHVl"

// withHistory gives the fixture's fleet a change log, written one change a second from
// two hours before now:
//
//	prod deployments default/web Added (2 replicas), pods default/web-1 Added,
//	staging pods default/api-1 Added, prod deployments default/web Modified (3 replicas),
//	prod secrets default/creds Added, staging pods default/api-1 Deleted, edge pods
//	default/web-3 Added, prod secrets default/creds Modified, prod deployments
//	default/web Modified (image web:2)
//
// and returns the names of the changes in that order.
func (f *fixture) withHistory() []string {
	f.t.Helper()
	clock := clocktesting.NewFakeClock(now.Add(-2 * time.Hour))
	store, err := persist.Open(filepath.Join(f.t.TempDir(), "snap.db"), persist.Options{})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { store.Close() })
	w := store.NewWriter(persist.WriterOptions{Interval: time.Hour, Clock: clock, History: persist.HistoryOptions{Enabled: true}})
	rv := 1000
	secret := func(value string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
			"data":       map[string]any{"password": value},
			"stringData": map[string]any{"password": value},
		}}
		u.SetNamespace("default")
		u.SetName("creds")
		u.SetLabels(web)
		u.SetAnnotations(map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"` + value + `"}}`})
		return u
	}
	web2 := deployment("default", "web", "110", 3, 3)
	_ = unstructured.SetNestedSlice(web2.Object, []any{map[string]any{"name": "web", "image": "registry.example.com/web:2"}}, "spec", "template", "spec", "containers")
	steps := []struct {
		name    string
		cluster string
		gvr     schema.GroupVersionResource
		obj     *unstructured.Unstructured
		del     bool
	}{
		{"Added prod Deployment default/web", prod, deploymentsGVR, deployment("default", "web", "105", 2, 2), false},
		{"Added prod Pod default/web-1", prod, podsGVR, pod("default", "web-1", "101", web), false},
		{"Added staging Pod default/api-1", staging, podsGVR, pod("default", "api-1", "202", api), false},
		{"Modified prod Deployment default/web", prod, deploymentsGVR, deployment("default", "web", "106", 3, 2), false},
		{"Added prod secrets default/creds", prod, secretsGVR, secret(secretValue), false},
		{"Deleted staging Pod default/api-1", staging, podsGVR, pod("default", "api-1", "202", api), true},
		{"Added " + edge + " Pod default/web-3", edge, podsGVR, pod("default", "web-3", "301", web), false},
		{"Modified prod secrets default/creds", prod, secretsGVR, secret(secretValue + "2"), false},
		{"Modified prod Deployment default/web", prod, deploymentsGVR, web2, false},
	}
	var names []string
	for _, st := range steps {
		key := persist.ResourceKeyFor(st.gvr)
		if st.del {
			w.Delete(st.cluster, key, st.obj.GetNamespace(), st.obj.GetName())
		} else {
			w.Upsert(st.cluster, key, st.obj)
		}
		rv++
		w.Checkpoint(st.cluster, key, fmt.Sprint(rv))
		if err := w.Flush(f.ctx); err != nil {
			f.t.Fatal(err)
		}
		clock.Step(time.Second)
		names = append(names, st.name)
	}
	f.src.mu.Lock()
	f.src.log = history.New(store, history.Options{})
	f.src.mu.Unlock()
	return names
}

func changeRefs(items []v1alpha1.Change) []string {
	out := make([]string, len(items))
	for i, c := range items {
		what := c.Kind
		if what == "" {
			what = c.Resource
		}
		out[i] = c.Type + " " + c.Cluster + " " + what + " " + c.Namespace + "/" + c.Name
	}
	return out
}

// changes gets every page of the changes at path (which has a query), following the
// continue tokens.
func (f *fixture) changes(path string, header ...string) []v1alpha1.Change {
	f.t.Helper()
	var all []v1alpha1.Change
	next := ""
	for range 100 {
		var page v1alpha1.ChangeList
		p := path
		if next != "" {
			p += "&continue=" + url.QueryEscape(next)
		}
		f.getOK(p, &page, header...)
		if page.Kind != "ChangeList" || page.APIVersion != "fleetwatch.io/v1alpha1" || page.Items == nil {
			f.t.Fatalf("GET %s: kind %q, apiVersion %q, items %v", p, page.Kind, page.APIVersion, page.Items)
		}
		all = append(all, page.Items...)
		if next = page.Metadata.Continue; next == "" {
			return all
		}
	}
	f.t.Fatalf("GET %s: more than 100 pages", path)
	return nil
}

func TestChangesAPI(t *testing.T) {
	f := newFixture(t, nil)
	all := f.withHistory()
	pick := func(idx ...int) []string {
		var out []string
		for _, i := range idx {
			out = append(out, all[i])
		}
		return out
	}
	for _, tc := range []struct {
		path string
		want []string
	}{
		{changesPath + "?", all},
		{changesPath + "?limit=2", all},
		{changesPath + "?limit=1&q=" + url.QueryEscape("cluster:prod kind:Deployment ns:default"), pick(0, 3, 8)},
		{changesPath + "?q=" + url.QueryEscape("kind:deploy"), pick(0, 3, 8)},
		{changesPath + "?q=web-&cluster=" + url.QueryEscape("arn:*"), pick(6)},
		{changesPath + "?q=" + url.QueryEscape("l:app=web kind:pods"), pick(1, 6)},
		{changesPath + "?labelSelector=" + url.QueryEscape("app in (api)"), pick(2)},
		{changesPath + "?image=web:2", pick(8)},
		{changesPath + "?type=Deleted,Added&type=Modified&q=api", pick(2, 5)},
		{changesPath + "?type=Deleted", pick(5)},
		{changesPath + "?since=" + url.QueryEscape(now.Add(-2*time.Hour+7*time.Second).Format(time.RFC3339)), pick(7, 8)},
		{changesPath + "?since=7193s", pick(7, 8)},
		{changesPath + "?since=1h", nil},
		{clusterPath(staging) + "/apis/fleetwatch.io/v1alpha1/changes?limit=1", pick(2, 5)},
		{clusterPath(edge) + "/apis/fleetwatch.io/v1alpha1/changes?", pick(6)},
		{clusterPath(allClusters) + "/apis/fleetwatch.io/v1alpha1/changes?q=" + url.QueryEscape("cluster:staging"), pick(2, 5)},
	} {
		if got := changeRefs(f.changes(tc.path)); !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got %q\nwant %q", tc.path, got, tc.want)
		}
	}

	// Each change says where it is; after=seq resumes after it.
	items := f.changes(changesPath + "?")
	c := items[3]
	if c.Group != "apps" || c.Version != "v1" || c.Resource != "deployments" || c.Kind != "Deployment" || c.ResourceVersion != "1004" ||
		c.ObjectResourceVersion != "106" || !c.Time.Time.Equal(now.Add(-2*time.Hour+3*time.Second)) || c.Seq == 0 {
		t.Errorf("a change: %+v", c)
	}
	if got := changeRefs(f.changes(changesPath + "?after=" + fmt.Sprint(items[6].Seq))); !slices.Equal(got, pick(7, 8)) {
		t.Errorf("after the 7th change: %q", got)
	}
	// A page ends with a token only when more may follow.
	var page v1alpha1.ChangeList
	f.getOK(changesPath+"?limit=9", &page)
	if len(page.Items) != 9 || page.Metadata.Continue != "" {
		t.Errorf("the only page: %d items, continue %q", len(page.Items), page.Metadata.Continue)
	}
	page = v1alpha1.ChangeList{}
	f.getOK(changesPath+"?limit=8", &page)
	if len(page.Items) != 8 || page.Metadata.Continue == "" {
		t.Errorf("a page of 8 of 9: continue %q", page.Metadata.Continue)
	}
	page = v1alpha1.ChangeList{}
	f.getOK(changesPath+"?limit=9", &page)
	if len(page.Items) != 9 || page.Metadata.Continue != "" {
		t.Errorf("the only page: %d items, continue %q", len(page.Items), page.Metadata.Continue)
	}
	// A page's token starts the next one where it ended, whatever since says by then.
	f.getOK(changesPath+"?limit=4&since=2h", &page)
	if len(page.Items) != 4 || page.Metadata.Continue == "" {
		t.Fatalf("a first page: %d items, continue %q", len(page.Items), page.Metadata.Continue)
	}
	rest := changeRefs(page.Items)
	for next := page.Metadata.Continue; next != ""; next = page.Metadata.Continue {
		page = v1alpha1.ChangeList{}
		f.getOK(changesPath+"?limit=4&since=2h&continue="+url.QueryEscape(next), &page)
		rest = append(rest, changeRefs(page.Items)...)
	}
	if got := rest; !slices.Equal(got, all) {
		t.Errorf("the pages: %q", got)
	}
}

func TestChangesAPIBadParameters(t *testing.T) {
	f := newFixture(t, nil)
	f.withHistory()
	var first v1alpha1.ChangeList
	f.getOK(changesPath+"?limit=1&q=web", &first)
	token := first.Metadata.Continue
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"q":"0123456789abcdef","a":1}`))
	for _, tc := range []struct{ query, field string }{
		{"q=" + url.QueryEscape("foo:bar"), "q"},
		{"q=" + url.QueryEscape("l:a=b=c"), "q"},
		{"kind=", "kind"},
		{"limit=-1", "limit"},
		{"limit=many", "limit"},
		{"since=yesterday", "since"},
		{"since=-1h", "since"},
		{"since=0s", "since"},
		{"after=-3", "after"},
		{"after=x", "after"},
		{"type=Created", "type"},
		{"type=Added,", "type"},
		{"continue=%25%25", "continue"},
		{"continue=e30", "continue"},
		{"continue=" + forged, "continue"},
		{"continue=" + strings.Repeat("a", 300), "continue"},
		{"q=api&limit=1&continue=" + url.QueryEscape(token), "continue"},
		{"q=web&limit=1&type=Added&continue=" + url.QueryEscape(token), "continue"},
		{"q=web&limit=1&since=1h&continue=" + url.QueryEscape(token), "continue"},
	} {
		st := f.get(changesPath+"?"+tc.query).status(t, http.StatusBadRequest)
		if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.field || !strings.HasPrefix(st.Message, tc.field+": ") {
			t.Errorf("%s: want a 400 naming %s, got %+v", tc.query, tc.field, st)
		}
	}
	// A token of one cluster's changes is not one of another's.
	f.getOK(clusterPath(prod)+"/apis/fleetwatch.io/v1alpha1/changes?limit=1", &first)
	st := f.get(clusterPath(staging)+"/apis/fleetwatch.io/v1alpha1/changes?limit=1&continue="+url.QueryEscape(first.Metadata.Continue)).status(t, http.StatusBadRequest)
	if st.Details.Causes[0].Field != "continue" {
		t.Errorf("another cluster's token: %+v", st)
	}

	for _, tc := range []struct{ path, field string }{
		{historyPath(prod) + "?resource=deployments&name=web&namespace=default&group=apps", "version"},
		{historyPath(prod) + "?version=v1&name=web&namespace=default&group=apps", "resource"},
		{historyPath(prod) + "?version=v1&resource=deployments&namespace=default&group=apps", "name"},
		{historyPath(prod) + "?version=v1&resource=deployments&namespace=default&group=apps&name=a%2Fb", "name"},
		{historyPath(prod) + "?version=v1&resource=deployments&namespace=de%00fault&group=apps&name=web", "namespace"},
		{historyPath(prod) + "?version=v1&resource=deployments&namespace=default&group=apps&name=" + strings.Repeat("n", 254), "name"},
		{historyPath(prod) + "?version=v1&resource=deployments&namespace=default&group=apps&name=web&limit=-2", "limit"},
		{historyPath(prod) + "?version=v1&resource=deployments&namespace=default&group=apps&name=web&continue=" + url.QueryEscape(token), "continue"},
		{historyPath(allClusters) + "?version=v1&resource=deployments&namespace=default&group=apps&name=web", "cluster"},
	} {
		st := f.get(tc.path).status(t, http.StatusBadRequest)
		if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != tc.field {
			t.Errorf("%s: want a 400 naming %s, got %+v", tc.path, tc.field, st)
		}
	}
	for _, path := range []string{
		"/apis/fleetwatch.io/v1alpha1/history?version=v1&resource=pods&name=web-1",
		changesPath + "/x", "/apis/fleetwatch.io/v1alpha1/namespaces/default/changes",
		historyPath("nope") + "?version=v1&resource=pods&name=web-1",
	} {
		if r := f.get(path); r.code != http.StatusNotFound {
			t.Errorf("%s: %d, want 404", path, r.code)
		}
	}
	for _, method := range []string{http.MethodPost, http.MethodDelete, http.MethodPut} {
		if r := f.do(method, changesPath); r.code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405", method, changesPath, r.code)
		}
	}
}

func TestHistoryAPIOff(t *testing.T) {
	f := newFixture(t, nil)
	for _, path := range []string{
		changesPath, clusterPath(prod) + "/apis/fleetwatch.io/v1alpha1/changes",
		historyPath(prod) + "?version=v1&resource=pods&namespace=default&name=web-1",
	} {
		st := f.get(path).status(t, http.StatusNotFound)
		if !strings.Contains(st.Message, "history API is off") || !strings.Contains(st.Message, "history.enabled") {
			t.Errorf("%s: %q does not say that the history is off and how to turn it on", path, st.Message)
		}
	}
}

func TestObjectHistoryAPI(t *testing.T) {
	f := newFixture(t, nil)
	f.withHistory()
	path := historyPath(prod) + "?group=apps&version=v1&resource=deployments&namespace=default&name=web"
	var h v1alpha1.ObjectHistory
	f.getOK(path, &h)
	if o := h.Object; h.Kind != "ObjectHistory" || h.APIVersion != "fleetwatch.io/v1alpha1" || o.Cluster != prod || o.Group != "apps" || o.Version != "v1" ||
		o.Resource != "deployments" || o.Kind != "Deployment" || o.Namespace != "default" || o.Name != "web" || h.Metadata.Continue != "" {
		t.Errorf("history header: %+v", h)
	}
	fields := func(steps []v1alpha1.HistoryStep) []string {
		var out []string
		for _, st := range steps {
			b, _ := json.Marshal(st.Fields)
			if st.Type == "Added" {
				b = []byte(fmt.Sprintf("%d fields", len(st.Fields)))
			}
			out = append(out, st.Type+" "+st.Kind+" "+string(b))
		}
		return out
	}
	want := []string{
		"Added Deployment 13 fields",
		`Modified Deployment [{"path":".spec.replicas","old":2,"new":3},{"path":".status.updatedReplicas","old":2,"new":3}]`,
		`Modified Deployment [{"path":".spec.template.spec.containers[0].image","old":"registry.example.com/web:1","new":"registry.example.com/web:2"},` +
			`{"path":".spec.template.spec.containers[0].name","old":"main","new":"web"},{"path":".status.availableReplicas","old":2,"new":3},` +
			`{"path":".status.readyReplicas","old":2,"new":3}]`,
	}
	got := fields(h.Items)
	if !slices.Equal(got, want) {
		t.Errorf("steps:\n got %q\nwant %q", got, want)
	}
	// Page by page, each step's diff is from the one before, also across pages.
	var paged []v1alpha1.HistoryStep
	next := ""
	for range 10 {
		p := path + "&limit=1"
		if next != "" {
			p += "&continue=" + url.QueryEscape(next)
		}
		var page v1alpha1.ObjectHistory
		f.getOK(p, &page)
		paged = append(paged, page.Items...)
		if next = page.Metadata.Continue; next == "" {
			break
		}
	}
	if got := fields(paged); !slices.Equal(got, want) {
		t.Errorf("steps by pages of 1:\n got %q\nwant %q", got, want)
	}
	// An object that the log has nothing of.
	f.getOK(historyPath(staging)+"?version=v1&resource=pods&namespace=default&name=web-1", &h)
	if len(h.Items) != 0 || h.Items == nil {
		t.Errorf("the history of an object without changes: %+v", h.Items)
	}
}

// TestHistoryAPINeverShowsSecretValues asks for a Secret's history and for the changes
// every way a client can, with the values of its data, stringData and last-applied
// manifest as terms too, and looks for them in every answer.
func TestHistoryAPINeverShowsSecretValues(t *testing.T) {
	f := newFixture(t, nil)
	f.withHistory()
	var h v1alpha1.ObjectHistory
	f.getOK(historyPath(prod)+"?version=v1&resource=secrets&namespace=default&name=creds", &h)
	if len(h.Items) != 2 || h.Items[0].Type != "Added" || h.Items[1].Type != "Modified" {
		t.Fatalf("a Secret's history: %+v; want its two steps", h.Items)
	}
	paths := []string{
		historyPath(prod) + "?version=v1&resource=secrets&namespace=default&name=creds",
		historyPath(prod) + "?version=v1&resource=secrets&namespace=default&name=creds&limit=1",
		historyPath(prod) + "?group=&version=v1&resource=secrets&namespace=default&name=creds",
		historyPath(prod) + "?group=core&version=v1&resource=secrets&namespace=default&name=creds",
		historyPath(prod) + "?version=v1&resource=Secrets&namespace=default&name=creds",
		historyPath(prod) + "?version=v1&resource=secrets%3Fspec%3D&namespace=default&name=creds",
	}
	for _, q := range []string{"", "creds", "kind:secrets", "kind:Secret", "l:app=web", "image:" + secretValue, secretValue, "password"} {
		paths = append(paths, changesPath+"?q="+url.QueryEscape(q), clusterPath(prod)+"/apis/fleetwatch.io/v1alpha1/changes?q="+url.QueryEscape(q))
	}
	for _, p := range []string{"labelSelector=" + url.QueryEscape("password"), "name=" + secretValue, "type=Added,Modified", "since=3h", "after=0"} {
		paths = append(paths, changesPath+"?"+p)
	}
	for _, p := range paths {
		r := f.get(p)
		for _, leak := range []string{secretValue, "password", "stringData", "last-applied"} {
			if strings.Contains(string(r.body), leak) {
				t.Errorf("GET %s: %q in the answer: %s", p, leak, r.body)
			}
		}
	}
	// Label and image terms read the objects, and the log holds no Secret's.
	for _, q := range []string{"l:app=web kind:secrets", "image:" + secretValue} {
		if got := f.changes(changesPath + "?q=" + url.QueryEscape(q)); len(got) != 0 {
			t.Errorf("%q selected %q", q, changeRefs(got))
		}
	}
}

// TestHistoryAPIClusterLimited: a token limited to some clusters gets the changes and
// histories of those only, whatever its query, parameters and continue token say.
func TestHistoryAPIClusterLimited(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "admin-token user=admin\nci-token user=ci clusters=stag*\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	all := f.withHistory()
	ci := []string{"Authorization", "Bearer ci-token"}
	admin := []string{"Authorization", "Bearer admin-token"}
	for _, p := range []string{changesPath, historyPath(staging) + "?version=v1&resource=pods&namespace=default&name=api-1"} {
		if r := f.get(p); r.code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d", p, r.code)
		}
		if r := f.get(p, "Authorization", "Bearer wrong"); r.code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %d", p, r.code)
		}
	}
	if got := f.changes(changesPath+"?", admin...); len(got) != len(all) {
		t.Errorf("admin: %d changes, want %d", len(got), len(all))
	}
	for _, q := range []string{
		"q=", "q=" + url.QueryEscape("cluster:*"), "q=" + url.QueryEscape("cluster:prod"), "cluster=prod", "q=web", "limit=1", "type=Modified",
	} {
		for _, c := range f.changes(changesPath+"?"+q, ci...) {
			if c.Cluster != staging {
				t.Errorf("ci, %s: a change of %s: %+v", q, c.Cluster, c)
			}
		}
	}
	// A token of the admin's pages reads no other cluster for ci.
	var page v1alpha1.ChangeList
	f.getOK(changesPath+"?limit=1", &page, admin...)
	for tok := page.Metadata.Continue; tok != ""; {
		var next v1alpha1.ChangeList
		f.getOK(changesPath+"?limit=1&continue="+url.QueryEscape(tok), &next, ci...)
		for _, c := range next.Items {
			if c.Cluster != staging {
				t.Errorf("ci with the admin's token: a change of %s", c.Cluster)
			}
		}
		tok = next.Metadata.Continue
	}
	for _, p := range []string{
		clusterPath(prod) + "/apis/fleetwatch.io/v1alpha1/changes",
		historyPath(prod) + "?group=apps&version=v1&resource=deployments&namespace=default&name=web",
		historyPath(edge) + "?version=v1&resource=pods&namespace=default&name=web-3",
	} {
		f.get(p, ci...).status(t, http.StatusForbidden)
	}
	// A cluster that does not exist is forbidden as one that does, telling nothing.
	f.get(historyPath("nope")+"?version=v1&resource=pods&namespace=default&name=x", ci...).status(t, http.StatusForbidden)
	var h v1alpha1.ObjectHistory
	f.getOK(historyPath(staging)+"?version=v1&resource=pods&namespace=default&name=api-1", &h, ci...)
	if len(h.Items) != 2 {
		t.Errorf("ci, the history of a pod of staging: %+v", h.Items)
	}
}

// TestChangesAPIInAShardedFleet: a replica answers the changes of every cluster with
// those of the clusters it watches and those of the replicas that watch the others; one
// that cannot be reached is named in a Warning.
func TestChangesAPIInAShardedFleet(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Replica = "fleetwatch-0" })
	f.withHistory()
	st := clusterStatus(staging, aggregate.PhaseRemote, false)
	st.Replica, st.ReplicaAddress = "fleetwatch-1", "http://127.0.0.1:1"
	f.src.setStatus(st)
	r := f.get(changesPath)
	if r.code != http.StatusOK {
		t.Fatalf("%d %s", r.code, r.body)
	}
	var page v1alpha1.ChangeList
	if err := json.Unmarshal(r.body, &page); err != nil {
		t.Fatal(err)
	}
	for _, c := range page.Items {
		if c.Cluster == staging {
			t.Errorf("a change of a cluster another replica watches, from this replica's log: %+v", c)
		}
		if c.Replica != "fleetwatch-0" {
			t.Errorf("a change of this replica's log names replica %q", c.Replica)
		}
	}
	if w := r.header.Get("Warning"); !strings.Contains(w, "clusters not included: staging") || !strings.Contains(w, `replica \"fleetwatch-1\" did not answer`) {
		t.Errorf("Warning %q does not name the cluster whose replica did not answer", w)
	}
	// Forwarded from another replica: this one's own clusters, no warning.
	r = f.get(changesPath, forwardedHeader, "fleetwatch-1")
	if r.code != http.StatusOK || r.header.Get("Warning") != "" {
		t.Errorf("forwarded: %d, Warning %q", r.code, r.header.Get("Warning"))
	}
}
