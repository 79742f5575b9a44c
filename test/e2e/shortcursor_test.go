package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// TestShortCursorsResumeThroughFaults: a daemon without a change log hands out short
// resourceVersions (the run's epoch and a sequence number of its changes, whatever the
// number of clusters). A fleet watch that ends every few hundred milliseconds and is
// opened again from the last event's or bookmark's resourceVersion, while 3 clusters
// change configmaps and one apiserver is killed -9 after its etcd was compacted (its
// informer relists), another is paused (SIGSTOP) and the third restarted, ends with
// exactly the servers' state: no object missing, no ghost, no stale resourceVersion,
// and no 410.
func TestShortCursorsResumeThroughFaults(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 3, AuditWatches: true})
	ctx := t.Context()
	for _, c := range env.Clusters {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: resumeNamespace}}
		if _, err := c.Clientset().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	// The defaults, a snapshot without a change log among them.
	cfg := fmt.Sprintf("kubeconfig: [%q]\nresources:\n  - name: configmaps\nsnapshot:\n  path: %q\nserver:\n  address: 127.0.0.1:%d\n",
		env.Kubeconfig, filepath.Join(dir, "fleetwatch.db"), port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, buildBinary(t, "./cmd/fleetwatch"), cfgPath)
	waitReadyz(t, http.DefaultClient, base)

	path := "/clusters/*/api/v1/namespaces/" + resumeNamespace + "/configmaps"
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	var wg sync.WaitGroup
	fw := &fleetWatcher{base: base, path: path, cursors: []string{listResourceVersion(t, base+path)}}
	wg.Go(func() { fw.run(watchCtx) })
	wg.Go(func() {
		// End the watch every few hundred milliseconds: it is opened again from the
		// last resourceVersion it had.
		for watchCtx.Err() == nil {
			time.Sleep(300 * time.Millisecond)
			fw.pause()
			fw.resume()
		}
	})

	churnCtx, stopChurn := context.WithCancel(ctx)
	var churnWG sync.WaitGroup
	for i, c := range env.Clusters {
		// A write that fails while its apiserver is down is dropped: the test compares
		// states, not sequences.
		churnWG.Go(func() { churnPaced(churnCtx, c, resumeNamespace, 25, uint64(i), func(error) bool { return true }) })
	}
	time.Sleep(2 * time.Second)
	faults := []func() error{
		func() error {
			if err := env.Clusters[0].KillAPIServer(); err != nil {
				return err
			}
			if _, err := env.Clusters[0].Compact(ctx); err != nil {
				return err
			}
			return env.Clusters[0].StartAPIServer(ctx)
		},
		func() error {
			if err := env.Clusters[1].PauseAPIServer(); err != nil {
				return err
			}
			time.Sleep(3 * time.Second)
			return env.Clusters[1].ResumeAPIServer()
		},
		func() error { return env.Clusters[2].RestartAPIServer(ctx) },
	}
	for i, fault := range faults {
		if err := fault(); err != nil {
			t.Fatalf("fault %d: %v", i, err)
		}
		time.Sleep(2 * time.Second)
	}
	stopChurn()
	churnWG.Wait()
	// The compaction made the informer of the first cluster list again (the 410 of its
	// watch): the history holds a relist's changes between the watch's cursors.
	eventually(t, 30*time.Second, "the daemon listed the first cluster's configmaps again", func() string {
		reqs, err := env.Clusters[0].Requests()
		if err != nil {
			return err.Error()
		}
		lists := 0
		for _, r := range reqs {
			// A list, or a streaming list (client-go's WatchListClient).
			if r.Resource == "configmaps" && (r.Verb == "list" || strings.Contains(r.URI, "sendInitialEvents=true")) {
				lists++
			}
		}
		if lists < 2 {
			return fmt.Sprintf("%d lists of configmaps in %d requests", lists, len(reqs))
		}
		return ""
	})

	truth := func() map[string]string {
		out := map[string]string{}
		for _, c := range env.Clusters {
			list, err := c.Clientset().CoreV1().ConfigMaps(resumeNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, cm := range list.Items {
				out[c.Name+"/"+cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
			}
		}
		return out
	}()
	// The state the watch's events make: each object's last change.
	seen := func() map[string]string {
		out := map[string]string{}
		for k, changes := range fw.seen.snapshot() {
			last := changes[len(changes)-1]
			if typ, rv, _ := strings.Cut(last, "@"); typ != "DELETED" {
				out[k] = rv
			}
		}
		return out
	}
	eventually(t, 30*time.Second, "the watch's state is the servers'", func() string {
		got := seen()
		var diff []string
		for k, rv := range truth {
			if got[k] != rv {
				diff = append(diff, fmt.Sprintf("%s: servers %s, watch %q", k, rv, got[k]))
			}
		}
		for k, rv := range got {
			if _, ok := truth[k]; !ok {
				diff = append(diff, fmt.Sprintf("%s: not on the servers, watch %s", k, rv))
			}
		}
		if len(diff) > 0 {
			return fmt.Sprintf("%d differences, for example %q", len(diff), diff[:min(5, len(diff))])
		}
		return ""
	})
	stopWatching()
	wg.Wait()

	fw.mu.Lock()
	defer fw.mu.Unlock()
	t.Logf("%d objects on the servers; the watch was opened %d times, over %d resourceVersions", len(truth), fw.opened, len(fw.cursors))
	if len(fw.gone) > 0 {
		t.Errorf("the watch got 410: %q", fw.gone)
	}
	if fw.opened < 20 {
		t.Errorf("the watch was opened %d times, want one every few hundred milliseconds", fw.opened)
	}
	if long := slices.IndexFunc(fw.cursors, func(rv string) bool { return len(rv) > 100 }); long >= 0 {
		t.Errorf("resourceVersion %q is not short", fw.cursors[long])
	}
}
