package browser

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestHistoryPage drives the page's Changes view and the object view's history, against
// a daemon with history.enabled over two real clusters: changes made on the clusters
// appear in the timeline, filtered by the search box, and on the object view with the
// fields they changed, those made while a view is open included; a Secret's value never
// reaches the page. The snapshot commits every 3s, so that the page reads the log before
// it holds the changes just made, and has to read it again.
func TestHistoryPage(t *testing.T) {
	env := testenv.New(t, testenv.Options{Names: []string{"prod-eu", "prod-us"}})
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
	d := startDaemon(t, buildBinary(t), "history", func(port int) string {
		return fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: deployments.apps
  - name: secrets
cache:
  keepSecretData: true
snapshot:
  path: %q
  interval: 3s
history:
  enabled: true
server:
  address: 127.0.0.1:%d
`, kubeconfig, filepath.Join(dir, "history.db"), port)
	})
	d.waitReady(t)
	eu, us := env.Clusters[0], env.Clusters[1]
	secretValue := "s3cret-history-" + fmt.Sprint(time.Now().UnixNano())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db-credentials", Labels: map[string]string{"app": "db"}},
		Data:       map[string][]byte{"password": []byte(secretValue)},
	}
	if _, err := eu.Clientset().CoreV1().Secrets("shop").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := us.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	page := newTab(t, newBrowser(t))

	t.Run("the Changes view is the fleet's timeline, filtered by the search box", func(t *testing.T) {
		page.navigate(t, d.base+"/")
		page.do(t, chromedp.Click(chromedp.ID("nav-changes")))
		page.wait(t, 20*time.Second, "the scale of prod-us's web in the timeline", `
			const rows = [...document.querySelectorAll('#timeline tbody tr')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent).join(' '));
			return rows.includes('Modified prod-us Deployment shop web') && rows.includes('Added prod-eu Secret shop db-credentials') ? true : rows.join('; ');`)
		// The last page follows the log: a change made while it is shown joins its end.
		if _, err := eu.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"tail":"followed"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		page.wait(t, 20*time.Second, "prod-eu's change at the end of the open timeline", `
			const rows = [...document.querySelectorAll('#timeline tbody tr')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent).join(' '));
			const caption = document.querySelector('#timeline caption').textContent;
			return rows.at(-1) === 'Modified prod-eu Deployment shop web' && caption === rows.length + ' changes, oldest first' ? true : caption + ': ' + rows.join('; ');`)
		if cur := eval[string](t, page, `document.getElementById('nav-changes').getAttribute('aria-current') ?? ''`); cur != "page" {
			t.Errorf("the Changes link is not the current view: %q", cur)
		}
		// The search box filters the timeline, and the URL holds the query.
		page.do(t, chromedp.SendKeys(chromedp.ID("q"), "web cluster:prod-us kind:Deployment"+kb.Enter))
		page.wait(t, 10*time.Second, "the filtered timeline", `
			const rows = [...document.querySelectorAll('#timeline tbody tr')].map(r => r.cells[1].textContent + ' ' + r.cells[2].textContent + ' ' + r.cells[4].textContent + '/' + r.cells[5].textContent);
			return rows.length > 0 && rows.every(r => r.includes('prod-us') && r.endsWith('/web')) && rows.at(-1) === 'Modified prod-us shop/web' ? true : rows.join('; ');`)
		if loc := eval[string](t, page, `location.search`); !strings.Contains(loc, "view=changes") || !strings.Contains(loc, "q=web+cluster%3Aprod-us+kind%3ADeployment") {
			t.Errorf("the URL does not hold the view and the query: %s", loc)
		}
		if q := eval[string](t, page, `document.getElementById('q').value`); q != "web cluster:prod-us kind:Deployment" {
			t.Errorf("the search box holds %q", q)
		}
		page.screenshot(t, "changes")
		checkKeyboard(t, page, "the Changes view")
		// A span is a link; back returns to the last hour.
		page.do(t, chromedp.Click(chromedp.CSS(`nav.spans a:nth-of-type(4)`)))
		page.wait(t, 5*time.Second, "the last 24h", `return document.getElementById('changes-scope').textContent.startsWith('Changes of the last 24h') ? true : document.getElementById('changes-scope').textContent;`)
		page.do(t, chromedp.NavigateBack())
		page.wait(t, 5*time.Second, "back to the last hour", `return document.getElementById('changes-scope').textContent.startsWith('Changes of the last 1h') ? true : document.getElementById('changes-scope').textContent;`)
	})

	t.Run("the object view shows its history with the fields each step changed", func(t *testing.T) {
		page.do(t, chromedp.Click(chromedp.CSS(`#timeline tbody tr:last-child th a`)))
		page.wait(t, 10*time.Second, "the object view", `return document.getElementById('object-cluster')?.textContent === 'prod-us' ? true : location.search;`)
		page.do(t, chromedp.Click(chromedp.ID("show-history")))
		page.wait(t, 10*time.Second, "the object's history", `
			if (document.getElementById('object-cluster')?.textContent !== 'prod-us') return 'not the object: ' + location.search;
			const steps = [...document.querySelectorAll('#history > li')];
			if (steps.length < 2) return document.getElementById('history-state')?.textContent ?? 'no history';
			const newest = steps[0];
			const rows = [...newest.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent).join(' | '));
			return newest.querySelector('strong').textContent === 'Modified' && rows.includes('.spec.replicas | 1 | 4') ? true : rows.join('; ');`)
		if added := eval[string](t, page, `[...document.querySelectorAll('#history > li')].at(-1).querySelector('strong').textContent`); added != "Added" {
			t.Errorf("the oldest step is %q, want Added", added)
		}
		page.screenshot(t, "history")

		// A change made while the page is open joins the history.
		if _, err := us.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"release":"r2"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		page.wait(t, 10*time.Second, "the new step", `
			const newest = document.querySelector('#history > li');
			const rows = [...newest.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent).join(' | '));
			return rows.includes('.metadata.labels.release | (absent) | r2') ? true : rows.join('; ');`)
		checkKeyboard(t, page, "the object view with its history")
	})

	t.Run("a Secret's history never shows its value", func(t *testing.T) {
		if _, err := eu.Clientset().CoreV1().Secrets("shop").Patch(ctx, "db-credentials", types.MergePatchType,
			[]byte(`{"data":{"password":"`+base64.StdEncoding.EncodeToString([]byte(secretValue+"-2"))+`"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		q := url.Values{"view": {"object"}, "cluster": {"prod-eu"}, "version": {"v1"}, "resource": {"secrets"}, "kind": {"Secret"}, "namespace": {"shop"}, "name": {"db-credentials"}}
		page.navigate(t, d.base+"/?"+q.Encode())
		page.wait(t, 10*time.Second, "the Secret's view", `return document.getElementById('show-history') ? true : 'no history button';`)
		page.do(t, chromedp.Click(chromedp.ID("show-history")))
		page.wait(t, 15*time.Second, "the Secret's two steps, without fields", `
			const steps = [...document.querySelectorAll('#history > li')];
			const got = steps.map(s => s.querySelector('strong').textContent + ' ' + s.querySelectorAll('tbody tr').length).join(', ');
			return got === 'Modified 0, Added 0' ? true : got;`)
		page.navigate(t, d.base+"/?view=changes&since=24h&q="+url.QueryEscape("db-credentials"))
		page.wait(t, 10*time.Second, "the Secret's changes", `return document.querySelectorAll('#timeline tbody tr').length >= 2 ? true : document.getElementById('main').innerText;`)

		// A last page that fills while it follows the log links to the newer changes,
		// which that page follows in turn.
		page.navigate(t, d.base+"/?view=changes&since=24h&limit=3&q="+url.QueryEscape("db-credentials"))
		page.wait(t, 10*time.Second, "the Secret's two changes, followed", `
			const n = document.querySelectorAll('#timeline tbody tr').length;
			return n === 2 && document.getElementById('changes-live')?.textContent.startsWith('Following') ? true : n + ' rows: ' + document.getElementById('main').innerText;`)
		relabel := func(v string) {
			t.Helper()
			if _, err := eu.Clientset().CoreV1().Secrets("shop").Patch(ctx, "db-credentials", types.MergePatchType, []byte(`{"metadata":{"labels":{"step":"`+v+`"}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		relabel("3")
		page.wait(t, 20*time.Second, "the third change, and the page full", `
			const n = document.querySelectorAll('#timeline tbody tr').length;
			const newer = [...document.querySelectorAll('nav.pages a')].find(a => a.textContent === 'Newer changes');
			return n === 3 && newer && new URL(newer.href).searchParams.get('after') ? true : n + ' rows: ' + document.getElementById('main').innerText;`)
		page.do(t, chromedp.Click(chromedp.CSS(`nav.pages a[rel=next]`)))
		page.wait(t, 10*time.Second, "the newer changes' page, empty", `
			return document.querySelector('#timeline caption')?.textContent === 'No change' && new URLSearchParams(location.search).get('after') ? true : document.getElementById('main').innerText;`)
		relabel("4")
		page.wait(t, 20*time.Second, "the fourth change on the newer changes' page", `
			const rows = [...document.querySelectorAll('#timeline tbody tr')].map(r => [...r.cells].slice(1, 6).map(c => c.textContent).join(' '));
			return rows.length === 1 && rows[0] === 'Modified prod-eu Secret shop db-credentials' ? true : rows.join('; ');`)
		for _, v := range []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue))} {
			if found := page.received(v); len(found) > 0 {
				t.Errorf("the page received a Secret's value: %v", found)
			}
		}
	})
}
