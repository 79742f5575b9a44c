// Package metaenc is a short encoding of the metadata of an object, a
// meta.k8s.io/v1 PartialObjectMetadata, for a fleet that keeps each metadata-only
// object encoded: fields by a one-byte tag rather than by their names, lengths and
// integers as varints, a uid as its 16 bytes, a resourceVersion and timestamps as
// integers where their text is the integer's canonical form, and the strings of a
// static table (well-known label and annotation keys, frequent values, owners' kinds) by
// their index. Decode returns the table's strings themselves, shared by every object.
//
// Compact writes it from the CBOR of the object's map as jsondec and pbjson write it
// (the snapshot's format 3, without its format byte), and a ProtobufWriter the same
// bytes straight from the protobuf of the object that a kube-apiserver sends; Decode
// reads it back into the *metav1.PartialObjectMetadata that apimachinery's cbor/direct
// decodes from that CBOR, without TypeMeta, exactly (FuzzCompact checks both against
// each other). Compact declines what it cannot write exactly (managedFields, a member
// it does not know, a value of another type, a repeated member, ...): the caller keeps
// the CBOR then.
//
// The encoding: the byte Format, then the object's members, each as a tag (one of the
// tag constants) and its value; strings as a uvarint, twice their length, then their
// bytes, or, for a string of the static table (table.go), twice its index plus one;
// integers as zig-zag varints (resourceVersion: a uvarint); labels and annotations as a uvarint
// count and that many key and value strings; finalizers as a count and strings;
// ownerReferences as a count and, for each, a count of members and those members,
// tagged as the object's are. A member appears at most once, in any order.
package metaenc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Format is the first byte of the encoding: package persist's object format 4.
const Format byte = 4

// The tags of the members of the object's metadata.
const (
	tagName byte = iota + 1
	tagGenerateName
	tagNamespace
	tagSelfLink
	tagUID         // a string
	tagUIDBytes    // 16 bytes, the canonical text of a UUID
	tagRV          // a string
	tagRVInt       // a uvarint, the decimal text of the resourceVersion
	tagGeneration  // a varint
	tagCreation    // a string
	tagCreationInt // a varint, the Unix seconds of an RFC 3339 text in UTC
	tagDeletion
	tagDeletionInt
	tagGracePeriod // a varint
	tagLabels
	tagAnnotations
	tagOwnerReferences
	tagFinalizers
	// The members of an owner reference.
	tagOwnerAPIVersion
	tagOwnerKind
	tagOwnerName
	tagOwnerUID
	tagOwnerUIDBytes
	tagOwnerController         // a byte, 0 or 1
	tagOwnerBlockOwnerDeletion // a byte, 0 or 1
	tagCount
)

// memberTag returns the tag of the metadata's member name, where its tag is a
// string's. A switch, not a map: the compiler compares the lengths first, and hashes
// nothing.
func memberTag(name []byte) (byte, bool) {
	switch string(name) {
	case "name":
		return tagName, true
	case "generateName":
		return tagGenerateName, true
	case "namespace":
		return tagNamespace, true
	case "selfLink":
		return tagSelfLink, true
	case "uid":
		return tagUID, true
	case "resourceVersion":
		return tagRV, true
	case "generation":
		return tagGeneration, true
	case "creationTimestamp":
		return tagCreation, true
	case "deletionTimestamp":
		return tagDeletion, true
	case "deletionGracePeriodSeconds":
		return tagGracePeriod, true
	case "labels":
		return tagLabels, true
	case "annotations":
		return tagAnnotations, true
	case "ownerReferences":
		return tagOwnerReferences, true
	case "finalizers":
		return tagFinalizers, true
	}
	return 0, false
}

// ownerTag is memberTag for the members of an owner reference.
func ownerTag(name []byte) (byte, bool) {
	switch string(name) {
	case "apiVersion":
		return tagOwnerAPIVersion, true
	case "kind":
		return tagOwnerKind, true
	case "name":
		return tagOwnerName, true
	case "uid":
		return tagOwnerUID, true
	case "controller":
		return tagOwnerController, true
	case "blockOwnerDeletion":
		return tagOwnerBlockOwnerDeletion, true
	}
	return 0, false
}

// Compact returns the encoding of the object whose map's CBOR is cbor, in a newly
// allocated slice of its exact length, or false if it cannot be written exactly. It
// reads the CBOR that jsondec writes: definite lengths, strings as byte strings,
// integers, true, false and null; the map's apiVersion and kind, which the
// decoded object does not keep, are read but not written.
func Compact(cbor []byte) ([]byte, bool) {
	c := compactors.Get().(*compactor)
	defer compactors.Put(c)
	c.r = reader{b: cbor}
	c.out = append(c.out[:0], Format)
	ok := c.object() && c.r.off == len(cbor)
	var out []byte
	if ok {
		out = make([]byte, len(c.out))
		copy(out, c.out)
	}
	c.r = reader{}
	clear(c.keys)
	c.keys = c.keys[:0]
	if cap(c.out) > 1<<16 {
		c.out = nil
	}
	return out, ok
}

// compactors holds the scratch space of Compact.
var compactors = sync.Pool{New: func() any { return new(compactor) }}

type compactor struct {
	r   reader
	out []byte
	// keys are those of the map being written.
	keys [][]byte
}

func (c *compactor) object() bool {
	n, ok := c.r.mapHead()
	if !ok {
		return false
	}
	var seenTop [3]bool
	for range n {
		k, ok := c.r.str()
		if !ok {
			return false
		}
		var i int
		switch string(k) {
		case "apiVersion", "kind":
			if i = 0; string(k) == "kind" {
				i = 1
			}
			if _, ok := c.r.str(); !ok {
				return false
			}
		case "metadata":
			i = 2
			if !c.metadata() {
				return false
			}
		default:
			return false
		}
		if seenTop[i] {
			return false
		}
		seenTop[i] = true
	}
	return true
}

func (c *compactor) metadata() bool {
	n, ok := c.r.mapHead()
	if !ok {
		return false
	}
	var seen [tagCount]bool
	for range n {
		k, ok := c.r.str()
		if !ok {
			return false
		}
		tag, ok := memberTag(k)
		if !ok || seen[tag] {
			return false
		}
		seen[tag] = true
		switch tag {
		case tagName, tagGenerateName, tagNamespace, tagSelfLink:
			ok = c.stringMember(tag)
		case tagUID:
			ok = c.uid(tagUID, tagUIDBytes)
		case tagRV:
			var s []byte
			if s, ok = c.r.str(); ok {
				c.appendResourceVersion(s)
			}
		case tagGeneration, tagGracePeriod:
			v, iok := c.r.int()
			if ok = iok; ok {
				c.out = append(c.out, tag)
				c.out = binary.AppendVarint(c.out, v)
			}
		case tagCreation, tagDeletion:
			ok = c.timestamp(tag)
		case tagLabels, tagAnnotations:
			ok = c.stringMap(tag)
		case tagFinalizers:
			ok = c.finalizers()
		case tagOwnerReferences:
			ok = c.owners()
		}
		if !ok {
			return false
		}
	}
	return true
}

func (c *compactor) appendString(tag byte, s []byte) {
	if tag != 0 {
		c.out = append(c.out, tag)
	}
	if i, ok := tableIndex(s); ok {
		c.out = binary.AppendUvarint(c.out, uint64(i)<<1|1)
		return
	}
	c.out = binary.AppendUvarint(c.out, uint64(len(s))<<1)
	c.out = append(c.out, s...)
}

func (c *compactor) stringMember(tag byte) bool {
	s, ok := c.r.str()
	if ok {
		c.appendString(tag, s)
	}
	return ok
}

func (c *compactor) uid(text, bytes byte) bool {
	s, ok := c.r.str()
	if ok {
		c.appendUID(text, bytes, s)
	}
	return ok
}

// appendCount writes tag and the count n of the entries or elements that follow.
func (c *compactor) appendCount(tag byte, n uint64) {
	c.out = append(c.out, tag)
	c.out = binary.AppendUvarint(c.out, n)
}

// appendUID writes the uid s: as its 16 bytes, tagged bytes, if it is the canonical text
// of a UUID, else as the text, tagged text.
func (c *compactor) appendUID(text, bytes byte, s []byte) {
	if u, ok := parseUUID(s); ok {
		c.out = append(c.out, bytes)
		c.out = append(c.out, u[:]...)
		return
	}
	c.appendString(text, s)
}

// appendResourceVersion writes the resourceVersion s: as an integer if it is the
// integer's canonical text, else as the text.
func (c *compactor) appendResourceVersion(s []byte) {
	if v, ok := canonicalUint(s); ok {
		c.out = append(c.out, tagRVInt)
		c.out = binary.AppendUvarint(c.out, v)
		return
	}
	c.appendString(tagRV, s)
}

// timestamp writes a metav1.Time: null is left out (it decodes to the zero time, as an
// absent member does); a text in RFC 3339 that is the canonical text of whole seconds in
// UTC as an integer; any other text that metav1.Time parses as it is, for Decode to
// parse as metav1.Time does. A text that it does not parse is declined.
func (c *compactor) timestamp(tag byte) bool {
	if c.r.null() {
		return true
	}
	s, ok := c.r.str()
	if !ok {
		return false
	}
	if sec, ok := canonicalSeconds(s); ok {
		c.out = append(c.out, tag+1)
		c.out = binary.AppendVarint(c.out, sec)
		return true
	}
	t, err := time.Parse(time.RFC3339, string(s))
	if err != nil {
		// For the decoder of the CBOR to fail on.
		return false
	}
	if t.UTC().Format(time.RFC3339) == string(s) {
		c.out = append(c.out, tag+1)
		c.out = binary.AppendVarint(c.out, t.Unix())
		return true
	}
	c.appendString(tag, s)
	return true
}

// canonicalSeconds returns the Unix seconds of s if s is the canonical text of whole
// seconds in UTC in RFC 3339, 2006-01-02T15:04:05Z, as time.Time's Format writes it for
// years 0 to 9999: what timestamp writes as an integer, without time.Parse and Format
// (most of Compact's time for an object with a timestamp or two). Any other text, a
// valid one too, is left to them.
func canonicalSeconds(s []byte) (int64, bool) {
	if len(s) != len("2006-01-02T15:04:05Z") || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
		s[13] != ':' || s[16] != ':' || s[19] != 'Z' {
		return 0, false
	}
	var f [6]int
	for i, at := range [...]struct{ off, n int }{{0, 4}, {5, 2}, {8, 2}, {11, 2}, {14, 2}, {17, 2}} {
		for _, b := range s[at.off : at.off+at.n] {
			if b < '0' || b > '9' {
				return 0, false
			}
			f[i] = f[i]*10 + int(b-'0')
		}
	}
	t := time.Date(f[0], time.Month(f[1]), f[2], f[3], f[4], f[5], 0, time.UTC)
	// time.Date normalizes what is out of range (a 31st of April, a 24th hour): the text
	// is canonical if nothing was.
	y, m, d := t.Date()
	hh, mm, ss := t.Clock()
	if y != f[0] || int(m) != f[1] || d != f[2] || hh != f[3] || mm != f[4] || ss != f[5] {
		return 0, false
	}
	return t.Unix(), true
}

func (c *compactor) stringMap(tag byte) bool {
	n, ok := c.r.mapHead()
	if !ok {
		return false
	}
	c.appendCount(tag, n)
	c.keys = c.keys[:0]
	for i := range 2 * n {
		s, ok := c.r.str()
		if !ok {
			return false
		}
		if i%2 == 0 {
			// A repeated key, which jsondec never writes, and which the decoders of
			// the CBOR and of this encoding reject.
			for _, k := range c.keys {
				if string(k) == string(s) {
					return false
				}
			}
			c.keys = append(c.keys, s)
		}
		c.appendString(0, s)
	}
	return true
}

func (c *compactor) finalizers() bool {
	n, ok := c.r.arrayHead()
	if !ok {
		return false
	}
	c.appendCount(tagFinalizers, n)
	for range n {
		s, ok := c.r.str()
		if !ok {
			return false
		}
		c.appendString(0, s)
	}
	return true
}

func (c *compactor) owners() bool {
	n, ok := c.r.arrayHead()
	if !ok {
		return false
	}
	c.appendCount(tagOwnerReferences, n)
	for range n {
		m, ok := c.r.mapHead()
		if !ok {
			return false
		}
		c.out = binary.AppendUvarint(c.out, m)
		var seen [tagCount]bool
		for range m {
			k, ok := c.r.str()
			if !ok {
				return false
			}
			tag, ok := ownerTag(k)
			if !ok || seen[tag] {
				return false
			}
			seen[tag] = true
			switch tag {
			case tagOwnerUID:
				ok = c.uid(tagOwnerUID, tagOwnerUIDBytes)
			case tagOwnerController, tagOwnerBlockOwnerDeletion:
				var b bool
				if b, ok = c.r.bool(); ok {
					c.out = append(c.out, tag, boolByte(b))
				}
			default:
				ok = c.stringMember(tag)
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// canonicalUint returns the value of s if s is the decimal text that
// strconv.FormatUint writes for it.
func canonicalUint(s []byte) (uint64, bool) {
	if len(s) == 0 || len(s) > 20 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(s), 10, 64)
	return v, err == nil
}

// parseUUID returns the 16 bytes of s if s is the canonical text of a UUID, in lower
// case, the form in which Decode writes them back.
func parseUUID(s []byte) (u [16]byte, ok bool) {
	if len(s) != 36 {
		return u, false
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return u, false
			}
			i++
			continue
		}
		hi, ok1 := hexDigit(s[i])
		lo, ok2 := hexDigit(s[i+1])
		if !ok1 || !ok2 {
			return u, false
		}
		u[j] = hi<<4 | lo
		j++
		i += 2
	}
	return u, true
}

func hexDigit(b byte) (byte, bool) {
	switch {
	case '0' <= b && b <= '9':
		return b - '0', true
	case 'a' <= b && b <= 'f':
		return b - 'a' + 10, true
	}
	return 0, false
}

func formatUUID(u string) string {
	const hexDigits = "0123456789abcdef"
	var b [36]byte
	j := 0
	for i := range len(u) {
		x := u[i]
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[x>>4], hexDigits[x&15]
		j += 2
	}
	return string(b[:])
}

// reader reads the CBOR subset that Compact takes. Any other item, or one that runs
// past the end, makes its methods return false.
type reader struct {
	b   []byte
	off int
}

func (r *reader) head() (major byte, arg uint64, ok bool) {
	if r.off >= len(r.b) {
		return 0, 0, false
	}
	ib := r.b[r.off]
	major, ai := ib>>5, ib&31
	r.off++
	switch {
	case ai < 24:
		return major, uint64(ai), true
	case ai <= 27:
		n := 1 << (ai - 24)
		if len(r.b)-r.off < n {
			return 0, 0, false
		}
		for _, x := range r.b[r.off : r.off+n] {
			arg = arg<<8 | uint64(x)
		}
		r.off += n
		return major, arg, true
	}
	return 0, 0, false
}

func (r *reader) mapHead() (uint64, bool) {
	major, n, ok := r.head()
	return n, ok && major == 5 && n <= uint64(len(r.b))
}

func (r *reader) arrayHead() (uint64, bool) {
	major, n, ok := r.head()
	return n, ok && major == 4 && n <= uint64(len(r.b))
}

func (r *reader) str() ([]byte, bool) {
	major, n, ok := r.head()
	if !ok || major != 2 || n > uint64(len(r.b)-r.off) {
		return nil, false
	}
	s := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return s, true
}

// int reads an integer that fits an int64.
func (r *reader) int() (int64, bool) {
	major, n, ok := r.head()
	switch {
	case !ok || n > math.MaxInt64:
		return 0, false
	case major == 0:
		return int64(n), true
	case major == 1:
		return -1 - int64(n), true
	}
	return 0, false
}

func (r *reader) bool() (bool, bool) {
	if r.off >= len(r.b) {
		return false, false
	}
	switch r.b[r.off] {
	case 0xf4:
		r.off++
		return false, true
	case 0xf5:
		r.off++
		return true, true
	}
	return false, false
}

// null reads null, if that is next.
func (r *reader) null() bool {
	if r.off < len(r.b) && r.b[r.off] == 0xf6 {
		r.off++
		return true
	}
	return false
}

// ErrCorrupt is wrapped by the errors of Decode.
var ErrCorrupt = errors.New("metaenc: corrupt encoding")

// Decode decodes data, an encoding that Compact returned, into a
// *metav1.PartialObjectMetadata without TypeMeta. The object shares no memory with data.
//
// The strings that the encoding spells out are cut from one copy of data, made once
// (one allocation for all of them, where a copy each was a tenth of a compact
// metadata-only fleet's handlers' CPU): the object's strings keep that copy alive, no
// more than the encoding's size.
func Decode(data []byte) (*metav1.PartialObjectMetadata, error) {
	if len(data) == 0 || data[0] != Format {
		return nil, fmt.Errorf("%w: not format %d", ErrCorrupt, Format)
	}
	return decode(string(data))
}

// DecodeString is Decode for an encoding held in a string, which it copies once, as
// Decode copies data: the object shares no memory with data.
func DecodeString(data string) (*metav1.PartialObjectMetadata, error) {
	if len(data) == 0 || data[0] != Format {
		return nil, fmt.Errorf("%w: not format %d", ErrCorrupt, Format)
	}
	return decode(strings.Clone(data))
}

// decode decodes own, a copy of an encoding that no one else holds: the decoded
// object's strings are cut from it.
func decode(own string) (*metav1.PartialObjectMetadata, error) {
	d := decoder{b: own, off: 1}
	p := new(metav1.PartialObjectMetadata)
	if err := d.metadata(&p.ObjectMeta); err != nil {
		return nil, fmt.Errorf("%w: at byte %d: %v", ErrCorrupt, d.off, err)
	}
	return p, nil
}

// decoder reads an encoding from b, a string that the decoded object may share: the
// strings it spells out are cut from it, not copied.
type decoder struct {
	b   string
	off int
}

var errShort = errors.New("truncated")

func (d *decoder) byte() (byte, error) {
	if d.off >= len(d.b) {
		return 0, errShort
	}
	d.off++
	return d.b[d.off-1], nil
}

func (d *decoder) uvarint() (uint64, error) {
	v, n := uvarint(d.b[d.off:])
	if n <= 0 {
		return 0, errors.New("bad uvarint")
	}
	d.off += n
	return v, nil
}

func (d *decoder) varint() (int64, error) {
	v, n := varint(d.b[d.off:])
	if n <= 0 {
		return 0, errors.New("bad varint")
	}
	d.off += n
	return v, nil
}

// uvarint is binary.Uvarint for a string.
func uvarint(s string) (uint64, int) {
	var x uint64
	var shift uint
	for i := range len(s) {
		b := s[i]
		if i == binary.MaxVarintLen64 {
			return 0, -(i + 1) // overflow
		}
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, -(i + 1) // overflow
			}
			return x | uint64(b)<<shift, i + 1
		}
		x |= uint64(b&0x7f) << shift
		shift += 7
	}
	return 0, 0
}

// varint is binary.Varint for a string.
func varint(s string) (int64, int) {
	ux, n := uvarint(s)
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x, n
}

func (d *decoder) str() (string, error) {
	n, err := d.uvarint()
	if err != nil {
		return "", err
	}
	if n&1 == 1 {
		if n>>1 >= uint64(len(table)) {
			return "", fmt.Errorf("string %d of a table of %d", n>>1, len(table))
		}
		return table[n>>1], nil
	}
	n >>= 1
	if n > uint64(len(d.b)-d.off) {
		return "", errShort
	}
	s := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return s, nil
}

func (d *decoder) uuid() (string, error) {
	if len(d.b)-d.off < 16 {
		return "", errShort
	}
	s := formatUUID(d.b[d.off : d.off+16])
	d.off += 16
	return s, nil
}

// count reads a count of items of at least min bytes each, no more than the rest holds.
func (d *decoder) count(min int) (int, error) {
	n, err := d.uvarint()
	if err != nil {
		return 0, err
	}
	if n > uint64((len(d.b)-d.off)/min) {
		return 0, fmt.Errorf("a count of %d in %d bytes", n, len(d.b)-d.off)
	}
	return int(n), nil
}

func (d *decoder) time(text bool) (metav1.Time, error) {
	if text {
		s, err := d.str()
		if err != nil {
			return metav1.Time{}, err
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return metav1.Time{}, err
		}
		return metav1.Time{Time: t.Local()}, nil
	}
	v, err := d.varint()
	if err != nil {
		return metav1.Time{}, err
	}
	return metav1.Time{Time: time.Unix(v, 0).Local()}, nil
}

func (d *decoder) metadata(m *metav1.ObjectMeta) error {
	var seen [tagCount]bool
	for d.off < len(d.b) {
		tag, _ := d.byte()
		if tag == 0 || tag > tagFinalizers {
			return fmt.Errorf("unknown tag %d", tag)
		}
		// A member's text and integer tags are one member.
		member := tag
		switch tag {
		case tagUIDBytes, tagRVInt, tagCreationInt, tagDeletionInt:
			member--
		}
		if seen[member] {
			return fmt.Errorf("tag %d repeated", tag)
		}
		seen[member] = true
		var err error
		switch tag {
		case tagName:
			m.Name, err = d.str()
		case tagGenerateName:
			m.GenerateName, err = d.str()
		case tagNamespace:
			m.Namespace, err = d.str()
		case tagSelfLink:
			// What the CBOR decodes to, if an old apiserver still sends it.
			//lint:ignore SA1019 decoded as apimachinery decodes it
			m.SelfLink, err = d.str()

		case tagUID:
			var s string
			s, err = d.str()
			m.UID = types.UID(s)
		case tagUIDBytes:
			var s string
			s, err = d.uuid()
			m.UID = types.UID(s)
		case tagRV:
			m.ResourceVersion, err = d.str()
		case tagRVInt:
			var v uint64
			v, err = d.uvarint()
			m.ResourceVersion = strconv.FormatUint(v, 10)
		case tagGeneration:
			m.Generation, err = d.varint()
		case tagCreation, tagCreationInt:
			m.CreationTimestamp, err = d.time(tag == tagCreation)
		case tagDeletion, tagDeletionInt:
			var t metav1.Time
			if t, err = d.time(tag == tagDeletion); err == nil {
				m.DeletionTimestamp = &t
			}
		case tagGracePeriod:
			var v int64
			v, err = d.varint()
			m.DeletionGracePeriodSeconds = &v
		case tagLabels:
			m.Labels, err = d.stringMap()
		case tagAnnotations:
			m.Annotations, err = d.stringMap()
		case tagFinalizers:
			var n int
			if n, err = d.count(1); err == nil {
				m.Finalizers = make([]string, n)
				for i := 0; i < n && err == nil; i++ {
					m.Finalizers[i], err = d.str()
				}
			}
		case tagOwnerReferences:
			m.OwnerReferences, err = d.owners()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) stringMap() (map[string]string, error) {
	n, err := d.count(2)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, n)
	for range n {
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		v, err := d.str()
		if err != nil {
			return nil, err
		}
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("key %q repeated", k)
		}
		m[k] = v
	}
	return m, nil
}

func (d *decoder) owners() ([]metav1.OwnerReference, error) {
	n, err := d.count(1)
	if err != nil {
		return nil, err
	}
	refs := make([]metav1.OwnerReference, n)
	for i := range refs {
		ref := &refs[i]
		members, err := d.count(1)
		if err != nil {
			return nil, err
		}
		var seen [tagCount]bool
		// The two bools' pointers, where the reference has them, point into one
		// allocation.
		var bools *[2]bool
		for range members {
			tag, err := d.byte()
			if err != nil {
				return nil, err
			}
			if tag < tagOwnerAPIVersion || tag > tagOwnerBlockOwnerDeletion {
				return nil, fmt.Errorf("unknown owner reference tag %d", tag)
			}
			member := tag
			if tag == tagOwnerUIDBytes {
				member = tagOwnerUID
			}
			if seen[member] {
				return nil, fmt.Errorf("owner reference tag %d repeated", tag)
			}
			seen[member] = true
			switch tag {
			case tagOwnerAPIVersion:
				ref.APIVersion, err = d.str()
			case tagOwnerKind:
				ref.Kind, err = d.str()
			case tagOwnerName:
				ref.Name, err = d.str()
			case tagOwnerUID:
				var s string
				s, err = d.str()
				ref.UID = types.UID(s)
			case tagOwnerUIDBytes:
				var s string
				s, err = d.uuid()
				ref.UID = types.UID(s)
			case tagOwnerController, tagOwnerBlockOwnerDeletion:
				var b byte
				if b, err = d.byte(); err == nil && b > 1 {
					err = fmt.Errorf("a bool of %d", b)
				}
				if bools == nil {
					bools = new([2]bool)
				}
				if tag == tagOwnerController {
					bools[0] = b == 1
					ref.Controller = &bools[0]
				} else {
					bools[1] = b == 1
					ref.BlockOwnerDeletion = &bools[1]
				}
			}
			if err != nil {
				return nil, err
			}
		}
	}
	return refs, nil
}
