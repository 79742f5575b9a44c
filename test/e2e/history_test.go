package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// historySecret is the value of a Secret that the clusters hold: no answer of the
// history may hold it.
const historySecret = "aGlzdG9yeS1zZWNyZXQtdmFsdWU="

// getHistory gets base+path, expecting 200 and no Secret value, and decodes it into v.
func getHistory(t *testing.T, base, path string, v any) {
	t.Helper()
	res, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, res.StatusCode, body)
	}
	if strings.Contains(string(body), historySecret) || strings.Contains(string(body), "s3cr3t") {
		t.Fatalf("GET %s: a Secret's value in the answer: %s", path, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// fleetChanges reads every page of the changes that query (which has no continue)
// selects, limit items a page, and returns "type cluster kind ns/name" of each.
func fleetChanges(t *testing.T, base, query string, limit int) []string {
	t.Helper()
	var out []string
	next := ""
	for range 1000 {
		p := fmt.Sprintf("/apis/fleetwatch.io/v1alpha1/changes?%s&limit=%d", query, limit)
		if next != "" {
			p += "&continue=" + url.QueryEscape(next)
		}
		var page v1alpha1.ChangeList
		getHistory(t, base, p, &page)
		if len(page.Items) > limit {
			t.Fatalf("GET %s: %d items, limit %d", p, len(page.Items), limit)
		}
		for _, c := range page.Items {
			out = append(out, c.Type+" "+c.Cluster+" "+c.Kind+" "+c.Namespace+"/"+c.Name)
		}
		if next = page.Metadata.Continue; next == "" {
			return out
		}
	}
	t.Fatal("more than 1000 pages")
	return nil
}

// TestDaemonHistory runs `fleetwatch serve` with history.enabled against two real
// clusters, changes objects there, and reads the changes back through the history API:
// filtered by the search grammar and paged, and an object's history with its field
// diffs; a Secret's values never come out.
func TestDaemonHistory(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Names: []string{"east", "west"}})
	ctx := t.Context()
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 2, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
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
  - name: deployments.apps
  - name: configmaps
  - name: secrets
cache:
  keepSecretData: true
snapshot:
  path: %q
  interval: 100ms
history:
  enabled: true
server:
  address: 127.0.0.1:%d
`, kubeconfig, filepath.Join(dir, "fleetwatch.db"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)
	since := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)
	// The log holds the initial lists once the snapshot committed them: the last seq
	// after every seeded Deployment's Added is where the test's own changes start.
	var cursor uint64
	eventually(t, 30*time.Second, "the seeded Deployments in the log", func() string {
		var page v1alpha1.ChangeList
		getHistory(t, base, "/apis/fleetwatch.io/v1alpha1/changes?limit=500&type=Added&q="+url.QueryEscape("kind:Deployment"), &page)
		if len(page.Items) < 8 || page.Metadata.Continue != "" {
			return fmt.Sprintf("%d Added Deployments", len(page.Items))
		}
		cursor = page.Items[len(page.Items)-1].Seq
		return ""
	})

	east, west := env.Clusters[0], env.Clusters[1]
	scale := []byte(`{"spec":{"replicas":3}}`)
	if _, err := east.Clientset().AppsV1().Deployments("shop").Patch(ctx, "api", types.MergePatchType, scale, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := west.Clientset().CoreV1().ConfigMaps("shop")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hist-cm", Labels: map[string]string{"app": "hist"}}, Data: map[string]string{"mode": "a"}}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Each change seen before the next, so that none coalesces with another.
	waitChanges := func(what, query string, n int) {
		t.Helper()
		eventually(t, 30*time.Second, what, func() string {
			if got := fleetChanges(t, base, query, 100); len(got) < n {
				return fmt.Sprintf("%q", got)
			}
			return ""
		})
	}
	cmQuery := "since=" + url.QueryEscape(since) + "&q=" + url.QueryEscape("hist-cm kind:ConfigMap")
	waitChanges("the ConfigMap's creation", cmQuery, 1)
	if _, err := cms.Patch(ctx, "hist-cm", types.MergePatchType, []byte(`{"data":{"mode":"b"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitChanges("the ConfigMap's change", cmQuery, 2)
	if err := cms.Delete(ctx, "hist-cm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	secrets := east.Clientset().CoreV1().Secrets("shop")
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hist-secret", Labels: map[string]string{"app": "hist"}}, Data: map[string][]byte{"password": []byte("s3cr3t-1")}}
	if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secQuery := "since=" + url.QueryEscape(since) + "&q=" + url.QueryEscape("hist-secret")
	waitChanges("the Secret's creation", secQuery, 1)
	if _, err := secrets.Patch(ctx, "hist-secret", types.MergePatchType, []byte(`{"data":{"password":"`+historySecret+`"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("changes filtered and paged", func(t *testing.T) {
		want := []string{"Added west ConfigMap shop/hist-cm", "Modified west ConfigMap shop/hist-cm", "Deleted west ConfigMap shop/hist-cm"}
		eventually(t, 30*time.Second, "the ConfigMap's changes, by pages of 1", func() string {
			if got := fleetChanges(t, base, cmQuery, 1); !slices.Equal(got, want) {
				return fmt.Sprintf("\n got %q\nwant %q", got, want)
			}
			return ""
		})
		deploys := fleetChanges(t, base, fmt.Sprintf("after=%d&q=", cursor)+url.QueryEscape("cluster:ea* kind:Deployment ns:shop"), 2)
		if !slices.Equal(deploys, []string{"Modified east Deployment shop/api"}) {
			t.Errorf("east's Deployments in shop after the seeded ones: %q", deploys)
		}
		// Every change of the seeded objects, read by pages of 7, is every change read
		// at once, and a cluster's prefix serves its own only.
		all := fleetChanges(t, base, "type=Added", 500)
		if paged := fleetChanges(t, base, "type=Added", 7); !slices.Equal(paged, all) || len(all) < 10 {
			t.Errorf("pages of 7: %d changes, at once %d", len(paged), len(all))
		}
		var page v1alpha1.ChangeList
		getHistory(t, base, "/clusters/west/apis/fleetwatch.io/v1alpha1/changes?limit=500", &page)
		for _, c := range page.Items {
			if c.Cluster != "west" {
				t.Errorf("west's changes hold one of %s", c.Cluster)
			}
		}
		res, err := http.Get(base + "/apis/fleetwatch.io/v1alpha1/changes?since=yesterday")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusBadRequest {
			t.Errorf("since=yesterday: %d, want 400", res.StatusCode)
		}
	})

	t.Run("an object's history with its diffs", func(t *testing.T) {
		var h v1alpha1.ObjectHistory
		getHistory(t, base, "/clusters/east/apis/fleetwatch.io/v1alpha1/history?group=apps&version=v1&resource=deployments&namespace=shop&name=api", &h)
		if h.Object.Kind != "Deployment" || len(h.Items) < 2 {
			t.Fatalf("history: %+v", h)
		}
		first, last := h.Items[0], h.Items[len(h.Items)-1]
		if first.Type != "Added" || len(first.Fields) == 0 {
			t.Errorf("the first step: %+v", first)
		}
		i := slices.IndexFunc(last.Fields, func(f v1alpha1.FieldChange) bool { return f.Path == ".spec.replicas" })
		if last.Type != "Modified" || i < 0 || fmt.Sprint(last.Fields[i].Old) != "1" || fmt.Sprint(last.Fields[i].New) != "3" {
			t.Errorf("the last step: %+v; want .spec.replicas from 1 to 3", last)
		}
		for _, f := range last.Fields {
			if strings.HasPrefix(f.Path, ".metadata.managedFields") || f.Path == ".metadata.resourceVersion" {
				t.Errorf("noise in the diff: %+v", f)
			}
		}
		var cm v1alpha1.ObjectHistory
		getHistory(t, base, "/clusters/west/apis/fleetwatch.io/v1alpha1/history?version=v1&resource=configmaps&namespace=shop&name=hist-cm&limit=1", &cm)
		if len(cm.Items) != 1 || cm.Metadata.Continue == "" {
			t.Fatalf("the ConfigMap's first page: %+v", cm)
		}
		var rest v1alpha1.ObjectHistory
		getHistory(t, base, "/clusters/west/apis/fleetwatch.io/v1alpha1/history?version=v1&resource=configmaps&namespace=shop&name=hist-cm&continue="+url.QueryEscape(cm.Metadata.Continue), &rest)
		if len(rest.Items) != 2 || rest.Items[0].Type != "Modified" || rest.Items[1].Type != "Deleted" {
			t.Fatalf("the ConfigMap's next page: %+v", rest.Items)
		}
		if b, _ := json.Marshal(rest.Items[0].Fields); !strings.Contains(string(b), `{"path":".data.mode","old":"a","new":"b"}`) {
			t.Errorf("the ConfigMap's change: %s", b)
		}
	})

	t.Run("a Secret's values never", func(t *testing.T) {
		eventually(t, 30*time.Second, "the Secret's two steps", func() string {
			var h v1alpha1.ObjectHistory
			getHistory(t, base, "/clusters/east/apis/fleetwatch.io/v1alpha1/history?version=v1&resource=secrets&namespace=shop&name=hist-secret", &h)
			if len(h.Items) != 2 {
				return fmt.Sprintf("%+v", h.Items)
			}
			for _, st := range h.Items {
				if len(st.Fields) != 0 {
					t.Errorf("a Secret's step has fields: %+v", st)
				}
			}
			return ""
		})
		for _, q := range []string{"hist-secret", "kind:Secret", "l:app=hist", "image:s3cr3t"} {
			fleetChanges(t, base, "q="+url.QueryEscape(q), 3) // getHistory fails on a value
		}
	})
}
