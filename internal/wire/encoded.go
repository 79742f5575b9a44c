package wire

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// EncodedObject is an object of a watch event with its encoding. It is what the clients
// of NewDynamicClients that encode return for the objects of watch events. It is a
// runtime.Object and a metav1.Object through the embedded Unstructured, so that an
// informer and its transform read it as the object.
//
// A partial one that this package made (ToPartial, the partial clients) has its
// namespace, name and resourceVersion read from the map once, when it is made, while the
// map is in the CPU's cache: the informer and the store ask for them several times per
// object, the last ones after a whole list has gone through,
// when each lookup in the nested maps misses the cache (about a tenth of a compact
// metadata-only fleet's CPU to sync). Its GetNamespace, GetName, GetResourceVersion,
// Key and RawLabels return what was read then; its setters of the same fields change
// both. Setting them on the embedded Unstructured instead would leave the two apart: a
// partial object, as its encoding, must not be modified.
type EncodedObject struct {
	*unstructured.Unstructured
	// Encoded is the CBOR of the Object map, as jsondec.Decoder.ObjectCBOR wrote it
	// while it decoded the object's JSON. It must not be modified.
	Encoded []byte
	// Partial is set if the Unstructured holds only part of the object (ToPartial):
	// Encoded is then the only whole form of it.
	Partial bool

	// filed is set once namespace, name, resourceVersion, key and labels have been
	// read from the map (file).
	filed                                 bool
	namespace, name, resourceVersion, key string
	// labels is the map's labels map, nil if it has none or they are not a map.
	labels map[string]any
}

var _ runtime.Object = (*EncodedObject)(nil)

// file reads the fields that file e from its map, for the getters below.
func (e *EncodedObject) file() {
	u := e.Unstructured
	e.namespace, e.name, e.resourceVersion = u.GetNamespace(), u.GetName(), u.GetResourceVersion()
	e.key = e.name
	if e.namespace != "" {
		e.key = e.namespace + "/" + e.name
	}
	md, _ := u.Object["metadata"].(map[string]any)
	e.labels, _ = md["labels"].(map[string]any)
	e.filed = true
}

// RawLabels returns the labels map of the object, as it is in its map (values that are
// not strings included), without reading the map again, and true, if e was filed when
// it was made; otherwise nil and false. The map is e's: it must not be modified.
func (e *EncodedObject) RawLabels() (map[string]any, bool) {
	return e.labels, e.filed
}

// GetNamespace returns the object's namespace.
func (e *EncodedObject) GetNamespace() string {
	if e.filed {
		return e.namespace
	}
	return e.Unstructured.GetNamespace()
}

// GetName returns the object's name.
func (e *EncodedObject) GetName() string {
	if e.filed {
		return e.name
	}
	return e.Unstructured.GetName()
}

// GetResourceVersion returns the object's resourceVersion.
func (e *EncodedObject) GetResourceVersion() string {
	if e.filed {
		return e.resourceVersion
	}
	return e.Unstructured.GetResourceVersion()
}

// SetNamespace sets the object's namespace.
func (e *EncodedObject) SetNamespace(namespace string) {
	e.Unstructured.SetNamespace(namespace)
	if e.filed {
		e.file()
	}
}

// SetName sets the object's name.
func (e *EncodedObject) SetName(name string) {
	e.Unstructured.SetName(name)
	if e.filed {
		e.file()
	}
}

// SetLabels sets the object's labels.
func (e *EncodedObject) SetLabels(labels map[string]string) {
	e.Unstructured.SetLabels(labels)
	if e.filed {
		e.file()
	}
}

// SetResourceVersion sets the object's resourceVersion.
func (e *EncodedObject) SetResourceVersion(resourceVersion string) {
	e.Unstructured.SetResourceVersion(resourceVersion)
	if e.filed {
		e.file()
	}
}

// Key returns the object's key as cache.MetaNamespaceKeyFunc computes it (namespace/name,
// or the name alone), without reading the map again if it was read when e was made.
func (e *EncodedObject) Key() string {
	if e.filed {
		return e.key
	}
	namespace, name := e.Unstructured.GetNamespace(), e.Unstructured.GetName()
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// Unwrap returns the object of obj, and its encoding if obj is an *EncodedObject.
func Unwrap(obj any) (any, []byte) {
	if e, ok := obj.(*EncodedObject); ok {
		return e.Unstructured, e.Encoded
	}
	return obj, nil
}

// ToPartial returns e with an object that holds only what a store of encodings needs to
// file it: apiVersion, kind, and, of the metadata, name, namespace, uid,
// resourceVersion and labels (the labels map is e's). Encoded is e's, whole. The rest of
// e's object is left to the garbage collector, so that the objects of a list, which an
// informer holds until it has all of them, take little more than their encodings.
func (e *EncodedObject) ToPartial() *EncodedObject {
	m := e.Object
	p := make(map[string]any, 3)
	for _, k := range [...]string{"apiVersion", "kind"} {
		if v, ok := m[k]; ok {
			p[k] = v
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		pmd := make(map[string]any, len(partialMetadata))
		for _, k := range partialMetadata {
			if v, ok := md[k]; ok {
				pmd[k] = v
			}
		}
		p["metadata"] = pmd
	}
	return newPartial(&unstructured.Unstructured{Object: p}, e.Encoded)
}

// newPartial returns the partial EncodedObject of u and encoded, filed.
func newPartial(u *unstructured.Unstructured, encoded []byte) *EncodedObject {
	e := &EncodedObject{Unstructured: u, Encoded: encoded, Partial: true}
	e.file()
	return e
}

// partialMetadata are the fields of the metadata that ToPartial keeps.
var partialMetadata = [...]string{"name", "namespace", "uid", "resourceVersion", "labels"}
