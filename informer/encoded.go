package informer

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// A snapshot store encodes every object that changes. The informers of a Set whose Sink
// asks for it (EncodingSink) hand their stores the encoding of each watched object along
// with the object: the decoder writes it while it decodes the object's JSON, where it
// costs a fraction of encoding the decoded object again. From the watch through the
// informer's transform to its applier, which hands both to the store, the object and
// its encoding travel as one wire.EncodedObject.

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
	// has all of it, and would hold all their encodings too (except for a PartialStore,
	// below, which gets those of a streaming list instead of the objects). Neither obj
	// nor encoded may be modified.
	ApplyEncoded(obj *unstructured.Unstructured, encoded []byte, initialList bool) error
}

// A Sink whose stores keep nothing but the encodings of the objects they are handed
// with one (a compact fleet in the snapshot's encoding) need not get decoded objects at
// all: the informers of a Set whose Sink is a PartialSink that StoresPartial decode each
// watched object, those of streaming lists included, into its encoding and the few
// fields that file it (wire.NewPartialDynamicClients, jsondec's ObjectPartialCBOR), so
// that no maps are built for it, a list held until it is complete takes little more than
// its encodings, and the store does not encode it again. A watched deletion goes to the
// store whole, decoded from its encoding. The objects of a resource that a transform
// changes (a user Transform, the values of Secrets dropped), and those of a paginated
// list, come decoded, as to any EncodedStore.
//
// The metadata-only resources of such a Set come partial too
// (wire.NewPartialMetadataClients): their encodings are package metaenc's short one
// (wire.CompactMetadataFormat) or, where it cannot hold the object exactly, the byte
// wire.MetadataFormat, then the CBOR, in the format below, of the map of a meta.k8s.io/v1
// PartialObjectMetadata; either the store decodes into a *metav1.PartialObjectMetadata
// without TypeMeta (persist.Codec does); the items of a paginated list come as such
// objects.

// PartialSink is an optional interface of an EncodingSink whose stores are
// PartialStores.
type PartialSink interface {
	EncodingSink
	// StoresPartial reports whether the stores of the Sink are PartialStores that keep
	// only the encodings of the objects given with one. It is asked once, when the Set
	// is created, and implies StoresEncoded.
	StoresPartial() bool
}

// PartialStore is an optional interface of an EncodedStore that needs only the encoding
// of an object, and a few of its fields, to keep it.
type PartialStore interface {
	EncodedStore
	// ApplyPartial is ApplyEncoded for an object of which partial holds only apiVersion,
	// kind, and, of the metadata, name, namespace, uid, resourceVersion and labels:
	// encoded, in the format of ApplyEncoded, is the whole object, which the store
	// decodes where it needs it. partial is an *unstructured.Unstructured, or an object
	// that embeds one (the informer hands on its decoders' wire.EncodedObjects, which
	// answer for those fields without reading the map again). Neither partial nor
	// encoded may be modified.
	ApplyPartial(partial runtime.Object, encoded []byte, initialList bool) error
}
