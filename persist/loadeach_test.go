package persist

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// TestLoadEachPartialMatchesWhole: a partial load hands out each unstructured object as
// the members that file it, with its stored encoding, which decodes to what a whole load
// returns; metadata-only objects come whole. Clusters come in the order of their names,
// each once, with the same resources as a whole load.
func TestLoadEachPartialMatchesWhole(t *testing.T) {
	path := testPath(t)
	writeDamageSample(t, path)
	s := openTest(t, path, Options{})
	whole := mustLoad(t, s)
	var order []string
	err := s.LoadEach(LoadOptions{Partial: true}, func(cluster string, cs *ClusterSnapshot) error {
		order = append(order, cluster)
		want := whole.Clusters[cluster]
		if want == nil || cs.Identity != want.Identity || len(cs.Resources) != len(want.Resources) {
			t.Fatalf("cluster %q: got %+v, want %+v", cluster, cs, want)
		}
		for key, rs := range cs.Resources {
			wrs := want.Resources[key]
			if rs.ResourceVersion != wrs.ResourceVersion || len(rs.Objects) != len(wrs.Objects) || len(rs.Encoded) != len(rs.Objects) {
				t.Fatalf("%s %s: rv %q with %d objects and %d encodings, want rv %q with %d objects", cluster, key, rs.ResourceVersion, len(rs.Objects), len(rs.Encoded), wrs.ResourceVersion, len(wrs.Objects))
			}
			for i, obj := range rs.Objects {
				checkPartial(t, obj, rs.Encoded[i], wrs.Objects[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha", "beta"}; !slices.Equal(order, want) {
		t.Errorf("clusters handed out %v, want %v", order, want)
	}
}

// checkPartial checks what a partial load gave for an object against what a whole load
// gave.
func checkPartial(t *testing.T, obj runtime.Object, encoded []byte, whole runtime.Object) {
	t.Helper()
	if encoded == nil {
		if _, ok := whole.(*unstructured.Unstructured); ok {
			t.Errorf("an unstructured object came whole: %v", whole)
		}
		if !reflect.DeepEqual(obj, whole) {
			t.Errorf("whole object %v, want %v", obj, whole)
		}
		return
	}
	if want := filing(whole.(*unstructured.Unstructured)); !sameFiling(obj, want) {
		t.Errorf("partial object %v, want %v", obj, want)
	}
	decoded, err := Codec{}.Decode(encoded)
	if err != nil || !reflect.DeepEqual(decoded, whole) {
		t.Errorf("the encoding decodes to %v (%v), want %v", decoded, err, whole)
	}
}

// filing is what a partial decoding makes of u, decoded whole: what files it.
func filing(u *unstructured.Unstructured) *metav1.PartialObjectMetadata {
	p := &metav1.PartialObjectMetadata{}
	p.APIVersion, p.Kind = u.GetAPIVersion(), u.GetKind()
	p.Name, p.Namespace, p.UID, p.ResourceVersion = u.GetName(), u.GetNamespace(), u.GetUID(), u.GetResourceVersion()
	if l := u.GetLabels(); len(l) > 0 {
		p.Labels = l
	}
	return p
}

// sameFiling reports whether p, a partial decoding, files as want does, its labels
// read through GetLabels: the labels' nil and empty maps are the same.
func sameFiling(p runtime.Object, want *metav1.PartialObjectMetadata) bool {
	got, ok := p.(*PartialObject)
	if !ok {
		return false
	}
	if _, ok := got.EncodedLabels(); !ok {
		return false
	}
	g := got.PartialObjectMetadata
	g.Labels = got.GetLabels()
	if len(g.Labels) == 0 {
		g.Labels = nil
	}
	return reflect.DeepEqual(&g, want)
}

// clusterPods is how many pods writeClusters writes for each cluster: more than two
// chunks of a load.
const clusterPods = 2*loadChunk + 3

// writeClusters writes clusterPods pods for each of clusters to s, and flushes them.
func writeClusters(t *testing.T, s *Store, clusters ...string) {
	t.Helper()
	w := s.NewWriter(WriterOptions{})
	for _, cluster := range clusters {
		for i := range clusterPods {
			w.Upsert(cluster, pods, object("ns", fmt.Sprintf("pod-%04d", i), "1"))
		}
		w.Checkpoint(cluster, pods, "100")
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// badValueKey is the object whose stored value the tests of damaged files replace: in
// the second run of its cluster's objects.
const badValueKey = "ns/pod-0300"

// openWithBadValue writes clusters to a new file at path, as writeClusters does, replaces
// the value of badValueKey in the cluster bad with one that does not decode, and opens
// the file again.
func openWithBadValue(t *testing.T, path, bad string, clusters ...string) *Store {
	t.Helper()
	s := openTest(t, path, Options{})
	writeClusters(t, s, clusters...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	putValue(t, path, bad, pods, badValueKey, []byte("not a sealed object"))
	return openTest(t, path, Options{})
}

// holdBadValue has the decoders wait before badValueKey of cluster until the channel it
// returns is closed, or 10 s have passed.
func holdBadValue(t *testing.T, cluster string) chan struct{} {
	handed := make(chan struct{})
	testHookDecode = func(c *chunk, i int) {
		if c.cluster == cluster && c.keys[i] == badValueKey {
			select {
			case <-handed:
			case <-time.After(10 * time.Second):
			}
		}
	}
	t.Cleanup(func() { testHookDecode = nil })
	return handed
}

// loadEachCorrupt runs s.LoadEach(opts, fn) on a file with a bad value, which must end
// it with ErrCorrupt within 30 s and move the file aside.
func loadEachCorrupt(t *testing.T, s *Store, opts LoadOptions, fn func(string, *ClusterSnapshot) error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.LoadEach(opts, fn) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("LoadEach: %v, want ErrCorrupt", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("LoadEach did not return after a value failed to decode")
	}
	if moved, _ := s.Recovered(); moved == "" {
		t.Error("the file was not moved aside")
	}
}

// TestLoadEachCorruptMidway: a cluster that does not decode, in the middle of the file,
// ends LoadEach with ErrCorrupt after the clusters before it were handed out, none after
// it is, and the file is moved aside, as Load does.
func TestLoadEachCorruptMidway(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			path := testPath(t)
			s := openWithBadValue(t, path, "b", "a", "b", "c")
			// The bad value is decoded only once "a" was handed out, so that LoadEach
			// fails after it, as it does on a large file.
			handed := holdBadValue(t, "b")
			var got []string
			loadEachCorrupt(t, s, LoadOptions{Partial: partial}, func(cluster string, cs *ClusterSnapshot) error {
				got = append(got, cluster)
				if cluster == "a" {
					close(handed)
				}
				return nil
			})
			if !slices.Equal(got, []string{"a"}) {
				t.Errorf("clusters handed out %v, want [a]", got)
			}
			if snap, err := s.Load(); err != nil || len(snap.Clusters) != 0 {
				t.Errorf("the new file: %v, %d clusters", err, len(snap.Clusters))
			}
		})
	}
}

// TestLoadEachCorruptFirst: a bad value in the first cluster, which the walk waits to
// be handed out before it goes on, ends LoadEach with ErrCorrupt rather than leaving
// the walk waiting; no cluster is handed out, and the file is moved aside.
func TestLoadEachCorruptFirst(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			path := testPath(t)
			s := openWithBadValue(t, path, "a", "a", "b", "c")

			var got []string
			loadEachCorrupt(t, s, LoadOptions{Partial: partial}, func(cluster string, cs *ClusterSnapshot) error {
				got = append(got, cluster)
				return nil
			})
			if len(got) != 0 {
				t.Errorf("clusters handed out %v, want none", got)
			}
		})
	}
}

// TestLoadEachStopsOnError: an error of fn ends the load, is returned, and leaves the
// file in place.
func TestLoadEachStopsOnError(t *testing.T) {
	path := testPath(t)
	writeDamageSample(t, path)
	s := openTest(t, path, Options{})
	stop := errors.New("stop")
	calls := 0
	err := s.LoadEach(LoadOptions{}, func(string, *ClusterSnapshot) error {
		calls++
		return stop
	})
	if !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("LoadEach: %v after %d calls, want %v after 1", err, calls, stop)
	}
	if moved, cause := s.Recovered(); moved != "" || cause != nil {
		t.Errorf("the file was moved aside to %q (%v)", moved, cause)
	}
	if snap := mustLoad(t, s); len(snap.Clusters) != 2 {
		t.Errorf("the file holds %d clusters, want 2", len(snap.Clusters))
	}
}

// putValue writes value, as it is, as the stored object key of resource of cluster in
// the file at path, which no Store has open.
func putValue(t *testing.T, path, cluster string, resource ResourceKey, key string, value []byte) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketClusters).Bucket([]byte(cluster)).Bucket(bucketResources).Bucket([]byte(resource)).Bucket(bucketObjects)
		return b.Put([]byte(key), value)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodePartial checks the partial decoding against decode: the same errors, and
// for what both decode, the members that file the object, with data as the encoding, or
// the same whole object.
func FuzzDecodePartial(f *testing.F) {
	for _, tt := range fastDecodeCases {
		data, err := direct.Marshal(tt.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, obj := range []runtime.Object{testPod(f, "ns", "p"), testMetadata(f, "ns", "p")} {
		data, err := encodeObject(obj)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		if c := compress(data); c[0] == formatCompressed {
			f.Add(c)
			f.Add(c[:len(c)/2])
		}
	}
	addDictSeeds(f)
	f.Add([]byte{0xa2, 0x41, 'a', 0x01, 0x41, 'a', 0x02})                                    // a repeated key
	f.Add([]byte{0xa1, 0x48, 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', 0xa1, 0x41, 'x', 0xc0}) // a tag, skipped
	f.Fuzz(func(t *testing.T, data []byte) {
		var whole, partial fastDecoder
		want, werr := whole.decode(string(data))
		got, encoded, err := partial.decodePartial(string(data))
		if fmt.Sprint(err) != fmt.Sprint(werr) {
			t.Fatalf("partial decoding: %v, whole: %v", err, werr)
		}
		if werr != nil {
			return
		}
		if encoded == nil {
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("partial decoding gave up with %#v, whole: %#v", got, want)
			}
			return
		}
		u, ok := want.(*unstructured.Unstructured)
		if !ok {
			t.Fatalf("partial decoding of a %T", want)
		}
		if !sameFiling(got, filing(u)) {
			t.Fatalf("partial decoding %#v, want %#v", got, filing(u))
		}
		if string(encoded) != string(data) {
			t.Fatal("the encoding is not the data")
		}
	})
}

// TestLoadEachFirstClusterAlone: no object of the second cluster is decoded before fn
// has returned for the first (the first cluster has the CPUs to itself); the next
// clusters are decoded while fn runs, as before.
func TestLoadEachFirstClusterAlone(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			path := testPath(t)
			s := openTest(t, path, Options{})
			writeClusters(t, s, "a", "b", "c")
			var (
				mu      sync.Mutex
				decoded = map[string]int{}
			)
			testHookDecode = func(c *chunk, _ int) {
				mu.Lock()
				decoded[c.cluster]++
				mu.Unlock()
			}
			t.Cleanup(func() { testHookDecode = nil })
			// While fn holds the first cluster, the decoders would have time to start on
			// the second: nothing of it may be decoded.
			var order []string
			var during []map[string]int
			err := s.LoadEach(LoadOptions{Partial: partial}, func(cluster string, cs *ClusterSnapshot) error {
				order = append(order, cluster)
				if cluster == "a" {
					time.Sleep(50 * time.Millisecond)
				}
				mu.Lock()
				during = append(during, maps.Clone(decoded))
				mu.Unlock()
				if n := len(cs.Resources[pods].Objects); n != clusterPods {
					t.Errorf("cluster %s: %d objects, want %d", cluster, n, clusterPods)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(order, []string{"a", "b", "c"}) {
				t.Fatalf("clusters handed out %v, want [a b c]", order)
			}
			if got := during[0]; got["b"] != 0 || got["c"] != 0 || got["a"] != clusterPods {
				t.Errorf("objects decoded when fn returned for the first cluster: %v, want only a's %d", got, clusterPods)
			}
		})
	}
}
