package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The API group of fleetwatch's own resources, and the annotations it adds to the objects
// it serves.
const (
	// GroupName is the API group of fleetwatch's resources.
	GroupName = "fleetwatch.io"
	// Version is the version of GroupName that is served.
	Version = "v1alpha1"

	// ClusterAnnotation is set on every object served: the name of the cluster the object
	// lives in.
	ClusterAnnotation = "fleetwatch.io/cluster"
	// ResourceVersionAnnotation holds the object's resourceVersion in its cluster on
	// objects whose metadata.resourceVersion was replaced by a fleet cursor: those of
	// watch events, which clients resume from.
	ResourceVersionAnnotation = "fleetwatch.io/resource-version"

	// AllClusters is the cluster name of the paths that serve every cluster:
	// /clusters/*/api/v1/pods.
	AllClusters = "*"
)

// SchemeGroupVersion is the group version of fleetwatch's resources.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

// SearchResult is the answer of a search (kind SearchResult, fleetwatch.io/v1alpha1).
type SearchResult struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata holds the continue token of the next page, if there is one.
	Metadata metav1.ListMeta `json:"metadata"`
	// Total is the number of objects found, over every page.
	Total int `json:"total"`
	// Counts are the objects found by cluster and by kind, over every page.
	Counts SearchCounts `json:"counts"`
	// Items are the objects of the page, by cluster, kind, namespace and name.
	Items []SearchItem `json:"items"`
}

// SearchCounts count the objects found. Only clusters and kinds with objects found are
// present. A kind is its Kind, followed by .group for a resource of a named group, as
// Deployment.apps.
type SearchCounts struct {
	Clusters map[string]int `json:"clusters"`
	Kinds    map[string]int `json:"kinds"`
}

// SearchItem is an object found: its resource and metadata, never its contents (a
// Secret's values cannot be in it).
type SearchItem struct {
	Cluster           string            `json:"cluster"`
	Group             string            `json:"group"`
	Version           string            `json:"version"`
	Resource          string            `json:"resource"`
	Kind              string            `json:"kind"`
	Namespace         string            `json:"namespace,omitempty"`
	Name              string            `json:"name"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Images            []string          `json:"images,omitempty"`
	CreationTimestamp *metav1.Time      `json:"creationTimestamp,omitempty"`
}

// ChangeList is a page of the fleet's change log (kind ChangeList,
// fleetwatch.io/v1alpha1): what changed, oldest first (docs/history.md).
type ChangeList struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata holds the continue token of the next page, if there is one, and as its
	// resourceVersion the position after the page, which the parameter after takes: a
	// Seq, or, for the changes of every cluster of a sharded fleet, an opaque position of
	// every replica's log.
	Metadata metav1.ListMeta `json:"metadata"`
	Items    []Change        `json:"items"`
}

// Change is one record of the change log: an object's change (Added, Modified, Deleted,
// Vanished), or a resource's or cluster's (ResourceReset, Lost, ClusterRemoved,
// ClusterReplaced), which has no namespace or name, and for a cluster's no resource. It
// never holds an object's contents.
type Change struct {
	// Seq is the record's position in the log: it increases with each record, across
	// restarts, and is never reused. The changes after one are those with after=Seq.
	Seq uint64 `json:"seq"`
	// Replica is, in a sharded fleet, the replica whose log Seq is a position of: each
	// replica keeps a log of its own, so (Replica, Seq) names a record across the
	// fleet. Empty for a daemon that is not sharded.
	Replica string           `json:"replica,omitempty"`
	Time    metav1.MicroTime `json:"time"`
	Type    string           `json:"type"`

	Cluster   string `json:"cluster"`
	Group     string `json:"group"`
	Version   string `json:"version,omitempty"`
	Resource  string `json:"resource,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	// ResourceVersion is the position of the change in its resource's stream: the
	// resource's resourceVersion after it. ObjectResourceVersion is the object's own,
	// for Added and Modified.
	ResourceVersion       string `json:"resourceVersion,omitempty"`
	ObjectResourceVersion string `json:"objectResourceVersion,omitempty"`
}

// ObjectHistory is one object's history (kind ObjectHistory, fleetwatch.io/v1alpha1):
// its changes, oldest first, each with the fields it changed.
type ObjectHistory struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata holds the continue token of the next page, if there is one.
	Metadata metav1.ListMeta `json:"metadata"`
	// Object is the object whose history it is.
	Object ObjectReference `json:"object"`
	Items  []HistoryStep   `json:"items"`
}

// ObjectReference names an object of the fleet. Kind is absent when not known.
type ObjectReference struct {
	Cluster   string `json:"cluster"`
	Group     string `json:"group"`
	Version   string `json:"version"`
	Resource  string `json:"resource"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// HistoryStep is one change of an object, with what it changed.
type HistoryStep struct {
	Change `json:",inline"`
	// Fields are the fields the change set, changed or removed, in path order: for Added
	// every field of the object, for Modified those that differ from the object the
	// step before. Empty for Deleted and Vanished, and for the steps whose object the
	// log does not hold (a Secret's, whose values it never holds).
	Fields []FieldChange `json:"fields,omitempty"`
	// BaseMissing is set on a Modified step whose step before the log no longer holds
	// (retention dropped it, or the log began after it): its Fields are not known.
	BaseMissing bool `json:"baseMissing,omitempty"`
}

// FieldChange is one field that a change set, changed or removed. Path is JSON-path
// like: .spec.replicas, .metadata.labels["app.kubernetes.io/name"],
// .spec.containers[0].image. Old is absent for a field set, New for one removed.
type FieldChange struct {
	Path string `json:"path"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new,omitempty"`
}
