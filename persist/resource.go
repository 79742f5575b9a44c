package persist

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ResourceKey names one stored resource of a cluster: "group/version/resource", with an
// empty group for the core group ("/v1/pods", "apps/v1/deployments"), optionally
// followed by '?' and a qualifier that tells apart several stores of one resource, such
// as the namespace and the selectors that one informer watches
// ("/v1/pods?ns=shop&spec=..."). The qualifier is opaque to this package.
//
// A ResourceKey is the unit of consistency: its objects and its resourceVersion are
// always committed together, and each key has its own resourceVersion. So every informer,
// which has a resourceVersion of its own, needs a key of its own. The key is part of the
// file format: the same resource must always get the same key.
type ResourceKey string

// ResourceKeyFor returns the key of gvr without a qualifier.
func ResourceKeyFor(gvr schema.GroupVersionResource) ResourceKey {
	return ResourceKey(gvr.Group + "/" + gvr.Version + "/" + gvr.Resource)
}

// ParseResourceKey checks that s has the form of a ResourceKey: three parts separated
// by '/' before the first '?', of which the version and the resource are not empty. It
// fails with an error wrapping ErrInvalid.
func ParseResourceKey(s string) (ResourceKey, error) {
	path, _, _ := strings.Cut(s, "?")
	// Checked once per change and checkpoint: without allocating.
	_, rest, _ := strings.Cut(path, "/")
	version, resource, _ := strings.Cut(rest, "/")
	if strings.Count(path, "/") != 2 || version == "" || resource == "" {
		return "", fmt.Errorf("%w: resource key %q does not have the form group/version/resource[?qualifier]", ErrInvalid, s)
	}
	return ResourceKey(s), nil
}

// GroupVersionResource returns the resource that k names, zero if k is not valid.
func (k ResourceKey) GroupVersionResource() schema.GroupVersionResource {
	if _, err := ParseResourceKey(string(k)); err != nil {
		return schema.GroupVersionResource{}
	}
	path, _, _ := strings.Cut(string(k), "?")
	parts := strings.Split(path, "/")
	return schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}
}

// Qualifier returns what follows the first '?' of k, "" if nothing does.
func (k ResourceKey) Qualifier() string {
	_, q, _ := strings.Cut(string(k), "?")
	return q
}

// objectKey is the key of an object in its resource's objects bucket: "namespace/name",
// "/name" for a cluster-scoped object.
func objectKey(namespace, name string) string {
	return namespace + "/" + name
}
