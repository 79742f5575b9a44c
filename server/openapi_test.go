package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// member is a fake apiserver of every cluster: a cluster's paths are under /{cluster}.
type member struct {
	*httptest.Server
	mu sync.Mutex
	// hits counts requests by path; notModified counts 304s.
	hits        map[string]int
	notModified int
}

func newMember(t *testing.T) *member {
	m := &member{hits: map[string]int{}}
	m.Server = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.Close)
	return m
}

func (m *member) count(path string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hits[path]
}

func (m *member) serve(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.hits[r.URL.Path]++
	m.mu.Unlock()
	cluster, path, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	path = "/" + path
	switch {
	case path == "/openapi/v3":
		writeJSON(w, http.StatusOK, map[string]any{"paths": map[string]any{
			"api/v1":       map[string]any{"serverRelativeURL": "/openapi/v3/api/v1?hash=AAA"},
			"apis/apps/v1": map[string]any{"serverRelativeURL": "/openapi/v3/apis/apps/v1?hash=BBB"},
		}})
	case path == "/openapi/v3/apis/apps/v1":
		w.Header().Set("ETag", `"bbb"`)
		writeBody(w, http.StatusOK, "application/json", []byte(`{"openapi":"3.0.0","cluster":"`+cluster+`"}`))
	case path == "/openapi/v2":
		if r.Header.Get("If-None-Match") == `"v2"` {
			m.mu.Lock()
			m.notModified++
			m.mu.Unlock()
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("ETag", `"v2"`)
		ct := "application/json"
		if strings.Contains(r.Header.Get("Accept"), "protobuf") {
			ct = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
		}
		writeBody(w, http.StatusOK, ct, []byte("v2 of "+cluster))
	case path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com" && cluster == prod:
		writeJSON(w, http.StatusOK, map[string]any{"spec": map[string]any{"versions": []any{
			map[string]any{"name": "v1beta1"},
			map[string]any{"name": "v1", "additionalPrinterColumns": []any{
				map[string]any{"name": "Color", "type": "string", "jsonPath": ".spec.color"},
				map[string]any{"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1},
				map[string]any{"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
				map[string]any{"name": "Since", "type": "date", "jsonPath": ".status.since"},
				map[string]any{"name": "Ports", "type": "string", "jsonPath": ".spec.ports[*].port"},
			}},
		}}})
	case strings.HasPrefix(path, "/apis/apiextensions.k8s.io/"):
		// No RBAC for CRDs here.
		writeBody(w, http.StatusForbidden, "application/json", []byte(`{"kind":"Status","code":403}`))
	default:
		http.NotFound(w, r)
	}
}

// configSource is a Source whose clusters are reached at a member.
type configSource struct {
	*fakeSource
	host string
}

func (c *configSource) RESTConfig(cluster string) (*rest.Config, error) {
	if cluster == edge {
		return nil, fmt.Errorf("cluster %q is not connected", cluster)
	}
	return &rest.Config{Host: c.host + "/" + cluster}, nil
}

var _ ClusterConfigs = (*configSource)(nil)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func widget(name, rv string, spec map[string]any, status map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "spec": spec, "status": status}}
	u.SetNamespace("default")
	u.SetName(name)
	u.SetResourceVersion(rv)
	u.SetCreationTimestamp(metav1.NewTime(now.Add(-time.Hour)))
	return u
}

// newMemberFixture is the fixture with widgets in prod and staging, served by a second
// server whose Source reaches the clusters at a member.
func newMemberFixture(t *testing.T, setOpts func(*Options)) (*fixture, *member, *httptest.Server, *Server) {
	f := newFixture(t, nil)
	m := newMember(t)
	for _, cl := range []string{prod, staging} {
		st := clusterStatus(cl, aggregate.PhaseSynced, cl == prod)
		st.Resources = append(st.Resources, resourceStatus(widgetsGVR, "Widget", true))
		f.src.setStatus(st)
	}
	f.apply(prod, widgetsGVR, widget("w1", "110", map[string]any{"color": "red", "size": int64(3), "ports": []any{
		map[string]any{"port": int64(80)}, map[string]any{"port": int64(443)},
	}}, map[string]any{"ready": true, "since": now.Add(-90 * time.Minute).Format(time.RFC3339)}))
	f.apply(staging, widgetsGVR, widget("w2", "210", map[string]any{"color": "blue"}, nil))
	opts := Options{Clock: clocktesting.NewFakePassiveClock(now)}
	if setOpts != nil {
		setOpts(&opts)
	}
	s, err := New(&configSource{fakeSource: f.src, host: m.URL}, opts)
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(s.Handler())
	t.Cleanup(h.Close)
	t.Cleanup(s.reg.Remove)
	return f, m, h, s
}

func getFrom(t *testing.T, h *httptest.Server, path string, header ...string) response {
	t.Helper()
	f := &fixture{t: t, ctx: t.Context(), http: h}
	return f.get(path, header...)
}

func TestOpenAPI(t *testing.T) {
	_, m, h, _ := newMemberFixture(t, nil)

	r := getFrom(t, h, "/clusters/prod/openapi/v3")
	var root struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if r.code != http.StatusOK || json.Unmarshal(r.body, &root) != nil {
		t.Fatalf("/openapi/v3: %d %s", r.code, r.body)
	}
	if got := root.Paths["apis/apps/v1"].ServerRelativeURL; got != "/clusters/prod/openapi/v3/apis/apps/v1?hash=BBB" {
		t.Errorf("serverRelativeURL = %q", got)
	}

	for range 3 {
		r = getFrom(t, h, "/clusters/staging/openapi/v3/apis/apps/v1?hash=BBB")
		if r.code != http.StatusOK || string(r.body) != `{"openapi":"3.0.0","cluster":"staging"}` || r.header.Get("Cache-Control") != "public, immutable" {
			t.Fatalf("apps/v1 of staging: %d %q %s", r.code, r.header, r.body)
		}
	}
	if n := m.count("/staging/openapi/v3/apis/apps/v1"); n != 1 {
		t.Errorf("a document with its hash was fetched %d times, want once", n)
	}
	if r := getFrom(t, h, "/clusters/staging/openapi/v3/apis/apps/v1?hash=BBB", "If-None-Match", `"bbb"`); r.code != http.StatusNotModified {
		t.Errorf("If-None-Match: %d", r.code)
	}

	proto := "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
	for range 2 {
		r = getFrom(t, h, "/clusters/prod/openapi/v2", "Accept", proto)
		if r.code != http.StatusOK || string(r.body) != "v2 of prod" || !strings.Contains(r.header.Get("Content-Type"), "protobuf") {
			t.Fatalf("v2: %d %q %s", r.code, r.header, r.body)
		}
	}
	if n := m.count("/prod/openapi/v2"); n != 1 {
		t.Errorf("a fresh document was fetched %d times", n)
	}
	if r = getFrom(t, h, "/clusters/prod/openapi/v2"); r.header.Get("Content-Type") != "application/json" {
		t.Errorf("v2 as JSON: %q", r.header)
	}

	for _, tc := range []struct {
		path string
		code int
	}{
		{"/clusters/*/openapi/v3", http.StatusNotFound},
		{"/clusters/no-such-cluster/openapi/v3", http.StatusNotFound},
		{"/clusters/prod/openapi/v3/apis/../../api/v1/namespaces/default/secrets", http.StatusNotFound},
		{"/clusters/prod/openapi/v3/apis/%2e%2e/x", http.StatusNotFound},
		{"/clusters/prod/openapi/v4", http.StatusNotFound},
		{"/clusters/prod/openapi/v3/version", http.StatusNotFound},
		{"/openapi/v2", http.StatusNotFound},
		// edge has no connection: 503, and nothing of why.
		{"/clusters/" + strings.ReplaceAll(edge, "/", "%2F") + "/openapi/v3", http.StatusServiceUnavailable},
	} {
		r := getFrom(t, h, tc.path)
		st := r.status(t, tc.code)
		if strings.Contains(st.Message, m.URL) || strings.Contains(st.Message, "not connected") {
			t.Errorf("%s: the Status tells of the member: %s", tc.path, st.Message)
		}
	}
	m.Close()
	r = getFrom(t, h, "/clusters/staging/openapi/v3")
	if st := r.status(t, http.StatusServiceUnavailable); strings.Contains(st.Message, "127.0.0.1") {
		t.Errorf("a member down: %s", st.Message)
	}
}

// TestOpenAPIRevalidates: a document past openAPIFresh is asked for again with its ETag,
// and a 304 keeps it.
func TestOpenAPIRevalidates(t *testing.T) {
	_, m, h, srv := newMemberFixture(t, nil)
	if r := getFrom(t, h, "/clusters/prod/openapi/v2"); r.code != http.StatusOK {
		t.Fatal(r.code)
	}
	// Age the kept document.
	for _, k := range srv.openAPI.docs.Keys() {
		v, _ := srv.openAPI.docs.Get(k)
		v.(*openAPIDoc).fetched = time.Now().Add(-time.Hour)
	}
	if r := getFrom(t, h, "/clusters/prod/openapi/v2"); r.code != http.StatusOK || string(r.body) != "v2 of prod" {
		t.Fatalf("%d %s", r.code, r.body)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.notModified != 1 || m.hits["/prod/openapi/v2"] != 2 {
		t.Errorf("hits %d, 304s %d", m.hits["/prod/openapi/v2"], m.notModified)
	}
}

// TestOpenAPIClusterLimited: a token limited to some clusters reads the OpenAPI of those
// only.
func TestOpenAPIClusterLimited(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "ci-token user=ci clusters=staging\n")
	_, m, h, _ := newMemberFixture(t, func(o *Options) { o.TokenFile = tokens })
	ci := []string{"Authorization", "Bearer ci-token"}
	if r := getFrom(t, h, "/clusters/staging/openapi/v3", ci...); r.code != http.StatusOK {
		t.Errorf("staging: %d", r.code)
	}
	for _, path := range []string{"/clusters/prod/openapi/v3", "/clusters/prod/openapi/v2"} {
		getFrom(t, h, path, ci...).status(t, http.StatusForbidden)
		getFrom(t, h, path).status(t, http.StatusUnauthorized)
	}
	if n := m.count("/prod/openapi/v3") + m.count("/prod/openapi/v2"); n != 0 {
		t.Errorf("prod was asked %d times", n)
	}
}

// TestCRDPrinterColumns: Tables of a custom resource have the columns its CRD declares
// for the version, after CLUSTER and NAME, printed as kube-apiserver prints them; where
// the CRD cannot be read (no RBAC), AGE only.
func TestCRDPrinterColumns(t *testing.T) {
	_, m, h, _ := newMemberFixture(t, nil)
	table := func(path string) metav1.Table {
		t.Helper()
		r := getFrom(t, h, path, "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		var tb metav1.Table
		if r.code != http.StatusOK || json.Unmarshal(r.body, &tb) != nil {
			t.Fatalf("%s: %d %s", path, r.code, r.body)
		}
		return tb
	}
	names := func(tb metav1.Table) string {
		var out []string
		for _, c := range tb.ColumnDefinitions {
			out = append(out, fmt.Sprintf("%s:%s:%d", c.Name, c.Type, c.Priority))
		}
		return strings.Join(out, " ")
	}
	tb := table("/clusters/prod/apis/example.com/v1/namespaces/default/widgets")
	if got, want := names(tb), "Cluster:string:0 Name:string:0 Color:string:0 Size:integer:1 Ready:boolean:0 Since:date:0 Ports:string:0"; got != want {
		t.Errorf("columns\n got %s\nwant %s", got, want)
	}
	// kube-apiserver prints the first value a JSONPath finds: 80 of the two ports.
	if got, want := fmt.Sprint(tb.Rows[0].Cells), "[prod w1 red 3 true 90m 80]"; got != want {
		t.Errorf("cells %s, want %s", got, want)
	}
	// Fleet-wide: the CRD of the first cluster with one; the rows of the others too.
	tb = table("/clusters/*/apis/example.com/v1/widgets")
	if len(tb.ColumnDefinitions) != 7 || fmt.Sprint(tb.Rows[1].Cells) != "[staging w2 blue <nil> <nil> <nil> <nil>]" {
		t.Errorf("fleet-wide: %s %v", names(tb), tb.Rows)
	}
	// staging's CRD cannot be read: AGE.
	tb = table("/clusters/staging/apis/example.com/v1/widgets")
	if got := names(tb); got != "Cluster:string:0 Name:string:0 Age:string:0" {
		t.Errorf("without RBAC: %s", got)
	}
	for range 3 {
		table("/clusters/prod/apis/example.com/v1/namespaces/default/widgets/w1")
		table("/clusters/staging/apis/example.com/v1/widgets")
	}
	if n, d := m.count("/prod/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"), m.count("/staging/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com"); n != 1 || d != 1 {
		t.Errorf("the CRDs were fetched %d and %d times, want once each", n, d)
	}
}

// TestFanOutTableOfACustomResource: a replica that watches no cluster serving a custom
// resource prints a fleet Table of it with the columns of its CRD, as the resource's
// owner would: the CRD is read from the cluster of the rows, whose config the replica
// has although another replica watches it (fleetwatch.Manager.RESTConfig of a sharded
// Manager).
func TestFanOutTableOfACustomResource(t *testing.T) {
	owner, m, _, _ := newMemberFixture(t, nil)
	local := newFixture(t, nil)
	st := aggregate.ClusterStatus{Name: prod, Phase: aggregate.PhaseRemote, Replica: "fleetwatch-1", ReplicaAddress: owner.http.URL}
	st.Resources = append(st.Resources, resourceStatus(widgetsGVR, "Widget", true))
	local.src.setStatus(st)
	s, err := New(&configSource{fakeSource: local.src, host: m.URL}, Options{Clock: clocktesting.NewFakePassiveClock(now), Replica: "fleetwatch-0"})
	if err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(s.Handler())
	t.Cleanup(h.Close)
	t.Cleanup(s.reg.Remove)
	r := getFrom(t, h, "/clusters/*/apis/example.com/v1/widgets", "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	var tb metav1.Table
	if r.code != http.StatusOK || json.Unmarshal(r.body, &tb) != nil {
		t.Fatalf("%d %s", r.code, r.body)
	}
	var cols []string
	for _, c := range tb.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if got, want := strings.Join(cols, " "), "Cluster Name Color Size Ready Since Ports"; got != want {
		t.Errorf("columns %q, want the CRD's: %q", got, want)
	}
	if len(tb.Rows) != 1 || fmt.Sprint(tb.Rows[0].Cells) != "[prod w1 red 3 true 90m 80]" {
		t.Errorf("rows %v, want w1 of prod with its CRD's cells", tb.Rows)
	}
}
