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

	"github.com/fleetwatch/fleetwatch/aggregate"
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
	// decoder, if not nil, decodes the encodings of a compact fleet into typed objects
	// (see encodedDecoder).
	decoder *encodedDecoder
	// memo, if not nil, keeps the typed objects that read converts.
	memo *aggregate.TypedMemo
}

// newTarget returns the target of obj, an object or a list, whose kind is gvk (for a
// list, the kind of its items), with decoder for the encodings of a compact fleet (nil
// for none).
func newTarget(obj runtime.Object, gvk schema.GroupVersionKind, scheme *runtime.Scheme, decoder *encodedDecoder) (target, error) {
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	t := target{gvk: gvk, scheme: scheme, decoder: decoder}
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

// fromEncoded converts a cached object into out, an object of the target, replacing all
// of out: obj if it is not nil, else encoded, its encoding in the fleet's Codec, as
// aggregate.Indexer.GetEncoded gives them. A typed target decodes an encoding in CBOR
// straight into out (encodedDecoder), where decoding it into a map first and converting
// that by reflection took about twice the time and allocated 2.7 times the bytes
// (BenchmarkGetTyped, a Pod). It modifies neither obj nor encoded.
func (t target) fromEncoded(obj runtime.Object, encoded []byte, out runtime.Object) error {
	if encoded != nil && t.form == formTyped && t.decoder.intoTyped(encoded, t.gvk, out) {
		return nil
	}
	if obj == nil {
		if encoded == nil || t.decoder == nil {
			return fmt.Errorf("no %s to convert", t.gvk.Kind)
		}
		var err error
		if obj, err = t.decoder.codec.Decode(encoded); err != nil {
			return fmt.Errorf("decoding a cached %s: %w", t.gvk.Kind, err)
		}
	}
	return t.into(obj, out)
}

// read converts h, an object as the fleet holds it, into out as fromEncoded does, through
// the target's memo of typed objects if it is typed and has one.
func (t target) read(h aggregate.Held, out runtime.Object) error {
	if t.form != formTyped {
		return t.fromEncoded(h.Object, h.Encoded, out)
	}
	return t.memo.Read(h, t.gvk, out, func(out runtime.Object) error { return t.fromEncoded(h.Object, h.Encoded, out) })
}

// convertEncoded is convert of a cached object that comes with its encoding in the
// fleet's Codec (aggregate.Event.Encoded; nil if none), from which a typed target
// decodes the new object (fromEncoded).
func (t target) convertEncoded(obj runtime.Object, encoded []byte, shared bool) (client.Object, error) {
	if encoded == nil || t.form != formTyped {
		return t.convert(obj, shared)
	}
	out, err := t.newObject()
	if err != nil {
		return nil, err
	}
	return out, t.fromEncoded(obj, encoded, out)
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

// fill converts held, objects as the fleet holds them, into the items of list, a list of
// the target, replacing them: at most limit of them (0: all), those that keep accepts.
// Each item is read as target.read reads it. A typed list whose items are structs
// (corev1.PodList) is converted or copied into in place, one slice for its items; any
// other goes through an object per item, which meta.SetList copies into the list.
func (t target) fill(list client.ObjectList, held []aggregate.Held, limit int64, keep func(client.Object) bool) error {
	if limit <= 0 || limit > int64(len(held)) {
		limit = int64(len(held))
	}
	if items, ok := t.structItems(list); ok {
		out := reflect.MakeSlice(items.Type(), int(limit), int(limit))
		n := 0
		for _, h := range held {
			if n == out.Len() {
				break
			}
			item := out.Index(n).Addr().Interface().(client.Object)
			// read replaces all of item: one that keep rejects is overwritten.
			if err := t.read(h, item); err != nil {
				return err
			}
			if keep(item) {
				n++
			}
		}
		if n < out.Len() {
			out.Index(n).SetZero()
		}
		items.Set(out.Slice(0, n))
		return nil
	}
	objs := make([]runtime.Object, 0, limit)
	for _, h := range held {
		if int64(len(objs)) == limit {
			break
		}
		item, err := t.newObject()
		if err != nil {
			return err
		}
		if err := t.read(h, item); err != nil {
			return err
		}
		if keep(item) {
			objs = append(objs, item)
		}
	}
	return meta.SetList(list, objs)
}

// structItems returns the Items of list, a typed list of the target, if they are a
// slice of structs whose pointers are client.Objects, such as []corev1.Pod.
func (t target) structItems(list client.ObjectList) (reflect.Value, bool) {
	if t.form != formTyped {
		return reflect.Value{}, false
	}
	ptr, err := meta.GetItemsPtr(list)
	if err != nil {
		return reflect.Value{}, false
	}
	items := reflect.ValueOf(ptr).Elem()
	if items.Kind() != reflect.Slice || items.Type().Elem().Kind() != reflect.Struct ||
		!reflect.PointerTo(items.Type().Elem()).Implements(clientObjectType) {
		return reflect.Value{}, false
	}
	return items, true
}

var clientObjectType = reflect.TypeFor[client.Object]()

// encodedDecoder decodes the encodings of a compact fleet: straight into typed objects
// where they are CBOR maps (aggregate.TypedDecoder), else with the fleet's Codec.
type encodedDecoder struct {
	codec aggregate.Codec
	// typed is nil if codec's encodings are not CBOR maps.
	typed *aggregate.TypedDecoder
}

// newEncodedDecoder returns the encodedDecoder of a fleet with codec; nil for a plain
// fleet (codec nil).
func newEncodedDecoder(codec aggregate.Codec, scheme *runtime.Scheme) *encodedDecoder {
	if codec == nil {
		return nil
	}
	return &encodedDecoder{codec: codec, typed: aggregate.NewTypedDecoder(codec, scheme)}
}

// intoTyped decodes encoded into out, a typed object of kind gvk replaced whole, as
// aggregate.TypedDecoder.DecodeInto does, and reports whether it did; it does not for a
// nil decoder, or one whose fleet's encodings are not CBOR maps.
func (d *encodedDecoder) intoTyped(encoded []byte, gvk schema.GroupVersionKind, out runtime.Object) bool {
	return d != nil && d.typed.DecodeInto(encoded, gvk, out)
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
