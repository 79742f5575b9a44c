package browser

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// daemonConfig is the config of both daemons, with more keys of server: after it.
func daemonConfig(kubeconfig, snapshot, server string) func(port int) string {
	return func(port int) string {
		return fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: pods
  - name: deployments.apps
  - name: services
  - name: secrets
health:
  interval: 2s
  timeout: 1s
snapshot:
  path: %q
  interval: 100ms
server:
  address: 127.0.0.1:%d
`, kubeconfig, snapshot, port) + server
	}
}

// objectURL is the page's view of an object.
func objectURL(base, cluster, group, version, resource, kind, namespace, name string) string {
	q := url.Values{"view": {"object"}, "cluster": {cluster}, "group": {group}, "version": {version}, "resource": {resource},
		"kind": {kind}, "namespace": {namespace}, "name": {name}}
	return base + "/?" + q.Encode()
}

// TestPage drives the page of `fleetwatch serve` in a real headless Chromium, against
// three real clusters: a daemon on loopback without authentication, and one with a token
// file, one of whose tokens may read one cluster only.
func TestPage(t *testing.T) {
	env := testenv.New(t, testenv.Options{Names: []string{"prod-eu", "prod-us", "staging"}})
	ctx := t.Context()
	bin := buildBinary(t)
	for _, c := range env.Clusters {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 2, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	// A Secret whose value must never reach the page, in every form a value takes.
	secretValue := "s3cret-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + fmt.Sprint(time.Now().UnixNano())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-credentials", Labels: map[string]string{"app": "db"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"stringData":{"password":"` + secretValue + `"}}`}},
		Data:       map[string][]byte{"password": []byte(secretValue)},
		StringData: map[string]string{"token": secretValue},
	}
	if _, err := env.Clusters[0].Clientset().CoreV1().Secrets("shop").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secretForms := []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue)), base64.RawStdEncoding.EncodeToString([]byte(secretValue))}

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters...); err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("admin-token user=admin\neu-token user=eu clusters=prod-eu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// prod-us is also the home cluster of delegated authentication: a ServiceAccount of it
	// may read prod-us only.
	homeKubeconfig := filepath.Join(dir, "home.kubeconfig")
	if err := env.WriteKubeconfig(homeKubeconfig, env.Clusters[1]); err != nil {
		t.Fatal(err)
	}
	saToken := grantCluster(t, env.Clusters[1], "us-viewer", "prod-us")
	open := startDaemon(t, bin, "open", daemonConfig(kubeconfig, filepath.Join(dir, "open.db"), ""))
	authed := startDaemon(t, bin, "authed", daemonConfig(kubeconfig, filepath.Join(dir, "authed.db"), fmt.Sprintf(`  auth:
    tokenFile: %q
    delegated: {enabled: true, kubeconfig: %q, audiences: [fleetwatch]}
`, tokens, homeKubeconfig)))
	open.waitReady(t)
	authed.waitReady(t)

	browser := newBrowser(t)
	page := newTab(t, browser)

	t.Run("the fleet table shows every cluster", func(t *testing.T) {
		page.navigate(t, open.base+"/")
		// /readyz passed: every cluster has synced, and its status says so at once, not
		// at the next health probe (30s).
		page.wait(t, 10*time.Second, "every cluster Synced", `
			const rows = [...document.querySelectorAll('#fleet tbody tr')];
			const got = rows.map(r => r.dataset.cluster + ' ' + r.querySelector('.phase').textContent).join(', ');
			return got === 'prod-eu Synced, prod-us Synced, staging Synced' ? true : document.getElementById('fleet').innerText;`)
		for _, c := range env.Clusters {
			row := fmt.Sprintf(`document.querySelector('#fleet tr[data-cluster=%q]')`, c.Name)
			if got := eval[string](t, page, row+`.querySelector('.server').textContent`); got != c.Server() {
				t.Errorf("%s: server %q, want %q", c.Name, got, c.Server())
			}
			// Objects per resource, as the server counts them.
			var cl struct {
				Status struct {
					Objects   int
					Resources []struct {
						Name  string
						Count int
					}
				}
			}
			if err := json.Unmarshal(open.get(t, "/apis/fleetwatch.io/v1alpha1/clusters/"+c.Name, ""), &cl); err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, r := range cl.Status.Resources {
				want = append(want, fmt.Sprintf("%s: %d", r.Name, r.Count))
			}
			page.wait(t, 5*time.Second, c.Name+" objects per resource", fmt.Sprintf(`
				const got = [...%s.querySelectorAll('.objects li')].map(li => li.textContent).join(', ');
				return got === %q ? true : got;`, row, strings.Join(want, ", ")))
			for _, sel := range []string{".synced time", ".lag"} {
				if got := eval[string](t, page, row+`.querySelector('`+sel+`')?.textContent ?? ''`); got == "" {
					t.Errorf("%s: no %s", c.Name, sel)
				}
			}
		}
		page.screenshot(t, "fleet")
	})

	eu, us := env.Clusters[0], env.Clusters[1]
	t.Run("an object's copies in other clusters show the field that differs", func(t *testing.T) {
		scale := func(c *testenv.Cluster, replicas int) {
			patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
			if _, err := c.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		scale(us, 5)
		page.navigate(t, objectURL(open.base, eu.Name, "apps", "v1", "deployments", "Deployment", "shop", "web"))
		page.wait(t, 10*time.Second, "the copies in prod-us and staging", `
			const rows = [...document.querySelectorAll('#others tbody tr')];
			const got = rows.map(r => r.dataset.cluster + ': ' + r.cells[2].textContent).join(', ');
			return got === 'prod-us: 1 field differs, staging: identical' ? true : got;`)
		if y := eval[string](t, page, `document.getElementById('yaml').textContent`); !strings.Contains(y, "name: web") || !strings.Contains(y, "replicas: 1") ||
			!strings.Contains(y, "fleetwatch.io/cluster: prod-eu") {
			t.Errorf("YAML of prod-eu's web:\n%s", y)
		}
		page.do(t, chromedp.Click(chromedp.CSS(`#others tr[data-cluster="prod-us"] button`)))
		page.wait(t, 5*time.Second, "the diff with prod-us", `
			const rows = [...document.querySelectorAll('#diff tbody tr')];
			const got = rows.map(r => [...r.cells].map(c => c.textContent).join(' | ')).join('; ');
			return got === 'spec.replicas | 1 | 5' ? true : got;`)
		page.screenshot(t, "object")

		// The other cluster's copy changes back while the page is open: the drift goes.
		scale(us, 1)
		page.wait(t, 5*time.Second, "prod-us identical again", `
			const got = document.querySelector('#others tr[data-cluster="prod-us"]').cells[2].textContent
				+ ' / ' + (document.getElementById('no-drift')?.textContent ?? 'diff shown');
			return got.startsWith('identical / None') ? true : got;`)
	})

	t.Run("a write to an apiserver appears on the open page within 2s", func(t *testing.T) {
		page.wait(t, 5*time.Second, "the watch", `return document.getElementById('watching').textContent.startsWith('Watching') ? true : document.getElementById('watching').textContent;`)
		patch := `{"metadata":{"labels":{"release":"r2"}},"spec":{"template":{"spec":{"containers":[{"name":"web","image":"registry.example/web:2.0"}]}}}}`
		if _, err := eu.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		page.wait(t, 2*time.Second, "the write on the page", `
			const y = document.getElementById('yaml').textContent;
			const c = document.getElementById('changes').textContent;
			if (!y.includes('release: r2') || !y.includes('image: registry.example/web:2.0')) return 'YAML without the write';
			if (!c.includes('MODIFIED') || !c.includes('metadata.labels.release') || !c.includes('registry.example/web:2.0')) return 'changes: ' + c;
			return true;`)
		t.Logf("the write was on the page %v after the apiserver answered it", time.Since(written).Round(time.Millisecond))
		// The copies elsewhere now differ from prod-eu by the label and the image.
		page.wait(t, 2*time.Second, "the new drift", `
			const got = document.querySelector('#others tr[data-cluster="staging"]').cells[2].textContent;
			return got === '2 fields differ' ? true : got;`)
	})

	t.Run("an open page goes on after a kill -9 of the daemon", func(t *testing.T) {
		page.navigate(t, "about:blank") // its console stays free of the refused connections
		survivor := newTab(t, browser)
		survivor.navigate(t, objectURL(open.base, eu.Name, "apps", "v1", "deployments", "Deployment", "shop", "web"))
		survivor.wait(t, 10*time.Second, "the watch", `return document.getElementById('watching').textContent.startsWith('Watching') ? true : document.getElementById('watching').textContent;`)
		open.kill()
		survivor.wait(t, 10*time.Second, "the page telling the daemon is gone", `
			const w = document.getElementById('watching').textContent;
			return w.startsWith('Reading the object failed') ? true : w;`)
		patch := `{"metadata":{"labels":{"release":"r3"}}}`
		if _, err := eu.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		open.start(t)
		open.waitReady(t)
		survivor.wait(t, 20*time.Second, "the write made while the daemon was down", `
			const y = document.getElementById('yaml').textContent;
			return y.includes('release: r3') && document.getElementById('watching').textContent.startsWith('Watching') ? true : y;`)
		sameAsServers(t, open, env, "apis/apps/v1/deployments", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"})
		if msgs := survivor.messages(func(m chromedp.ConsoleMessage) bool {
			// The broken watch and the refused connections, which the page retries.
			return m.Source == "network" && strings.Contains(m.Text, "net::ERR_")
		}); len(msgs) > 0 {
			t.Errorf("console of the page while the daemon restarted:\n%s", strings.Join(msgs, "\n"))
		}
	})

	t.Run("search finds objects in several clusters", func(t *testing.T) {
		page.navigate(t, open.base+"/")
		page.do(t, chromedp.SendKeys(chromedp.ID("q"), "web kind:Deployment"+kb.Enter))
		page.wait(t, 10*time.Second, "results in every cluster", `
			const rows = [...document.querySelectorAll('#results tbody tr')];
			const got = rows.map(r => r.cells[0].textContent + '/' + r.cells[2].textContent + '/' + r.cells[3].textContent).join(', ');
			const want = ['prod-eu', 'prod-us', 'staging'].flatMap(c => [c + '/payments/web', c + '/shop/web']).join(', ');
			return got === want ? true : got;`)
		if loc := eval[string](t, page, `location.search`); !strings.Contains(loc, "view=search") || !strings.Contains(loc, "q=web+kind%3ADeployment") {
			t.Errorf("the URL does not hold the query: %s", loc)
		}
		page.wait(t, 2*time.Second, "counts per cluster and kind", `
			const cl = [...document.querySelectorAll('#cluster-counts tbody tr')].map(r => r.textContent).join(', ');
			const k = [...document.querySelectorAll('#kind-counts tbody tr')].map(r => r.textContent).join(', ');
			return cl === 'prod-eu2, prod-us2, staging2' && k.startsWith('Deployment') && k.endsWith('6') ? true : cl + ' / ' + k;`)
		page.screenshot(t, "search")

		// A result opens the object; back returns to the search, forward to the object.
		page.do(t, chromedp.Click(chromedp.CSS(`#results tbody tr:nth-child(4) th a`)))
		page.wait(t, 5*time.Second, "the object of the result", `
			return document.querySelector('h2')?.textContent === 'Deployment shop/web' && document.getElementById('object-cluster')?.textContent === 'prod-us' ? true : document.querySelector('h2')?.textContent;`)
		page.do(t, chromedp.NavigateBack())
		page.wait(t, 5*time.Second, "back to the search", `
			return document.querySelectorAll('#results tbody tr').length === 6 && document.getElementById('q').value === 'web kind:Deployment' ? true : location.href;`)
		page.do(t, chromedp.NavigateForward())
		page.wait(t, 5*time.Second, "forward to the object", `
			return document.getElementById('object-cluster')?.textContent === 'prod-us' ? true : location.href;`)

		// Pages: 12 pods, 5 a page, each page a URL, in the order of cluster, kind,
		// namespace, name.
		page.navigate(t, open.base+"/?view=search&limit=5&q="+url.QueryEscape("kind:Pod"))
		var seen []string
		for i, caption := range []string{"Objects 1 to 5 of 12", "Objects 6 to 10 of 12", "Objects 11 to 12 of 12"} {
			page.wait(t, 10*time.Second, caption, fmt.Sprintf(`
				const got = document.querySelector('#results caption')?.textContent;
				return got === %q ? true : got;`, caption))
			seen = append(seen, eval[[]string](t, page, `[...document.querySelectorAll('#results tbody tr')].map(r => r.cells[0].textContent + '/' + r.cells[2].textContent + '/' + r.cells[3].textContent)`)...)
			if next := eval[bool](t, page, `!!document.querySelector('a[rel=next]')`); next != (i < 2) {
				t.Fatalf("page %d: a next page link: %v", i+1, next)
			}
			if i < 2 {
				page.do(t, chromedp.Click(chromedp.CSS(`a[rel=next]`)))
			}
		}
		var want []string
		for _, c := range env.Clusters {
			for _, ns := range []string{"payments", "shop"} {
				want = append(want, c.Name+"/"+ns+"/api-0", c.Name+"/"+ns+"/web-0")
			}
		}
		if !slices.Equal(seen, want) {
			t.Errorf("the pages list\n%v\nwant\n%v", seen, want)
		}
		page.do(t, chromedp.NavigateBack())
		page.wait(t, 5*time.Second, "back to page 2", `
			const got = document.querySelector('#results caption')?.textContent;
			return got === 'Objects 6 to 10 of 12' ? true : got;`)

		// A shared link opens the same search in a new page.
		page.navigate(t, open.base+"/?view=search&q="+url.QueryEscape("image:proxy ns:payments cluster:prod-*"))
		page.wait(t, 10*time.Second, "a search from a link", `
			const got = [...document.querySelectorAll('#results tbody tr')].map(r => r.cells[0].textContent + '/' + r.cells[1].textContent).sort().join(', ');
			const want = ['prod-eu', 'prod-us'].flatMap(c => [c + '/Deployment', c + '/Deployment', c + '/Pod', c + '/Pod']).join(', ');
			return got === want ? true : got;`)
	})

	t.Run("a search finds a Secret by its metadata", func(t *testing.T) {
		page.navigate(t, open.base+"/?view=search&q="+url.QueryEscape("kind:Secret label:app=db"))
		page.wait(t, 10*time.Second, "the secret in the results", `
			const got = [...document.querySelectorAll('#results tbody tr')].map(r => r.cells[0].textContent + '/' + r.cells[2].textContent + '/' + r.cells[3].textContent).join();
			return got === 'prod-eu/shop/db-credentials' ? true : got;`)
	})

	t.Run("the YAML the page writes reads back as the object", func(t *testing.T) {
		tricky := map[string]any{
			"strings": []any{"", "true", "False", "null", "~", "yes", "1", "1.0", "-1", ".5", "0x1f", "1e3", "a: b", "a:b", "- x", "#x", "x #y",
				"@x", "`x", "x ", " x", "'q'", `"q"`, "a\nb", "a\nb\n", "  indented\nx", "line\n\nafter blank\n", "trailing \nspace", "ünïcødé ✓",
				"{x}", "[x]", "*x", "&x", "!x", "%x", "|", ">", "?", ":", "x:", "https://example.com/x?y=1"},
			"numbers":                []any{0, -3, 2.5, 1e21},
			"bools":                  []any{true, false},
			"null":                   nil,
			"empty":                  map[string]any{},
			"emptyList":              []any{},
			"nested":                 []any{[]any{1, []any{}}, map[string]any{"a": map[string]any{}}, []any{map[string]any{"k": "v", "l": []any{"x"}}}},
			"app.kubernetes.io/name": "web", "key with space": 1, "true": "key", "": "empty key", "-dash": 1, "#hash": 1,
		}
		var objects []any
		objects = append(objects, tricky)
		var pods map[string]any
		if err := json.Unmarshal(open.get(t, "/clusters/*/api/v1/pods", ""), &pods); err != nil {
			t.Fatal(err)
		}
		objects = append(objects, pods["items"].([]any)...)
		in, err := json.Marshal(objects)
		if err != nil {
			t.Fatal(err)
		}
		out := eval[[]string](t, page, `import('/ui/yaml.js').then(m => `+string(in)+`.map(o => m.toYAML(o)))`)
		for i, y := range out {
			var got any
			if err := yaml.Unmarshal([]byte(y), &got); err != nil {
				t.Errorf("object %d: the YAML does not parse: %v\n%s", i, err, y)
				continue
			}
			want, _ := json.Marshal(objects[i])
			have, _ := json.Marshal(got)
			if string(want) != string(have) {
				t.Errorf("object %d reads back as\n%s\nwant\n%s\nfrom YAML:\n%s", i, have, want, y)
			}
		}
	})

	t.Run("every control is reachable by keyboard and labelled", func(t *testing.T) {
		for _, u := range []string{
			open.base + "/",
			objectURL(open.base, eu.Name, "apps", "v1", "deployments", "Deployment", "shop", "web"),
			open.base + "/?view=search&q=web",
		} {
			page.navigate(t, u)
			page.wait(t, 10*time.Second, "the view", `
				return document.querySelector('#fleet tbody tr, #results tbody tr, #others tbody tr button') ? true : 'empty';`)
			if strings.Contains(u, "object") {
				page.do(t, chromedp.Click(chromedp.CSS(`#others tr[data-cluster="staging"] button`)))
				page.wait(t, 5*time.Second, "the diff", `return document.getElementById('diff') ? true : 'no diff';`)
			}
			checkKeyboard(t, page, u)
		}
	})

	t.Run("a Secret's value never reaches the page", func(t *testing.T) {
		page.navigate(t, objectURL(open.base, eu.Name, "", "v1", "secrets", "Secret", "shop", "db-credentials"))
		page.wait(t, 10*time.Second, "the secret's view", `
			const y = document.getElementById('yaml')?.textContent ?? '';
			return y.includes('name: db-credentials') && document.getElementById('watching').textContent.startsWith('Watching') ? true : y;`)
		// A change of the value while the page watches.
		newValue := secretValue + "-rotated"
		secretForms = append(secretForms, newValue, base64.StdEncoding.EncodeToString([]byte(newValue)))
		rotate := fmt.Sprintf(`{"metadata":{"labels":{"rotated":"yes"}},"data":{"password":%q}}`, base64.StdEncoding.EncodeToString([]byte(newValue)))
		if _, err := eu.Clientset().CoreV1().Secrets("shop").Patch(ctx, "db-credentials", types.MergePatchType, []byte(rotate), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		page.wait(t, 5*time.Second, "the rotation on the page", `
			return document.getElementById('yaml').textContent.includes('rotated: "yes"') ? true : 'not yet';`)
		html := eval[string](t, page, `document.documentElement.outerHTML + [...document.querySelectorAll('input')].map(i => i.value).join()`)
		for _, s := range secretForms {
			if strings.Contains(html, s) {
				t.Errorf("the page's DOM holds the secret value %q", s)
			}
		}
		if got := page.received(secretForms...); len(got) > 0 {
			t.Errorf("responses to the page hold the secret's value: %v", got)
		}
		// The recording holds the watch's events: the rotation came through one.
		if got := page.received(`"rotated":"yes"`); len(got) == 0 {
			t.Error("no recorded response holds the rotation: the watch streams are not recorded")
		}
		n, size := page.responses()
		t.Logf("%d responses (%d bytes) to the page, none with the value", n, size)
	})

	t.Run("another site's page can neither read nor frame the fleet", func(t *testing.T) {
		// The attacker's page, on another origin, tries what a page can: read the API
		// across origins, frame the page, and read the page and the API under its own
		// name (DNS rebinding: attacker.test resolves to loopback).
		attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><title>attacker</title>
<iframe id="framed" src="%[1]s/"></iframe>
<script>
window.results = {};
fetch(%[1]q + "/clusters/*/api/v1/pods").then(r => r.text()).then(t => { results.crossOrigin = "read " + t.length; }, e => { results.crossOrigin = "refused: " + e; });
</script>`, open.base)
		}))
		defer attacker.Close()
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(attacker.URL, "http://"))
		evil := newTab(t, browser)
		evil.navigate(t, "http://attacker.test:"+port+"/")
		evil.wait(t, 10*time.Second, "the attacker's requests", `return results.crossOrigin ? true : JSON.stringify(results);`)
		if got := eval[string](t, evil, `results.crossOrigin`); !strings.HasPrefix(got, "refused") {
			t.Errorf("a page of another origin reads the API: %s", got)
		}
		eventually(t, 10*time.Second, "the frame refused", func() string {
			for _, m := range evil.messages(nil) {
				if strings.Contains(m, "frame-ancestors") {
					return ""
				}
			}
			return fmt.Sprint(evil.messages(nil))
		})
		// DNS rebinding: the daemon's own port under the attacker's name.
		_, daemonPort, _ := net.SplitHostPort(strings.TrimPrefix(open.base, "http://"))
		for _, p := range []string{"/", "/ui/app.js", "/clusters/*/api/v1/pods"} {
			evil.navigate(t, "http://attacker.test:"+daemonPort+p)
			body := eval[string](t, evil, `document.body.innerText`)
			if !strings.Contains(body, `"code":403`) || strings.Contains(body, "web-0") {
				t.Errorf("%s through a rebound name: %.300s", p, body)
			}
		}
	})

	// staging is paused now, and checked at the end: its health probe (health.interval
	// 2s, health.timeout 1s above) notices within its interval, while the tests of
	// authentication run.
	staging := env.Clusters[2]
	page.navigate(t, open.base+"/")
	if err := staging.PauseAPIServer(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = staging.ResumeAPIServer()
		}
	})

	t.Run("with a token file or delegated authentication, the page asks for a token", func(t *testing.T) {
		login := newTab(t, browser)
		login.navigate(t, authed.base+"/")
		login.wait(t, 10*time.Second, "the token form", `
			const label = document.querySelector('label[for=token]')?.textContent;
			return label === 'Bearer token' && document.activeElement?.id === 'token' ? true : 'no form: ' + document.getElementById('main').textContent;`)
		login.screenshot(t, "token")
		checkKeyboard(t, login, "the token form")

		login.do(t, chromedp.SendKeys(chromedp.ID("token"), "not-a-token"+kb.Enter))
		login.wait(t, 10*time.Second, "a wrong token refused", `
			const msg = document.getElementById('token-message')?.textContent ?? '';
			return msg.includes('refused') && document.getElementById('token') && !sessionStorage.getItem('fleetwatch.token') ? true : 'message: ' + msg;`)

		login.do(t, chromedp.SendKeys(chromedp.ID("token"), "eu-token"+kb.Enter))
		login.wait(t, 10*time.Second, "prod-eu only", `
			const got = [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.cluster).join();
			return got === 'prod-eu' ? true : 'clusters: ' + got;`)
		if got := eval[string](t, login, `sessionStorage.getItem('fleetwatch.token')`); got != "eu-token" {
			t.Errorf("sessionStorage holds %q", got)
		}
		// The token lasts for the tab: a reload asks for none.
		login.navigate(t, authed.base+"/?view=search&q=web")
		login.wait(t, 10*time.Second, "a search of prod-eu only", `
			const got = [...new Set([...document.querySelectorAll('#results tbody tr')].map(r => r.cells[0].textContent))].join();
			const counts = [...document.querySelectorAll('#cluster-counts tbody tr')].map(r => r.textContent).join();
			return got === 'prod-eu' && counts.startsWith('prod-eu') && !counts.includes(',') ? true : got + ' / ' + counts;`)
		// Another cluster's object, through a link, is refused.
		login.navigate(t, objectURL(authed.base, us.Name, "apps", "v1", "deployments", "Deployment", "shop", "web"))
		login.wait(t, 10*time.Second, "no copy outside prod-eu", `
			const y = document.getElementById('yaml')?.textContent ?? '';
			const others = document.querySelector('#others tbody')?.textContent ?? '';
			return y.startsWith('Not in cluster prod-us') && others.includes('prod-eu') && !others.includes('staging') ? true : y + ' / ' + others;`)
		if !strings.Contains(eval[string](t, login, `document.documentElement.outerHTML`), "prod-eu") {
			t.Error("the page does not show prod-eu")
		}
		// A token that stops being accepted asks again.
		if err := os.WriteFile(tokens, []byte("admin-token user=admin\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		login.navigate(t, authed.base+"/")
		login.wait(t, 20*time.Second, "the form again once the token is refused", `
			return document.getElementById('token-form') && (document.getElementById('token-message')?.textContent ?? '').includes('refused') ? true : 'no form';`)
		login.do(t, chromedp.SendKeys(chromedp.ID("token"), "admin-token"+kb.Enter))
		login.wait(t, 10*time.Second, "every cluster with the admin token", `
			const got = [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.cluster).join();
			return got === 'prod-eu,prod-us,staging' ? true : 'clusters: ' + got;`)

		// Delegated authentication: a ServiceAccount token of the home cluster, whose RBAC
		// grants prod-us only.
		login.do(t, chromedp.Click(chromedp.ID("sign-out")))
		login.wait(t, 10*time.Second, "the form after forgetting the token", `
			return document.getElementById('token-form') && !sessionStorage.getItem('fleetwatch.token') ? true : document.getElementById('main').textContent;`)
		login.do(t, chromedp.SendKeys(chromedp.ID("token"), saToken+kb.Enter))
		login.wait(t, 10*time.Second, "prod-us only, as the home cluster's RBAC grants", `
			const got = [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.cluster).join();
			return got === 'prod-us' ? true : 'clusters: ' + got;`)

		// The browser logs the 401s that the page answered with its form, and nothing else.
		if msgs := login.messages(func(m chromedp.ConsoleMessage) bool {
			return m.Source == "network" && strings.Contains(m.Text, "401 (Unauthorized)")
		}); len(msgs) > 0 {
			t.Errorf("console of the page with a token file:\n%s", strings.Join(msgs, "\n"))
		}
	})

	t.Run("a paused cluster shows as Unreachable", func(t *testing.T) {
		// Within a few of health.interval, where the default (30s) would take longer.
		page.wait(t, 15*time.Second, "staging Unreachable", `
			const got = [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.cluster + ' ' + r.querySelector('.phase').textContent).join(', ');
			return got === 'prod-eu Synced, prod-us Synced, staging Unreachable' ? true : got;`)
		if got := eval[string](t, page, `document.querySelector('#fleet tr[data-cluster=staging] .error').textContent`); got == "" {
			t.Error("no last error for staging")
		}
		page.screenshot(t, "unreachable")
		// A write while it is paused, seen once it is back.
		if err := us.Clientset().CoreV1().Pods("shop").Delete(ctx, "web-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := staging.ResumeAPIServer(); err != nil {
			t.Fatal(err)
		}
		resumed = true
		if err := staging.Clientset().CoreV1().Pods("shop").Delete(ctx, "api-0", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		page.wait(t, 60*time.Second, "staging Synced again", `
			const got = [...document.querySelectorAll('#fleet tbody tr')].map(r => r.dataset.cluster + ' ' + r.querySelector('.phase').textContent).join(', ');
			return got === 'prod-eu Synced, prod-us Synced, staging Synced' ? true : got;`)
		// The cache equals the servers' truth, and so do the page's counts.
		sameAsServers(t, open, env, "api/v1/pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"})
		page.wait(t, 5*time.Second, "staging's pods on the page", `
			const got = document.querySelector('#fleet tr[data-cluster=staging] .objects li').textContent;
			return got === 'pods: 3' ? true : got;`)
	})

	if msgs := page.messages(nil); len(msgs) > 0 {
		t.Errorf("console errors and exceptions of the page:\n%s", strings.Join(msgs, "\n"))
	}
}

// checkKeyboard tabs through the page from its start and checks that every control is
// reached in turn and has an accessible name, and that tables have headers.
func checkKeyboard(t *testing.T, tb *tab, where string) {
	t.Helper()
	n := eval[int](t, tb, `(() => {
		const els = [...document.querySelectorAll('a[href], button, input:not([type=hidden]), select, textarea, [tabindex]')]
			.filter(e => !e.disabled && e.tabIndex >= 0 && e.getClientRects().length > 0);
		els.forEach((e, i) => { e.dataset.focusProbe = String(i); });
		document.activeElement?.blur();
		return els.length;
	})()`)
	if n < 5 {
		t.Fatalf("%s: only %d controls", where, n)
	}
	reached := map[int]bool{}
	var order []string
	for range n + 3 {
		tb.do(t, chromedp.KeyEvent(kb.Tab))
		got := eval[string](t, tb, `(() => { const e = document.activeElement; return (e?.dataset.focusProbe ?? '-') + ' ' + e?.tagName + ' ' + (e?.id || e?.textContent?.slice(0, 30) || ''); })()`)
		order = append(order, got)
		var i int
		if _, err := fmt.Sscan(got, &i); err == nil {
			reached[i] = true
		}
	}
	for i := range n {
		if !reached[i] {
			what := eval[string](t, tb, fmt.Sprintf(`document.querySelector('[data-focus-probe="%d"]').outerHTML.slice(0, 200)`, i))
			t.Errorf("%s: Tab never reaches %s; the focus went through:\n%s", where, what, strings.Join(order, "\n"))
		}
	}
	nodes, err := chromedp.Run(tb.ctx, chromedp.Nodes(chromedp.CSSAll(`[data-focus-probe]`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range nodes {
		res, err := chromedp.Call(tb.ctx, accessibility.GetPartialAXTree, accessibility.GetPartialAXTreeParams{BackendNodeID: node.BackendNodeID, FetchRelatives: new(false)})
		if err != nil {
			t.Fatal(err)
		}
		name := ""
		if len(res.Nodes) > 0 && res.Nodes[0].Name != nil {
			_ = json.Unmarshal(res.Nodes[0].Name.Value, &name)
		}
		if strings.TrimSpace(name) == "" {
			t.Errorf("%s: %s#%s has no accessible name", where, node.LocalName, node.AttributeValue("id"))
		}
	}
	if bad := eval[string](t, tb, `[...document.querySelectorAll('table')].filter(t => !t.caption || !t.tHead || t.tHead.querySelectorAll('th[scope=col]').length === 0).map(t => t.id).join()`); bad != "" {
		t.Errorf("%s: tables without a caption or column headers: %s", where, bad)
	}
}

// sameAsServers waits until the daemon's list of a resource across the fleet (at path,
// as api/v1/pods) holds the objects of the clusters, at their resourceVersions.
func sameAsServers(t *testing.T, d *daemon, env *testenv.Env, path string, gvr schema.GroupVersionResource) {
	t.Helper()
	eventually(t, 20*time.Second, "the daemon's "+path+" equal the servers'", func() string {
		var got, want []string
		var list unstructured.UnstructuredList
		if err := list.UnmarshalJSON(d.get(t, "/clusters/*/"+path, "")); err != nil {
			return err.Error()
		}
		for _, o := range list.Items {
			got = append(got, o.GetAnnotations()["fleetwatch.io/cluster"]+"/"+o.GetNamespace()+"/"+o.GetName()+"@"+o.GetResourceVersion())
		}
		for _, c := range env.Clusters {
			l, err := c.Dynamic().Resource(gvr).List(t.Context(), metav1.ListOptions{})
			if err != nil {
				return err.Error()
			}
			for _, o := range l.Items {
				want = append(want, c.Name+"/"+o.GetNamespace()+"/"+o.GetName()+"@"+o.GetResourceVersion())
			}
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			return fmt.Sprintf("got %v, want %v", got, want)
		}
		return ""
	})
}

// grantCluster creates a ServiceAccount sa in the home cluster, allowed by RBAC to read
// the fleet's cluster named cluster only, and returns a token of it for the audience
// fleetwatch.
func grantCluster(t *testing.T, home *testenv.Cluster, sa, cluster string) string {
	t.Helper()
	ctx := t.Context()
	cs := home.Clientset()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := "fleetwatch-" + sa
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"fleetwatch.io"}, Resources: []string{"clusters"}, ResourceNames: []string{cluster}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: sa}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{"fleetwatch"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
