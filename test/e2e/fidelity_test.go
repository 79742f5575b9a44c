package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
)

// TestEveryKindFidelity (issue #34): every resource that a real kube-apiserver serves
// with list and watch (but Secrets, which fleetwatch does not serve by default), holding
// the apiserver's own objects and the objects of testdata/fidelity (a built-in kind each,
// with awkward values; a CRD and custom resources with floats, integers past 2^53,
// unicode, empty maps and lists, nulls), is served by the real binary exactly as the
// apiserver serves it, field for field and number for number: in a list, a GET of each
// object, the initial events of a watch and a Table with includeObject=Object, in every
// cache encoding, and metadata-only (PartialObjectMetadata, as the apiserver serves it
// to `as=PartialObjectMetadata`, and in a Table with includeObject=Metadata), cold and
// after a warm restart from the snapshot.
// docs/design.md ("Fidelity") lists what it covers.
func TestEveryKindFidelity(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 1})
	c := env.Clusters[0]
	createFidelityFixtures(t, c)
	resources := listableResources(t, c)
	var names []string
	for _, r := range resources {
		names = append(names, r.configName())
	}
	t.Logf("%d resources: %s", len(resources), strings.Join(names, ", "))
	bin := buildBinary(t, "./cmd/fleetwatch")

	for _, run := range []struct {
		encoding string
		metadata bool
	}{
		{encoding: "objects"}, {encoding: "compact"}, {encoding: "compressed"}, {encoding: "compressed-dict"},
		{encoding: "objects", metadata: true}, {encoding: "compact", metadata: true},
	} {
		name := run.encoding
		if run.metadata {
			name += "/metadata-only"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			port := freePort(t)
			var cfg strings.Builder
			fmt.Fprintf(&cfg, "kubeconfig: [%q]\nresources:\n", env.Kubeconfig)
			for _, r := range resources {
				fmt.Fprintf(&cfg, "  - name: %s\n    metadataOnly: %v\n", r.configName(), run.metadata)
			}
			fmt.Fprintf(&cfg, "cache:\n  encoding: %s\nsnapshot:\n  path: %q\n  interval: 100ms\nserver:\n  address: 127.0.0.1:%d\n",
				run.encoding, filepath.Join(dir, "fleetwatch.db"), port)
			cfgPath := filepath.Join(dir, "fleetwatch.yaml")
			if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
				t.Fatal(err)
			}
			d := startDaemon(t, bin, cfgPath)
			fw := fmt.Sprintf("http://127.0.0.1:%d", port)
			cold := 0
			for _, round := range []string{"cold", "warm"} {
				if round == "warm" {
					if err := d.signal(t, syscall.SIGTERM); err != nil {
						t.Fatalf("fleetwatch exited with %v", err)
					}
					d.start(t)
				}
				waitReadyz(t, http.DefaultClient, fw)
				if round == "warm" {
					// Every object came from the snapshot (the log is written before
					// /readyz passes).
					b, err := os.ReadFile(d.log.Name())
					if err != nil {
						t.Fatal(err)
					}
					loaded := regexp.MustCompile(`"Snapshot loaded" .*clusters=1 objects=(\d+) `).FindAllSubmatch(b, -1)
					if len(loaded) == 0 || string(loaded[len(loaded)-1][1]) != strconv.Itoa(cold) {
						t.Fatalf("the warm start did not load the %d objects from the snapshot (log %s)", cold, d.log.Name())
					}
				}
				objects := 0
				for _, r := range resources {
					objects += checkFidelity(t, c, fw+"/clusters/"+c.Name, r, run.metadata, round)
				}
				if round == "cold" {
					cold = objects
				}
				t.Logf("%s: %d objects of %d resources as the apiserver serves them", round, objects, len(resources))
			}
		})
	}
}

// fidResource is a resource of the apiserver in its preferred version.
type fidResource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// configName is the resource's name in fleetwatch's configuration.
func (r fidResource) configName() string {
	if r.gvr.Group == "" {
		return r.gvr.Resource
	}
	return r.gvr.Resource + "." + r.gvr.Group
}

// listPath is the path of the resource's list across namespaces.
func (r fidResource) listPath() string {
	if r.gvr.Group == "" {
		return "/api/" + r.gvr.Version + "/" + r.gvr.Resource
	}
	return "/apis/" + r.gvr.Group + "/" + r.gvr.Version + "/" + r.gvr.Resource
}

// objectPath is the path of one object of the resource.
func (r fidResource) objectPath(namespace, name string) string {
	p := strings.TrimSuffix(r.listPath(), "/"+r.gvr.Resource)
	if namespace != "" {
		p += "/namespaces/" + namespace
	}
	return p + "/" + r.gvr.Resource + "/" + name
}

// listableResources returns the resources, in their preferred versions, that the
// apiserver lists and watches, but Secrets.
func listableResources(t *testing.T, c *testenv.Cluster) []fidResource {
	t.Helper()
	lists, err := c.Clientset().Discovery().ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	var out []fidResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "watch") {
				continue
			}
			if gv.Group == "" && r.Name == "secrets" {
				continue
			}
			out = append(out, fidResource{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced})
		}
	}
	slices.SortFunc(out, func(a, b fidResource) int { return strings.Compare(a.configName(), b.configName()) })
	return out
}

// createFidelityFixtures creates namespace fid, the objects of
// testdata/fidelity/builtin.yaml (with their status), the CRD of the widgets and the
// widgets of testdata/fidelity/widgets.json, as their raw JSON.
func createFidelityFixtures(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	ctx := t.Context()
	const ns = "fid"
	if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join("testdata", "fidelity", "builtin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := []byte(`{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
 "metadata": {"name": "widgets.fid.example"},
 "spec": {"group": "fid.example", "scope": "Namespaced",
  "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["fid"]},
  "versions": [{"name": "v1", "served": true, "storage": true,
   "subresources": {"status": {}},
   "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}, {"name": "Empty", "type": "string", "jsonPath": ".spec.empty", "priority": 1}],
   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "default": {"size": 0}}}}}}]}}`)
	mapper := func() meta.RESTMapper {
		groups, err := restmapper.GetAPIGroupResources(discovery.NewDiscoveryClientForConfigOrDie(c.RESTConfig()))
		if err != nil {
			t.Fatal(err)
		}
		return restmapper.NewDiscoveryRESTMapper(groups)
	}
	create := func(m meta.RESTMapper, raw []byte) {
		t.Helper()
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		gvk := u.GroupVersionKind()
		mapping, err := m.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		req := c.Clientset().CoreV1().RESTClient().Post().AbsPath(fidResource{gvr: mapping.Resource}.listPath())
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			req = c.Clientset().CoreV1().RESTClient().Post().AbsPath(strings.TrimSuffix(fidResource{gvr: mapping.Resource}.objectPath(ns, "x"), "/x"))
		}
		created, err := req.SetHeader("Content-Type", "application/json").Body(raw).DoRaw(ctx)
		if err != nil {
			t.Fatalf("creating %s %s: %v: %s", gvk.Kind, u.GetName(), err, created)
		}
		status, ok := u.Object["status"]
		if !ok || gvk.Kind == "Widget" {
			return
		}
		// The status subresource writes the status that a create drops.
		var obj map[string]any
		if err := json.Unmarshal(created, &obj); err != nil {
			t.Fatal(err)
		}
		obj["status"] = status
		body, _ := json.Marshal(obj)
		path := fidResource{gvr: mapping.Resource}.objectPath("", u.GetName()) + "/status"
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			path = fidResource{gvr: mapping.Resource}.objectPath(ns, u.GetName()) + "/status"
		}
		if _, err := c.Clientset().CoreV1().RESTClient().Put().AbsPath(path).SetHeader("Content-Type", "application/json").Body(body).DoRaw(ctx); err != nil {
			t.Fatalf("writing the status of %s %s: %v", gvk.Kind, u.GetName(), err)
		}
	}
	m := mapper()
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := docs.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		if string(raw) == "null" {
			continue
		}
		create(m, raw)
	}
	create(m, crd)
	eventually(t, 30*time.Second, "the widgets' CRD established and served", func() string {
		m = mapper()
		if _, err := m.RESTMapping(schema.GroupKind{Group: "fid.example", Kind: "Widget"}, "v1"); err != nil {
			return err.Error()
		}
		return ""
	})
	data, err = os.ReadFile(filepath.Join("testdata", "fidelity", "widgets.json"))
	if err != nil {
		t.Fatal(err)
	}
	var widgets []json.RawMessage
	if err := json.Unmarshal(data, &widgets); err != nil {
		t.Fatal(err)
	}
	for _, w := range widgets {
		create(m, w)
	}
}

const (
	acceptPartial     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	acceptPartialList = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	acceptTable       = "application/json;as=Table;g=meta.k8s.io;v=v1"
)

// checkFidelity compares what fleetwatch serves of resource r at base (a cluster's
// prefix) with what the apiserver serves, until they agree or 30 s have passed (an
// object that changed in between, a Lease renewed, is compared again), and returns the
// number of objects compared.
func checkFidelity(t *testing.T, c *testenv.Cluster, base string, r fidResource, metadata bool, round string) int {
	t.Helper()
	ctx := t.Context()
	n := 0
	eventually(t, 30*time.Second, fmt.Sprintf("%s: %s served as the apiserver serves it", round, r.configName()), func() string {
		truth, err := apiserverObjects(ctx, c, r, metadata)
		if err != nil {
			return err.Error()
		}
		n = len(truth)
		var diffs []string
		report := func(format string, args ...any) { diffs = append(diffs, fmt.Sprintf(format, args...)) }
		listAccept, getAccept := "application/json", "application/json"
		if metadata {
			listAccept, getAccept = acceptPartialList, acceptPartial
		}
		list, err := fetchJSON(ctx, base+r.listPath(), listAccept)
		if err != nil {
			return err.Error()
		}
		items, _ := list.(map[string]any)["items"].([]any)
		seen := map[string]bool{}
		for _, it := range items {
			o := servedObject(it)
			key := objectKey(o)
			seen[key] = true
			want, ok := truth[key]
			if !ok {
				report("list: %s is not the apiserver's", key)
				continue
			}
			if d := fidelityDiff("", o, want); len(d) > 0 {
				report("list: %s differs at %s", key, strings.Join(d, ", "))
			}
			// The same object by a GET.
			md := o["metadata"].(map[string]any)
			ns, _ := md["namespace"].(string)
			got, err := fetchJSON(ctx, base+r.objectPath(ns, md["name"].(string)), getAccept)
			if err != nil {
				report("GET %s: %v", key, err)
				continue
			}
			if d := fidelityDiff("", servedObject(got), want); len(d) > 0 {
				report("GET: %s differs at %s", key, strings.Join(d, ", "))
			}
		}
		for key := range truth {
			if !seen[key] {
				report("list: %s is missing", key)
			}
		}
		// A Table's rows hold the objects (includeObject=Object), or, metadata-only, their
		// metadata as PartialObjectMetadata (includeObject=Metadata).
		{
			include := "Object"
			if metadata {
				include = "Metadata"
			}
			table, err := fetchJSON(ctx, base+r.listPath()+"?includeObject="+include, acceptTable)
			if err != nil {
				return err.Error()
			}
			rows, _ := table.(map[string]any)["rows"].([]any)
			if len(rows) != len(truth) {
				report("Table: %d rows, want %d", len(rows), len(truth))
			}
			for _, row := range rows {
				o := servedObject(row.(map[string]any)["object"])
				if d := fidelityDiff("", o, truth[objectKey(o)]); len(d) > 0 {
					report("Table: %s differs at %s", objectKey(o), strings.Join(d, ", "))
				}
			}
		}
		events, err := initialEvents(ctx, base+r.listPath()+"?watch=1", getAccept, len(truth))
		if err != nil {
			return err.Error()
		}
		for _, o := range events {
			if d := fidelityDiff("", o, truth[objectKey(o)]); len(d) > 0 {
				report("watch: %s differs at %s", objectKey(o), strings.Join(d, ", "))
			}
		}
		if len(diffs) > 10 {
			diffs = append(diffs[:10], fmt.Sprintf("and %d more", len(diffs)-10))
		}
		return strings.Join(diffs, "\n")
	})
	return n
}

// apiserverObjects returns the objects of r as the apiserver serves them to a GET, by
// objectKey: from its list (metadata-only: as PartialObjectMetadataList), with the kind
// and apiVersion that a GET gives them, and without their managedFields, which
// fleetwatch drops by default.
func apiserverObjects(ctx context.Context, c *testenv.Cluster, r fidResource, metadata bool) (map[string]map[string]any, error) {
	accept, kind, apiVersion := "application/json", r.kind, r.gvr.GroupVersion().String()
	if metadata {
		accept, kind, apiVersion = acceptPartialList, "PartialObjectMetadata", "meta.k8s.io/v1"
	}
	raw, err := c.Clientset().CoreV1().RESTClient().Get().AbsPath(r.listPath()).SetHeader("Accept", accept).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	list, err := decodeNumbers(raw)
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]any{}
	items, _ := list.(map[string]any)["items"].([]any)
	for _, it := range items {
		o := it.(map[string]any)
		if _, ok := o["kind"]; !ok {
			o["kind"] = kind
		}
		if _, ok := o["apiVersion"]; !ok {
			o["apiVersion"] = apiVersion
		}
		delete(o["metadata"].(map[string]any), "managedFields")
		out[objectKey(o)] = o
	}
	return out, nil
}

// servedObject is o, an object that fleetwatch served, without what it adds (served);
// one served without the cluster annotation gets a field that no apiserver serves.
func servedObject(o any) map[string]any {
	m, _ := o.(map[string]any)
	md, _ := m["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if ann[server.ClusterAnnotation] == nil {
		m["without the annotation "+server.ClusterAnnotation] = true
	}
	if rv, ok := ann[server.ResourceVersionAnnotation]; ok {
		md["resourceVersion"] = rv
	}
	delete(ann, server.ClusterAnnotation)
	delete(ann, server.ResourceVersionAnnotation)
	if ann != nil && len(ann) == 0 {
		delete(md, "annotations")
	}
	return m
}

// objectKey is namespace/name of o.
func objectKey(o map[string]any) string {
	md, _ := o["metadata"].(map[string]any)
	ns, _ := md["namespace"].(string)
	name, _ := md["name"].(string)
	return ns + "/" + name
}

// fetchJSON gets url with accept, which must answer 200, and decodes its JSON with its
// numbers as written.
func fetchJSON(ctx context.Context, url, accept string) (any, error) {
	res, err := getOK(ctx, url, accept)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(res.Body); err != nil {
		return nil, err
	}
	return decodeNumbers(buf.Bytes())
}

// getOK sends a GET of url with accept, and returns its response if it answers 200; the
// caller closes its body.
func getOK(ctx context.Context, url, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusOK {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(res.Body)
		res.Body.Close()
		return nil, fmt.Errorf("GET %s (%s): %d %s", url, accept, res.StatusCode, buf.Bytes())
	}
	return res, nil
}

// decodeNumbers decodes JSON with its numbers as json.Numbers.
func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %.200s", err, b)
	}
	return v, nil
}

// initialEvents opens a watch at url (no resourceVersion: the current state first) and
// returns the objects of its first n events, which must be ADDED.
func initialEvents(ctx context.Context, url, accept string, n int) ([]map[string]any, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	res, err := getOK(ctx, url, accept)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	dec := json.NewDecoder(res.Body)
	dec.UseNumber()
	var out []map[string]any
	for len(out) < n {
		var ev struct {
			Type   string `json:"type"`
			Object any    `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			return nil, fmt.Errorf("watch %s after %d of %d events: %w", url, len(out), n, err)
		}
		if ev.Type != "ADDED" {
			return nil, fmt.Errorf("watch %s: a %s event among the initial ones", url, ev.Type)
		}
		out = append(out, servedObject(ev.Object))
	}
	return out, nil
}

// fidelityDiff returns the paths at which got differs from want, JSON decoded with
// json.Numbers: maps with the same keys (a key absent is not a key with null), arrays of
// the same length, strings and booleans equal, and numbers equal: an integer (written
// without a fraction or an exponent) as an integer of the same value, exactly, and any
// other as a float64 of the same value and sign.
func fidelityDiff(path string, got, want any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s (%s, want an object)", path, shortJSON(got))}
		}
		var out []string
		for k := range w {
			if _, ok := g[k]; !ok {
				out = append(out, path+"."+k+" (missing)")
				continue
			}
			out = append(out, fidelityDiff(path+"."+k, g[k], w[k])...)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				out = append(out, fmt.Sprintf("%s.%s (%s, not the apiserver's)", path, k, shortJSON(g[k])))
			}
		}
		slices.Sort(out)
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s (%s, want %s)", path, shortJSON(got), shortJSON(want))}
		}
		var out []string
		for i := range w {
			out = append(out, fidelityDiff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i])...)
		}
		return out
	case json.Number:
		g, ok := got.(json.Number)
		if !ok || !sameNumber(g, w) {
			return []string{fmt.Sprintf("%s (%s, want %s)", path, shortJSON(got), w)}
		}
		return nil
	default:
		if got != want {
			return []string{fmt.Sprintf("%s (%s, want %s)", path, shortJSON(got), shortJSON(want))}
		}
		return nil
	}
}

// sameNumber reports whether got is want: the same integer if want is written as one,
// else the same float64, sign included.
func sameNumber(got, want json.Number) bool {
	integer := func(n json.Number) bool { return !strings.ContainsAny(n.String(), ".eE") }
	if integer(want) {
		if !integer(got) {
			return false
		}
		g, ok1 := new(big.Int).SetString(got.String(), 10)
		w, ok2 := new(big.Int).SetString(want.String(), 10)
		return ok1 && ok2 && g.Cmp(w) == 0
	}
	g, err1 := strconv.ParseFloat(got.String(), 64)
	w, err2 := strconv.ParseFloat(want.String(), 64)
	return err1 == nil && err2 == nil && g == w && math.Signbit(g) == math.Signbit(w)
}

// shortJSON is v as JSON, cut at 80 bytes.
func shortJSON(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:80]) + "…"
	}
	return string(b)
}
