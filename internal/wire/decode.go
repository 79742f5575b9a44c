package wire

import (
	"net/http"
	goruntime "runtime"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/features"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// NewDynamicClients returns two dynamic clients, made for cfg as dynamic.NewForConfig
// makes one, whose JSON responses are decoded with the Decoders of the process's pool
// (decoders): drop leaves managedFields out of the objects, keep keeps them. With
// encode, the objects of watch events come with their encoding, as *EncodedObjects. They
// share one HTTP client. Their Watchers open the same watches as their Watch, read by
// the caller (Stream).
func NewDynamicClients(cfg *rest.Config, encode bool) (drop, keep *Client, err error) {
	return newDynamicClients(cfg, encode, false, false)
}

// NewPartialDynamicClients returns the dynamic clients of NewDynamicClients with encode,
// except that the objects of watch events come partial (EncodedObject.ToPartial), decoded
// by jsondec.Decoder.ObjectPartialCBOR, which builds nothing of an object but what files
// it, or, from protobuf, by pbjson.Transcoder.ObjectPartialCBOR, which writes the same
// without JSON. An object without a name (a bookmark) comes whole, with its encoding; one
// without a faithful encoding (a repeated key), whole and without.
func NewPartialDynamicClients(cfg *rest.Config) (drop, keep *Client, err error) {
	return newDynamicClients(cfg, true, true, false)
}

func newDynamicClients(cfg *rest.Config, encode, partial, metadata bool) (drop, keep *Client, err error) {
	// From the dynamic client's config, as dynamic.NewForConfig does: its transport sets
	// the default user agent.
	refused := new(refusals)
	config := dynamicConfigFor(cfg)
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return acceptTransport{base: rt, refused: refused, metadata: metadata}
	})
	h, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, nil, err
	}
	if drop, err = newDynamicClient(cfg, h, decoders, refused, true, encode, partial, metadata); err != nil {
		return nil, nil, err
	}
	if keep, err = newDynamicClient(cfg, h, decoders, refused, false, encode, partial, metadata); err != nil {
		return nil, nil, err
	}
	return drop, keep, nil
}

// newDynamicClient returns a dynamic client for cfg, as dynamic.NewForConfigAndClient
// does, whose JSON responses are decoded by unstructuredJSON with the decoders of pool.
// Its Watcher asks for JSON, as the dynamic client does unless CBOR is allowed (which
// this package does not decode: see DecodesAllJSON); acceptTransport asks for protobuf
// or metadata where the request says so.
func newDynamicClient(cfg *rest.Config, h *http.Client, pool decoderPool, refused *refusals, dropManagedFields, encode, partial, metadata bool) (*Client, error) {
	config := dynamicConfigFor(cfg)
	config.NegotiatedSerializer = sharedNegotiatedSerializer(pool, refused, dropManagedFields, encode, partial, metadata)
	// The dynamic client builds absolute paths: as in dynamic.NewForConfigAndClient, a
	// path built from APIPath would be a bug.
	config.GroupVersion = nil
	config.APIPath = "/if-you-see-this-search-for-the-break"
	rc, err := rest.UnversionedRESTClientForConfigAndClient(config, h)
	if err != nil {
		return nil, err
	}
	return &Client{
		Interface: dynamic.New(rc),
		Watcher:   NewWatcher(rc, config.NegotiatedSerializer, schema.GroupVersion{}, runtime.ContentTypeJSON),
	}, nil
}

// dynamicDefaults is dynamic.ConfigFor's config of an empty one: the content types, the
// negotiated serializer and the user agent that it sets.
var dynamicDefaults = sync.OnceValue(func() *rest.Config { return dynamic.ConfigFor(&rest.Config{}) })

// dynamicConfigFor is dynamic.ConfigFor(cfg), with the negotiated serializer of
// dynamicDefaults, which holds nothing of cfg: dynamic.ConfigFor makes one of its own at
// each call, three serializers of JSON, a few KiB for each of thousands of clusters.
func dynamicConfigFor(cfg *rest.Config) *rest.Config {
	d := dynamicDefaults()
	config := rest.CopyConfig(cfg)
	config.ContentType, config.AcceptContentTypes, config.NegotiatedSerializer = d.ContentType, d.AcceptContentTypes, d.NegotiatedSerializer
	if config.UserAgent == "" {
		config.UserAgent = d.UserAgent
	}
	return config
}

// serializerKey is what the JSON media types of a negotiatedSerializer over
// dynamicDefaults' depend on, beside the pool.
type serializerKey struct {
	pool                                         decoderPool
	dropManagedFields, encode, partial, metadata bool
}

// sharedJSON holds the JSON media types of the negotiated serializers of
// sharedNegotiatedSerializer by serializerKey: they hold no state of a cluster, and are
// made once for all the clusters.
var sharedJSON sync.Map

// sharedNegotiatedSerializer is newNegotiatedSerializer over dynamicDefaults' negotiated
// serializer, whose media types but protobuf's (which holds refused) are shared by every
// call with the same arguments.
func sharedNegotiatedSerializer(pool decoderPool, refused *refusals, dropManagedFields, encode, partial, metadata bool) negotiatedSerializer {
	base := dynamicDefaults().NegotiatedSerializer
	key := serializerKey{pool: pool, dropManagedFields: dropManagedFields, encode: encode, partial: partial, metadata: metadata}
	v, ok := sharedJSON.Load(key)
	if !ok {
		v, _ = sharedJSON.LoadOrStore(key, jsonMediaTypes(base, pool, dropManagedFields, encode, partial, metadata))
	}
	return withProtobuf(base, v.([]runtime.SerializerInfo), refused)
}

// DecodesAllJSON reports whether the dynamic clients of NewDynamicClients receive only
// JSON, all of which they intern: not so if client-go may negotiate CBOR.
func DecodesAllJSON() bool {
	return !features.FeatureGates().Enabled(features.ClientsAllowCBOR)
}

// negotiatedSerializer is the dynamic client's negotiated serializer with the decoders of
// its JSON media type replaced: objects and lists are decoded by an unstructuredJSON;
// the frames of a watch stream are split by a jsonFramer, and their envelopes read by a
// watchEventJSON, after which the objects in them are decoded by the unstructuredJSON.
type negotiatedSerializer struct {
	runtime.NegotiatedSerializer
	mediaTypes []runtime.SerializerInfo
}

var _ runtime.NegotiatedSerializer = negotiatedSerializer{}

func newNegotiatedSerializer(base runtime.NegotiatedSerializer, pool decoderPool, refused *refusals, dropManagedFields, encode, partial, metadata bool) negotiatedSerializer {
	return withProtobuf(base, jsonMediaTypes(base, pool, dropManagedFields, encode, partial, metadata), refused)
}

// jsonMediaTypes are base's media types, the decoders of JSON's replaced.
func jsonMediaTypes(base runtime.NegotiatedSerializer, pool decoderPool, dropManagedFields, encode, partial, metadata bool) []runtime.SerializerInfo {
	mediaTypes := slices.Clone(base.SupportedMediaTypes())
	for i, info := range mediaTypes {
		if info.MediaType == runtime.ContentTypeJSON {
			json := &unstructuredJSON{Serializer: info.Serializer, pool: pool, dropManagedFields: dropManagedFields, encode: encode, partial: partial, metadata: metadata}
			mediaTypes[i].Serializer = json
			if stream := info.StreamSerializer; stream != nil {
				mediaTypes[i].StreamSerializer = &runtime.StreamSerializerInfo{
					EncodesAsText: stream.EncodesAsText,
					Serializer:    newWatchEventJSON(stream.Serializer, pool),
					Framer:        jsonFramer{base: stream.Framer},
				}
			}
		}
	}
	return mediaTypes
}

// withProtobuf is the negotiated serializer of base with mediaTypes (jsonMediaTypes) and
// protobuf's, which decodes as their JSON's does, and records in refused the kinds that
// it is asked again in JSON.
func withProtobuf(base runtime.NegotiatedSerializer, mediaTypes []runtime.SerializerInfo, refused *refusals) negotiatedSerializer {
	all := slices.Clip(mediaTypes)
	for _, info := range mediaTypes {
		if json, ok := info.Serializer.(*unstructuredJSON); ok {
			all = append(all, protobufMediaType(json, refused))
		}
	}
	return negotiatedSerializer{NegotiatedSerializer: base, mediaTypes: all}
}

func (s negotiatedSerializer) SupportedMediaTypes() []runtime.SerializerInfo {
	return s.mediaTypes
}

// unstructuredJSON decodes Unstructured objects and lists with a jsondec.Decoder, and
// leaves everything else to Serializer, the dynamic client's JSON serializer, which
// also encodes. What it returns is what Serializer returns, except that the strings of
// Unstructured objects are interned and, with dropManagedFields, their managedFields
// are dropped.
//
// With encode, an Unstructured that it decodes into a new object (the object of a watch
// event: lists and objects that are read are decoded into the caller's) comes as an
// *EncodedObject with the CBOR of its map, written while decoding it; with partial too,
// a partial one (decodeEncoded). With metadata, the encoding of a PartialObjectMetadata
// starts with MetadataFormat, and an object of another kind comes without one.
type unstructuredJSON struct {
	runtime.Serializer
	pool              decoderPool
	dropManagedFields bool
	encode            bool
	partial           bool
	metadata          bool
}

var _ runtime.Serializer = (*unstructuredJSON)(nil)

// typedKinds are the kinds that the dynamic client's serializer decodes to typed
// objects (Status, WatchEvent, ...) rather than Unstructured: those of its scheme,
// package metav1 in version v1.
var typedKinds = func() map[string]bool {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	kinds := map[string]bool{}
	for gvk := range scheme.AllKnownTypes() {
		kinds[gvk.Kind] = true
	}
	return kinds
}()

func (s *unstructuredJSON) Decode(data []byte, gvk *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	d := s.pool.get()
	defer s.pool.put(d)
	d.DropManagedFields = s.dropManagedFields
	// A default kind is only asked for when decoding errors, which are not
	// Unstructured.
	if gvk == nil {
		if into == nil && s.encode {
			decode := decodeEncoded
			if s.metadata {
				decode = decodeMetadata
			}
			if obj, actual, ok := decode(d, data, s.partial); ok {
				return obj, actual, nil
			}
		} else if obj, actual, ok := decodeUnstructured(d, data, into); ok {
			return obj, actual, nil
		}
	}
	obj, actual, err := s.Serializer.Decode(data, gvk, into)
	if err == nil {
		switch obj := obj.(type) {
		case *unstructured.Unstructured:
			d.Normalize(obj.Object)
		case *unstructured.UnstructuredList:
			d.Strings.Object(obj.Object)
			for i := range obj.Items {
				d.Normalize(obj.Items[i].Object)
			}
		}
	}
	return obj, actual, err
}

// decodeEncoded decodes data as decodeUnstructured decodes it into a new object, into
// an *EncodedObject with its encoding, or into a plain Unstructured if it has no faithful
// encoding (a repeated key). With partial, the EncodedObject of an object with a name is
// partial. ok is false if the serializer would not return an Unstructured.
func decodeEncoded(d *jsondec.Decoder, data []byte, partial bool) (obj runtime.Object, gvk *schema.GroupVersionKind, ok bool) {
	var (
		m       map[string]any
		encoded []byte
		err     error
	)
	if partial {
		m, encoded, err = d.ObjectPartialCBOR(data)
		if err == nil && encoded != nil {
			if name, _, _ := unstructured.NestedString(m, "metadata", "name"); name == "" {
				// A bookmark, whose annotations say whether it ends the initial events.
				partial = false
				m, encoded, err = d.ObjectCBOR(data)
			}
		}
	} else {
		m, encoded, err = d.ObjectCBOR(data)
	}
	if err != nil {
		return nil, nil, false
	}
	return newEncodedObject(m, encoded, partial)
}

// newEncodedObject returns what decodeEncoded returns for the decoded object m and its
// encoding, which is partial if partial is set.
func newEncodedObject(m map[string]any, encoded []byte, partial bool) (obj runtime.Object, gvk *schema.GroupVersionKind, ok bool) {
	kind, ok := newObjectKind(m)
	if !ok {
		return nil, nil, false
	}
	u := &unstructured.Unstructured{Object: m}
	if encoded == nil {
		return u, &kind, true
	}
	if partial {
		return newPartial(u, encoded), &kind, true
	}
	return &EncodedObject{Unstructured: u, Encoded: encoded}, &kind, true
}

// newObjectKind returns the kind of the decoded object m, and whether the serializer
// decodes its JSON into a new Unstructured: a typed object, or one without a version,
// is decoded otherwise.
func newObjectKind(m map[string]any) (schema.GroupVersionKind, bool) {
	gvk, ok := typeMeta(m)
	return gvk, ok && gvk.Version != "" && !typedKinds[gvk.Kind]
}

// decodeUnstructured decodes data into into, or into a new object if into is nil, as
// the dynamic client's JSON serializer would, if that is an Unstructured or an
// UnstructuredList. ok is false, and into untouched, if not, or if the serializer would
// fail.
func decodeUnstructured(d *jsondec.Decoder, data []byte, into runtime.Object) (obj runtime.Object, gvk *schema.GroupVersionKind, ok bool) {
	switch into := into.(type) {
	case nil:
		m, err := d.Object(data)
		if err != nil {
			return nil, nil, false
		}
		gvk, ok := newObjectKind(m)
		if !ok {
			return nil, nil, false
		}
		return &unstructured.Unstructured{Object: m}, &gvk, true
	case *unstructured.Unstructured:
		m, err := d.Object(data)
		if err != nil {
			return nil, nil, false
		}
		gvk, ok := typeMeta(m)
		if !ok {
			return nil, nil, false
		}
		into.Object = m
		return into, &gvk, true
	case *unstructured.UnstructuredList:
		// The serializer would merge the list's fields into those it has.
		if into.Object != nil {
			return nil, nil, false
		}
		list, err := d.List(data)
		if err != nil {
			return nil, nil, false
		}
		gvk, ok := typeMeta(list.Object)
		if !ok {
			return nil, nil, false
		}
		into.Object, into.Items = list.Object, list.Items
		return into, &gvk, true
	}
	return nil, nil, false
}

// typeMeta returns the kind of the decoded object m, and whether the JSON serializer
// reads it from m's JSON without error: apiVersion, if present, is a string that
// parses, and kind is a non-empty string. A Decoder has checked that the JSON has no
// other spelling of them (jsondec.ErrAmbiguousTypeMeta).
func typeMeta(m map[string]any) (schema.GroupVersionKind, bool) {
	apiVersion, ok := m["apiVersion"].(string)
	if _, present := m["apiVersion"]; present && !ok {
		return schema.GroupVersionKind{}, false
	}
	kind, ok := m["kind"].(string)
	if !ok || kind == "" {
		return schema.GroupVersionKind{}, false
	}
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return schema.GroupVersionKind{}, false
	}
	return gv.WithKind(kind), true
}

// decoderPool hands out jsondec.Decoders, so that the informers decode concurrently,
// each with a Decoder of its own, and the Decoders keep their intern tables between
// decodes. A sync.Pool would drop them at every other garbage collection, and their
// strings would be copied again.
//
// A Decoder comes out of get with its per-use settings (DropManagedFields, CBORPrefix,
// Rewrite) zero, whatever its last user left in them: each use sets those it needs, and
// no client sees another's. Its intern table serves them all: interned strings are
// immutable, and shared by the objects of every client and cluster alike.
type decoderPool chan *jsondec.Decoder

// decoders is the pool of the clients of this package, of every cluster: the process
// keeps one set of Decoders and intern tables, not one per client. A Decoder is busy for
// one response or event at a time, so more than two per CPU would rarely all be in use;
// more are made when needed, and dropped when given back.
var decoders = newDecoderPool(2 * goruntime.GOMAXPROCS(0))

// newDecoderPool returns a pool that keeps up to n Decoders.
func newDecoderPool(n int) decoderPool {
	return make(decoderPool, n)
}

func (p decoderPool) get() *jsondec.Decoder {
	select {
	case d := <-p:
		d.DropManagedFields, d.CBORPrefix, d.Rewrite = false, nil, nil
		return d
	default:
		return new(jsondec.Decoder)
	}
}

func (p decoderPool) put(d *jsondec.Decoder) {
	select {
	case p <- d:
	default:
	}
}
