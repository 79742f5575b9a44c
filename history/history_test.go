package history

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/search"
)

var (
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	secretsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	deployments    = persist.ResourceKeyFor(deploymentsGVR)
	pods           = persist.ResourceKeyFor(podsGVR)
	// secrets is qualified, as an informer that keeps their values stores them.
	secrets = persist.ResourceKey("/v1/secrets?spec=secretData%3Dtrue")
	kinds   = map[schema.GroupVersionResource]string{deploymentsGVR: "Deployment", podsGVR: "Pod", secretsGVR: "Secret"}
	short   = map[schema.GroupResource][]string{deploymentsGVR.GroupResource(): {"deploy"}}
)

// secretValue is in the Secrets written to the log: it must never come out.
const secretValue = "hunter2-never-shown"

func deployment(name string, replicas int64, image string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{
			"namespace": "shop", "name": name, "labels": map[string]any{"app": name},
			"managedFields": []any{map[string]any{"manager": image}},
		},
		"spec": map[string]any{
			"replicas": replicas,
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": image}}}},
		},
	}}
	u.SetResourceVersion(fmt.Sprint(replicas))
	return u
}

func secret(name, value string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata":   map[string]any{"namespace": "shop", "name": name, "labels": map[string]any{"app": "payments"}},
		"data":       map[string]any{"password": value},
		"stringData": map[string]any{"password": value},
	}}
}

// testLog writes one change a commit, a second apart (the changes of one commit at one
// time have no set order):
//
//	prod-east deployments shop/payments Added (1 replica, pay:1), pods shop/web-1 Added,
//	secrets shop/db Added; dev pods ops/tool Added; prod-east shop/payments Modified (3
//	replicas); prod-west shop/payments Added; prod-east shop/payments Modified (image
//	pay:2), secrets shop/db Modified, shop/payments Deleted; dev replaced; prod-east
//	shop/payments Added again (2 replicas, pay:2)
func testLog(t *testing.T) (*Log, *persist.Store, time.Time) {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	start := clock.Now()
	s, err := persist.Open(filepath.Join(t.TempDir(), "snap.db"), persist.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := s.NewWriter(persist.WriterOptions{Interval: time.Hour, Clock: clock, History: persist.HistoryOptions{Enabled: true}})
	rv := 0
	commit := func(changes func()) {
		t.Helper()
		changes()
		for _, c := range []string{"prod-east", "prod-west", "dev"} {
			for _, k := range []persist.ResourceKey{deployments, pods, secrets} {
				rv++
				w.Checkpoint(c, k, fmt.Sprint(rv))
			}
		}
		if err := w.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		clock.Step(time.Second)
	}
	commit(func() { w.Upsert("prod-east", deployments, deployment("payments", 1, "pay:1")) })
	commit(func() {
		w.Upsert("prod-east", pods, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"namespace": "shop", "name": "web-1"}}})
	})
	commit(func() { w.Upsert("prod-east", secrets, secret("db", secretValue)) })
	commit(func() {
		w.Upsert("dev", pods, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"namespace": "ops", "name": "tool"}}})
	})
	commit(func() { w.Upsert("prod-east", deployments, deployment("payments", 3, "pay:1")) })
	commit(func() { w.Upsert("prod-west", deployments, deployment("payments", 1, "pay:1")) })
	commit(func() { w.Upsert("prod-east", deployments, deployment("payments", 3, "pay:2")) })
	commit(func() { w.Upsert("prod-east", secrets, secret("db", secretValue+"-2")) })
	commit(func() { w.Delete("prod-east", deployments, "shop", "payments") })
	commit(func() { w.ReplaceCluster("dev") })
	commit(func() { w.Upsert("prod-east", deployments, deployment("payments", 2, "pay:2")) })
	return New(s, Options{}), s, start
}

// describeChanges returns "type cluster kind-or-resource ns/name" for each change.
func describeChanges(items []v1alpha1.Change) []string {
	var out []string
	for _, c := range items {
		what := c.Kind
		if what == "" {
			what = c.Resource
		}
		out = append(out, strings.TrimSpace(strings.Join([]string{c.Type, c.Cluster, what, strings.Trim(c.Namespace+"/"+c.Name, "/")}, " ")))
	}
	return out
}

// allChanges reads every page of req.
func allChanges(t *testing.T, l *Log, req ChangesRequest) []v1alpha1.Change {
	t.Helper()
	var all []v1alpha1.Change
	for range 1000 {
		page, err := l.Changes(req)
		if err != nil {
			t.Fatal(err)
		}
		if req.Limit > 0 && len(page.Items) > req.Limit {
			t.Fatalf("a page of %d items, limit %d", len(page.Items), req.Limit)
		}
		all = append(all, page.Items...)
		if page.Next == 0 {
			return all
		}
		req.After = page.Next
	}
	t.Fatal("more than 1000 pages")
	return nil
}

func TestChanges(t *testing.T) {
	l, store, start := testLog(t)
	query := func(q string) *search.Query {
		t.Helper()
		parsed, err := search.Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		return parsed
	}
	for _, tc := range []struct {
		name string
		req  ChangesRequest
		want []string
	}{
		{name: "everything", req: ChangesRequest{}, want: []string{
			"Added prod-east Deployment shop/payments", "Added prod-east Pod shop/web-1", "Added prod-east Secret shop/db",
			"Added dev Pod ops/tool",
			"Modified prod-east Deployment shop/payments", "Added prod-west Deployment shop/payments",
			"Modified prod-east Deployment shop/payments", "Modified prod-east Secret shop/db",
			"Deleted prod-east Deployment shop/payments", "ClusterReplaced dev",
			"Added prod-east Deployment shop/payments",
		}},
		{name: "cluster glob, kind, namespace", req: ChangesRequest{Query: query("cluster:prod-* kind:Deployment ns:shop")}, want: []string{
			"Added prod-east Deployment shop/payments", "Modified prod-east Deployment shop/payments", "Added prod-west Deployment shop/payments",
			"Modified prod-east Deployment shop/payments", "Deleted prod-east Deployment shop/payments", "Added prod-east Deployment shop/payments",
		}},
		{name: "short name and cluster", req: ChangesRequest{Query: query("kind:deploy"), Cluster: "prod-west"}, want: []string{
			"Added prod-west Deployment shop/payments",
		}},
		{name: "a cluster's own change passes kind and name terms", req: ChangesRequest{Query: query("kind:Pod tool cluster:dev")}, want: []string{
			"Added dev Pod ops/tool", "ClusterReplaced dev",
		}},
		{name: "name prefix", req: ChangesRequest{Query: query("web*")}, want: []string{"Added prod-east Pod shop/web-1", "ClusterReplaced dev"}},
		{name: "label of the object as the change left it", req: ChangesRequest{Query: query("l:app=payments cluster:prod-east")}, want: []string{
			"Added prod-east Deployment shop/payments", "Modified prod-east Deployment shop/payments",
			"Modified prod-east Deployment shop/payments", "Added prod-east Deployment shop/payments",
		}},
		{name: "image", req: ChangesRequest{Query: query("image:pay:2")}, want: []string{
			"Modified prod-east Deployment shop/payments", "ClusterReplaced dev", "Added prod-east Deployment shop/payments",
		}},
		{name: "types", req: ChangesRequest{Types: []persist.ChangeType{persist.ChangeDeleted, persist.ChangeClusterReplaced}}, want: []string{
			"Deleted prod-east Deployment shop/payments", "ClusterReplaced dev",
		}},
		{name: "allowed clusters only", req: ChangesRequest{Allow: func(c string) bool { return c == "prod-west" }}, want: []string{
			"Added prod-west Deployment shop/payments",
		}},
		{name: "a glob cannot widen the allowed clusters", req: ChangesRequest{Query: query("cluster:*"), Allow: func(c string) bool { return c == "dev" }}, want: []string{
			"Added dev Pod ops/tool", "ClusterReplaced dev",
		}},
		{name: "since", req: ChangesRequest{Since: start.Add(8 * time.Second), Query: query("cluster:prod-east")}, want: []string{
			"Deleted prod-east Deployment shop/payments", "Added prod-east Deployment shop/payments",
		}},
		{name: "unknown kind", req: ChangesRequest{Query: query("kind:Gadget")}, want: []string{"ClusterReplaced dev"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Kinds, tc.req.ShortNames = kinds, short
			got := describeChanges(allChanges(t, l, tc.req))
			if !slices.Equal(got, tc.want) {
				t.Errorf("changes:\n got %q\nwant %q", got, tc.want)
			}
			// Page by page, and with pages that read one record each, the same.
			for _, opts := range []Options{{}, {MaxScan: 1, MaxObjectScan: 1}} {
				pl := New(store, opts)
				req := tc.req
				req.Limit = 1
				if got := describeChanges(allChanges(t, pl, req)); !slices.Equal(got, tc.want) {
					t.Errorf("changes by pages of 1 (MaxScan %d):\n got %q\nwant %q", opts.MaxScan, got, tc.want)
				}
			}
		})
	}
	// The items say where they are, and their sequence numbers resume.
	all := allChanges(t, l, ChangesRequest{Kinds: kinds})
	if !slices.IsSortedFunc(all, func(a, b v1alpha1.Change) int { return int(a.Seq) - int(b.Seq) }) {
		t.Error("changes are not in the order of their sequence numbers")
	}
	after := allChanges(t, l, ChangesRequest{Kinds: kinds, After: all[7].Seq})
	if got, want := describeChanges(after), describeChanges(all[8:]); !slices.Equal(got, want) {
		t.Errorf("after the 9th change: %q, want %q", got, want)
	}
	if c := all[4]; c.Group != "apps" || c.Version != "v1" || c.Resource != "deployments" || c.ResourceVersion == "" || c.ObjectResourceVersion != "3" {
		t.Errorf("a change's fields: %+v", c)
	}
}

func TestChangesBoundsItsPages(t *testing.T) {
	l, _, _ := testLog(t)
	for _, n := range []int{-1, 0} {
		page, err := l.Changes(ChangesRequest{Limit: n})
		if err != nil || len(page.Items) != 11 || page.Next != 0 {
			t.Errorf("Limit %d: %d items, next %d, %v; want the 11 changes", n, len(page.Items), page.Next, err)
		}
	}
	page, err := l.Changes(ChangesRequest{Limit: MaxLimit + 1})
	if err != nil || len(page.Items) != 11 {
		t.Errorf("a limit past MaxLimit: %d items, %v", len(page.Items), err)
	}
	// A page that reads MaxScan records without finding one says where to go on.
	scan := New(l.store, Options{MaxScan: 2})
	page, err = scan.Changes(ChangesRequest{Types: []persist.ChangeType{persist.ChangeDeleted}})
	if err != nil || len(page.Items) != 0 || page.Next != 2 {
		t.Errorf("a page bounded by MaxScan: %d items, next %d, %v; want none, next 2", len(page.Items), page.Next, err)
	}
	// One that decodes objects, MaxObjectScan.
	scan = New(l.store, Options{MaxScan: 100, MaxObjectScan: 3})
	labelled, err := search.Parse("l:app=nothing")
	if err != nil {
		t.Fatal(err)
	}
	page, err = scan.Changes(ChangesRequest{Query: labelled})
	if err != nil || len(page.Items) != 0 || page.Next != 3 {
		t.Errorf("a page of a label term bounded by MaxObjectScan: %d items, next %d, %v; want none, next 3", len(page.Items), page.Next, err)
	}
}

func TestObjectHistory(t *testing.T) {
	l, _, _ := testLog(t)
	req := ObjectRequest{Cluster: "prod-east", Resource: deploymentsGVR, Namespace: "shop", Name: "payments"}
	page, err := l.Object(req)
	if err != nil {
		t.Fatal(err)
	}
	if page.Kind != "Deployment" || page.Next != 0 {
		t.Errorf("kind %q, next %d; want Deployment, 0", page.Kind, page.Next)
	}
	var got []string
	for _, st := range page.Steps {
		b, _ := json.Marshal(st.Fields)
		got = append(got, st.Type+" "+st.Kind+" "+string(b))
	}
	want := []string{
		`Added Deployment [{"path":".apiVersion","new":"apps/v1"},{"path":".kind","new":"Deployment"},` +
			`{"path":".metadata.labels.app","new":"payments"},{"path":".metadata.name","new":"payments"},{"path":".metadata.namespace","new":"shop"},` +
			`{"path":".spec.replicas","new":1},{"path":".spec.template.spec.containers[0].image","new":"pay:1"},` +
			`{"path":".spec.template.spec.containers[0].name","new":"c"}]`,
		`Modified Deployment [{"path":".spec.replicas","old":1,"new":3}]`,
		`Modified Deployment [{"path":".spec.template.spec.containers[0].image","old":"pay:1","new":"pay:2"}]`,
		`Deleted Deployment null`,
		`Added Deployment [{"path":".apiVersion","new":"apps/v1"},{"path":".kind","new":"Deployment"},` +
			`{"path":".metadata.labels.app","new":"payments"},{"path":".metadata.name","new":"payments"},{"path":".metadata.namespace","new":"shop"},` +
			`{"path":".spec.replicas","new":2},{"path":".spec.template.spec.containers[0].image","new":"pay:2"},` +
			`{"path":".spec.template.spec.containers[0].name","new":"c"}]`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("history:\n got %q\nwant %q", got, want)
	}
	// Page by page: each step's diff is from the step before, on the page before too.
	var paged []string
	for req.Limit = 2; ; {
		p, err := l.Object(req)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Steps) > 2 {
			t.Fatalf("a page of %d steps, limit 2", len(p.Steps))
		}
		for _, st := range p.Steps {
			b, _ := json.Marshal(st.Fields)
			paged = append(paged, st.Type+" "+st.Kind+" "+string(b))
		}
		if p.Next == 0 {
			break
		}
		req.After = p.Next
	}
	if !slices.Equal(paged, want) {
		t.Errorf("history by pages of 2:\n got %q\nwant %q", paged, want)
	}
	// An object the log has no change of: an empty history.
	for _, r := range []ObjectRequest{
		{Cluster: "prod-east", Resource: deploymentsGVR, Namespace: "shop", Name: "nope"},
		{Cluster: "nope", Resource: deploymentsGVR, Namespace: "shop", Name: "payments"},
		{Cluster: "prod-east", Resource: podsGVR, Namespace: "shop", Name: "payments"},
	} {
		if p, err := l.Object(r); err != nil || len(p.Steps) != 0 || p.Next != 0 {
			t.Errorf("%+v: %d steps, next %d, %v; want none", r, len(p.Steps), p.Next, err)
		}
	}
}

// TestHistoryNeverShowsSecretValues asks for a Secret's history and changes every way
// a client can, and looks for its value in everything returned.
func TestHistoryNeverShowsSecretValues(t *testing.T) {
	l, _, _ := testLog(t)
	page, err := l.Object(ObjectRequest{Cluster: "prod-east", Resource: secretsGVR, Namespace: "shop", Name: "db"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Steps) != 2 || page.Steps[0].Type != "Added" || page.Steps[1].Type != "Modified" {
		t.Fatalf("a Secret's history: %+v; want its Added and Modified steps", page.Steps)
	}
	var out []any
	out = append(out, page)
	for _, q := range []string{"", "db", "kind:Secret", "l:app=payments", "image:hunter", "l:app"} {
		parsed, err := search.Parse(q)
		if err != nil {
			t.Fatal(err)
		}
		p, err := l.Changes(ChangesRequest{Query: parsed, Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{secretValue, "password", "stringData"} {
		if strings.Contains(string(b), leak) {
			t.Errorf("%q is in what the history returned: %s", leak, b)
		}
	}
	// A Secret's label terms match nothing: the log holds none of its contents.
	parsed, _ := search.Parse("l:app=payments kind:Secret cluster:prod-*")
	if p, err := l.Changes(ChangesRequest{Query: parsed, Kinds: kinds}); err != nil || len(p.Items) != 0 {
		t.Errorf("a label term selected a Secret's changes: %+v, %v", p, err)
	}
}

func TestParseType(t *testing.T) {
	for typ := persist.ChangeAdded; typ <= persist.ChangeLost; typ++ {
		if got, ok := ParseType(typ.String()); !ok || got != typ {
			t.Errorf("ParseType(%q) = %v, %v", typ.String(), got, ok)
		}
	}
	for _, s := range []string{"", "added", "ChangeType(9)", "Added "} {
		if _, ok := ParseType(s); ok {
			t.Errorf("ParseType(%q) is a type", s)
		}
	}
}

// TestToMapKeepsIntegers: a log's object that is not unstructured (a metadata-only
// informer's) comes out with its integers as they are, beyond 2^53 included, and as
// int64, the type that unstructured objects hold and the diffs compare.
func TestToMapKeepsIntegers(t *testing.T) {
	const big = 1<<53 + 1
	grace := int64(big)
	obj := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web", Generation: big, DeletionGracePeriodSeconds: &grace,
			CreationTimestamp: metav1.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC),
		},
	}
	m, err := toMap(obj)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := m["metadata"].(map[string]any)
	for _, f := range []string{"generation", "deletionGracePeriodSeconds"} {
		if got, ok := md[f].(int64); !ok || got != big {
			t.Errorf("metadata.%s = %#v, want int64 %d", f, md[f], int64(big))
		}
	}
	if got := md["creationTimestamp"]; got != "2026-12-05T07:00:00Z" {
		t.Errorf("metadata.creationTimestamp = %#v", got)
	}
	if m["kind"] != "Pod" || m["apiVersion"] != "v1" {
		t.Errorf("type = %v %v", m["apiVersion"], m["kind"])
	}
}
