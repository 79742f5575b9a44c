package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// TypeMeta and ObjectMeta are the summary: apiVersion, kind, and the metadata name,
	// namespace, uid, resourceVersion, creationTimestamp and labels, through which
	// selectors, the search index and the view read the object (meta.Accessor). It is
	// what the search index keeps of the object, so both share it.
	metav1.TypeMeta
	metav1.ObjectMeta
	// labels are the labels' keys and values in turn, sorted by key (ObjectMeta.Labels
	// is nil: a map of a few labels takes about twice their pairs); GetLabels returns
	// them as a map, labelsOf reads them in place.
	labels []string
	// images are, for resources with a pod spec, its containers' distinct images, as
	// search.Images reads them (search.ImageLister).
	images []string
	// data is the encoding, shared with the fleet; never modified.
	data []byte
}

var (
	_ runtime.Object     = (*compactObject)(nil)
	_ metav1.Object      = (*compactObject)(nil)
	_ search.ImageLister = (*compactObject)(nil)
)

// DeepCopyObject returns o: it is immutable.
func (o *compactObject) DeepCopyObject() runtime.Object { return o }

// GetLabels returns the labels as a new map, nil if there are none.
func (o *compactObject) GetLabels() map[string]string {
	if len(o.labels) == 0 {
		return nil
	}
	m := make(map[string]string, len(o.labels)/2)
	for i := 0; i < len(o.labels); i += 2 {
		m[o.labels[i]] = o.labels[i+1]
	}
	return m
}

// pairLabels are a compactObject's labels as labels.Labels, read in place.
type pairLabels []string

// Lookup returns the value of key and whether the labels have it.
func (l pairLabels) Lookup(key string) (string, bool) {
	lo, hi := 0, len(l)/2
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l[2*m] < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(l)/2 && l[2*lo] == key {
		return l[2*lo+1], true
	}
	return "", false
}

func (l pairLabels) Has(key string) bool { _, ok := l.Lookup(key); return ok }
func (l pairLabels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// ContainerImages returns the images of the object's pod spec.
func (o *compactObject) ContainerImages() []string { return o.images }

// unstructured returns the summary as an unstructured object: what stands for the
// object where its encoding fails to decode.
func (o *compactObject) unstructured() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if o.APIVersion != "" {
		u.SetAPIVersion(o.APIVersion)
	}
	if o.Kind != "" {
		u.SetKind(o.Kind)
	}
	u.SetNamespace(o.Namespace)
	u.SetName(o.Name)
	u.SetUID(o.UID)
	u.SetResourceVersion(o.ResourceVersion)
	u.SetCreationTimestamp(o.CreationTimestamp)
	u.SetLabels(o.GetLabels())
	return u
}

// summaryKeys are the metadata fields that a summary keeps, in the order of the fields
// of compactObject that build sets, creationTimestamp last.
var summaryKeys = [...]string{"name", "namespace", "uid", "resourceVersion", "creationTimestamp"}

// creationTimestamp is the index of creationTimestamp in summaryKeys.
const creationTimestamp = len(summaryKeys) - 1

// newCompactObject returns the compactObject of u, a full object of resource gr whose
// encoding is data. u is not modified, and the summary shares no memory with it (see
// summary.build).
func newCompactObject(gr schema.GroupResource, u *unstructured.Unstructured, data []byte) *compactObject {
	var sum summary
	text := func(v any) ([]byte, bool) {
		s, ok := v.(string)
		return []byte(s), ok
	}
	src, _ := u.Object["metadata"].(map[string]any)
	for i, k := range summaryKeys {
		sum.meta[i], sum.has[i] = text(src[k])
	}
	if labels, ok := src["labels"].(map[string]any); ok {
		for k, v := range labels {
			if v, ok := text(v); ok {
				sum.labels = append(sum.labels, []byte(k), v)
			}
		}
	}
	sum.apiVersion, _ = text(u.Object["apiVersion"])
	sum.kind, _ = text(u.Object["kind"])
	for _, img := range search.Images(gr, u) {
		sum.images = append(sum.images, []byte(img))
	}
	return sum.build(data)
}

// summary is what a compactObject's summary holds, read from a decoded object
// (newCompactObject) or from the encoding (summarizeCBOR, whose texts are the
// encoding's bytes).
type summary struct {
	apiVersion, kind []byte
	// meta are the values of summaryKeys, where has says the object has them (as
	// strings).
	meta [len(summaryKeys)][]byte
	has  [len(summaryKeys)]bool
	// labels are the labels' keys and values, in turn.
	labels [][]byte
	// images are the distinct images of the pod spec, as search.Images returns them.
	images [][]byte
}

// build returns the compactObject of the summary of an object encoded in data. The
// summary's strings are copied into one allocation, so that it does not keep alive,
// here and there, the pages of the objects or encodings it was read from (which made
// the RSS of a compact daemon twice its heap).
func (sum *summary) build(data []byte) *compactObject {
	sum.labels = sortPairs(sum.labels)
	var a textArena
	for i, v := range sum.meta {
		if sum.has[i] && i != creationTimestamp {
			a.add(v)
		}
	}
	for _, t := range sum.labels {
		a.add(t)
	}
	a.add(sum.apiVersion)
	a.add(sum.kind)
	for _, t := range sum.images {
		a.add(t)
	}
	a.seal()

	co := &compactObject{data: data}
	fields := [...]*string{&co.Name, &co.Namespace, (*string)(&co.UID), &co.ResourceVersion}
	for i, f := range fields {
		if sum.has[i] {
			*f = a.next()
		}
	}
	if sum.has[creationTimestamp] {
		// As unstructured's GetCreationTimestamp reads it: the zero time if it does not
		// parse.
		_ = co.CreationTimestamp.UnmarshalQueryParameter(string(sum.meta[creationTimestamp]))
	}
	if len(sum.labels) > 0 {
		co.labels = make([]string, len(sum.labels))
		for i := range co.labels {
			co.labels[i] = a.next()
		}
	}
	co.APIVersion, co.Kind = a.next(), a.next()
	if len(sum.images) > 0 {
		co.images = make([]string, len(sum.images))
		for i := range co.images {
			co.images[i] = a.next()
		}
	}
	return co
}

// sortPairs sorts keys and values in turn by key, keeping each value after its key,
// and returns them with only the last of a repeated key, as a map made of them in order
// would hold.
func sortPairs(kv [][]byte) [][]byte {
	// Insertion sort, stable: objects have a few labels.
	for i := 2; i < len(kv); i += 2 {
		for j := i; j > 0 && string(kv[j]) < string(kv[j-2]); j -= 2 {
			kv[j], kv[j+1], kv[j-2], kv[j-1] = kv[j-2], kv[j-1], kv[j], kv[j+1]
		}
	}
	out := kv[:0]
	for i := 0; i < len(kv); i += 2 {
		if i+2 < len(kv) && string(kv[i+2]) == string(kv[i]) {
			continue
		}
		out = append(out, kv[i], kv[i+1])
	}
	return out
}

// textArena copies texts into one string: add each, seal, then next hands out their
// copies in the order they were added.
type textArena struct {
	b    []byte
	ends []int
	buf  string
	i    int
}

func (a *textArena) add(t []byte) {
	a.b = append(a.b, t...)
	a.ends = append(a.ends, len(a.b))
}

func (a *textArena) seal() { a.buf = string(a.b) }

func (a *textArena) next() string {
	start := 0
	if a.i > 0 {
		start = a.ends[a.i-1]
	}
	a.i++
	return a.buf[start:a.ends[a.i-1]]
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
		obj = co.unstructured()
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

// summarizeCBOR returns the compactObject of the object of gr encoded in data, its
// summary read from the CBOR without decoding the object, as newCompactObject would
// make it from the decoded object. ok is false if data is not a CBOR map of the form
// that persist.Codec writes for an unstructured object (with string keys, definite
// lengths, no more than maxCBORDepth deep), or if a member that the summary reads is
// repeated; the caller then decodes the object.
func summarizeCBOR(gr schema.GroupResource, data []byte) (_ *compactObject, ok bool) {
	r := summaryReader{cborCursor{data: data}}
	if len(data) > 0 && data[0] == formatUnstructuredV1 {
		r.off = 1
	}
	if !r.nextIs(cborMap) {
		return nil, false
	}
	var sum summary
	specPath, withImages := search.PodSpecPath(gr)
	var seenAPIVersion, seenKind, seenMD, seenSpec bool
	ok = r.entries(1, func(k []byte) bool {
		var ok bool
		switch {
		case string(k) == "apiVersion":
			sum.apiVersion, _, ok = r.once(&seenAPIVersion)
			return ok
		case string(k) == "kind":
			sum.kind, _, ok = r.once(&seenKind)
			return ok
		case string(k) == "metadata":
			return r.first(&seenMD) && r.metadata(&sum)
		case withImages && string(k) == specPath[0]:
			return r.first(&seenSpec) && r.images(&sum, specPath[1:], 1)
		}
		return r.skip(1)
	})
	if !ok || r.off != len(data) {
		return nil, false
	}
	return sum.build(data), true
}

// containerLists are the lists of containers of a pod spec, in the order in which
// search.Images reads them.
var containerLists = [...]string{"initContainers", "containers", "ephemeralContainers"}

// summaryReader reads what a summary holds from the CBOR of an object. The texts it
// returns are the bytes of the CBOR.
type summaryReader struct{ cborCursor }

// entries reads a map at depth depth, calling f with the key of each entry, which reads
// or skips its value and reports whether the map is still in the form that
// summarizeCBOR reads. Anything but a map is skipped.
func (r *summaryReader) entries(depth int, f func(key []byte) bool) bool {
	if !r.nextIs(cborMap) {
		return r.skip(depth)
	}
	_, _, n, ok := r.head()
	// Each entry takes at least two bytes.
	if !ok || n > uint64(len(r.data)-r.off)/2 {
		return false
	}
	for range n {
		k, ok := r.key()
		if !ok || !f(k) {
			return false
		}
	}
	return true
}

// first reports whether a member is met for the first time, and marks it met.
func (r *summaryReader) first(seen *bool) bool {
	if *seen {
		return false
	}
	*seen = true
	return true
}

// once reads the value of a member, which must be met for the first time (seen), as
// maybeString.
func (r *summaryReader) once(seen *bool) (s []byte, isStr, ok bool) {
	if !r.first(seen) {
		return nil, false, false
	}
	return r.maybeString()
}

// maybeString reads the next item: a string (isStr), or anything else, skipped.
func (r *summaryReader) maybeString() (s []byte, isStr, ok bool) {
	if r.nextIs(cborBytes) || r.nextIs(cborText) {
		b, ok := r.key()
		return b, ok, ok
	}
	return nil, false, r.skip(1)
}

// skip goes over the item at r.off, at depth depth.
func (r *summaryReader) skip(depth int) bool {
	if depth > maxCBORDepth {
		return false
	}
	major, _, arg, ok := r.head()
	if !ok {
		return false
	}
	switch major {
	case cborUint, cborNegint, cborSimple:
		return true
	case cborBytes, cborText:
		if arg > uint64(len(r.data)-r.off) {
			return false
		}
		r.off += int(arg)
		return true
	case cborArray, cborMap:
		items := arg
		if major == cborMap {
			if arg > uint64(len(r.data)-r.off)/2 {
				return false
			}
			items *= 2
		}
		if items > uint64(len(r.data)-r.off) {
			return false
		}
		for range items {
			if !r.skip(depth + 1) {
				return false
			}
		}
		return true
	default: // tags, which persist.Codec does not write
		return false
	}
}

// metadata reads the metadata's map into sum.
func (r *summaryReader) metadata(sum *summary) bool {
	var seenLabels bool
	return r.entries(1, func(k []byte) bool {
		if i := slices.Index(summaryKeys[:], string(k)); i >= 0 {
			var ok bool
			sum.meta[i], sum.has[i], ok = r.once(&sum.has[i])
			return ok
		}
		if string(k) != "labels" {
			return r.skip(2)
		}
		return r.first(&seenLabels) && r.entries(2, func(k []byte) bool {
			v, isStr, ok := r.maybeString()
			if isStr {
				sum.labels = append(sum.labels, k, v)
			}
			return ok
		})
	})
}

// images reads the value of a member on the way to the pod spec (path is what remains
// of the way) and, at the pod spec, its containers' images into sum, as search.Images
// reads them: the distinct images of the init containers, the containers and the
// ephemeral containers, in that order.
func (r *summaryReader) images(sum *summary, path []string, depth int) bool {
	var lists [len(containerLists)][][]byte
	ok := r.entries(depth, func(k []byte) bool {
		if len(path) > 0 {
			if string(k) == path[0] {
				return r.images(sum, path[1:], depth+1)
			}
			return r.skip(depth + 1)
		}
		if i := slices.Index(containerLists[:], string(k)); i >= 0 {
			var ok bool
			lists[i], ok = r.containerImages(depth + 1)
			return ok
		}
		return r.skip(depth + 1)
	})
	for _, l := range lists {
		for _, img := range l {
			if len(img) > 0 && !slices.ContainsFunc(sum.images, func(o []byte) bool { return string(o) == string(img) }) {
				sum.images = append(sum.images, img)
			}
		}
	}
	return ok
}

// containerImages reads a list of containers and returns the images of those that
// have one.
func (r *summaryReader) containerImages(depth int) ([][]byte, bool) {
	if !r.nextIs(cborArray) {
		return nil, r.skip(depth)
	}
	_, _, n, ok := r.head()
	if !ok || n > uint64(len(r.data)-r.off) {
		return nil, false
	}
	var out [][]byte
	for range n {
		ok := r.entries(depth+1, func(k []byte) bool {
			if string(k) != "image" {
				return r.skip(depth + 2)
			}
			img, isStr, ok := r.maybeString()
			if isStr {
				out = append(out, img)
			}
			return ok
		})
		if !ok {
			return nil, false
		}
	}
	return out, true
}
