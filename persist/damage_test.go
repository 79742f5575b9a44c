package persist

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/persist/persisttest"
)

// TestRandomDamage damages a snapshot at 180 random places, in each region of
// the file (meta pages, freelist, branch and leaf pages, values, free pages), and opens
// and loads each copy as the daemon does. A fault would kill the test. Each load must
// either recover (the file moved aside, an empty snapshot) or return what was committed:
// the last commit, or the one before it if the newest meta page is what was hit.
func TestRandomDamage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleetwatch.db")
	writeDamageSample(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := persisttest.ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	last := loadCopy(t, filepath.Join(dir, "last.db"), data, nil)
	if last.snap == nil || last.moved != "" {
		t.Fatalf("the sound file did not load: %v", last.cause)
	}
	// The commit before: the newest meta page zeroed.
	before := loadCopy(t, filepath.Join(dir, "before.db"), data, &persisttest.Damage{
		Off: int64(layout.NewestMeta * layout.PageSize), Data: make([]byte, layout.PageSize),
	})
	if before.snap == nil || before.moved != "" || reflect.DeepEqual(before.snap, last.snap) {
		t.Fatalf("the commit before the last did not load, or is the last: %v", before.cause)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	damages := persisttest.RandomDamages(rand.New(rand.NewPCG(seed, 0)), layout, 180)
	damages = append(damages, persisttest.Damage{Off: int64(len(data)) / 3, Data: randomBytes(seed, 64<<10)})
	type outcome struct{ recovered, last, before int }
	var (
		mu       sync.Mutex
		outcomes = map[persisttest.Region]*outcome{}
		work     = make(chan int)
		wg       sync.WaitGroup
	)
	for _, r := range persisttest.Regions {
		outcomes[r] = &outcome{}
	}
	for range 4 {
		wg.Go(func() {
			for i := range work {
				d := damages[i]
				got := loadCopy(t, filepath.Join(dir, fmt.Sprintf("d%d", i), "fleetwatch.db"), data, &d)
				mu.Lock()
				o := outcomes[d.Region]
				switch {
				case got.moved != "":
					o.recovered++
					if len(got.snap.Clusters) != 0 {
						t.Errorf("%v: recovered, and loaded %d clusters", d, len(got.snap.Clusters))
					}
				case got.snap == nil:
					t.Errorf("%v: neither loaded nor recovered: %v", d, got.cause)
				case reflect.DeepEqual(got.snap, last.snap):
					o.last++
				case reflect.DeepEqual(got.snap, before.snap):
					o.before++
				default:
					t.Errorf("%v: loaded a snapshot that was never committed", d)
				}
				mu.Unlock()
			}
		})
	}
	for i := range damages {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, r := range persisttest.Regions {
		o := outcomes[r]
		t.Logf("%-8s: %3d moved aside, %3d loaded the last commit, %3d the one before", r, o.recovered, o.last, o.before)
	}
}

// loaded is what loadCopy found.
type loaded struct {
	snap  *Snapshot
	moved string
	cause error
}

// loadCopy writes data, damaged by d if not nil, to path, then opens and loads it as
// the daemon does.
func loadCopy(t *testing.T, path string, data []byte, d *persisttest.Damage) loaded {
	t.Helper()
	if err := persisttest.WriteCopy(path, data, d); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, Options{})
	if err != nil {
		return loaded{cause: err}
	}
	defer s.Close()
	// Load, as the Manager does: LoadEach with the runs of each cluster handed out as
	// they are decoded, which must be the objects that fn then gets.
	snap := &Snapshot{Clusters: make(map[string]*ClusterSnapshot)}
	runs := map[string]map[ResourceKey][]kruntime.Object{}
	err = s.LoadEach(LoadOptions{Objects: func(cluster string, resource ResourceKey, objects []kruntime.Object, _ [][]byte) error {
		if runs[cluster] == nil {
			runs[cluster] = map[ResourceKey][]kruntime.Object{}
		}
		runs[cluster][resource] = append(runs[cluster][resource], objects...)
		return nil
	}}, func(cluster string, cs *ClusterSnapshot) error {
		for key, rs := range cs.Resources {
			if !slices.Equal(runs[cluster][key], rs.Objects) {
				t.Errorf("%v: cluster %s, resource %s: the runs have %d objects, not the %d that fn got", d, cluster, key, len(runs[cluster][key]), len(rs.Objects))
			}
		}
		snap.Clusters[cluster] = cs
		return nil
	})
	moved, cause := s.Recovered()
	if err != nil {
		if cause == nil {
			return loaded{cause: err}
		}
		// Moved aside (or deleted) and started empty, where Load returns an empty
		// snapshot.
		snap = &Snapshot{Clusters: make(map[string]*ClusterSnapshot)}
	}
	return loaded{snap: snap, moved: moved, cause: cause}
}

// writeDamageSample writes a snapshot of two clusters, with unstructured objects of all
// sizes (some of several pages), objects compressed with a dictionary and metadata-only
// ones, in a few commits, so that the file has branch pages, overflow pages and free
// pages, and a dictionary.
func writeDamageSample(t *testing.T, path string) {
	t.Helper()
	freshDictionaries(t)
	dict := dictCodec(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.NewWriter(WriterOptions{})
	if err := s.SetIdentity("alpha", Identity{UID: "uid-a", Server: "https://a.example.com"}); err != nil {
		t.Fatal(err)
	}
	for commit := range 3 {
		for _, cluster := range []string{"alpha", "beta"} {
			for i := range 100 {
				if (i+commit)%7 == 0 {
					w.Delete(cluster, pods, "ns", fmt.Sprintf("pod-%03d", i))
					continue
				}
				u := object("ns", fmt.Sprintf("pod-%03d", i), fmt.Sprint(commit))
				u.Object["payload"] = strings.Repeat("x", (i%10)*(i%10)*20)
				if i%50 == 1 {
					u.Object["payload"] = strings.Repeat("y", 10000) // overflow pages
				}
				w.Upsert(cluster, pods, u)
				if i%4 == 0 {
					pod := dictPod(t, i+commit)
					enc, _ := dict.Encode(pod)
					w.UpsertEncoded(cluster, dictPods, pod, enc)
				}
				w.Upsert(cluster, deployments, metadataObject(fmt.Sprintf("ns-%d", i%5), fmt.Sprintf("d-%03d", i), fmt.Sprint(commit)))
			}
			w.Checkpoint(cluster, pods, fmt.Sprint(100+commit))
			w.Checkpoint(cluster, dictPods, fmt.Sprint(100+commit))
			w.Checkpoint(cluster, deployments, fmt.Sprint(200+commit))
		}
		if err := w.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16)}).Read(b)
	return b
}

// TestLeafPagesEmptied sets the element count of each leaf page of a snapshot to 0 in
// turn, as 2 bytes of zeros over the count do (a damage that TestRandomDamage drew): the
// page's elements are all there, but neither checkPages' check that they are packed,
// which starts at the first one, nor bbolt, which skips an empty page, nor the seals,
// each of its own value, would see that they are gone. Each load must move the file
// aside.
func TestLeafPagesEmptied(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleetwatch.db")
	writeDamageSample(t, path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	layout, err := persisttest.ReadLayout(path)
	if err != nil {
		t.Fatal(err)
	}
	leaves := layout.Of(persisttest.Leaf)
	if len(leaves) < 10 {
		t.Fatalf("the sample has %d leaf pages", len(leaves))
	}
	var (
		work = make(chan int)
		wg   sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			for i := range work {
				// The count, after the page's id (8 bytes) and flags (2).
				d := persisttest.Damage{Region: persisttest.Leaf, Off: leaves[i].Off + 10, Data: make([]byte, 2)}
				if binary.NativeEndian.Uint16(data[d.Off:]) == 0 {
					t.Errorf("%v: the leaf page is empty in the sound file", d)
					continue
				}
				got := loadCopy(t, filepath.Join(dir, fmt.Sprintf("d%d", i), "fleetwatch.db"), data, &d)
				switch {
				case got.snap == nil:
					t.Errorf("%v: neither loaded nor recovered: %v", d, got.cause)
				case got.moved == "":
					t.Errorf("%v: loaded %d clusters, the file not moved aside", d, len(got.snap.Clusters))
				case len(got.snap.Clusters) != 0:
					t.Errorf("%v: recovered, and loaded %d clusters", d, len(got.snap.Clusters))
				}
			}
		})
	}
	for i := range leaves {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d leaf pages emptied", len(leaves))
}
