package server

import (
	"net/http"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	fleetmetrics "github.com/fleetwatch/fleetwatch/metrics"
)

// The API group of fleetwatch's own resources, and the annotations it adds to the objects
// it serves: package api/v1alpha1's, which clients import without the server.
const (
	// GroupName is the API group of the Cluster resource.
	GroupName = v1alpha1.GroupName
	// Version is the version of GroupName that is served.
	Version = v1alpha1.Version

	// ClusterAnnotation is set on every object served: the name of the cluster the object
	// lives in.
	ClusterAnnotation = v1alpha1.ClusterAnnotation
	// ResourceVersionAnnotation holds the object's resourceVersion in its cluster on
	// objects whose metadata.resourceVersion was replaced by a fleet cursor: those of
	// watch events, which clients resume from.
	ResourceVersionAnnotation = v1alpha1.ResourceVersionAnnotation
)

// SchemeGroupVersion is the group version of the Cluster resource.
var SchemeGroupVersion = v1alpha1.SchemeGroupVersion

var clustersGR = schema.GroupResource{Group: GroupName, Resource: "clusters"}

// Cluster is the state of one cluster of the fleet, served as a Kubernetes-style
// resource (fleetwatch.io/v1alpha1, kind Cluster, cluster-scoped): kubectl get
// clusters.fleetwatch.io. Its name is the cluster name; its uid is the UID of the
// cluster's kube-system namespace, once read.
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            ClusterStatus `json:"status"`
}

// ClusterStatus is aggregate.ClusterStatus in API form.
type ClusterStatus struct {
	// Phase is Connecting, Syncing, Synced, Unreachable or Stale; in a sharded fleet, a
	// cluster that another replica watches is Remote, and one that no live replica
	// watches now (its owner is gone, or it is being handed over) is Moving.
	Phase string `json:"phase"`
	// Conditions are Reachable and Synced.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Server is the URL of the cluster's API server.
	Server string `json:"server,omitempty"`
	// UID is the UID of the cluster's kube-system namespace.
	UID string `json:"uid,omitempty"`
	// LastSyncTime is when the cluster last completed its initial sync.
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// LastError is the cluster's most recent error.
	LastError string `json:"lastError,omitempty"`
	// Objects is the number of cached objects, over every resource.
	Objects int `json:"objects"`
	// Resources are the configured resources, in configured order.
	Resources []ClusterResource `json:"resources,omitempty"`
	// SnapshotLag is how far the snapshot is behind the cache: the age of the oldest
	// change not committed yet. One writer commits every cluster, so it is the same for
	// each. Absent when the Source keeps no snapshot.
	SnapshotLag *metav1.Duration `json:"snapshotLag,omitempty"`
	// Replica is the replica of a sharded fleet that watches the cluster, and
	// ReplicaAddress where its API is reached; empty if the fleet is not sharded, or
	// while no live replica watches the cluster.
	Replica        string `json:"replica,omitempty"`
	ReplicaAddress string `json:"replicaAddress,omitempty"`
}

// ClusterResource is the state of one configured resource in one cluster.
type ClusterResource struct {
	// Name is the configured name, as pods or deployments.apps.
	Name string `json:"name"`
	// Group, Version, Resource and Kind are what Name resolved to in the cluster; empty
	// if the cluster does not serve it.
	Group    string `json:"group,omitempty"`
	Version  string `json:"version,omitempty"`
	Resource string `json:"resource,omitempty"`
	Kind     string `json:"kind,omitempty"`
	// Namespaced says whether the resource's objects live in namespaces.
	Namespaced bool `json:"namespaced,omitempty"`
	// State is Pending, NotFound, Syncing or Synced.
	State string `json:"state"`
	// Count is the number of cached objects.
	Count int `json:"count"`
	// ResourceVersion is the last synced resourceVersion, when one informer watches the
	// whole resource.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// LastError is the most recent list or watch error.
	LastError string `json:"lastError,omitempty"`
}

// ClusterList is a list of Clusters.
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

// clusterOf converts a cluster status.
func clusterOf(st aggregate.ClusterStatus) Cluster {
	c := Cluster{
		TypeMeta:   metav1.TypeMeta{Kind: "Cluster", APIVersion: SchemeGroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: st.Name, UID: st.UID},
		Status: ClusterStatus{
			Phase:      string(st.Phase),
			Conditions: st.Conditions,
			Server:     st.Server,
			UID:        string(st.UID),
			LastError:  st.LastError,
			Replica:    st.Replica,

			ReplicaAddress: st.ReplicaAddress,
		},
	}
	if !st.LastSyncTime.IsZero() {
		t := metav1.NewTime(st.LastSyncTime)
		c.Status.LastSyncTime = &t
	}
	if placedElsewhere(st) {
		// The resources of a cluster another replica watches are as its owner
		// publishes them, without their state: its owner's Cluster says it.
		return c
	}
	for _, rs := range st.Resources {
		c.Status.Objects += rs.Count
		c.Status.Resources = append(c.Status.Resources, ClusterResource{
			Name:            rs.Name,
			Group:           rs.Resource.Group,
			Version:         rs.Resource.Version,
			Resource:        rs.Resource.Resource,
			Kind:            rs.Kind.Kind,
			Namespaced:      rs.Namespaced,
			State:           rs.State,
			Count:           rs.Count,
			ResourceVersion: rs.ResourceVersion,
			LastError:       rs.LastError,
		})
	}
	return c
}

// serveClusters serves clusters.fleetwatch.io: the list, one cluster by name, or a
// watch (watchClusters). Under a cluster prefix, only the clusters of its scope are
// served. The list's resourceVersion, and each Cluster's, come from the server's
// clusterFeed.
func (s *Server) serveClusters(w http.ResponseWriter, r *http.Request, sc scope, name string, hasName bool) error {
	q := r.URL.Query()
	p, err := parseListParams(q, false)
	if err != nil {
		return err
	}
	sel, err := parseClusterSelector(p)
	if err != nil {
		return err
	}
	if p.watch {
		return s.watchClusters(w, r, sc, name, hasName, p, sel)
	}
	f, ok := negotiate(r.Header.Get("Accept"), !hasName, formatTable)
	if !ok {
		return notAcceptable("clusters.fleetwatch.io is served as application/json or as a meta.k8s.io/v1 Table")
	}
	gen, all := s.clusterFeed.observe(s.clusterItems())
	items := make([]Cluster, 0, len(all))
	for i := range all {
		c := &all[i]
		if sc.includes(c.Name) && (!hasName || c.Name == name) && sel.matches(c) {
			items = append(items, *c)
		}
	}
	if hasName && len(items) == 0 {
		return notFound(clustersGR, name)
	}
	s.ownersStatus(w, r, items)
	if f == formatTable {
		opts, err := parseTableOptions(q)
		if err != nil {
			return err
		}
		t := s.clustersTable(items, opts)
		t.ResourceVersion = s.clusterFeed.rv(gen)
		writeJSON(w, http.StatusOK, t)
		return nil
	}
	if hasName {
		writeJSON(w, http.StatusOK, &items[0])
		return nil
	}
	writeJSON(w, http.StatusOK, &ClusterList{
		TypeMeta: metav1.TypeMeta{Kind: "ClusterList", APIVersion: SchemeGroupVersion.String()},
		ListMeta: metav1.ListMeta{ResourceVersion: s.clusterFeed.rv(gen)},
		Items:    items,
	})
	return nil
}

// clusterItems returns every cluster's status as a Cluster, sorted by name, with the
// snapshot's lag.
func (s *Server) clusterItems() []Cluster {
	var lag *metav1.Duration
	if snap, ok := s.src.(fleetmetrics.SnapshotSource); ok {
		if st, ok := snap.SnapshotStats(); ok {
			lag = &metav1.Duration{Duration: st.Lag.Round(time.Millisecond)}
		}
	}
	statuses := s.src.Status()
	items := make([]Cluster, 0, len(statuses))
	for _, st := range statuses {
		c := clusterOf(st)
		if lag != nil {
			l := *lag
			c.Status.SnapshotLag = &l
		}
		items = append(items, c)
	}
	slices.SortFunc(items, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	return items
}

// DeepCopyInto copies c into out.
func (c *Cluster) DeepCopyInto(out *Cluster) {
	*out = *c
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = nil
	for _, cond := range c.Status.Conditions {
		out.Status.Conditions = append(out.Status.Conditions, *cond.DeepCopy())
	}
	if c.Status.LastSyncTime != nil {
		t := *c.Status.LastSyncTime
		out.Status.LastSyncTime = &t
	}
	out.Status.Resources = slices.Clone(c.Status.Resources)
	if c.Status.SnapshotLag != nil {
		lag := *c.Status.SnapshotLag
		out.Status.SnapshotLag = &lag
	}
}

// DeepCopy returns a deep copy of c.
func (c *Cluster) DeepCopy() *Cluster {
	if c == nil {
		return nil
	}
	out := new(Cluster)
	c.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *Cluster) DeepCopyObject() runtime.Object { return c.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *ClusterList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &ClusterList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range l.Items {
		out.Items = append(out.Items, *l.Items[i].DeepCopy())
	}
	return out
}

var (
	_ runtime.Object = (*Cluster)(nil)
	_ runtime.Object = (*ClusterList)(nil)
)
