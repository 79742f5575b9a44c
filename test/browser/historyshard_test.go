package browser

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/shard"
)

// TestHistoryPageSharded drives the page's Changes view through one replica of a
// sharded fleet of two, each owning one of two real clusters: the timeline has the
// changes of both, each from its owner's log; once the other replica is killed, the
// timeline has this replica's clusters only and says which clusters it leaves out.
func TestHistoryPageSharded(t *testing.T) {
	ids := []string{"fleetwatch-0", "fleetwatch-1"}
	// Two member names that rendezvous hashing gives one to each replica.
	var members []string
	for i := 0; len(members) == 0 && i < 100; i++ {
		names := []string{fmt.Sprintf("east-%d", i), fmt.Sprintf("west-%d", i)}
		if a := shard.Assign(names, ids); a[names[0]] != a[names[1]] {
			members = names
		}
	}
	if members == nil {
		t.Fatal("no two names that the replicas divide")
	}
	env := testenv.New(t, testenv.Options{Names: append([]string{"home"}, members...)})
	ctx := t.Context()
	home := env.Clusters[0]
	if _, err := home.Clientset().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleetwatch"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range env.Clusters[1:] {
		if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 1, Replicas: 1}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	kubeconfig, homeConfig := filepath.Join(dir, "members"), filepath.Join(dir, "home")
	if err := env.WriteKubeconfig(kubeconfig, env.Clusters[1:]...); err != nil {
		t.Fatal(err)
	}
	if err := env.WriteKubeconfig(homeConfig, home); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	replicas := map[string]*daemon{}
	for _, id := range ids {
		replicas[id] = startDaemon(t, bin, id, func(port int) string {
			// A long Lease: the killed replica's cluster stays its own, and left out,
			// while the page is checked.
			return fmt.Sprintf(`kubeconfig: [%q]
resources: [{name: deployments.apps}]
snapshot: {path: %q, interval: 100ms}
history: {enabled: true}
server: {address: "127.0.0.1:%d"}
shard:
  enabled: true
  identity: %s
  namespace: fleetwatch
  homeKubeconfig: %q
  address: http://127.0.0.1:%d
  leaseDuration: 60s
  renewDeadline: 40s
  retryPeriod: 1s
`, kubeconfig, filepath.Join(dir, id+".db"), port, id, homeConfig, port)
		})
	}
	for _, d := range replicas {
		d.waitReady(t)
	}
	owners := shard.Assign(members, ids)
	// A change on each cluster, which its owner's log holds.
	for _, c := range env.Clusters[1:] {
		if _, err := c.Clientset().AppsV1().Deployments("shop").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	through, other := replicas[ids[0]], ids[1]
	page := newTab(t, newBrowser(t))
	rowsJS := `[...document.querySelectorAll('#timeline tbody tr')].map(r => r.cells[1].textContent + ' ' + r.cells[2].textContent + ' ' + r.cells[5].textContent + ' ' + r.dataset.replica)`

	t.Run("the timeline of both replicas' clusters", func(t *testing.T) {
		want := []string{}
		for _, m := range members {
			want = append(want, fmt.Sprintf("Modified %s web %s", m, owners[m]))
		}
		eventually(t, 60*time.Second, "the changes of both clusters through "+ids[0], func() string {
			page.navigate(t, through.base+"/?view=changes&q=web")
			page.wait(t, 10*time.Second, "the timeline", `return document.getElementById('timeline') ? true : document.getElementById('main').innerText;`)
			rows := eval[[]string](t, page, rowsJS)
			for _, w := range want {
				found := false
				for _, r := range rows {
					found = found || r == w
				}
				if !found {
					return fmt.Sprintf("no %q in %v", w, rows)
				}
			}
			if eval[bool](t, page, `document.getElementById('changes-partial') !== null`) {
				return "the timeline says it leaves clusters out"
			}
			return ""
		})
		page.screenshot(t, "changes-sharded")
	})

	t.Run("the other replica killed: the timeline says what it leaves out", func(t *testing.T) {
		replicas[other].kill()
		var theirs, mine string
		for _, m := range members {
			if owners[m] == other {
				theirs = m
			} else {
				mine = m
			}
		}
		page.navigate(t, through.base+"/?view=changes&q=web")
		page.wait(t, 20*time.Second, "the note of the clusters left out", fmt.Sprintf(`
			const note = document.getElementById('changes-partial')?.textContent ?? '';
			return note.includes('clusters not included: %s') && note.includes('%s') ? true : note || document.getElementById('main').innerText;`, theirs, other))
		for _, r := range eval[[]string](t, page, rowsJS) {
			if !slices.Contains(strings.Fields(r), mine) {
				t.Errorf("a change of another cluster than %s: %s", mine, r)
			}
		}
		if n := eval[int](t, page, `document.querySelectorAll('#timeline tbody tr').length`); n == 0 {
			t.Errorf("no change of %s", mine)
		}
		page.screenshot(t, "changes-sharded-partial")
	})
}
