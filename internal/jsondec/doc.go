// Package jsondec decodes the JSON of Kubernetes API objects into the maps of
// unstructured.Unstructured, without reflection, and without the garbage that
// apimachinery's decoding leaves between the objects it returns.
//
// A Decoder returns what apimachinery's UnstructuredJSONScheme returns for the same
// input (k8s.io/apimachinery/pkg/util/json.Unmarshal into a map[string]any, and the same
// split of a list into its items), and fails on the same inputs; FuzzDecoder checks
// both. The one exception is input that names its apiVersion or kind ambiguously
// (ErrAmbiguousTypeMeta), which it leaves to apimachinery. It differs in three ways, all
// of which save memory:
//
//   - The map keys and the short string values of what it returns are interned (package
//     intern): the objects that one Decoder decodes share them, boxed values included.
//   - With DropManagedFields, it checks metadata.managedFields as the rest of the input
//     but does not decode them, rather than decoding them to be dropped.
//   - It allocates each map and slice once, at its final size, and keeps its scratch
//     space for the next input. Apimachinery grows them as it goes and copies every
//     string, so that the objects a reflector keeps end up scattered among what it
//     dropped, and the heap's spans cannot be given back.
//
// ObjectCBOR is Object, and also returns the CBOR (RFC 8949) of the map, written as the
// input is decoded, for callers that store objects as CBOR: a map of byte-string keys,
// in the order of the input's members, holding byte strings, integers, eight-byte
// floats, booleans, nulls, arrays and maps, with definite lengths and shortest heads.
// direct.Unmarshal (k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct) decodes it
// into a map equal to the one returned; FuzzObjectCBOR checks that, and the bytes. It
// returns no CBOR for an object with a repeated key, whose map keeps only the last of
// its values.
//
// WatchEvent reads the envelope of a watch event, {"type": ..., "object": ...}, checking
// the object without decoding it, so that the object can then be decoded by Object.
//
// Nothing that a Decoder returns shares memory with its input or with the Decoder's
// scratch space, except the object that WatchEvent returns, which is a slice of the
// input.
//
// Of fleetwatch it imports only internal/intern, and internal/cborenc, which writes the
// pieces of its CBOR.
package jsondec
