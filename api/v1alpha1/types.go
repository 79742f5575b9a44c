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
