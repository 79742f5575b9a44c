package mcprovider

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
)

// fleetMapper is a meta.RESTMapper of the kinds the fleet caches, learned without a
// request of its own, so that the views read a warm fleet before any apiserver answers.
// A kind maps to its resource as, in this order:
//
//   - the discovery of a cluster resolved it (the clusters' status);
//   - the fleet holds objects of that kind (loaded from the snapshot, or listed);
//   - the scheme knows the kind, and the resource its name guesses
//     (meta.UnsafeGuessKindToResource) is one the fleet caches, still empty.
//
// The first two are kept; a guess is made again until one of them answers. Only
// RESTMapping and RESTMappings answer: the other methods find nothing, so that a
// FirstHitRESTMapper asks the next mapper.
type fleetMapper struct {
	mgr    *fleetwatch.Manager
	fleet  *aggregate.Fleet
	scheme *runtime.Scheme

	// mu guards known.
	mu sync.Mutex
	// known holds the mappings learned from discovery or objects, by kind.
	known map[schema.GroupVersionKind]*meta.RESTMapping
}

var _ meta.RESTMapper = (*fleetMapper)(nil)

func newFleetMapper(mgr *fleetwatch.Manager, scheme *runtime.Scheme) *fleetMapper {
	return &fleetMapper{mgr: mgr, fleet: mgr.Fleet(), scheme: scheme, known: map[schema.GroupVersionKind]*meta.RESTMapping{}}
}

// mapping returns the mapping of gvk, or nil.
func (m *fleetMapper) mapping(gvk schema.GroupVersionKind) *meta.RESTMapping {
	m.mu.Lock()
	known := m.known[gvk]
	m.mu.Unlock()
	if known != nil {
		return known
	}
	found := m.discovered(gvk)
	if found == nil {
		found = m.fromObjects(gvk)
	}
	if found != nil {
		m.mu.Lock()
		m.known[gvk] = found
		m.mu.Unlock()
		return found
	}
	return m.guess(gvk)
}

func newMapping(gvr schema.GroupVersionResource, gvk schema.GroupVersionKind, namespaced bool) *meta.RESTMapping {
	scope := meta.RESTScopeRoot
	if namespaced {
		scope = meta.RESTScopeNamespace
	}
	return &meta.RESTMapping{Resource: gvr, GroupVersionKind: gvk, Scope: scope}
}

func (m *fleetMapper) discovered(gvk schema.GroupVersionKind) *meta.RESTMapping {
	for _, st := range m.mgr.Status() {
		for _, rs := range st.Resources {
			if rs.Kind == gvk && !rs.Resource.Empty() {
				return newMapping(rs.Resource, gvk, rs.Namespaced)
			}
		}
	}
	return nil
}

// fromObjects reads the kind of one cached object of each resource of gvk's group and
// version: one, not a list, which a compact fleet would decode whole, on the way of the
// first cluster's first request.
func (m *fleetMapper) fromObjects(gvk schema.GroupVersionKind) *meta.RESTMapping {
	for _, gvr := range m.fleet.Resources() {
		if gvr.GroupVersion() != gvk.GroupVersion() {
			continue
		}
		ix := m.fleet.Indexer(gvr)
		for _, key := range ix.ListKeys() {
			obj, ok := ix.Get(key)
			if !ok {
				continue // gone since
			}
			if obj.GetObjectKind().GroupVersionKind() != gvk {
				break
			}
			a, err := meta.Accessor(obj)
			if err != nil {
				break
			}
			return newMapping(gvr, gvk, a.GetNamespace() != "")
		}
	}
	return nil
}

func (m *fleetMapper) guess(gvk schema.GroupVersionKind) *meta.RESTMapping {
	if !m.scheme.Recognizes(gvk) {
		return nil
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvk)
	if !slices.Contains(m.fleet.Resources(), plural) {
		return nil
	}
	// Empty: the scope changes nothing of what a read finds.
	return newMapping(plural, gvk, true)
}

func (m *fleetMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	mappings, err := m.RESTMappings(gk, versions...)
	if err != nil {
		return nil, err
	}
	return mappings[0], nil
}

func (m *fleetMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	if len(versions) == 0 {
		// The versions the fleet caches of the group.
		for _, gvr := range m.fleet.Resources() {
			if gvr.Group == gk.Group && !slices.Contains(versions, gvr.Version) {
				versions = append(versions, gvr.Version)
			}
		}
	}
	var out []*meta.RESTMapping
	for _, v := range versions {
		if mp := m.mapping(gk.WithVersion(v)); mp != nil {
			out = append(out, mp)
		}
	}
	if len(out) == 0 {
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return out, nil
}

func (m *fleetMapper) KindFor(resource schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return schema.GroupVersionKind{}, &meta.NoResourceMatchError{PartialResource: resource}
}

func (m *fleetMapper) KindsFor(resource schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return nil, &meta.NoResourceMatchError{PartialResource: resource}
}

func (m *fleetMapper) ResourceFor(input schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return schema.GroupVersionResource{}, &meta.NoResourceMatchError{PartialResource: input}
}

func (m *fleetMapper) ResourcesFor(input schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return nil, &meta.NoResourceMatchError{PartialResource: input}
}

func (m *fleetMapper) ResourceSingularizer(resource string) (string, error) {
	return "", &meta.NoResourceMatchError{PartialResource: schema.GroupVersionResource{Resource: resource}}
}
