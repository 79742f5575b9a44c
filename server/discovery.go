package server

import (
	"encoding/json"
	"net/http"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Discovery documents. kubectl first asks /api and /apis for the aggregated form
// (apidiscovery.k8s.io/v2), which describes every resource in two requests; a client that
// does not ask for it gets the legacy documents, one per group version. Both are built
// from the same groups: those of the catalog, then fleetwatch.io.

// discoveryGroups returns the groups served in a scope: the catalog's, and fleetwatch.io.
func discoveryGroups(c *catalog) []groupVersions {
	gs := c.groups()
	return append(gs, groupVersions{group: GroupName, versions: []versionResources{{version: Version}}})
}

func apiResourceOf(r *apiResource) metav1.APIResource {
	return metav1.APIResource{
		Name:         r.gvr.Resource,
		SingularName: r.singular(),
		Namespaced:   r.namespaced,
		Kind:         r.kind,
		Verbs:        readVerbs,
		ShortNames:   r.shortNames(),
		Categories:   r.categories(),
	}
}

// clustersAPIResource describes the Cluster resource of fleetwatch.io.
var clustersAPIResource = metav1.APIResource{
	Name:         "clusters",
	SingularName: "cluster",
	Namespaced:   false,
	Kind:         "Cluster",
	Verbs:        []string{"get", "list", "watch"},
	Categories:   []string{"fleetwatch"},
}

// resourcesOf returns the legacy description of the resources of gv, and whether gv is
// served.
func resourcesOf(c *catalog, gv schema.GroupVersion) ([]metav1.APIResource, bool) {
	if gv == SchemeGroupVersion {
		return []metav1.APIResource{clustersAPIResource}, true
	}
	rs := c.groupVersion(gv)
	out := make([]metav1.APIResource, 0, len(rs))
	for _, r := range rs {
		out = append(out, apiResourceOf(r))
	}
	return out, len(rs) > 0
}

func apiGroupOf(g groupVersions) metav1.APIGroup {
	ag := metav1.APIGroup{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"},
		Name:     g.group,
	}
	for _, v := range g.versions {
		ag.Versions = append(ag.Versions, metav1.GroupVersionForDiscovery{
			GroupVersion: schema.GroupVersion{Group: g.group, Version: v.version}.String(),
			Version:      v.version,
		})
	}
	ag.PreferredVersion = ag.Versions[0]
	return ag
}

// serveAPIVersions serves /api: the versions of the core group.
func serveAPIVersions(w http.ResponseWriter, r *http.Request, c *catalog) error {
	f, ok := negotiate(r.Header.Get("Accept"), false, formatDiscoveryV2)
	if !ok {
		return notAcceptable("/api is served as application/json, optionally as apidiscovery.k8s.io/v2 APIGroupDiscoveryList")
	}
	var core []groupVersions
	for _, g := range c.groups() {
		if g.group == "" {
			core = append(core, g)
		}
	}
	if f == formatDiscoveryV2 {
		writeDiscoveryV2(w, core, c)
		return nil
	}
	av := metav1.APIVersions{
		TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
		Versions:                   []string{},
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{},
	}
	for _, g := range core {
		for _, v := range g.versions {
			av.Versions = append(av.Versions, v.version)
		}
	}
	writeJSON(w, http.StatusOK, &av)
	return nil
}

// serveAPIGroupList serves /apis: every named group.
func serveAPIGroupList(w http.ResponseWriter, r *http.Request, c *catalog) error {
	f, ok := negotiate(r.Header.Get("Accept"), false, formatDiscoveryV2)
	if !ok {
		return notAcceptable("/apis is served as application/json, optionally as apidiscovery.k8s.io/v2 APIGroupDiscoveryList")
	}
	var named []groupVersions
	for _, g := range discoveryGroups(c) {
		if g.group != "" {
			named = append(named, g)
		}
	}
	if f == formatDiscoveryV2 {
		writeDiscoveryV2(w, named, c)
		return nil
	}
	gl := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	for _, g := range named {
		gl.Groups = append(gl.Groups, apiGroupOf(g))
	}
	writeJSON(w, http.StatusOK, &gl)
	return nil
}

// serveAPIGroup serves /apis/{group}.
func serveAPIGroup(w http.ResponseWriter, r *http.Request, c *catalog, group string) error {
	if _, ok := negotiate(r.Header.Get("Accept"), false); !ok {
		return notAcceptable("discovery documents are served as application/json")
	}
	for _, g := range discoveryGroups(c) {
		if g.group == group && group != "" {
			ag := apiGroupOf(g)
			writeJSON(w, http.StatusOK, &ag)
			return nil
		}
	}
	return notFound(schema.GroupResource{Group: group}, "")
}

// serveAPIResourceList serves /api/{version} and /apis/{group}/{version}.
func serveAPIResourceList(w http.ResponseWriter, r *http.Request, c *catalog, gv schema.GroupVersion) error {
	if _, ok := negotiate(r.Header.Get("Accept"), false); !ok {
		return notAcceptable("discovery documents are served as application/json")
	}
	rs, ok := resourcesOf(c, gv)
	if !ok && !(gv.Group == "" && gv.Version == "v1") {
		return notFound(schema.GroupResource{Group: gv.Group}, "")
	}
	rl := metav1.APIResourceList{
		TypeMeta:     metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"},
		GroupVersion: gv.String(),
		APIResources: rs,
	}
	writeJSON(w, http.StatusOK, &rl)
	return nil
}

// writeDiscoveryV2 writes groups as an aggregated discovery document.
func writeDiscoveryV2(w http.ResponseWriter, groups []groupVersions, c *catalog) {
	list := apidiscoveryv2.APIGroupDiscoveryList{
		TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"},
		Items:    []apidiscoveryv2.APIGroupDiscovery{},
	}
	for _, g := range groups {
		gd := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.group}}
		for _, v := range g.versions {
			gv := schema.GroupVersion{Group: g.group, Version: v.version}
			vd := apidiscoveryv2.APIVersionDiscovery{Version: v.version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent}
			rs, _ := resourcesOf(c, gv)
			for _, ar := range rs {
				scope := apidiscoveryv2.ScopeCluster
				if ar.Namespaced {
					scope = apidiscoveryv2.ScopeNamespace
				}
				vd.Resources = append(vd.Resources, apidiscoveryv2.APIResourceDiscovery{
					Resource:         ar.Name,
					ResponseKind:     &metav1.GroupVersionKind{Group: gv.Group, Version: gv.Version, Kind: ar.Kind},
					Scope:            scope,
					SingularResource: ar.SingularName,
					Verbs:            ar.Verbs,
					ShortNames:       ar.ShortNames,
					Categories:       ar.Categories,
				})
			}
			gd.Versions = append(gd.Versions, vd)
		}
		list.Items = append(list.Items, gd)
	}
	writeJSONAs(w, contentTypeDiscoveryV2, &list)
}

// writeJSONAs writes v as JSON with a content type other than plain JSON.
func writeJSONAs(w http.ResponseWriter, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeJSON(w, http.StatusOK, v) // reports the error as a Status
		return
	}
	writeBody(w, http.StatusOK, contentType, b)
}
