package aggregate_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// namesOf returns the sorted namespace/name of each of objs (the clusters of the tests'
// fleets hold the same names: the same name twice is two clusters' objects).
func namesOf(t *testing.T, objs []runtime.Object) []string {
	t.Helper()
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.GetNamespace()+"/"+m.GetName())
	}
	slices.Sort(out)
	return out
}

// namesOfKeys is namesOf of keys.
func namesOfKeys(keys []aggregate.Key) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = k.Namespace + "/" + k.Name
	}
	slices.Sort(out)
	return out
}

// bruteForce returns namesOf the pods of f that selector matches, from every object's
// labels, without the label index.
func bruteForce(t *testing.T, f *aggregate.Fleet, selector labels.Selector) []string {
	t.Helper()
	var matched []runtime.Object
	for _, obj := range f.Indexer(aggregatetest.Pods).List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			t.Fatal(err)
		}
		if selector.Matches(labels.Set(m.GetLabels())) {
			matched = append(matched, obj)
		}
	}
	return namesOf(t, matched)
}

// labelFleet returns a fleet of pods in two clusters, some of them relabeled and
// deleted, whose label index no read has asked for yet.
func labelFleet(t *testing.T) *aggregate.Fleet {
	t.Helper()
	f := aggregate.New(aggregate.Options{})
	for _, c := range []string{"a", "b"} {
		s := f.ClusterStore(c, aggregatetest.Pods)
		for i := range 40 {
			mustApply(t, s, aggregatetest.Pod(fmt.Sprint("ns-", i%2), fmt.Sprint("p-", i), "1", map[string]string{"app": fmt.Sprint("app-", i%4), "tier": "web"}), true)
		}
		for i := range 10 {
			// Relabeled: app-0 … app-3 become app-9 for these.
			mustApply(t, s, aggregatetest.Pod(fmt.Sprint("ns-", i%2), fmt.Sprint("p-", i), "2", map[string]string{"app": "app-9"}), false)
		}
		for i := 30; i < 40; i++ {
			mustDelete(t, s, aggregatetest.Pod(fmt.Sprint("ns-", i%2), fmt.Sprint("p-", i), "3", nil), false)
		}
	}
	return f
}

// TestLabelIndexBuiltAtTheFirstLabelRead: the writes keep no label index until a read by
// label asks for it; that read, whichever it is, builds it from the objects as they are,
// and the writes after keep it.
func TestLabelIndexBuiltAtTheFirstLabelRead(t *testing.T) {
	sel := labels.SelectorFromSet(labels.Set{"app": "app-1"})
	reads := map[string]func(*aggregate.Fleet) []string{
		"Select": func(f *aggregate.Fleet) []string {
			return namesOf(t, f.Indexer(aggregatetest.Pods).Select(sel))
		},
		"SelectEncoded": func(f *aggregate.Fleet) []string {
			var keys []aggregate.Key
			for _, h := range f.Indexer(aggregatetest.Pods).SelectEncoded("", "", sel) {
				keys = append(keys, h.Key())
			}
			return namesOfKeys(keys)
		},
		"IndexKeys": func(f *aggregate.Fleet) []string {
			keys, err := f.Indexer(aggregatetest.Pods).IndexKeys(aggregate.IndexLabel, aggregate.LabelIndexValue("app", "app-1"))
			if err != nil {
				t.Fatal(err)
			}
			return namesOfKeys(keys)
		},
		"ByIndex": func(f *aggregate.Fleet) []string {
			objs, err := f.Indexer(aggregatetest.Pods).ByIndex(aggregate.IndexLabel, aggregate.LabelIndexValue("app", "app-1"))
			if err != nil {
				t.Fatal(err)
			}
			return namesOf(t, objs)
		},
		"cluster lister": func(f *aggregate.Fleet) []string {
			var out []string
			for _, c := range []string{"a", "b"} {
				objs, err := f.Lister(aggregatetest.Pods).Cluster(c).List(sel)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, namesOf(t, objs)...)
			}
			slices.Sort(out)
			return out
		},
		"namespace lister": func(f *aggregate.Fleet) []string {
			var out []string
			for _, c := range []string{"a", "b"} {
				for _, ns := range []string{"ns-0", "ns-1"} {
					objs, err := f.Lister(aggregatetest.Pods).Cluster(c).ByNamespace(ns).List(sel)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, namesOf(t, objs)...)
				}
			}
			slices.Sort(out)
			return out
		},
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			f := labelFleet(t)
			ix := f.Indexer(aggregatetest.Pods)
			if aggregate.LabelsKept(ix) {
				t.Fatal("the label index is kept before any read by label")
			}
			if len(ix.Select(labels.Everything())) != 60 || aggregate.LabelsKept(ix) {
				t.Fatal("a read of everything asked for the label index, or the fleet does not hold 60 pods")
			}
			want := bruteForce(t, f, sel)
			if len(want) != 10 {
				t.Fatalf("the fleet has %d pods with app=app-1, want 10", len(want))
			}
			if got := read(f); !slices.Equal(got, want) {
				t.Errorf("first read by label: %q, want %q", got, want)
			}
			if !aggregate.LabelsKept(ix) {
				t.Fatal("the label index is not kept after a read by label")
			}
			// Writes after the build keep it: an add, a relabel into and out of the
			// selector, a delete.
			s := f.ClusterStore("a", aggregatetest.Pods)
			mustApply(t, s, aggregatetest.Pod("ns-0", "new", "5", map[string]string{"app": "app-1"}), false)
			mustApply(t, s, aggregatetest.Pod("ns-1", "p-13", "5", map[string]string{"app": "app-2"}), false)
			mustApply(t, s, aggregatetest.Pod("ns-0", "p-14", "5", map[string]string{"app": "app-1"}), false)
			mustDelete(t, s, aggregatetest.Pod("ns-1", "p-17", "6", nil), false)
			if got, want := read(f), bruteForce(t, f, sel); !slices.Equal(got, want) {
				t.Errorf("read by label after writes: %q, want %q", got, want)
			}
		})
	}
}

// TestLabelIndexBuiltWhileWritten builds the label index with reads by label made for the
// first time while writers relabel, add and delete objects (run it with -race): once the
// writers are done, the index answers as the objects' labels do.
func TestLabelIndexBuiltWhileWritten(t *testing.T) {
	f := labelFleet(t)
	ix := f.Indexer(aggregatetest.Pods)
	var wg sync.WaitGroup
	for _, c := range []string{"a", "b"} {
		s := f.ClusterStore(c, aggregatetest.Pods)
		wg.Go(func() {
			for i := range 400 {
				name := fmt.Sprint("p-", i%50)
				ns := fmt.Sprint("ns-", i%2)
				rv := fmt.Sprint(10 + i)
				if i%7 == 0 {
					if err := s.Delete(aggregatetest.Pod(ns, name, rv, nil), false); err != nil {
						t.Error(err)
					}
					continue
				}
				if err := s.Apply(aggregatetest.Pod(ns, name, rv, map[string]string{"app": fmt.Sprint("app-", i%5)}), false); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range 4 {
		wg.Go(func() {
			_ = ix.Select(labels.SelectorFromSet(labels.Set{"app": fmt.Sprint("app-", i)}))
		})
	}
	wg.Wait()
	for i := range 5 {
		sel := labels.SelectorFromSet(labels.Set{"app": fmt.Sprint("app-", i)})
		if got, want := namesOf(t, ix.Select(sel)), bruteForce(t, f, sel); !slices.Equal(got, want) {
			t.Errorf("app-%d: %q, want %q", i, got, want)
		}
	}
}
