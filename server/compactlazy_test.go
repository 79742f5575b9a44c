package server

import (
	"reflect"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestLazySummaryReadOnce: goroutines that look at a compactObject whose summary was not
// read yet all get the same summary, the one read from the encoding, which the object
// then keeps (run with -race).
func TestLazySummaryReadOnce(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	data := cborTestObjects(t)["realistic pod"]
	want := summarizeEncodedOrFail(t, pods, data)
	co := newLazySummary(pods, persist.Codec{}).lazyCompactObject(data)
	var wg sync.WaitGroup
	got := make([]*compactSummary, 8)
	for i := range got {
		wg.Go(func() {
			got[i] = co.s()
			_ = co.GetLabels()
			_ = co.ContainerImages()
		})
	}
	wg.Wait()
	for i, sum := range got {
		if sum != got[0] || sum.lazy != nil || !reflect.DeepEqual(*sum, *want.s()) {
			t.Fatalf("look %d read %+v, want the one summary %+v", i, *sum, *want.s())
		}
	}
	if co.s() != got[0] {
		t.Error("a later look read the summary again")
	}
}

// TestLazySummaryOfABadEncoding: an encoding that fails to decode, which the fleet's
// Codec never makes, reads as an empty summary rather than failing the look.
func TestLazySummaryOfABadEncoding(t *testing.T) {
	co := newLazySummary(schema.GroupResource{Resource: "pods"}, persist.Codec{}).lazyCompactObject([]byte{0xff, 0x00})
	if co.GetName() != "" || co.GetLabels() != nil || co.s() != emptySummary {
		t.Errorf("a bad encoding reads %s", describeSummary(co))
	}
}

// TestViewReadsSummariesAtTheFirstLook: the events of a compact fleet's encoded objects
// (a replay to a handler added late, and the partial objects of a snapshot's load or an
// informer's list) file their objects in the view by the identity the fleet holds,
// without reading their summaries, which are read at the first look.
func TestViewReadsSummariesAtTheFirstLook(t *testing.T) {
	codec := persist.Codec{}
	fleet := aggregate.New(aggregate.Options{Codec: codec})
	store := fleet.ClusterStore(prod, podsGVR)
	if err := store.Apply(aggregatetest.RealisticPod("shop", "web-1", "41", map[string]string{"app": "web-1"}), true); err != nil {
		t.Fatal(err)
	}
	wc := newWatchCache(100, codec, nil)
	reg, err := fleet.AddHandler(wc, aggregate.HandlerOptions{Name: "server", EncodedOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	wc.reg.Store(reg)
	for _, name := range []string{"web-2", "web-3"} {
		pod := aggregatetest.RealisticPod("shop", name, "42", map[string]string{"app": name})
		data, err := codec.Encode(pod)
		if err != nil {
			t.Fatal(err)
		}
		partial := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{
			Namespace: pod.GetNamespace(), Name: name, UID: pod.GetUID(), ResourceVersion: pod.GetResourceVersion(), Labels: pod.GetLabels()}}
		if err := store.ApplyPartial(partial, data, true); err != nil {
			t.Fatal(err)
		}
	}
	go func() { _ = fleet.Start(t.Context()) }()
	<-reg.CaughtUp()
	rc := wc.lookup(podsGVR)
	pending := 0
	rc.each(func(cluster string, obj runtime.Object) {
		if co, ok := obj.(*compactObject); ok && co.sum.Load().lazy != nil {
			pending++
		}
	})
	// The first object's summary is read for the resource's kind.
	if pending != 2 {
		t.Errorf("%d objects of 3 in the view had their summaries unread, want 2", pending)
	}
	rc.mu.RLock()
	positions := rc.positions[prod]
	rc.mu.RUnlock()
	if positions.rv != 42 {
		t.Errorf("the view's position is %+v, want the resourceVersion of the last event, 42", positions)
	}
	rc.each(func(cluster string, obj runtime.Object) {
		co := obj.(*compactObject)
		if co.GetNamespace() != "shop" || co.GetLabels()["app"] != co.GetName() || co.sum.Load().lazy != nil {
			t.Errorf("looked at, the object reads %s", describeSummary(co))
		}
	})
}

func summarizeEncodedOrFail(t *testing.T, gr schema.GroupResource, data []byte) *compactObject {
	t.Helper()
	co, ok := summarizeEncoded(persist.Codec{}, gr, data)
	if !ok {
		t.Fatal("summarizeEncoded failed")
	}
	return co
}
