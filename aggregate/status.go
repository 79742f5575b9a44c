package aggregate

import (
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
)

// Phase is where a cluster stands, as a user reads it.
type Phase string

const (
	// PhaseConnecting: the cluster was added and has not answered yet.
	PhaseConnecting Phase = "Connecting"
	// PhaseSyncing: the cluster answers and its initial lists are not complete.
	PhaseSyncing Phase = "Syncing"
	// PhaseSynced: every resource of the cluster has synced, and the cluster answers.
	PhaseSynced Phase = "Synced"
	// PhaseUnreachable: the cluster does not answer. Its last known objects stay
	// readable, and are stale.
	PhaseUnreachable Phase = "Unreachable"
	// PhaseStale: the objects come from a snapshot and have not been confirmed against
	// the cluster yet.
	PhaseStale Phase = "Stale"
	// PhaseRemote: the fleet is sharded, and another live replica watches the cluster
	// (ClusterStatus.Replica); this one holds none of its objects.
	PhaseRemote Phase = "Remote"
	// PhaseMoving: the fleet is sharded, and no live replica watches the cluster now:
	// its owner is gone, or it is being handed over. This replica holds none of its
	// objects.
	PhaseMoving Phase = "Moving"
)

// Condition types of a ClusterStatus.
const (
	// ConditionReachable is True while the cluster's health probe passes.
	ConditionReachable = "Reachable"
	// ConditionSynced is True once every resource has synced.
	ConditionSynced = "Synced"
)

// ClusterStatus is the state of one cluster of the fleet.
type ClusterStatus struct {
	// Name is the cluster name.
	Name string
	// Phase summarizes the conditions.
	Phase Phase
	// Conditions are ConditionReachable and ConditionSynced, with the time of their last
	// transition.
	Conditions []metav1.Condition
	// Server is the cluster's server URL (without credentials); UID is the UID of its
	// kube-system namespace, once read.
	Server string
	UID    types.UID
	// LastSyncTime is when the cluster last completed its initial sync.
	LastSyncTime time.Time
	// LastError is the most recent error of the cluster, empty if none.
	LastError string
	// Resources are the configured resources, in configured order.
	Resources []ResourceStatus
	// Replica is the replica of a sharded fleet that watches the cluster (see package
	// shard); empty when the fleet is not sharded, or while no live replica holds it.
	Replica string
	// ReplicaAddress is where Replica's API is reached, if it publishes an address.
	ReplicaAddress string
}

// ResourceStatus is the state of one configured resource in one cluster.
type ResourceStatus struct {
	// Name is the configured (kubectl-style) name.
	Name string
	// Resource is what Name resolved to in this cluster; empty if it is not served.
	Resource schema.GroupVersionResource
	// Kind is the kind of Resource's objects, and Namespaced whether they live in
	// namespaces; both are unset if the resource is not served.
	Kind       schema.GroupVersionKind
	Namespaced bool
	// State is the informer's state: Pending, NotFound, Syncing or Synced.
	State string
	// Count is the number of cached objects. StatusBoard fills it in when read.
	Count int
	// ResourceVersion is the last synced resourceVersion, when one informer watches the
	// whole resource.
	ResourceVersion string
	// LastError is the most recent list or watch error, empty if none.
	LastError string
}

// StatusBoard keeps the status of every cluster of a fleet. The code that runs the
// clusters writes it; readers get copies.
type StatusBoard struct {
	clock clock.PassiveClock
	// counts, if set, returns the number of cached objects of a cluster's resource.
	counts func(cluster string, gvr schema.GroupVersionResource) int

	// mu guards clusters.
	mu       sync.RWMutex
	clusters map[string]*ClusterStatus
}

// NewStatusBoard returns an empty StatusBoard. counts, if not nil, fills in
// ResourceStatus.Count when a status is read.
func NewStatusBoard(clk clock.PassiveClock, counts func(cluster string, gvr schema.GroupVersionResource) int) *StatusBoard {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &StatusBoard{clock: clk, counts: counts, clusters: map[string]*ClusterStatus{}}
}

// Set records st as the status of cluster st.Name. The conditions of st are merged into
// the recorded ones: a condition whose status did not change keeps its transition time,
// and one without a transition time gets the current time when it changes.
func (b *StatusBoard) Set(st ClusterStatus) {
	now := metav1.NewTime(b.clock.Now())
	b.mu.Lock()
	defer b.mu.Unlock()
	cur, ok := b.clusters[st.Name]
	if !ok {
		cur = &ClusterStatus{}
	}
	conditions := cur.Conditions
	for _, c := range st.Conditions {
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = now
		}
		meta.SetStatusCondition(&conditions, c)
	}
	next := st
	next.Conditions = conditions
	next.Resources = slices.Clone(st.Resources)
	b.clusters[st.Name] = &next
}

// Remove forgets cluster name.
func (b *StatusBoard) Remove(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.clusters, name)
}

// Get returns a copy of the status of cluster name.
func (b *StatusBoard) Get(name string) (ClusterStatus, bool) {
	b.mu.RLock()
	cur, ok := b.clusters[name]
	var st ClusterStatus
	if ok {
		st = cloneStatus(*cur)
	}
	b.mu.RUnlock()
	if !ok {
		return ClusterStatus{}, false
	}
	b.fillCounts(&st)
	return st, true
}

// NotSynced returns a copy of the statuses of the first limit clusters by name whose
// phase is not Synced (nor Remote or Moving: other replicas watch those), how many
// such clusters there are, and how many clusters in all. Unlike List, it copies and
// counts the objects of those limit clusters only: a /readyz probe of a fleet of
// thousands asks it while they sync.
func (b *StatusBoard) NotSynced(limit int) (first []ClusterStatus, notSynced, all int) {
	b.mu.RLock()
	all = len(b.clusters)
	var names []string // the first limit names, sorted
	for name, st := range b.clusters {
		switch st.Phase {
		case PhaseSynced, PhaseRemote, PhaseMoving:
			continue
		}
		notSynced++
		i, _ := slices.BinarySearch(names, name)
		if i < limit {
			if len(names) == limit {
				names = names[:limit-1]
			}
			names = slices.Insert(names, i, name)
		}
	}
	first = make([]ClusterStatus, len(names))
	for i, name := range names {
		first[i] = cloneStatus(*b.clusters[name])
	}
	b.mu.RUnlock()
	for i := range first {
		b.fillCounts(&first[i])
	}
	return first, notSynced, all
}

// List returns a copy of every cluster's status, sorted by name.
func (b *StatusBoard) List() []ClusterStatus {
	b.mu.RLock()
	// Sorted as pointers: a ClusterStatus is a dozen words, and moving them was a third
	// of the time at 10,000 clusters.
	sts := make([]*ClusterStatus, 0, len(b.clusters))
	for _, st := range b.clusters {
		sts = append(sts, st)
	}
	slices.SortFunc(sts, func(a, b *ClusterStatus) int { return strings.Compare(a.Name, b.Name) })
	out := make([]ClusterStatus, len(sts))
	for i, st := range sts {
		out[i] = cloneStatus(*st)
	}
	b.mu.RUnlock()
	for i := range out {
		b.fillCounts(&out[i])
	}
	return out
}

func (b *StatusBoard) fillCounts(st *ClusterStatus) {
	if b.counts == nil {
		return
	}
	for i, r := range st.Resources {
		if !r.Resource.Empty() {
			st.Resources[i].Count = b.counts(st.Name, r.Resource)
		}
	}
}

func cloneStatus(st ClusterStatus) ClusterStatus {
	st.Conditions = slices.Clone(st.Conditions)
	st.Resources = slices.Clone(st.Resources)
	return st
}
