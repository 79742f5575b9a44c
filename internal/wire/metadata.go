package wire

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/metaenc"
)

// The clients of NewPartialMetadataClients list and watch the metadata of objects, as
// client-go's metadata client does: they ask the server for meta.k8s.io/v1
// PartialObjectMetadata(List), in protobuf where the request's context says so
// (WithProtobuf with MetadataKind), which pbjson transcodes, otherwise in JSON. Their
// watched objects are then decoded as those of NewPartialDynamicClients are, into a
// partial object and an encoding, without a typed or an unstructured object being built
// for them; the encoding is package metaenc's (CompactMetadataFormat), or, where that
// cannot hold the object exactly (managedFields kept, a member it does not know),
// MetadataFormat and then the CBOR of the PartialObjectMetadata's map.

// MetadataFormat is the first byte of the encoding of a metadata object that the clients
// of NewPartialMetadataClients return: the CBOR of its map follows, in the format of
// jsondec's ObjectCBOR, with the apiVersion and kind of the PartialObjectMetadata
// (meta.k8s.io/v1) that the server sent. It is package persist's format 3, which
// decodes to a *metav1.PartialObjectMetadata without TypeMeta, as client-go's metadata
// client returns it (DecodeEncoded).
const MetadataFormat byte = 3

// CompactMetadataFormat is the first byte of the encoding of a metadata object in
// package metaenc's short encoding, which the clients of NewPartialMetadataClients
// return where it holds the object exactly: package persist's format 4, which decodes to
// the same *metav1.PartialObjectMetadata as the object's MetadataFormat encoding.
const CompactMetadataFormat = metaenc.Format

// MetadataKind is the kind of the objects that the clients of NewPartialMetadataClients
// ask for: the one to give WithProtobuf for their requests.
var MetadataKind = metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")

// metadataPrefix is what the Decoders of the metadata clients write before the CBOR.
var metadataPrefix = []byte{MetadataFormat}

// NewPartialMetadataClients returns the dynamic clients of NewPartialDynamicClients for
// the metadata of objects: their lists and watches (not their other requests) ask for
// PartialObjectMetadataList and PartialObjectMetadata, as client-go's metadata client
// does. The objects of watch events come partial, their encodings in MetadataFormat; the
// items of lists come as Unstructured objects of kind PartialObjectMetadata. An object
// of another kind (a server that ignores the request's kind) comes whole, an Unstructured
// without encoding.
func NewPartialMetadataClients(cfg *rest.Config) (drop, keep *Client, err error) {
	return newDynamicClients(cfg, true, true, true)
}

// NewMetadataClient returns client-go's metadata client for cfg, as
// metadata.NewForConfig makes it, and the Watcher of its watches, which shares its HTTP
// client: their objects are *metav1.PartialObjectMetadata, decoded by client-go.
func NewMetadataClient(cfg *rest.Config) (metadata.Interface, *Watcher, error) {
	config := metadata.ConfigFor(cfg)
	h, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, nil, err
	}
	md, err := metadata.NewForConfigAndClient(config, h)
	if err != nil {
		return nil, nil, err
	}
	// The RESTClient of md, as metadata.NewForConfigAndClient makes it.
	config.GroupVersion = &schema.GroupVersion{}
	config.APIPath = "/this-value-should-never-be-sent"
	rc, err := rest.RESTClientForConfigAndClient(config, h)
	if err != nil {
		return nil, nil, err
	}
	return md, NewWatcher(rc, config.NegotiatedSerializer, schema.GroupVersion{}, acceptMetadata(true, true)), nil
}

// acceptMetadata is the Accept header of client-go's metadata client for a list, or
// with watch for a watch, with protobuf first if protobuf is set.
func acceptMetadata(watch, protobuf bool) string {
	as := ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
	if watch {
		as = ";as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	}
	accept := runtime.ContentTypeJSON + as + "," + runtime.ContentTypeJSON
	if protobuf {
		accept = contentTypeProtobuf + as + "," + accept
	}
	return accept
}

// decodeMetadata is decodeEncoded for the clients of NewPartialMetadataClients: the
// encoding of a PartialObjectMetadata starts with MetadataFormat, and an object of
// another kind is decoded whole, without its encoding, for the informer to take its
// metadata.
func decodeMetadata(d *jsondec.Decoder, data []byte, partial bool) (runtime.Object, *schema.GroupVersionKind, bool) {
	d.CBORPrefix, d.Rewrite = metadataPrefix, compactMetadata
	obj, gvk, ok := decodeEncoded(d, data, partial)
	d.CBORPrefix, d.Rewrite = nil, nil
	if !ok || *gvk == MetadataKind {
		return obj, gvk, ok
	}
	e, ok := obj.(*EncodedObject)
	if !ok {
		return obj, gvk, true
	}
	if !e.Partial {
		return e.Unstructured, gvk, true
	}
	m, err := d.Object(data)
	if err != nil {
		return nil, nil, false
	}
	return &unstructured.Unstructured{Object: m}, gvk, true
}

// compactMetadata is the Rewrite of the Decoders of the metadata clients: the
// CompactMetadataFormat encoding of a MetadataFormat one, where metaenc can write it.
func compactMetadata(cbor []byte) ([]byte, bool) {
	if len(cbor) == 0 || cbor[0] != MetadataFormat {
		return nil, false
	}
	return metaenc.Compact(cbor[1:])
}

// DecodeEncoded decodes an encoding that the clients of this package return (the
// Encoded of an EncodedObject): the CBOR of an object's map into an Unstructured, or, if
// it starts with MetadataFormat or CompactMetadataFormat, a PartialObjectMetadata into a
// *metav1.PartialObjectMetadata without TypeMeta.
func DecodeEncoded(encoded []byte) (runtime.Object, error) {
	if len(encoded) > 0 && encoded[0] == CompactMetadataFormat {
		return metaenc.Decode(encoded)
	}
	if len(encoded) > 0 && encoded[0] == MetadataFormat {
		p := new(metav1.PartialObjectMetadata)
		if err := direct.Unmarshal(encoded[1:], p); err != nil {
			return nil, fmt.Errorf("decoding object metadata: %w", err)
		}
		p.TypeMeta = metav1.TypeMeta{}
		return p, nil
	}
	var m map[string]any
	if err := direct.Unmarshal(encoded, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}
