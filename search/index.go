package search

import (
	"cmp"
	"container/heap"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// Defaults and bounds of Request.Limit.
const (
	DefaultLimit = 100
	MaxLimit     = 500
)

// Options configures an Index. The zero value is valid.
type Options struct {
	// ShortNames are more names that a kind term matches, by resource, such as deploy
	// for deployments.apps. Default: none.
	ShortNames map[schema.GroupResource][]string
}

// Index is the search index of a fleet's objects. It is an aggregate.Handler: register
// it with Fleet.AddHandler (or feed it the events of a handler of yours), and it follows
// the fleet, from the replay of its current state (a warm start from a snapshot included)
// through every change, relist and removal of a cluster, as Deleted events.
//
// Every object is a document with a number. The index keeps, for each cluster, resource
// and namespace, the set of its documents as a compressed bitmap (roaring), for each
// label key=value a docSet (the one document inline, a bitmap from the second), and for
// names and container images a textIndex: the distinct texts with their documents and a
// trigram index over them. A search is set algebra over those sets,
// then a pass over the documents found to take the page asked for: it never reads every
// object.
//
// The objects are the fleet's own, shared and never modified; the index holds a pointer
// to each, the sets, and the distinct names and images.
//
// OnEvent must be called by one goroutine at a time, as a fleet calls a handler;
// Search is safe to call concurrently with it and with itself.
type Index struct {
	opts Options

	// mu guards every field below, and the textIndexes'.
	mu sync.RWMutex
	// docs are the documents by number; free are the numbers of deleted ones, to reuse.
	docs []doc
	free []uint32
	// byKey maps each object to its document.
	byKey map[docKey]uint32
	// clusters and resources give each cluster and resource a small number; the sets of
	// their documents are by that number.
	clusterIDs   map[string]uint32
	clusterNames []string
	clusterDocs  []*roaring.Bitmap
	resourceIDs  map[schema.GroupVersionResource]uint32
	resources    []resourceInfo
	namespaces   map[string]*roaring.Bitmap
	// labels maps key to value to documents.
	labels map[string]map[string]docSet
	names  *textIndex
	images *textIndex
}

var _ aggregate.Handler = (*Index)(nil)

type doc struct {
	// obj is nil for a free document.
	obj       runtime.Object
	namespace string
	name      string
	cluster   uint32
	resource  uint32
}

type docKey struct {
	cluster, resource uint32
	namespace, name   string
}

type resourceInfo struct {
	gvr schema.GroupVersionResource
	// kind is read off the objects, when they carry it.
	kind string
	docs *roaring.Bitmap
}

// New returns an empty Index.
func New(opts Options) *Index {
	return &Index{
		opts:        opts,
		byKey:       make(map[docKey]uint32),
		clusterIDs:  make(map[string]uint32),
		resourceIDs: make(map[schema.GroupVersionResource]uint32),
		namespaces:  make(map[string]*roaring.Bitmap),
		labels:      make(map[string]map[string]docSet),
		names:       newTextIndex(),
		images:      newTextIndex(),
	}
}

// OnEvent applies a fleet event: Added and Updated put the object, Deleted removes it.
func (x *Index) OnEvent(e aggregate.Event) {
	m, err := meta.Accessor(e.Object)
	if err != nil {
		return // the fleet only holds objects with metadata
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	k := docKey{
		cluster:   x.clusterLocked(e.Cluster),
		resource:  x.resourceLocked(e.Resource, e.Object),
		namespace: m.GetNamespace(),
		name:      m.GetName(),
	}
	if e.Type == aggregate.Deleted {
		x.removeLocked(k)
		return
	}
	x.putLocked(k, e.Object)
}

func (x *Index) clusterLocked(name string) uint32 {
	id, ok := x.clusterIDs[name]
	if !ok {
		id = uint32(len(x.clusterNames))
		x.clusterIDs[name] = id
		x.clusterNames = append(x.clusterNames, name)
		x.clusterDocs = append(x.clusterDocs, roaring.New())
	}
	return id
}

func (x *Index) resourceLocked(gvr schema.GroupVersionResource, obj runtime.Object) uint32 {
	id, ok := x.resourceIDs[gvr]
	if !ok {
		id = uint32(len(x.resources))
		x.resourceIDs[gvr] = id
		x.resources = append(x.resources, resourceInfo{gvr: gvr, docs: roaring.New()})
	}
	if r := &x.resources[id]; r.kind == "" {
		if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Kind != "" && gvk.Group != metav1.GroupName {
			r.kind = gvk.Kind
		}
	}
	return id
}

func (x *Index) putLocked(k docKey, obj runtime.Object) {
	gr := x.resources[k.resource].gvr.GroupResource()
	if id, ok := x.byKey[k]; ok {
		d := &x.docs[id]
		old := d.obj
		d.obj = obj
		oldLabels, newLabels := labelsOf(old), labelsOf(obj)
		for key, v := range oldLabels {
			if nv, ok := newLabels[key]; !ok || nv != v {
				x.unlabelLocked(key, v, id)
			}
		}
		for key, v := range newLabels {
			if ov, ok := oldLabels[key]; !ok || ov != v {
				x.labelLocked(key, v, id)
			}
		}
		oldImages, newImages := Images(gr, old), Images(gr, obj)
		for _, img := range oldImages {
			x.images.remove(lower(img), id)
		}
		for _, img := range newImages {
			x.images.add(lower(img), id)
		}
		return
	}
	var id uint32
	if n := len(x.free); n > 0 {
		id = x.free[n-1]
		x.free = x.free[:n-1]
	} else {
		id = uint32(len(x.docs))
		x.docs = append(x.docs, doc{})
	}
	x.docs[id] = doc{obj: obj, namespace: k.namespace, name: k.name, cluster: k.cluster, resource: k.resource}
	x.byKey[k] = id
	x.clusterDocs[k.cluster].Add(id)
	x.resources[k.resource].docs.Add(id)
	ns := x.namespaces[k.namespace]
	if ns == nil {
		ns = roaring.New()
		x.namespaces[k.namespace] = ns
	}
	ns.Add(id)
	x.names.add(lower(k.name), id)
	for key, v := range labelsOf(obj) {
		x.labelLocked(key, v, id)
	}
	for _, img := range Images(gr, obj) {
		x.images.add(lower(img), id)
	}
}

func (x *Index) removeLocked(k docKey) {
	id, ok := x.byKey[k]
	if !ok {
		return
	}
	d := x.docs[id]
	gr := x.resources[k.resource].gvr.GroupResource()
	delete(x.byKey, k)
	x.clusterDocs[k.cluster].Remove(id)
	x.resources[k.resource].docs.Remove(id)
	if ns := x.namespaces[k.namespace]; ns != nil {
		if ns.Remove(id); ns.IsEmpty() {
			delete(x.namespaces, k.namespace)
		}
	}
	x.names.remove(lower(k.name), id)
	for key, v := range labelsOf(d.obj) {
		x.unlabelLocked(key, v, id)
	}
	for _, img := range Images(gr, d.obj) {
		x.images.remove(lower(img), id)
	}
	x.docs[id] = doc{}
	x.free = append(x.free, id)
}

func (x *Index) labelLocked(key, value string, id uint32) {
	values := x.labels[key]
	if values == nil {
		values = make(map[string]docSet)
		x.labels[key] = values
	}
	d := values[value]
	d.add(id)
	values[value] = d
}

func (x *Index) unlabelLocked(key, value string, id uint32) {
	values := x.labels[key]
	d, ok := values[value]
	if !ok {
		return
	}
	if !d.remove(id) {
		values[value] = d
		return
	}
	delete(values, value)
	if len(values) == 0 {
		delete(x.labels, key)
	}
}

// labelsOf returns the labels of obj, read in place for an unstructured object.
func labelsOf(obj runtime.Object) map[string]string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		raw, _ := md["labels"].(map[string]any)
		if len(raw) == 0 {
			return nil
		}
		out := make(map[string]string, len(raw))
		for k, v := range raw {
			s, _ := v.(string)
			out[k] = s
		}
		return out
	}
	if m, err := meta.Accessor(obj); err == nil {
		return m.GetLabels()
	}
	return nil
}

// Key is the position of an object in the order of search results: by cluster, kind,
// group, version, resource, namespace and name.
type Key struct {
	Cluster, Kind, Group, Version, Resource, Namespace, Name string
}

// Compare orders keys: -1 if k comes before o, 0 if equal, +1 if after.
func (k Key) Compare(o Key) int {
	return cmp.Or(
		strings.Compare(k.Cluster, o.Cluster), strings.Compare(k.Kind, o.Kind), strings.Compare(k.Group, o.Group),
		strings.Compare(k.Version, o.Version), strings.Compare(k.Resource, o.Resource),
		strings.Compare(k.Namespace, o.Namespace), strings.Compare(k.Name, o.Name))
}

// Request is a search.
type Request struct {
	// Query is what to find. nil finds every object.
	Query *Query
	// Allow, if not nil, admits the clusters the caller may read: no result, count or
	// total comes from another cluster. It is called with the index's lock held, so it
	// must do no I/O.
	Allow func(cluster string) bool
	// Kinds, if not nil, are the resources to search, with their kinds as the caller
	// knows them from discovery (the objects of metadata-only resources do not say);
	// objects of other resources are not found. Default (nil): every resource, with
	// the kinds read off the objects.
	Kinds map[schema.GroupVersionResource]string
	// After, if not nil, is the key of the last item of the page before: the page starts
	// after it.
	After *Key
	// Limit is the number of items of the page. Default DefaultLimit; at most MaxLimit.
	Limit int
}

// Result is the answer of a search.
type Result struct {
	// Total is the number of objects found, over every page.
	Total int
	// Clusters and Kinds count the objects found by cluster, and by kind (Kind, or
	// Kind.group for a resource of a named group), over every page. Only non-zero counts
	// are present.
	Clusters map[string]int
	Kinds    map[string]int
	// Items are the objects of the page, in Key order.
	Items []Item
	// More says whether objects after the last item were found.
	More bool
}

// Item is an object found.
type Item struct {
	Key
	// Object is the fleet's object: shared, it must not be modified.
	Object runtime.Object
	// Images are its container images, for resources with a pod spec.
	Images []string
}

// Search answers a request from the index. The result reflects every event applied
// before it started.
func (x *Index) Search(req Request) *Result {
	q := req.Query
	if q == nil {
		q = &Query{}
	}
	limit := req.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)

	x.mu.RLock()
	defer x.mu.RUnlock()
	kinds := make([]string, len(x.resources))
	for id, r := range x.resources {
		kinds[id] = cmp.Or(req.Kinds[r.gvr], r.kind, r.gvr.Resource)
	}

	// The scope: the clusters allowed and matched.
	var parts []*roaring.Bitmap
	for id, name := range x.clusterNames {
		if (req.Allow == nil || req.Allow(name)) && q.MatchCluster(name) {
			parts = append(parts, x.clusterDocs[id])
		}
	}
	set := roaring.FastOr(parts...)
	if req.Kinds != nil {
		parts = parts[:0]
		for _, r := range x.resources {
			if _, ok := req.Kinds[r.gvr]; ok {
				parts = append(parts, r.docs)
			}
		}
		set.And(roaring.FastOr(parts...))
	}
	for _, k := range q.Kinds {
		parts = parts[:0]
		for id, r := range x.resources {
			if x.kindMatches(k, r.gvr, kinds[id]) {
				parts = append(parts, r.docs)
			}
		}
		set.And(roaring.FastOr(parts...))
	}
	for _, ns := range q.Namespaces {
		if b := x.namespaces[ns]; b != nil {
			set.And(b)
		} else {
			set.Clear()
		}
	}
	for _, t := range q.Names {
		if set.IsEmpty() {
			break
		}
		if t.Prefix && t.Value == "" {
			continue
		}
		set.And(x.names.match(t))
	}
	for _, img := range q.Images {
		if set.IsEmpty() {
			break
		}
		set.And(x.images.match(TextTerm{Value: img}))
	}
	for _, sel := range q.Labels {
		x.selectLocked(set, sel)
	}

	res := &Result{Total: int(set.GetCardinality()), Clusters: map[string]int{}, Kinds: map[string]int{}}
	if res.Total == 0 {
		res.Items = []Item{}
		return res
	}
	for id, name := range x.clusterNames {
		if n := set.AndCardinality(x.clusterDocs[id]); n > 0 {
			res.Clusters[name] += int(n)
		}
	}
	for id, r := range x.resources {
		if n := set.AndCardinality(r.docs); n > 0 {
			label := kinds[id]
			if r.gvr.Group != "" {
				label += "." + r.gvr.Group
			}
			res.Kinds[label] += int(n)
		}
	}

	// The page: the limit smallest keys after req.After, and whether there is one more.
	h := &keyHeap{}
	it := set.Iterator()
	for it.HasNext() {
		id := it.Next()
		k := x.keyLocked(id, kinds)
		if req.After != nil && k.Compare(*req.After) <= 0 {
			continue
		}
		if h.Len() == limit+1 {
			if k.Compare(h.items[0].Key) >= 0 {
				continue
			}
			heap.Pop(h)
		}
		heap.Push(h, heapItem{Key: k, id: id})
	}
	if h.Len() > limit {
		res.More = true
		heap.Pop(h)
	}
	res.Items = make([]Item, h.Len())
	for i := len(res.Items) - 1; i >= 0; i-- {
		hi := heap.Pop(h).(heapItem)
		d := x.docs[hi.id]
		res.Items[i] = Item{Key: hi.Key, Object: d.obj, Images: Images(x.resources[d.resource].gvr.GroupResource(), d.obj)}
	}
	return res
}

func (x *Index) keyLocked(id uint32, kinds []string) Key {
	d := &x.docs[id]
	gvr := x.resources[d.resource].gvr
	return Key{
		Cluster: x.clusterNames[d.cluster], Kind: kinds[d.resource],
		Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
		Namespace: d.namespace, Name: d.name,
	}
}

// kindMatches reports whether a kind term names a resource (see kindMatches).
func (x *Index) kindMatches(term string, gvr schema.GroupVersionResource, kind string) bool {
	return kindMatches(term, gvr, kind, x.opts.ShortNames[gvr.GroupResource()])
}

// selectLocked keeps in set the documents whose labels match sel: the requirements that
// an index answers (=, ==, in, exists, !=, notin, !) with the label sets, the others
// (gt, lt) by reading each document's labels.
func (x *Index) selectLocked(set *roaring.Bitmap, sel labels.Selector) {
	reqs, _ := sel.Requirements()
	for _, r := range reqs {
		if set.IsEmpty() {
			return
		}
		values := x.labels[r.Key()]
		withValues := func() *roaring.Bitmap {
			var found docsFound
			for v := range r.Values() {
				if d, ok := values[v]; ok {
					found.add(&d)
				}
			}
			return found.union()
		}
		withKey := func() *roaring.Bitmap {
			var found docsFound
			for _, d := range values {
				found.add(&d)
			}
			return found.union()
		}
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
			set.And(withValues())
		case selection.NotEquals, selection.NotIn:
			set.AndNot(withValues())
		case selection.Exists:
			set.And(withKey())
		case selection.DoesNotExist:
			set.AndNot(withKey())
		default:
			var drop []uint32
			it := set.Iterator()
			for it.HasNext() {
				id := it.Next()
				if !r.Matches(labels.Set(labelsOf(x.docs[id].obj))) {
					drop = append(drop, id)
				}
			}
			for _, id := range drop {
				set.Remove(id)
			}
		}
	}
}

// Len returns the number of objects indexed.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byKey)
}

type heapItem struct {
	Key
	id uint32
}

// keyHeap is a max-heap of keys: its root is the largest, to drop when a smaller one
// comes.
type keyHeap struct{ items []heapItem }

func (h *keyHeap) Len() int           { return len(h.items) }
func (h *keyHeap) Less(i, j int) bool { return h.items[i].Compare(h.items[j].Key) > 0 }
func (h *keyHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *keyHeap) Push(v any)         { h.items = append(h.items, v.(heapItem)) }
func (h *keyHeap) Pop() any {
	v := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return v
}
