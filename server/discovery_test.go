package server

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

func TestDiscoveryLegacy(t *testing.T) {
	f := newFixture(t, nil)

	t.Run("api", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			want []string
		}{
			{clusterPath(prod) + "/api", []string{"v1"}},
			{clusterPath(allClusters) + "/api", []string{"v1"}},
			{"/api", []string{}},
		} {
			var av metav1.APIVersions
			f.getOK(tc.path, &av)
			if av.Kind != "APIVersions" || !slices.Equal(av.Versions, tc.want) {
				t.Errorf("GET %s = %+v, want kind APIVersions and versions %v", tc.path, av, tc.want)
			}
		}
	})

	t.Run("apis", func(t *testing.T) {
		for _, tc := range []struct {
			path string
			want []string
		}{
			{clusterPath(prod) + "/apis", []string{"apps/v1", "fleetwatch.io/v1alpha1"}},
			{clusterPath(allClusters) + "/apis", []string{"apps/v1", "fleetwatch.io/v1alpha1"}},
			// Deployments are not served in edge.
			{clusterPath(edge) + "/apis", []string{"fleetwatch.io/v1alpha1"}},
			{"/apis", []string{"fleetwatch.io/v1alpha1"}},
		} {
			var gl metav1.APIGroupList
			f.getOK(tc.path, &gl)
			var got []string
			for _, g := range gl.Groups {
				if g.PreferredVersion.GroupVersion != g.Versions[0].GroupVersion {
					t.Errorf("GET %s: group %s prefers %s, not its first version", tc.path, g.Name, g.PreferredVersion.GroupVersion)
				}
				got = append(got, g.PreferredVersion.GroupVersion)
			}
			if gl.Kind != "APIGroupList" || gl.APIVersion != "v1" || !slices.Equal(got, tc.want) {
				t.Errorf("GET %s = %s, want group versions %v", tc.path, mustJSON(gl), tc.want)
			}
		}
	})

	t.Run("group", func(t *testing.T) {
		var g metav1.APIGroup
		f.getOK(clusterPath(prod)+"/apis/apps", &g)
		if g.Kind != "APIGroup" || g.Name != "apps" || g.PreferredVersion.Version != "v1" {
			t.Errorf("apps group = %s", mustJSON(g))
		}
		f.get(clusterPath(edge)+"/apis/apps").status(t, http.StatusNotFound)
		f.get(clusterPath(prod)+"/apis/batch").status(t, http.StatusNotFound)
	})

	t.Run("resources", func(t *testing.T) {
		var rl metav1.APIResourceList
		f.getOK(clusterPath(prod)+"/api/v1", &rl)
		want := []metav1.APIResource{
			{Name: "nodes", SingularName: "node", Namespaced: false, Kind: "Node", Verbs: readVerbs, ShortNames: []string{"no"}},
			{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", Verbs: readVerbs, ShortNames: []string{"po"}, Categories: []string{"all"}},
		}
		if rl.Kind != "APIResourceList" || rl.GroupVersion != "v1" || mustJSON(rl.APIResources) != mustJSON(want) {
			t.Errorf("/api/v1 = %s\nwant resources %s", mustJSON(rl), mustJSON(want))
		}
		f.getOK(clusterPath(prod)+"/apis/apps/v1", &rl)
		if rl.GroupVersion != "apps/v1" || len(rl.APIResources) != 1 || rl.APIResources[0].Name != "deployments" ||
			!slices.Equal(rl.APIResources[0].ShortNames, []string{"deploy"}) || !rl.APIResources[0].Namespaced {
			t.Errorf("/apis/apps/v1 = %s", mustJSON(rl))
		}
		for _, path := range []string{"/apis/fleetwatch.io/v1alpha1", clusterPath(edge) + "/apis/fleetwatch.io/v1alpha1"} {
			f.getOK(path, &rl)
			if len(rl.APIResources) != 1 || rl.APIResources[0].Name != "clusters" || rl.APIResources[0].Namespaced ||
				!slices.Equal(rl.APIResources[0].Verbs, []string{"get", "list", "watch"}) {
				t.Errorf("%s = %s", path, mustJSON(rl))
			}
		}
		f.get(clusterPath(edge)+"/apis/apps/v1").status(t, http.StatusNotFound)
	})

	t.Run("errors", func(t *testing.T) {
		st := f.get("/clusters/nowhere/api").status(t, http.StatusNotFound)
		if st.Reason != metav1.StatusReasonNotFound || st.Details == nil || st.Details.Name != "nowhere" || st.Details.Group != GroupName {
			t.Errorf("unknown cluster: %+v", st)
		}
		f.get("/api/v1/pods").status(t, http.StatusNotFound)
		f.get("/nothing/here").status(t, http.StatusNotFound)
		f.get(clusterPath(prod)+"/api", "Accept", "application/vnd.kubernetes.protobuf").status(t, http.StatusNotAcceptable)
	})
}

func TestDiscoveryAggregated(t *testing.T) {
	f := newFixture(t, nil)
	accept := "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
	for _, tc := range []struct {
		path string
		want map[string][]string // group/version -> resources
	}{
		{clusterPath(prod) + "/api", map[string][]string{"v1": {"nodes", "pods"}}},
		{clusterPath(prod) + "/apis", map[string][]string{"apps/v1": {"deployments"}, "fleetwatch.io/v1alpha1": {"clusters"}}},
		{"/apis", map[string][]string{"fleetwatch.io/v1alpha1": {"clusters"}}},
	} {
		r := f.get(tc.path, "Accept", accept)
		if r.code != http.StatusOK || r.header.Get("Content-Type") != contentTypeDiscoveryV2 {
			t.Fatalf("GET %s: %d, Content-Type %q", tc.path, r.code, r.header.Get("Content-Type"))
		}
		var list apidiscoveryv2.APIGroupDiscoveryList
		if err := json.Unmarshal(r.body, &list); err != nil {
			t.Fatal(err)
		}
		got := map[string][]string{}
		for _, g := range list.Items {
			for _, v := range g.Versions {
				gv := schema.GroupVersion{Group: g.Name, Version: v.Version}.String()
				for _, res := range v.Resources {
					if res.ResponseKind == nil || res.ResponseKind.Kind == "" || res.SingularResource == "" || res.Scope == "" {
						t.Errorf("GET %s: resource %s lacks kind, singular or scope: %+v", tc.path, res.Resource, res)
					}
					got[gv] = append(got[gv], res.Resource)
				}
			}
		}
		if mustJSON(got) != mustJSON(tc.want) {
			t.Errorf("GET %s = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestDiscoveryClient reads discovery with client-go's own client, both aggregated (as
// kubectl does) and legacy.
func TestDiscoveryClient(t *testing.T) {
	f := newFixture(t, nil)
	for _, legacy := range []bool{false, true} {
		dc := discovery.NewDiscoveryClientForConfigOrDie(&rest.Config{Host: f.http.URL + clusterPath(allClusters)})
		dc.UseLegacyDiscovery = legacy
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatalf("legacy=%v: %v", legacy, err)
		}
		got := map[string]bool{}
		for _, l := range lists {
			for _, r := range l.APIResources {
				got[l.GroupVersion+"/"+r.Name] = r.Namespaced
			}
		}
		want := map[string]bool{"v1/pods": true, "v1/nodes": false, "apps/v1/deployments": true, "fleetwatch.io/v1alpha1/clusters": false}
		if mustJSON(got) != mustJSON(want) {
			t.Errorf("legacy=%v: resources %v, want %v", legacy, got, want)
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
