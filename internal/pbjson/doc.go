// Package pbjson writes the protobuf that a kube-apiserver sends for the built-in kinds
// as the JSON it would have sent for the same object, so that the informers can ask for
// protobuf, which the server encodes at a fraction of the CPU that JSON costs it, and
// still decode with package jsondec.
//
// It reads the protobuf by a schema of each kind built by reflection on the Go types of
// client-go's scheme (their json and protobuf tags), with no generated code, and writes
// each member as encoding/json writes the Go value that the protobuf decodes to: in the
// order of the fields' declaration, omitempty and omitzero applied, maps sorted by key,
// and the API's own JSON encodings (times, quantities, int-or-strings, raw extensions,
// durations) spelled as their MarshalJSON spells them. A kind whose Go type it cannot
// describe is not Supported; a field it does not know (a newer server's) or a value it
// cannot write exactly is ErrUnsupported, and the caller asks for JSON instead. Nor is a
// kind whose protobuf carries less than its JSON (Losses: the apiVersion and kind of an
// object nested in it, such as a StatefulSet's volumeClaimTemplates, which
// go-to-protobuf leaves out, or a field without a protobuf tag): Lossy has them all.
//
// For a caller that keeps objects as CBOR and builds only what files them,
// ObjectPartialCBOR writes, from the same walk of the protobuf, the CBOR that package
// jsondec would write for that JSON (jsondec.Decoder.ObjectPartialCBOR), byte for byte,
// and builds the same map of filing fields, without the JSON: each token is written as
// jsondec would decode its JSON text (a string's decoded bytes, a number as an integer
// or a float as jsondec reads the digits that encoding/json writes). Raw JSON (raw
// extensions, managedFields) is written by jsondec itself (AppendValueCBOR); where only
// jsondec can judge the JSON (raw JSON it refuses, a repeated key, ...), the JSON is
// written and decoded. Of fleetwatch it imports only jsondec, and cborenc for the pieces
// of that CBOR.
package pbjson
