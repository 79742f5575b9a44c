package fleetwatch

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
)

// ReasonServingSnapshot is the reason of the Synced condition of a cluster that is
// served from the snapshot, counted ready, while its identity is verified and its
// watches resume in the background (phase Stale).
const ReasonServingSnapshot = "ServingSnapshot"

// observed is what the Manager knows of one cluster at a moment: everything its status
// is computed from.
type observed struct {
	name, server string
	// identity is the cluster's identity; zero until read.
	identity cluster.Identity
	// resources are the informer set's statuses, in configured order.
	resources []informer.ResourceStatus
	// health is the last health report; nil before the first probe.
	health *cluster.Health
	// syncTimedOut is set when syncTimeout passed before the initial sync completed.
	syncTimedOut bool
	syncTimeout  time.Duration
	// stale is set while the objects come from the snapshot, unconfirmed.
	stale bool
}

// clusterStatus returns the status of a cluster as o describes it, and whether every
// resource has synced, which confirms objects loaded from the snapshot. The phase is,
// in this order of precedence:
//
//   - Unreachable if the last probe failed;
//   - Synced if every resource has synced (or none is configured);
//   - Stale if the objects come from the snapshot;
//   - Syncing if the cluster answered: a probe succeeded, or a resource synced or was
//     found missing or duplicate;
//   - Connecting otherwise.
func clusterStatus(o observed) (st aggregate.ClusterStatus, synced bool) {
	st = aggregate.ClusterStatus{
		Name:      o.name,
		Server:    o.server,
		UID:       o.identity.UID,
		Resources: make([]aggregate.ResourceStatus, len(o.resources)),
	}
	synced, answered := true, o.health != nil && o.health.Healthy
	for i, r := range o.resources {
		rs := aggregate.ResourceStatus{
			Name:       r.Name,
			Resource:   r.Mapping.Resource,
			Kind:       r.Mapping.Kind,
			Namespaced: r.Mapping.Namespaced,
			State:      string(r.State),
		}
		if len(r.ResourceVersions) == 1 {
			rs.ResourceVersion = r.ResourceVersions[metav1.NamespaceAll]
		}
		if r.LastError != nil {
			rs.LastError = r.LastError.Error()
			if st.LastError == "" {
				st.LastError = rs.LastError
			}
		}
		switch r.State {
		case informer.StateSynced:
			answered = true
			if r.SyncedTime.After(st.LastSyncTime) {
				st.LastSyncTime = r.SyncedTime
			}
		case informer.StateNotFound, informer.StateDuplicate:
			answered = true
		default:
			synced = false
		}
		st.Resources[i] = rs
	}

	reachable := metav1.Condition{Type: aggregate.ConditionReachable, Status: metav1.ConditionUnknown, Reason: "NotProbed"}
	unreachable := o.health != nil && !o.health.Healthy
	switch {
	case unreachable:
		reachable.Status, reachable.Reason, reachable.Message = metav1.ConditionFalse, "ProbeFailed", o.health.Err.Error()
		st.LastError = o.health.Err.Error()
	case o.health != nil:
		reachable.Status, reachable.Reason = metav1.ConditionTrue, "ProbeSucceeded"
	}
	syncedCond := metav1.Condition{Type: aggregate.ConditionSynced, Status: metav1.ConditionFalse, Reason: "Syncing"}
	switch {
	case synced:
		syncedCond.Status, syncedCond.Reason = metav1.ConditionTrue, "AllResourcesSynced"
	case o.syncTimedOut:
		syncedCond.Reason, syncedCond.Message = "SyncTimeout", fmt.Sprintf("not synced within %v", o.syncTimeout)
	case o.stale:
		syncedCond.Reason, syncedCond.Message = ReasonServingSnapshot, servingSnapshotMessage
	}
	st.Conditions = []metav1.Condition{reachable, syncedCond}

	switch {
	case unreachable:
		st.Phase = aggregate.PhaseUnreachable
	case synced:
		st.Phase = aggregate.PhaseSynced
	case o.stale:
		st.Phase = aggregate.PhaseStale
	case answered:
		st.Phase = aggregate.PhaseSyncing
	default:
		st.Phase = aggregate.PhaseConnecting
	}
	return st, synced
}

const servingSnapshotMessage = "served from the snapshot while its identity is verified and its watches resume"

// loadedStatus is the status of a cluster that the snapshot's load filed, until it is
// engaged: Stale, served from the snapshot, not probed yet. A warm fleet is ready before
// its clusters are engaged, so this is the status they are served with meanwhile.
func loadedStatus(name string, id cluster.Identity) aggregate.ClusterStatus {
	return aggregate.ClusterStatus{
		Name:   name,
		Server: id.Server,
		UID:    id.UID,
		Phase:  aggregate.PhaseStale,
		Conditions: []metav1.Condition{
			{Type: aggregate.ConditionReachable, Status: metav1.ConditionUnknown, Reason: "NotProbed"},
			{Type: aggregate.ConditionSynced, Status: metav1.ConditionFalse, Reason: ReasonServingSnapshot, Message: servingSnapshotMessage},
		},
	}
}
