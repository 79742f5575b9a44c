package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	src, _ := u.Object["metadata"].(map[string]any)
	for i, k := range summaryKeys {
		sum.meta[i], sum.has[i] = src[k].(string)
	}
	if labels, ok := src["labels"].(map[string]any); ok {
		sum.hasLabels = true
		for k, v := range labels {
			if v, ok := v.(string); ok {
				sum.labels = append(sum.labels, k, v)
			}
		}
	}
	sum.apiVersion, _ = u.Object["apiVersion"].(string)
	sum.kind, _ = u.Object["kind"].(string)
	if _, ok := search.PodSpecPath(gr); ok {
		sum.images = search.Images(gr, u)
	}
	return sum.build(data)
}

// summary is what a compactObject's summary holds, read from a decoded object
// (newCompactObject) or from the encoding (summarizeCBOR).
type summary struct {
	apiVersion, kind string
	// meta are the values of summaryKeys, where has says the object has them (as
	// strings).
	meta [len(summaryKeys)]string
	has  [len(summaryKeys)]bool
	// labels are the labels' keys and values, in turn; hasLabels says the object has
	// a labels map, maybe empty.
	labels    []string
	hasLabels bool
	// images are the distinct images of the pod spec, as search.Images returns them.
	images []string
}

// build returns the compactObject of the summary of an object of gr encoded in data.
// The summary's strings are copied into one allocation, so that it does not keep
// alive, here and there, the pages of the objects or encodings it was read from (which
// made the RSS of a compact daemon twice its heap).
func (sum *summary) build(data []byte) *compactObject {
	sum.labels = sortPairs(sum.labels)
	texts := make([]string, 0, len(summaryKeys)+len(sum.labels)+2+len(sum.images))
	for i, v := range sum.meta {
		if sum.has[i] && i != creationTimestamp {
			texts = append(texts, v)
		}
	}
	texts = append(texts, sum.labels...)
	texts = append(texts, sum.apiVersion, sum.kind)
	texts = append(texts, sum.images...)
	a := newStringArena(texts)

	co := &compactObject{data: data}
	fields := [...]*string{&co.Name, &co.Namespace, (*string)(&co.UID), &co.ResourceVersion}
	for i, f := range fields {
		if sum.has[i] {
			*f = a.copy(sum.meta[i])
		}
	}
	if sum.has[creationTimestamp] {
		// As unstructured's GetCreationTimestamp reads it: the zero time if it does not
		// parse.
		_ = co.CreationTimestamp.UnmarshalQueryParameter(sum.meta[creationTimestamp])
	}
	if len(sum.labels) > 0 {
		co.labels = make([]string, len(sum.labels))
		for i, t := range sum.labels {
			co.labels[i] = a.copy(t)
		}
	}
	co.APIVersion, co.Kind = a.copy(sum.apiVersion), a.copy(sum.kind)
	if len(sum.images) > 0 {
		co.images = make([]string, len(sum.images))
		for i, img := range sum.images {
			co.images[i] = a.copy(img)
		}
	}
	return co
}

// sortPairs sorts keys and values in turn by key, keeping each value after its key,
// and returns them with only the last of a repeated key, as a map made of them in order
// would hold.
func sortPairs(kv []string) []string {
	// Insertion sort, stable: objects have a few labels.
	for i := 2; i < len(kv); i += 2 {
		for j := i; j > 0 && kv[j] < kv[j-2]; j -= 2 {
			kv[j], kv[j+1], kv[j-2], kv[j-1] = kv[j-2], kv[j-1], kv[j], kv[j+1]
		}
	}
	out := kv[:0]
	for i := 0; i < len(kv); i += 2 {
		if i+2 < len(kv) && kv[i+2] == kv[i] {
			continue
		}
		out = append(out, kv[i], kv[i+1])
	}
	return out
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
	n, ok := r.mapHead()
	if !ok {
		return nil, false
	}
	var seenAPIVersion, seenKind, seenMD, seenSpec bool
	for range n {
		k, ok := r.key()
		if !ok {
			return nil, false
		}
		switch {
		case string(k) == "apiVersion" || string(k) == "kind":
			p, seen := &sum.apiVersion, &seenAPIVersion
			if string(k) == "kind" {
				p, seen = &sum.kind, &seenKind
			}
			if *seen {
				return nil, false
			}
			*seen = true
			s, _, ok := r.maybeString()
			if !ok {
				return nil, false
			}
			*p = s
		case string(k) == "metadata":
			if seenMD {
				return nil, false
			}
			seenMD = true
			if !r.nextIs(cborMap) {
				if !r.skip(1) {
					return nil, false
				}
				continue
			}
			if !r.metadata(&sum) {
				return nil, false
			}
		case withImages && string(k) == specPath[0]:
			if seenSpec {
				return nil, false
			}
			seenSpec = true
			if !r.images(&sum, specPath[1:], 1) {
				return nil, false
			}
		default:
			if !r.skip(1) {
				return nil, false
			}
		}
	}
	if r.off != len(data) {
		return nil, false
	}
	return sum.build(data), true
}

// containerLists are the lists of containers of a pod spec, in the order in which
// search.Images reads them.
var containerLists = [...]string{"initContainers", "containers", "ephemeralContainers"}

// summaryReader reads what a summary holds from the CBOR of an object.
type summaryReader struct{ cborCursor }

// mapHead reads the head of a map and returns its number of entries.
func (r *summaryReader) mapHead() (uint64, bool) {
	major, _, n, ok := r.head()
	// Each entry takes at least two bytes.
	return n, ok && major == cborMap && n <= uint64(len(r.data)-r.off)/2
}

// maybeString reads the next item: a string (isStr), or anything else, skipped.
func (r *summaryReader) maybeString() (s string, isStr, ok bool) {
	if r.nextIs(cborBytes) || r.nextIs(cborText) {
		b, ok := r.key()
		return string(b), ok, ok
	}
	return "", false, r.skip(1)
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
	n, ok := r.mapHead()
	if !ok {
		return false
	}
	for range n {
		k, ok := r.key()
		if !ok {
			return false
		}
		i := slices.Index(summaryKeys[:], string(k))
		switch {
		case i >= 0:
			if sum.has[i] {
				return false
			}
			s, isStr, ok := r.maybeString()
			if !ok {
				return false
			}
			sum.meta[i], sum.has[i] = s, isStr
		case string(k) == "labels":
			if sum.hasLabels {
				return false
			}
			if !r.nextIs(cborMap) {
				if !r.skip(2) {
					return false
				}
				continue
			}
			sum.hasLabels = true
			if !r.labels(sum) {
				return false
			}
		default:
			if !r.skip(2) {
				return false
			}
		}
	}
	return true
}

// labels reads the labels' map into sum.
func (r *summaryReader) labels(sum *summary) bool {
	n, ok := r.mapHead()
	if !ok {
		return false
	}
	for range n {
		k, ok := r.key()
		if !ok {
			return false
		}
		v, isStr, ok := r.maybeString()
		if !ok {
			return false
		}
		if isStr {
			sum.labels = append(sum.labels, string(k), v)
		}
	}
	return true
}

// images reads the value of a member on the way to the pod spec (path is what remains
// of the way) and, at the pod spec, its containers' images into sum, as search.Images
// reads them: the distinct images of the init containers, the containers and the
// ephemeral containers, in that order.
func (r *summaryReader) images(sum *summary, path []string, depth int) bool {
	if !r.nextIs(cborMap) {
		return r.skip(depth)
	}
	n, ok := r.mapHead()
	if !ok {
		return false
	}
	var lists [len(containerLists)][]string
	for range n {
		k, ok := r.key()
		if !ok {
			return false
		}
		list := -1
		if len(path) == 0 {
			list = slices.Index(containerLists[:], string(k))
		}
		switch {
		case len(path) > 0 && string(k) == path[0]:
			ok = r.images(sum, path[1:], depth+1)
		case list >= 0:
			lists[list], ok = r.containerImages(depth + 1)
		default:
			ok = r.skip(depth + 1)
		}
		if !ok {
			return false
		}
	}
	for _, l := range lists {
		for _, img := range l {
			if img != "" && !slices.Contains(sum.images, img) {
				sum.images = append(sum.images, img)
			}
		}
	}
	return true
}

// containerImages reads a list of containers and returns the images of those that
// have one.
func (r *summaryReader) containerImages(depth int) ([]string, bool) {
	if !r.nextIs(cborArray) {
		return nil, r.skip(depth)
	}
	_, _, n, ok := r.head()
	if !ok || n > uint64(len(r.data)-r.off) {
		return nil, false
	}
	var out []string
	for range n {
		if !r.nextIs(cborMap) {
			if !r.skip(depth + 1) {
				return nil, false
			}
			continue
		}
		m, ok := r.mapHead()
		if !ok {
			return nil, false
		}
		for range m {
			k, ok := r.key()
			if !ok {
				return nil, false
			}
			if string(k) != "image" {
				if !r.skip(depth + 2) {
					return nil, false
				}
				continue
			}
			img, isStr, ok := r.maybeString()
			if !ok {
				return nil, false
			}
			if isStr {
				out = append(out, img)
			}
		}
	}
	return out, true
}
