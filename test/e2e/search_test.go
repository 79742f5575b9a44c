package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/server"
)

var (
	gadgetsGVR = schema.GroupVersionResource{Group: "gadgets.example.test", Version: "v1", Resource: "gadgets"}
	crdsGVR    = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// installGadgetCRD installs a CRD with additionalPrinterColumns and a schema that
// kubectl explain can describe, and waits until it is served.
func installGadgetCRD(ctx context.Context, t *testing.T, c *testenv.Cluster) {
	t.Helper()
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": "gadgets.gadgets.example.test"},
		"spec": map[string]any{
			"group": "gadgets.example.test",
			"scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"additionalPrinterColumns": []any{
					map[string]any{"name": "Color", "type": "string", "jsonPath": ".spec.color"},
					map[string]any{"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
					map[string]any{"name": "Gadget-Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
				},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec": map[string]any{
							"type":        "object",
							"description": "Spec of a gadget.",
							"properties": map[string]any{
								"color": map[string]any{"type": "string", "description": "The colour the gadget is painted in."},
								"size":  map[string]any{"type": "integer", "description": "How many hands the gadget needs."},
							},
						},
					},
				}},
			}},
		},
	}}
	if _, err := c.Dynamic().Resource(crdsGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Dynamic().Resource(gadgetsGVR).Namespace("shop").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("gadgets not served in %s: %v", c.Name, err)
	}
}

func createGadget(ctx context.Context, t *testing.T, c *testenv.Cluster, name, color string, size int64) {
	t.Helper()
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gadgets.example.test/v1", "kind": "Gadget",
		"metadata": map[string]any{"namespace": "shop", "name": name},
		"spec":     map[string]any{"color": color, "size": size},
	}}
	if _, err := c.Dynamic().Resource(gadgetsGVR).Namespace("shop").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// searchFleet asks the daemon's search API, every page, and returns cluster|Kind|ns/name
// of every item, sorted, with the total of the first page.
func searchFleet(t *testing.T, base, query string) ([]string, server.SearchResult) {
	t.Helper()
	var out []string
	var first server.SearchResult
	cont := ""
	for page := 0; ; page++ {
		u := base + "/apis/fleetwatch.io/v1alpha1/search?limit=7&" + query
		if cont != "" {
			u += "&continue=" + url.QueryEscape(cont)
		}
		res, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("search %s: %d %s", query, res.StatusCode, body)
		}
		var sr server.SearchResult
		if err := json.Unmarshal(body, &sr); err != nil {
			t.Fatal(err)
		}
		if page == 0 {
			first = sr
		}
		for _, it := range sr.Items {
			out = append(out, it.Cluster+"|"+it.Kind+"|"+it.Namespace+"/"+it.Name)
		}
		if cont = sr.Metadata.Continue; cont == "" {
			break
		}
	}
	sort.Strings(out)
	return out, first
}

// searchTruth lists a resource in every cluster and returns cluster|kind|ns/name of the
// objects that keep says to keep, sorted.
func searchTruth(ctx context.Context, t *testing.T, clusters []*testenv.Cluster, gvr schema.GroupVersionResource, kind string, keep func(*unstructured.Unstructured) bool) []string {
	t.Helper()
	var out []string
	for _, c := range clusters {
		list, err := c.Dynamic().Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if keep == nil || keep(&list.Items[i]) {
				out = append(out, c.Name+"|"+kind+"|"+list.Items[i].GetNamespace()+"/"+list.Items[i].GetName())
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestDaemonSearchExplainColumns runs `fleetwatch serve` against two real clusters: the
// search API finds what the apiservers hold, follows changes and deletes, and after a
// kill -9 and a warm restart still equals the servers' truth; kubectl explain works
// through a cluster's prefix, and kubectl get prints a CRD's printer columns.
func TestDaemonSearchExplainColumns(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"east", "west"}})
	ctx := t.Context()
	for i, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 2 + i, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
		installGadgetCRD(ctx, t, c)
	}
	createGadget(ctx, t, env.Clusters[0], "anvil", "red", 3)
	createGadget(ctx, t, env.Clusters[1], "bellows", "green", 5)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: pods
  - name: deployments.apps
  - name: gadgets.v1.gadgets.example.test
snapshot:
  path: %q
  interval: 100ms
server:
  address: 127.0.0.1:%d
`, kubeconfig, filepath.Join(dir, "fleetwatch.db"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)

	// equalTruth waits until each query finds what the apiservers hold.
	equalTruth := func(t *testing.T) {
		t.Helper()
		checks := []struct {
			query string
			truth func() []string
		}{
			{"q=" + url.QueryEscape("kind:Deployment"), func() []string {
				return searchTruth(ctx, t, env.Clusters, deploymentsGVR, "Deployment", nil)
			}},
			{"q=" + url.QueryEscape("web kind:pods"), func() []string {
				return searchTruth(ctx, t, env.Clusters, podsGVR, "Pod", func(u *unstructured.Unstructured) bool { return strings.Contains(u.GetName(), "web") })
			}},
			{"q=" + url.QueryEscape("image:proxy:2.3 kind:pods l:tier=frontend"), func() []string {
				return searchTruth(ctx, t, env.Clusters, podsGVR, "Pod", func(u *unstructured.Unstructured) bool { return u.GetLabels()["tier"] == "frontend" })
			}},
			{"q=" + url.QueryEscape("kind:gadgets"), func() []string {
				return searchTruth(ctx, t, env.Clusters, gadgetsGVR, "Gadget", nil)
			}},
		}
		for _, c := range checks {
			var got, want []string
			eventually(t, 30*time.Second, "search "+c.query+" equals the servers' truth", func() string {
				got, _ = searchFleet(t, base, c.query)
				want = c.truth()
				if slices.Equal(got, want) {
					return ""
				}
				return fmt.Sprintf("\n got %q\nwant %q", got, want)
			})
		}
	}

	t.Run("search finds the objects of every cluster", func(t *testing.T) {
		equalTruth(t)
		got, first := searchFleet(t, base, "q="+url.QueryEscape("api* ns:shop"))
		want := []string{"east|Deployment|shop/api", "east|Pod|shop/api-0", "west|Deployment|shop/api", "west|Pod|shop/api-0"}
		if !slices.Equal(got, want) {
			t.Errorf("api* ns:shop: %q", got)
		}
		if first.Total != 4 || first.Counts.Clusters["east"] != 2 || first.Counts.Clusters["west"] != 2 ||
			first.Counts.Kinds["Pod"] != 2 || first.Counts.Kinds["Deployment.apps"] != 2 {
			t.Errorf("total %d, counts %+v", first.Total, first.Counts)
		}
		if it := first.Items[0]; it.Cluster != "east" || it.Kind != "Deployment" || it.UID == "" || it.ResourceVersion == "" ||
			!slices.Equal(it.Images, []string{"registry.example/api:1.0", "registry.example/proxy:2.3"}) {
			t.Errorf("first item: %+v", it)
		}
	})

	t.Run("search follows changes and deletes", func(t *testing.T) {
		east, west := env.Clusters[0], env.Clusters[1]
		patch := []byte(`{"metadata":{"labels":{"release":"canary"}}}`)
		if _, err := east.Clientset().AppsV1().Deployments("payments").Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := west.Clientset().CoreV1().Pods("shop").Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the change and the delete are found", func() string {
			canary, _ := searchFleet(t, base, "q="+url.QueryEscape("l:release=canary"))
			web0, _ := searchFleet(t, base, "q="+url.QueryEscape("web-0 ns:shop"))
			if slices.Equal(canary, []string{"east|Deployment|payments/web"}) && slices.Equal(web0, []string{"east|Pod|shop/web-0"}) {
				return ""
			}
			return fmt.Sprintf("canary %q, web-0 %q", canary, web0)
		})
		equalTruth(t)
	})

	t.Run("search after kill -9 and a warm restart", func(t *testing.T) {
		_ = d.signal(t, syscall.SIGKILL) // the exit error of a kill
		// Changes while the daemon is down: the warm restart resumes the watches.
		if err := env.Clusters[0].Clientset().CoreV1().Pods("payments").Delete(ctx, "api-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
		createGadget(ctx, t, env.Clusters[1], "crank", "blue", 1)
		d.start(t)
		waitReadyz(t, http.DefaultClient, base)
		equalTruth(t)
		if got, _ := searchFleet(t, base, "q="+url.QueryEscape("api-0 cluster:east")); !slices.Equal(got, []string{"east|Pod|shop/api-0"}) {
			t.Errorf("api-0 of east after its delete in payments: %q", got)
		}
	})

	t.Run("search while a cluster is paused, then resumed", func(t *testing.T) {
		west := env.Clusters[1]
		if err := west.PauseAPIServer(); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = west.ResumeAPIServer()
			}
		}()
		// Answered from the index, without asking the paused cluster.
		start := time.Now()
		got, _ := searchFleet(t, base, "q="+url.QueryEscape("kind:Gadget"))
		if want := []string{"east|Gadget|shop/anvil", "west|Gadget|shop/bellows", "west|Gadget|shop/crank"}; !slices.Equal(got, want) || time.Since(start) > 5*time.Second {
			t.Errorf("while west is paused (%v): %q", time.Since(start), got)
		}
		if err := west.ResumeAPIServer(); err != nil {
			t.Fatal(err)
		}
		resumed = true
		createGadget(ctx, t, west, "dynamo", "white", 8)
		equalTruth(t)
	})

	t.Run("kubectl explain through a cluster's prefix", func(t *testing.T) {
		out := kubectl(t, "--server", base+"/clusters/east", "explain", "pods.spec.containers")
		if !strings.Contains(out, "KIND:") || !strings.Contains(out, "Pod") || !strings.Contains(out, "image") {
			t.Errorf("explain pods.spec.containers:\n%.2000s", out)
		}
		out = kubectl(t, "--server", base+"/clusters/west", "explain", "gadgets.spec")
		if !strings.Contains(out, "How many hands the gadget needs.") || !strings.Contains(out, "gadgets.example.test") {
			t.Errorf("explain gadgets.spec:\n%.2000s", out)
		}
		out = kubectl(t, "--server", base+"/clusters/east", "explain", "deployments.spec.replicas", "--output", "plaintext-openapiv2")
		if !strings.Contains(out, "replicas") {
			t.Errorf("explain with OpenAPI v2:\n%.2000s", out)
		}
		res, err := http.Get(base + "/clusters/*/openapi/v3")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("/clusters/*/openapi/v3: %d", res.StatusCode)
		}
	})

	t.Run("kubectl get prints the printer columns of a CRD", func(t *testing.T) {
		out := kubectl(t, "--server", base+"/clusters/*", "get", "gadgets", "-A")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		header := strings.Fields(lines[0])
		if want := []string{"NAMESPACE", "CLUSTER", "NAME", "COLOR", "SIZE", "GADGET-AGE"}; !slices.Equal(header, want) {
			t.Fatalf("header %q, want %q\n%s", header, want, out)
		}
		var rows []string
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			rows = append(rows, strings.Join(f[:5], " "))
		}
		want := []string{"shop east anvil red 3", "shop west bellows green 5", "shop west crank blue 1", "shop west dynamo white 8"}
		if !slices.Equal(rows, want) {
			t.Errorf("rows %q, want %q\n%s", rows, want, out)
		}
	})
}
