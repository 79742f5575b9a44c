package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
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
// maps that appendServedCBOR and readSummaryCBOR read (persist.Codec), once expanded:
// Expand returns data itself, or the CBOR that a compressed encoding holds, in dst's
// memory where it has room.
type cborCodec interface {
	CBORMaps() bool
	Expand(dst, data []byte) ([]byte, error)
}

// expandBuffers are the scratch space of the summaries read from compressed encodings.
var expandBuffers = sync.Pool{New: func() any { return new([]byte) }}

// keepExpanded is the largest scratch space kept for expanding encodings.
const keepExpanded = 1 << 20

// summarizeEncoded returns the compactObject of data, an encoding of c, its summary
// read from the CBOR (readSummaryCBOR, of data expanded). ok is false where the caller
// is to decode the object instead.
func summarizeEncoded(c cborCodec, gr schema.GroupResource, data []byte) (_ *compactObject, ok bool) {
	sum, ok := readSummaryEncoded(c, gr, data)
	if !ok {
		return nil, false
	}
	return withSummary(data, sum), true
}

// readSummaryEncoded is summarizeEncoded's summary.
func readSummaryEncoded(c cborCodec, gr schema.GroupResource, data []byte) (_ *compactSummary, ok bool) {
	bp := expandBuffers.Get().(*[]byte)
	defer expandBuffers.Put(bp)
	cbor, err := c.Expand((*bp)[:0], data)
	if err != nil {
		return nil, false
	}
	keepScratch(bp, cbor, data)
	return readSummaryCBOR(gr, cbor)
}

// keepScratch keeps in *bp the memory of cbor, which Expand returned for data, for the
// next expansion: unless it is data's own (never to be written to) or large.
func keepScratch(bp *[]byte, cbor, data []byte) {
	if cap(cbor) > keepExpanded || len(cbor) == 0 || len(data) > 0 && &cbor[0] == &data[0] {
		return
	}
	*bp = cbor[:0]
}

// compactObject is a full object of the watch cache of a compact fleet. It is
// immutable: its setters panic.
//
// Its summary is what selectors, the search index and the view read of the object
// (meta.Accessor): apiVersion, kind, and the metadata name, namespace, uid,
// resourceVersion, creationTimestamp and labels, and the images of a pod spec. It is
// what the search index keeps of the object, so both share it. A daemon keeps one per
// object, so it is small: its texts are one string, and neither struct holds a field
// that it does not set (a metav1.ObjectMeta took 232 bytes, mostly empty).
//
// The view takes the objects of the fleet's events without their summary
// (lazyCompactObject): the fleet tells their namespace, name and resourceVersion
// (aggregate.Held), and the summary is read from the encoding at the first look, which
// for most objects comes after readiness (the search index is built then), not while a
// warm start's replay or a cold start's lists hold it back.
type compactObject struct {
	// data is the encoding, shared with the fleet; never modified.
	data []byte
	// sum is the summary, or until it is read, its resource's pending summary, whose
	// lazy says how to read it from data; nil for a zero compactObject.
	sum atomic.Pointer[compactSummary]
}

// compactSummary is a compactObject's summary.
type compactSummary struct {
	// text holds the summary's texts one after the other, in the order of the text*
	// constants: name, namespace, uid, resourceVersion, apiVersion, kind, then the
	// labels' keys and values in turn, sorted by key, then the images; then the end of
	// each text in text, 4 bytes each, little-endian. Empty for an empty summary.
	text string
	// lazy is set on a resource's pending summary only: the summary is still to be read.
	lazy *lazySummary
	// createdSec and createdNsec are the creationTimestamp, as time.Unix takes it;
	// createdNsec is -1 for the zero time (none, or one that does not parse).
	createdSec  int64
	createdNsec int32
	// labels counts the label pairs, images the images, in text.
	labels, images uint32
}

// emptySummary is the summary of a zero compactObject, and of an object whose encoding
// fails to decode.
var emptySummary = &compactSummary{createdNsec: -1}

// lazySummary reads the summaries of the objects of one resource from their encodings.
type lazySummary struct {
	gr    schema.GroupResource
	codec aggregate.Codec
	// pending is the summary of the objects not read yet: pending.lazy is this.
	pending *compactSummary
}

func newLazySummary(gr schema.GroupResource, codec aggregate.Codec) *lazySummary {
	l := &lazySummary{gr: gr, codec: codec}
	l.pending = &compactSummary{lazy: l, createdNsec: -1}
	return l
}

// lazyCompactObject returns the compactObject of data, whose summary l reads at the
// first look.
func (l *lazySummary) lazyCompactObject(data []byte) *compactObject {
	co := &compactObject{data: data}
	co.sum.Store(l.pending)
	return co
}

// read returns the summary of data: read from the CBOR (summarizeEncoded), or where it
// cannot be, from the object decoded. An encoding that fails to decode, which a Codec
// that holds its contract never makes, is logged and reads as an empty summary.
func (l *lazySummary) read(data []byte) *compactSummary {
	if c, ok := l.codec.(cborCodec); ok && c.CBORMaps() {
		if sum, ok := readSummaryEncoded(c, l.gr, data); ok {
			return sum
		}
	}
	obj, err := decodeShared(l.codec, data)
	u, ok := obj.(*unstructured.Unstructured)
	if err != nil || !ok {
		klog.ErrorS(err, "Decoding a cached object failed; its summary reads empty", "resource", l.gr, "type", fmt.Sprintf("%T", obj))
		return emptySummary
	}
	return summaryOf(l.gr, u).build()
}

// s returns o's summary, reading it first if it has not been.
func (o *compactObject) s() *compactSummary {
	p := o.sum.Load()
	if p == nil {
		return emptySummary
	}
	if p.lazy == nil {
		return p
	}
	sum := p.lazy.read(o.data)
	if o.sum.CompareAndSwap(p, sum) {
		return sum
	}
	return o.sum.Load()
}

// The texts of a compactObject's text, in order; the labels follow them, then the
// images.
const (
	textName = iota
	textNamespace
	textUID
	textResourceVersion
	textAPIVersion
	textKind
	textLabels
)

var (
	_ runtime.Object     = (*compactObject)(nil)
	_ metav1.Object      = (*compactObject)(nil)
	_ schema.ObjectKind  = (*compactObject)(nil)
	_ search.ImageLister = (*compactObject)(nil)
)

// at returns the i-th text of the summary.
func (o *compactSummary) at(i int) string {
	if o.text == "" {
		return ""
	}
	ends := len(o.text) - 4*(textLabels+2*int(o.labels)+int(o.images))
	end := func(i int) int {
		b := o.text[ends+4*i:]
		return int(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
	}
	start := 0
	if i > 0 {
		start = end(i - 1)
	}
	return o.text[start:end(i)]
}

// at returns the i-th text of o's summary.
func (o *compactObject) at(i int) string { return o.s().at(i) }

// DeepCopyObject returns o: it is immutable.
func (o *compactObject) DeepCopyObject() runtime.Object { return o }

// GetObjectKind returns o, whose GroupVersionKind is the object's.
func (o *compactObject) GetObjectKind() schema.ObjectKind { return o }

// GroupVersionKind returns the object's apiVersion and kind.
func (o *compactObject) GroupVersionKind() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(o.at(textAPIVersion), o.at(textKind))
}

func (o *compactObject) GetNamespace() string       { return o.at(textNamespace) }
func (o *compactObject) GetName() string            { return o.at(textName) }
func (o *compactObject) GetUID() types.UID          { return types.UID(o.at(textUID)) }
func (o *compactObject) GetResourceVersion() string { return o.at(textResourceVersion) }

// GetCreationTimestamp returns the creationTimestamp as unstructured's reads it: the
// zero time if the object has none, or one that does not parse.
func (o *compactObject) GetCreationTimestamp() metav1.Time {
	sum := o.s()
	if sum.createdNsec < 0 || sum.text == "" {
		return metav1.Time{}
	}
	return metav1.Unix(sum.createdSec, int64(sum.createdNsec))
}

// GetLabels returns the labels as a new map, nil if there are none.
func (o *compactObject) GetLabels() map[string]string {
	sum := o.s()
	if sum.labels == 0 {
		return nil
	}
	m := make(map[string]string, sum.labels)
	for i := range int(sum.labels) {
		m[sum.at(textLabels+2*i)] = sum.at(textLabels + 2*i + 1)
	}
	return m
}

// The metadata that the summary does not keep reads as absent; the summary is only read
// where these are not (object.full decodes the object for the rest).
func (o *compactObject) GetGenerateName() string                       { return "" }
func (o *compactObject) GetSelfLink() string                           { return "" }
func (o *compactObject) GetGeneration() int64                          { return 0 }
func (o *compactObject) GetDeletionTimestamp() *metav1.Time            { return nil }
func (o *compactObject) GetDeletionGracePeriodSeconds() *int64         { return nil }
func (o *compactObject) GetAnnotations() map[string]string             { return nil }
func (o *compactObject) GetFinalizers() []string                       { return nil }
func (o *compactObject) GetOwnerReferences() []metav1.OwnerReference   { return nil }
func (o *compactObject) GetManagedFields() []metav1.ManagedFieldsEntry { return nil }
func (o *compactObject) SetGroupVersionKind(schema.GroupVersionKind)   { o.immutable() }
func (o *compactObject) SetNamespace(string)                           { o.immutable() }
func (o *compactObject) SetName(string)                                { o.immutable() }
func (o *compactObject) SetGenerateName(string)                        { o.immutable() }
func (o *compactObject) SetUID(types.UID)                              { o.immutable() }
func (o *compactObject) SetResourceVersion(string)                     { o.immutable() }
func (o *compactObject) SetGeneration(int64)                           { o.immutable() }
func (o *compactObject) SetSelfLink(string)                            { o.immutable() }
func (o *compactObject) SetCreationTimestamp(metav1.Time)              { o.immutable() }
func (o *compactObject) SetDeletionTimestamp(*metav1.Time)             { o.immutable() }
func (o *compactObject) SetDeletionGracePeriodSeconds(*int64)          { o.immutable() }
func (o *compactObject) SetLabels(map[string]string)                   { o.immutable() }
func (o *compactObject) SetAnnotations(map[string]string)              { o.immutable() }
func (o *compactObject) SetFinalizers([]string)                        { o.immutable() }
func (o *compactObject) SetOwnerReferences([]metav1.OwnerReference)    { o.immutable() }
func (o *compactObject) SetManagedFields([]metav1.ManagedFieldsEntry)  { o.immutable() }

// immutable panics: the view's objects are shared, as the fleet's are (served copies
// what it changes).
func (o *compactObject) immutable() {
	panic(fmt.Sprintf("server: modifying the cached object %s/%s", o.GetNamespace(), o.GetName()))
}

// labelSet returns o's labels as labels.Labels, read in place.
func (o *compactObject) labelSet() pairLabels { return pairLabels{o.s()} }

// pairLabels are a compactObject's labels as labels.Labels, read in place.
type pairLabels struct{ o *compactSummary }

// Lookup returns the value of key and whether the labels have it.
func (l pairLabels) Lookup(key string) (string, bool) {
	n := int(l.o.labels)
	i, found := sort.Find(n, func(i int) int { return strings.Compare(key, l.o.at(textLabels+2*i)) })
	if !found {
		return "", false
	}
	return l.o.at(textLabels + 2*i + 1), true
}

func (l pairLabels) Has(key string) bool { _, ok := l.Lookup(key); return ok }
func (l pairLabels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// ContainerImages returns the images of the object's pod spec.
func (o *compactObject) ContainerImages() []string {
	sum := o.s()
	if sum.images == 0 {
		return nil
	}
	out := make([]string, sum.images)
	for i := range out {
		out[i] = sum.at(textLabels + 2*int(sum.labels) + i)
	}
	return out
}

// unstructured returns the summary as an unstructured object: what stands for the
// object where its encoding fails to decode.
func (o *compactObject) unstructured() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if v := o.at(textAPIVersion); v != "" {
		u.SetAPIVersion(v)
	}
	if k := o.at(textKind); k != "" {
		u.SetKind(k)
	}
	u.SetNamespace(o.GetNamespace())
	u.SetName(o.GetName())
	u.SetUID(o.GetUID())
	u.SetResourceVersion(o.GetResourceVersion())
	u.SetCreationTimestamp(o.GetCreationTimestamp())
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
	return withSummary(data, summaryOf(gr, u).build())
}

// withSummary returns the compactObject of data with its summary sum.
func withSummary(data []byte, sum *compactSummary) *compactObject {
	co := &compactObject{data: data}
	co.sum.Store(sum)
	return co
}

// summaryOf returns the summary of u, a full object of resource gr.
func summaryOf(gr schema.GroupResource, u *unstructured.Unstructured) *summary {
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
	return &sum
}

// summary is what a compactObject's summary holds, read from a decoded object
// (newCompactObject) or from the encoding (readSummaryCBOR, whose texts are the
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

// build returns the compactSummary of the summary. Its texts are copied into one
// string, so that it does not keep alive, here and there, the pages of the objects or
// encodings it was read from (which made the RSS of a compact daemon twice its heap).
func (sum *summary) build() *compactSummary {
	sum.labels = sortPairs(sum.labels)
	texts := make([][]byte, 0, textLabels+len(sum.labels)+len(sum.images))
	for i := range creationTimestamp {
		texts = append(texts, sum.meta[i]) // nil where the object has none
	}
	texts = append(texts, sum.apiVersion, sum.kind)
	texts = append(texts, sum.labels...)
	texts = append(texts, sum.images...)
	size := 4 * len(texts)
	for _, t := range texts {
		size += len(t)
	}
	var b strings.Builder
	b.Grow(size)
	for _, t := range texts {
		b.Write(t)
	}
	end := 0
	for _, t := range texts {
		end += len(t)
		for shift := 0; shift < 32; shift += 8 {
			b.WriteByte(byte(end >> shift))
		}
	}
	co := &compactSummary{text: b.String(), createdNsec: -1, labels: uint32(len(sum.labels) / 2), images: uint32(len(sum.images))}
	if sum.has[creationTimestamp] {
		// As unstructured's GetCreationTimestamp reads it: the zero time if it does not
		// parse.
		var t metav1.Time
		if _ = t.UnmarshalQueryParameter(string(sum.meta[creationTimestamp])); !t.IsZero() {
			co.createdSec, co.createdNsec = t.Unix(), int32(t.Nanosecond())
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

// decodeShared decodes data with codec, with DecodeShared where codec is an
// aggregate.SharingDecoder: the object may share maps and slices with others that the
// fleet and the server decoded. The server never modifies what it decodes (served
// copies what it changes), so a Table page of the pods of one Deployment decodes their
// containers once.
func decodeShared(codec aggregate.Codec, data []byte) (runtime.Object, error) {
	if s, ok := codec.(aggregate.SharingDecoder); ok {
		return s.DecodeShared(data)
	}
	return codec.Decode(data)
}

// full returns o with its object decoded, if it is a compactObject. An encoding that
// fails to decode, which a Codec that holds its contract never makes, is logged, and
// the summary stands for the object.
func (o object) full() object {
	co, ok := o.obj.(*compactObject)
	if !ok || o.codec == nil {
		return o
	}
	obj, err := decodeShared(o.codec, co.data)
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
		cbor, err := c.Expand(w.expanded[:0], e.data)
		keepScratch(&w.expanded, cbor, e.data)
		var out []byte
		if err == nil {
			out, ok = w.appendServedCBOR(b, cbor, e.target)
		}
		cborWriters.Put(w)
		if err == nil && ok {
			return out, nil
		}
	}
	obj, err := decodeShared(e.codec, e.data)
	if err != nil {
		return b, fmt.Errorf("decoding the cached object to serve it: %w", err)
	}
	if _, ok := obj.(*compactObject); ok {
		return b, fmt.Errorf("decoding the cached object to serve it: the Codec returned %T", obj)
	}
	return appendItem(b, served(e.res, object{cluster: e.target.cluster, obj: obj}, e.target.rv))
}

// readSummaryCBOR returns the summary of the object of gr whose CBOR is cbor (an
// encoding itself, or one expanded), read without decoding the object, as summaryOf
// makes it of the decoded object; it keeps nothing of cbor. ok is false if cbor is not
// a CBOR map of the form that persist.Codec writes for an unstructured object (with
// string keys, definite lengths, no more than maxCBORDepth deep), or if a member that
// the summary reads is repeated; the caller then decodes the object.
func readSummaryCBOR(gr schema.GroupResource, cbor []byte) (_ *compactSummary, ok bool) {
	r := summaryReader{cborCursor{data: cbor}}
	if len(cbor) > 0 && cbor[0] == formatUnstructuredV1 {
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
	if !ok || r.off != len(cbor) {
		return nil, false
	}
	return sum.build(), true
}

// containerLists are the lists of containers of a pod spec, in the order in which
// search.Images reads them.
var containerLists = [...]string{"initContainers", "containers", "ephemeralContainers"}

// summaryReader reads what a summary holds from the CBOR of an object. The texts it
// returns are the bytes of the CBOR.
type summaryReader struct{ cborCursor }

// entries reads a map at depth depth, calling f with the key of each entry, which reads
// or skips its value and reports whether the map is still in the form that
// readSummaryCBOR reads. Anything but a map is skipped.
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
