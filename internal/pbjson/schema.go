package pbjson

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// kind is how a value is written to JSON, and read from protobuf.
type kind uint8

const (
	kindString      kind = iota + 1 // a string type; length-delimited
	kindBytes                       // []byte, as base64; length-delimited
	kindBool                        // varint
	kindInt                         // int64 or int; varint
	kindInt32                       // int32 (negative: a 10-byte varint); varint
	kindUint                        // an unsigned integer; varint
	kindFloat64                     // fixed64
	kindFloat32                     // fixed32
	kindMessage                     // a struct: a message
	kindTime                        // metav1.Time: Timestamp, seconds only
	kindMicroTime                   // metav1.MicroTime: Timestamp, to the microsecond
	kindQuantity                    // resource.Quantity: a message of one string
	kindIntOrString                 // intstr.IntOrString
	kindRawJSON                     // runtime.RawExtension or metav1.FieldsV1: a message of raw JSON
	kindDuration                    // metav1.Duration: a message of one int64
	kindStrings                     // a named []string as a single value: a message of repeated strings
)

// wireType is the protobuf wire type a value of the kind is read with; repeated varints
// and fixed-size values may also come packed, as length-delimited.
func (k kind) wireType() int {
	switch k {
	case kindBool, kindInt, kindInt32, kindUint:
		return wireVarint
	case kindFloat64:
		return wireFixed64
	case kindFloat32:
		return wireFixed32
	default:
		return wireBytes
	}
}

const (
	wireVarint  = 0
	wireFixed64 = 1
	wireBytes   = 2
	wireFixed32 = 5
)

// message is the schema of a Go struct of the API: its fields in the order that
// encoding/json writes them, which is the order of their declaration.
type message struct {
	fields []*field
	// written are the fields of fields that encoding/json writes even when protobuf
	// does not have them (those not omittedIfAbsent), in their order: a message is
	// written by walking its fields present in protobuf and these, not every field of
	// its schema.
	written []*field
	// byNumber[n] is the field of protobuf field number n.
	byNumber []*field
}

func (m *message) field(n uint64) *field {
	if n < uint64(len(m.byNumber)) {
		return m.byNumber[n]
	}
	return nil
}

// field is a field of a message.
type field struct {
	// name is the JSON member's name; key is name quoted, with the colon: "name":;
	// cborKey is name as a CBOR byte string.
	name    string
	key     string
	cborKey string
	// order is the field's index in its message's fields.
	order int
	kind  kind
	// msg is the schema of a kindMessage.
	msg *message
	// repeated: a slice, each element a value of kind (a []byte is kindBytes).
	repeated bool
	// isMap: a map of string keys, each entry a message of key (1) and value (2), the
	// value of kind, with msg.
	isMap bool
	// pointer: the Go field is a pointer, nil when absent, written even if its value is
	// zero.
	pointer   bool
	omitEmpty bool
	omitZero  bool
	// inline: an embedded struct whose fields encoding/json writes into the object that
	// embeds it, a message of its own in protobuf.
	inline bool
	// omittedIfAbsent: encoding/json writes nothing for the field when protobuf does
	// not have it (its Go value is nil or zero, and omitempty or omitzero leaves it out).
	omittedIfAbsent bool
}

// omitsAbsent reports whether the server's JSON has no member for f when its protobuf
// has no field f: encoding/json leaves it out when its value is what a field absent from
// protobuf decodes to, or the server does not know f. A struct that is not a pointer
// is one such field: encoding/json writes it even when empty (omitempty leaves out no
// struct), and the marshallers of go-to-protobuf write it, empty or not; so it is absent
// only from the protobuf of a server whose type has no such field, an older one than
// this schema's (the status of a CSINode, new in Kubernetes 1.37, is not in the JSON of
// a 1.36 apiserver). The API's conventions make any other field added to a kind
// optional and omitted when empty.
func (f *field) omitsAbsent() bool {
	if f.inline {
		return false
	}
	if f.kind == kindMessage && !f.pointer && !f.repeated && !f.isMap {
		return true
	}
	if !f.omitEmpty && !f.omitZero {
		return false
	}
	if f.pointer || f.repeated || f.isMap {
		return true
	}
	switch f.kind {
	case kindString, kindBytes, kindStrings, kindBool, kindInt, kindInt32, kindUint, kindFloat64, kindFloat32:
		return true
	case kindTime, kindMicroTime:
		return f.omitZero
	}
	return false
}

var (
	typeTime        = reflect.TypeFor[metav1.Time]()
	typeMicroTime   = reflect.TypeFor[metav1.MicroTime]()
	typeQuantity    = reflect.TypeFor[resource.Quantity]()
	typeIntOrString = reflect.TypeFor[intstr.IntOrString]()
	typeRaw         = reflect.TypeFor[runtime.RawExtension]()
	typeFieldsV1    = reflect.TypeFor[metav1.FieldsV1]()
	typeDuration    = reflect.TypeFor[metav1.Duration]()
	typeTypeMeta    = reflect.TypeFor[metav1.TypeMeta]()

	typeJSONMarshaler = reflect.TypeFor[json.Marshaler]()
	typeTextMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// schemas holds the schema of each kind of client-go's scheme, built on first use: a
// *message, or nil if the kind cannot be transcoded.
var schemas sync.Map // schema.GroupVersionKind → *message

// Supported reports whether objects of kind gvk, as a kube-apiserver sends them in
// protobuf, can be transcoded to JSON: whether gvk is a kind of client-go's scheme
// (k8s.io/client-go/kubernetes/scheme), or meta.k8s.io/v1 PartialObjectMetadata or
// PartialObjectMetadataList (the metadata of any object, as client-go's metadata client
// asks for it), whose Go type this package can describe, and whose protobuf carries
// all that its JSON does (no Losses: not one of Lossy).
//
// The server's JSON of a PartialObjectMetadataList gives each item its apiVersion and
// kind, which its protobuf does not carry: the items transcoded have none, as the items
// of any other list, and decode into the same objects (apimachinery's
// UnstructuredList gives an item without them those of its list).
func Supported(gvk schema.GroupVersionKind) bool {
	return schemaOf(gvk) != nil
}

// metaKinds holds the kinds of meta.k8s.io/v1 that Supported knows beside those of
// client-go's scheme, which has none of them.
var metaKinds = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(metav1.SchemeGroupVersion, &metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadataList{})
	return s
}()

func schemaOf(gvk schema.GroupVersionKind) *message {
	if m, ok := schemas.Load(gvk); ok {
		return m.(*message)
	}
	var m *message
	obj, err := scheme.Scheme.New(gvk)
	if err != nil {
		obj, err = metaKinds.New(gvk)
	}
	if err == nil && len(Losses(reflect.TypeOf(obj))) == 0 {
		b := builder{seen: map[reflect.Type]*message{}}
		if msg, err := b.message(reflect.TypeOf(obj).Elem()); err == nil {
			m = msg
		}
	}
	actual, _ := schemas.LoadOrStore(gvk, m)
	return actual.(*message)
}

// builder builds the schema of a Go type by reflection on its json and protobuf tags.
type builder struct {
	// seen holds the messages built or being built, for recursive types.
	seen map[reflect.Type]*message
}

func (b *builder) message(t reflect.Type) (*message, error) {
	if m, ok := b.seen[t]; ok {
		return m, nil
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%v is not a struct", t)
	}
	if customJSON(t) {
		return nil, fmt.Errorf("%v has its own JSON encoding", t)
	}
	m := &message{}
	b.seen[t] = m
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			if sf.Tag.Get("protobuf") != "" {
				return nil, fmt.Errorf("%v.%s is in protobuf but not in JSON", t, sf.Name)
			}
			continue
		}
		if sf.Anonymous && sf.Type == typeTypeMeta {
			// The kind and apiVersion of an object, which protobuf carries in the
			// envelope and the caller writes, or of an item of a list, which the
			// server's JSON leaves out too. Anywhere else, Losses has refused the kind.
			continue
		}
		tag := sf.Tag.Get("protobuf")
		if tag == "" {
			return nil, fmt.Errorf("%v.%s is in JSON but not in protobuf", t, sf.Name)
		}
		f, number, err := b.field(t, sf, name, opts, tag)
		if err != nil {
			return nil, err
		}
		f.order = len(m.fields)
		f.omittedIfAbsent = f.omitsAbsent()
		m.fields = append(m.fields, f)
		if number >= len(m.byNumber) {
			m.byNumber = append(m.byNumber, make([]*field, number+1-len(m.byNumber))...)
		}
		if m.byNumber[number] != nil {
			return nil, fmt.Errorf("%v: protobuf field %d twice", t, number)
		}
		m.byNumber[number] = f
		if !f.omittedIfAbsent {
			m.written = append(m.written, f)
		}
	}
	return m, nil
}

// customJSON reports whether encoding/json writes t, or *t, otherwise than by its fields.
func customJSON(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(typeJSONMarshaler) || p.Implements(typeJSONMarshaler) ||
		t.Implements(typeTextMarshaler) || p.Implements(typeTextMarshaler)
}

func (b *builder) field(parent reflect.Type, sf reflect.StructField, name, opts, tag string) (*field, int, error) {
	// Of the protobuf tag, only the field number is read: its wire type and whether it
	// is repeated are not always true to the generated code (a *int64 tagged "bytes", a
	// []string "opt"); the Go type says.
	parts := strings.Split(tag, ",")
	if len(parts) < 3 {
		return nil, 0, fmt.Errorf("%v.%s: protobuf tag %q", parent, sf.Name, tag)
	}
	number, err := strconv.Atoi(parts[1])
	if err != nil || number <= 0 || number > 1<<16 {
		return nil, 0, fmt.Errorf("%v.%s: protobuf tag %q", parent, sf.Name, tag)
	}
	f := &field{}
	for o := range strings.SplitSeq(opts, ",") {
		switch o {
		case "":
		case "omitempty":
			f.omitEmpty = true
		case "omitzero":
			f.omitZero = true
		case "inline":
		default:
			return nil, 0, fmt.Errorf("%v.%s: json option %q", parent, sf.Name, o)
		}
	}
	t := sf.Type
	if sf.Anonymous && name == "" {
		// With a name in its json tag, an embedded struct is a member like the others.
		if t.Kind() != reflect.Struct {
			return nil, 0, fmt.Errorf("%v.%s: embedded %v", parent, sf.Name, t)
		}
		msg, err := b.message(t)
		if err != nil {
			return nil, 0, err
		}
		f.inline, f.kind, f.msg = true, kindMessage, msg
		return f, number, nil
	}
	if name == "" {
		return nil, 0, fmt.Errorf("%v.%s: no JSON name", parent, sf.Name)
	}
	f.name, f.key, f.cborKey = name, strconv.Quote(name)+":", string(appendCBORString(nil, []byte(name)))
	switch {
	case t.Kind() == reflect.Pointer:
		f.pointer = true
		t = t.Elem()
	case t.Kind() == reflect.Map:
		if t.Key().Kind() != reflect.String || customJSON(t.Key()) {
			return nil, 0, fmt.Errorf("%v.%s: map key %v", parent, sf.Name, t.Key())
		}
		f.isMap = true
		t = t.Elem()
	case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 && !namedStrings(t):
		f.repeated = true
		t = t.Elem()
	}
	if f.kind, f.msg, err = b.value(t); err != nil {
		return nil, 0, fmt.Errorf("%v.%s: %w", parent, sf.Name, err)
	}
	if f.omitZero && !f.pointer && !f.isMap && !f.repeated {
		// encoding/json's omitzero asks IsZero or compares with the zero value: only
		// the times and scalars are done here.
		switch f.kind {
		case kindTime, kindMicroTime, kindString, kindBool, kindInt, kindInt32, kindUint, kindFloat64, kindFloat32:
		default:
			return nil, 0, fmt.Errorf("%v.%s: omitzero on %v", parent, sf.Name, t)
		}
	}
	return f, number, nil
}

// namedStrings reports whether t is a named slice of strings, such as metav1.Verbs,
// which go-to-protobuf wraps in a message of its own (kindStrings).
func namedStrings(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Name() != "" && t.Elem().Kind() == reflect.String
}

// value returns the kind of values of type t (a field's, a slice's element or a map's
// value).
func (b *builder) value(t reflect.Type) (kind, *message, error) {
	switch t {
	case typeTime:
		return kindTime, nil, nil
	case typeMicroTime:
		return kindMicroTime, nil, nil
	case typeQuantity:
		return kindQuantity, nil, nil
	case typeIntOrString:
		return kindIntOrString, nil, nil
	case typeRaw, typeFieldsV1:
		return kindRawJSON, nil, nil
	case typeDuration:
		return kindDuration, nil, nil
	}
	if customJSON(t) {
		return 0, nil, fmt.Errorf("%v has its own JSON encoding", t)
	}
	switch t.Kind() {
	case reflect.String:
		return kindString, nil, nil
	case reflect.Bool:
		return kindBool, nil, nil
	case reflect.Int64, reflect.Int:
		return kindInt, nil, nil
	case reflect.Int32:
		return kindInt32, nil, nil
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		return kindUint, nil, nil
	case reflect.Float64:
		return kindFloat64, nil, nil
	case reflect.Float32:
		return kindFloat32, nil, nil
	case reflect.Slice:
		switch {
		case t.Elem().Kind() == reflect.Uint8:
			return kindBytes, nil, nil
		case namedStrings(t):
			// Not repeated: a named slice, such as metav1.Verbs, wrapped in a message.
			return kindStrings, nil, nil
		}
	case reflect.Struct:
		m, err := b.message(t)
		return kindMessage, m, err
	}
	return 0, nil, fmt.Errorf("values of type %v", t)
}
