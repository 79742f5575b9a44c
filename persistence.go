package fleetwatch

import (
	"context"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// saved is what a snapshot holds of one cluster, once loaded into the fleet.
type saved struct {
	identity cluster.Identity
	// scopes maps each saved scope to its resourceVersion and the keys of its objects.
	scopes map[informer.Scope]savedScope
}

// objects is the number of objects saved for the cluster; 0 for a nil saved.
func (sv *saved) objects() int {
	if sv == nil {
		return 0
	}
	n := 0
	for _, s := range sv.scopes {
		n += len(s.objects)
	}
	return n
}

type savedScope struct {
	key             persist.ResourceKey
	resourceVersion string
	// objects are the names of the scope's saved objects, for dropUnrequested: the
	// objects themselves live in the fleet only.
	objects []cache.ObjectName
}

// seed loads the snapshot into the fleet: reads are served at once, before any network
// call. It returns what was loaded, by cluster.
//
// Only the scopes whose Spec is among specs, those of the configured resources, are
// loaded into the fleet. The others were saved under another configuration: their objects
// may be in another form (Secrets with their values, which are now dropped, or without
// them, which are now kept), and an informer that lists them again would keep the loaded
// form of every object whose resourceVersion did not change. Such a scope is dropped
// from snapshot at once, which must not have a Writer yet, and if it held values of
// Secrets, the file is compacted, so that no free page keeps them.
//
// bases, if not nil, records where the loaded objects stand in the change log.
func seed(ctx context.Context, fleet *aggregate.Fleet, snap *persist.Snapshot, specs map[string]bool, snapshot *persist.Store, bases *logBases) map[string]*saved {
	out := map[string]*saved{}
	var stale []staleScope
	for name, cs := range snap.Clusters {
		var s *saved
		s, stale = seedCluster(ctx, fleet, name, cs, specs, stale, bases)
		out[name] = s
	}
	dropStale(ctx, snapshot, stale)
	return out
}

// staleScope is a saved scope that seedCluster left out, for dropStale.
type staleScope struct {
	cluster string
	key     persist.ResourceKey
	// secrets: the scope may hold values of Secrets.
	secrets bool
}

// seedCluster loads the snapshot of one cluster into the fleet, as seed does, and
// returns what it loaded, with stale extended by the scopes it left out.
func seedCluster(ctx context.Context, fleet *aggregate.Fleet, name string, cs *persist.ClusterSnapshot, specs map[string]bool, stale []staleScope, bases *logBases) (*saved, []staleScope) {
	sd := newClusterSeeder(ctx, fleet, name, specs, bases)
	for key, rs := range cs.Resources {
		sd.add(key, rs.Objects, rs.Encoded)
	}
	return sd.finish(cs, stale)
}

// clusterSeeder loads the snapshot of one cluster into the fleet a run of objects at a
// time (add, for persist.LoadOptions.Objects), then takes what the snapshot says of the
// cluster as a whole (finish). It is used from one goroutine.
type clusterSeeder struct {
	ctx   context.Context
	fleet *aggregate.Fleet
	name  string
	specs map[string]bool
	// bases is nil, or records where the loaded objects stand in the change log.
	bases *logBases
	// scopes has each resource key met so far.
	scopes map[persist.ResourceKey]*seedScope
	n      int
}

// seedScope is one saved scope of a clusterSeeder.
type seedScope struct {
	// skip: the key is unreadable, or of a scope configured differently now (then
	// stale); its objects are not loaded.
	skip, stale bool
	scope       informer.Scope
	store       *aggregate.ClusterStore
	names       []cache.ObjectName
}

func newClusterSeeder(ctx context.Context, fleet *aggregate.Fleet, name string, specs map[string]bool, bases *logBases) *clusterSeeder {
	return &clusterSeeder{ctx: ctx, fleet: fleet, name: name, specs: specs, bases: bases, scopes: map[persist.ResourceKey]*seedScope{}}
}

// scope returns the seedScope of key, reading the key the first time.
func (sd *clusterSeeder) scope(key persist.ResourceKey) *seedScope {
	if sc := sd.scopes[key]; sc != nil {
		return sc
	}
	logger := klog.FromContext(sd.ctx)
	sc := &seedScope{}
	scope, err := informer.ParseScope(string(key))
	switch {
	case err != nil:
		logger.Info("Ignoring an unreadable resource key in the snapshot", "cluster", sd.name, "key", key, "err", err)
		sc.skip = true
	case !sd.specs[scope.Spec]:
		logger.V(1).Info("Dropping a snapshot scope that is configured differently now", "cluster", sd.name, "scope", key)
		sc.skip, sc.stale, sc.scope = true, true, scope
	default:
		sc.scope = scope
		sc.store = sd.fleet.ClusterStore(sd.name, scope.Resource)
		// Before the objects reach the fleet's handlers: the server places them.
		sd.bases.loading(sd.name, scope, key)
	}
	sd.scopes[key] = sc
	return sc
}

// add loads objects, saved under key, into the fleet; encoded is nil, or has each
// object's stored encoding as persist.ResourceSnapshot.Encoded does.
func (sd *clusterSeeder) add(key persist.ResourceKey, objects []runtime.Object, encoded [][]byte) {
	sc := sd.scope(key)
	if sc.skip {
		return
	}
	if sc.names == nil {
		sc.names = make([]cache.ObjectName, 0, len(objects))
	}
	for i, obj := range objects {
		var err error
		if encoded != nil && encoded[i] != nil {
			// obj is what files the object (persist.ResourceSnapshot.Encoded).
			err = sc.store.ApplyPartial(obj, encoded[i], true)
		} else {
			err = sc.store.Apply(obj, true)
		}
		if err != nil {
			klog.FromContext(sd.ctx).Info("Ignoring a snapshot object", "cluster", sd.name, "key", key, "err", err)
			continue
		}
		if a, err := meta.Accessor(obj); err == nil {
			sc.names = append(sc.names, cache.ObjectName{Namespace: a.GetNamespace(), Name: a.GetName()})
		}
	}
	sd.n += len(objects)
}

// finish returns what was loaded of the cluster, whose snapshot is cs, once add has been
// given all of its objects; stale is extended by the scopes left out.
func (sd *clusterSeeder) finish(cs *persist.ClusterSnapshot, stale []staleScope) (*saved, []staleScope) {
	s := &saved{
		identity: cluster.Identity{UID: cs.Identity.UID, Server: cs.Identity.Server},
		scopes:   map[informer.Scope]savedScope{},
	}
	// Every scope is recorded as loading before any is loaded: the base of a resource
	// loaded namespace by namespace is known once all of its scopes are (ChangeLogBase).
	for key := range cs.Resources {
		sd.scope(key)
	}
	for key, rs := range cs.Resources {
		sc := sd.scope(key)
		if sc.stale {
			stale = append(stale, staleScope{cluster: sd.name, key: key, secrets: sc.scope.HoldsSecretValues()})
		}
		if sc.skip {
			continue
		}
		s.scopes[sc.scope] = savedScope{key: key, resourceVersion: rs.ResourceVersion, objects: sc.names}
		sd.bases.loaded(sd.name, sc.scope, key, rs.ResourceVersion, len(sc.names))
	}
	// The logs that the cluster's records came from on a warm handover, which the
	// snapshot keeps: their positions are placed here after a restart too.
	sd.bases.imported(sd.name, cs.LogOrigins)
	klog.FromContext(sd.ctx).V(1).Info("Loaded cluster from snapshot", "cluster", sd.name, "scopes", len(s.scopes), "objects", sd.n)
	return s, stale
}

// dropStale drops the scopes that seedCluster left out from snapshot, which must not
// have a Writer yet, nor be in the middle of a load, and compacts the file if they may
// have held values of Secrets, so that no free page keeps them.
func dropStale(ctx context.Context, snapshot *persist.Store, stale []staleScope) {
	logger := klog.FromContext(ctx)
	compact := false
	for _, sc := range stale {
		if err := snapshot.DropResource(sc.cluster, sc.key); err != nil {
			logger.Error(err, "Dropping a snapshot scope", "cluster", sc.cluster, "scope", sc.key)
		}
		compact = compact || sc.secrets
	}
	if !compact {
		return
	}
	if err := snapshot.Compact(); err != nil {
		logger.Error(err, "Compacting the snapshot after dropping values of Secrets; the next start tries again")
	}
}

// sink hands one cluster's informer set its stores in the fleet, and, with persistence,
// mirrors their changes into the snapshot writer and seeds them from the snapshot.
type sink struct {
	fleet   *aggregate.Fleet
	cluster string
	// snapshot is nil without persistence.
	snapshot *persist.Store
	// compact is set when the fleet keeps its objects in the snapshot's encoding (see
	// snapshotEncoded).
	compact bool
	// bases is the Manager's, nil without a change log.
	bases *logBases

	// mu guards writer, seeds and requested.
	mu sync.Mutex
	// writer is nil without persistence; set once the snapshot is loaded, before the
	// informers start (setWriter).
	writer *persist.Writer
	// seeds are the saved scopes that may seed their informer, by scope.
	seeds map[informer.Scope]savedScope
	// requested are the scopes the informer set asked a store for.
	requested map[informer.Scope]bool
}

var (
	_ informer.Sink         = (*sink)(nil)
	_ informer.Seeder       = (*sink)(nil)
	_ informer.EncodingSink = (*sink)(nil)
	_ informer.PartialSink  = (*sink)(nil)
)

// StoresEncoded implements informer.EncodingSink: with persistence, the stores write
// the encodings of watched objects to the snapshot, rather than encode the objects; a
// compact fleet in the snapshot's encoding keeps them.
func (s *sink) StoresEncoded() bool { return s.snapshot != nil || s.compact }

// StoresPartial implements informer.PartialSink: a compact fleet in the snapshot's
// encoding keeps the informers' encodings of listed objects, and so does the snapshot.
func (s *sink) StoresPartial() bool { return s.compact }

// snapshotEncoded reports whether a fleet with codec keeps its objects in the snapshot's
// encoding (persist.Codec): the informers' encodings of watched objects are in it, and
// what the fleet holds is what the snapshot stores.
func snapshotEncoded(codec aggregate.Codec) bool {
	switch codec.(type) {
	case persist.Codec, *persist.Codec:
		return true
	}
	return false
}

// setWriter gives the sink the snapshot's writer.
func (s *sink) setWriter(w *persist.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writer = w
}

func (s *sink) Store(scope informer.Scope) informer.Store {
	s.mu.Lock()
	if s.requested == nil {
		s.requested = map[informer.Scope]bool{}
	}
	s.requested[scope] = true
	writer := s.writer
	s.mu.Unlock()
	// Before the informer starts: the server keeps a position per namespace of a
	// resource watched namespace by namespace from its first change, and places the
	// objects of a first list as it places loaded ones.
	key := persist.ResourceKey(scope.String())
	s.bases.watching(s.cluster, scope, key)
	store := s.fleet.ClusterStore(s.cluster, scope.Resource)
	if writer == nil {
		return store
	}
	return &persistingStore{ClusterStore: store, writer: writer, cluster: s.cluster, key: key, compact: s.compact, bases: s.bases, scope: scope}
}

func (s *sink) RemoveResource(gvr schema.GroupVersionResource) {
	s.bases.forget(s.cluster, gvr)
	s.fleet.RemoveClusterResource(s.cluster, gvr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.writer == nil {
		return
	}
	for scope := range s.requested {
		if scope.Resource == gvr {
			s.writer.DropResource(s.cluster, persist.ResourceKey(scope.String()))
			delete(s.requested, scope)
			// The file keeps the dropped values in free pages until it is compacted, which
			// cannot happen while the writer runs.
			if scope.HoldsSecretValues() {
				if err := s.snapshot.CompactAtNextOpen(); err != nil {
					klog.Background().Error(err, "Marking the snapshot for compaction after dropping values of Secrets", "cluster", s.cluster)
				}
			}
		}
	}
}

// Seed implements informer.Seeder. A seed is used once: an informer that starts again
// (a resource that came back) lists normally.
func (s *sink) Seed(scope informer.Scope) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	saved, ok := s.seeds[scope]
	if !ok {
		return "", false
	}
	delete(s.seeds, scope)
	return saved.resourceVersion, saved.resourceVersion != ""
}

// dropUnrequested removes what the snapshot held for scopes that the informer set did
// not ask for (a resource no longer configured, or configured differently): from the
// fleet, with Deleted events, and from the snapshot.
func (s *sink) dropUnrequested(ctx context.Context, all map[informer.Scope]savedScope) {
	s.mu.Lock()
	var stale []informer.Scope
	for scope := range all {
		if !s.requested[scope] {
			stale = append(stale, scope)
		}
	}
	writer := s.writer
	s.mu.Unlock()
	for _, scope := range stale {
		saved := all[scope]
		s.bases.forget(s.cluster, scope.Resource)
		store := s.fleet.ClusterStore(s.cluster, scope.Resource)
		for _, name := range saved.objects {
			// An object that a watched scope covers is that informer's business: its list
			// is diffed against the store. The others would be ghosts.
			if s.covered(scope.Resource, name.Namespace) {
				continue
			}
			if obj, ok, _ := store.GetByKey(name.String()); ok {
				_ = store.Delete(obj.(runtime.Object), true)
			}
		}
		if writer != nil {
			writer.DropResource(s.cluster, saved.key)
		}
		klog.FromContext(ctx).V(1).Info("Dropped a snapshot scope that is no longer configured", "cluster", s.cluster, "scope", scope.String())
	}
}

// covered reports whether a requested scope watches objects of gvr in namespace.
func (s *sink) covered(gvr schema.GroupVersionResource, namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.requested {
		if r.Resource == gvr && (r.Namespace == "" || r.Namespace == namespace) {
			return true
		}
	}
	return false
}

// persistingStore is a fleet store whose changes are also written to the snapshot.
type persistingStore struct {
	*aggregate.ClusterStore
	writer  *persist.Writer
	cluster string
	key     persist.ResourceKey
	// compact: the fleet holds objects in the snapshot's encoding, which the writer
	// stores as it is.
	compact bool
	// bases and scope: the informer's first list is the base of its resource in the
	// change log where the fleet did not load it (logBases.listing). started is set
	// at the first list's first object or checkpoint; listed counts the list's objects
	// until its checkpoint, while counting.
	bases    *logBases
	scope    informer.Scope
	started  bool
	counting bool
	listed   int
}

// initial counts an object of the informer's first list that the fleet took.
func (p *persistingStore) initial() {
	if !p.started {
		p.started = true
		p.counting = p.bases.listing(p.cluster, p.scope, p.key)
	}
	p.listed++
}

var (
	_ informer.Store        = (*persistingStore)(nil)
	_ informer.Checkpointer = (*persistingStore)(nil)
	_ informer.EncodedStore = (*persistingStore)(nil)
	_ informer.PartialStore = (*persistingStore)(nil)
)

func (p *persistingStore) Apply(obj runtime.Object, initialList bool) error {
	changed, held, err := p.ClusterStore.ApplyEncodedChanged(obj, nil, initialList)
	if err != nil {
		return err
	}
	// A re-applied object with the same resourceVersion (a seeded list, a relist) is
	// already in the snapshot: don't write it again.
	if !changed {
		return nil
	}
	if initialList {
		p.initial()
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && p.compact && held != nil {
		p.writer.UpsertEncoded(p.cluster, p.key, u, held)
	} else {
		p.writer.Upsert(p.cluster, p.key, obj)
	}
	return nil
}

func (p *persistingStore) ApplyEncoded(obj *unstructured.Unstructured, encoded []byte, initialList bool) error {
	var held []byte
	if p.compact {
		held = encoded
	}
	changed, stored, err := p.ClusterStore.ApplyEncodedChanged(obj, held, initialList)
	if err != nil {
		return err
	}
	if changed {
		if initialList {
			p.initial()
		}
		// What the fleet keeps (compressed by its Codec), else the informer's encoding.
		if stored == nil {
			stored = encoded
		}
		p.writer.UpsertEncoded(p.cluster, p.key, obj, stored)
	}
	return nil
}

// ApplyPartial is ApplyEncoded for a partial object, which only a compact fleet takes;
// the snapshot stores encoded, and reads no more than the object's key from partial, an
// *unstructured.Unstructured or an object that embeds one (the informer's partial
// objects).
func (p *persistingStore) ApplyPartial(partial runtime.Object, encoded []byte, initialList bool) error {
	if !p.compact {
		return fmt.Errorf("apply to the snapshot of cluster %q: %w", p.cluster, aggregate.ErrPartialObject)
	}
	u, ok := partial.(*unstructured.Unstructured)
	if c, isContent := partial.(runtime.Unstructured); !ok && isContent {
		u, ok = &unstructured.Unstructured{Object: c.UnstructuredContent()}, true
	}
	if !ok {
		return fmt.Errorf("apply a partial %T to the snapshot of cluster %q: want an unstructured object", partial, p.cluster)
	}
	changed, stored, err := p.ClusterStore.ApplyPartialChanged(partial, encoded, initialList)
	if err != nil {
		return err
	}
	if changed {
		if initialList {
			p.initial()
		}
		p.writer.UpsertEncoded(p.cluster, p.key, u, stored)
	}
	return nil
}

func (p *persistingStore) Delete(obj runtime.Object, finalStateUnknown bool) error {
	if err := p.ClusterStore.Delete(obj, finalStateUnknown); err != nil {
		return err
	}
	a, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("delete from snapshot: %w", err)
	}
	if finalStateUnknown {
		// A relist found it gone: deleted while the informer was away.
		p.writer.DeleteVanished(p.cluster, p.key, a.GetNamespace(), a.GetName())
		return nil
	}
	p.writer.Delete(p.cluster, p.key, a.GetNamespace(), a.GetName())
	return nil
}

func (p *persistingStore) Checkpoint(resourceVersion string) {
	p.writer.Checkpoint(p.cluster, p.key, resourceVersion)
	if !p.started {
		// An empty first list.
		p.started = true
		p.counting = p.bases.listing(p.cluster, p.scope, p.key)
	}
	if p.counting {
		// The end of the first list: its objects stand at resourceVersion.
		p.counting = false
		p.bases.loaded(p.cluster, p.scope, p.key, resourceVersion, p.listed)
	}
}
