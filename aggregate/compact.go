package aggregate

import (
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// A compact Fleet (Options.Codec set) keeps each object as its encoding, a fraction of
// the memory of its decoded form, and decodes it when it is read:
//
//   - An entry holds an *encodedObject (the encoding and the resourceVersion, which
//     no-op updates are recognised by) where a plain fleet holds the object, and the
//     object's labels, which the label index and selectors read without decoding. The
//     labels are one string (compactLabels), interned by the indexer for the objects
//     that carry the same labels. The indexer holds the Codec, once. What an entry
//     costs beside the encoding is measured by BenchmarkHeapPerObject.
//   - Reads take what they need under the indexer's lock and decode after it, so a
//     long list does not hold writers back. Single-object reads (Get, a lister's Get)
//     keep what they decoded in the indexer's hot set, a ring of HotObjects entries, so
//     that the keys read again and again are decoded once; so does every write, with
//     the object the informer decoded.
//   - Events carry the encoding until they are delivered: they are decoded once per
//     handler, never under the indexer's lock, by the handler's goroutine or, with
//     Options.DecodeAhead (off by default) while the handler is behind, ahead of it by
//     helper goroutines (at most DecodeAhead events held decoded ahead, all handlers
//     together), and not at all for the events
//     that coalesce away before they come near the front of the handler's queue.
//   - User index functions get decoded objects, at each write of an object.
//
// Every object handed out is shared or fresh: as with a plain fleet, it must not be
// modified. A fresh one decoded with a SharingDecoder holds maps and slices of other
// objects too (a container of the pods of one Deployment), decoded once.

// Codec encodes the objects of a compact Fleet and decodes them back. Decode(Encode(o))
// must equal o, field for field and type for type; what Decode returns must share no
// memory with data. Both are called concurrently.
type Codec interface {
	Encode(obj runtime.Object) ([]byte, error)
	Decode(data []byte) (runtime.Object, error)
}

// SharingDecoder is implemented by Codecs that decode an object sharing its maps and
// slices with objects they decoded before, where their encodings are the same (the
// containers, volumes and tolerations of the pods of one Deployment), such as
// persist.Codec. A compact fleet decodes what it hands out, and what it passes to index
// functions, with DecodeShared rather than Decode: none of it may be modified, and the
// objects of a Get or a List outside the hot set then take the memory of what sets each
// apart only. DecodeShared(Encode(o)) must equal o, as Decode's does; the objects it
// returns share no memory with data, and may share any map or slice but their root
// with others.
type SharingDecoder interface {
	DecodeShared(data []byte) (runtime.Object, error)
}

// EncodingShortener is implemented by Codecs that keep an encoding made elsewhere, by
// the informers' decoders (ClusterStore.ApplyEncoded, ApplyPartial, a snapshot's
// load), in another form, such as persist.Codec with Compress: the fleet keeps what
// Shorten returns, hands it to handlers (Event.Encoded) and reports it as stored
// (ClusterStore.ApplyEncodedChanged). Shorten must not modify encoded, and Decode must
// read both forms.
type EncodingShortener interface {
	Shorten(encoded []byte) []byte
}

// ResourceCodec is implemented by Codecs that encode the objects of each resource in a
// way of its own, such as persist.Codec with Dictionary, which compresses them with a
// dictionary of the resource: the fleet's Indexer of gvr encodes, shortens and decodes
// with ForResource(gvr), or with the Codec itself if that is nil. The Codec that
// ForResource returns must decode what the Codec itself and the Codecs of every other
// resource encode, as the fleet's Codec (Fleet.Codec, which the HTTP server decodes with)
// is still the one it was given.
//
// The result is the method set of Codec spelled out, so that a package that cannot
// import this one (persist) implements the interface.
type ResourceCodec interface {
	ForResource(gvr schema.GroupVersionResource) interface {
		Encode(obj runtime.Object) ([]byte, error)
		Decode(data []byte) (runtime.Object, error)
	}
}

// defaultCodec is the Codec of fleets whose Options have none: nil, except in this
// package's tests run with FLEETWATCH_TEST_CACHE_ENCODING=compact (export_test.go), which
// then run against compact fleets.
var defaultCodec Codec

// defaultDecodeAhead is the DecodeAhead of fleets whose Options have none: 0, except in
// this package's tests run with FLEETWATCH_TEST_CACHE_ENCODING=compact, whose handlers
// then get their events decoded ahead.
var defaultDecodeAhead int

// DefaultHotObjects is the default of Options.HotObjects.
const DefaultHotObjects = 256

// encodedObject is an object of a compact indexer as its entry holds it. It is a
// runtime.Object only so that it can take the object's place in entries and pending
// events; it never leaves the package (see decoded and pending.event). It is immutable
// once its entry holds it.
type encodedObject struct {
	data []byte
	// rv is the object's resourceVersion, a copy of its own, so that it keeps nothing
	// else alive.
	rv string
	// key is the key of the entry that holds it (entry.hold), which names the object
	// when it fails to decode.
	key *Key
}

var _ runtime.Object = (*encodedObject)(nil)

func (*encodedObject) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (o *encodedObject) DeepCopyObject() runtime.Object { return o }

// decode returns the object of data, the encoding of the object with key in ix's Codec.
// An encoding that fails to decode, which a Codec that holds its contract never makes,
// is logged, and the object is replaced by its metadata key.
func (ix *Indexer) decode(data []byte, key Key) runtime.Object {
	var obj runtime.Object
	var err error
	if ix.sharing != nil {
		obj, err = ix.sharing.DecodeShared(data)
	} else {
		obj, err = ix.codec.Decode(data)
	}
	if err != nil {
		klog.ErrorS(err, "Decoding a cached object failed; handing out its key only", "cluster", key.Cluster, "namespace", key.Namespace, "name", key.Name)
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	}
	return obj
}

// decoded returns obj, decoded if it is an *encodedObject.
func (ix *Indexer) decoded(obj runtime.Object) runtime.Object {
	if o, ok := obj.(*encodedObject); ok {
		return ix.decode(o.data, *o.key)
	}
	return obj
}

// decodeAll replaces the *encodedObjects of objs by their objects, in place.
func (ix *Indexer) decodeAll(objs []runtime.Object) []runtime.Object {
	for i, obj := range objs {
		if o, ok := obj.(*encodedObject); ok {
			objs[i] = ix.decode(o.data, *o.key)
		}
	}
	return objs
}

// hotObject is the decoded object of an entry of a compact indexer.
type hotObject struct{ obj runtime.Object }

// hotSet bounds the decoded objects that the entries of a compact indexer keep: a ring
// of the entries that last got one. An entry that takes a slot gets its object; the
// entry it pushes out forgets its own, so at most len(ring) entries hold one.
type hotSet struct {
	// mu guards ring and next.
	mu   sync.Mutex
	ring []*entry
	next int
}

func newHotSet(n int) *hotSet { return &hotSet{ring: make([]*entry, n)} }

// keep makes obj the decoded object of e.
func (h *hotSet) keep(e *entry, obj runtime.Object) {
	e.hot.Store(&hotObject{obj})
	h.mu.Lock()
	out := h.ring[h.next]
	h.ring[h.next] = e
	h.next = (h.next + 1) % len(h.ring)
	h.mu.Unlock()
	if out != nil && out != e {
		out.hot.Store(nil)
	}
}

// peek returns what a read takes from e under the indexer's lock: the object of a plain
// indexer, the decoded object of a hot entry, or the *encodedObject to decode after the
// lock (decoded, decodeAll).
func peek(e *entry) runtime.Object {
	if h := e.hot.Load(); h != nil {
		return h.obj
	}
	return e.obj
}

// encodingOf returns the encoding that e holds in a compact indexer, nil in a plain one.
// The indexer's lock is held.
func encodingOf(e *entry) []byte {
	if o, ok := e.obj.(*encodedObject); ok {
		return o.data
	}
	return nil
}

// getDecoded returns the object of e, keeping it in the hot set if it had to be decoded.
// The indexer's lock is held, for reading at least.
func (ix *Indexer) getDecodedLocked(e *entry) runtime.Object {
	obj := peek(e)
	if o, ok := obj.(*encodedObject); ok {
		obj = ix.decode(o.data, e.key)
		ix.hot.keep(e, obj)
	}
	return obj
}

// encodeForEntry returns what an entry of ix holds for obj, whose resourceVersion is rv:
// obj itself in a plain indexer; in a compact one, an *encodedObject, with encoded as
// the encoding if it is not nil (the informer's, in the Codec's format), and obj's
// labels. The *encodedObject gets its key from the entry that takes it (entry.hold).
func (ix *Indexer) encodeForEntry(obj runtime.Object, rv string, encoded []byte) (version, error) {
	if ix.codec == nil {
		return version{obj: obj}, nil
	}
	if encoded == nil {
		var err error
		if encoded, err = ix.codec.Encode(obj); err != nil {
			return version{}, err
		}
	} else if s, ok := ix.codec.(EncodingShortener); ok {
		encoded = s.Shorten(encoded)
	}
	return version{
		obj:    &encodedObject{data: encoded, rv: strings.Clone(rv)},
		labels: compactLabelsOf(obj),
	}, nil
}

// internLabelsLocked returns the interned copy of l, which makeCompactLabels made, for an
// entry that takes it. releaseLabelsLocked lets go of the copy that an entry held.
func (ix *Indexer) internLabelsLocked(l compactLabels) compactLabels {
	if l.p == nil {
		return l
	}
	if p := ix.labelSets[l.p.s]; p != nil {
		p.refs++
		return compactLabels{p}
	}
	l.p.refs = 1
	ix.labelSets[l.p.s] = l.p
	return l
}

func (ix *Indexer) releaseLabelsLocked(l compactLabels) {
	if l.p == nil {
		return
	}
	if l.p.refs--; l.p.refs == 0 {
		delete(ix.labelSets, l.p.s)
	}
}
