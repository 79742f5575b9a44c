package aggregate_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestHeldVersion checks the Versions of held objects, in a plain and a compact fleet:
// equal for every read of one version, however it is read (GetHeld, SelectEncoded, held
// decoded by a compact fleet or not) and across a no-op update; new for an update, a
// deletion and re-creation with the same key and resourceVersion, and the same key in
// another cluster. Held.Is agrees with comparing Versions, and Held.Key is the key read.
func TestHeldVersion(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compact=%t", compact), func(t *testing.T) {
			var codec aggregate.Codec
			if compact {
				codec = persist.Codec{}
			}
			f := aggregate.New(aggregate.Options{Codec: codec})
			ix := f.Indexer(aggregatetest.Pods)
			a, b := f.ClusterStore("a", aggregatetest.Pods), f.ClusterStore("b", aggregatetest.Pods)
			key := aggregate.Key{Cluster: "a", Namespace: "ns", Name: "web"}
			version := func() aggregate.Version {
				t.Helper()
				h, ok := ix.GetHeld(key)
				if !ok {
					t.Fatalf("%v not found", key)
				}
				v := h.Version()
				if v.IsZero() || !h.Is(v) || h.Key() != key {
					t.Fatalf("%v: Version zero %t, Is its own Version %t, key %v", key, v.IsZero(), h.Is(v), h.Key())
				}
				return v
			}
			pod := func(rv string) *unstructured.Unstructured {
				return aggregatetest.Pod("ns", "web", rv, map[string]string{"app": "web"})
			}
			mustApply(t, a, pod("1"), false)
			first := version()
			if again := version(); again != first {
				t.Error("two reads of one version have different Versions")
			}
			// A compact fleet holds it decoded from now on; its Version stays.
			if _, ok := ix.Get(key); !ok {
				t.Fatal("Get found nothing")
			}
			if again := version(); again != first {
				t.Error("the Version changed once the object was held decoded")
			}
			selected := ix.SelectEncoded("a", "ns", nil)
			if len(selected) != 1 || selected[0].Version() != first || !selected[0].Is(first) || selected[0].Key() != key {
				t.Errorf("SelectEncoded gave %d objects, or another Version or key than GetHeld", len(selected))
			}
			mustApply(t, a, pod("1"), false)
			if again := version(); again != first {
				t.Error("a no-op update gave a new Version")
			}

			seen := map[aggregate.Version]string{first: "the first version"}
			check := func(what string) {
				t.Helper()
				v := version()
				if prev, ok := seen[v]; ok {
					t.Errorf("%s has the Version of %s", what, prev)
				}
				h, _ := ix.GetHeld(key)
				for old, prev := range seen {
					if h.Is(old) {
						t.Errorf("%s Is the Version of %s", what, prev)
					}
				}
				seen[v] = what
			}
			mustApply(t, a, pod("2"), false)
			check("an update")
			mustDelete(t, a, pod("2"), false)
			mustApply(t, a, pod("2"), false)
			check("a re-creation with the same resourceVersion")
			mustApply(t, b, pod("2"), false)
			h, _ := ix.GetHeld(aggregate.Key{Cluster: "b", Namespace: "ns", Name: "web"})
			if _, ok := seen[h.Version()]; ok {
				t.Error("the same key and resourceVersion in another cluster have the Version of cluster a's")
			}
			if none := (aggregate.Held{}); !none.Version().IsZero() || none.Is(first) || none.Key() != (aggregate.Key{}) {
				t.Error("a Held read from no Indexer has a Version, or a key")
			}
			if h.Is(aggregate.Version{}) {
				t.Error("a Held Is the zero Version")
			}
		})
	}
}

// TestEventHeld checks Event.Held, in a plain and a compact fleet, for handlers with and
// without EncodedOnly: an Added or Updated event's Held is of the version the change
// made, with the Version GetHeld gave right after it, even once the fleet holds a later
// one; its object is that version's; a Deleted event has none.
func TestEventHeld(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		compact, encodedOnly bool
	}{{"plain", false, false}, {"compact", true, false}, {"compact encoded-only", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			var codec aggregate.Codec
			if tc.compact {
				codec = persist.Codec{}
			}
			f := aggregate.New(aggregate.Options{Codec: codec})
			startFleet(t, f)
			ix, s := f.Indexer(aggregatetest.Pods), f.ClusterStore("a", aggregatetest.Pods)
			key := aggregate.Key{Cluster: "a", Namespace: "ns", Name: "web"}
			versions := map[string]aggregate.Version{}
			apply := func(rv string) {
				t.Helper()
				mustApply(t, s, aggregatetest.Pod("ns", "web", rv, nil), false)
				h, ok := ix.GetHeld(key)
				if !ok {
					t.Fatalf("%v not held", key)
				}
				versions[rv] = h.Version()
			}
			apply("1")
			rec := aggregatetest.NewRecorder()
			if _, err := f.AddHandler(rec, aggregate.HandlerOptions{Name: "rec", EncodedOnly: tc.encodedOnly}); err != nil {
				t.Fatal(err)
			}
			apply("2")
			apply("3")
			mustDelete(t, s, aggregatetest.Pod("ns", "web", "3", nil), false)
			if err := rec.WaitForLen(waitCtx(t), 4); err != nil {
				t.Fatal(err)
			}
			events := rec.Events()
			for i, rv := range []string{"1", "2", "3"} {
				e := events[i]
				h, ok := e.Held()
				if !ok {
					t.Fatalf("%s event of %s: no Held", e.Type, rv)
				}
				if h.Key() != key || h.Version() != versions[rv] || !h.Is(versions[rv]) {
					t.Errorf("%s event of %s: key %v, or another Version than GetHeld gave for it", e.Type, rv, h.Key())
				}
				for other, v := range versions {
					if other != rv && h.Is(v) {
						t.Errorf("%s event of %s Is the Version of %s", e.Type, rv, other)
					}
				}
				obj := h.Object
				if obj == nil {
					var err error
					if obj, err = codec.Decode(h.Encoded); err != nil {
						t.Fatal(err)
					}
				}
				if got := aggregatetest.RV(obj); got != rv {
					t.Errorf("%s event of %s: the Held's object is of %s", e.Type, rv, got)
				}
				if tc.compact && h.Encoded == nil {
					t.Errorf("%s event of %s in a compact fleet: the Held has no encoding", e.Type, rv)
				}
			}
			if e := events[3]; e.Type != aggregate.Deleted {
				t.Fatalf("fourth event %s, want Deleted", e.Type)
			} else if _, ok := e.Held(); ok {
				t.Error("a Deleted event has a Held")
			}
			if _, ok := (aggregate.Event{Type: aggregate.Added}).Held(); ok {
				t.Error("an Event that no Fleet delivered has a Held")
			}
		})
	}
}
