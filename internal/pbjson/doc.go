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
// cannot write exactly is ErrUnsupported, and the caller asks for JSON instead.
package pbjson
