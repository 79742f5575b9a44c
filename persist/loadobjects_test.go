package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// objectsRun is one call of LoadOptions.Objects.
type objectsRun struct {
	cluster  string
	resource ResourceKey
	objects  []runtime.Object
	encoded  [][]byte
}

// TestLoadEachObjects: with LoadOptions.Objects, each cluster's objects come in runs of
// at most loadChunk, in the order of the file, every run of a cluster before fn gets
// the cluster, and fn gets the same objects (and encodings) in the same order, as
// without Objects.
func TestLoadEachObjects(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			path := testPath(t)
			s := openTest(t, path, Options{})
			writeClusters(t, s, "a", "b", "c")

			var plain []*ClusterSnapshot
			if err := s.LoadEach(LoadOptions{Partial: partial}, func(_ string, cs *ClusterSnapshot) error {
				plain = append(plain, cs)
				return nil
			}); err != nil {
				t.Fatal(err)
			}

			var runs []objectsRun
			var order []string // "runs of x" and "fn x", in the order of the calls
			var got []*ClusterSnapshot
			opts := LoadOptions{Partial: partial, Objects: func(cluster string, resource ResourceKey, objects []runtime.Object, encoded [][]byte) error {
				if n := len(order); n == 0 || order[n-1] != "runs of "+cluster {
					order = append(order, "runs of "+cluster)
				}
				runs = append(runs, objectsRun{cluster, resource, objects, encoded})
				return nil
			}}
			if err := s.LoadEach(opts, func(cluster string, cs *ClusterSnapshot) error {
				order = append(order, "fn "+cluster)
				got = append(got, cs)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := []string{"runs of a", "fn a", "runs of b", "fn b", "runs of c", "fn c"}; !slices.Equal(order, want) {
				t.Errorf("calls %q, want %q", order, want)
			}
			if !reflect.DeepEqual(got, plain) {
				t.Error("fn got other clusters with Objects than without")
			}
			for i, cluster := range []string{"a", "b", "c"} {
				var objects []runtime.Object
				var encoded [][]byte
				for _, r := range runs {
					if r.cluster != cluster {
						continue
					}
					if r.resource != pods {
						t.Errorf("a run of %s is of %q, want %q", cluster, r.resource, pods)
					}
					if len(r.objects) == 0 || len(r.objects) > loadChunk {
						t.Errorf("a run of %s has %d objects, want 1 to %d", cluster, len(r.objects), loadChunk)
					}
					if partial != (r.encoded != nil) || (r.encoded != nil && len(r.encoded) != len(r.objects)) {
						t.Errorf("a run of %s has %d encodings for %d objects (partial %v)", cluster, len(r.encoded), len(r.objects), partial)
					}
					objects = append(objects, r.objects...)
					encoded = append(encoded, r.encoded...)
				}
				rs := got[i].Resources[pods]
				if len(objects) != clusterPods || !slices.Equal(objects, rs.Objects) {
					t.Errorf("the runs of %s have %d objects, not those fn got (%d)", cluster, len(objects), len(rs.Objects))
				}
				if partial && !reflect.DeepEqual(encoded, rs.Encoded) {
					t.Errorf("the runs of %s have other encodings than fn got", cluster)
				}
				for j, obj := range objects {
					a, err := meta.Accessor(obj)
					if err != nil {
						t.Fatal(err)
					}
					if want := fmt.Sprintf("pod-%04d", j); a.GetName() != want {
						t.Fatalf("object %d of the runs of %s is %s, want %s", j, cluster, a.GetName(), want)
					}
				}
			}
		})
	}
}

// TestLoadEachObjectsCorruptLater: a bad value in a later run of the first cluster ends
// LoadEach with ErrCorrupt after the runs before it were handed to Objects (which the
// caller takes back), without fn getting the cluster; the file is moved aside. The
// objects handed out before the failure point nowhere into the file's memory map: once
// the Store is closed and the file unmapped, they read the same (a view left in the map
// would fault here).
func TestLoadEachObjectsCorruptLater(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			path := testPath(t)
			s := openWithBadValue(t, path, "a", "a", "b")
			// The bad value, in the second run, is decoded only once the first run was
			// handed out.
			handed := holdBadValue(t, "a")
			runs := 0
			var clusters []string
			var kept []runtime.Object
			opts := LoadOptions{Partial: partial, Objects: func(cluster string, _ ResourceKey, objects []runtime.Object, _ [][]byte) error {
				if runs++; runs == 1 {
					kept = objects
					close(handed)
				}
				return nil
			}}
			loadEachCorrupt(t, s, opts, func(cluster string, _ *ClusterSnapshot) error {
				clusters = append(clusters, cluster)
				return nil
			})
			before, err := json.Marshal(kept)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if after, err := json.Marshal(kept); err != nil || !bytes.Equal(after, before) || len(kept) == 0 {
				t.Errorf("the %d objects handed out before the bad value changed once the Store was closed (%v)", len(kept), err)
			}
			if runs != 1 {
				t.Errorf("%d runs handed out, want 1 (the one before the bad value)", runs)
			}
			if len(clusters) != 0 {
				t.Errorf("fn got %v, want no cluster", clusters)
			}
		})
	}
}

// TestLoadEachObjectsError: an error of Objects ends the load, is returned, fn gets no
// cluster, and the file stays in place.
func TestLoadEachObjectsError(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	writeClusters(t, s, "a", "b")
	stop := errors.New("stop")
	runs, calls := 0, 0
	err := s.LoadEach(LoadOptions{Objects: func(string, ResourceKey, []runtime.Object, [][]byte) error {
		runs++
		return stop
	}}, func(string, *ClusterSnapshot) error {
		calls++
		return nil
	})
	if !errors.Is(err, stop) || runs != 1 || calls != 0 {
		t.Fatalf("LoadEach: %v after %d runs and %d calls of fn, want %v after 1 and 0", err, runs, calls, stop)
	}
	if moved, cause := s.Recovered(); moved != "" || cause != nil {
		t.Errorf("the file was moved aside to %q (%v)", moved, cause)
	}
	if snap := mustLoad(t, s); len(snap.Clusters) != 2 {
		t.Errorf("the file holds %d clusters, want 2", len(snap.Clusters))
	}
}
