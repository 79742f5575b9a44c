package wire

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/metaenc"
	"github.com/fleetwatch/fleetwatch/internal/pbjson"
)

// The clients of NewDynamicClients may ask for protobuf, which a kube-apiserver encodes
// at a fraction of the CPU that JSON costs it (a list of 10,000 pods: 0.8 s against 1.4
// to 2.1 s on the bench machine), for the requests whose context says so
// (WithProtobuf): the informers of kinds that package pbjson can transcode. Their
// protobuf responses are written back as the JSON the server would have sent
// (pbjson.Transcoder), then decoded as JSON is: the objects are the same, and so are
// their encodings. The partial clients (NewPartialDynamicClients) skip the JSON for the
// objects of watch events: pbjson writes their CBOR and filing fields directly, as
// jsondec would from the JSON (23–31 µs of CPU for a realistic pod, against 35–45 for the
// JSON written and decoded). A server that has no protobuf for the resource (a custom
// resource) answers in JSON, which the request accepts too.
//
// A response that pbjson cannot transcode (a newer server's field, see
// pbjson.ErrUnsupported) fails to decode, and its kind is not asked for in protobuf
// again by the clients of that NewDynamicClients (or NewPartialDynamicClients): the
// informer's next list or watch asks that cluster for JSON.

const (
	// contentTypeProtobuf is the kube-apiserver's protobuf media type.
	contentTypeProtobuf = "application/vnd.kubernetes.protobuf"
	// acceptProtobuf asks for protobuf, or JSON where the server has none.
	acceptProtobuf = contentTypeProtobuf + ", " + runtime.ContentTypeJSON
)

type protobufKey struct{}

// WithProtobuf returns ctx for a request of the clients of NewDynamicClients that
// accepts protobuf for objects of kind gvk, if pbjson can transcode them and no response
// of the clients for that kind has failed to; otherwise ctx.
func WithProtobuf(ctx context.Context, gvk schema.GroupVersionKind) context.Context {
	if !pbjson.Supported(gvk) {
		return ctx
	}
	return context.WithValue(ctx, protobufKey{}, gvk)
}

// refusals holds the kinds of which a protobuf response to the clients of one
// NewDynamicClients could not be transcoded.
type refusals struct {
	kinds sync.Map // schema.GroupVersionKind → struct{}
}

// refused reports whether a protobuf response of kind gvk, or of its list, could not be
// transcoded.
func (r *refusals) refused(gvk schema.GroupVersionKind) bool {
	_, ok := r.kinds.Load(gvk)
	return ok
}

// refuse records that objects of kind gvk, or of the kind whose list gvk is, cannot be
// transcoded.
func (r *refusals) refuse(gvk schema.GroupVersionKind) {
	r.kinds.Store(gvk, struct{}{})
	if k, ok := strings.CutSuffix(gvk.Kind, "List"); ok && k != "" {
		r.kinds.Store(gvk.GroupVersion().WithKind(k), struct{}{})
	}
}

// acceptTransport asks for protobuf for the requests whose context has WithProtobuf,
// unless their kind was refused. With metadata, every GET asks for the objects'
// metadata (acceptMetadata).
type acceptTransport struct {
	base     http.RoundTripper
	refused  *refusals
	metadata bool
}

func (t acceptTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		return t.base.RoundTrip(req)
	}
	gvk, ok := req.Context().Value(protobufKey{}).(schema.GroupVersionKind)
	protobuf := ok && !t.refused.refused(gvk)
	switch {
	case t.metadata:
		req = req.Clone(req.Context())
		req.Header.Set("Accept", acceptMetadata(req.URL.Query().Get("watch") == "true", protobuf))
	case protobuf:
		req = req.Clone(req.Context())
		req.Header.Set("Accept", acceptProtobuf)
	}
	return t.base.RoundTrip(req)
}

// protobufKinds is the scheme of the typed objects that the dynamic client decodes
// (Status, WatchEvent, ...), for the protobuf serializers.
var protobufKinds = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	return s
}()

// protobufSerializer and protobufStream are apimachinery's serializers of protobufKinds,
// which hold no state: one for all the clients.
var (
	protobufSerializer = protobuf.NewSerializer(protobufKinds, protobufKinds)
	protobufStream     = &runtime.StreamSerializerInfo{
		Serializer: protobuf.NewRawSerializer(protobufKinds, protobufKinds),
		Framer:     protobuf.LengthDelimitedFramer,
	}
)

// protobufMediaType is the protobuf media type of the clients' negotiated serializer:
// objects and lists by an unstructuredProtobuf; watch streams framed and their events'
// envelopes read by apimachinery's, the objects in them by the unstructuredProtobuf.
func protobufMediaType(json *unstructuredJSON, refused *refusals) runtime.SerializerInfo {
	return runtime.SerializerInfo{
		MediaType:        contentTypeProtobuf,
		MediaTypeType:    "application",
		MediaTypeSubType: "vnd.kubernetes.protobuf",
		Serializer:       &unstructuredProtobuf{json: json, base: protobufSerializer, refused: refused},
		StreamSerializer: protobufStream,
	}
}

// unstructuredProtobuf decodes a kube-apiserver's protobuf as json would decode the JSON
// the server would have sent for it, written by a pbjson.Transcoder. Kinds that pbjson
// does not know are left to base, apimachinery's protobuf serializer, which decodes the
// typed objects of the dynamic client (a Status of an error) and fails on the rest, as
// the dynamic client without protobuf would fail on them. For the partial clients
// (json.partial), the objects of watch events are written as CBOR directly
// (decodePartial). It does not encode.
type unstructuredProtobuf struct {
	json    *unstructuredJSON
	base    runtime.Serializer
	refused *refusals
}

var _ runtime.Serializer = (*unstructuredProtobuf)(nil)

var transcoders = sync.Pool{New: func() any { return new(pbjson.Transcoder) }}

func (s *unstructuredProtobuf) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	kind, raw, err := pbjson.Envelope(data)
	if err != nil || !pbjson.Supported(kind) {
		return s.base.Decode(data, gvk, into)
	}
	t := transcoders.Get().(*pbjson.Transcoder)
	defer transcoders.Put(t)
	t.DropManagedFields = s.json.dropManagedFields
	if s.json.partial && gvk == nil && into == nil {
		obj, actual, err := s.decodePartial(t, kind, raw)
		if obj != nil || err != nil {
			return obj, actual, err
		}
	}
	js, err := t.Object(kind, raw)
	if err != nil {
		return nil, nil, s.transcodingError(kind, err)
	}
	return s.json.Decode(js, gvk, into)
}

// decodePartial decodes the object of a watch event, of kind and message raw, for the
// clients of NewPartialDynamicClients: what decodeEncoded returns for its JSON, but from
// the CBOR that t writes from the protobuf, with no JSON in between. It returns nil, and
// no error, for an object that decodeEncoded would not return partial (a bookmark, a
// Status, an object without a faithful encoding, ...): its JSON is then decoded as
// ever. For the metadata clients (json.metadata), the encoding of a
// PartialObjectMetadata starts with MetadataFormat, as decodeMetadata's does, and an
// object of another kind is left to the JSON.
func (s *unstructuredProtobuf) decodePartial(t *pbjson.Transcoder, kind schema.GroupVersionKind, raw []byte) (runtime.Object, *schema.GroupVersionKind, error) {
	if s.json.metadata && kind != MetadataKind {
		// An object of another kind (a server that ignored the kind asked for) comes
		// whole (decodeMetadata).
		return nil, nil, nil
	}
	d := s.json.pool.get()
	defer s.json.pool.put(d)
	if s.json.metadata {
		if obj, actual, ok := decodeCompactMetadata(d, raw, s.json.dropManagedFields); ok {
			return obj, actual, nil
		}
	}
	return s.decodePartialCBOR(t, d, kind, raw)
}

// decodePartialCBOR is decodePartial by way of the CBOR that t writes, with d.
func (s *unstructuredProtobuf) decodePartialCBOR(t *pbjson.Transcoder, d *jsondec.Decoder, kind schema.GroupVersionKind, raw []byte) (runtime.Object, *schema.GroupVersionKind, error) {
	d.DropManagedFields = s.json.dropManagedFields
	if s.json.metadata {
		d.CBORPrefix, d.Rewrite = metadataPrefix, compactMetadata
		defer func() { d.CBORPrefix, d.Rewrite = nil, nil }()
	}
	m, encoded, err := t.ObjectPartialCBOR(kind, raw, d)
	if errors.Is(err, pbjson.ErrUnsupported) || errors.Is(err, pbjson.ErrInvalid) {
		return nil, nil, s.transcodingError(kind, err)
	}
	if err != nil || encoded == nil {
		return nil, nil, nil
	}
	if name, _, _ := unstructured.NestedString(m, "metadata", "name"); name == "" {
		return nil, nil, nil
	}
	obj, actual, ok := newEncodedObject(m, encoded, true)
	if !ok {
		return nil, nil, nil
	}
	return obj, actual, nil
}

// protobufWriters hold the scratch space of decodeCompactMetadata.
var protobufWriters = sync.Pool{New: func() any { return new(metaenc.ProtobufWriter) }}

// decodeCompactMetadata is decodePartial for a PartialObjectMetadata, raw, where
// metaenc.ProtobufWriter writes its CompactMetadataFormat encoding straight from the
// protobuf: the object, its encoding and its partial map are those that the CBOR that
// pbjson writes, rewritten by compactMetadata, would give (TestCompactMetadataDirect),
// without that CBOR. It returns false where the writer declines, for decodePartial to
// take that path.
func decodeCompactMetadata(d *jsondec.Decoder, raw []byte, dropManagedFields bool) (runtime.Object, *schema.GroupVersionKind, bool) {
	w := protobufWriters.Get().(*metaenc.ProtobufWriter)
	defer func() {
		w.Reset()
		protobufWriters.Put(w)
	}()
	encoded, ok := w.Write(raw, dropManagedFields)
	if !ok {
		return nil, nil, false
	}
	// The members that pbjson's partial map has, the strings that objects share
	// interned; the name, the uid and the resourceVersion, unique to the object (pbjson
	// interns the name, which only fills the table until it starts over), are copies.
	md := make(map[string]any, 5)
	md[d.Strings.Key("name")] = string(w.Name())
	if ns := w.Namespace(); len(ns) > 0 {
		md[d.Strings.Key("namespace")] = internedValue(d, view(ns))
	}
	if uid := w.UID(); len(uid) > 0 {
		md[d.Strings.Key("uid")] = string(uid)
	}
	if rv := w.ResourceVersion(); len(rv) > 0 {
		md[d.Strings.Key("resourceVersion")] = string(rv)
	}
	if n := w.NumLabels(); n > 0 {
		labels := make(map[string]any, n)
		for i := range n {
			k, v := w.Label(i)
			labels[d.Strings.Key(view(k))] = internedValue(d, view(v))
		}
		md[d.Strings.Key("labels")] = labels
	}
	m := make(map[string]any, 3)
	m[d.Strings.Key("kind")] = internedValue(d, MetadataKind.Kind)
	m[d.Strings.Key("apiVersion")] = internedValue(d, metadataAPIVersion)
	m[d.Strings.Key("metadata")] = md
	return newEncodedObject(m, encoded, true)
}

// metadataAPIVersion is the apiVersion of MetadataKind.
var metadataAPIVersion = MetadataKind.GroupVersion().String()

// internedValue returns the value of the string s in a partial map: d's interned copy,
// or, if s is too long for d to intern, a copy of its own.
func internedValue(d *jsondec.Decoder, s string) any {
	if v, ok := d.Strings.Value(s); ok {
		return v
	}
	return strings.Clone(s)
}

// view returns the bytes of b as a string, without a copy: for lookups, and for
// interning, which copies what it keeps.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// transcodingError returns the error of a protobuf response of kind that pbjson failed
// to transcode, and refuses kind if pbjson cannot.
func (s *unstructuredProtobuf) transcodingError(kind schema.GroupVersionKind, err error) error {
	if errors.Is(err, pbjson.ErrUnsupported) {
		s.refused.refuse(kind)
	}
	return fmt.Errorf("decoding %v from protobuf: %w", kind, err)
}

func (s *unstructuredProtobuf) Encode(obj runtime.Object, w io.Writer) error {
	return s.base.Encode(obj, w)
}

func (s *unstructuredProtobuf) Identifier() runtime.Identifier {
	return s.base.Identifier()
}
