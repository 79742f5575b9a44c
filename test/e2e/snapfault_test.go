package e2e

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/persist/persisttest"
)

var widgetsGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "widgets"}

// TestDaemonCorruptSnapshot damages a snapshot that the real daemon wrote from real
// clusters, at a few hundred random places in every region of the file (meta pages,
// freelist, branch and leaf pages, values, free pages), and opens and loads each copy
// in this process as the daemon does: a fault would kill the test. Each must either
// start over empty, the file moved aside, or load a snapshot that was committed. Then
// the real daemon starts on a dozen of the damaged files, the 64 KiB of random bytes at
// a third of the file among them: each start reaches /readyz and serves the servers'
// truth.
func TestDaemonCorruptSnapshot(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{Clusters: 3})
	ctx := t.Context()
	var seedWG sync.WaitGroup
	for _, c := range env.Clusters {
		seedWG.Go(func() {
			if err := c.InstallWidgetCRD(ctx); err != nil {
				t.Error(err)
				return
			}
			if err := c.Seed(ctx, testenv.SampleOptions{Deployments: 4, Replicas: 12, Widgets: 5}); err != nil {
				t.Error(err)
				return
			}
			cms := c.Clientset().CoreV1().ConfigMaps("shop")
			for i := range 100 {
				cm := configMap("shop", fmt.Sprintf("cm-%03d", i), c.Name)
				cm.Data["payload"] = strings.Repeat(fmt.Sprintf("%s-%d ", c.Name, i), i*3)
				if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	seedWG.Wait()
	if t.Failed() {
		t.FailNow()
	}

	dir := t.TempDir()
	snapshot := filepath.Join(dir, "fleetwatch.db")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	cfgPath := filepath.Join(dir, "fleetwatch.yaml")
	cfg := fmt.Sprintf(`kubeconfig: [%q]
resources:
  - name: pods
  - name: configmaps
  - name: widgets.v1alpha1.example.com
snapshot:
  path: %q
  interval: 1s
server:
  address: 127.0.0.1:%d
`, env.Kubeconfig, snapshot, port)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	resources := []schema.GroupVersionResource{podsGVR, configMapsGVR, widgetsGVR}
	// servesTruth compares the lists the daemon serves with the servers'.
	servesTruth := func() string {
		for _, c := range env.Clusters {
			for _, gvr := range resources {
				path := "/api/v1/" + gvr.Resource
				if gvr.Group != "" {
					path = "/apis/" + gvr.Group + "/" + gvr.Version + "/" + gvr.Resource
				}
				got := map[string]string{}
				for _, item := range listItems(t, base+"/clusters/"+c.Name+path) {
					key, _ := cache.MetaNamespaceKeyFunc(&item)
					got[key] = item.GetResourceVersion()
				}
				if d := diffRVs(serverTruth(ctx, t, c, gvr, metav1.ListOptions{}), got); d != "" {
					return fmt.Sprintf("%s %s: %s", c.Name, gvr.Resource, d)
				}
			}
		}
		return ""
	}

	// The daemon writes the snapshot. Its last commit holds changes that the one before
	// does not, so that a start on the commit before has a watch to resume.
	d := &daemon{bin: buildBinary(t, "./cmd/fleetwatch"), config: cfgPath}
	d.start(t)
	waitReadyz(t, http.DefaultClient, base)
	eventually(t, 60*time.Second, "the daemon serves the servers' truth", servesTruth)
	time.Sleep(2 * time.Second) // a commit of all that
	for _, c := range env.Clusters {
		cms := c.Clientset().CoreV1().ConfigMaps("shop")
		for i := range 10 {
			cm := configMap("shop", fmt.Sprintf("cm-%03d", i), c.Name)
			cm.Data["changed"] = "yes"
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 60*time.Second, "the daemon serves the changes", servesTruth)
	if err := d.signal(t, syscall.SIGTERM); err != nil {
		t.Fatalf("graceful exit: %v", err)
	}
	data, err := os.ReadFile(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := persisttest.ReadLayout(snapshot)
	if err != nil {
		t.Fatal(err)
	}

	// What was committed: the last commit, which is the servers' state, and the one
	// before it, which the other meta page points to.
	work := t.TempDir()
	last := loadDamaged(t, filepath.Join(work, "last", "fleetwatch.db"), data, nil)
	if last.snap == nil || last.moved != "" {
		t.Fatalf("the daemon's snapshot does not load: %v", last.cause)
	}
	for _, c := range env.Clusters {
		for _, gvr := range resources {
			cs := last.snap.Clusters[c.Name]
			if cs == nil || cs.Resources[persist.ResourceKeyFor(gvr)] == nil {
				t.Fatalf("%s %s is not in the snapshot", c.Name, gvr.Resource)
			}
			got := map[string]string{}
			for _, obj := range cs.Resources[persist.ResourceKeyFor(gvr)].Objects {
				k, _ := cache.MetaNamespaceKeyFunc(obj)
				got[k] = rvOf(obj)
			}
			if d := diffRVs(serverTruth(ctx, t, c, gvr, metav1.ListOptions{}), got); d != "" {
				t.Fatalf("%s %s: the snapshot is not the servers' state: %s", c.Name, gvr.Resource, d)
			}
		}
	}
	newestMeta := persisttest.Damage{Region: persisttest.Meta, Off: int64(layout.NewestMeta * layout.PageSize), Data: make([]byte, layout.PageSize)}
	before := loadDamaged(t, filepath.Join(work, "before", "fleetwatch.db"), data, &newestMeta)
	if before.snap == nil || before.moved != "" {
		t.Fatalf("the commit before the last does not load: %v", before.cause)
	}
	if reflect.DeepEqual(before.snap, last.snap) {
		t.Log("the last commit changed nothing that Load returns")
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d; the file has %d bytes in pages of %d", seed, len(data), layout.PageSize)
	rng := rand.New(rand.NewPCG(seed, 0))
	third := make([]byte, 64<<10)
	for i := range third {
		third[i] = byte(rng.Uint32())
	}
	damages := []persisttest.Damage{
		{Region: persisttest.Leaf, Off: int64(len(data)) / 3, Data: third}, // the issue's
		newestMeta,
	}
	damages = append(damages, persisttest.RandomDamages(rng, layout, 300)...)
	type result struct {
		damage persisttest.Damage
		// moved: the file was moved aside; committed: the commit it loaded, if not.
		moved     bool
		committed string
	}
	results := make([]result, len(damages))
	next := make(chan int)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range next {
				dmg := damages[i]
				got := loadDamaged(t, filepath.Join(work, fmt.Sprint(i), "fleetwatch.db"), data, &dmg)
				r := result{damage: dmg, moved: got.moved != ""}
				switch {
				case got.snap == nil:
					t.Errorf("%v: Open or Load failed: %v", dmg, got.cause)
				case r.moved:
					if len(got.snap.Clusters) != 0 {
						t.Errorf("%v: moved aside, and loaded %d clusters", dmg, len(got.snap.Clusters))
					}
					if fi, err := os.Stat(got.moved); err != nil || fi.Mode().Perm() != 0o600 {
						t.Errorf("%v: the file moved aside: %v, %v", dmg, fi, err)
					}
				case reflect.DeepEqual(got.snap, last.snap):
					r.committed = "last"
				case reflect.DeepEqual(got.snap, before.snap):
					r.committed = "before"
				default:
					t.Errorf("%v: loaded a snapshot that was never committed", dmg)
				}
				results[i] = r
			}
		})
	}
	for i := range damages {
		next <- i
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	counts := map[string]int{}
	for _, r := range results {
		outcome := "moved aside"
		if !r.moved {
			outcome = "loaded the " + r.committed + " commit"
		}
		counts[r.damage.Region.String()+": "+outcome]++
	}
	t.Logf("%d damaged copies: %v", len(results), counts)

	// The daemon starts on a dozen of them: the issue's, the commit before, and in each
	// region one that was moved aside and one that loaded, as far as there are.
	starts := []result{results[0], results[1]}
	seen := map[string]bool{}
	for _, r := range results[2:] {
		kind := fmt.Sprint(r.damage.Region, r.moved)
		if len(starts) < 12 && !seen[kind] {
			seen[kind] = true
			starts = append(starts, r)
		}
	}
	for _, r := range starts {
		t.Logf("start on a copy with %v: moved aside %v, committed %q", r.damage, r.moved, r.committed)
		old, _ := filepath.Glob(snapshot + ".corrupt-*")
		for _, f := range old {
			os.Remove(f)
		}
		if err := os.WriteFile(snapshot, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := persisttest.Apply(snapshot, r.damage); err != nil {
			t.Fatal(err)
		}
		logStart, err := d.log.Seek(0, 2)
		if err != nil {
			t.Fatal(err)
		}
		d.start(t)
		waitReadyz(t, http.DefaultClient, base)
		eventually(t, 60*time.Second, fmt.Sprintf("after a start on %v, the daemon serves the servers' truth", r.damage), servesTruth)
		if err := d.signal(t, syscall.SIGTERM); err != nil {
			t.Fatalf("graceful exit: %v", err)
		}
		moved, _ := filepath.Glob(snapshot + ".corrupt-*")
		logged := strings.Contains(readLog(t, d)[int(logStart):], "moved it aside")
		if r.moved != (len(moved) == 1) || r.moved != logged {
			t.Errorf("%v: moved aside in process %v, by the daemon %v (logged %v)", r.damage, r.moved, moved, logged)
		}
	}
}

// loadedCopy is what loadDamaged found.
type loadedCopy struct {
	snap  *persist.Snapshot
	moved string
	cause error
}

// loadDamaged writes data, damaged by d if not nil, to path, and opens and loads it as
// the daemon does.
func loadDamaged(t *testing.T, path string, data []byte, d *persisttest.Damage) loadedCopy {
	t.Helper()
	if err := persisttest.WriteCopy(path, data, d); err != nil {
		t.Fatal(err)
	}
	store, err := persist.Open(path, persist.Options{})
	if err != nil {
		return loadedCopy{cause: err}
	}
	defer store.Close()
	snap, err := store.Load()
	if err != nil {
		return loadedCopy{cause: err}
	}
	moved, cause := store.Recovered()
	return loadedCopy{snap: snap, moved: moved, cause: cause}
}
