package informer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A snapshot store encodes every object that changes. The informers of a Set whose Sink
// asks for it (EncodingSink) hand their stores the encoding of each watched object along
// with the object: the decoder writes it while it decodes the object's JSON, where it
// costs a fraction of encoding the decoded object again. From the watch through the
// informer's queue to processDeltas, which hands both to the store, the object and its
// encoding travel as one wire.EncodedObject.

// EncodingSink is an optional interface of a Sink whose stores are EncodedStores.
type EncodingSink interface {
	Sink
	// StoresEncoded reports whether the stores of the Sink are EncodedStores that use
	// the encodings. It is asked once, when the Set is created.
	StoresEncoded() bool
}

// EncodedStore is an optional interface of a Store that keeps an encoding of its
// objects.
type EncodedStore interface {
	Store
	// ApplyEncoded is Apply, for an object that comes with encoded, the CBOR (RFC 8949)
	// of its Object map, in which:
	//   - maps have their entries in the order of the JSON's members, and the keys and
	//     string values are byte strings of the Go strings in the map;
	//   - integers are the int64 values of the map, and floats the float64 values, in
	//     64 bits;
	//   - every length is definite, every head in its shortest form, and nothing is
	//     tagged.
	// The informer calls ApplyEncoded, rather than Apply, for the objects of watch events
	// that it decoded itself, and that the transforms left as decoded. The objects of a
	// list, streaming lists included, come without: the informer holds a list until it
	// has all of it, and would hold all their encodings too. Neither obj nor encoded may
	// be modified.
	ApplyEncoded(obj *unstructured.Unstructured, encoded []byte, initialList bool) error
}
