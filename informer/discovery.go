package informer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"weak"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
)

// The clusters of a fleet mostly run the same Kubernetes version with the same CRDs, and
// serve the same discovery. A RESTMapper built from it, with the cached documents it
// was built from, held some 250 KB per cluster (BenchmarkDiscoveryHeap): most of the
// heap of a fleet of small clusters. So a Set keeps none of its own. Each reconcile reads the cluster's discovery, keeps of
// it only what resolving a name reads (discoveryView), and looks the digest of that up in
// a process-wide table (mappers), which builds a mapper for a digest it does not hold and
// keeps it while some Set holds it: a cluster that serves what another serves costs a
// pointer.

// sharedMapper is the RESTMapper of one discoveryView. It is immutable once built, and
// safe for concurrent use: a meta.DefaultRESTMapper is only written while it is built
// (restmapper.NewDiscoveryRESTMapper), and restmapper's shortcut expander keeps no
// state, reading the view's lists, which nothing writes, at each call.
type sharedMapper struct {
	// once builds mapper from view, for the first Set that asks.
	once   sync.Once
	view   discoveryView
	mapper meta.RESTMapper
}

func (m *sharedMapper) build() {
	static := staticDiscovery{view: &m.view}
	// The view's lists come with no error: the result is always complete.
	groupResources, _ := restmapper.GetAPIGroupResources(static)
	m.mapper = restmapper.NewShortcutExpander(restmapper.NewDiscoveryRESTMapper(groupResources), static, nil)
}

// discoveryDigest is the SHA-256 of a discoveryView (discoveryView.digest).
type discoveryDigest [sha256.Size]byte

// mapperTable holds the sharedMappers that Sets hold, one per digest.
type mapperTable struct {
	// mu guards entries.
	mu sync.Mutex
	// entries points weakly to every sharedMapper that some Set may still hold. The
	// cleanup of one that none holds any more (release) deletes its entry.
	entries map[discoveryDigest]weak.Pointer[sharedMapper]
}

// mappers is the process's table: Sets of any fleet share what their clusters serve alike.
var mappers = &mapperTable{entries: map[discoveryDigest]weak.Pointer[sharedMapper]{}}

// get returns the sharedMapper of v: the one that Sets already hold for the same digest,
// or a new one. The caller must hold it for as long as it uses it, for the table keeps
// it for no one.
func (t *mapperTable) get(v discoveryView) *sharedMapper {
	d := v.digest()
	t.mu.Lock()
	m := t.entries[d].Value()
	if m == nil {
		m = &sharedMapper{view: v}
		w := weak.Make(m)
		t.entries[d] = w
		runtime.AddCleanup(m, t.release, mapperEntry{digest: d, weak: w})
	}
	t.mu.Unlock()
	// Built outside the lock, so that a cluster whose discovery is new holds up no
	// other; those of the same digest wait for it.
	m.once.Do(m.build)
	return m
}

// mapperEntry is an entry of a mapperTable, as its cleanup finds it.
type mapperEntry struct {
	digest discoveryDigest
	weak   weak.Pointer[sharedMapper]
}

// release deletes e from t, unless a new mapper took its digest meanwhile.
func (t *mapperTable) release(e mapperEntry) {
	t.mu.Lock()
	if t.entries[e.digest] == e.weak {
		delete(t.entries, e.digest)
	}
	t.mu.Unlock()
}

// len returns the number of entries of t, some of which may be on their way out.
func (t *mapperTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// discoveryView is what restmapper's discovery mapper and shortcut expander read of a
// cluster's discovery, in the order they read it: of the groups, their names, versions
// and preferred version; of the resources of the groups' versions, in the groups' order,
// their names, singular names, short names, kinds and scopes; no subresource (neither
// maps one, and a configured name cannot be one). It shares its strings with the
// documents it was taken from, which it lets go of.
type discoveryView struct {
	groups    []*metav1.APIGroup
	resources []*metav1.APIResourceList
}

// newDiscoveryView returns the view of what a discovery client's ServerGroupsAndResources
// returned.
//
// The resource lists come in the groups' order, as restmapper's GetAPIGroupResources
// finds them: aggregated discovery returns them in the random order of a map, and the
// shortcut expander takes the first of the resources that share a short name (events and
// events.events.k8s.io: "ev"), which is thus the one of the group first in discovery,
// and the same in every cluster.
func newDiscoveryView(groups []*metav1.APIGroup, resources []*metav1.APIResourceList) discoveryView {
	byVersion := make(map[string]*metav1.APIResourceList, len(resources))
	for _, r := range resources {
		byVersion[r.GroupVersion] = r
	}
	v := discoveryView{groups: make([]*metav1.APIGroup, 0, len(groups)), resources: []*metav1.APIResourceList{}}
	for _, g := range groups {
		group := &metav1.APIGroup{Name: g.Name, PreferredVersion: versionOnly(g.PreferredVersion)}
		for _, gv := range g.Versions {
			group.Versions = append(group.Versions, versionOnly(gv))
			r, ok := byVersion[gv.GroupVersion]
			if !ok {
				continue
			}
			list := &metav1.APIResourceList{GroupVersion: r.GroupVersion}
			for _, res := range r.APIResources {
				if strings.Contains(res.Name, "/") {
					continue
				}
				list.APIResources = append(list.APIResources, metav1.APIResource{
					Name:         res.Name,
					SingularName: res.SingularName,
					Namespaced:   res.Namespaced,
					Kind:         res.Kind,
					ShortNames:   res.ShortNames,
				})
			}
			v.resources = append(v.resources, list)
		}
		v.groups = append(v.groups, group)
	}
	return v
}

func versionOnly(v metav1.GroupVersionForDiscovery) metav1.GroupVersionForDiscovery {
	return metav1.GroupVersionForDiscovery{GroupVersion: v.GroupVersion, Version: v.Version}
}

// digest returns the SHA-256 of an encoding of v in which no two views are alike:
// counts, and strings after their lengths.
func (v discoveryView) digest() discoveryDigest {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, uint64(len(v.groups)))
	for _, g := range v.groups {
		str(g.Name)
		str(g.PreferredVersion.GroupVersion)
		str(g.PreferredVersion.Version)
		b = binary.AppendUvarint(b, uint64(len(g.Versions)))
		for _, gv := range g.Versions {
			str(gv.GroupVersion)
			str(gv.Version)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(v.resources)))
	for _, r := range v.resources {
		str(r.GroupVersion)
		b = binary.AppendUvarint(b, uint64(len(r.APIResources)))
		for _, res := range r.APIResources {
			str(res.Name)
			str(res.SingularName)
			str(res.Kind)
			b = strconv.AppendBool(b, res.Namespaced)
			b = binary.AppendUvarint(b, uint64(len(res.ShortNames)))
			for _, s := range res.ShortNames {
				str(s)
			}
		}
	}
	return sha256.Sum256(b)
}

// staticDiscovery serves a discoveryView to restmapper's GetAPIGroupResources and shortcut
// expander, which call nothing of a discovery client but ServerGroupsAndResources
// (client-go's restmapper/discovery.go and shortcut.go). The other methods of the
// interface, left nil, would panic.
type staticDiscovery struct {
	discovery.DiscoveryInterface
	view *discoveryView
}

var _ discovery.DiscoveryInterface = staticDiscovery{}

// ServerGroupsAndResources returns the view's lists, which the caller must not modify.
func (s staticDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	return s.view.groups, s.view.resources, nil
}

// discover reads the cluster's discovery, and returns the mapper of what it serves,
// shared with the Sets whose clusters serve the same. A partial result (some group
// versions failed, discovery.ErrGroupDiscoveryFailed) is used as restmapper's
// GetAPIGroupResources uses it: the resources of the failed versions are not found.
//
// It is called by reconcile only, which runs on Start's goroutine.
func (s *Set) discover(ctx context.Context) (meta.RESTMapper, error) {
	// Not the client's own method, which asks again for a partial result: one read per
	// reconcile, two requests for aggregated discovery.
	groups, resources, err := discovery.ServerGroupsAndResourcesWithContext(ctx, s.discovery)
	if err != nil {
		if groups == nil || resources == nil {
			return nil, fmt.Errorf("reading discovery: %w", err)
		}
		klog.FromContext(ctx).V(1).Info("Discovery is partial", "err", err)
	}
	// Held until the next discovery replaces it, so that it stays shared meanwhile.
	s.mapper = mappers.get(newDiscoveryView(groups, resources))
	return s.mapper.mapper, nil
}
