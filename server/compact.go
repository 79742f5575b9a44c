package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/search"
)

// Under a compact fleet (aggregate.Options.Codec), the watch cache keeps each full
// object as a *compactObject: the fleet's own encoding of it (Event.Encoded, the same
// bytes the fleet holds, so the server adds no copy of the object) and a summary of it.
// Lists, gets and watches write their JSON from the encoding (cborjson.go) when the
// Codec's encodings are CBOR maps (cborCodec), else from the object decoded at the
// write; label selectors, namespaces, names, kinds and the search index read the
// summary; Tables, PartialObjectMetadata, field selectors on other fields and the CRDs
// read for printer columns decode the object on demand (object.full). Metadata-only
// objects are small and kept decoded, as under a plain fleet.

// cborCodec is implemented by Codecs whose encodings of unstructured objects are CBOR
// maps that appendServedCBOR reads (persist.Codec).
type cborCodec interface{ CBORMaps() bool }

// compactObject is a full object of the watch cache of a compact fleet. It is
// immutable.
type compactObject struct {
	// Unstructured is the summary: apiVersion, kind, and the metadata name, namespace,
	// uid, resourceVersion, creationTimestamp and labels; for resources with a pod spec,
	// also their containers' images where search.Images reads them. It is what the
	// search index keeps of the object, so both share it.
	*unstructured.Unstructured
	// data is the encoding, shared with the fleet; never modified.
	data []byte
}

var _ runtime.Object = (*compactObject)(nil)

// DeepCopyObject returns o: it is immutable.
func (o *compactObject) DeepCopyObject() runtime.Object { return o }

// summaryKeys are the metadata fields that a summary keeps.
var summaryKeys = []string{"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}

// newCompactObject returns the compactObject of u, a full object of resource gr whose
// encoding is data. u is not modified, and the summary shares no memory with it: its
// strings are copied into one allocation, so that a summary does not keep alive, here
// and there, the pages of the decoded objects it was made from (which made the RSS
// of a compact daemon twice its heap).
func newCompactObject(gr schema.GroupResource, u *unstructured.Unstructured, data []byte) *compactObject {
	src, _ := u.Object["metadata"].(map[string]any)
	var texts []string
	for _, k := range summaryKeys {
		if v, ok := src[k].(string); ok {
			texts = append(texts, v)
		}
	}
	labels, _ := src["labels"].(map[string]any)
	var pairs []string // the labels' keys and values, in the order copy takes them
	for k, v := range labels {
		if v, ok := v.(string); ok {
			pairs = append(pairs, k, v)
		}
	}
	texts = append(texts, pairs...)
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := u.Object[k].(string); ok {
			texts = append(texts, v)
		}
	}
	var images []string
	path, withImages := search.PodSpecPath(gr)
	if withImages {
		images = search.Images(gr, u)
		texts = append(texts, images...)
	}
	a := newStringArena(texts)

	md := make(map[string]any, len(summaryKeys)+1)
	for _, k := range summaryKeys {
		if v, ok := src[k].(string); ok {
			md[k] = a.copy(v)
		}
	}
	if labels != nil {
		ls := make(map[string]any, len(pairs)/2)
		for i := 0; i < len(pairs); i += 2 {
			k := a.copy(pairs[i])
			ls[k] = a.copy(pairs[i+1])
		}
		md["labels"] = ls
	}
	top := map[string]any{"metadata": md}
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := u.Object[k].(string); ok {
			top[k] = a.copy(v)
		}
	}
	if len(images) > 0 {
		containers := make([]any, len(images))
		for i, img := range images {
			containers[i] = map[string]any{"image": a.copy(img)}
		}
		_ = unstructured.SetNestedField(top, map[string]any{"containers": containers}, path...)
	}
	return &compactObject{Unstructured: &unstructured.Unstructured{Object: top}, data: data}
}

// stringArena hands out copies of strings that share one allocation.
type stringArena struct {
	buf string
	off int
}

// newStringArena returns an arena with the room for texts, which copy takes in order.
func newStringArena(texts []string) *stringArena {
	var b strings.Builder
	for _, t := range texts {
		b.WriteString(t)
	}
	return &stringArena{buf: b.String()}
}

// copy returns the copy of s, which must be the next of the arena's texts.
func (a *stringArena) copy(s string) string {
	if a.off+len(s) > len(a.buf) || a.buf[a.off:a.off+len(s)] != s {
		return strings.Clone(s) // never: the texts are taken in order
	}
	out := a.buf[a.off : a.off+len(s)]
	a.off += len(s)
	return out
}

// full returns o with its object decoded, if it is a compactObject. An encoding that
// fails to decode, which a Codec that holds its contract never makes, is logged, and
// the summary stands for the object.
func (o object) full() object {
	co, ok := o.obj.(*compactObject)
	if !ok || o.codec == nil {
		return o
	}
	obj, err := o.codec.Decode(co.data)
	if err != nil {
		klog.ErrorS(err, "Decoding a cached object failed; serving its summary", "cluster", o.cluster, "namespace", co.GetNamespace(), "name", co.GetName())
		obj = co.Unstructured
	}
	return object{cluster: o.cluster, obj: obj}
}

// encodedServed is a compactObject as served returns it: what JSON it is written as is
// decided at the write, from the encoding. It is immutable.
type encodedServed struct {
	target servedTarget
	data   []byte
	codec  aggregate.Codec
	res    *apiResource
}

var (
	_ runtime.Object = (*encodedServed)(nil)
	_ json.Marshaler = (*encodedServed)(nil)
)

func (*encodedServed) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (e *encodedServed) DeepCopyObject() runtime.Object { return e }

// MarshalJSON returns the object's JSON, as appendJSON.
func (e *encodedServed) MarshalJSON() ([]byte, error) { return e.appendJSON(nil) }

// cborWriters are the writers of appendJSON, each with its scratch space.
var cborWriters = sync.Pool{New: func() any { return new(cborJSON) }}

// appendJSON appends the JSON of the served object: written from the CBOR where the
// Codec's encodings are CBOR maps and the encoding is in the subset cborJSON reads, else
// from the object decoded, through served; the bytes are the same either way. An
// encoding that fails to decode gives the Codec's error.
func (e *encodedServed) appendJSON(b []byte) ([]byte, error) {
	if c, ok := e.codec.(cborCodec); ok && c.CBORMaps() {
		w := cborWriters.Get().(*cborJSON)
		out, ok := w.appendServedCBOR(b, e.data, e.target)
		cborWriters.Put(w)
		if ok {
			return out, nil
		}
	}
	obj, err := e.codec.Decode(e.data)
	if err != nil {
		return b, fmt.Errorf("decoding the cached object to serve it: %w", err)
	}
	if _, ok := obj.(*compactObject); ok {
		return b, fmt.Errorf("decoding the cached object to serve it: the Codec returned %T", obj)
	}
	return appendItem(b, served(e.res, object{cluster: e.target.cluster, obj: obj}, e.target.rv))
}
