package aggregate

import (
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// Lister reads the objects of one resource across the fleet. Get one with Fleet.Lister.
// Like client-go listers, it returns the cached objects themselves: callers must not
// modify them. Returned slices are fresh; their order is unspecified.
type Lister struct {
	ix *Indexer
}

// Resource returns the lister's resource.
func (l *Lister) Resource() schema.GroupVersionResource { return l.ix.resource }

// List returns the objects, of every cluster, whose labels match selector (nil matches
// everything). The error is always nil; it is there for symmetry with client-go.
func (l *Lister) List(selector labels.Selector) ([]runtime.Object, error) {
	return l.ix.Select(selector), nil
}

// Get returns the object with the given key, or a Kubernetes NotFound error.
func (l *Lister) Get(key Key) (runtime.Object, error) {
	obj, ok := l.ix.Get(key)
	if !ok {
		return nil, apierrors.NewNotFound(l.ix.resource.GroupResource(), key.Name)
	}
	return obj, nil
}

// ByIndex returns the objects whose values for the named index include indexedValue.
func (l *Lister) ByIndex(indexName, indexedValue string) ([]runtime.Object, error) {
	return l.ix.ByIndex(indexName, indexedValue)
}

// Cluster returns a view of one cluster that behaves as client-go's
// cache.NewGenericLister over that cluster's informer: Get takes a client-go key
// (namespace/name, or name for cluster-scoped objects), ByNamespace("") lists every
// namespace, and missing objects give a NotFound error.
func (l *Lister) Cluster(name string) cache.GenericLister {
	return &clusterLister{ix: l.ix, cluster: name}
}

// clusterLister is the cache.GenericLister of one cluster.
type clusterLister struct {
	ix      *Indexer
	cluster string
}

var (
	_ cache.GenericLister          = (*clusterLister)(nil)
	_ cache.GenericNamespaceLister = (*namespaceLister)(nil)
)

func (l *clusterLister) List(selector labels.Selector) ([]runtime.Object, error) {
	l.ix.ensureLabelsFor(selector)
	l.ix.lock.RLock()
	objs := l.ix.selectLocked(l.cluster, "", selector)
	l.ix.lock.RUnlock()
	return l.ix.decodeAll(objs), nil
}

func (l *clusterLister) Get(name string) (runtime.Object, error) {
	namespace, n, ok := splitMetaNamespaceKey(name)
	if ok {
		if obj, found := l.ix.Get(Key{Cluster: l.cluster, Namespace: namespace, Name: n}); found {
			return obj, nil
		}
	}
	return nil, apierrors.NewNotFound(l.ix.resource.GroupResource(), name)
}

func (l *clusterLister) ByNamespace(namespace string) cache.GenericNamespaceLister {
	return &namespaceLister{ix: l.ix, cluster: l.cluster, namespace: namespace}
}

// namespaceLister is the cache.GenericNamespaceLister of one namespace of one cluster.
type namespaceLister struct {
	ix        *Indexer
	cluster   string
	namespace string
}

func (l *namespaceLister) List(selector labels.Selector) ([]runtime.Object, error) {
	l.ix.ensureLabelsFor(selector)
	l.ix.lock.RLock()
	objs := l.ix.selectLocked(l.cluster, l.namespace, selector)
	l.ix.lock.RUnlock()
	return l.ix.decodeAll(objs), nil
}

// Get returns the object name in the namespace. As with client-go, whose key would be
// "/name", an empty namespace finds nothing: get cluster-scoped objects from the
// cluster lister.
func (l *namespaceLister) Get(name string) (runtime.Object, error) {
	if l.namespace != "" {
		if obj, found := l.ix.Get(Key{Cluster: l.cluster, Namespace: l.namespace, Name: name}); found {
			return obj, nil
		}
	}
	return nil, apierrors.NewNotFound(l.ix.resource.GroupResource(), name)
}
