package jsondec

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/internal/cborenc"
	"github.com/fleetwatch/fleetwatch/internal/intern"
)

// MaxDepth is how deeply maps and arrays may nest, as in encoding/json: deeper input is
// a syntax error.
const MaxDepth = 10000

// maxScratch bounds, in elements, the scratch space that a Decoder keeps between inputs.
const maxScratch = 1 << 16

// ErrAmbiguousTypeMeta is returned for input that is valid but names its apiVersion or
// kind more than once at the top level, or spells them in another case. Apimachinery's
// JSON serializer reads them case-insensitively, with encoding/json, before it decodes
// the object; what it makes of such input cannot be told from the decoded map alone, so
// such input is left to apimachinery.
var ErrAmbiguousTypeMeta = errors.New("jsondec: apiVersion or kind is repeated or spelt in another case")

// Error is returned for input that is not valid JSON, or that apimachinery would not
// decode: a number out of the range of a float64, or a value other than an object
// where an object is expected.
type Error struct {
	msg string
	// Offset is the number of bytes of the input read before the error.
	Offset int
}

func (e *Error) Error() string {
	return fmt.Sprintf("jsondec: %s at offset %d", e.msg, e.Offset)
}

// A Decoder decodes the JSON of Kubernetes objects. The zero Decoder is ready to use.
// It is not safe for concurrent use; between inputs it keeps its intern table and its
// scratch space, so that a pool of Decoders serves concurrent decoding best.
type Decoder struct {
	// Strings interns the map keys and the short string values of the decoded objects,
	// but for the uid and resourceVersion of their metadata, which are one object's
	// own: they are copied (see uniqueMetadata).
	Strings intern.Table
	// DropManagedFields leaves metadata.managedFields out of the objects that Object and
	// List return: the value is checked, as the rest of the input, but not decoded.
	DropManagedFields bool
	// CBORPrefix, if not empty, is written before the CBOR that ObjectCBOR and
	// ObjectPartialCBOR return, in the same slice: a format byte of the caller's, for a
	// reader that must tell this encoding from others (package wire's metadata).
	CBORPrefix []byte
	// Rewrite, if set, is given the CBOR that ObjectCBOR and ObjectPartialCBOR would
	// return (CBORPrefix included) in the Decoder's scratch space, which it must not
	// keep or return; if it returns ok, what it returns is returned instead, and
	// otherwise a copy of the CBOR. Package wire's metadata clients rewrite metadata
	// in a shorter encoding so, without a copy of the CBOR to be freed.
	Rewrite func(cbor []byte) (rewritten []byte, ok bool)
	// rewriting is the scratch space for Rewrite.
	rewriting []byte

	// data is the input, as a string that aliases the caller's bytes: every string
	// handed out is interned or copied, never a substring of data.
	data string
	off  int
	// members and elems hold the entries of the maps and arrays being decoded, which
	// are allocated when their size is known. items holds the items of a list.
	members []member
	elems   []any
	items   []map[string]any
	// buf holds a string being unescaped.
	buf []byte

	// emit is set by ObjectCBOR, for the decoding to append the CBOR of the object to
	// enc; it is cleared if the object cannot be written faithfully. long lists the
	// heads of enc that are longer than the one byte reserved for them.
	emit bool
	enc  []byte
	long []cborenc.LongHead

	// partial is set by ObjectPartialCBOR: only the members that file the object are
	// built (partialKeeps); the others are decoded with drop set, which writes their
	// CBOR and builds nothing. hashes holds the hashes of the keys of the objects being
	// decoded with drop set, to find a repeated key without their maps.
	partial bool
	drop    bool
	hashes  []uint64
	// unique is set while the uid or resourceVersion of the metadata is decoded
	// (uniqueMetadata).
	unique bool
}

type member struct {
	key   string
	value any
}

// context is where in an object a value is, for the keys that the Decoder treats
// specially.
type context uint8

const (
	ctxNone     context = iota
	ctxRoot             // the object of Object, whose apiVersion and kind are checked
	ctxListRoot         // the object of List, whose items are its list's items
	ctxItem             // an item of a list
	ctxMetadata         // the metadata of an object or an item
)

// Object decodes data, the JSON of one object, into the map that
// unstructured.UnstructuredJSONScheme decodes it into: null gives a nil map, and
// anything but an object or null is an error.
func (d *Decoder) Object(data []byte) (map[string]any, error) {
	d.start(data)
	defer d.finish()
	if d.space(); d.peek() == 'n' {
		if err := d.literal("null"); err != nil {
			return nil, err
		}
		return nil, d.end()
	}
	if d.peek() != '{' {
		return nil, d.typeError("an object")
	}
	m, err := d.object(1, ctxRoot)
	if err != nil {
		return nil, err
	}
	return m, d.end()
}

// List decodes data, the JSON of a list, as unstructured.UnstructuredJSONScheme decodes
// it into an empty UnstructuredList: its items, which must be objects or null, become
// list.Items, and the rest list.Object. An item that has neither apiVersion nor kind
// gets the list's apiVersion, and its kind without the "List" suffix.
func (d *Decoder) List(data []byte) (*unstructured.UnstructuredList, error) {
	d.start(data)
	defer d.finish()
	list := &unstructured.UnstructuredList{}
	if d.space(); d.peek() == 'n' {
		if err := d.literal("null"); err != nil {
			return nil, err
		}
		list.Items = []unstructured.Unstructured{}
		return list, d.end()
	}
	if d.peek() != '{' {
		return nil, d.typeError("an object")
	}
	var err error
	if list.Object, err = d.object(1, ctxListRoot); err != nil {
		return nil, err
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	list.Items = make([]unstructured.Unstructured, len(d.items))
	// The items of typed lists, such as a PodList, have neither: all of them share the
	// two values.
	apiVersion, kind := d.stringValue(list.GetAPIVersion()), d.stringValue(strings.TrimSuffix(list.GetKind(), "List"))
	for i, m := range d.items {
		item := &list.Items[i]
		item.Object = m
		if item.GetKind() == "" && item.GetAPIVersion() == "" {
			if item.Object == nil {
				item.Object = make(map[string]any, 2)
			}
			item.Object["kind"], item.Object["apiVersion"] = kind, apiVersion
		}
	}
	return list, nil
}

// Normalize gives m, an object decoded by other means, what the Decoder gives the
// objects it decodes: it drops metadata.managedFields if DropManagedFields is set, and
// interns m's strings in place.
func (d *Decoder) Normalize(m map[string]any) {
	if d.DropManagedFields {
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
	}
	d.Strings.Object(m)
}

func (d *Decoder) start(data []byte) {
	// The input is only read, and never referenced once the decoding returns.
	d.data, d.off = unsafe.String(unsafe.SliceData(data), len(data)), 0
}

// finish forgets the input, the entries left in the scratch space by an error, and the
// scratch space itself if it grew large. The entries of the maps and arrays that were
// returned are cleared as they are.
func (d *Decoder) finish() {
	d.data = ""
	clear(d.members)
	clear(d.elems)
	clear(d.items)
	d.members, d.elems, d.items = d.members[:0], d.elems[:0], d.items[:0]
	if cap(d.members) > maxScratch {
		d.members = nil
	}
	if cap(d.elems) > maxScratch {
		d.elems = nil
	}
	if cap(d.items) > maxScratch {
		d.items = nil
	}
	if cap(d.buf) > maxScratch {
		d.buf = nil
	}
}

// end checks that only white space follows the value.
func (d *Decoder) end() error {
	d.space()
	if d.off < len(d.data) {
		return d.unexpected("after top-level value")
	}
	return nil
}

func (d *Decoder) peek() byte {
	if d.off < len(d.data) {
		return d.data[d.off]
	}
	return 0
}

func (d *Decoder) space() {
	for d.off < len(d.data) {
		switch d.data[d.off] {
		case ' ', '\t', '\n', '\r':
			d.off++
		default:
			return
		}
	}
}

func (d *Decoder) unexpected(where string) error {
	if d.off >= len(d.data) {
		return &Error{msg: "unexpected end of JSON input", Offset: d.off}
	}
	return &Error{msg: fmt.Sprintf("invalid character %q %s", d.data[d.off], where), Offset: d.off}
}

func (d *Decoder) typeError(want string) error {
	return &Error{msg: "not " + want, Offset: d.off}
}

// stringValue returns the string value s, interned if it is short (and not d.unique),
// else a copy.
func (d *Decoder) stringValue(s string) any {
	if d.unique {
		return strings.Clone(s)
	}
	if v, ok := d.Strings.Value(s); ok {
		return v
	}
	return strings.Clone(s)
}

// uniqueMetadata reports whether the member key of the metadata is a value of one
// object only, which the Decoder copies rather than interns: interned, such values
// share nothing and fill the table, which keeps them until it starts over
// (intern.Table), so that after a cold start's lists its decoders held two strings
// of every listed object; a compact fleet, which drops the partial objects once filed,
// held them for nothing else. The name stays interned: label values repeat it
// (app.kubernetes.io/instance, statefulset.kubernetes.io/pod-name), other namespaces
// have objects of the same name, and the fleet's keys keep it anyway.
func uniqueMetadata(key string) bool {
	return key == "uid" || key == "resourceVersion"
}

// value decodes the value at the offset, nested in depth maps and arrays.
func (d *Decoder) value(depth int, ctx context) (any, error) {
	switch c := d.peek(); c {
	case '{':
		m, err := d.object(depth+1, ctx)
		if err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		a, err := d.array(depth + 1)
		if err != nil {
			return nil, err
		}
		return a, nil
	case '"':
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		if d.emit {
			d.appendString(s)
		}
		if d.drop {
			return nil, nil
		}
		return d.stringValue(s), nil
	case 't':
		if d.emit {
			d.enc = append(d.enc, cborTrue)
		}
		return true, d.literal("true")
	case 'f':
		if d.emit {
			d.enc = append(d.enc, cborFalse)
		}
		return false, d.literal("false")
	case 'n':
		if d.emit {
			d.enc = append(d.enc, cborNull)
		}
		return nil, d.literal("null")
	default:
		if c == '-' || '0' <= c && c <= '9' {
			return d.number()
		}
		return nil, d.unexpected("looking for beginning of value")
	}
}

func (d *Decoder) literal(lit string) error {
	if !strings.HasPrefix(d.data[d.off:], lit) {
		for i := 0; i < len(lit); i++ {
			if d.off >= len(d.data) || d.data[d.off] != lit[i] {
				return d.unexpected("in literal " + lit)
			}
			d.off++
		}
	}
	d.off += len(lit)
	return nil
}

// object decodes the object at the offset, at nesting depth depth.
func (d *Decoder) object(depth int, ctx context) (map[string]any, error) {
	if depth > MaxDepth {
		return nil, &Error{msg: "exceeded max depth", Offset: d.off}
	}
	d.off++ // {
	d.space()
	if d.peek() == '}' {
		d.off++
		if d.emit {
			d.enc = append(d.enc, cborMap<<5)
		}
		if d.drop {
			return nil, nil
		}
		return map[string]any{}, nil
	}
	var head int
	if d.emit {
		head = d.startHead(cborMap)
	}
	if d.drop {
		return nil, d.droppedObject(depth, head)
	}
	base, hbase := len(d.members), len(d.hashes)
	var sawAPIVersion, sawKind bool
	for {
		if d.peek() != '"' {
			return nil, d.unexpected("looking for beginning of object key string")
		}
		key, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.peek() != ':' {
			return nil, d.unexpected("after object key")
		}
		d.off++
		d.space()

		if ctx == ctxRoot || ctx == ctxListRoot {
			// encoding/json matches keys with bytes.EqualFold, as strings.EqualFold does.
			if strings.EqualFold(key, "apiVersion") {
				if key != "apiVersion" || sawAPIVersion {
					return nil, ErrAmbiguousTypeMeta
				}
				sawAPIVersion = true
			}
			if strings.EqualFold(key, "kind") {
				if key != "kind" || sawKind {
					return nil, ErrAmbiguousTypeMeta
				}
				sawKind = true
			}
		}
		switch {
		case ctx == ctxListRoot && key == "items":
			err = d.listItems(depth)
		case ctx == ctxMetadata && key == "managedFields" && d.DropManagedFields:
			err = d.skip(depth)
		case d.partial && !partialKeeps(ctx, key):
			// Not in the map, so not in its count of members either.
			d.emitDroppedKey(key, hbase)
			d.drop = true
			_, err = d.value(depth, ctxNone)
			d.drop = false
		default:
			if d.emit {
				d.appendString(key)
			}
			// Interned before the value is read, which may reuse the buffer of key.
			k := d.Strings.Key(key)
			var v any
			d.unique = ctx == ctxMetadata && uniqueMetadata(key)
			v, err = d.value(depth, childContext(ctx, key))
			d.unique = false
			d.members = append(d.members, member{key: k, value: v})
		}
		if err != nil {
			return nil, err
		}
		if more, err := d.more('}'); err != nil {
			return nil, err
		} else if !more {
			break
		}
	}
	members := d.members[base:]
	size := len(members)
	if ctx == ctxItem {
		size += 2 // room for the kind and apiVersion that List may add
	}
	m := make(map[string]any, size)
	for _, kv := range members {
		m[kv.key] = kv.value
	}
	if d.emit {
		if len(m) != len(members) {
			// A repeated key: the map holds only its last value.
			d.emit = false
		} else {
			// With the members that are written but not built (ObjectPartialCBOR).
			d.endHead(head, len(members)+len(d.hashes)-hbase)
		}
	}
	clear(members)
	d.members, d.hashes = d.members[:base], d.hashes[:hbase]
	return m, nil
}

// droppedObject decodes the members of an object, from its first key on, with drop
// set: it writes their CBOR and builds nothing. head is the offset of the object's head
// in d.enc. A repeated key, found by the hashes of the keys, stops the writing of CBOR,
// as in object.
func (d *Decoder) droppedObject(depth, head int) error {
	base := len(d.hashes)
	defer func() {
		d.hashes = d.hashes[:base]
	}()
	for {
		if d.peek() != '"' {
			return d.unexpected("looking for beginning of object key string")
		}
		key, err := d.str()
		if err != nil {
			return err
		}
		d.space()
		if d.peek() != ':' {
			return d.unexpected("after object key")
		}
		d.off++
		d.space()
		d.emitDroppedKey(key, base)
		if _, err := d.value(depth, ctxNone); err != nil {
			return err
		}
		if more, err := d.more('}'); err != nil {
			return err
		} else if !more {
			break
		}
	}
	if d.emit {
		d.endHead(head, len(d.hashes)-base)
	}
	return nil
}

// emitDroppedKey writes key, the key of a member that is not built, and records its hash
// beside those of the object's other such keys, from d.hashes[base:]. A repeated key, or
// (rarely) two keys with one hash, stops the writing of CBOR: either way the caller
// decodes the object whole.
func (d *Decoder) emitDroppedKey(key string, base int) {
	if !d.emit {
		return
	}
	h := maphash.String(hashSeed, key)
	if slices.Contains(d.hashes[base:], h) {
		d.emit = false
	}
	d.hashes = append(d.hashes, h)
	d.appendString(key)
}

// hashSeed is the seed of the hashes of droppedObject.
var hashSeed = maphash.MakeSeed()

// partialKeeps reports whether ObjectPartialCBOR builds the member key of an object in
// context ctx: at the root, apiVersion, kind and metadata; in the metadata, name,
// namespace, uid, resourceVersion and labels; everything below those.
func partialKeeps(ctx context, key string) bool {
	switch ctx {
	case ctxRoot:
		return key == "apiVersion" || key == "kind" || key == "metadata"
	case ctxMetadata:
		switch key {
		case "name", "namespace", "uid", "resourceVersion", "labels":
			return true
		}
		return false
	}
	return true
}

// more reads what follows a member of an object or an element of an array that ends
// with end: it returns true after a comma and the white space after it, and false after
// end. Anything else is an error.
func (d *Decoder) more(end byte) (bool, error) {
	d.space()
	switch d.peek() {
	case ',':
		d.off++
		d.space()
		return true, nil
	case end:
		d.off++
		return false, nil
	}
	if end == '}' {
		return false, d.unexpected("after object key:value pair")
	}
	return false, d.unexpected("after array element")
}

// childContext returns the context of the value of key in an object in context ctx.
func childContext(ctx context, key string) context {
	if (ctx == ctxRoot || ctx == ctxItem) && key == "metadata" {
		return ctxMetadata
	}
	return ctxNone
}

// array decodes the array at the offset, at nesting depth depth.
func (d *Decoder) array(depth int) ([]any, error) {
	if depth > MaxDepth {
		return nil, &Error{msg: "exceeded max depth", Offset: d.off}
	}
	d.off++ // [
	d.space()
	if d.peek() == ']' {
		d.off++
		if d.emit {
			d.enc = append(d.enc, cborArray<<5)
		}
		if d.drop {
			return nil, nil
		}
		return []any{}, nil
	}
	var head int
	if d.emit {
		head = d.startHead(cborArray)
	}
	if d.drop {
		n := 0
		for {
			if _, err := d.value(depth, ctxNone); err != nil {
				return nil, err
			}
			n++
			if more, err := d.more(']'); err != nil {
				return nil, err
			} else if !more {
				break
			}
		}
		if d.emit {
			d.endHead(head, n)
		}
		return nil, nil
	}
	base := len(d.elems)
	for {
		v, err := d.value(depth, ctxNone)
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		if more, err := d.more(']'); err != nil {
			return nil, err
		} else if !more {
			break
		}
	}
	a := make([]any, len(d.elems)-base)
	copy(a, d.elems[base:])
	if d.emit {
		d.endHead(head, len(a))
	}
	clear(d.elems[base:])
	d.elems = d.elems[:base]
	return a, nil
}

// listItems decodes the items of a list, an array of objects or nulls, or null, into
// d.items. An earlier "items" of the same list is forgotten: as in a map, the last one
// wins.
func (d *Decoder) listItems(depth int) error {
	clear(d.items)
	d.items = d.items[:0]
	switch d.peek() {
	case 'n':
		return d.literal("null")
	case '[':
	default:
		return d.typeError("an array of items")
	}
	if depth+1 > MaxDepth {
		return &Error{msg: "exceeded max depth", Offset: d.off}
	}
	d.off++ // [
	d.space()
	if d.peek() == ']' {
		d.off++
		return nil
	}
	for {
		switch d.peek() {
		case '{':
			m, err := d.object(depth+2, ctxItem)
			if err != nil {
				return err
			}
			d.items = append(d.items, m)
		case 'n':
			if err := d.literal("null"); err != nil {
				return err
			}
			d.items = append(d.items, nil)
		default:
			return d.typeError("an object")
		}
		if more, err := d.more(']'); !more || err != nil {
			return err
		}
	}
}

// skip checks the value at the offset, nested in depth maps and arrays, as value would
// decode it, and moves past it.
func (d *Decoder) skip(depth int) error {
	switch c := d.peek(); c {
	case '{', '[':
		if depth+1 > MaxDepth {
			return &Error{msg: "exceeded max depth", Offset: d.off}
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.off++
		d.space()
		if d.peek() == end {
			d.off++
			return nil
		}
		for {
			if c == '{' {
				if d.peek() != '"' {
					return d.unexpected("looking for beginning of object key string")
				}
				if err := d.skipString(); err != nil {
					return err
				}
				d.space()
				if d.peek() != ':' {
					return d.unexpected("after object key")
				}
				d.off++
				d.space()
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			if more, err := d.more(end); !more || err != nil {
				return err
			}
		}
	case '"':
		return d.skipString()
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		if c == '-' || '0' <= c && c <= '9' {
			_, _, err := d.scanNumber()
			return err
		}
		return d.unexpected("looking for beginning of value")
	}
}

// number decodes the number at the offset: an int64 if it has no fraction and fits,
// else a float64, as k8s.io/apimachinery/pkg/util/json does.
func (d *Decoder) number() (any, error) {
	lit, isInt, err := d.scanNumber()
	if err != nil {
		return nil, err
	}
	if isInt {
		n := parseInt(lit)
		if d.emit {
			d.appendInt(n)
		}
		return n, nil
	}
	v, err := convertNumber(lit)
	if d.emit && err == nil {
		d.appendNumber(v)
	}
	return v, err
}

// scanNumber reads the number at the offset. isInt says that it has neither fraction
// nor exponent and few enough digits to fit an int64. The number is checked as
// convertNumber would.
func (d *Decoder) scanNumber() (lit string, isInt bool, err error) {
	s, start, i := d.data, d.off, d.off
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i++; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		}
	default:
		d.off = i
		return "", false, d.unexpected("in numeric literal")
	}
	// 18 digits always fit an int64.
	isInt = i-start <= 18
	if i < len(s) && s[i] == '.' {
		isInt = false
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			d.off = i
			return "", false, d.unexpected("after decimal point in numeric literal")
		}
		for i++; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		isInt = false
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			d.off = i
			return "", false, d.unexpected("in exponent of numeric literal")
		}
		for i++; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		}
	}
	d.off, lit = i, s[start:i]
	if !isInt {
		if _, err := convertNumber(lit); err != nil {
			return "", false, &Error{msg: "number " + strings.Clone(lit) + " out of range", Offset: start}
		}
	}
	return lit, isInt, nil
}

// parseInt parses an integer of at most 18 digits.
func parseInt(lit string) int64 {
	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	var n int64
	for i := 0; i < len(lit); i++ {
		n = n*10 + int64(lit[i]-'0')
	}
	if neg {
		return -n
	}
	return n
}

// convertNumber is k8s.io/apimachinery/pkg/util/json's conversion of a number
// literal.
func convertNumber(lit string) (any, error) {
	if !strings.Contains(lit, ".") {
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// str reads the string at the offset, unescaped as encoding/json does: an invalid
// UTF-8 byte or surrogate becomes U+FFFD. The result aliases the input or d.buf, and is
// valid until the next call.
func (d *Decoder) str() (string, error) {
	s := d.data
	start := d.off + 1
	i := start
	for i < len(s) {
		c := s[i]
		if c == '"' {
			d.off = i + 1
			return s[start:i], nil
		}
		if c == '\\' || c < ' ' {
			break
		}
		if c < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		i += size
	}
	b := append(d.buf[:0], s[start:i]...)
	for {
		if i >= len(s) {
			d.off = i
			return "", d.unexpected("in string literal")
		}
		switch c := s[i]; {
		case c == '"':
			d.off = i + 1
			d.buf = b
			return unsafe.String(unsafe.SliceData(b), len(b)), nil
		case c == '\\':
			if i+1 >= len(s) {
				d.off = len(s)
				return "", d.unexpected("in string escape code")
			}
			switch e := s[i+1]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := hex4(s[i+2:])
				if !ok {
					d.off = i + 2
					for n := 0; n < 4 && d.off < len(s) && isHex(s[d.off]); n++ {
						d.off++
					}
					return "", d.unexpected("in \\u hexadecimal character escape")
				}
				i += 6
				if utf16.IsSurrogate(r) {
					if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if r2, ok := hex4(s[i+2:]); ok {
							if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
								b = utf8.AppendRune(b, dec)
								i += 6
								continue
							}
						}
					}
					r = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, r)
				continue
			default:
				d.off = i + 1
				return "", d.unexpected("in string escape code")
			}
			i += 2
		case c < ' ':
			d.off = i
			return "", d.unexpected("in string literal")
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			b = utf8.AppendRune(b, r)
			i += size
		}
	}
}

// skipString checks the string at the offset, as str would read it, and moves past
// it.
func (d *Decoder) skipString() error {
	s := d.data
	for i := d.off + 1; i < len(s); {
		switch c := s[i]; {
		case c == '"':
			d.off = i + 1
			return nil
		case c == '\\':
			if i+1 >= len(s) {
				d.off = len(s)
				return d.unexpected("in string escape code")
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(s[i+2:]); !ok {
					d.off = i + 2
					for n := 0; n < 4 && d.off < len(s) && isHex(s[d.off]); n++ {
						d.off++
					}
					return d.unexpected("in \\u hexadecimal character escape")
				}
				i += 6
			default:
				d.off = i + 1
				return d.unexpected("in string escape code")
			}
		case c < ' ':
			d.off = i
			return d.unexpected("in string literal")
		default:
			i++
		}
	}
	d.off = len(s)
	return d.unexpected("in string literal")
}

func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for i := range 4 {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
