package client

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
)

// ErrNoCluster is returned by KeyFunc for an object without the cluster annotation: one
// that fleetwatch did not serve.
var ErrNoCluster = errors.New("the object has no " + v1alpha1.ClusterAnnotation + " annotation")

// ClusterIndex is the name of the index of NewInformer's store by cluster: ByIndex(
// ClusterIndex, "prod") returns the objects of cluster prod.
const ClusterIndex = "cluster"

// ClusterOf returns the cluster of an object that fleetwatch served, from its
// annotation; "" if it has none, or is not an object. It reads through a
// cache.DeletedFinalStateUnknown to its object.
func ClusterOf(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetAnnotations()[v1alpha1.ClusterAnnotation]
}

// KeyFunc is a cache.KeyFunc for the objects that fleetwatch serves: it keys them by
// cluster, namespace and name, as aggregate.Key.String does (cluster/namespace/name,
// the cluster path-escaped; cluster//name for a cluster-scoped object), so that the
// same name in two clusters is two keys. Like cache.DeletionHandlingMetaNamespaceKeyFunc,
// it returns the key of a cache.DeletedFinalStateUnknown and of a cache.ExplicitKey as
// they are. SplitKey splits its keys.
func KeyFunc(obj any) (string, error) {
	switch o := obj.(type) {
	case cache.DeletedFinalStateUnknown:
		return o.Key, nil
	case cache.ExplicitKey:
		return string(o), nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("keying an object: %w", err)
	}
	cluster := m.GetAnnotations()[v1alpha1.ClusterAnnotation]
	if cluster == "" {
		return "", fmt.Errorf("keying %s/%s: %w", m.GetNamespace(), m.GetName(), ErrNoCluster)
	}
	return aggregate.Key{Cluster: cluster, Namespace: m.GetNamespace(), Name: m.GetName()}.String(), nil
}

// SplitKey returns the cluster, namespace and name of a key of KeyFunc.
func SplitKey(key string) (cluster, namespace, name string, err error) {
	k, err := aggregate.ParseKey(key)
	if err != nil {
		return "", "", "", err
	}
	return k.Cluster, k.Namespace, k.Name, nil
}

// ClusterIndexFunc is the cache.IndexFunc of ClusterIndex: the object's cluster.
func ClusterIndexFunc(obj any) ([]string, error) {
	if c := ClusterOf(obj); c != "" {
		return []string{c}, nil
	}
	return nil, nil
}
