package aggregate

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Names of the built-in indices of every Indexer.
const (
	// IndexCluster indexes objects by cluster name. Values are cluster names, as is.
	IndexCluster = "cluster"
	// IndexNamespace indexes objects by namespace across all clusters. Cluster-scoped
	// objects have the value "".
	IndexNamespace = "namespace"
	// IndexClusterNamespace indexes objects by cluster and namespace. Values are
	// cluster/namespace with the cluster percent-encoded as in keys; build them with
	// ClusterNamespaceIndexValue.
	IndexClusterNamespace = "cluster-namespace"
	// IndexLabel indexes objects by label. Values are key=value; an object has one value
	// per label. Build them with LabelIndexValue.
	IndexLabel = "label"
)

// ClusterNamespaceIndexValue returns the value of IndexClusterNamespace for objects in
// namespace of cluster.
func ClusterNamespaceIndexValue(cluster, namespace string) string {
	return escapeCluster(cluster) + "/" + namespace
}

// LabelIndexValue returns the value of IndexLabel for objects with label key=value.
func LabelIndexValue(key, value string) string {
	return key + "=" + value
}

func isBuiltinIndex(name string) bool {
	switch name {
	case IndexCluster, IndexNamespace, IndexClusterNamespace, IndexLabel:
		return true
	}
	return false
}

// entry is the one place an object is held. Index sets point at entries, so a lookup
// through an index needs no second map access, and an update that keeps an object's
// index values touches no index.
type entry struct {
	key Key
	version
	// hot is, in a compact indexer, the decoded object while e is in the hot set.
	hot atomic.Pointer[hotObject]
}

// version is what an entry holds of one version of its object: in a plain indexer the
// object, in a compact one its *encodedObject and its labels (see encodeForEntry).
type version struct {
	obj    runtime.Object
	labels compactLabels
}

// hold makes v the version that e holds.
func (e *entry) hold(v version) {
	e.version = v
	if o, ok := v.obj.(*encodedObject); ok {
		o.key = &e.key
	}
}

// labelSet returns the labels of v's object, without decoding it.
func (v version) labelSet() labels.Labels {
	if _, ok := v.obj.(*encodedObject); ok {
		return v.labels
	}
	return labelsOf(v.obj)
}

// resourceVersion returns the resourceVersion of v's object, without decoding it.
func (v version) resourceVersion() string {
	if o, ok := v.obj.(*encodedObject); ok {
		return o.rv
	}
	return resourceVersionOf(v.obj)
}

type labelPair struct{ key, value string }

// clusterIndex holds the built-in indices of one cluster. The fleet-wide namespace and
// label indices are the unions over clusters; the sets of different clusters are
// disjoint, so a union needs no de-duplication.
type clusterIndex struct {
	// count is the number of objects of the cluster.
	count int
	// namespaces maps a namespace to its objects. Every object of the cluster is in
	// exactly one of these sets.
	namespaces map[string]*set
	// labels maps a label to the objects that carry it, once the Indexer keeps its label
	// index (Indexer.labelsKept).
	labels map[labelPair]*set
}

// userIndex is an index defined by a cache.IndexFunc.
type userIndex struct {
	fn     cache.IndexFunc
	values map[string]*set
}

// Indexer is the federated, indexed cache of one resource: every object of that resource
// in every cluster, held once, keyed by Key.
//
// It has the built-in indices IndexCluster, IndexNamespace, IndexClusterNamespace and
// IndexLabel, plus the user-defined indices added with AddIndexers.
//
// Indexer is safe for concurrent use. It is written only through ClusterStores, so that
// every change is fanned out to the fleet's handlers. Objects returned by its methods are
// shared: callers must not modify them. Slices returned are fresh and belong to the
// caller; their order is unspecified.
type Indexer struct {
	resource schema.GroupVersionResource
	// codec is set in a compact indexer, whose entries hold *encodedObjects, and hot
	// bounds the decoded objects they keep (see compact.go).
	codec Codec
	hot   *hotSet
	// sharing is codec as a SharingDecoder, nil if it is none.
	sharing SharingDecoder

	// lock guards all fields below, and the removed, syncedAt and waiters fields of the
	// ClusterStores of this resource. A write to the indexer and the fan-out of its event
	// to handlers happen under one write lock, and AddHandler snapshots the indexer and
	// subscribes under the same lock, so a handler sees each change exactly once: in its
	// snapshot or as an event.
	lock sync.RWMutex
	// items holds every object of this resource.
	items itemTable
	// clusters holds the built-in indices, by cluster name. A cluster without objects has
	// no entry.
	clusters map[string]*clusterIndex
	// indices holds the user-defined indices by name.
	indices map[string]*userIndex
	// handlers are the registrations this resource's events fan out to.
	handlers []*Registration
	// stores are the ClusterStores writing into this indexer, by cluster name.
	stores map[string]*ClusterStore
	// labelSets are, in a compact indexer, the labels its entries hold, interned, by
	// their string (compactLabels).
	labelSets map[string]*labelSet
	// labelsKept is set once a read needs the label index (ensureLabels), which is then
	// built and kept from then on: until something selects by label, the writes do not
	// keep it (fleetwatch serve's server never does, and a warm start of 1,000 clusters
	// spent 8% of its CPU on it). It is written under the write lock, and read under the
	// lock or, by ensureLabels, without.
	labelsKept atomic.Bool
}

func newIndexer(gvr schema.GroupVersionResource, indexers cache.Indexers, codec Codec, hotObjects int) *Indexer {
	if rc, ok := codec.(ResourceCodec); ok {
		if own := rc.ForResource(gvr); own != nil {
			codec = own
		}
	}
	ix := &Indexer{
		resource: gvr,
		codec:    codec,
		clusters: make(map[string]*clusterIndex),
		indices:  make(map[string]*userIndex, len(indexers)),
		stores:   make(map[string]*ClusterStore),
	}
	for name, fn := range indexers {
		ix.indices[name] = &userIndex{fn: fn, values: make(map[string]*set)}
	}
	if codec != nil {
		ix.sharing, _ = codec.(SharingDecoder)
		ix.hot = newHotSet(hotObjects)
		ix.labelSets = make(map[string]*labelSet)
	}
	return ix
}

// Resource returns the resource whose objects the indexer holds.
func (ix *Indexer) Resource() schema.GroupVersionResource { return ix.resource }

// AddIndexers adds user-defined indices. It may be called at any time; objects already
// present are indexed before it returns. It fails, adding nothing, if a name is taken
// (ErrIndexExists; the built-in names are always taken) or a function is nil
// (ErrInvalidIndexer).
//
// As with client-go, an index function must be deterministic: it must return the same
// values for the same object every time. An error from it is logged and the object is
// left out of that index.
func (ix *Indexer) AddIndexers(indexers cache.Indexers) error {
	ix.lock.Lock()
	defer ix.lock.Unlock()
	for name, fn := range indexers {
		if isBuiltinIndex(name) || ix.indices[name] != nil {
			return fmt.Errorf("add index %q to %s: %w", name, ix.resource, ErrIndexExists)
		}
		if fn == nil {
			return fmt.Errorf("add index %q to %s: nil IndexFunc: %w", name, ix.resource, ErrInvalidIndexer)
		}
	}
	for name, fn := range indexers {
		ui := &userIndex{fn: fn, values: make(map[string]*set)}
		for e := range ix.items.all() {
			for _, v := range ix.indexValues(name, ui, ix.decoded(peek(e))) {
				insert(ui.values, v, e)
			}
		}
		ix.indices[name] = ui
	}
	return nil
}

// indexValues calls the index function of ui, logging its error.
func (ix *Indexer) indexValues(name string, ui *userIndex, obj runtime.Object) []string {
	values, err := ui.fn(obj)
	if err != nil {
		klog.ErrorS(err, "Index function failed; object left out of the index", "resource", ix.resource, "index", name)
		return nil
	}
	return values
}

// addLocked stores a new object under key, and returns its entry: v is what the entry
// holds (see encodeForEntry), obj the object.
func (ix *Indexer) addLocked(key Key, v version, obj runtime.Object) *entry {
	e := &entry{key: key}
	v.labels = ix.internLabelsLocked(v.labels)
	e.hold(v)
	if ix.codec != nil && obj != nil {
		ix.hot.keep(e, obj)
	}
	ix.items.add(e)
	ci := ix.clusters[key.Cluster]
	if ci == nil {
		ci = &clusterIndex{namespaces: make(map[string]*set), labels: make(map[labelPair]*set)}
		ix.clusters[key.Cluster] = ci
	}
	ci.count++
	insert(ci.namespaces, key.Namespace, e)
	if ix.labelsKept.Load() {
		eachLabel(v.labelSet(), func(k, v string) {
			insert(ci.labels, labelPair{k, v}, e)
		})
	}
	if obj == nil && len(ix.indices) > 0 {
		obj = ix.decoded(v.obj)
	}
	for name, ui := range ix.indices {
		for _, v := range ix.indexValues(name, ui, obj) {
			insert(ui.values, v, e)
		}
	}
	return e
}

// updateLocked replaces the object of e: v is what the entry holds (see
// encodeForEntry), obj the object. Indices whose values did not change are not touched;
// the key, hence cluster and namespace, cannot change.
func (ix *Indexer) updateLocked(e *entry, v version, obj runtime.Object) {
	old := e.version
	var oldObj runtime.Object
	if len(ix.indices) > 0 {
		oldObj = ix.decoded(peek(e))
	}
	v.labels = ix.internLabelsLocked(v.labels)
	ix.releaseLabelsLocked(old.labels)
	e.hold(v)
	if ix.codec != nil && obj != nil {
		ix.hot.keep(e, obj)
	} else if ix.codec != nil {
		// The hot object was the old one.
		e.hot.Store(nil)
	}
	if obj == nil && len(ix.indices) > 0 {
		obj = ix.decoded(v.obj)
	}
	ci := ix.clusters[e.key.Cluster]
	oldLabels, newLabels := old.labelSet(), v.labelSet()
	if ix.labelsKept.Load() && !sameLabels(oldLabels, newLabels) {
		eachLabel(oldLabels, func(k, v string) {
			if nv, ok := newLabels.Lookup(k); !ok || nv != v {
				remove(ci.labels, labelPair{k, v}, e)
			}
		})
		eachLabel(newLabels, func(k, v string) {
			if ov, ok := oldLabels.Lookup(k); !ok || ov != v {
				insert(ci.labels, labelPair{k, v}, e)
			}
		})
	}
	for name, ui := range ix.indices {
		oldValues, err := ui.fn(oldObj)
		newValues := ix.indexValues(name, ui, obj)
		if err == nil && slices.Equal(oldValues, newValues) {
			continue
		}
		ix.removeFromIndexLocked(ui, e, oldValues, err)
		for _, v := range newValues {
			insert(ui.values, v, e)
		}
	}
}

// removeLocked removes e from the items and every index.
func (ix *Indexer) removeLocked(e *entry) {
	ix.items.remove(e)
	ix.releaseLabelsLocked(e.labels)
	defer e.hot.Store(nil)
	ci := ix.clusters[e.key.Cluster]
	ci.count--
	if ci.count == 0 {
		delete(ix.clusters, e.key.Cluster)
	} else {
		remove(ci.namespaces, e.key.Namespace, e)
		if ix.labelsKept.Load() {
			eachLabel(e.labelSet(), func(k, v string) {
				remove(ci.labels, labelPair{k, v}, e)
			})
		}
	}
	if len(ix.indices) > 0 {
		obj := ix.decoded(peek(e))
		for _, ui := range ix.indices {
			values, err := ui.fn(obj)
			ix.removeFromIndexLocked(ui, e, values, err)
		}
	}
}

// removeFromIndexLocked removes e from the sets of values. If the index function failed
// (err), where e is indexed is unknown, so every set is searched.
func (ix *Indexer) removeFromIndexLocked(ui *userIndex, e *entry, values []string, err error) {
	if err == nil {
		for _, v := range values {
			remove(ui.values, v, e)
		}
		return
	}
	for v, s := range ui.values {
		if s.has(e) {
			remove(ui.values, v, e)
		}
	}
}

// Get returns the object with the given key.
func (ix *Indexer) Get(key Key) (runtime.Object, bool) {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	e := ix.items.get(key)
	if e == nil {
		return nil, false
	}
	if ix.codec != nil {
		return ix.getDecodedLocked(e), true
	}
	return e.obj, true
}

// GetEncoded returns the object with the given key as the fleet has it at hand, for a
// reader that converts it into a form of its own and can do so from the encoding: in a
// compact fleet (Options.Codec), the encoding in the fleet's Codec, the very bytes the
// fleet holds, when the fleet holds the object encoded only (obj nil); else the object,
// as Get returns it (encoded nil). Unlike Get, it decodes nothing and keeps nothing
// decoded. Neither may be modified. GetHeld also gives the object's Version.
func (ix *Indexer) GetEncoded(key Key) (obj runtime.Object, encoded []byte, ok bool) {
	h, ok := ix.GetHeld(key)
	return h.Object, h.Encoded, ok
}

// GetHeld returns the object with the given key as GetEncoded does, as a Held, whose
// Version identifies the version of the object that the fleet holds.
func (ix *Indexer) GetHeld(key Key) (Held, bool) {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	e := ix.items.get(key)
	if e == nil {
		return Held{}, false
	}
	return heldOf(e), true
}

// Held is an object as the fleet has it at hand (see GetEncoded): Encoded, the very
// bytes that a compact fleet holds, where it holds the object encoded only; else
// Object. The Held of an Event (Event.Held) has both where the event has both. Neither
// may be modified.
type Held struct {
	Object  runtime.Object
	Encoded []byte
	// e is the entry that h was read from, nil for a Held that was not; stored is what
	// e held then: the object of a plain fleet, the *encodedObject of a compact one,
	// whichever of the two h gives.
	e      *entry
	stored runtime.Object
}

// heldOf returns what e holds as a Held. The indexer's lock is held, for reading at
// least.
func heldOf(e *entry) Held {
	h := Held{e: e, stored: e.obj}
	if o, ok := peek(e).(*encodedObject); ok {
		h.Encoded = o.data
	} else {
		h.Object = peek(e)
	}
	return h
}

// Key returns the key of h's object; the zero Key if h was not read from an Indexer
// (GetHeld, SelectEncoded) nor given by an Event (Event.Held).
func (h Held) Key() Key {
	if h.e == nil {
		return Key{}
	}
	return h.e.key
}

// ResourceVersion returns the resourceVersion of h's object, read without decoding it;
// "" if h was not read from an Indexer nor given by an Event.
func (h Held) ResourceVersion() string {
	if h.e == nil {
		return ""
	}
	return version{obj: h.stored}.resourceVersion()
}

// Version returns the Version of the object that h holds: the zero Version if h was not
// read from an Indexer nor given by an Event, or if a plain fleet holds it as a type
// other than *unstructured.Unstructured and *metav1.PartialObjectMetadata. It makes a
// weak reference (package weak), which costs from tens of ns to a few µs for small
// objects that many weak references share memory with: a reader that checks what it
// kept against the objects it reads calls Is, which makes none.
func (h Held) Version() Version {
	switch o := h.stored.(type) {
	case *encodedObject:
		return Version{encoded: weak.Make(o)}
	case *unstructured.Unstructured:
		return Version{object: weak.Make(o)}
	case *metav1.PartialObjectMetadata:
		return Version{partial: weak.Make(o)}
	}
	return Version{}
}

// Is reports whether h holds the version that v identifies, as h.Version() == v would,
// without making a weak reference: v's object is still alive, and it is h's. It is false
// for the zero Version.
func (h Held) Is(v Version) bool {
	switch o := h.stored.(type) {
	case *encodedObject:
		return o == v.encoded.Value()
	case *unstructured.Unstructured:
		return o == v.object.Value()
	case *metav1.PartialObjectMetadata:
		return o == v.partial.Value()
	}
	return false
}

// Version identifies one version of one object held by the fleet, for a reader that
// keeps what it derived from that version (mcprovider keeps the typed objects it
// converted) and must never hand it out for another. Two non-zero Versions are equal if
// and only if they are of the same version of the same object in the same Indexer: an
// update, even one that changes nothing but the resourceVersion, and a deletion and
// re-creation under the same key give a new Version, and so does an object of another
// cluster, resource or Fleet; a no-op update (Apply with the resourceVersion held) keeps
// the Version. An entry holds a new object for each version, which it never modifies
// (Apply's contract, encodeForEntry), and a Version is a weak reference to that object
// (package weak): it keeps nothing alive, and stays unequal to every other Version after
// the version it identifies has been let go, even if a new object takes its address.
// The zero Version identifies nothing: key nothing by it.
type Version struct {
	encoded weak.Pointer[encodedObject]
	object  weak.Pointer[unstructured.Unstructured]
	partial weak.Pointer[metav1.PartialObjectMetadata]
}

// IsZero reports whether v is the zero Version, which identifies nothing.
func (v Version) IsZero() bool { return v == Version{} }

// SelectEncoded returns the objects of cluster (every cluster if empty) in namespace
// (every namespace if empty) whose labels match selector (nil matches everything), each
// as GetHeld returns it, for a reader that converts them into a form of its own and can
// do so from their encodings: it decodes nothing and keeps nothing decoded.
func (ix *Indexer) SelectEncoded(cluster, namespace string, selector labels.Selector) []Held {
	ix.ensureLabelsFor(selector)
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	return selectLocked(ix, cluster, namespace, selector, heldOf)
}

// List returns every object.
func (ix *Indexer) List() []runtime.Object {
	ix.lock.RLock()
	out := make([]runtime.Object, 0, ix.items.len())
	for e := range ix.items.all() {
		out = append(out, peek(e))
	}
	ix.lock.RUnlock()
	return ix.decodeAll(out)
}

// ListKeys returns the keys of every object.
func (ix *Indexer) ListKeys() []Key {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	out := make([]Key, 0, ix.items.len())
	for e := range ix.items.all() {
		out = append(out, e.key)
	}
	return out
}

// Len returns the number of objects.
func (ix *Indexer) Len() int {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	return ix.items.len()
}

// ClusterLen returns the number of objects of one cluster.
func (ix *Indexer) ClusterLen(cluster string) int {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	if ci := ix.clusters[cluster]; ci != nil {
		return ci.count
	}
	return 0
}

// ensureLabels builds the label index if it is not kept yet, and has the writes keep it
// from then on. The reads that use it call it before they take the lock. The first
// build holds the write lock for about a microsecond per object.
func (ix *Indexer) ensureLabels() {
	if ix.labelsKept.Load() {
		return
	}
	ix.lock.Lock()
	defer ix.lock.Unlock()
	if ix.labelsKept.Load() {
		return
	}
	for e := range ix.items.all() {
		ci := ix.clusters[e.key.Cluster]
		eachLabel(e.labelSet(), func(k, v string) {
			insert(ci.labels, labelPair{k, v}, e)
		})
	}
	ix.labelsKept.Store(true)
}

// ensureLabelsFor calls ensureLabels if selector may use the label index: a selector
// that matches everything does not.
func (ix *Indexer) ensureLabelsFor(selector labels.Selector) {
	if selector != nil && !selector.Empty() {
		ix.ensureLabels()
	}
}

// ensureLabelsOf calls ensureLabels if indexName is IndexLabel.
func (ix *Indexer) ensureLabelsOf(indexName string) {
	if indexName == IndexLabel {
		ix.ensureLabels()
	}
}

// Select returns the objects, of every cluster, whose labels match selector. A nil
// selector matches everything. When the selector has equality requirements (=, ==, or
// in), the label index narrows the candidates instead of scanning every object.
func (ix *Indexer) Select(selector labels.Selector) []runtime.Object {
	ix.ensureLabelsFor(selector)
	ix.lock.RLock()
	objs := ix.selectLocked("", "", selector)
	ix.lock.RUnlock()
	return ix.decodeAll(objs)
}

// ByIndex returns the objects whose values for the named index include indexedValue.
func (ix *Indexer) ByIndex(indexName, indexedValue string) ([]runtime.Object, error) {
	ix.ensureLabelsOf(indexName)
	ix.lock.RLock()
	var buf [8]*set
	sets, err := ix.setsLocked(indexName, indexedValue, buf[:0])
	if err != nil {
		ix.lock.RUnlock()
		return nil, err
	}
	objs := collect(sets, peek)
	ix.lock.RUnlock()
	return ix.decodeAll(objs), nil
}

// IndexKeys returns the keys of the objects whose values for the named index include
// indexedValue.
func (ix *Indexer) IndexKeys(indexName, indexedValue string) ([]Key, error) {
	ix.ensureLabelsOf(indexName)
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	var buf [8]*set
	sets, err := ix.setsLocked(indexName, indexedValue, buf[:0])
	if err != nil {
		return nil, err
	}
	return collect(sets, func(e *entry) Key { return e.key }), nil
}

// IndexValues returns the values of the named index that at least one object has, in
// the form ByIndex takes.
func (ix *Indexer) IndexValues(indexName string) ([]string, error) {
	ix.ensureLabelsOf(indexName)
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	var out []string
	switch indexName {
	case IndexCluster:
		for c := range ix.clusters {
			out = append(out, c)
		}
	case IndexNamespace:
		seen := make(map[string]struct{})
		for _, ci := range ix.clusters {
			for ns := range ci.namespaces {
				if _, ok := seen[ns]; !ok {
					seen[ns] = struct{}{}
					out = append(out, ns)
				}
			}
		}
	case IndexClusterNamespace:
		for c, ci := range ix.clusters {
			for ns := range ci.namespaces {
				out = append(out, ClusterNamespaceIndexValue(c, ns))
			}
		}
	case IndexLabel:
		seen := make(map[labelPair]struct{})
		for _, ci := range ix.clusters {
			for p := range ci.labels {
				if _, ok := seen[p]; !ok {
					seen[p] = struct{}{}
					out = append(out, LabelIndexValue(p.key, p.value))
				}
			}
		}
	default:
		ui := ix.indices[indexName]
		if ui == nil {
			return nil, fmt.Errorf("index %q of %s: %w", indexName, ix.resource, ErrUnknownIndex)
		}
		for v := range ui.values {
			out = append(out, v)
		}
	}
	return out, nil
}

// setsLocked appends to buf the disjoint sets of objects that have indexedValue in the
// named index.
func (ix *Indexer) setsLocked(indexName, indexedValue string, buf []*set) ([]*set, error) {
	switch indexName {
	case IndexCluster:
		if ci := ix.clusters[indexedValue]; ci != nil {
			for _, s := range ci.namespaces {
				buf = append(buf, s)
			}
		}
	case IndexNamespace:
		for _, ci := range ix.clusters {
			if s := ci.namespaces[indexedValue]; s != nil {
				buf = append(buf, s)
			}
		}
	case IndexClusterNamespace:
		cluster, namespace, err := parseClusterNamespace(indexedValue)
		if err != nil {
			return nil, err
		}
		if ci := ix.clusters[cluster]; ci != nil {
			if s := ci.namespaces[namespace]; s != nil {
				buf = append(buf, s)
			}
		}
	case IndexLabel:
		k, v, ok := strings.Cut(indexedValue, "=")
		if !ok {
			return nil, fmt.Errorf("index %q value %q: want key=value: %w", IndexLabel, indexedValue, ErrInvalidIndexValue)
		}
		for _, ci := range ix.clusters {
			if s := ci.labels[labelPair{k, v}]; s != nil {
				buf = append(buf, s)
			}
		}
	default:
		ui := ix.indices[indexName]
		if ui == nil {
			return nil, fmt.Errorf("index %q of %s: %w", indexName, ix.resource, ErrUnknownIndex)
		}
		if s := ui.values[indexedValue]; s != nil {
			buf = append(buf, s)
		}
	}
	return buf, nil
}

func parseClusterNamespace(value string) (cluster, namespace string, err error) {
	c, ns, ok := strings.Cut(value, "/")
	if !ok || strings.IndexByte(ns, '/') >= 0 {
		return "", "", fmt.Errorf("index %q value %q: want cluster/namespace: %w", IndexClusterNamespace, value, ErrInvalidIndexValue)
	}
	cluster, err = unescapeCluster(c)
	if err != nil {
		return "", "", fmt.Errorf("index %q value %q: %s: %w", IndexClusterNamespace, value, err.Error(), ErrInvalidIndexValue)
	}
	return cluster, ns, nil
}

// collect returns f of every entry of sets.
func collect[T any](sets []*set, f func(*entry) T) []T {
	out := make([]T, 0, setsLen(sets))
	for _, s := range sets {
		for e := range s.all() {
			out = append(out, f(e))
		}
	}
	return out
}

func setsLen(sets []*set) int {
	n := 0
	for _, s := range sets {
		n += s.len()
	}
	return n
}

// labelRequirement is an equality requirement of a selector: the label key must have one
// of values.
type labelRequirement struct {
	key    string
	values []string
}

// equalityRequirements returns the requirements of selector that the label index can
// answer.
func equalityRequirements(selector labels.Selector) []labelRequirement {
	reqs, selectable := selector.Requirements()
	if !selectable {
		return nil
	}
	var out []labelRequirement
	for _, r := range reqs {
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			out = append(out, labelRequirement{key: r.Key(), values: r.ValuesUnsorted()})
		}
	}
	return out
}

// selectLocked returns the objects in cluster (every cluster if empty) and namespace
// (every namespace if empty, as in client-go listers) whose labels match selector. In a
// compact indexer, some may be *encodedObjects: the caller decodes them (decodeAll)
// after releasing the lock.
func (ix *Indexer) selectLocked(cluster, namespace string, selector labels.Selector) []runtime.Object {
	return selectLocked(ix, cluster, namespace, selector, peek)
}

// selectLocked is Indexer.selectLocked of the matching entries, each as of returns it.
func selectLocked[T any](ix *Indexer, cluster, namespace string, selector labels.Selector, of func(*entry) T) []T {
	q, ok := newQuery(namespace, selector)
	if !ok {
		return nil
	}
	q.labelsKept = ix.labelsKept.Load()
	if cluster != "" {
		if ci := ix.clusters[cluster]; ci != nil {
			return appendMatches(&q, nil, ci, of)
		}
		return nil
	}
	var out []T
	for _, ci := range ix.clusters {
		out = appendMatches(&q, out, ci, of)
	}
	return out
}

// query is a label selector restricted to a namespace, evaluated one cluster at a time.
type query struct {
	namespace    string
	selector     labels.Selector
	everything   bool
	requirements []labelRequirement
	// labelsKept is set if the Indexer keeps its label index (ensureLabels): without
	// it, the requirements narrow nothing, and every object is matched.
	labelsKept bool
}

// newQuery returns the query of selector (nil matches everything) in namespace (every
// namespace if empty), or false if selector matches nothing.
func newQuery(namespace string, selector labels.Selector) (query, bool) {
	if selector == nil {
		selector = labels.Everything()
	}
	if labels.MatchesNothing(selector) {
		return query{}, false
	}
	q := query{namespace: namespace, selector: selector, everything: selector.Empty()}
	if !q.everything {
		q.requirements = equalityRequirements(selector)
	}
	return q, true
}

// appendMatches appends the matching entries of ci to out, each as of returns it. It
// scans the smallest candidate sets it can find: the namespace's, or those of one
// equality requirement.
func appendMatches[T any](q *query, out []T, ci *clusterIndex, of func(*entry) T) []T {
	size := ci.count
	if q.namespace != "" {
		size = ci.namespaces[q.namespace].len()
	}
	best := -1
	for i, r := range q.requirements {
		if !q.labelsKept {
			break
		}
		n := 0
		for _, v := range r.values {
			n += ci.labels[labelPair{r.key, v}].len()
		}
		if n < size {
			best, size = i, n
		}
	}
	if size == 0 {
		return out
	}
	var buf [8]*set
	candidates := buf[:0]
	filterNamespace := false
	switch {
	case best >= 0:
		r := q.requirements[best]
		for _, v := range r.values {
			if s := ci.labels[labelPair{r.key, v}]; s != nil {
				candidates = append(candidates, s)
			}
		}
		filterNamespace = q.namespace != ""
	case q.namespace != "":
		candidates = append(candidates, ci.namespaces[q.namespace])
	default:
		for _, s := range ci.namespaces {
			candidates = append(candidates, s)
		}
	}
	if q.everything {
		out = slices.Grow(out, size)
	}
	for _, s := range candidates {
		for e := range s.all() {
			if filterNamespace && e.key.Namespace != q.namespace {
				continue
			}
			if !q.everything && !q.selector.Matches(e.labelSet()) {
				continue
			}
			out = append(out, of(e))
		}
	}
	return out
}
