package aggregate

import (
	"fmt"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// obj returns a pod-like object whose resourceVersion identifies it in test output.
func obj(name, rv string) runtime.Object {
	u := &unstructured.Unstructured{}
	u.SetNamespace("ns")
	u.SetName(name)
	u.SetResourceVersion(rv)
	return u
}

func describe(p pending) string {
	rv := func(o runtime.Object) string {
		if o == nil {
			return "-"
		}
		return o.(*unstructured.Unstructured).GetResourceVersion()
	}
	e := p.event(false)
	s := fmt.Sprintf("%s %s %s old=%s", e.Type, p.ref.key.Name, rv(e.Object), rv(e.OldObject))
	if e.InitialList {
		s += " initial"
	}
	if e.FinalStateUnknown {
		s += " unknown"
	}
	return s
}

func TestBacklogCoalescing(t *testing.T) {
	ix := newIndexer(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, nil, nil, 0)
	ev := func(typ EventType, name, rv, oldRV string) pending {
		p := pending{ref: objectRef{ix, Key{Cluster: "c", Namespace: "ns", Name: name}}, typ: typ, obj: obj(name, rv)}
		if oldRV != "" {
			p.old = obj(name, oldRV)
		}
		return p
	}
	added := func(name, rv string) pending { return ev(Added, name, rv, "") }
	updated := func(name, rv, old string) pending { return ev(Updated, name, rv, old) }
	// deletedFrom is the deletion of the stored object at rv seen, with final state rv.
	deletedFrom := func(name, rv, seen string) pending { return ev(Deleted, name, rv, seen) }
	deleted := func(name, rv string) pending { return deletedFrom(name, rv, rv) }
	initial := func(p pending) pending { p.initialList = true; return p }
	unknown := func(p pending) pending { p.finalStateUnknown = true; return p }

	tests := []struct {
		name          string
		max           int
		events        []pending
		want          []string
		wantCoalesced int
	}{
		{
			name:   "within max: FIFO, nothing merged",
			max:    10,
			events: []pending{added("a", "1"), updated("a", "2", "1"), deleted("a", "2")},
			want:   []string{"Added a 1 old=-", "Updated a 2 old=1", "Deleted a 2 old=-"},
		},
		{
			name:          "Added then updates: Added with the latest",
			max:           1,
			events:        []pending{added("a", "1"), updated("a", "2", "1"), updated("a", "3", "2")},
			want:          []string{"Added a 3 old=-"},
			wantCoalesced: 2,
		},
		{
			name:          "Added then Deleted cancel out",
			max:           1,
			events:        []pending{added("a", "1"), added("b", "1"), updated("a", "2", "1"), deleted("a", "2")},
			want:          []string{"Added b 1 old=-"},
			wantCoalesced: 3, // the update merged (1), then Added and Deleted cancelled (2)
		},
		{
			name:          "updates: from the first old to the latest",
			max:           1,
			events:        []pending{updated("a", "2", "1"), updated("a", "3", "2"), updated("a", "4", "3")},
			want:          []string{"Updated a 4 old=1"},
			wantCoalesced: 2,
		},
		{
			name:          "update then delete: Deleted with the last known object",
			max:           1,
			events:        []pending{updated("a", "2", "1"), unknown(deleted("a", "2"))},
			want:          []string{"Deleted a 2 old=- unknown"},
			wantCoalesced: 1,
		},
		{
			name:          "Deleted then Added: Updated from the deleted object",
			max:           1,
			events:        []pending{unknown(deleted("a", "1")), added("a", "5")},
			want:          []string{"Updated a 5 old=1"},
			wantCoalesced: 1,
		},
		{
			name:          "Deleted then Added: Updated from the stored object, not the final state",
			max:           1,
			events:        []pending{deletedFrom("a", "3", "2"), added("a", "5")},
			want:          []string{"Updated a 5 old=2"},
			wantCoalesced: 1,
		},
		{
			name:          "Updated, Deleted, Added: Updated from what the handler saw",
			max:           1,
			events:        []pending{updated("a", "2", "1"), deleted("a", "2"), added("a", "5"), updated("a", "6", "5")},
			want:          []string{"Updated a 6 old=1"},
			wantCoalesced: 3,
		},
		{
			name:          "Deleted, Added, Deleted: Deleted",
			max:           1,
			events:        []pending{deleted("a", "1"), added("a", "5"), deleted("a", "5")},
			want:          []string{"Deleted a 5 old=-"},
			wantCoalesced: 2,
		},
		{
			name:          "cancelled, then added again: a new event at the end",
			max:           1,
			events:        []pending{added("a", "1"), added("b", "1"), deleted("a", "1"), added("a", "2")},
			want:          []string{"Added b 1 old=-", "Added a 2 old=-"},
			wantCoalesced: 2,
		},
		{
			name:          "initial list kept only if all merged events had it",
			max:           1,
			events:        []pending{initial(added("a", "1")), initial(updated("a", "2", "1")), initial(added("b", "1")), updated("b", "2", "1")},
			want:          []string{"Added a 2 old=- initial", "Added b 2 old=-"},
			wantCoalesced: 2,
		},
		{
			name:          "merged events keep the position of the object's first event",
			max:           2,
			events:        []pending{added("a", "1"), added("b", "1"), added("c", "1"), updated("a", "2", "1"), updated("b", "2", "1")},
			want:          []string{"Added a 2 old=-", "Added b 2 old=-", "Added c 1 old=-"},
			wantCoalesced: 2,
		},
		{
			name: "overflow merges what was queued before",
			max:  3,
			events: []pending{
				added("a", "1"), updated("a", "2", "1"), updated("a", "3", "2"), // FIFO so far
				added("b", "1"), // overflow: the three events of a merge into one
			},
			want:          []string{"Added a 3 old=-", "Added b 1 old=-"},
			wantCoalesced: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := backlog{max: tt.max}
			coalesced := 0
			for _, e := range tt.events {
				coalesced += b.push(e)
			}
			if coalesced != tt.wantCoalesced {
				t.Errorf("coalesced %d, want %d", coalesced, tt.wantCoalesced)
			}
			if b.live != len(tt.want) {
				t.Errorf("live = %d, want %d", b.live, len(tt.want))
			}
			var got []string
			for {
				p, ok := b.pop()
				if !ok {
					break
				}
				got = append(got, describe(p))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("delivered:\n got %q\nwant %q", got, tt.want)
			}
			if b.live != 0 || b.byRef != nil || len(b.items) != 0 {
				t.Errorf("drained backlog not reset: live=%d byRef=%v items=%d", b.live, b.byRef != nil, len(b.items))
			}
		})
	}
}

// TestBacklogMemoryBoundedByObjects checks that, while coalescing, the backlog's memory
// follows the number of distinct objects, whatever the number of events.
func TestBacklogMemoryBoundedByObjects(t *testing.T) {
	ix := newIndexer(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, nil, nil, 0)
	const objects, max = 100, 10
	b := backlog{max: max}
	ref := func(i int) objectRef { return objectRef{ix, Key{Cluster: "c", Name: fmt.Sprint(i)}} }
	for round := range 1000 {
		for i := range objects {
			rv := fmt.Sprint(round)
			switch round % 3 {
			case 0:
				b.push(pending{ref: ref(i), typ: Added, obj: obj(fmt.Sprint(i), rv)})
			case 1:
				b.push(pending{ref: ref(i), typ: Updated, obj: obj(fmt.Sprint(i), rv)})
			case 2:
				b.push(pending{ref: ref(i), typ: Deleted, obj: obj(fmt.Sprint(i), rv)})
			}
		}
		if b.live > objects {
			t.Fatalf("round %d: %d live events for %d objects", round, b.live, objects)
		}
		if len(b.items) > 2*objects+1024 {
			t.Fatalf("round %d: %d slots for %d objects", round, len(b.items), objects)
		}
	}
	// Pop half, keep pushing: the consumed prefix is reclaimed too.
	for range 5000 {
		b.pop()
		b.push(pending{ref: ref(0), typ: Added, obj: obj("0", "x")})
		if len(b.items) > 2*objects+1024 {
			t.Fatalf("%d slots for %d live events", len(b.items), b.live)
		}
	}
}

// TestBacklogReleasesItsArrayWhenEmpty checks that a backlog that held many events (a
// handler's replay of the fleet) does not keep their array once it has delivered them.
func TestBacklogReleasesItsArrayWhenEmpty(t *testing.T) {
	ix := newIndexer(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, nil, nil, 0)
	for _, n := range []int{10, 100, 9000} {
		b := backlog{max: DefaultMaxBacklog}
		for i := range n {
			b.push(pending{ref: objectRef{ix, Key{Cluster: "c", Name: fmt.Sprint(i)}}, typ: Added, obj: obj(fmt.Sprint(i), "1")})
		}
		for range n {
			if _, ok := b.pop(); !ok {
				t.Fatalf("%d events: the backlog ran empty early", n)
			}
		}
		if c := cap(b.items); c > keptSlots {
			t.Errorf("%d events pushed and popped: the empty backlog keeps %d slots, want at most %d", n, c, keptSlots)
		}
		if n <= keptSlots && b.items == nil {
			t.Errorf("%d events pushed and popped: a small array was dropped, want it kept for the next events", n)
		}
	}
}

// TestReplayReservesBacklog: a handler's replay of the objects it was added after
// allocates its backlog's array once, rather than growing it as it queues them: adding
// a handler allocates as much with 2,000 objects to replay as with one (the events
// stay queued: the fleets are not started), give or take the few that the race
// detector adds (it drops a sync.Pool's items at random): growing the array as the
// events come would take a dozen more.
func TestReplayReservesBacklog(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	allocs := func(n int, cluster string) float64 {
		f := New(Options{})
		for _, c := range []string{"a", "b"} {
			s := f.ClusterStore(c, gvr)
			for i := range n {
				if err := s.Apply(obj(fmt.Sprintf("p%d", i), "1"), true); err != nil {
					t.Fatal(err)
				}
			}
		}
		return testing.AllocsPerRun(20, func() {
			if _, err := f.AddHandler(HandlerFunc(func(Event) {}), HandlerOptions{Cluster: cluster}); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, cluster := range []string{"a", ""} {
		if one, many := allocs(1, cluster), allocs(2000, cluster); many > one+4 {
			t.Errorf("cluster %q: adding a handler allocates %v times with 1 object to replay, %v with 2,000", cluster, one, many)
		}
	}
}
