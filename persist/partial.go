package persist

import (
	"maps"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/x448/float16"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetwatch/fleetwatch/internal/labelenc"
)

// A partial decoding (LoadOptions.Partial) reads the CBOR of an unstructured object's
// map as decodeMap does, and checks it in the same way, but builds only what files the
// object, the members that jsondec.Decoder.ObjectPartialCBOR builds: apiVersion, kind
// and metadata at the root, and name, namespace, uid, resourceVersion and labels in the
// metadata, into a *PartialObject rather than maps: the maps of an
// unstructured object's root, metadata and labels were most of what a partial load
// allocated (70% of the first cluster's bytes in the bench's snapshot), each of them
// fresh memory while the load holds the collector off. The rest is skipped without a
// map, slice or string being made for it. Where decodeMap gives up, and where a kept
// member is not of the type that files it (a name that is not a string, a label value
// that is null), the object is decoded whole (decode), so that a partial load accepts
// and rejects exactly what a whole one does and files each object as the whole one
// would (FuzzDecodePartial checks it).

// decodePartial decodes data, a stored object, for a partial load: if encoded is not
// nil, obj is a *PartialObject of what files the object and encoded is
// a copy of data, the whole object in Codec's encoding; otherwise obj is what decode
// returns, whole. err is what decode returns. It may panic on a bug; the caller
// recovers.
func (d *fastDecoder) decodePartial(data string) (obj runtime.Object, encoded []byte, err error) {
	// A compressed encoding is read expanded, and kept compressed.
	if plain, err := d.expanded(data); err == nil && len(plain) > 0 && isMapHead(plain[0]) {
		r := cborReader{data: plain, strings: &d.strings, labelSets: &d.labelSets}
		if p, ok := r.filingObject(); ok && r.off == len(plain) {
			return p, []byte(data), nil
		}
	}
	obj, err = d.decode(data)
	return obj, nil, err
}

// filingObject reads the root map as value does, into what files the object; ok is
// false where value would fail, and where a kept member is not of the type that files
// it (then the caller decodes the object whole).
func (r *cborReader) filingObject() (p *PartialObject, ok bool) {
	major, _, arg, ok := r.head()
	if !ok || major != cborMap || arg > uint64(len(r.data)-r.off)/2 {
		return nil, false
	}
	p = &PartialObject{}
	var keys keySet
	for range arg {
		k, ok := r.rawKey()
		if !ok || !keys.add(k) {
			return nil, false
		}
		switch k {
		case "apiVersion":
			p.APIVersion, ok = r.text()
		case "kind":
			p.Kind, ok = r.text()
		case "metadata":
			ok = r.filingMetadata(1, p)
		default:
			ok = r.skip(1)
		}
		if !ok {
			return nil, false
		}
	}
	return p, true
}

// filingMetadata reads the metadata's map at depth as value does, into p's name,
// namespace, uid, resourceVersion and labels; ok is false as for filingObject.
func (r *cborReader) filingMetadata(depth int, p *PartialObject) bool {
	m := &p.ObjectMeta
	major, _, arg, ok := r.head()
	if !ok || major != cborMap || depth >= maxFastDepth || arg > uint64(len(r.data)-r.off)/2 {
		return false
	}
	var keys keySet
	for range arg {
		k, ok := r.rawKey()
		if !ok || !keys.add(k) {
			return false
		}
		switch k {
		case "name":
			m.Name, ok = r.text()
		case "namespace":
			m.Namespace, ok = r.text()
		case "uid", "resourceVersion":
			// Values of one object each: copied, not interned (uniqueMetadata).
			r.unique = true
			var s string
			s, ok = r.text()
			r.unique = false
			if k == "uid" {
				m.UID = types.UID(s)
			} else {
				m.ResourceVersion = s
			}
		case "labels":
			p.labels, ok = r.filingLabels(depth + 1)
		default:
			ok = r.skip(depth + 1)
		}
		if !ok {
			return false
		}
	}
	return true
}

// filingLabels reads the labels' map at depth as value does, into their encoding as a
// compact fleet keeps them (internal/labelenc), interned in the decoder's labelSets;
// ok is false as for filingObject (a value that is not a string, a repeated key).
func (r *cborReader) filingLabels(depth int) (string, bool) {
	major, _, arg, ok := r.head()
	if !ok || major != cborMap || depth >= maxFastDepth || arg > uint64(len(r.data)-r.off)/2 {
		return "", false
	}
	var buf [16]labelenc.Pair
	pairs := buf[:0]
	for range arg {
		// Read as key and text read them (the same strings accepted), and not kept:
		// they point into r.data, and the encoding copies them.
		k, ok := r.rawKey()
		if !ok {
			return "", false
		}
		v, ok := r.rawKey()
		if !ok {
			return "", false
		}
		pairs = append(pairs, labelenc.Pair{Key: k, Value: v})
	}
	return r.labelSets.encode(pairs)
}

// labelSets interns the encoded labels of a decoder's objects: the objects of a
// workload carry the same labels, which take one string for all of them. It is not safe
// for concurrent use.
type labelSets struct {
	m       map[string]string
	scratch []byte
}

// maxLabelSets bounds a labelSets: once it holds that many, it starts over, as an
// intern.Table does, so that label sets seen once cannot fill it for good.
const maxLabelSets = 1 << 12

// encode returns the encoding of pairs, which it sorts, interned; false if two pairs
// have the same key.
func (t *labelSets) encode(pairs []labelenc.Pair) (string, bool) {
	if len(pairs) == 0 {
		return "", true
	}
	var ok bool
	if t.scratch, ok = labelenc.Append(t.scratch[:0], pairs); !ok {
		return "", false
	}
	if s, ok := t.m[string(t.scratch)]; ok {
		return s, true
	}
	if t.m == nil || len(t.m) >= maxLabelSets {
		t.m = make(map[string]string)
	}
	s := string(t.scratch)
	t.m[s] = s
	return s, true
}

// PartialObject is what files an object of a partial load (LoadOptions.Partial): a
// PartialObjectMetadata of apiVersion, kind, and of the metadata name, namespace, uid and
// resourceVersion, whose labels are kept as one string, in the encoding that a compact
// fleet keeps them in (aggregate.ClusterStore.ApplyPartial takes it as it is, without
// reading a map): GetLabels decodes them into a new map. Its Labels field is not set
// but by SetLabels, which replaces the encoded labels.
type PartialObject struct {
	metav1.PartialObjectMetadata
	labels string
}

// EncodedLabels returns the object's labels as a compact fleet keeps them, and true;
// false once SetLabels has replaced them.
func (p *PartialObject) EncodedLabels() (string, bool) { return p.labels, p.Labels == nil }

// GetLabels returns the object's labels, in a new map (nil without labels).
func (p *PartialObject) GetLabels() map[string]string {
	if p.labels == "" {
		return p.Labels
	}
	return maps.Collect(labelenc.All(p.labels))
}

// SetLabels replaces the object's labels.
func (p *PartialObject) SetLabels(labels map[string]string) {
	p.labels, p.Labels = "", labels
}

// DeepCopyObject returns a copy of the object (its encoded labels are a string, shared).
func (p *PartialObject) DeepCopyObject() runtime.Object {
	return &PartialObject{PartialObjectMetadata: *p.PartialObjectMetadata.DeepCopy(), labels: p.labels}
}

// text reads a string as value does (interned, or copied while r.unique is set); ok is
// false for any other item, which value may accept.
func (r *cborReader) text() (string, bool) {
	s, ok := r.rawKey()
	if !ok {
		return "", false
	}
	if !r.unique {
		if v, ok := r.strings.Value(s); ok {
			return v.(string), true
		}
	}
	return strings.Clone(s), true
}

// rawKey reads a map key as key does, or any string, without interning it: the string
// is in r.data.
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
