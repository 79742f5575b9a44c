package aggregate_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// waitTimeout bounds every wait in these tests; reaching it is a failure, never the
// expected outcome.
const waitTimeout = 30 * time.Second

// startFleet runs f.Start until the test ends, and checks that it stops cleanly.
func startFleet(t testing.TB, f *aggregate.Fleet) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- f.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
}

func waitCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// waitSynced waits for r.HasSynced.
func waitSynced(t testing.TB, r *aggregate.Registration) {
	t.Helper()
	select {
	case <-r.HasSyncedChecker().Done():
	case <-time.After(waitTimeout):
		t.Fatalf("handler %s did not sync; stats %+v", r.Name(), r.Stats())
	}
}

func mustApply(t testing.TB, s *aggregate.ClusterStore, obj runtime.Object, initialList bool) {
	t.Helper()
	if err := s.Apply(obj, initialList); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func mustDelete(t testing.TB, s *aggregate.ClusterStore, obj runtime.Object, finalStateUnknown bool) {
	t.Helper()
	if err := s.Delete(obj, finalStateUnknown); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// barrier applies a marker object and waits until every recorder received it: every
// event queued for them before the barrier has then been delivered. Use a new id for
// every barrier of a fleet.
func barrier(t testing.TB, f *aggregate.Fleet, rec *aggregatetest.Recorder, id string, more ...*aggregatetest.Recorder) {
	t.Helper()
	s := f.ClusterStore("barrier", aggregatetest.Pods)
	mustApply(t, s, aggregatetest.Pod("barrier", id, "1", nil), false)
	for _, r := range append([]*aggregatetest.Recorder{rec}, more...) {
		err := r.WaitFor(waitCtx(t), func(events []aggregate.Event) bool {
			for _, e := range events {
				if e.Cluster == "barrier" && e.Key().Name == id {
					return true
				}
			}
			return false
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// summary renders events compactly for comparison: type cluster/ns/name@rv[ old@rv][ flags].
func summary(events []aggregate.Event) []string {
	var out []string
	for _, e := range events {
		s := string(e.Type) + " " + e.Key().String() + "@" + aggregatetest.RV(e.Object)
		if e.OldObject != nil {
			s += " old@" + aggregatetest.RV(e.OldObject)
		}
		if e.InitialList {
			s += " initial"
		}
		if e.FinalStateUnknown {
			s += " unknown"
		}
		out = append(out, s)
	}
	return out
}

// withoutCluster drops the events of one cluster, such as the barrier's.
func withoutCluster(events []aggregate.Event, cluster string) []aggregate.Event {
	var out []aggregate.Event
	for _, e := range events {
		if e.Cluster != cluster {
			out = append(out, e)
		}
	}
	return out
}
