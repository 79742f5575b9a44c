package fleetwatch

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
)

func TestClusterStatus(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	healthy := &cluster.Health{Healthy: true}
	down := &cluster.Health{Err: errors.New("connection refused")}
	res := func(state informer.State) informer.ResourceStatus {
		return informer.ResourceStatus{Name: "pods", State: state}
	}
	synced := func(at time.Time) informer.ResourceStatus {
		r := res(informer.StateSynced)
		r.SyncedTime = at
		return r
	}
	pending, syncing := res(informer.StatePending), res(informer.StateSyncing)

	for _, tt := range []struct {
		name string
		in   observed
		// want* are the phase, the Reachable and Synced conditions' reasons, and whether
		// every resource synced.
		wantPhase                 aggregate.Phase
		wantReachable, wantSynced string
		wantAllSynced             bool
	}{
		{"nothing known yet", observed{resources: []informer.ResourceStatus{pending}},
			aggregate.PhaseConnecting, "NotProbed", "Syncing", false},
		{"a resource still syncing", observed{resources: []informer.ResourceStatus{syncing}},
			aggregate.PhaseConnecting, "NotProbed", "Syncing", false},
		{"the probe answered", observed{health: healthy, resources: []informer.ResourceStatus{pending}},
			aggregate.PhaseSyncing, "ProbeSucceeded", "Syncing", false},
		{"one resource synced, one not", observed{resources: []informer.ResourceStatus{synced(t0), syncing}},
			aggregate.PhaseSyncing, "NotProbed", "Syncing", false},
		{"a resource not found answers", observed{resources: []informer.ResourceStatus{res(informer.StateNotFound), syncing}},
			aggregate.PhaseSyncing, "NotProbed", "Syncing", false},
		{"a duplicate resource answers", observed{resources: []informer.ResourceStatus{res(informer.StateDuplicate), syncing}},
			aggregate.PhaseSyncing, "NotProbed", "Syncing", false},
		{"every resource synced", observed{health: healthy, resources: []informer.ResourceStatus{synced(t0), res(informer.StateNotFound)}},
			aggregate.PhaseSynced, "ProbeSucceeded", "AllResourcesSynced", true},
		{"synced before the first probe", observed{resources: []informer.ResourceStatus{synced(t0)}},
			aggregate.PhaseSynced, "NotProbed", "AllResourcesSynced", true},
		{"no resource configured", observed{},
			aggregate.PhaseSynced, "NotProbed", "AllResourcesSynced", true},
		{"from the snapshot, unconfirmed", observed{stale: true, resources: []informer.ResourceStatus{pending}},
			aggregate.PhaseStale, "NotProbed", ReasonServingSnapshot, false},
		{"from the snapshot, answering", observed{stale: true, health: healthy, resources: []informer.ResourceStatus{synced(t0), syncing}},
			aggregate.PhaseStale, "ProbeSucceeded", ReasonServingSnapshot, false},
		{"from the snapshot, now synced", observed{stale: true, resources: []informer.ResourceStatus{synced(t0)}},
			aggregate.PhaseSynced, "NotProbed", "AllResourcesSynced", true},
		{"unreachable", observed{health: down, resources: []informer.ResourceStatus{pending}},
			aggregate.PhaseUnreachable, "ProbeFailed", "Syncing", false},
		{"unreachable once synced", observed{health: down, resources: []informer.ResourceStatus{synced(t0)}},
			aggregate.PhaseUnreachable, "ProbeFailed", "AllResourcesSynced", true},
		{"unreachable from the snapshot", observed{health: down, stale: true, resources: []informer.ResourceStatus{pending}},
			aggregate.PhaseUnreachable, "ProbeFailed", ReasonServingSnapshot, false},
		{"sync timed out", observed{health: healthy, syncTimedOut: true, syncTimeout: time.Minute, resources: []informer.ResourceStatus{syncing}},
			aggregate.PhaseSyncing, "ProbeSucceeded", "SyncTimeout", false},
		{"sync timed out, then synced", observed{syncTimedOut: true, resources: []informer.ResourceStatus{synced(t0)}},
			aggregate.PhaseSynced, "NotProbed", "AllResourcesSynced", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, allSynced := clusterStatus(tt.in)
			if st.Phase != tt.wantPhase || allSynced != tt.wantAllSynced {
				t.Errorf("phase %s, synced %t; want %s, %t", st.Phase, allSynced, tt.wantPhase, tt.wantAllSynced)
			}
			if len(st.Conditions) != 2 {
				t.Fatalf("conditions %v, want Reachable and Synced", st.Conditions)
			}
			if c := st.Conditions[0]; c.Type != aggregate.ConditionReachable || c.Reason != tt.wantReachable {
				t.Errorf("first condition %s %s, want %s %s", c.Type, c.Reason, aggregate.ConditionReachable, tt.wantReachable)
			}
			if c := st.Conditions[1]; c.Type != aggregate.ConditionSynced || c.Reason != tt.wantSynced {
				t.Errorf("second condition %s %s, want %s %s", c.Type, c.Reason, aggregate.ConditionSynced, tt.wantSynced)
			}
		})
	}
}

func TestClusterStatusFields(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	pods := informer.Mapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, Namespaced: true}
	in := observed{
		name:     "east",
		server:   "https://east.example",
		identity: cluster.Identity{UID: "uid-1", Server: "https://east.example"},
		resources: []informer.ResourceStatus{
			{Name: "pods", Mapping: pods, State: informer.StateSynced, SyncedTime: t0, ResourceVersions: map[string]string{"": "41"}},
			{Name: "nodes", State: informer.StateSyncing, LastError: errors.New("forbidden")},
			{Name: "services", State: informer.StateSynced, SyncedTime: t0.Add(time.Minute), ResourceVersions: map[string]string{"a": "1", "b": "2"}},
		},
		syncTimedOut: true,
		syncTimeout:  2 * time.Minute,
	}
	st, _ := clusterStatus(in)
	if st.Name != "east" || st.Server != "https://east.example" || st.UID != "uid-1" {
		t.Errorf("name %q, server %q, UID %q; want those observed", st.Name, st.Server, st.UID)
	}
	if !st.LastSyncTime.Equal(t0.Add(time.Minute)) {
		t.Errorf("LastSyncTime %v, want the latest, %v", st.LastSyncTime, t0.Add(time.Minute))
	}
	if st.LastError != "forbidden" {
		t.Errorf("LastError %q, want the first resource's error", st.LastError)
	}
	want := []aggregate.ResourceStatus{
		{Name: "pods", Resource: pods.Resource, Kind: pods.Kind, Namespaced: true, State: "Synced", ResourceVersion: "41"},
		{Name: "nodes", State: "Syncing", LastError: "forbidden"},
		// With several namespaces there is no single resourceVersion.
		{Name: "services", State: "Synced"},
	}
	if len(st.Resources) != len(want) {
		t.Fatalf("resources %+v, want %+v", st.Resources, want)
	}
	for i := range want {
		if st.Resources[i] != want[i] {
			t.Errorf("resource %d: %+v, want %+v", i, st.Resources[i], want[i])
		}
	}
	if c := st.Conditions[1]; c.Status != metav1.ConditionFalse || c.Message != "not synced within 2m0s" {
		t.Errorf("Synced condition %s %q, want False %q", c.Status, c.Message, "not synced within 2m0s")
	}

	in.health = &cluster.Health{Err: errors.New("connection refused")}
	st, _ = clusterStatus(in)
	if c := st.Conditions[0]; c.Status != metav1.ConditionFalse || c.Message != "connection refused" || st.LastError != "connection refused" {
		t.Errorf("Reachable condition %s %q, LastError %q; want False and the probe's error in both", c.Status, c.Message, st.LastError)
	}
}
