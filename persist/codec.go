package persist

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"

	"github.com/fleetwatch/fleetwatch/internal/metaenc"
)

// An object is stored as its encoding, whose first byte says both the Go type the
// object decodes to and the encoding, so that a later version can add an encoding and
// still read what this one wrote:
//
//   - An *unstructured.Unstructured is stored as its Object map in CBOR, whose first
//     byte is the head of a map (major type 5: 0xa0 to 0xbf). This is schema version 2;
//     version 1 wrote the byte formatUnstructured before the map, which is still read.
//   - A *metav1.PartialObjectMetadata is stored as the byte formatMetadata, then the
//     object, with its TypeMeta, in CBOR.
//   - The metadata of an object as the informers decode it from a kube-apiserver's
//     meta.k8s.io/v1 PartialObjectMetadata (package wire's MetadataFormat) is stored as
//     the byte formatMetadataMap, then the CBOR of the map of its JSON, in the subset of
//     an unstructured object's; it decodes to a *metav1.PartialObjectMetadata without
//     TypeMeta, as client-go's metadata client returns it. Only such encodings are
//     stored so (Writer.UpsertEncoded); Encode writes formatMetadata.
//   - The same metadata in package metaenc's short encoding (package wire's
//     CompactMetadataFormat, which the informers write where it holds the object
//     exactly) is stored as it is, its first byte formatMetadataCompact; it decodes to
//     the same *metav1.PartialObjectMetadata as formatMetadataMap does.
//   - Any of these may be stored compressed: the byte formatCompressed, then its encoding as
//     one S2 block (compress.go), by a Codec with Compress; or the byte formatDict, the
//     id of a dictionary of the object's resource, then its encoding as one S2 block made
//     with that dictionary (dict.go), by a Codec with Compress and Dictionary.
//
// Both are CBOR (RFC 8949) as Kubernetes' own CBOR serializer writes it, through
// apimachinery's cbor/direct package, except that the maps written by
// jsondec.Decoder.ObjectCBOR (Writer.UpsertEncoded) keep their keys in the order of the
// JSON they were decoded from. CBOR was measured against JSON (see BenchmarkEncode and
// BenchmarkDecode): it is smaller, decodes faster, and keeps the Go types of an
// unstructured object exactly, where JSON turns a float64 such as 1.0 into an int64.
// Integers decode as int64, as unstructured requires.
const (
	// formatUnstructured: an *unstructured.Unstructured, its Object map in CBOR, as
	// schema version 1 wrote it.
	formatUnstructured byte = 1
	// formatMetadata: a *metav1.PartialObjectMetadata in CBOR, with its TypeMeta.
	formatMetadata byte = 2
	// formatMetadataMap: a *metav1.PartialObjectMetadata as the CBOR of the map of the
	// apiserver's JSON of it, without its TypeMeta once decoded. Added within schema
	// version 4: a build before it takes a file that holds it for a damaged one.
	formatMetadataMap byte = 3
	// formatMetadataCompact: a *metav1.PartialObjectMetadata in package metaenc's
	// encoding, without TypeMeta once decoded. Added within schema version 4, with
	// formatMetadataMap: a build before it takes a file that holds it for a damaged one.
	formatMetadataCompact = metaenc.Format
)

// isMapHead reports whether b is the first byte of a CBOR map.
func isMapHead(b byte) bool { return b>>5 == cborMap }

// encodeObject returns the stored form of obj, which must be an
// *unstructured.Unstructured or a *metav1.PartialObjectMetadata. It only reads obj.
func encodeObject(obj runtime.Object) ([]byte, error) {
	var e cborEncoder
	return e.encodeObject(obj)
}

// encodeObject is encodeObject with e's buffers. The result does not share e's memory.
func (e *cborEncoder) encodeObject(obj runtime.Object) ([]byte, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		if o == nil || o.Object == nil {
			return nil, fmt.Errorf("%w: empty unstructured object", ErrInvalid)
		}
		e.buf = e.buf[:0]
		if e.appendMap(o.Object) {
			return slices.Clone(e.buf), nil
		}
		data, err := direct.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding %T: %v", ErrInvalid, obj, err)
		}
		return data, nil
	case *metav1.PartialObjectMetadata:
		if o == nil {
			return nil, fmt.Errorf("%w: nil object", ErrInvalid)
		}
		body, err := direct.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding %T: %v", ErrInvalid, obj, err)
		}
		out := make([]byte, 1+len(body))
		out[0] = formatMetadata
		copy(out[1:], body)
		return out, nil
	default:
		return nil, fmt.Errorf("%w: objects of type %T cannot be stored, only *unstructured.Unstructured and *metav1.PartialObjectMetadata", ErrInvalid, obj)
	}
}

// decodeObject decodes what encodeObject returned. It never panics, and the object it
// returns shares no memory with data, so data may be a bbolt value. An error wraps
// ErrCorrupt.
func decodeObject(data []byte) (obj runtime.Object, err error) {
	defer recoverDecode(&err)
	return decode(data)
}

// recoverDecode turns a panic of the decoders into an error wrapping ErrCorrupt.
// FuzzDecode finds panics in decode; this only keeps a bug found later from taking the
// daemon down.
func recoverDecode(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: decoding object panicked: %v", ErrCorrupt, r)
	}
}

// decode is decodeObject without the recover. It takes a decoder of the pool, whose
// tables of strings are warm.
func decode(data []byte) (runtime.Object, error) {
	d := decoders.Get().(*fastDecoder)
	defer decoders.Put(d)
	return d.decode(string(data))
}

// decode is decode with d's tables of strings. It may panic on a bug; the caller
// recovers.
func (d *fastDecoder) decode(data string) (runtime.Object, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty object value", ErrCorrupt)
	}
	expanded, err := d.expanded(data)
	if err != nil {
		return nil, err
	}
	if d.shared != nil && unsafe.StringData(expanded) != unsafe.StringData(data) {
		// The expansion is in d's scratch space, which the next value overwrites: the
		// loader's shared values are found by views of values read in place only (the
		// kept ones of DecodeShared are copies).
		shared := d.shared
		d.shared = nil
		defer func() { d.shared = shared }()
	}
	data = expanded
	switch {
	case isMapHead(data[0]):
		return d.decodeUnstructured(data)
	case data[0] == formatUnstructured:
		return d.decodeUnstructured(data[1:])
	case data[0] == formatMetadata || data[0] == formatMetadataMap:
		o := new(metav1.PartialObjectMetadata)
		if err := direct.Unmarshal([]byte(data[1:]), o); err != nil {
			return nil, fmt.Errorf("%w: decoding object metadata: %v", ErrCorrupt, err)
		}
		if data[0] == formatMetadataMap {
			o.TypeMeta = metav1.TypeMeta{}
		}
		return o, nil
	case data[0] == formatMetadataCompact:
		o, err := metaenc.DecodeString(data)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return o, nil
	default:
		return nil, fmt.Errorf("%w: unknown object format %d", ErrCorrupt, data[0])
	}
}

// decodeUnstructured decodes data, the CBOR of an unstructured object's map.
func (d *fastDecoder) decodeUnstructured(data string) (runtime.Object, error) {
	if m, ok := d.decodeMap(data); ok {
		return &unstructured.Unstructured{Object: m}, nil
	}
	var m map[string]any
	if err := direct.Unmarshal([]byte(data), &m); err != nil {
		return nil, fmt.Errorf("%w: decoding object: %v", ErrCorrupt, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%w: decoding object: null", ErrCorrupt)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Codec is the snapshot's encoding of objects as an aggregate.Codec, for a fleet that
// keeps its objects encoded (aggregate.Options.Codec): it encodes and decodes exactly as
// the snapshot does, so the encoding the fleet holds is what Writer.UpsertEncoded
// stores, and the informers' encodings of watched objects (jsondec.Decoder.ObjectCBOR)
// are in its format. It takes *unstructured.Unstructured and
// *metav1.PartialObjectMetadata objects; errors wrap ErrInvalid or ErrCorrupt.
type Codec struct {
	// Compress keeps the encodings that S2 makes at least an eighth shorter compressed
	// (formatCompressed): Encode returns them so, and Shorten makes the informers'
	// encodings so. Decode reads both forms either way.
	Compress bool
	// Dictionary, with Compress, compresses the encodings of each resource with a
	// dictionary of the resource (formatDict, dict.go) once the process has one: the
	// Codec that ForResource returns does, which a fleet's indexer of the resource
	// encodes with (aggregate.ResourceCodec). The first encodings of a resource, of
	// which its dictionary is made, are compressed without. Decode reads every form
	// either way. Default: false.
	Dictionary bool

	// dict is the dictionary of the Codec's resource, set by ForResource.
	dict *resourceDict
}

// Encode returns the encoding of obj.
func (c Codec) Encode(obj runtime.Object) ([]byte, error) {
	enc, err := encodeObject(obj)
	if err != nil || !c.Compress {
		return enc, err
	}
	return c.compress(enc), nil
}

// compress returns enc compressed as the Codec compresses, or enc itself.
func (c Codec) compress(enc []byte) []byte {
	if c.dict != nil {
		return c.dict.compress(enc)
	}
	return compress(enc)
}

// Shorten returns encoded, an encoding in the Codec's format made elsewhere (by the
// informers' decoders), as Encode would return it: compressed if Compress is set and
// that saves an eighth, else encoded itself. It does not modify encoded
// (aggregate.EncodingShortener).
func (c Codec) Shorten(encoded []byte) []byte {
	if !c.Compress || len(encoded) == 0 {
		return encoded
	}
	return c.compress(encoded)
}

// Expand returns the encoding that data holds uncompressed: data itself, or if data is
// compressed, what it holds, written into dst's memory where it has room. A reader of
// the CBOR of an unstructured object (CBORMaps) reads what it returns. An error wraps
// ErrCorrupt.
func (Codec) Expand(dst, data []byte) ([]byte, error) {
	if len(data) == 0 || !isCompressed(data[0]) {
		return data, nil
	}
	return expand(dst, data)
}

// Decode returns the object of data, sharing no memory with it. data must not change
// during the call. Its strings are interned in tables that outlive the call (one per
// decoder in a pool), so that the keys and the short values that every object repeats
// are shared rather than allocated again for each decode.
func (Codec) Decode(data []byte) (runtime.Object, error) {
	return decodePooled(data, nil)
}

// DecodeShared is Decode, but the object it returns may share maps and slices with
// the objects that DecodeShared returned before, and with those it returns after: a
// map or slice whose encoding is that of one decoded before (the containers, volumes
// and tolerations of the pods of one Deployment, a Deployment's selector) is that
// map or slice, from the second time its encoding is met on. The object's own map and
// its metadata's are always its own. None of it may be modified, as with what a
// fleet hands out (aggregate.SharingDecoder, which a compact fleet decodes with):
// a change would show in other objects.
//
// The values are kept in one table for the process (keptValues: 8,192 slots, copies
// of encodings up to 2 KiB long and 4 MiB in all), so data, as with Decode, may change
// after the call.
func (Codec) DecodeShared(data []byte) (runtime.Object, error) {
	return decodePooled(data, &kept)
}

// decodePooled decodes data with a decoder of the pool and the table of values t (nil:
// none), as Decode and DecodeShared do.
func decodePooled(data []byte, t *keptValues) (obj runtime.Object, err error) {
	if len(data) == 0 {
		return decodeObject(data)
	}
	d := decoders.Get().(*fastDecoder)
	defer decoders.Put(d)
	defer recoverDecode(&err)
	// The decoder copies what it keeps of data (intern.Table, keptValues), so data need
	// not be copied into a string first.
	return d.decodeKept(unsafe.String(unsafe.SliceData(data), len(data)), t)
}

// decodeKept is decode with the table of values t (nil: none).
func (d *fastDecoder) decodeKept(data string, t *keptValues) (runtime.Object, error) {
	d.kept = t
	defer func() { d.kept = nil }()
	return d.decode(data)
}

// CBORMaps reports that the encoding of an *unstructured.Unstructured, once expanded
// (Expand), is the CBOR of its map (RFC 8949, as described at the top of this file:
// string keys, definite lengths, no tags), so that a reader that understands CBOR can
// write the object's JSON from it without decoding it; the HTTP server's watch cache
// does. The encoding of any other object starts with a byte that is not a CBOR map head.
func (Codec) CBORMaps() bool { return true }

// decoders are the decoders of Codec.Decode, each with its tables of strings.
var decoders = sync.Pool{New: func() any { return new(fastDecoder) }}
