package pbjson

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/internal/cborenc"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// errIndirect is returned by the writing of CBOR for an object whose JSON jsondec must
// judge: the JSON is written and decoded instead.
var errIndirect = errors.New("pbjson: CBOR only by way of JSON")

// cborState is the state of a Transcoder that only ObjectPartialCBOR uses.
type cborState struct {
	// long lists the heads of maps and arrays in out that take more than the one byte
	// reserved for them.
	long []cborenc.LongHead
	// tooDeep is set when a map or array is nested more deeply than jsondec decodes.
	tooDeep bool
	// dec writes the CBOR of raw JSON, and interns the strings of the partial map.
	dec *jsondec.Decoder
	// meta is the metadata of the partial map, once its member is written.
	meta map[string]any
}

// ObjectPartialCBOR returns what d.ObjectPartialCBOR returns for the JSON that Object
// writes for the same object (m, the members of the object that file it; cbor, the
// CBOR of the whole object; see jsondec.Decoder.ObjectCBOR), without writing the JSON:
// it writes the CBOR from the protobuf, and builds the map from the protobuf's filing
// fields, their strings interned by d.Strings as d interns them. A transcoding error is
// Object's; a decoding error is d's. d.DropManagedFields must be t's. cbor shares no
// memory with raw or t.
//
// Where the object's JSON is for jsondec to judge (raw JSON in a raw extension that
// jsondec would not write CBOR for, map keys that are not UTF-8, a member named like
// kind or apiVersion, nesting deeper than jsondec.MaxDepth), it writes the JSON and
// decodes it with d; so it does if writing the CBOR panics (a bug, which
// FuzzTranscodeCBOR looks for), for the object to cost the detour rather than fail.
func (t *Transcoder) ObjectPartialCBOR(gvk schema.GroupVersionKind, raw []byte, d *jsondec.Decoder) (m map[string]any, cbor []byte, err error) {
	m, cbor, err = t.directCBOR(gvk, raw, d)
	if !errors.Is(err, errIndirect) && !errors.Is(err, errPanicked) {
		return m, cbor, err
	}
	js, err := t.Object(gvk, raw)
	if err != nil {
		return nil, nil, err
	}
	return d.ObjectPartialCBOR(js)
}

// directCBOR is ObjectPartialCBOR without the JSON: it returns errIndirect where the
// JSON would be needed.
func (t *Transcoder) directCBOR(gvk schema.GroupVersionKind, raw []byte, d *jsondec.Decoder) (m map[string]any, cbor []byte, err error) {
	sch := schemaOf(gvk)
	if sch == nil {
		return nil, nil, fmt.Errorf("%w: kind %v", ErrUnsupported, gvk)
	}
	t.cbor, t.dec = true, d
	defer func() {
		t.cbor, t.dec, t.meta, t.tooDeep = false, nil, nil, false
		t.long = t.long[:0]
		if cap(t.long) > 1<<12 {
			t.long = nil
		}
	}()
	defer t.reset(&err)
	if testHookCBOR != nil {
		testHookCBOR()
	}
	if err := t.object(gvk, raw, sch, ctxRoot); err != nil {
		return nil, nil, err
	}
	if t.tooDeep {
		return nil, nil, errIndirect
	}
	m = make(map[string]any, 3)
	m[d.Strings.Key("kind")] = t.stringValue(unsafe.Slice(unsafe.StringData(gvk.Kind), len(gvk.Kind)))
	apiVersion := gvk.GroupVersion().String()
	m[d.Strings.Key("apiVersion")] = t.stringValue(unsafe.Slice(unsafe.StringData(apiVersion), len(apiVersion)))
	if t.meta != nil {
		m[d.Strings.Key("metadata")] = t.meta
	}
	return m, t.encoded(), nil
}

// testHookCBOR, if set, is called as directCBOR starts writing, for a test to make it
// panic there.
var testHookCBOR func()

// filingField is field for a member of the object (ctxRoot) or of its metadata
// (ctxMetadata), which adds the member to the partial map if jsondec's has it: the
// metadata, and in it the name, namespace, uid, resourceVersion and labels.
func (t *Transcoder) filingField(b []byte, f *field, of []occurrence, ctx context) (bool, error) {
	if ctx == ctxRoot {
		if f.name == "metadata" {
			if f.kind != kindMessage || f.repeated || f.isMap || f.pointer || len(of) > 1 {
				return false, errIndirect
			}
			var sub []byte
			if len(of) == 1 {
				sub = b[of[0].start:of[0].end]
			}
			t.meta = map[string]any{}
			return true, t.message(sub, f.msg, ctxMetadata)
		}
		ok, err := t.field(b, f, of)
		if ok && (strings.EqualFold(f.name, "kind") || strings.EqualFold(f.name, "apiVersion")) {
			// jsondec.ErrAmbiguousTypeMeta.
			return false, errIndirect
		}
		return ok, err
	}
	ok, err := t.field(b, f, of)
	if !ok || err != nil {
		return ok, err
	}
	switch f.name {
	case "name", "namespace", "uid", "resourceVersion":
		if f.kind != kindString || f.repeated || f.isMap || f.pointer {
			return false, errIndirect
		}
		var s []byte
		if len(of) > 0 {
			o := of[len(of)-1]
			s = b[o.start:o.end]
		}
		if f.name == "uid" || f.name == "resourceVersion" {
			// Unique to the object: interned, they would only fill the table, which
			// keeps them until it starts over (intern.Table), long after the partial
			// object, which a compact fleet drops once filed, is gone.
			t.meta[t.dec.Strings.Key(f.name)] = t.uniqueValue(s)
		} else {
			t.meta[t.dec.Strings.Key(f.name)] = t.stringValue(s)
		}
	case "labels":
		if f.kind != kindString || !f.isMap {
			return false, errIndirect
		}
		labels, err := t.stringMap(b, of)
		if err != nil {
			return false, err
		}
		t.meta[t.dec.Strings.Key(f.name)] = labels
	}
	return true, nil
}

// stringMap returns the map of strings of the entries of, as jsondec builds it from
// their JSON: of a key given twice, the last value.
func (t *Transcoder) stringMap(b []byte, of []occurrence) (map[string]any, error) {
	m := make(map[string]any, len(of))
	for _, o := range of {
		var key, value []byte
		r := reader{b: b[o.start:o.end]}
		for !r.done() {
			switch num, _ := r.tag(); num {
			case 1:
				key = r.bytes()
			default:
				value = r.bytes()
			}
		}
		if r.err != nil {
			return nil, r.err
		}
		t.scratch = appendDecoded(t.scratch[:0], key)
		k := t.dec.Strings.Key(unsafe.String(unsafe.SliceData(t.scratch), len(t.scratch)))
		m[k] = t.stringValue(value)
	}
	return m, nil
}

// stringValue returns the value that jsondec builds for the JSON string of s.
func (t *Transcoder) stringValue(s []byte) any {
	t.scratch = appendDecoded(t.scratch[:0], s)
	v := unsafe.String(unsafe.SliceData(t.scratch), len(t.scratch))
	if iv, ok := t.dec.Strings.Value(v); ok {
		return iv
	}
	return strings.Clone(v)
}

// uniqueValue is stringValue for a value that no other object has (a uid, a
// resourceVersion): a copy of its own, not interned, as jsondec's partial decoding
// copies them.
func (t *Transcoder) uniqueValue(s []byte) any {
	t.scratch = appendDecoded(t.scratch[:0], s)
	return string(t.scratch)
}

// rawCBOR writes raw JSON, as jsondec would decode it from the JSON of the object.
func (t *Transcoder) rawCBOR(raw []byte) error {
	out, err := t.dec.AppendValueCBOR(t.out, raw, t.depth)
	if err != nil {
		// Not JSON (ErrUnsupported), a repeated key, a number out of range: the JSON
		// says which.
		return errIndirect
	}
	t.out = out
	return nil
}

// encoded returns what t.dec returns for t.out with its long heads (CBORPrefix, and
// Rewrite, included), in a newly allocated slice of its exact length.
func (t *Transcoder) encoded() []byte {
	return t.dec.EncodedOf(t.out, t.long)
}

// The CBOR major types and simple values that the Transcoder writes.
const (
	cborBytes = cborenc.Bytes
	cborArray = cborenc.Array
	cborMap   = cborenc.Map

	cborFalse = cborenc.False
	cborTrue  = cborenc.True
	cborNull  = cborenc.Null
)

// appendCBORString appends, as a CBOR byte string, what the JSON string of s that
// encoding/json writes decodes to: s, with each byte that is not UTF-8 as U+FFFD.
func appendCBORString(dst, s []byte) []byte {
	if utf8.Valid(s) {
		dst = cborenc.AppendHead(dst, cborBytes, uint64(len(s)))
		return append(dst, s...)
	}
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			n += utf8.RuneLen(utf8.RuneError)
		} else {
			n += size
		}
		i += size
	}
	dst = cborenc.AppendHead(dst, cborBytes, uint64(n))
	return appendDecoded(dst, s)
}

// appendDecoded appends s with each byte that is not UTF-8 as U+FFFD, as the JSON string
// that encoding/json writes for s decodes.
func appendDecoded(dst, s []byte) []byte {
	if utf8.Valid(s) {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// appendCBORNumber appends the JSON number lit as jsondec decodes it: an integer if it
// has neither fraction nor exponent and fits an int64, else a float64.
func appendCBORNumber(dst, lit []byte) []byte {
	s := unsafe.String(unsafe.SliceData(lit), len(lit))
	if !strings.ContainsAny(s, ".eE") {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return cborenc.AppendInt(dst, n)
		}
	}
	// lit is a finite float, or an integer beyond an int64's range.
	f, _ := strconv.ParseFloat(s, 64)
	return cborenc.AppendFloat64(dst, f)
}
