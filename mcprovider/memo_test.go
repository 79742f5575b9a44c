package mcprovider

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// TestTypedMemoReads checks that the typed reads of a cluster's cache go through the
// memo, over a plain and compact fleets: a second read copies the object the memo keeps
// (which the test alters to tell it apart), and the caller owns the copy; an update, a
// deletion, and a re-creation with the resourceVersion of the deleted object are read
// as the fleet holds them, never from what the memo kept of another version.
func TestTypedMemoReads(t *testing.T) {
	for _, tc := range fleetCodecs {
		t.Run(tc.name, func(t *testing.T) {
			p, views := newTestProviderOf(t, tc.codec)
			a, s := views["a"], p.fleet.ClusterStore("a", configMaps)
			ctx := t.Context()
			key := client.ObjectKey{Namespace: "ns", Name: "one"}
			get := func() (*corev1.ConfigMap, error) {
				var cm corev1.ConfigMap
				err := a.Get(ctx, key, &cm)
				return &cm, err
			}
			list := func() map[string]string {
				var l corev1.ConfigMapList
				if err := a.List(ctx, &l, client.InNamespace("ns")); err != nil {
					t.Fatal(err)
				}
				out := map[string]string{}
				for _, cm := range l.Items {
					out[cm.Name] = cm.ResourceVersion + ":" + cm.Data["owner"]
				}
				return out
			}
			want := func(what, rv, owner string) {
				t.Helper()
				cm, err := get()
				if err != nil || cm.ResourceVersion != rv || cm.Data["owner"] != owner || cm.Kind != "ConfigMap" {
					t.Errorf("%s: Get: %v, %s:%s %q; want %s:%s", what, err, cm.ResourceVersion, cm.Data["owner"], cm.Kind, rv, owner)
				}
				if got := list()["one"]; got != rv+":"+owner {
					t.Errorf("%s: List has %q, want %s:%s", what, got, rv, owner)
				}
			}

			if _, err := get(); err != nil {
				t.Fatal(err)
			}
			if n := p.memo.Len(); n != 1 {
				t.Fatalf("%d objects kept after one Get, want 1", n)
			}
			kept, ok := p.memo.Kept(aggregate.Key{Cluster: "a", Namespace: "ns", Name: "one"}, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if !ok {
				t.Fatal("nothing kept of one")
			}
			kept.(*corev1.ConfigMap).Data["owner"] = "kept"
			want("a second read", "1", "kept")
			cm, _ := get()
			cm.Data["owner"] = "changed"
			want("a read after the caller changed its copy", "1", "kept")
			if n := p.memo.Len(); n != 2 {
				t.Errorf("%d objects kept after a List of 2, want 2", n)
			}

			applyAs(t, tc.codec, s, configMap("ns", "one", "10", nil, map[string]string{"owner": "updated"}), false)
			want("after an update", "10", "updated")
			if err := s.Delete(configMap("ns", "one", "10", nil, nil), false); err != nil {
				t.Fatal(err)
			}
			if _, err := get(); !apierrors.IsNotFound(err) {
				t.Errorf("Get after a deletion: %v, want NotFound", err)
			}
			if _, ok := list()["one"]; ok {
				t.Error("List after a deletion has the deleted object")
			}
			applyAs(t, tc.codec, s, configMap("ns", "one", "10", nil, map[string]string{"owner": "recreated"}), false)
			want("after a re-creation with the same resourceVersion", "10", "recreated")
			var other corev1.ConfigMap
			if err := views["b"].Get(ctx, key, &other); err != nil || other.Data["owner"] != "b" {
				t.Errorf("Get of the same key in cluster b: %v, owner %q", err, other.Data["owner"])
			}
		})
	}
}

// TestTypedMemoOptions checks Options.TypedObjects: the default, a bound, and none.
func TestTypedMemoOptions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opt    int
		size   int
		maxLen int
	}{
		{name: "default", opt: 0, size: DefaultTypedObjects, maxLen: 3},
		{name: "bound", opt: 2, size: 2, maxLen: 2},
		{name: "none", opt: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, views := newTestProviderWith(t, nil, Options{TypedObjects: tc.opt})
			if p.memo.Size() != tc.size {
				t.Fatalf("TypedObjects %d: memo %+v, want size %d", tc.opt, p.memo, tc.size)
			}
			for range 2 {
				var l corev1.ConfigMapList
				if err := views["a"].List(t.Context(), &l); err != nil || len(l.Items) != 3 {
					t.Fatalf("List: %v, %d items, want 3", err, len(l.Items))
				}
				for _, cm := range l.Items {
					if cm.Data["owner"] != "a" {
						t.Errorf("%s/%s: owner %q", cm.Namespace, cm.Name, cm.Data["owner"])
					}
				}
			}
			if n := p.memo.Len(); n > tc.maxLen || (tc.maxLen > 0 && n == 0) {
				t.Errorf("%d objects kept, want 1 to %d", n, tc.maxLen)
			}
		})
	}
}

// TestTypedMemoConcurrentReads reads typed objects from several goroutines, through a
// memo smaller than the objects read, while a writer updates them: every read is of the
// version the fleet held when it began or a later one, whole (its data matches its
// resourceVersion), and the caller's to change. Run it with -race.
func TestTypedMemoConcurrentReads(t *testing.T) {
	const (
		objects = 16
		rounds  = 50
		readers = 4
	)
	for _, tc := range fleetCodecs {
		t.Run(tc.name, func(t *testing.T) {
			p, views := newTestProviderWith(t, tc.codec, Options{TypedObjects: 4})
			s, a := p.fleet.ClusterStore("a", configMaps), views["a"]
			ctx := t.Context()
			var published [objects]atomic.Int64
			apply := func(i int, rv int64) {
				v := strconv.FormatInt(rv, 10)
				applyAs(t, tc.codec, s, configMap("c", fmt.Sprintf("cm-%02d", i), v, nil, map[string]string{"v": v}), false)
				published[i].Store(rv)
			}
			for i := range objects {
				apply(i, 100)
			}
			check := func(cm *corev1.ConfigMap, floor int64) error {
				rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
				if err != nil || cm.Data["v"] != cm.ResourceVersion || rv < floor {
					return fmt.Errorf("%s: resourceVersion %q with data %v, read after %d was held", cm.Name, cm.ResourceVersion, cm.Data, floor)
				}
				// The copy is the caller's: -race reports a write to a shared one.
				cm.Data["v"] = "changed"
				return nil
			}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			errs := make(chan error, readers)
			for r := range readers {
				wg.Go(func() {
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						i := (n*7 + r) % objects
						floor := published[i].Load()
						var cm corev1.ConfigMap
						err := a.Get(ctx, client.ObjectKey{Namespace: "c", Name: fmt.Sprintf("cm-%02d", i)}, &cm)
						if err == nil {
							err = check(&cm, floor)
						}
						if err == nil && n%8 == 0 {
							var floors [objects]int64
							for j := range floors {
								floors[j] = published[j].Load()
							}
							var l corev1.ConfigMapList
							if err = a.List(ctx, &l, client.InNamespace("c")); err == nil && len(l.Items) != objects {
								err = fmt.Errorf("listed %d objects, want %d", len(l.Items), objects)
							}
							for k := 0; err == nil && k < len(l.Items); k++ {
								j, _ := strconv.Atoi(l.Items[k].Name[len("cm-"):])
								err = check(&l.Items[k], floors[j])
							}
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			for round := range int64(rounds) {
				for i := range objects {
					apply(i, 101+round)
				}
			}
			close(stop)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := p.memo.Len(); n > 4 {
				t.Errorf("%d objects kept, more than the bound 4", n)
			}
		})
	}
}

// gatedHandler is a client-go handler of ConfigMaps that sends what it gets on events,
// changing each object it gets (which the memo must not keep), and waits on gate, if
// set, before it handles an update to the resourceVersion gateRV.
type gatedHandler struct {
	events chan string
	gateRV string
	gate   chan struct{}
}

func (g *gatedHandler) got(what string, obj any) {
	cm := obj.(*corev1.ConfigMap)
	g.events <- what + " " + cm.Name + "@" + cm.ResourceVersion + ":" + cm.Data["owner"]
	cm.Data["owner"] = "handler"
}

func (g *gatedHandler) OnAdd(obj any, _ bool) { g.got("add", obj) }
func (g *gatedHandler) OnUpdate(_, obj any) {
	if g.gate != nil && obj.(*corev1.ConfigMap).ResourceVersion == g.gateRV {
		<-g.gate
	}
	g.got("update", obj)
}
func (g *gatedHandler) OnDelete(obj any) { g.events <- "delete " + obj.(*corev1.ConfigMap).Name }

// TestTypedEventsFillTheMemo checks that a typed informer's events fill the memo, over a
// plain and compact fleets: after an add or an update, the Get of its object copies
// what the memo keeps for that version (which the test alters to tell it apart), kept
// apart from the handler's object; a Get of a later version, held before or after the
// event of an earlier one is handled, converts it; a deletion's Get is NotFound.
func TestTypedEventsFillTheMemo(t *testing.T) {
	for _, tc := range fleetCodecs {
		t.Run(tc.name, func(t *testing.T) {
			p, views := newTestProviderOf(t, tc.codec)
			a, s := views["a"], p.fleet.ClusterStore("a", configMaps)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() { _ = p.fleet.Start(ctx) }()
			key := client.ObjectKey{Namespace: "ns", Name: "one"}
			get := func() (*corev1.ConfigMap, error) {
				var cm corev1.ConfigMap
				err := a.Get(ctx, key, &cm)
				return &cm, err
			}
			wantGet := func(what, rv, owner string) {
				t.Helper()
				cm, err := get()
				if err != nil || cm.ResourceVersion != rv || cm.Data["owner"] != owner {
					t.Fatalf("%s: Get: %v, %s:%s; want %s:%s", what, err, cm.ResourceVersion, cm.Data["owner"], rv, owner)
				}
			}
			// alter marks what the memo keeps of one's version rv, which must be what the
			// event's handler was given, and not the handler's object.
			alter := func(rv, owner, mark string) {
				t.Helper()
				kept, ok := p.memo.Kept(aggregate.Key{Cluster: "a", Namespace: "ns", Name: "one"}, corev1.SchemeGroupVersion.WithKind("ConfigMap"))
				if !ok {
					t.Fatalf("nothing kept of one@%s", rv)
				}
				cm := kept.(*corev1.ConfigMap)
				if cm.ResourceVersion != rv || cm.Data["owner"] != owner {
					t.Fatalf("kept one@%s:%s, want @%s:%s", cm.ResourceVersion, cm.Data["owner"], rv, owner)
				}
				cm.Data["owner"] = mark
			}
			h := &gatedHandler{events: make(chan string, 16)}
			want := func(events ...string) {
				t.Helper()
				var got []string
				for range events {
					select {
					case e := <-h.events:
						got = append(got, e)
					case <-time.After(10 * time.Second):
						t.Fatalf("events: got %q, want %q", got, events)
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, events) {
					t.Fatalf("events: got %q, want %q", got, events)
				}
			}

			inf, err := a.GetInformer(ctx, &corev1.ConfigMap{})
			if err != nil {
				t.Fatal(err)
			}
			if n := p.memo.Len(); n != 0 {
				t.Fatalf("%d objects kept before any event or read", n)
			}
			if _, err := inf.AddEventHandler(h); err != nil {
				t.Fatal(err)
			}
			want("add one@1:a", "add three@3:a", "add two@2:a")
			if n := p.memo.Len(); n != 3 {
				t.Errorf("%d objects kept after the adds of 3, want 3", n)
			}
			alter("1", "a", "kept of the add")
			wantGet("the Get after the add", "1", "kept of the add")

			applyAs(t, tc.codec, s, configMap("ns", "one", "4", nil, map[string]string{"owner": "a4"}), false)
			want("update one@4:a4")
			alter("4", "a4", "kept of the update")
			wantGet("the Get after the update", "4", "kept of the update")

			// The event of 5 is handled once the fleet holds 6: the Get converts 6.
			h.gateRV, h.gate = "5", make(chan struct{})
			applyAs(t, tc.codec, s, configMap("ns", "one", "5", nil, map[string]string{"owner": "a5"}), false)
			applyAs(t, tc.codec, s, configMap("ns", "one", "6", nil, map[string]string{"owner": "a6"}), false)
			wantGet("a Get of an update whose event waits", "6", "a6")
			close(h.gate)
			want("update one@5:a5", "update one@6:a6")
			wantGet("the Get after a late event", "6", "a6")
			alter("6", "a6", "kept of the update")
			wantGet("a second Get", "6", "kept of the update")

			// An update held before its event is handled: the Get converts it.
			applyAs(t, tc.codec, s, configMap("ns", "one", "7", nil, map[string]string{"owner": "a7"}), false)
			wantGet("a Get of an update", "7", "a7")
			want("update one@7:a7")

			if err := s.Delete(configMap("ns", "one", "7", nil, nil), false); err != nil {
				t.Fatal(err)
			}
			want("delete one")
			if _, err := get(); !apierrors.IsNotFound(err) {
				t.Errorf("Get after a deletion: %v, want NotFound", err)
			}
		})
	}
}
