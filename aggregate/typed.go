package aggregate

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Item is an object of a fleet-wide TypedLister.List with the cluster it belongs to.
//
// The cluster travels beside the object, not in it: an object read from the fleet can be
// written back to its cluster (see fleetwatch.Manager.RESTConfig) as it is, and an
// annotation added to carry the cluster, as the HTTP API adds one, would be written to
// the cluster with it.
type Item[T any] struct {
	Cluster string
	Object  *T
}

// TypedLister reads the objects of one resource across the fleet as a Go type, such as
// corev1.Pod, for programs written against client-go's generated listers. Get one with
// NewTypedLister.
//
// It reads the same Indexer as Lister: a Get is one map lookup, and a List of a cluster
// or of a namespace of a cluster reads that cluster's or namespace's objects only. Every
// object it returns is made at the call, so, unlike with client-go listers, the caller
// owns it and may modify it, for example to write it back to its cluster: decoded from
// the encoding straight into T in a compact fleet whose Codec encodes CBOR maps
// (persist.Codec; TypedDecoder), else converted from the cached object by reflection
// (runtime.DefaultUnstructuredConverter), which costs about twice as much. The price is
// that decoding or conversion per object returned (BenchmarkTypedListerGet; a Get of
// Lister takes 40ns; mcprovider's BenchmarkRead, docs/benchmarks.md, on realistic
// pods), and a copy of each in memory for as long as the caller keeps it. A lister
// with a memo (NewTypedListerWithOptions, TypedListerOptions.Memo) hands out a
// DeepCopy of the object it made at an earlier read of the same version instead, as
// controller-runtime's cache does. A controller that lists
// many objects to look at few of them should narrow the List with a namespace or a label
// selector, or read the cached objects through Lister.
//
// Objects come with the TypeMeta of T (apiVersion and kind set), as controller-runtime's
// cache gives them. A metav1.PartialObjectMetadata has the apiVersion and kind of the
// object it describes when the resource is cached in full, and those the cache holds
// when it is cached metadata-only. Returned slices are fresh; their order is
// unspecified. Like Lister, it is safe for concurrent use.
type TypedLister[T any] struct {
	ix *Indexer
	// gvk is T's kind in the resource's group and version; empty when partial.
	gvk schema.GroupVersionKind
	// partial is set when T is metav1.PartialObjectMetadata.
	partial bool
	// typed decodes a compact fleet's encodings straight into T; nil for a plain
	// fleet, a partial T, or a Codec whose encodings are not CBOR maps.
	typed *TypedDecoder
	// memo keeps the objects that reads made (TypedListerOptions.Memo); nil for none,
	// and for a partial T.
	memo *TypedMemo
}

// TypedListerOptions are the options of NewTypedListerWithOptions.
type TypedListerOptions struct {
	// Memo, if not nil, keeps the objects that the lister's reads make: a read of an
	// object unchanged since copies the one kept (a DeepCopy, as controller-runtime's
	// cache reads do) rather than decoding or converting it again. One memo may serve
	// several listers, of several resources. It does not keep
	// metav1.PartialObjectMetadata, which costs about as much to make as to copy.
	// Default (nil): every read makes its objects.
	Memo *TypedMemo
}

// NewTypedLister returns a TypedLister of the objects of gvr in fleet, as T. A resource
// the fleet did not know yet is added, empty, as with Fleet.Lister.
//
// *T must be registered in scheme under gvr's group and version (for the built-in
// resources, client-go's k8s.io/client-go/kubernetes/scheme.Scheme), except for
// metav1.PartialObjectMetadata, which reads the metadata of any resource and needs no
// scheme. A resource cached metadata-only (informer.Resource.MetadataOnly) can only be
// read as metav1.PartialObjectMetadata. The scheme does not say which kind a resource
// holds: an object of another kind than T's (a lister of deployments as corev1.Pod) is
// an error of the read that meets it. The errors wrap ErrTypeMismatch.
func NewTypedLister[T any](fleet *Fleet, gvr schema.GroupVersionResource, scheme *runtime.Scheme) (*TypedLister[T], error) {
	return NewTypedListerWithOptions[T](fleet, gvr, scheme, TypedListerOptions{})
}

// NewTypedListerWithOptions is NewTypedLister with options.
func NewTypedListerWithOptions[T any](fleet *Fleet, gvr schema.GroupVersionResource, scheme *runtime.Scheme, opts TypedListerOptions) (*TypedLister[T], error) {
	l := &TypedLister[T]{}
	switch obj := any(new(T)).(type) {
	case *metav1.PartialObjectMetadata:
		l.partial = true
	case runtime.Object:
		if scheme == nil {
			return nil, fmt.Errorf("typed lister of %s as %T: nil scheme: %w", gvr, obj, ErrTypeMismatch)
		}
		gvks, _, err := scheme.ObjectKinds(obj)
		if err != nil {
			return nil, fmt.Errorf("typed lister of %s as %T: %w: %w", gvr, obj, err, ErrTypeMismatch)
		}
		for _, gvk := range gvks {
			if gvk.GroupVersion() == gvr.GroupVersion() {
				l.gvk = gvk
				break
			}
		}
		if l.gvk.Empty() {
			return nil, fmt.Errorf("typed lister of %s as %T: the scheme registers it as %v, not in %s: %w", gvr, obj, gvks, gvr.GroupVersion(), ErrTypeMismatch)
		}
	default:
		return nil, fmt.Errorf("typed lister of %s as %T: not a runtime.Object: %w", gvr, obj, ErrTypeMismatch)
	}
	l.ix = fleet.Indexer(gvr)
	if !l.partial && l.ix.codec != nil {
		l.typed = NewTypedDecoder(l.ix.codec, scheme)
	}
	if !l.partial {
		l.memo = opts.Memo
	}
	return l, nil
}

// readHeld returns a new T holding h's object, a copy of the one the memo keeps for its
// version if there is one, else made by read, which the memo then keeps a copy of.
func (l *TypedLister[T]) readHeld(h Held) (*T, error) {
	out := new(T)
	err := l.memo.Read(h, l.gvk, any(out).(runtime.Object), func(runtime.Object) error {
		// What of(e) gives: the encoding where a TypedDecoder decodes it.
		obj := h.stored
		if l.typed == nil && h.Object != nil {
			obj = h.Object
		}
		t, err := l.read(obj)
		if err == nil {
			*out = *t
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// of returns what a read of the lister takes from e, the lock held: with a
// TypedDecoder, the encoding of a compact fleet's object even where the fleet holds it
// decoded too (a decode into T from it is the cheaper conversion); else what the
// fleet's reads hand out.
func (l *TypedLister[T]) of(e *entry) runtime.Object {
	if l.typed != nil {
		return e.obj
	}
	return peek(e)
}

// read returns a new T holding obj, an object as of returns it: an encoding is decoded
// into T, or decoded and converted where the TypedDecoder does not decode it.
func (l *TypedLister[T]) read(obj runtime.Object) (*T, error) {
	if o, ok := obj.(*encodedObject); ok {
		out := new(T)
		if l.typed.DecodeInto(o.data, l.gvk, any(out).(runtime.Object)) {
			return out, nil
		}
		obj = l.ix.decode(o.data, *o.key)
	}
	return l.convert(obj)
}

// Resource returns the lister's resource.
func (l *TypedLister[T]) Resource() schema.GroupVersionResource { return l.ix.resource }

// List returns the objects, of every cluster, whose labels match selector (nil matches
// everything), each with its cluster. If an object does not convert to T, List returns
// nil and an error naming its key.
func (l *TypedLister[T]) List(selector labels.Selector) ([]Item[T], error) {
	if l.memo != nil {
		helds := l.ix.SelectEncoded("", "", selector)
		out := make([]Item[T], len(helds))
		for i, h := range helds {
			t, err := l.readHeld(h)
			if err != nil {
				return nil, l.heldError(h, err)
			}
			out[i] = Item[T]{Cluster: h.Key().Cluster, Object: t}
		}
		return out, nil
	}
	q, ok := newQuery("", selector)
	if !ok {
		return nil, nil
	}
	var objs []runtime.Object
	var clusters []string
	l.ix.ensureLabelsFor(selector)
	l.ix.lock.RLock()
	q.labelsKept = l.ix.labelsKept.Load()
	for c, ci := range l.ix.clusters {
		n := len(objs)
		objs = appendMatches(&q, objs, ci, l.of)
		for range len(objs) - n {
			clusters = append(clusters, c)
		}
	}
	l.ix.lock.RUnlock()

	out := make([]Item[T], len(objs))
	for i, obj := range objs {
		t, err := l.read(obj)
		if err != nil {
			return nil, l.convertError(clusters[i], obj, err)
		}
		out[i] = Item[T]{Cluster: clusters[i], Object: t}
	}
	return out, nil
}

// Get returns the object with the given key, or a Kubernetes NotFound error.
func (l *TypedLister[T]) Get(key Key) (*T, error) {
	if l.memo != nil {
		h, ok := l.ix.GetHeld(key)
		if !ok {
			return nil, apierrors.NewNotFound(l.ix.resource.GroupResource(), key.Name)
		}
		t, err := l.readHeld(h)
		if err != nil {
			return nil, l.heldError(h, err)
		}
		return t, nil
	}
	var obj runtime.Object
	ok := false
	if l.typed != nil {
		l.ix.lock.RLock()
		if e := l.ix.items.get(key); e != nil {
			obj, ok = l.of(e), true
		}
		l.ix.lock.RUnlock()
	} else {
		// Through the fleet's Get, which keeps a compact fleet's object decoded.
		obj, ok = l.ix.Get(key)
	}
	if !ok {
		return nil, apierrors.NewNotFound(l.ix.resource.GroupResource(), key.Name)
	}
	t, err := l.read(obj)
	if err != nil {
		return nil, l.convertError(key.Cluster, obj, err)
	}
	return t, nil
}

// Cluster returns the view of one cluster, which reads as a client-go generated lister
// of that cluster's informer.
func (l *TypedLister[T]) Cluster(name string) *TypedClusterLister[T] {
	return &TypedClusterLister[T]{l: l, cluster: name}
}

// TypedClusterLister reads the objects of one cluster, as a client-go generated lister:
// List and, for cluster-scoped objects, Get; Namespace for namespaced ones. Get one with
// TypedLister.Cluster; what TypedLister says of the objects holds for it.
type TypedClusterLister[T any] struct {
	l       *TypedLister[T]
	cluster string
}

// List returns the objects of the cluster, in every namespace, whose labels match
// selector (nil matches everything).
func (c *TypedClusterLister[T]) List(selector labels.Selector) ([]*T, error) {
	return c.l.list(c.cluster, "", selector)
}

// Get returns the cluster-scoped object name (a Node, a Namespace), or a Kubernetes
// NotFound error. Namespaced objects are read with Namespace(namespace).Get(name), as
// with client-go's generated listers.
func (c *TypedClusterLister[T]) Get(name string) (*T, error) {
	return c.l.Get(Key{Cluster: c.cluster, Name: name})
}

// Namespace returns the view of one namespace of the cluster.
func (c *TypedClusterLister[T]) Namespace(namespace string) *TypedNamespaceLister[T] {
	return &TypedNamespaceLister[T]{l: c.l, cluster: c.cluster, namespace: namespace}
}

// TypedNamespaceLister reads the objects of one namespace of one cluster. Get one with
// TypedClusterLister.Namespace; what TypedLister says of the objects holds for it.
type TypedNamespaceLister[T any] struct {
	l                  *TypedLister[T]
	cluster, namespace string
}

// List returns the objects of the namespace whose labels match selector (nil matches
// everything). As with client-go, the namespace "" lists every namespace.
func (n *TypedNamespaceLister[T]) List(selector labels.Selector) ([]*T, error) {
	return n.l.list(n.cluster, n.namespace, selector)
}

// Get returns the object name of the namespace, or a Kubernetes NotFound error. As with
// client-go, the namespace "" finds nothing: read cluster-scoped objects with
// TypedClusterLister.Get.
func (n *TypedNamespaceLister[T]) Get(name string) (*T, error) {
	if n.namespace == "" {
		return nil, apierrors.NewNotFound(n.l.ix.resource.GroupResource(), name)
	}
	return n.l.Get(Key{Cluster: n.cluster, Namespace: n.namespace, Name: name})
}

// list converts the objects of cluster in namespace (every namespace if empty) whose
// labels match selector.
func (l *TypedLister[T]) list(cluster, namespace string, selector labels.Selector) ([]*T, error) {
	if l.memo != nil {
		helds := l.ix.SelectEncoded(cluster, namespace, selector)
		out := make([]*T, len(helds))
		for i, h := range helds {
			t, err := l.readHeld(h)
			if err != nil {
				return nil, l.heldError(h, err)
			}
			out[i] = t
		}
		return out, nil
	}
	l.ix.ensureLabelsFor(selector)
	l.ix.lock.RLock()
	objs := selectLocked(l.ix, cluster, namespace, selector, l.of)
	l.ix.lock.RUnlock()
	out := make([]*T, len(objs))
	for i, obj := range objs {
		t, err := l.read(obj)
		if err != nil {
			return nil, l.convertError(cluster, obj, err)
		}
		out[i] = t
	}
	return out, nil
}

// convert returns a new T holding the cached object obj. It never modifies obj.
func (l *TypedLister[T]) convert(obj runtime.Object) (*T, error) {
	out := new(T)
	if l.partial {
		p := any(out).(*metav1.PartialObjectMetadata)
		if cached, ok := obj.(*metav1.PartialObjectMetadata); ok {
			cached.DeepCopyInto(p)
			return out, nil
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		// AsPartialObjectMetadata copies through the accessor's getters, which copy.
		*p = *meta.AsPartialObjectMetadata(m)
		// The kind of the object described, as controller-runtime's metadata reads give it.
		p.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
		return out, nil
	}
	switch obj := obj.(type) {
	case runtime.Unstructured:
		if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && gvk != l.gvk {
			return nil, fmt.Errorf("object is a %s, not a %s", gvk, l.gvk)
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.UnstructuredContent(), out); err != nil {
			return nil, err
		}
	case *metav1.PartialObjectMetadata:
		return nil, fmt.Errorf("the resource is cached metadata-only: read it as metav1.PartialObjectMetadata, not as %s", l.gvk.Kind)
	default:
		// A Transform may cache typed objects; a *T is copied.
		if _, ok := any(obj).(*T); !ok {
			return nil, fmt.Errorf("cached as %T, which does not convert to %s", obj, l.gvk.Kind)
		}
		out = any(obj.DeepCopyObject()).(*T)
	}
	// *T is a runtime.Object: NewTypedLister checked it.
	any(out).(runtime.Object).GetObjectKind().SetGroupVersionKind(l.gvk)
	return out, nil
}

// heldError is convertError of an object read as a Held.
func (l *TypedLister[T]) heldError(h Held, err error) error {
	return fmt.Errorf("%s %s: %w: %w", l.ix.resource.GroupResource(), h.Key(), err, ErrTypeMismatch)
}

func (l *TypedLister[T]) convertError(cluster string, obj runtime.Object, err error) error {
	key := Key{Cluster: cluster}
	if m, merr := meta.Accessor(obj); merr == nil {
		key.Namespace, key.Name = m.GetNamespace(), m.GetName()
	}
	return fmt.Errorf("%s %s: %w: %w", l.ix.resource.GroupResource(), key, err, ErrTypeMismatch)
}
