// Package cborenc writes the pieces of the CBOR (RFC 8949) that
// jsondec.Decoder.ObjectCBOR defines, for the two packages that write it, jsondec from
// JSON and pbjson from protobuf: heads in their shortest form, integers, eight-byte
// floats, and maps and arrays whose lengths are known only once they are written, whose
// heads take one byte meanwhile (EndHead) and are lengthened at the end (Splice).
//
// It imports nothing of fleetwatch.
package cborenc
