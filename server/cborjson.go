package server

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/x448/float16"
)

// The watch cache of a compact fleet keeps each object as the fleet's encoding of it:
// the snapshot's CBOR (persist.Codec), a map in the order of the JSON it was decoded
// from. appendServedCBOR writes the JSON that served gives for such an object (the
// cluster annotation, the cursor as resourceVersion, kind and apiVersion where missing)
// straight from the CBOR, without building the object's maps: keys sorted at every
// level, values as appendJSON writes them, so that the bytes are those of
// appendJSON(served(decoded object)) (FuzzServedCBOR holds it to that).
//
// It reads the subset of CBOR that persist's decoder reads without falling back to
// direct.Unmarshal, with the same checks (maps with string keys, no duplicate key,
// arrays, byte and text strings, text valid UTF-8, integers that fit an int64, finite
// floats, booleans and null, definite lengths, no tags, at most maxCBORDepth deep).
// On anything else it gives up, and the caller decodes the object and serves that, so
// that what it accepts and the errors it gives are those of the decoding path.

// maxCBORDepth is persist's maxFastDepth: deeper objects take the decoding path.
const maxCBORDepth = 256

// CBOR major types (RFC 8949, section 3.1).
const (
	cborUint   = 0
	cborNegint = 1
	cborBytes  = 2
	cborText   = 3
	cborArray  = 4
	cborMap    = 5
	cborSimple = 7
)

// formatUnstructuredV1 is the byte that version 1 of the snapshot's schema wrote before
// the map of an unstructured object (persist's formatUnstructured).
const formatUnstructuredV1 = 1

// cborJSON writes JSON from CBOR. It is not safe for concurrent use; its scratch space
// is reused from one object to the next.
type cborJSON struct {
	cborCursor
	// skipped receives the JSON of the items that skip goes over.
	skipped []byte
	// top and md hold the JSON that served adds to an object and to its metadata.
	top, md []byte
	// levels are the scratch space of the maps being written, by depth.
	levels []cborLevel
	// expanded is the scratch space of the CBOR of a compressed encoding (cborCodec).
	expanded []byte
}

// cborLevel is the scratch space of a map: its entries, and their values' JSON.
type cborLevel struct {
	entries []jsonEntry
	vals    []byte
}

// jsonEntry is a map entry: its key, and its value's JSON at vals[vs:ve].
type jsonEntry struct {
	key    []byte
	vs, ve int
}

// extraEntry is an entry that a map gets if it lacks the key.
type extraEntry struct {
	key  string
	json []byte
}

// mapHook may write the value of the entry key itself, into vals (then handled is
// true); ok false gives up.
type mapHook func(key []byte, vals []byte) (out []byte, handled, ok bool)

// servedTarget is what served adds to an object: see served.
type servedTarget struct {
	kind, apiVersion string
	cluster          string
	rv               string
}

// appendServedCBOR appends to b the JSON of the object encoded in data as served
// returns it for t. ok is false if data is not in the subset described above; b is then
// to be discarded.
func (w *cborJSON) appendServedCBOR(b, data []byte, t servedTarget) (_ []byte, ok bool) {
	if len(data) > 0 && data[0] == formatUnstructuredV1 {
		data = data[1:]
	}
	if len(data) == 0 || data[0]>>5 != cborMap {
		return b, false
	}
	w.data, w.off = data, 0
	defer func() { w.data = nil }()
	major, _, n, ok := w.head()
	if !ok || major != cborMap {
		return b, false
	}
	buf, _ := appendJSONString(w.top[:0], t.kind)
	kinds := len(buf)
	buf, _ = appendJSONString(buf, t.apiVersion)
	avs := len(buf)
	buf = appendFreshMetadata(buf, t)
	w.top = buf
	kindJSON, avJSON, freshMD := buf[:kinds], buf[kinds:avs], buf[avs:]
	top := func(key []byte, vals []byte) ([]byte, bool, bool) {
		switch string(key) {
		case "metadata":
			if !w.nextIs(cborMap) {
				if !w.skip(1) {
					return vals, false, false
				}
				return append(vals, freshMD...), true, true
			}
			out, ok := w.appendMetadata(vals, t)
			return out, true, ok
		case "kind", "apiVersion":
			if w.nextIs(cborBytes) || w.nextIs(cborText) {
				return vals, false, true
			}
			if !w.skip(1) {
				return vals, false, false
			}
			if string(key) == "kind" {
				return append(vals, kindJSON...), true, true
			}
			return append(vals, avJSON...), true, true
		}
		return vals, false, true
	}
	b, ok = w.appendMap(b, n, 0, top, []extraEntry{{"apiVersion", avJSON}, {"kind", kindJSON}, {"metadata", freshMD}})
	if !ok || w.off != len(w.data) {
		return b, false
	}
	return b, true
}

// appendFreshMetadata appends the JSON of the metadata that served gives an object whose
// own is missing or not a map.
func appendFreshMetadata(b []byte, t servedTarget) []byte {
	b = append(b, `{"annotations":`...)
	b = appendFreshAnnotations(b, t, "", false)
	if t.rv != "" {
		b = append(b, `,"resourceVersion":`...)
		b, _ = appendJSONString(b, t.rv)
	}
	return append(b, '}')
}

// appendFreshAnnotations appends the JSON of the annotations that served gives an object
// whose own are missing or not a map: the cluster's and, if withRV, ownRV, the object's
// own resourceVersion. (The keys are in order.)
func appendFreshAnnotations(b []byte, t servedTarget, ownRV string, withRV bool) []byte {
	b = append(b, `{"`+ClusterAnnotation+`":`...)
	b, _ = appendJSONString(b, t.cluster)
	if t.rv != "" && withRV {
		b = append(b, `,"`+ResourceVersionAnnotation+`":`...)
		b, _ = appendJSONString(b, ownRV)
	}
	return append(b, '}')
}

// appendMetadata appends the JSON of the metadata map at w.off as served changes it:
// annotated with the cluster, and with t.rv as resourceVersion (its own kept in
// ResourceVersionAnnotation, if it is a string).
func (w *cborJSON) appendMetadata(b []byte, t servedTarget) ([]byte, bool) {
	major, _, n, ok := w.head()
	if !ok || major != cborMap || n > uint64(len(w.data)-w.off)/2 {
		return b, false
	}
	// A first pass finds the object's own resourceVersion, which the annotations,
	// wherever they are, take.
	start := w.off
	var ownRV []byte
	hasOwnRV := false
	for range n {
		key, ok := w.key()
		if !ok {
			return b, false
		}
		if t.rv != "" && string(key) == "resourceVersion" && (w.nextIs(cborBytes) || w.nextIs(cborText)) {
			at := w.off
			major, _, l, ok := w.head()
			if !ok || l > uint64(len(w.data)-w.off) {
				return b, false
			}
			s := w.data[w.off : w.off+int(l)]
			if major == cborText && !utf8.Valid(s) {
				return b, false
			}
			ownRV, hasOwnRV = s, true
			w.off = at
		}
		if !w.skip(1) {
			return b, false
		}
	}
	w.off = start

	buf := appendFreshAnnotations(w.md[:0], t, string(ownRV), hasOwnRV)
	anns := len(buf)
	buf, _ = appendJSONString(buf, t.cluster)
	clusters := len(buf)
	buf = appendJSONBytes(buf, ownRV)
	owns := len(buf)
	buf, _ = appendJSONString(buf, t.rv)
	w.md = buf
	freshAnn, clusterJSON, ownRVJSON, rvJSON := buf[:anns], buf[anns:clusters], buf[clusters:owns], buf[owns:]
	injectRV := t.rv != "" && hasOwnRV
	annHook := func(key []byte, vals []byte) ([]byte, bool, bool) {
		switch {
		case string(key) == ClusterAnnotation:
			return append(vals, clusterJSON...), true, w.skip(3)
		case injectRV && string(key) == ResourceVersionAnnotation:
			return append(vals, ownRVJSON...), true, w.skip(3)
		}
		return vals, false, true
	}
	annExtra := []extraEntry{{ClusterAnnotation, clusterJSON}}
	if injectRV {
		annExtra = append(annExtra, extraEntry{ResourceVersionAnnotation, ownRVJSON})
	}
	mdHook := func(key []byte, vals []byte) ([]byte, bool, bool) {
		switch {
		case string(key) == "annotations":
			if !w.nextIs(cborMap) {
				return append(vals, freshAnn...), true, w.skip(2)
			}
			_, _, n, ok := w.head()
			if !ok {
				return vals, false, false
			}
			out, ok := w.appendMap(vals, n, 2, annHook, annExtra)
			return out, true, ok
		case t.rv != "" && string(key) == "resourceVersion":
			return append(vals, rvJSON...), true, w.skip(2)
		}
		return vals, false, true
	}
	mdExtra := []extraEntry{{"annotations", freshAnn}}
	if t.rv != "" {
		mdExtra = append(mdExtra, extraEntry{"resourceVersion", rvJSON})
	}
	return w.appendMap(b, n, 1, mdHook, mdExtra)
}

// cborCursor reads the data items of data from off on: the reading that cborJSON and
// summaryReader share.
type cborCursor struct {
	data []byte
	off  int
}

// head reads the initial byte of a data item and its argument, as persist's decoder
// does. ok is false for indefinite lengths, reserved values and truncated input.
func (w *cborCursor) head() (major byte, ai byte, arg uint64, ok bool) {
	if w.off >= len(w.data) {
		return 0, 0, 0, false
	}
	c := w.data[w.off]
	w.off++
	major, ai = c>>5, c&0x1f
	size := 0
	switch {
	case ai < 24:
		return major, ai, uint64(ai), true
	case ai == 24:
		size = 1
	case ai == 25:
		size = 2
	case ai == 26:
		size = 4
	case ai == 27:
		size = 8
	default:
		return 0, 0, 0, false
	}
	if len(w.data)-w.off < size {
		return 0, 0, 0, false
	}
	for _, c := range w.data[w.off : w.off+size] {
		arg = arg<<8 | uint64(c)
	}
	w.off += size
	if ai == 24 && major == cborSimple && arg < 32 {
		return 0, 0, 0, false
	}
	return major, ai, arg, true
}

// nextIs reports whether the next item is of major type major.
func (w *cborCursor) nextIs(major byte) bool {
	return w.off < len(w.data) && w.data[w.off]>>5 == major
}

// key reads a map key: a byte or text string, text valid UTF-8. Its bytes are data's.
func (w *cborCursor) key() ([]byte, bool) {
	major, _, n, ok := w.head()
	if !ok || (major != cborBytes && major != cborText) || n > uint64(len(w.data)-w.off) {
		return nil, false
	}
	k := w.data[w.off : w.off+int(n)]
	w.off += int(n)
	if major == cborText && !utf8.Valid(k) {
		return nil, false
	}
	return k, true
}

// skip goes over the item at w.off, checking what appendValue checks: the item is
// written by appendValue if ok.
func (w *cborJSON) skip(depth int) bool {
	var ok bool
	w.skipped, ok = w.appendValue(w.skipped[:0], depth)
	return ok
}

// appendValue appends the JSON of the item at w.off, at depth depth (the object's map
// is at 0).
func (w *cborJSON) appendValue(b []byte, depth int) ([]byte, bool) {
	major, ai, arg, ok := w.head()
	if !ok {
		return b, false
	}
	switch major {
	case cborUint:
		if arg > math.MaxInt64 {
			return b, false
		}
		return appendInt(b, int64(arg)), true
	case cborNegint:
		if arg > math.MaxInt64 {
			return b, false
		}
		return appendInt(b, -1-int64(arg)), true
	case cborBytes, cborText:
		if arg > uint64(len(w.data)-w.off) {
			return b, false
		}
		s := w.data[w.off : w.off+int(arg)]
		w.off += int(arg)
		if major == cborText && !utf8.Valid(s) {
			return b, false
		}
		return appendJSONBytes(b, s), true
	case cborArray:
		if depth >= maxCBORDepth || arg > uint64(len(w.data)-w.off) {
			return b, false
		}
		b = append(b, '[')
		for i := range arg {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = w.appendValue(b, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case cborMap:
		if depth >= maxCBORDepth {
			return b, false
		}
		return w.appendMap(b, arg, depth, nil, nil)
	case cborSimple:
		switch ai {
		case 20:
			return append(b, "false"...), true
		case 21:
			return append(b, "true"...), true
		case 22:
			return append(b, "null"...), true
		case 25:
			return appendFinite(b, float64(float16.Frombits(uint16(arg)).Float32()))
		case 26:
			return appendFinite(b, float64(math.Float32frombits(uint32(arg))))
		case 27:
			return appendFinite(b, math.Float64frombits(arg))
		}
		return b, false
	default: // tags
		return b, false
	}
}

// appendMap appends the JSON of a map of n entries whose head was read, at depth depth,
// keys sorted. hook, if not nil, may write an entry's value itself; each of extra is
// added if the map lacks its key.
func (w *cborJSON) appendMap(b []byte, n uint64, depth int, hook mapHook, extra []extraEntry) ([]byte, bool) {
	if n > uint64(len(w.data)-w.off)/2 {
		return b, false
	}
	for len(w.levels) <= depth {
		w.levels = append(w.levels, cborLevel{})
	}
	entries, vals := w.levels[depth].entries[:0], w.levels[depth].vals[:0]
	defer func() { w.levels[depth].entries, w.levels[depth].vals = entries[:0], vals[:0] }()
	for range n {
		key, ok := w.key()
		if !ok {
			return b, false
		}
		vs := len(vals)
		handled := false
		if hook != nil {
			if vals, handled, ok = hook(key, vals); !ok {
				return b, false
			}
		}
		if !handled {
			if vals, ok = w.appendValue(vals, depth+1); !ok {
				return b, false
			}
		}
		entries = append(entries, jsonEntry{key: key, vs: vs, ve: len(vals)})
	}
	slices.SortFunc(entries, func(a, b jsonEntry) int { return bytes.Compare(a.key, b.key) })
	for i := 1; i < len(entries); i++ {
		if bytes.Equal(entries[i-1].key, entries[i].key) {
			return b, false // a duplicate key, which the decoders refuse
		}
	}
	own := len(entries)
	for _, x := range extra {
		if _, found := slices.BinarySearchFunc(entries[:own], x.key, func(e jsonEntry, k string) int { return strings.Compare(string(e.key), k) }); found {
			continue
		}
		vs := len(vals)
		vals = append(vals, x.json...)
		entries = append(entries, jsonEntry{key: []byte(x.key), vs: vs, ve: len(vals)})
	}
	if len(entries) > own {
		slices.SortFunc(entries, func(a, b jsonEntry) int { return bytes.Compare(a.key, b.key) })
	}
	b = append(b, '{')
	for i, e := range entries {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONBytes(b, e.key)
		b = append(b, ':')
		b = append(b, vals[e.vs:e.ve]...)
	}
	return append(b, '}'), true
}

func appendInt(b []byte, i int64) []byte {
	out, _ := appendJSON(b, i)
	return out
}

// appendFinite appends f as appendJSON does; ok is false for NaN and infinities, which
// the decoders refuse.
func appendFinite(b []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	out, err := appendJSONFloat(b, f)
	return out, err == nil
}

// appendJSONBytes appends s as a JSON string, as appendJSONString does.
func appendJSONBytes(b, s []byte) []byte {
	for _, c := range s {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, _ := json.Marshal(string(s)) // a string always encodes
			return append(b, raw...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
