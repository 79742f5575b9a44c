package pbjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/internal/cborenc"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// ErrUnsupported is returned for protobuf that this package cannot write as the JSON
// that the kube-apiserver would have sent: a kind it has no schema for, a field it does
// not know (a newer server), or a value that encoding/json would not write as such. The
// caller asks for JSON instead.
var ErrUnsupported = errors.New("pbjson: cannot transcode")

// ErrInvalid is returned for input that is not well-formed protobuf of its kind.
var ErrInvalid = errors.New("pbjson: invalid protobuf")

// errPanicked marks an ErrInvalid that a panic of the transcoder became.
var errPanicked = errors.New("transcoder panicked")

// protobufPrefix starts every object that a kube-apiserver encodes in protobuf, before
// the runtime.Unknown envelope that holds it.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// Envelope returns the kind and the raw protobuf of the object in data, the protobuf
// encoding of an object as a kube-apiserver sends it: the magic prefix, then a
// runtime.Unknown of the object's apiVersion and kind and the object's message.
// contentEncoding and contentType must be empty. raw is a slice of data.
func Envelope(data []byte) (gvk schema.GroupVersionKind, raw []byte, err error) {
	if len(data) < len(protobufPrefix) || string(data[:len(protobufPrefix)]) != string(protobufPrefix) {
		return gvk, nil, fmt.Errorf("%w: no protobuf prefix", ErrInvalid)
	}
	var apiVersion, kind []byte
	r := reader{b: data[len(protobufPrefix):]}
	for !r.done() {
		num, wt := r.tag()
		switch {
		case num == 1 && wt == wireBytes: // typeMeta
			tm := reader{b: r.bytes()}
			for !tm.done() {
				n, w := tm.tag()
				switch {
				case n == 1 && w == wireBytes:
					apiVersion = tm.bytes()
				case n == 2 && w == wireBytes:
					kind = tm.bytes()
				default:
					tm.skip(w)
				}
			}
			if tm.err != nil {
				r.err = tm.err
			}
		case num == 2 && wt == wireBytes:
			raw = r.bytes()
		case (num == 3 || num == 4) && wt == wireBytes:
			if len(r.bytes()) > 0 {
				return gvk, nil, fmt.Errorf("%w: content encoding or type in the envelope", ErrUnsupported)
			}
		default:
			r.skip(wt)
		}
	}
	if r.err != nil {
		return gvk, nil, r.err
	}
	gv, err := schema.ParseGroupVersion(string(apiVersion))
	if err != nil || len(kind) == 0 {
		return gvk, nil, fmt.Errorf("%w: envelope without a kind", ErrInvalid)
	}
	return gv.WithKind(string(kind)), raw, nil
}

// Options change what a Transcoder writes.
type Options struct {
	// DropManagedFields leaves metadata.managedFields out, for a reader that would drop
	// it: the object's own, or in a list its items' (as jsondec.Decoder drops them), not
	// those of an object's template.
	DropManagedFields bool
}

// Transcoder writes kube-apiserver protobuf as the JSON the server would have sent for
// the same object (Object), or as the CBOR that jsondec writes for that JSON
// (ObjectPartialCBOR). It keeps buffers between calls; it is not safe for concurrent
// use.
type Transcoder struct {
	Options
	out []byte
	// occ is a stack of the occurrences of the fields of the messages being written.
	occ []occurrence
	// raw holds a raw extension while it is compacted.
	raw bytes.Buffer
	// entries is a stack of the entries of the maps being written.
	entries []mapEntry
	// scratch holds a value while it is formatted.
	scratch []byte
	// depth is how deeply the object or array being written is nested, the object
	// itself at 1.
	depth int
	// metaDepth is the depth of the fields of the metadata whose managedFields
	// DropManagedFields leaves out: the object's (2), or its items' in a list (4).
	metaDepth int

	// cbor is set while ObjectPartialCBOR writes CBOR to out (cbor.go); the other
	// fields are its.
	cbor bool
	cborState
}

// mapEntry is an entry of a map field, whose message is b[start:end] of the message b
// that has the map: its key, b[keyStart:keyEnd], and its value, a part of the entry. It
// holds offsets rather than slices so that the stack of entries has no pointers.
type mapEntry struct {
	start, end       int32
	keyStart, keyEnd int32
	value            occurrence
}

// key returns the key of e, an entry of the message b.
func (e *mapEntry) key(b []byte) []byte { return b[e.keyStart:e.keyEnd] }

// occurrence is one field of a message as read: its value is b[start:end] of the
// message, or v for a varint or a fixed-size value.
type occurrence struct {
	order      int32
	start, end int32
	v          uint64
	// packed: b[start:end] holds values of a repeated scalar field.
	packed bool
}

// context is where in the object a message is, for the members that ObjectPartialCBOR
// builds its map of.
type context uint8

const (
	ctxNone     context = iota
	ctxRoot             // the object
	ctxMetadata         // the object's metadata
)

// Object returns the JSON of the object whose envelope is data (see Envelope), of kind
// gvk and message raw, as the kube-apiserver would have written it, kind and apiVersion
// first, then the fields in their order in the Go type. The result is valid until the next call.
func (t *Transcoder) Object(gvk schema.GroupVersionKind, raw []byte) (out []byte, err error) {
	m := schemaOf(gvk)
	if m == nil {
		return nil, fmt.Errorf("%w: kind %v", ErrUnsupported, gvk)
	}
	defer t.reset(&err)
	if err := t.object(gvk, raw, m, ctxNone); err != nil {
		return nil, err
	}
	return t.out, nil
}

// reset recovers from a panic of the transcoder into *err, and readies the buffers for
// the next call.
func (t *Transcoder) reset(err *error) {
	if r := recover(); r != nil {
		// A bug, which FuzzTranscode looks for; the input is refused rather than taking
		// the process down.
		*err = fmt.Errorf("%w: %w: %v", ErrInvalid, errPanicked, r)
	}
	t.occ = t.occ[:0]
	t.entries = t.entries[:0]
	t.depth = 0
	if cap(t.out) > 4<<20 {
		t.out = nil
	}
	if cap(t.scratch) > 64<<10 {
		t.scratch = nil
	}
}

var (
	kindKey       = &field{name: "kind", key: `"kind":`, cborKey: "\x44kind"}
	apiVersionKey = &field{name: "apiVersion", key: `"apiVersion":`, cborKey: "\x4aapiVersion"}
)

// object writes the object of kind gvk, message raw of schema m, to t.out.
func (t *Transcoder) object(gvk schema.GroupVersionKind, raw []byte, m *message, ctx context) error {
	t.out = t.out[:0]
	t.metaDepth = 2
	if strings.HasSuffix(gvk.Kind, "List") && slices.ContainsFunc(m.fields, func(f *field) bool { return f.name == "items" && f.repeated }) {
		t.metaDepth = 4 // the list, its items, an item, its metadata
	}
	head := t.open('{', cborMap)
	t.key(kindKey)
	t.string(gvk.Kind)
	t.sep(1)
	t.key(apiVersionKey)
	t.string(gvk.GroupVersion().String())
	n, err := t.fields(raw, m, 2, ctx)
	if err != nil {
		return err
	}
	t.close('}', head, n)
	return nil
}

// message writes the message b as an object.
func (t *Transcoder) message(b []byte, m *message, ctx context) error {
	head := t.open('{', cborMap)
	n, err := t.fields(b, m, 0, ctx)
	if err != nil {
		return err
	}
	t.close('}', head, n)
	return nil
}

// fields writes the members of the message b, into an object of which n members are
// written already, and returns the number written in all.
func (t *Transcoder) fields(b []byte, m *message, n int, ctx context) (int, error) {
	if len(b) > math.MaxInt32 {
		return 0, fmt.Errorf("%w: message of %d bytes", ErrUnsupported, len(b))
	}
	base := len(t.occ)
	n, err := t.fieldsAt(b, m, n, ctx, base)
	t.occ = t.occ[:base]
	return n, err
}

// fieldsAt is fields with the stack of occurrences at base. It reads the occurrences of
// the fields present in b, sorts them into the order of the schema's fields if they did
// not come in it, and writes them merged with the fields written when absent
// (message.written): a pod's spec has some 40 fields in its schema, and a handful in
// protobuf.
func (t *Transcoder) fieldsAt(b []byte, m *message, n int, ctx context, base int) (int, error) {
	r := reader{b: b}
	sorted := true
	last := int32(-1)
	for !r.done() {
		num, wt := r.tag()
		if r.err != nil {
			return 0, r.err
		}
		f := m.field(num)
		if f == nil {
			return 0, fmt.Errorf("%w: unknown field %d", ErrUnsupported, num)
		}
		o := occurrence{order: int32(f.order)}
		want := f.kind.wireType()
		if f.isMap {
			want = wireBytes
		}
		switch {
		case wt == want:
		case wt == wireBytes && f.repeated && want != wireBytes:
			// Packed.
		default:
			return 0, fmt.Errorf("%w: field %d of wire type %d", ErrInvalid, num, wt)
		}
		if wt == wireBytes {
			v := r.bytes()
			o.start, o.end = int32(r.pos-len(v)), int32(r.pos)
			o.packed = want != wireBytes
		} else {
			o.v = r.scalar(wt)
		}
		if r.err != nil {
			return 0, r.err
		}
		if o.order < last {
			sorted = false
		}
		last = o.order
		t.occ = append(t.occ, o)
	}
	occ := t.occ[base:]
	if !sorted {
		sortOccurrences(occ)
	}
	written := m.written
	for len(occ) > 0 || len(written) > 0 {
		// The next field in the schema's order: present, or written when absent.
		var (
			f  *field
			of []occurrence
		)
		if len(occ) > 0 && (len(written) == 0 || occ[0].order <= int32(written[0].order)) {
			f = m.fields[occ[0].order]
			k := 1
			for k < len(occ) && occ[k].order == occ[0].order {
				k++
			}
			of, occ = occ[:k], occ[k:]
			if len(written) > 0 && written[0] == f {
				written = written[1:]
			}
		} else {
			f, written = written[0], written[1:]
		}
		if f.inline {
			var sub []byte
			switch len(of) {
			case 0:
			case 1:
				sub = b[of[0].start:of[0].end]
			default:
				return 0, fmt.Errorf("%w: an embedded message twice", ErrUnsupported)
			}
			var err error
			if n, err = t.fields(sub, f.msg, n, ctx); err != nil {
				return 0, err
			}
			continue
		}
		if t.DropManagedFields && f.name == "managedFields" && t.depth == t.metaDepth {
			continue
		}
		mark, long := len(t.out), len(t.long)
		t.sep(n)
		t.key(f)
		var (
			ok  bool
			err error
		)
		if ctx == ctxNone {
			ok, err = t.field(b, f, of)
		} else {
			ok, err = t.filingField(b, f, of, ctx)
		}
		if err != nil {
			return 0, err
		}
		if !ok {
			t.out, t.long = t.out[:mark], t.long[:long]
			continue
		}
		n++
	}
	return n, nil
}

// sortOccurrences sorts occ by the order of their fields, stably: the occurrences of a
// repeated field keep theirs. The few of a message, mostly in order, are insertion
// sorted; many, as an unlikely message may have, merge sorted.
func sortOccurrences(occ []occurrence) {
	if len(occ) > 64 {
		slices.SortStableFunc(occ, func(a, b occurrence) int { return int(a.order - b.order) })
		return
	}
	for i := 1; i < len(occ); i++ {
		o := occ[i]
		j := i
		for ; j > 0 && occ[j-1].order > o.order; j-- {
			occ[j] = occ[j-1]
		}
		occ[j] = o
	}
}

// field writes the value of f from its occurrences in the message b, and reports false
// if encoding/json would leave the member out.
func (t *Transcoder) field(b []byte, f *field, of []occurrence) (bool, error) {
	switch {
	case f.repeated:
		if len(of) == 0 {
			return t.null(f), nil
		}
		mark := len(t.out)
		head := t.open('[', cborArray)
		n := 0
		for _, o := range of {
			if o.packed {
				r := reader{b: b[o.start:o.end]}
				for !r.done() {
					v := r.scalar(f.kind.wireType())
					if r.err != nil {
						return false, r.err
					}
					t.sep(n)
					n++
					if err := t.scalar(f.kind, v); err != nil {
						return false, err
					}
				}
				continue
			}
			t.sep(n)
			n++
			if err := t.value(f.kind, f.msg, b, o); err != nil {
				return false, err
			}
		}
		if n == 0 {
			// Only empty packed fields: a nil slice.
			t.out = t.out[:mark]
			t.depth--
			return t.null(f), nil
		}
		t.close(']', head, n)
		return true, nil
	case f.isMap:
		if len(of) == 0 {
			return t.null(f), nil
		}
		return true, t.mapValue(b, f, of)
	}
	if len(of) > 1 {
		if f.kind == kindMessage || f.kind.wireType() == wireBytes && f.kind != kindString && f.kind != kindBytes {
			return false, fmt.Errorf("%w: a message field twice", ErrUnsupported)
		}
		of = of[len(of)-1:]
	}
	if len(of) == 0 {
		if f.pointer {
			return t.null(f), nil
		}
		return t.zero(f)
	}
	o := of[0]
	if !f.pointer && (f.omitEmpty || f.omitZero) {
		switch f.kind {
		case kindString, kindBytes:
			if o.end == o.start {
				return false, nil
			}
		case kindBool, kindInt, kindInt32, kindUint, kindFloat64, kindFloat32:
			if o.v == 0 || f.kind == kindInt32 && int32(o.v) == 0 {
				return false, nil
			}
		case kindTime, kindMicroTime:
			if f.omitZero && o.end == o.start {
				return false, nil
			}
		}
	}
	return true, t.value(f.kind, f.msg, b, o)
}

// null writes what encoding/json writes for a nil pointer, slice or map, and reports
// whether it writes anything.
func (t *Transcoder) null(f *field) bool {
	if f.omitEmpty || f.omitZero {
		return false
	}
	t.literal(cborNull)
	return true
}

// zero writes the zero value of the field f, absent from protobuf.
func (t *Transcoder) zero(f *field) (bool, error) {
	switch f.kind {
	case kindString:
		if f.omitEmpty || f.omitZero {
			return false, nil
		}
		t.str(nil)
	case kindBytes, kindStrings:
		return t.null(f), nil
	case kindBool:
		if f.omitEmpty || f.omitZero {
			return false, nil
		}
		t.literal(cborFalse)
	case kindInt, kindInt32, kindUint, kindFloat64, kindFloat32:
		if f.omitEmpty || f.omitZero {
			return false, nil
		}
		// encoding/json writes a zero float as 0, which is read as an integer.
		t.int(0)
	case kindTime, kindMicroTime:
		if f.omitZero {
			return false, nil
		}
		t.literal(cborNull)
	default:
		// A struct, which omitempty does not leave out: its value decoded from no bytes.
		if err := t.value(f.kind, f.msg, nil, occurrence{}); err != nil {
			return false, err
		}
	}
	return true, nil
}

// mapValue writes the entries of a map field, sorted by key as encoding/json sorts them;
// of a key given twice, the last.
func (t *Transcoder) mapValue(b []byte, f *field, of []occurrence) error {
	base := len(t.entries)
	err := t.mapValueAt(b, f, of, base)
	t.entries = t.entries[:base]
	return err
}

// mapValueAt is mapValue with the stack of entries at base.
func (t *Transcoder) mapValueAt(b []byte, f *field, of []occurrence, base int) error {
	sorted := true
	for _, o := range of {
		e := mapEntry{start: o.start, end: o.end}
		vb := b[o.start:o.end]
		r := reader{b: vb}
		var haveValue bool
		for !r.done() {
			num, wt := r.tag()
			switch {
			case num == 1 && wt == wireBytes:
				k := r.bytes()
				e.keyStart, e.keyEnd = o.start+int32(r.pos-len(k)), o.start+int32(r.pos)
			case num == 2 && wt == f.kind.wireType():
				haveValue = true
				if wt == wireBytes {
					v := r.bytes()
					e.value.start, e.value.end = int32(r.pos-len(v)), int32(r.pos)
				} else {
					e.value.v = r.scalar(wt)
				}
			default:
				return fmt.Errorf("%w: map entry field %d of wire type %d", ErrInvalid, num, wt)
			}
		}
		if r.err != nil {
			return r.err
		}
		if !haveValue && f.kind != kindString && f.kind != kindBytes && f.kind.wireType() == wireBytes {
			// A zero message: its value decoded from no bytes.
			e.start, e.end, e.value = 0, 0, occurrence{}
		}
		if k := len(t.entries); k > base && compareBytes(t.entries[k-1].key(b), e.key(b)) > 0 {
			sorted = false
		}
		t.entries = append(t.entries, e)
	}
	entries := t.entries[base:]
	if !sorted {
		// Go's protobuf writes the entries sorted by key; another writer may not.
		slices.SortStableFunc(entries, func(x, y mapEntry) int { return compareBytes(x.key(b), y.key(b)) })
	}
	head := t.open('{', cborMap)
	n := 0
	for i, e := range entries {
		key := e.key(b)
		if i+1 < len(entries) && string(entries[i+1].key(b)) == string(key) {
			continue
		}
		if t.cbor && !utf8.Valid(key) {
			// Two keys that are not UTF-8 may be one in JSON, where a repeated key has
			// no CBOR.
			return errIndirect
		}
		t.sep(n)
		n++
		t.str(key)
		if !t.cbor {
			t.out = append(t.out, ':')
		}
		if err := t.value(f.kind, f.msg, b[e.start:e.end], e.value); err != nil {
			return err
		}
	}
	t.close('}', head, n)
	return nil
}

func compareBytes(a, b []byte) int {
	switch {
	case string(a) < string(b):
		return -1
	case string(a) > string(b):
		return 1
	}
	return 0
}

// value writes one value of kind k: b[o.start:o.end] for a length-delimited one, o.v for
// the others.
func (t *Transcoder) value(k kind, m *message, b []byte, o occurrence) error {
	if k.wireType() != wireBytes {
		return t.scalar(k, o.v)
	}
	v := b[o.start:o.end]
	switch k {
	case kindString:
		t.str(v)
	case kindBytes:
		t.scratch = base64.StdEncoding.AppendEncode(t.scratch[:0], v)
		t.plain(t.scratch)
	case kindMessage:
		return t.message(v, m, ctxNone)
	case kindTime, kindMicroTime:
		if len(v) == 0 {
			t.literal(cborNull)
			return nil
		}
		var seconds, nanos int64
		r := reader{b: v}
		for !r.done() {
			num, wt := r.tag()
			switch {
			case num == 1 && wt == wireVarint:
				seconds = int64(r.varint())
			case num == 2 && wt == wireVarint:
				nanos = int64(int32(r.varint()))
			default:
				r.skip(wt)
			}
		}
		if r.err != nil {
			return r.err
		}
		if k == kindTime {
			t.scratch = time.Unix(seconds, 0).UTC().AppendFormat(t.scratch[:0], time.RFC3339)
		} else {
			nanos = int64(time.Duration(nanos).Truncate(time.Microsecond))
			t.scratch = time.Unix(seconds, nanos).UTC().AppendFormat(t.scratch[:0], metav1.RFC3339Micro)
		}
		t.plain(t.scratch)
	case kindQuantity:
		s, _, err := single(v, wireBytes, "quantity")
		if err != nil {
			return err
		}
		if len(s) == 0 {
			return fmt.Errorf("%w: an empty quantity", ErrInvalid)
		}
		t.str(s)
	case kindIntOrString:
		var (
			typ    uint64
			intVal int32
			strVal []byte
		)
		r := reader{b: v}
		for !r.done() {
			num, wt := r.tag()
			switch {
			case num == 1 && wt == wireVarint:
				typ = r.varint()
			case num == 2 && wt == wireVarint:
				intVal = int32(r.varint())
			case num == 3 && wt == wireBytes:
				strVal = r.bytes()
			default:
				return fmt.Errorf("%w: IntOrString field %d", ErrUnsupported, num)
			}
		}
		if r.err != nil {
			return r.err
		}
		switch typ {
		case 0:
			t.int(int64(intVal))
		case 1:
			t.str(strVal)
		default:
			return fmt.Errorf("%w: IntOrString of type %d", ErrUnsupported, typ)
		}
	case kindRawJSON:
		raw, _, err := single(v, wireBytes, "raw extension")
		if err != nil {
			return err
		}
		if len(raw) == 0 {
			t.literal(cborNull)
			return nil
		}
		if t.cbor {
			return t.rawCBOR(raw)
		}
		// encoding/json compacts what a Marshaler returns, and escapes it for HTML.
		t.raw.Reset()
		if err := json.Compact(&t.raw, raw); err != nil {
			return fmt.Errorf("%w: raw extension of %d bytes that are not JSON", ErrUnsupported, len(raw))
		}
		out := bytes.NewBuffer(t.out)
		json.HTMLEscape(out, t.raw.Bytes())
		t.out = out.Bytes()
	case kindDuration:
		_, d, err := single(v, wireVarint, "duration")
		if err != nil {
			return err
		}
		t.string(time.Duration(int64(d)).String())
	case kindStrings:
		r := reader{b: v}
		head := t.open('[', cborArray)
		n := 0
		for !r.done() {
			num, wt := r.tag()
			if num != 1 || wt != wireBytes {
				return fmt.Errorf("%w: string list field %d", ErrUnsupported, num)
			}
			s := r.bytes()
			t.sep(n)
			n++
			t.str(s)
		}
		if r.err != nil {
			return r.err
		}
		t.close(']', head, n)
	default:
		return fmt.Errorf("%w: kind %d", ErrUnsupported, k)
	}
	return nil
}

// single reads v, a message of one field, number 1 of wire type wt, such as a
// Quantity's string: its bytes, or its varint. Any other field is ErrUnsupported.
func single(v []byte, wt int, what string) (b []byte, n uint64, err error) {
	r := reader{b: v}
	for !r.done() {
		num, w := r.tag()
		if r.err == nil && (num != 1 || w != wt) {
			return nil, 0, fmt.Errorf("%w: %s field %d", ErrUnsupported, what, num)
		}
		if wt == wireBytes {
			b = r.bytes()
		} else {
			n = r.varint()
		}
	}
	return b, n, r.err
}

// scalar writes a varint or fixed-size value of kind k.
func (t *Transcoder) scalar(k kind, v uint64) error {
	switch k {
	case kindBool:
		if v != 0 {
			t.literal(cborTrue)
		} else {
			t.literal(cborFalse)
		}
	case kindInt:
		t.int(int64(v))
	case kindInt32:
		t.int(int64(int32(v)))
	case kindUint:
		if v <= math.MaxInt64 {
			t.int(int64(v))
		} else {
			t.scratch = strconv.AppendUint(t.scratch[:0], v, 10)
			t.number(t.scratch)
		}
	case kindFloat64, kindFloat32:
		f, bits := math.Float64frombits(v), 64
		if k == kindFloat32 {
			f, bits = float64(math.Float32frombits(uint32(v))), 32
		}
		if math.IsInf(f, 0) || math.IsNaN(f) {
			return fmt.Errorf("%w: float %v", ErrUnsupported, f)
		}
		t.scratch = appendFloat(t.scratch[:0], f, bits)
		t.number(t.scratch)
	default:
		return fmt.Errorf("%w: scalar of kind %d", ErrUnsupported, k)
	}
	return nil
}

// appendFloat appends f, finite, as encoding/json writes it.
func appendFloat(dst []byte, f float64, bits int) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 {
		if bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21) {
			format = 'e'
		}
	}
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		b := dst[start:]
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			dst = dst[:len(dst)-1]
		}
	}
	return dst
}

// The writing of a value, in JSON or CBOR.

// open starts an object, or an array if c is '[' and major cborArray, and returns the
// offset of its CBOR head for close.
func (t *Transcoder) open(c byte, major byte) int {
	t.depth++
	if !t.cbor {
		t.out = append(t.out, c)
		return 0
	}
	if t.depth > jsondec.MaxDepth {
		t.tooDeep = true
	}
	t.out = append(t.out, major<<5)
	return len(t.out) - 1
}

// close ends the object or array that open started, of n members or elements, with c
// in JSON.
func (t *Transcoder) close(c byte, head, n int) {
	t.depth--
	if !t.cbor {
		t.out = append(t.out, c)
		return
	}
	t.long = cborenc.EndHead(t.out, head, n, t.long)
}

// sep writes the separator of a member or an element after n others: in JSON, a comma.
func (t *Transcoder) sep(n int) {
	if n > 0 && !t.cbor {
		t.out = append(t.out, ',')
	}
}

// key writes the name of the member f.
func (t *Transcoder) key(f *field) {
	if t.cbor {
		t.out = append(t.out, f.cborKey...)
	} else {
		t.out = append(t.out, f.key...)
	}
}

// str writes the string s: in JSON as encoding/json writes it, in CBOR as the byte
// string of what that JSON string decodes to.
func (t *Transcoder) str(s []byte) {
	if t.cbor {
		t.out = appendCBORString(t.out, s)
	} else {
		t.out = appendStringBytes(t.out, s)
	}
}

func (t *Transcoder) string(s string) {
	t.str(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// plain writes a string of ASCII that encoding/json does not escape.
func (t *Transcoder) plain(s []byte) {
	if t.cbor {
		t.out = cborenc.AppendHead(t.out, cborBytes, uint64(len(s)))
		t.out = append(t.out, s...)
		return
	}
	t.out = append(t.out, '"')
	t.out = append(t.out, s...)
	t.out = append(t.out, '"')
}

// literal writes true, false or null, given as the CBOR simple value.
func (t *Transcoder) literal(v byte) {
	if t.cbor {
		t.out = append(t.out, v)
		return
	}
	switch v {
	case cborTrue:
		t.out = append(t.out, "true"...)
	case cborFalse:
		t.out = append(t.out, "false"...)
	default:
		t.out = append(t.out, "null"...)
	}
}

func (t *Transcoder) int(v int64) {
	if t.cbor {
		t.out = cborenc.AppendInt(t.out, v)
	} else {
		t.out = strconv.AppendInt(t.out, v, 10)
	}
}

// number writes the JSON number lit, a slice of t.scratch: in CBOR, as jsondec reads
// it, an integer if it has neither fraction nor exponent and fits an int64, else a
// float.
func (t *Transcoder) number(lit []byte) {
	if t.cbor {
		t.out = appendCBORNumber(t.out, lit)
	} else {
		t.out = append(t.out, lit...)
	}
}

// reader reads protobuf. A read past the end, or a malformed value, sets err and makes
// done true.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) done() bool { return r.err != nil || r.pos >= len(r.b) }

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or malformed at byte %d", ErrInvalid, r.pos)
	}
	r.pos = len(r.b)
}

func (r *reader) varint() uint64 {
	// Most varints of an object (tags, lengths, small numbers) are one byte.
	if r.pos < len(r.b) && r.b[r.pos] < 0x80 {
		v := uint64(r.b[r.pos])
		r.pos++
		return v
	}
	return r.longVarint()
}

// longVarint is varint for a value of more than one byte.
func (r *reader) longVarint() uint64 {
	var v uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.pos >= len(r.b) {
			r.fail()
			return 0
		}
		c := r.b[r.pos]
		r.pos++
		v |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return v
		}
	}
	r.fail()
	return 0
}

// tag reads a field's tag: its number and wire type.
func (r *reader) tag() (uint64, int) {
	v := r.varint()
	if r.err == nil && v>>3 == 0 {
		r.fail()
	}
	return v >> 3, int(v & 7)
}

func (r *reader) fixed(n int) uint64 {
	if len(r.b)-r.pos < n {
		r.fail()
		return 0
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(r.b[r.pos+i])
	}
	r.pos += n
	return v
}

func (r *reader) bytes() []byte {
	n := r.varint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.pos) {
		r.fail()
		return nil
	}
	v := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return v
}

// scalar reads a value of wire type wt, which is not length-delimited: a varint, or
// the bits of a fixed-size value.
func (r *reader) scalar(wt int) uint64 {
	switch wt {
	case wireVarint:
		return r.varint()
	case wireFixed64:
		return r.fixed(8)
	case wireFixed32:
		return r.fixed(4)
	}
	r.fail()
	return 0
}

// skip skips a value of wire type wt.
func (r *reader) skip(wt int) {
	if wt == wireBytes {
		r.bytes()
	} else {
		r.scalar(wt)
	}
}

const hex = "0123456789abcdef"

// plain holds the ASCII bytes that encoding/json writes as they are.
var plain = func() (p [utf8.RuneSelf]bool) {
	for c := byte(0x20); c < utf8.RuneSelf; c++ {
		p[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return p
}()

// appendStringBytes appends s as a JSON string as encoding/json writes it: with <, >
// and & escaped for HTML, and each byte that is not UTF-8 as U+FFFD.
func appendStringBytes(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plain[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
