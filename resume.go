package fleetwatch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// The Manager is the HTTP server's change log (server.ChangeLogSource): with the
// snapshot's change log on, a fleet watch resumes across a restart from the log, which
// holds the changes between a cursor and the resourceVersions the fleet was loaded at.

// logBases records where the objects that the fleet loaded from the snapshot stand in
// its change log, by cluster and resource, until they no longer stand for it; and which
// resources of a cluster are watched (or were loaded) namespace by namespace, one
// informer per namespace (server.ScopedChangeLog).
type logBases struct {
	// mu guards every field below.
	mu       sync.Mutex
	clusters map[string]map[schema.GroupVersionResource]*logBase
	// scoped has, by cluster, the resources watched or loaded namespace by namespace.
	scoped map[string]map[schema.GroupVersionResource]bool
	// imports are, by cluster, the change logs of other replicas whose records of the
	// cluster the snapshot's log holds, imported with it on a warm handover and kept
	// with it (persist.ClusterSnapshot.LogOrigins, of the import or of a load), until
	// its base is forgotten.
	imports map[string][]string
	// loads counts the loads (logBase.load).
	loads uint64
}

// logBase is what the fleet loaded of one resource of a cluster: the objects of one
// saved scope, or of one per namespace, loaded together.
type logBase struct {
	scopes map[persist.ResourceKey]*scopeBase
	// none: there is no base: a scope was saved at a resourceVersion that is not an
	// integer.
	none bool
	// stale: the objects no longer stand for the log (forget).
	stale bool
	// listed: the base is of the first lists of the resource's informers in this run,
	// which watch it cold, not of a load: the log holds nothing of it from an earlier
	// run (ChangeLogListed).
	listed bool
	// load numbers the load among all of the run's (ChangeLogBase).
	load uint64
}

// scopeBase is what the fleet loaded of one saved scope of a resource.
type scopeBase struct {
	namespace string
	// rv is the resourceVersion the objects were stored at, 0 until the load of the
	// cluster ends; objects is how many were loaded.
	rv      uint64
	objects int
}

// merged returns the base of the resource as a whole: the greatest of its scopes'
// resourceVersions once every one is known (0 until then), and the objects of all.
func (lb *logBase) merged() (rv uint64, objects int) {
	known := true
	for _, sb := range lb.scopes {
		rv = max(rv, sb.rv)
		objects += sb.objects
		known = known && sb.rv != 0
	}
	if !known {
		rv = 0
	}
	return rv, objects
}

// loading records that the objects of scope, saved under key, are being loaded into the
// fleet, before they are. The scopes of a resource that is watched namespace by
// namespace are loaded together: one load. b may be nil (no change log).
func (b *logBases) loading(cluster string, scope informer.Scope, key persist.ResourceKey) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scopeLocked(cluster, scope)
	res := b.resourcesLocked(cluster)
	if lb := res[scope.Resource]; lb != nil && !lb.stale && !lb.listed && lb.scopes[key] == nil {
		lb.scopes[key] = &scopeBase{namespace: scope.Namespace}
		return
	}
	res[scope.Resource] = b.newLocked(scope, key)
}

// resourcesLocked returns the bases of cluster's resources, made if there are none.
func (b *logBases) resourcesLocked(cluster string) map[schema.GroupVersionResource]*logBase {
	if b.clusters == nil {
		b.clusters = map[string]map[schema.GroupVersionResource]*logBase{}
	}
	res := b.clusters[cluster]
	if res == nil {
		res = map[schema.GroupVersionResource]*logBase{}
		b.clusters[cluster] = res
	}
	return res
}

// newLocked returns the base of a new load, of scope under key so far.
func (b *logBases) newLocked(scope informer.Scope, key persist.ResourceKey) *logBase {
	b.loads++
	return &logBase{scopes: map[persist.ResourceKey]*scopeBase{key: {namespace: scope.Namespace}}, load: b.loads}
}

// watching records that an informer of scope, whose store writes under key, feeds the
// fleet, before it starts. A resource that the fleet did not load, or whose load no
// longer stands for the log, is watched cold: its first lists are its base, as a load
// is, with every scope of it that is watched (listing, loaded).
func (b *logBases) watching(cluster string, scope informer.Scope, key persist.ResourceKey) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scopeLocked(cluster, scope)
	res := b.resourcesLocked(cluster)
	switch lb := res[scope.Resource]; {
	case lb == nil || lb.stale:
		lb = b.newLocked(scope, key)
		lb.listed = true
		res[scope.Resource] = lb
	case lb.listed && lb.scopes[key] == nil:
		lb.scopes[key] = &scopeBase{namespace: scope.Namespace}
	}
}

// listing reports whether the first list of scope, under key, is the base of its
// resource, which watching recorded, not known yet: the store then counts its objects
// for loaded, called with its resourceVersion.
func (b *logBases) listing(cluster string, scope informer.Scope, key persist.ResourceKey) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lb := b.clusters[cluster][scope.Resource]
	return lb != nil && lb.listed && !lb.stale && lb.scopes[key] != nil && lb.scopes[key].rv == 0
}

// scopeLocked records whether scope's resource is watched namespace by namespace.
func (b *logBases) scopeLocked(cluster string, scope informer.Scope) {
	if b.scoped == nil {
		b.scoped = map[string]map[schema.GroupVersionResource]bool{}
	}
	if b.scoped[cluster] == nil {
		b.scoped[cluster] = map[schema.GroupVersionResource]bool{}
	}
	b.scoped[cluster][scope.Resource] = scope.Namespace != ""
}

// loaded records the resourceVersion and the number of objects of a scope that loading
// recorded, once they are in the fleet.
func (b *logBases) loaded(cluster string, scope informer.Scope, key persist.ResourceKey, resourceVersion string, objects int) {
	if b == nil {
		return
	}
	rv, err := strconv.ParseUint(resourceVersion, 10, 64)
	b.mu.Lock()
	defer b.mu.Unlock()
	lb := b.clusters[cluster][scope.Resource]
	if lb == nil || lb.scopes[key] == nil {
		return
	}
	if err != nil {
		// The log cannot place a position before or at it.
		lb.none = true
		return
	}
	lb.scopes[key].rv, lb.scopes[key].objects = rv, objects
}

// forget records that what the fleet loaded of cluster (of its resource gvr, if not
// empty) no longer stands for the log: the cluster's identity changed, it left, or the
// resource was dropped. The base is kept, stale: the server still places the changes
// that follow the loaded objects after it.
func (b *logBases) forget(cluster string, gvr schema.GroupVersionResource) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for r, lb := range b.clusters[cluster] {
		if gvr.Empty() || r == gvr {
			lb.stale = true
		}
	}
	if gvr.Empty() {
		delete(b.imports, cluster)
	}
}

// imported records that the log holds the records of cluster that the change logs
// origins hold, which came with the cluster's state on a warm handover, once the fleet
// holds the state.
func (b *logBases) imported(cluster string, origins []string) {
	if b == nil || len(origins) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.imports == nil {
		b.imports = map[string][]string{}
	}
	b.imports[cluster] = slices.Clone(origins)
}

// origins returns the change logs whose records of cluster came with it, nil if none.
func (b *logBases) origins(cluster string) []string {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.imports[cluster])
}

// get calls fn, if not nil, with the base of (cluster, gvr) under the lock, and returns
// its load and whether it can be resumed from; fn is not called if there is none.
func (b *logBases) get(cluster string, gvr schema.GroupVersionResource, fn func(*logBase)) (load uint64, ok bool) {
	if b == nil {
		return 0, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	lb := b.clusters[cluster][gvr]
	if lb == nil || lb.none {
		return 0, false
	}
	if fn != nil {
		fn(lb)
	}
	return lb.load, !lb.stale
}

// scopeKey returns the key of the scope of (cluster, gvr) in namespace ("" for a
// resource loaded in one scope, whatever its namespace), and whether it can be resumed
// from.
func (b *logBases) scopeKey(cluster string, gvr schema.GroupVersionResource, namespace string) (persist.ResourceKey, bool) {
	var key persist.ResourceKey
	_, ok := b.get(cluster, gvr, func(lb *logBase) {
		for k, s := range lb.scopes {
			if s.namespace == namespace || namespace == "" && len(lb.scopes) == 1 {
				key = k
			}
		}
	})
	return key, ok && key != ""
}

// ChangeLogEpoch implements server.ChangeLogSource: the snapshot's identity, if it keeps
// a change log.
func (m *Manager) ChangeLogEpoch() string { return m.logEpoch }

// ChangeLogBase implements server.ChangeLogSource. The base of a resource loaded
// namespace by namespace is the greatest of its namespaces' resourceVersions once every
// one is known, with the objects of all.
func (m *Manager) ChangeLogBase(cluster string, gvr schema.GroupVersionResource) (uint64, int, uint64, bool) {
	var rv uint64
	var objects int
	load, ok := m.logBases.get(cluster, gvr, func(lb *logBase) { rv, objects = lb.merged() })
	return rv, objects, load, ok
}

// ChangeLogScoped implements server.ScopedChangeLog.
func (m *Manager) ChangeLogScoped(cluster string, gvr schema.GroupVersionResource) bool {
	b := m.logBases
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.scoped[cluster][gvr]
}

// ChangeLogListed implements server.ListedChangeLog.
func (m *Manager) ChangeLogListed(cluster string, gvr schema.GroupVersionResource) bool {
	listed := false
	m.logBases.get(cluster, gvr, func(lb *logBase) { listed = lb.listed })
	return listed
}

// ChangeLogScopeBases implements server.ScopedChangeLog. fn is called without the
// bases' lock.
func (m *Manager) ChangeLogScopeBases(cluster string, gvr schema.GroupVersionResource, fn func(namespace string, rv uint64, objects int)) bool {
	scopes := make([]scopeBase, 0, 8)
	_, ok := m.logBases.get(cluster, gvr, func(lb *logBase) {
		for _, sb := range lb.scopes {
			scopes = append(scopes, *sb)
		}
	})
	for _, sb := range scopes {
		fn(sb.namespace, sb.rv, sb.objects)
	}
	return ok
}

// ChangeLogHolds implements server.ChangeLogSource: whether the records of cluster came
// with it from the change log logEpoch on a warm handover.
func (m *Manager) ChangeLogHolds(cluster, logEpoch string) bool {
	return m.logEpoch != "" && slices.Contains(m.logBases.origins(cluster), logEpoch)
}

// errNotInLog: the change log cannot give what a resumed watch needs.
var errNotInLog = errors.New("the change log does not hold it")

// ChangesSince implements server.ChangeLogSource, from the snapshot's change log. It
// fails for a resource loaded in more than one scope (one informer per namespace),
// whose changes are read namespace by namespace (ScopeChangesSince).
func (m *Manager) ChangesSince(cluster string, gvr schema.GroupVersionResource, rv, upTo uint64, fn func(at uint64, e aggregate.Event)) (withRV bool, err error) {
	return m.ScopeChangesSince(cluster, gvr, "", rv, upTo, fn)
}

// ScopeChangesSince implements server.ScopedChangeLog; namespace "" reads the resource
// loaded in one scope.
func (m *Manager) ScopeChangesSince(cluster string, gvr schema.GroupVersionResource, namespace string, rv, upTo uint64, fn func(at uint64, e aggregate.Event)) (withRV bool, err error) {
	key, ok := m.logBases.scopeKey(cluster, gvr, namespace)
	if !ok || m.logEpoch == "" {
		if namespace != "" {
			return false, fmt.Errorf("%w: cluster %q, resource %s in namespace %q was not loaded from the snapshot", errNotInLog, cluster, gvr, namespace)
		}
		return false, fmt.Errorf("%w: cluster %q, resource %s was not loaded from the snapshot in one scope", errNotInLog, cluster, gvr)
	}
	store := m.opts.Snapshot
	withRV = true
	changes, err := store.ChangesSince(cluster, key, strconv.FormatUint(rv, 10))
	if errors.Is(err, persist.ErrTooOld) {
		// The coverage may start at rv: the log holds every change after it, not
		// every one at it.
		withRV = false
		changes, err = store.ChangesAfter(cluster, key, strconv.FormatUint(rv, 10))
	}
	if err != nil {
		return false, err
	}
	h := logHistory{store: store, cluster: cluster, key: key, last: map[string]runtime.Object{}}
	for i := range changes {
		c := &changes[i]
		at, err := strconv.ParseUint(c.ResourceVersion, 10, 64)
		if err != nil {
			return false, fmt.Errorf("%w: change %d has resourceVersion %q", errNotInLog, c.Seq, c.ResourceVersion)
		}
		if at > upTo {
			break
		}
		e, err := h.event(c)
		if err != nil {
			return false, err
		}
		e.Cluster, e.Resource = cluster, gvr
		fn(at, e)
	}
	return withRV, nil
}

// logHistory turns the records of one resource of the change log into the fleet's
// events, with the states before them.
type logHistory struct {
	store   *persist.Store
	cluster string
	key     persist.ResourceKey
	// last is each object's state after the records so far, nil if it was deleted, by
	// namespace/name.
	last map[string]runtime.Object
}

// event returns the fleet's event of record c.
func (h *logHistory) event(c *persist.Change) (aggregate.Event, error) {
	name := c.Namespace + "/" + c.Name
	switch c.Type {
	case persist.ChangeAdded, persist.ChangeModified:
		if c.Object == nil {
			// A Secret: the log never holds its values, so it cannot be sent.
			return aggregate.Event{}, fmt.Errorf("%w: change %d of %s has no object", errNotInLog, c.Seq, name)
		}
		obj, err := c.Decode()
		if err != nil {
			return aggregate.Event{}, err
		}
		e := aggregate.Event{Type: aggregate.Added, Object: obj}
		if c.Type == persist.ChangeModified {
			e.Type = aggregate.Updated
			if e.OldObject, err = h.before(c); err != nil {
				return aggregate.Event{}, err
			}
		}
		h.last[name] = obj
		return e, nil
	case persist.ChangeDeleted, persist.ChangeVanished:
		old, err := h.before(c)
		if err != nil {
			return aggregate.Event{}, err
		}
		obj := old
		if obj == nil {
			u := &unstructured.Unstructured{}
			u.SetNamespace(c.Namespace)
			u.SetName(c.Name)
			obj = u
		} else {
			obj = obj.DeepCopyObject()
		}
		if c.Type == persist.ChangeDeleted {
			// A watched deletion has its own resourceVersion, which is its record's.
			if a, err := meta.Accessor(obj); err == nil {
				a.SetResourceVersion(c.ResourceVersion)
			}
		}
		h.last[name] = nil
		return aggregate.Event{Type: aggregate.Deleted, Object: obj, FinalStateUnknown: c.Type == persist.ChangeVanished}, nil
	}
	return aggregate.Event{}, fmt.Errorf("%w: change %d is a %s", errNotInLog, c.Seq, c.Type)
}

// before returns the state of c's object before c: the last record of the object
// before it, nil if that is a deletion or if the log no longer has one.
func (h *logHistory) before(c *persist.Change) (runtime.Object, error) {
	name := c.Namespace + "/" + c.Name
	if obj, ok := h.last[name]; ok {
		return obj, nil
	}
	records, err := h.store.ObjectHistory(h.cluster, h.key, c.Namespace, c.Name)
	if err != nil {
		return nil, err
	}
	var prev *persist.Change
	for i := range records {
		if records[i].Seq >= c.Seq {
			break
		}
		prev = &records[i]
	}
	if prev == nil || prev.Object == nil {
		return nil, nil
	}
	obj, err := prev.Decode()
	if err != nil {
		klog.Background().V(2).Info("Cannot decode an object's earlier state in the change log", "cluster", h.cluster, "resource", h.key, "object", name, "err", err)
		return nil, nil
	}
	return obj, nil
}
