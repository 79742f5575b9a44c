package aggregate

import (
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// ClusterStore is the part of the fleet that one cluster's informer for one resource
// writes into. Get one with Fleet.ClusterStore.
//
// The informer calls the mutators Apply and Delete, then MarkSynced after its initial
// list. All methods are safe for concurrent use, and stores of different clusters or
// resources are written concurrently; the events of one object are delivered in the
// order of the calls that changed it. Every write updates the resource's Indexer and is
// queued for every handler before the call returns; it never waits for a handler.
//
// ClusterStore implements cache.KeyListerGetter over the objects of its cluster, with
// client-go keys (namespace/name, or name for cluster-scoped objects), so it can be the
// KnownObjects of a client-go DeltaFIFO or RealFIFO: a relist then reports the objects
// the cluster no longer has as cache.DeletedFinalStateUnknown, which the informer passes
// to Delete with finalStateUnknown set.
type ClusterStore struct {
	cluster string
	ix      *Indexer
	fleet   *Fleet

	// synced is set by MarkSynced; written under ix.lock, read without it.
	synced atomic.Bool

	// The fields below are guarded by ix.lock.

	// removed is set when the cluster or resource was removed from the fleet; writes
	// then fail with ErrStoreRemoved.
	removed bool
	// syncedAt is when MarkSynced was first called.
	syncedAt time.Time
	// waiters are the registrations whose HasSynced waits for this store.
	waiters []*Registration
}

var _ cache.KeyListerGetter = (*ClusterStore)(nil)

// Cluster returns the name of the store's cluster.
func (s *ClusterStore) Cluster() string { return s.cluster }

// Resource returns the store's resource.
func (s *ClusterStore) Resource() schema.GroupVersionResource { return s.ix.resource }

// Apply inserts or updates obj, which must have ObjectMeta, and delivers the change:
// Added if its key is new, Updated (with the previous object as OldObject) otherwise.
// initialList marks the events as part of an initial list.
//
// If the stored object has the same non-empty resourceVersion as obj, the update is a
// no-op: the stored object is kept, and the event is delivered only to handlers that
// asked for no-op updates. This is what makes a warm restart silent: the store is seeded
// from a snapshot, and the informer's first list applies the same objects again.
//
// The store keeps obj itself, not a copy: the caller must not modify it afterwards.
func (s *ClusterStore) Apply(obj runtime.Object, initialList bool) error {
	_, err := s.ApplyChanged(obj, initialList)
	return err
}

// ApplyChanged is Apply, and also reports whether the store changed: false if it held
// obj's key at obj's non-empty resourceVersion already, the no-op update above.
func (s *ClusterStore) ApplyChanged(obj runtime.Object, initialList bool) (changed bool, err error) {
	changed, _, err = s.ApplyEncodedChanged(obj, nil, initialList)
	return changed, err
}

// ApplyEncoded is Apply for an object that comes with encoded, its encoding in the
// format of the fleet's Codec (Options.Codec), such as the CBOR that the informers write
// while decoding a watch event, which persist's Codec reads. A compact fleet keeps
// encoded rather than encode obj; a plain one ignores it. Neither obj nor encoded may be
// modified afterwards. It implements informer.EncodedStore.
func (s *ClusterStore) ApplyEncoded(obj *unstructured.Unstructured, encoded []byte, initialList bool) error {
	_, _, err := s.ApplyEncodedChanged(obj, encoded, initialList)
	return err
}

// ApplyEncodedChanged is ApplyEncoded (with encoded nil: Apply) that also reports
// whether the store changed, as ApplyChanged, and returns the encoding that a compact
// fleet now holds for obj (nil in a plain fleet, or if nothing changed), so that a
// snapshot can store it without encoding obj again.
func (s *ClusterStore) ApplyEncodedChanged(obj runtime.Object, encoded []byte, initialList bool) (changed bool, stored []byte, err error) {
	return s.apply(obj, encoded, false, initialList)
}

// ApplyPartial is ApplyEncoded for an object of which partial holds only apiVersion,
// kind, and, of the metadata, name, namespace, uid, resourceVersion and labels: encoded
// is the whole object, in the format of the fleet's Codec. Only a compact fleet takes
// it: it keeps encoded and decodes it where it needs the object (user index functions,
// handlers, reads). partial must have ObjectMeta (an *unstructured.Unstructured, or an
// object that embeds one, as the *persist.PartialObject of a snapshot's partial load,
// persist.LoadOptions.Partial); the store reads its namespace, name, resourceVersion and
// labels (as the object encoded them, if it did: persist.PartialObject.EncodedLabels),
// and keeps nothing of it. It implements informer.PartialStore.
//
// An informer hands it the partial objects its decoders made, which answer for those
// fields from what they read when they were made (wire.EncodedObject): read from the
// maps here, after a whole list has come, they would be out of the CPU's cache.
func (s *ClusterStore) ApplyPartial(partial runtime.Object, encoded []byte, initialList bool) error {
	_, _, err := s.ApplyPartialChanged(partial, encoded, initialList)
	return err
}

// ApplyPartialChanged is ApplyPartial that also reports whether the store changed, and
// the encoding the fleet keeps if it did, as ApplyEncodedChanged.
func (s *ClusterStore) ApplyPartialChanged(partial runtime.Object, encoded []byte, initialList bool) (changed bool, stored []byte, err error) {
	if s.ix.codec == nil || encoded == nil {
		return false, nil, fmt.Errorf("apply to %s in cluster %q: %w", s.ix.resource, s.cluster, ErrPartialObject)
	}
	return s.apply(partial, encoded, true, initialList)
}

// apply is ApplyEncodedChanged, and ApplyPartialChanged with partial set: obj is then
// only what files the object, and encoded the object.
func (s *ClusterStore) apply(obj runtime.Object, encoded []byte, partial, initialList bool) (changed bool, stored []byte, err error) {
	key, rv, err := s.keyOf(obj)
	if err != nil {
		return false, nil, fmt.Errorf("apply to %s in cluster %q: %w", s.ix.resource, s.cluster, err)
	}
	ix := s.ix
	// A compact fleet encodes before taking the write lock, unless the update is a
	// no-op (a warm start's relist applies every object again).
	var v version
	if noOp, indexed := s.peekApply(key, rv); ix.codec != nil && !noOp {
		if v, err = ix.encodeForEntry(obj, rv, encoded); err != nil {
			return false, nil, fmt.Errorf("apply %s to %s: encoding: %w", key, ix.resource, err)
		}
		// User index functions need the object of a partial one: it is decoded here,
		// outside the lock. Handlers decode it in their own goroutines, as they do the
		// objects they read from entries: decoded here, the objects of a whole list
		// would wait in their queues, scattered among the encodings that stay.
		if partial && indexed {
			obj, partial = ix.decode(v.obj.(*encodedObject).data, key), false
		}
	}
	ix.lock.Lock()
	defer ix.lock.Unlock()
	if s.removed {
		return false, nil, fmt.Errorf("apply %s to %s: %w", key, ix.resource, ErrStoreRemoved)
	}
	e := ix.items.get(key)
	if e != nil && rv != "" && rv == e.resourceVersion() {
		cur := peek(e)
		ix.fanOutLocked(pending{ref: objectRef{ix, key}, typ: Updated, obj: cur, old: cur, encoded: encodingOf(e), entry: e, stored: e.obj, initialList: initialList}, true)
		return false, nil, nil
	}
	if v.obj == nil {
		// A plain fleet, or a no-op update that stopped being one since peekApply.
		if v, err = ix.encodeForEntry(obj, rv, encoded); err != nil {
			return false, nil, fmt.Errorf("apply %s to %s: encoding: %w", key, ix.resource, err)
		}
	}
	if eo, ok := v.obj.(*encodedObject); ok {
		stored = eo.data
	}
	// The object of a partial one is its entry's, decoded where it is needed.
	if partial {
		obj = nil
	}
	event := obj
	if event == nil {
		event = v.obj
	}
	if e == nil {
		e = ix.addLocked(key, v, obj)
		ix.fanOutLocked(pending{ref: objectRef{ix, key}, typ: Added, obj: event, encoded: stored, entry: e, stored: v.obj, initialList: initialList}, false)
	} else {
		old := peek(e)
		ix.updateLocked(e, v, obj)
		ix.fanOutLocked(pending{ref: objectRef{ix, key}, typ: Updated, obj: event, old: old, encoded: stored, entry: e, stored: v.obj, initialList: initialList}, false)
	}
	return true, stored, nil
}

// peekApply reports whether applying an object with key and resourceVersion rv would be
// a no-op update now, and whether the indexer has user index functions.
func (s *ClusterStore) peekApply(key Key, rv string) (noOp, indexed bool) {
	s.ix.lock.RLock()
	defer s.ix.lock.RUnlock()
	e := s.ix.items.get(key)
	return rv != "" && e != nil && e.resourceVersion() == rv, len(s.ix.indices) > 0
}

// Delete removes the object with obj's key and delivers Deleted with obj as the last
// known state. finalStateUnknown says the deletion was detected by a relist rather than
// watched (obj then is typically the stored object). Deleting a key that is not present
// does nothing.
func (s *ClusterStore) Delete(obj runtime.Object, finalStateUnknown bool) error {
	key, _, err := s.keyOf(obj)
	if err != nil {
		return fmt.Errorf("delete from %s in cluster %q: %w", s.ix.resource, s.cluster, err)
	}
	ix := s.ix
	ix.lock.Lock()
	defer ix.lock.Unlock()
	if s.removed {
		return fmt.Errorf("delete %s from %s: %w", key, ix.resource, ErrStoreRemoved)
	}
	e := ix.items.get(key)
	if e == nil {
		return nil
	}
	old := peek(e)
	ix.removeLocked(e)
	ix.fanOutLocked(pending{ref: objectRef{ix, key}, typ: Deleted, obj: obj, old: old, finalStateUnknown: finalStateUnknown}, false)
	return nil
}

func (s *ClusterStore) keyOf(obj runtime.Object) (Key, string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return Key{}, "", fmt.Errorf("%w: %w", ErrNoMetadata, err)
	}
	key := Key{Cluster: s.cluster, Namespace: m.GetNamespace(), Name: m.GetName()}
	if err := key.validate(); err != nil {
		return Key{}, "", err
	}
	return key, m.GetResourceVersion(), nil
}

// MarkSynced records that the informer has applied its initial list. Calls after the
// first do nothing.
func (s *ClusterStore) MarkSynced() {
	ix := s.ix
	ix.lock.Lock()
	if s.synced.Load() {
		ix.lock.Unlock()
		return
	}
	s.synced.Store(true)
	s.syncedAt = s.fleet.clock.Now()
	waiters := s.waiters
	s.waiters = nil
	ix.lock.Unlock()
	for _, r := range waiters {
		r.storeSynced()
	}
}

// Synced reports whether MarkSynced has been called.
func (s *ClusterStore) Synced() bool { return s.synced.Load() }

// Len returns the number of objects of the store's cluster and resource.
func (s *ClusterStore) Len() int {
	s.ix.lock.RLock()
	defer s.ix.lock.RUnlock()
	if s.removed {
		return 0
	}
	if ci := s.ix.clusters[s.cluster]; ci != nil {
		return ci.count
	}
	return 0
}

// ListKeys returns the client-go keys of the store's objects. It implements
// cache.KeyLister.
func (s *ClusterStore) ListKeys() []string {
	s.ix.lock.RLock()
	defer s.ix.lock.RUnlock()
	ci := s.ix.clusters[s.cluster]
	if s.removed || ci == nil {
		return nil
	}
	out := make([]string, 0, ci.count)
	for _, objs := range ci.namespaces {
		for e := range objs.all() {
			out = append(out, e.key.MetaNamespaceKey())
		}
	}
	return out
}

// GetByKey returns the object with the given client-go key. It implements
// cache.KeyGetter; the error is always nil.
func (s *ClusterStore) GetByKey(key string) (value any, exists bool, err error) {
	namespace, name, ok := splitMetaNamespaceKey(key)
	if !ok {
		return nil, false, nil
	}
	s.ix.lock.RLock()
	var obj runtime.Object
	if e := s.ix.items.get(Key{Cluster: s.cluster, Namespace: namespace, Name: name}); e != nil && !s.removed {
		obj = peek(e)
	}
	s.ix.lock.RUnlock()
	if obj == nil {
		return nil, false, nil
	}
	return s.ix.decoded(obj), true, nil
}

// ResourceVersionByKey returns the resourceVersion of the object with the given
// client-go key, without decoding it in a compact fleet. A warm start's seeded list
// (informer) files its objects by it.
func (s *ClusterStore) ResourceVersionByKey(key string) (rv string, exists bool) {
	namespace, name, ok := splitMetaNamespaceKey(key)
	if !ok {
		return "", false
	}
	s.ix.lock.RLock()
	defer s.ix.lock.RUnlock()
	if e := s.ix.items.get(Key{Cluster: s.cluster, Namespace: namespace, Name: name}); e != nil && !s.removed {
		return e.resourceVersion(), true
	}
	return "", false
}

// fanOutLocked queues p for every handler of the indexer. noOp marks a no-op update,
// which only handlers that asked for them receive.
func (ix *Indexer) fanOutLocked(p pending, noOp bool) {
	for _, r := range ix.handlers {
		if noOp && !r.deliverNoOp || !r.wantsCluster(p.ref.key.Cluster) {
			continue
		}
		r.enqueue(p)
	}
}

// removeClusterLocked removes the objects of cluster from ix, delivering Deleted events
// with FinalStateUnknown set, and retires the cluster's store. It returns the
// registrations that were waiting for that store to sync.
func (ix *Indexer) removeClusterLocked(cluster string, moved bool) (waiters []*Registration) {
	if s := ix.stores[cluster]; s != nil {
		s.removed = true
		waiters, s.waiters = s.waiters, nil
		delete(ix.stores, cluster)
	}
	ci := ix.clusters[cluster]
	if ci == nil {
		return waiters
	}
	// The cluster's own indices go as a whole; only items and user indices are shared.
	delete(ix.clusters, cluster)
	for _, s := range ci.namespaces {
		for e := range s.all() {
			ix.items.remove(e)
			ix.releaseLabelsLocked(e.labels)
			cur := peek(e)
			if len(ix.indices) > 0 {
				obj := ix.decoded(cur)
				for _, ui := range ix.indices {
					values, err := ui.fn(obj)
					ix.removeFromIndexLocked(ui, e, values, err)
				}
			}
			ix.fanOutLocked(pending{ref: objectRef{ix, e.key}, typ: Deleted, obj: cur, old: cur, finalStateUnknown: true, moved: moved}, false)
		}
	}
	return waiters
}
