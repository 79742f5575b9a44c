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
}

var _ runtime.Object = (*EncodedObject)(nil)

// Unwrap returns the object of obj, and its encoding if obj is an *EncodedObject.
func Unwrap(obj any) (any, []byte) {
	if e, ok := obj.(*EncodedObject); ok {
		return e.Unstructured, e.Encoded
	}
	return obj, nil
}
