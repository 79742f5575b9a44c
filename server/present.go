package server

import (
	"maps"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// partialGVK is the kind of metadata-only objects.
var partialGVK = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")

// served returns the object o as the server sends it: with ClusterAnnotation, and with
// the apiVersion and kind of res (metadata-only objects are cached without them). If rv
// is not empty, it replaces metadata.resourceVersion, and the object's own is kept in
// ResourceVersionAnnotation.
//
// The fleet's objects are shared and must not be modified. Instead of a deep copy, the
// maps on the path to what changes (the object, its metadata, its annotations) are
// copied, and everything else is shared, read-only: serving a large list then costs
// three small maps per object, not a copy of every object.
//
// An object of a compact fleet (compactObject) is returned as an *encodedServed, which
// writes the same JSON from the encoding.
func served(res *apiResource, o object, rv string) runtime.Object {
	switch obj := o.obj.(type) {
	case *compactObject:
		if o.codec == nil {
			return obj.unstructured() // never: compactObjects come with their codec
		}
		return &encodedServed{
			target: servedTarget{kind: res.kind, apiVersion: res.gvr.GroupVersion().String(), cluster: o.cluster, rv: rv},
			data:   obj.data,
			codec:  o.codec,
			res:    res,
		}
	case *unstructured.Unstructured:
		top := maps.Clone(obj.Object)
		md, _ := top["metadata"].(map[string]any)
		md = maps.Clone(md)
		if md == nil {
			md = map[string]any{}
		}
		ann, _ := md["annotations"].(map[string]any)
		ann = maps.Clone(ann)
		if ann == nil {
			ann = map[string]any{}
		}
		ann[ClusterAnnotation] = o.cluster
		if rv != "" {
			if own, ok := md["resourceVersion"].(string); ok {
				ann[ResourceVersionAnnotation] = own
			}
			md["resourceVersion"] = rv
		}
		md["annotations"] = ann
		top["metadata"] = md
		if _, ok := top["kind"].(string); !ok {
			top["kind"] = res.kind
		}
		if _, ok := top["apiVersion"].(string); !ok {
			top["apiVersion"] = res.gvr.GroupVersion().String()
		}
		return &unstructured.Unstructured{Object: top}
	case *metav1.PartialObjectMetadata:
		c := *obj
		c.TypeMeta = metav1.TypeMeta{Kind: res.kind, APIVersion: res.gvr.GroupVersion().String()}
		c.Annotations = annotate(obj.Annotations, o.cluster, &c.ObjectMeta, rv)
		return &c
	default:
		c := o.obj.DeepCopyObject()
		if m, err := meta.Accessor(c); err == nil {
			ann := annotate(m.GetAnnotations(), o.cluster, nil, "")
			if rv != "" {
				ann[ResourceVersionAnnotation] = m.GetResourceVersion()
				m.SetResourceVersion(rv)
			}
			m.SetAnnotations(ann)
		}
		if c.GetObjectKind().GroupVersionKind().Empty() {
			c.GetObjectKind().SetGroupVersionKind(res.gvk())
		}
		return c
	}
}

// annotate returns a copy of ann with ClusterAnnotation set. If om is not nil and rv is
// not empty, om's resourceVersion is replaced by rv and its own is kept in
// ResourceVersionAnnotation.
func annotate(ann map[string]string, cluster string, om *metav1.ObjectMeta, rv string) map[string]string {
	out := make(map[string]string, len(ann)+2)
	maps.Copy(out, ann)
	out[ClusterAnnotation] = cluster
	if om != nil && rv != "" {
		out[ResourceVersionAnnotation] = om.ResourceVersion
		om.ResourceVersion = rv
	}
	return out
}

// partial returns the metadata of o as a PartialObjectMetadata, with ClusterAnnotation,
// and with rv as its resourceVersion if not empty.
func partial(o object, rv string) *metav1.PartialObjectMetadata {
	o = o.full()
	m, err := meta.Accessor(o.obj)
	if err != nil {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: partialGVK.Kind, APIVersion: partialGVK.GroupVersion().String()}}
	}
	p := meta.AsPartialObjectMetadata(m)
	p.TypeMeta = metav1.TypeMeta{Kind: partialGVK.Kind, APIVersion: partialGVK.GroupVersion().String()}
	p.Annotations = annotate(p.Annotations, o.cluster, &p.ObjectMeta, rv)
	return p
}
