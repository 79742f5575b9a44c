package persist

import (
	"math"
	"unicode/utf8"

	"github.com/x448/float16"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// A partial decoding (LoadOptions.Partial) reads the CBOR of an unstructured object's
// map as decodeMap does, and checks it in the same way, but builds only what files the
// object, the members that jsondec.Decoder.ObjectPartialCBOR builds: apiVersion, kind
// and metadata at the root, and name, namespace, uid, resourceVersion and labels in the
// metadata. The rest is skipped without a map, slice or string being made for it. Where
// decodeMap gives up, so does the partial decoding, and the object is decoded whole
// (decode), so that a partial load accepts and rejects exactly what a whole one does
// (FuzzDecodePartial checks it).

// decodePartial decodes data, a stored object, for a partial load: if encoded is not
// nil, obj holds only what files the object and encoded is a copy of data, the whole
// object in Codec's encoding; otherwise obj is what decode returns, whole. err is what
// decode returns. It may panic on a bug; the caller recovers.
func (d *fastDecoder) decodePartial(data string) (obj runtime.Object, encoded []byte, err error) {
	// A compressed encoding is read expanded, and kept compressed.
	if plain, err := d.expanded(data); err == nil && len(plain) > 0 && isMapHead(plain[0]) {
		r := cborReader{data: plain, strings: &d.strings}
		if m, ok := r.filingMap(0, false); ok && r.off == len(plain) {
			return &unstructured.Unstructured{Object: m}, []byte(data), nil
		}
	}
	obj, err = d.decode(data)
	return obj, nil, err
}

// filingKept reports whether a partial decoding builds the member key of a map: at
// the root (metadata false) or in the metadata.
func filingKept(metadata bool, key string) bool {
	if !metadata {
		return key == "apiVersion" || key == "kind" || key == "metadata"
	}
	switch key {
	case "name", "namespace", "uid", "resourceVersion", "labels":
		return true
	}
	return false
}

// filingMap reads a map at depth as value does, and builds only the members that
// filingKept keeps: the root map, or with metadata set the metadata's map.
func (r *cborReader) filingMap(depth int, metadata bool) (map[string]any, bool) {
	major, _, arg, ok := r.head()
	if !ok || major != cborMap || depth >= maxFastDepth || arg > uint64(len(r.data)-r.off)/2 {
		return nil, false
	}
	m := make(map[string]any)
	var keys keySet
	for range arg {
		k, ok := r.rawKey()
		if !ok || !keys.add(k) {
			return nil, false
		}
		var v any
		switch {
		case !metadata && k == "metadata" && r.off < len(r.data) && r.data[r.off]>>5 == cborMap:
			v, ok = r.filingMap(depth+1, true)
		case metadata && uniqueMetadata(k):
			r.unique = true
			v, ok = r.value(depth + 1)
			r.unique = false
		case filingKept(metadata, k):
			v, ok = r.value(depth + 1)
		default:
			ok = r.skip(depth + 1)
			if !ok {
				return nil, false
			}
			continue
		}
		if !ok {
			return nil, false
		}
		m[r.strings.Key(k)] = v
	}
	return m, true
}

// rawKey reads a map key as key does, without interning it: the string is in r.data.
func (r *cborReader) rawKey() (string, bool) {
	major, _, arg, ok := r.head()
	if !ok || (major != cborBytes && major != cborText) {
		return "", false
	}
	s, ok := r.str(arg)
	if !ok || (major == cborText && !utf8.ValidString(s)) {
		return "", false
	}
	return s, true
}

// skip reads a data item at depth, accepting exactly what value accepts, and builds
// nothing of it.
func (r *cborReader) skip(depth int) bool {
	major, ai, arg, ok := r.head()
	if !ok {
		return false
	}
	switch major {
	case cborUint, cborNegint:
		return arg <= math.MaxInt64
	case cborBytes, cborText:
		s, ok := r.str(arg)
		return ok && (major != cborText || utf8.ValidString(s))
	case cborArray:
		if depth >= maxFastDepth || arg > uint64(len(r.data)-r.off) {
			return false
		}
		for range arg {
			if !r.skip(depth + 1) {
				return false
			}
		}
		return true
	case cborMap:
		if depth >= maxFastDepth || arg > uint64(len(r.data)-r.off)/2 {
			return false
		}
		var keys keySet
		for range arg {
			k, ok := r.rawKey()
			if !ok || !keys.add(k) || !r.skip(depth+1) {
				return false
			}
		}
		return true
	case cborSimple:
		var f float64
		switch ai {
		case 20, 21, 22:
			return true
		case 25:
			f = float64(float16.Frombits(uint16(arg)).Float32())
		case 26:
			f = float64(math.Float32frombits(uint32(arg)))
		case 27:
			f = math.Float64frombits(arg)
		default:
			return false
		}
		return !math.IsNaN(f) && !math.IsInf(f, 0)
	default: // tags
		return false
	}
}

// keySet finds a repeated key among the keys of a map, which value rejects: the few
// keys of most maps are compared in place, the keys of a long map go to a set.
type keySet struct {
	few [16]string
	n   int
	set map[string]struct{}
}

// add adds k, and reports false if k was there already.
func (s *keySet) add(k string) bool {
	if s.set == nil {
		for _, o := range s.few[:s.n] {
			if o == k {
				return false
			}
		}
		if s.n < len(s.few) {
			s.few[s.n] = k
			s.n++
			return true
		}
		s.set = make(map[string]struct{}, 2*len(s.few))
		for _, o := range s.few {
			s.set[o] = struct{}{}
		}
	}
	if _, ok := s.set[k]; ok {
		return false
	}
	s.set[k] = struct{}{}
	return true
}
