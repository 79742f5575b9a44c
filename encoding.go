package fleetwatch

import (
	"errors"
	"fmt"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/persist"
)

// Encoding is how a Manager's fleet holds full objects: it chooses the fleet's Codec
// (aggregate.Options.Codec) where Options.Fleet.Codec is unset.
type Encoding string

const (
	// EncodingObjects holds decoded objects (unstructured maps; a nil Fleet.Codec). A
	// read hands out the object held, without a decode, for more heap and a slower sync
	// than EncodingCompact (docs/benchmarks.md).
	EncodingObjects Encoding = "objects"
	// EncodingCompact holds each object in the snapshot's encoding (persist.Codec{}),
	// written by the informers straight from what the apiservers send, and decodes it
	// where it is read outside the fleet's hot set (aggregate.Options.HotObjects). Typed
	// readers decode it straight into their Go types (aggregate.TypedLister, with a
	// TypedMemo for controller-runtime's cost of a read).
	EncodingCompact Encoding = "compact"
	// EncodingCompressed is EncodingCompact with the encodings that S2 shortens by an
	// eighth compressed (persist.Codec{Compress: true}).
	EncodingCompressed Encoding = "compressed"
	// EncodingCompressedDict is EncodingCompressed with a compression dictionary per
	// resource, made of its first objects (persist.Codec{Compress: true, Dictionary:
	// true}).
	EncodingCompressedDict Encoding = "compressed-dict"

	// DefaultEncoding is the default of Options.Encoding, the daemon's too
	// (cache.encoding): the heap, the sync and the CPU per event it meets typed informers
	// with are in docs/benchmarks.md.
	DefaultEncoding = EncodingCompact
)

// defaultEncoding is the Encoding of Managers whose Options have neither an Encoding nor
// a Fleet.Codec: DefaultEncoding, except in this package's tests run with
// FLEETWATCH_TEST_CACHE_ENCODING set (export_test.go).
var defaultEncoding = DefaultEncoding

// Codec returns the aggregate.Options.Codec that holds objects as e says: nil for
// EncodingObjects, a persist.Codec for the others. An unknown Encoding is an error.
func (e Encoding) Codec() (aggregate.Codec, error) {
	switch e {
	case EncodingObjects:
		return nil, nil
	case EncodingCompact:
		return persist.Codec{}, nil
	case EncodingCompressed:
		return persist.Codec{Compress: true}, nil
	case EncodingCompressedDict:
		return persist.Codec{Compress: true, Dictionary: true}, nil
	}
	return nil, fmt.Errorf("fleetwatch: Options.Encoding %q is none of %q, %q, %q and %q", string(e), EncodingObjects, EncodingCompact, EncodingCompressed, EncodingCompressedDict)
}

// fleetCodec returns the Codec of a Manager's fleet: opts.Fleet.Codec if set, else that
// of opts.Encoding, else that of defaultEncoding.
func fleetCodec(opts *Options) (aggregate.Codec, error) {
	if opts.Fleet.Codec != nil {
		if opts.Encoding != "" {
			return nil, errors.New("fleetwatch: Options.Encoding and Options.Fleet.Codec are both set; set one")
		}
		return opts.Fleet.Codec, nil
	}
	if opts.Encoding == "" {
		return defaultEncoding.Codec()
	}
	return opts.Encoding.Codec()
}
