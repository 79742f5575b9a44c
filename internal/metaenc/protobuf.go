package metaenc

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// The fields of an ObjectMeta in protobuf (k8s.io/apimachinery/pkg/apis/meta/v1,
// generated.proto), and of an OwnerReference. Their numbers are part of the API: a
// server never gives them to other fields.
const (
	pbName            = 1
	pbGenerateName    = 2
	pbNamespace       = 3
	pbSelfLink        = 4
	pbUID             = 5
	pbResourceVersion = 6
	pbGeneration      = 7
	pbCreation        = 8
	pbDeletion        = 9
	pbGracePeriod     = 10
	pbLabels          = 11
	pbAnnotations     = 12
	pbOwnerReferences = 13
	pbFinalizers      = 14
	pbManagedFields   = 17

	pbOwnerKind               = 1
	pbOwnerName               = 3
	pbOwnerUID                = 4
	pbOwnerAPIVersion         = 5
	pbOwnerController         = 6
	pbOwnerBlockOwnerDeletion = 7
)

// Protobuf wire types.
const (
	wireVarint = 0
	wireBytes  = 2
)

// The Unix seconds of the first and the last second whose RFC 3339 text has a year of
// four digits, 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z: the timestamps that
// Compact writes as integers when their text is canonical, which the text of whole
// seconds in UTC is.
const (
	minCanonicalSeconds = -62167219200
	maxCanonicalSeconds = 253402300799
)

// span is a part b[start:end] of a message b, or, for a varint, its value v.
type span struct {
	start, end int32
	v          uint64
	present    bool
}

// entry is an entry of a map of strings: its key and value, parts of a message.
type entry struct {
	key, value span
}

// A ProtobufWriter writes the encoding of an object from the protobuf of its
// meta.k8s.io/v1 PartialObjectMetadata, as a kube-apiserver sends it to a metadata
// client, without the CBOR that Compact reads: for a fleet's metadata clients, which
// otherwise have package pbjson write that CBOR (the members of the object walked by
// its schema, the strings checked and written) only for Compact to read it back.
//
// It keeps scratch space between calls, and, after a call to Write that succeeded, what
// files the object, as views into the protobuf it read. It is not safe for concurrent
// use.
type ProtobufWriter struct {
	c compactor
	// fields are the last occurrence of each of the ObjectMeta's fields that occur
	// once, by field number.
	fields [pbFinalizers + 1]span
	// times counts the occurrences of the timestamps.
	times [2]int
	// labels and annotations are the entries of the two maps, sorted by key, each key
	// once; owners and finalizers the occurrences of the two repeated fields.
	labels, annotations []entry
	owners, finalizers  []span
	// meta is the ObjectMeta's protobuf last read, of which the spans are parts.
	meta []byte
}

// Write returns the encoding of the object whose PartialObjectMetadata's protobuf is
// raw, in a newly allocated slice of its exact length: the bytes that Compact returns
// for the CBOR that package pbjson writes for the same protobuf (Transcoder's
// ObjectPartialCBOR of meta.k8s.io/v1 PartialObjectMetadata, managedFields dropped if
// dropManagedFields is set, as its DropManagedFields drops them), which package wire's
// TestCompactMetadataDirect and FuzzCompactMetadataDirect check. It returns false where
// that path would not give Compact's encoding or where the result is not exactly known: an object without a name, managedFields kept, a field it does not know (a
// newer server's), a field given twice where pbjson refuses that, a string that is not
// UTF-8 (which the JSON would spell otherwise), a timestamp of a year that is not of
// four digits, protobuf that is not well-formed; the caller then takes that path,
// which writes the CBOR, or refuses the protobuf with its error.
//
// After it returns true, Name, Namespace, UID, ResourceVersion, NumLabels and Label
// tell what files the object until the next call.
func (w *ProtobufWriter) Write(raw []byte, dropManagedFields bool) ([]byte, bool) {
	ok := w.read(raw, dropManagedFields) && w.fields[pbName].end > w.fields[pbName].start && w.write()
	if !ok {
		w.meta = nil
		return nil, false
	}
	out := make([]byte, len(w.c.out))
	copy(out, w.c.out)
	if cap(w.c.out) > 1<<16 {
		w.c.out = nil
	}
	return out, true
}

// Reset drops what w holds of the protobuf it last read, and scratch space grown large
// by an object of many labels, annotations, owners or finalizers, for w to be kept
// for later calls without keeping those alive.
func (w *ProtobufWriter) Reset() {
	w.meta = nil
	for _, s := range []*[]entry{&w.labels, &w.annotations} {
		if cap(*s) > 1<<10 {
			*s = nil
		}
	}
	for _, s := range []*[]span{&w.owners, &w.finalizers} {
		if cap(*s) > 1<<10 {
			*s = nil
		}
	}
}

// Name returns the name of the object last written.
func (w *ProtobufWriter) Name() []byte { return w.part(w.fields[pbName]) }

// Namespace returns the namespace of the object last written, empty if it has none.
func (w *ProtobufWriter) Namespace() []byte { return w.part(w.fields[pbNamespace]) }

// UID returns the uid of the object last written, empty if it has none.
func (w *ProtobufWriter) UID() []byte { return w.part(w.fields[pbUID]) }

// ResourceVersion returns the resourceVersion of the object last written, empty if it
// has none.
func (w *ProtobufWriter) ResourceVersion() []byte {
	return w.part(w.fields[pbResourceVersion])
}

// NumLabels returns the number of labels of the object last written.
func (w *ProtobufWriter) NumLabels() int { return len(w.labels) }

// Label returns the i-th label of the object last written, in the order of their keys.
func (w *ProtobufWriter) Label(i int) (key, value []byte) {
	e := w.labels[i]
	return w.part(e.key), w.part(e.value)
}

func (w *ProtobufWriter) part(s span) []byte { return w.meta[s.start:s.end] }

// read reads the PartialObjectMetadata raw: its metadata into w.meta, and the
// ObjectMeta's fields into w's.
func (w *ProtobufWriter) read(raw []byte, dropManagedFields bool) bool {
	w.meta = nil
	r := pbReader{b: raw}
	for !r.done() {
		num, wt := r.tag()
		// PartialObjectMetadata has one field, metadata (1); pbjson refuses it twice.
		if num != 1 || wt != wireBytes || w.meta != nil {
			return false
		}
		w.meta = r.bytes()
	}
	if r.bad || w.meta == nil || len(w.meta) > 1<<31-1 {
		return false
	}
	w.fields = [len(w.fields)]span{}
	w.times = [2]int{}
	w.labels, w.annotations = w.labels[:0], w.annotations[:0]
	w.owners, w.finalizers = w.owners[:0], w.finalizers[:0]
	r = pbReader{b: w.meta}
	for !r.done() {
		num, wt := r.tag()
		if r.bad {
			return false
		}
		var s span
		switch num {
		case pbGeneration, pbGracePeriod:
			if wt != wireVarint {
				return false
			}
			s.v = r.varint()
		default:
			if wt != wireBytes {
				return false
			}
			v := r.bytes()
			s.start, s.end = int32(r.pos-len(v)), int32(r.pos)
		}
		if r.bad {
			return false
		}
		s.present = true
		switch num {
		case pbName, pbGenerateName, pbNamespace, pbSelfLink, pbUID, pbResourceVersion, pbGeneration, pbGracePeriod:
			// Of a scalar given twice, the last, as pbjson and Go's protobuf take it.
			w.fields[num] = s
		case pbCreation, pbDeletion:
			// pbjson refuses a timestamp twice.
			if w.times[num-pbCreation]++; w.times[num-pbCreation] > 1 {
				return false
			}
			w.fields[num] = s
		case pbLabels, pbAnnotations:
			e, ok := w.entry(s)
			if !ok {
				return false
			}
			if num == pbLabels {
				w.labels = append(w.labels, e)
			} else {
				w.annotations = append(w.annotations, e)
			}
		case pbOwnerReferences:
			w.owners = append(w.owners, s)
		case pbFinalizers:
			w.finalizers = append(w.finalizers, s)
		case pbManagedFields:
			if !dropManagedFields {
				// Compact does not write them.
				return false
			}
		default:
			// A field this package does not know: a newer server's, which pbjson
			// refuses, or a deprecated one.
			return false
		}
	}
	w.labels = sortEntries(w.meta, w.labels)
	w.annotations = sortEntries(w.meta, w.annotations)
	return !r.bad
}

// entry reads the entry of a map of strings in the message s: its key (1) and value
// (2), of each the last, either empty if absent.
func (w *ProtobufWriter) entry(s span) (entry, bool) {
	var e entry
	r := pbReader{b: w.meta[s.start:s.end]}
	for !r.done() {
		num, wt := r.tag()
		if (num != 1 && num != 2) || wt != wireBytes {
			return e, false
		}
		v := r.bytes()
		p := span{start: s.start + int32(r.pos-len(v)), end: s.start + int32(r.pos)}
		if num == 1 {
			e.key = p
		} else {
			e.value = p
		}
	}
	return e, !r.bad
}

// sortEntries sorts the entries of a map of the message b by key, as encoding/json
// writes a map, keeping of a key given twice the last, as Go's protobuf decodes it. Go's
// protobuf writes them sorted.
func sortEntries(b []byte, entries []entry) []entry {
	compare := func(x, y entry) int {
		return bytes.Compare(b[x.key.start:x.key.end], b[y.key.start:y.key.end])
	}
	sorted := true
	for i := 1; i < len(entries) && sorted; i++ {
		sorted = compare(entries[i-1], entries[i]) < 0
	}
	if sorted {
		return entries
	}
	slices.SortStableFunc(entries, compare)
	n := 0
	for i, e := range entries {
		if i+1 < len(entries) && compare(entries[i+1], e) == 0 {
			continue
		}
		entries[n] = e
		n++
	}
	return entries[:n]
}

// write writes the encoding of the fields that read read, in the order of the
// ObjectMeta's members in JSON (which is that of their numbers), as Compact writes
// them from the CBOR of that JSON.
func (w *ProtobufWriter) write() bool {
	c := &w.c
	c.out = append(c.out[:0], Format)
	for num := pbName; num <= pbFinalizers; num++ {
		f := w.fields[num]
		switch num {
		case pbName, pbGenerateName, pbNamespace, pbSelfLink, pbUID, pbResourceVersion:
			// Strings that omitempty leaves out when empty.
			s := w.part(f)
			if len(s) == 0 {
				continue
			}
			if !utf8.Valid(s) {
				return false
			}
			switch num {
			case pbUID:
				c.appendUID(tagUID, tagUIDBytes, s)
			case pbResourceVersion:
				c.appendResourceVersion(s)
			default:
				c.appendString(pbTags[num], s)
			}
		case pbGeneration:
			// omitempty.
			if f.v != 0 {
				c.out = append(c.out, tagGeneration)
				c.out = binary.AppendVarint(c.out, int64(f.v))
			}
		case pbGracePeriod:
			// A pointer: written if present, zero too.
			if f.present {
				c.out = append(c.out, tagGracePeriod)
				c.out = binary.AppendVarint(c.out, int64(f.v))
			}
		case pbCreation, pbDeletion:
			// Absent, or present with no bytes, the timestamp is null or left out;
			// Compact leaves null out.
			if f.end == f.start {
				continue
			}
			sec, ok := w.seconds(f)
			if !ok {
				return false
			}
			c.out = append(c.out, pbTags[num]+1)
			c.out = binary.AppendVarint(c.out, sec)
		case pbLabels, pbAnnotations:
			entries := w.labels
			if num == pbAnnotations {
				entries = w.annotations
			}
			if len(entries) == 0 {
				continue
			}
			c.appendCount(pbTags[num], uint64(len(entries)))
			for _, e := range entries {
				k, v := w.part(e.key), w.part(e.value)
				if !utf8.Valid(k) || !utf8.Valid(v) {
					return false
				}
				c.appendString(0, k)
				c.appendString(0, v)
			}
		case pbOwnerReferences:
			if len(w.owners) == 0 {
				continue
			}
			c.appendCount(tagOwnerReferences, uint64(len(w.owners)))
			for _, o := range w.owners {
				if !w.owner(o) {
					return false
				}
			}
		case pbFinalizers:
			if len(w.finalizers) == 0 {
				continue
			}
			c.appendCount(tagFinalizers, uint64(len(w.finalizers)))
			for _, f := range w.finalizers {
				s := w.part(f)
				if !utf8.Valid(s) {
					return false
				}
				c.appendString(0, s)
			}
		}
	}
	return true
}

// pbTags are the tags of the ObjectMeta's fields, by field number: of a string's text,
// of a timestamp's text (its integer's is the next).
var pbTags = [...]byte{
	pbName:            tagName,
	pbGenerateName:    tagGenerateName,
	pbNamespace:       tagNamespace,
	pbSelfLink:        tagSelfLink,
	pbCreation:        tagCreation,
	pbDeletion:        tagDeletion,
	pbLabels:          tagLabels,
	pbAnnotations:     tagAnnotations,
	pbOwnerReferences: tagOwnerReferences,
	pbFinalizers:      tagFinalizers,
}

// seconds returns the seconds of the metav1.Time whose message is f, if its JSON, the
// RFC 3339 text of those whole seconds in UTC, has a year of four digits, which Compact
// writes as the integer. The nanoseconds are read as pbjson reads them, and dropped, as
// metav1.Time drops them.
func (w *ProtobufWriter) seconds(f span) (int64, bool) {
	var sec int64
	r := pbReader{b: w.part(f)}
	for !r.done() {
		num, wt := r.tag()
		if (num != 1 && num != 2) || wt != wireVarint {
			return 0, false
		}
		v := r.varint()
		if num == 1 {
			sec = int64(v)
		}
	}
	return sec, !r.bad && minCanonicalSeconds <= sec && sec <= maxCanonicalSeconds
}

// owner writes the owner reference whose message is o, as Compact writes its JSON:
// apiVersion, kind, name and uid, which its JSON always has, then controller and
// blockOwnerDeletion if present.
func (w *ProtobufWriter) owner(o span) bool {
	var f [pbOwnerBlockOwnerDeletion + 1]span
	r := pbReader{b: w.part(o)}
	for !r.done() {
		num, wt := r.tag()
		var s span
		switch num {
		case pbOwnerKind, pbOwnerName, pbOwnerUID, pbOwnerAPIVersion:
			if wt != wireBytes {
				return false
			}
			v := r.bytes()
			s.start, s.end = o.start+int32(r.pos-len(v)), o.start+int32(r.pos)
		case pbOwnerController, pbOwnerBlockOwnerDeletion:
			if wt != wireVarint {
				return false
			}
			s.v = r.varint()
		default:
			return false
		}
		s.present = true
		f[num] = s
	}
	if r.bad {
		return false
	}
	c := &w.c
	n := 4
	for _, num := range [...]int{pbOwnerController, pbOwnerBlockOwnerDeletion} {
		if f[num].present {
			n++
		}
	}
	c.out = binary.AppendUvarint(c.out, uint64(n))
	for _, m := range [...]struct {
		num int
		tag byte
	}{{pbOwnerAPIVersion, tagOwnerAPIVersion}, {pbOwnerKind, tagOwnerKind}, {pbOwnerName, tagOwnerName}} {
		s := w.part(f[m.num])
		if !utf8.Valid(s) {
			return false
		}
		c.appendString(m.tag, s)
	}
	uid := w.part(f[pbOwnerUID])
	if !utf8.Valid(uid) {
		return false
	}
	c.appendUID(tagOwnerUID, tagOwnerUIDBytes, uid)
	for _, m := range [...]struct {
		num int
		tag byte
	}{{pbOwnerController, tagOwnerController}, {pbOwnerBlockOwnerDeletion, tagOwnerBlockOwnerDeletion}} {
		if f[m.num].present {
			c.out = append(c.out, m.tag, boolByte(f[m.num].v != 0))
		}
	}
	return true
}

// pbReader reads protobuf. Input that is not well-formed sets bad, and done.
type pbReader struct {
	b   []byte
	pos int
	bad bool
}

func (r *pbReader) done() bool { return r.bad || r.pos >= len(r.b) }

func (r *pbReader) varint() uint64 {
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.pos += n
	return v
}

// tag reads a field's tag: its number and wire type.
func (r *pbReader) tag() (num uint64, wt int) {
	v := r.varint()
	if v>>3 == 0 || v>>3 > 1<<29-1 {
		r.bad = true
	}
	return v >> 3, int(v & 7)
}

// bytes reads a length-delimited value.
func (r *pbReader) bytes() []byte {
	n := r.varint()
	if r.bad || n > uint64(len(r.b)-r.pos) || bits.Len64(n) > 31 {
		r.bad = true
		return nil
	}
	v := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return v
}
