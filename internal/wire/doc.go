// Package wire decodes what kube-apiservers send to the informers: it makes the dynamic
// clients (NewDynamicClients) whose JSON responses, objects, lists and watch streams,
// are decoded by package jsondec rather than apimachinery.
//
// Their objects are those apimachinery's serializer returns for the same input, but
// with their strings interned and, for the client that drops them, without the
// managedFields that nobody queries, so that the memory freed after decoding is not
// scattered among the objects that the informers keep (decode.go). The Decoders, and
// their intern tables, are the process's: one pool serves every client of every cluster. Everything else, and
// any input that jsondec cannot decode exactly as apimachinery would, is left to
// apimachinery's serializer, and the objects it returns are then interned and stripped
// the same way; FuzzDecode checks both. The frames of a watch stream are split, and their
// envelopes read, in one pass each (watchdecode.go) instead of the six scans of
// client-go's framer and envelope decoder; FuzzJSONFramer and FuzzWatchEvent hold them
// to apimachinery's.
//
// Clients that encode return the objects of watch events as *EncodedObjects: the object
// with the CBOR of its map, written while its JSON was decoded, for stores that keep
// objects as CBOR (the snapshot). Unwrap takes them apart; ToPartial keeps the encoding
// and, of the object, only what files it, for stores that keep nothing else (a compact
// fleet). The clients of NewPartialDynamicClients decode such partial objects directly,
// building no maps but for the filing fields (jsondec's ObjectPartialCBOR).
//
// The clients of NewPartialMetadataClients do the same for the metadata of objects,
// asked for as client-go's metadata client asks (meta.k8s.io/v1 PartialObjectMetadata):
// their encodings are package metaenc's (CompactMetadataFormat), or where that cannot
// hold an object exactly, MetadataFormat and its CBOR, and DecodeEncoded makes the
// PartialObjectMetadata of one (metadata.go).
//
// The requests whose context says so (WithProtobuf) ask for protobuf, where the server
// has it, for the kinds that package pbjson can transcode: pbjson writes each object
// back as the JSON the server would have sent, which is then decoded as above, so the
// objects and their encodings are the same whatever the wire (protobuf.go). For the
// clients of NewPartialDynamicClients, pbjson writes the partial object's CBOR and
// filing fields from the protobuf directly (pbjson.Transcoder.ObjectPartialCBOR), the
// same bytes and maps, without JSON in between; for those of NewPartialMetadataClients,
// metaenc.ProtobufWriter writes an object's compact encoding straight from the
// protobuf, without the CBOR either, wherever that gives the same bytes
// (decodeCompactMetadata).
//
// This package knows the wire and nothing of what is done with the objects: of
// fleetwatch's packages it imports only jsondec, pbjson and metaenc, and must not import those that cache,
// persist or serve the objects (informer, aggregate, persist, server).
package wire
