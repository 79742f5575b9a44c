package wire

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// EncodedObject is an object of a watch event with its encoding. It is what the clients
// of NewDynamicClients that encode return for the objects of watch events. It is a
// runtime.Object and a metav1.Object through the embedded Unstructured, so that a
// reflector, an informer's queue and its transform read it as the object.
type EncodedObject struct {
	*unstructured.Unstructured
	// Encoded is the CBOR of the Object map, as jsondec.Decoder.ObjectCBOR wrote it
	// while it decoded the object's JSON. It must not be modified.
	Encoded []byte
	// Partial is set if the Unstructured holds only part of the object (ToPartial):
	// Encoded is then the only whole form of it.
	Partial bool
}

var _ runtime.Object = (*EncodedObject)(nil)

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
	return &EncodedObject{Unstructured: &unstructured.Unstructured{Object: p}, Encoded: e.Encoded, Partial: true}
}

// partialMetadata are the fields of the metadata that ToPartial keeps.
var partialMetadata = [...]string{"name", "namespace", "uid", "resourceVersion", "labels"}
