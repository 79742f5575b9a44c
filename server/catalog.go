package server

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// apiResource is a resource the server serves, as discovery describes it.
type apiResource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

func (r *apiResource) gvk() schema.GroupVersionKind { return r.gvr.GroupVersion().WithKind(r.kind) }

// listKind is the kind of the resource's lists.
func (r *apiResource) listKind() string { return r.kind + "List" }

// catalog is the set of resources served for a scope of clusters.
type catalog struct {
	resources map[schema.GroupVersionResource]*apiResource
}

// catalog returns the resources served in sc: those that the status of a cluster of sc
// resolved (for a cluster another replica watches, as its owner publishes them: see
// describe.go in the root package), and those the watch cache holds objects of in a
// cluster of sc (a cluster whose discovery has not answered since a warm start serves
// its snapshot), described by another cluster's status or by the objects themselves.
func (s *Server) catalog(sc scope) *catalog {
	c := &catalog{resources: make(map[schema.GroupVersionResource]*apiResource)}
	known := make(map[schema.GroupVersionResource]*apiResource)
	remote := false
	for _, st := range s.src.Status() {
		for _, rs := range st.Resources {
			if rs.Resource.Empty() || rs.Kind.Kind == "" {
				continue
			}
			r := &apiResource{gvr: rs.Resource, kind: rs.Kind.Kind, namespaced: rs.Namespaced}
			if _, ok := known[r.gvr]; !ok {
				known[r.gvr] = r
			}
			if _, ok := c.resources[r.gvr]; !ok && sc.includes(st.Name) {
				c.resources[r.gvr] = r
			}
		}
		if sc.fanOut && st.Phase == aggregate.PhaseRemote && len(st.Resources) == 0 && sc.includes(st.Name) {
			remote = true
		}
	}
	// Other replicas' clusters whose owner publishes no resources (a replica of an
	// earlier release, during a rolling update): the replicas share their
	// configuration, so those that the other clusters resolved stand for theirs.
	if remote {
		for gvr, r := range known {
			if _, ok := c.resources[gvr]; !ok {
				c.resources[gvr] = r
			}
		}
	}
	for _, rc := range s.cache.all() {
		if _, ok := c.resources[rc.resource]; ok {
			continue
		}
		rc.mu.RLock()
		inScope := false
		for cl := range rc.clusters {
			if sc.includes(cl) {
				inScope = true
				break
			}
		}
		r := &apiResource{gvr: rc.resource, kind: rc.kind.Kind, namespaced: rc.namespaced}
		rc.mu.RUnlock()
		if !inScope {
			continue
		}
		if k := known[rc.resource]; k != nil {
			r = k
		}
		if r.kind != "" {
			c.resources[r.gvr] = r
		}
	}
	return c
}

func (c *catalog) get(gvr schema.GroupVersionResource) *apiResource { return c.resources[gvr] }

// groupVersions are the versions of one API group.
type groupVersions struct {
	group string
	// versions are in order of preference, most preferred first, each with its
	// resources sorted by name.
	versions []versionResources
}

type versionResources struct {
	version   string
	resources []*apiResource
}

// groups returns the API groups of the catalog, sorted by name ("" first).
func (c *catalog) groups() []groupVersions {
	byGroup := make(map[string]map[string][]*apiResource)
	for gvr, r := range c.resources {
		if byGroup[gvr.Group] == nil {
			byGroup[gvr.Group] = make(map[string][]*apiResource)
		}
		byGroup[gvr.Group][gvr.Version] = append(byGroup[gvr.Group][gvr.Version], r)
	}
	out := make([]groupVersions, 0, len(byGroup))
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		gv := groupVersions{group: g}
		versions := slices.Collect(maps.Keys(byGroup[g]))
		slices.SortFunc(versions, func(a, b string) int { return -version.CompareKubeAwareVersionStrings(a, b) })
		for _, v := range versions {
			rs := byGroup[g][v]
			slices.SortFunc(rs, func(a, b *apiResource) int { return cmp.Compare(a.gvr.Resource, b.gvr.Resource) })
			gv.versions = append(gv.versions, versionResources{version: v, resources: rs})
		}
		out = append(out, gv)
	}
	return out
}

// groupVersion returns the resources of one group version, sorted by name.
func (c *catalog) groupVersion(gv schema.GroupVersion) []*apiResource {
	var out []*apiResource
	for gvr, r := range c.resources {
		if gvr.GroupVersion() == gv {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b *apiResource) int { return cmp.Compare(a.gvr.Resource, b.gvr.Resource) })
	return out
}

// Well-known names of resources, as the apiserver reports them in discovery, so that
// kubectl get po, kubectl get all and the like work.
var (
	shortNames = map[schema.GroupResource][]string{
		{Resource: "configmaps"}:                                               {"cm"},
		{Resource: "endpoints"}:                                                {"ep"},
		{Resource: "events"}:                                                   {"ev"},
		{Resource: "limitranges"}:                                              {"limits"},
		{Resource: "namespaces"}:                                               {"ns"},
		{Resource: "nodes"}:                                                    {"no"},
		{Resource: "persistentvolumeclaims"}:                                   {"pvc"},
		{Resource: "persistentvolumes"}:                                        {"pv"},
		{Resource: "pods"}:                                                     {"po"},
		{Resource: "replicationcontrollers"}:                                   {"rc"},
		{Resource: "resourcequotas"}:                                           {"quota"},
		{Resource: "serviceaccounts"}:                                          {"sa"},
		{Resource: "services"}:                                                 {"svc"},
		{Group: "apps", Resource: "daemonsets"}:                                {"ds"},
		{Group: "apps", Resource: "deployments"}:                               {"deploy"},
		{Group: "apps", Resource: "replicasets"}:                               {"rs"},
		{Group: "apps", Resource: "statefulsets"}:                              {"sts"},
		{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:           {"hpa"},
		{Group: "batch", Resource: "cronjobs"}:                                 {"cj"},
		{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: {"csr"},
		{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: {"crd", "crds"},
		{Group: "events.k8s.io", Resource: "events"}:                           {"ev"},
		{Group: "networking.k8s.io", Resource: "ingresses"}:                    {"ing"},
		{Group: "networking.k8s.io", Resource: "networkpolicies"}:              {"netpol"},
		{Group: "policy", Resource: "poddisruptionbudgets"}:                    {"pdb"},
		{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:              {"pc"},
		{Group: "storage.k8s.io", Resource: "storageclasses"}:                  {"sc"},
	}
	categoryAll = map[schema.GroupResource]bool{
		{Resource: "pods"}:                                           true,
		{Resource: "replicationcontrollers"}:                         true,
		{Resource: "services"}:                                       true,
		{Group: "apps", Resource: "daemonsets"}:                      true,
		{Group: "apps", Resource: "deployments"}:                     true,
		{Group: "apps", Resource: "replicasets"}:                     true,
		{Group: "apps", Resource: "statefulsets"}:                    true,
		{Group: "autoscaling", Resource: "horizontalpodautoscalers"}: true,
		{Group: "batch", Resource: "cronjobs"}:                       true,
		{Group: "batch", Resource: "jobs"}:                           true,
	}
)

// readVerbs are the verbs of every served resource.
var readVerbs = []string{"get", "list", "watch"}

func (r *apiResource) singular() string { return strings.ToLower(r.kind) }

func (r *apiResource) shortNames() []string { return shortNames[r.gvr.GroupResource()] }

func (r *apiResource) categories() []string {
	if categoryAll[r.gvr.GroupResource()] {
		return []string{"all"}
	}
	return nil
}
