package mcprovider

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// form is the shape in which a reader asks for objects.
type form int

const (
	formTyped        form = iota // a Go type of the scheme, such as *corev1.Pod
	formUnstructured             // *unstructured.Unstructured
	formMetadata                 // *metav1.PartialObjectMetadata
)

// target is what the fleet's objects of one kind are converted into for a reader.
type target struct {
	gvk    schema.GroupVersionKind
	form   form
	scheme *runtime.Scheme
}

// newTarget returns the target of obj, an object or a list, whose kind is gvk (for a
// list, the kind of its items).
func newTarget(obj runtime.Object, gvk schema.GroupVersionKind, scheme *runtime.Scheme) (target, error) {
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	t := target{gvk: gvk, scheme: scheme}
	switch obj.(type) {
	case runtime.Unstructured:
		t.form = formUnstructured
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		t.form = formMetadata
	default:
		if !scheme.Recognizes(gvk) {
			return target{}, fmt.Errorf("kind %s is not registered in the scheme", gvk)
		}
	}
	return t, nil
}

// newObject returns an empty object of the target.
func (t target) newObject() (client.Object, error) {
	switch t.form {
	case formUnstructured:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(t.gvk)
		return u, nil
	case formMetadata:
		p := &metav1.PartialObjectMetadata{}
		p.SetGroupVersionKind(t.gvk)
		return p, nil
	}
	obj, err := t.scheme.New(t.gvk)
	if err != nil {
		return nil, err
	}
	o, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%T is not a client.Object", obj)
	}
	return o, nil
}

// convert returns the cached object obj as a new object of the target, which the caller
// owns. An unstructured or metadata-only target of an object cached in that form is the
// cached object itself when shared is set: the caller must not modify it then, as with
// the objects that client-go's informers hand to their handlers.
func (t target) convert(obj runtime.Object, shared bool) (client.Object, error) {
	if shared {
		switch cached := obj.(type) {
		case *unstructured.Unstructured:
			if t.form == formUnstructured {
				return cached, t.checkKind(cached)
			}
		case *metav1.PartialObjectMetadata:
			if t.form == formMetadata {
				return cached, nil
			}
		}
	}
	out, err := t.newObject()
	if err != nil {
		return nil, err
	}
	return out, t.into(obj, out)
}

// into converts the cached object obj into out, an object of the target, replacing all
// of out. It never modifies obj.
func (t target) into(obj runtime.Object, out runtime.Object) error {
	if t.form == formMetadata {
		p, ok := out.(*metav1.PartialObjectMetadata)
		if !ok {
			return fmt.Errorf("%T is not a metav1.PartialObjectMetadata", out)
		}
		if cached, ok := obj.(*metav1.PartialObjectMetadata); ok {
			*p = metav1.PartialObjectMetadata{}
			cached.DeepCopyInto(p)
		} else {
			m, err := meta.Accessor(obj)
			if err != nil {
				return err
			}
			// The accessor's getters of an unstructured object return copies.
			*p = *meta.AsPartialObjectMetadata(m)
		}
		p.SetGroupVersionKind(t.gvk)
		return nil
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("the fleet caches %s metadata-only: read it as metav1.PartialObjectMetadata", t.gvk.Kind)
	}
	if err := t.checkKind(u); err != nil {
		return err
	}
	if t.form == formUnstructured {
		o, ok := out.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("%T is not an unstructured.Unstructured", out)
		}
		o.Object = runtime.DeepCopyJSON(u.Object)
		return nil
	}
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("%T is not a pointer to an object", out)
	}
	v.Elem().Set(reflect.Zero(v.Elem().Type()))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return fmt.Errorf("converting %s %s/%s into %T: %w", t.gvk.Kind, u.GetNamespace(), u.GetName(), out, err)
	}
	out.GetObjectKind().SetGroupVersionKind(t.gvk)
	return nil
}

// checkKind fails for an object of another kind than the target's.
func (t target) checkKind(u *unstructured.Unstructured) error {
	if gvk := u.GroupVersionKind(); !gvk.Empty() && gvk != t.gvk {
		return fmt.Errorf("the object %s/%s is a %s, not a %s", u.GetNamespace(), u.GetName(), gvk, t.gvk)
	}
	return nil
}

// fieldIndex is a field indexed with IndexField.
type fieldIndex struct {
	gvk     schema.GroupVersionKind
	field   string
	target  target
	extract client.IndexerFunc

	// mu guards applied, set once the index is in the fleet.
	mu      sync.Mutex
	applied bool
}

// allNamespaces is the namespace under which every value is indexed too, as
// controller-runtime's cache does, to list by field across namespaces.
const allNamespaces = "__all_namespaces"

// indexName is the fleet index of a field, named as controller-runtime names it.
func indexName(field string) string { return "field:" + field }

// indexValue is the value under which objects of namespace (every namespace if empty)
// with value are indexed.
func indexValue(namespace, value string) string {
	if namespace == "" {
		namespace = allNamespaces
	}
	return namespace + "/" + value
}

// indexers returns the fleet index of the field. Its values carry no cluster: the fleet's
// index functions see objects only, so a cluster's List keeps the keys of its cluster.
func (fi *fieldIndex) indexers() toolscache.Indexers {
	return toolscache.Indexers{indexName(fi.field): func(raw any) ([]string, error) {
		cached, ok := raw.(runtime.Object)
		if !ok {
			return nil, fmt.Errorf("%T is not an object", raw)
		}
		obj, err := fi.target.convert(cached, true)
		if err != nil {
			return nil, err
		}
		ns := obj.GetNamespace()
		raws := fi.extract(obj)
		out := make([]string, 0, 2*len(raws))
		for _, v := range raws {
			out = append(out, indexValue(ns, v))
			if ns != "" {
				out = append(out, indexValue("", v))
			}
		}
		return out, nil
	}}
}
