package fleetwatch

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

func resolved(name string, gvr schema.GroupVersionResource, kind string, namespaced bool) aggregate.ResourceStatus {
	return aggregate.ResourceStatus{Name: name, Resource: gvr, Kind: gvr.GroupVersion().WithKind(kind), Namespaced: namespaced, State: "Synced", Count: 3}
}

// TestDescription: what a replica publishes of its clusters is read back by the others
// as the resources of each cluster, without state or count; a description too long for
// its bound keeps the union of the resources; what a peer cannot have meant is ignored.
func TestDescription(t *testing.T) {
	pods := resolved("pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true)
	nodes := resolved("nodes", schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", false)
	widgets := resolved("widgets.example.com", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "Widget", true)
	notServed := aggregate.ResourceStatus{Name: "gadgets.example.com", State: "NotFound"}
	sts := []aggregate.ClusterStatus{
		{Name: "a", Phase: aggregate.PhaseSynced, Resources: []aggregate.ResourceStatus{pods, nodes, notServed}},
		{Name: "b", Phase: aggregate.PhaseSyncing, Resources: []aggregate.ResourceStatus{pods, nodes, widgets}},
		{Name: "c", Phase: aggregate.PhaseSynced, Resources: []aggregate.ResourceStatus{pods, nodes}},
		{Name: "elsewhere", Phase: aggregate.PhaseRemote, Resources: []aggregate.ResourceStatus{widgets}},
	}
	read := func(rs ...aggregate.ResourceStatus) []aggregate.ResourceStatus {
		out := []aggregate.ResourceStatus{}
		for _, r := range rs {
			r.State, r.Count = "", 0
			out = append(out, r)
		}
		return out
	}
	raw := describe(sts, 1<<20)
	if strings.Count(raw, `"pods"`) != 2 { // its name and its resource, once
		t.Errorf("the resources are not written once each: %s", raw)
	}
	var ds descriptions
	for cluster, want := range map[string][]aggregate.ResourceStatus{
		"a": read(pods, nodes), "b": read(pods, nodes, widgets), "c": read(pods, nodes), "elsewhere": nil, "unknown": nil,
	} {
		if got := ds.resources("r1", raw, cluster); !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
			t.Errorf("cluster %s: %v, want %v", cluster, got, want)
		}
	}

	// Too long per cluster: the union, for every cluster of the replica.
	perCluster := len(raw)
	union := describe(sts, perCluster-1)
	if union == "" || len(union) >= perCluster {
		t.Fatalf("cut description: %q", union)
	}
	for _, cluster := range []string{"a", "c", "anything"} {
		if got, want := ds.resources("r2", union, cluster), read(pods, nodes, widgets); !reflect.DeepEqual(got, want) {
			t.Errorf("cluster %s of the union: %v, want %v", cluster, got, want)
		}
	}
	if got := describe(sts, 10); got != "" {
		t.Errorf("a description longer than its bound even as a union: %q", got)
	}
	if got := describe(sts[3:], 1<<20); got != "" {
		t.Errorf("a replica that watches no cluster describes %q", got)
	}

	for name, bad := range map[string]string{
		"not JSON":           `{"v":1,`,
		"another version":    strings.Replace(raw, `"v":1`, `"v":2`, 1),
		"no sets":            `{"v":1,"r":[],"s":[]}`,
		"index out of range": `{"v":1,"r":[{"n":"pods","v":"v1","r":"pods","k":"Pod"}],"s":[[1]]}`,
		"negative index":     `{"v":1,"r":[{"n":"pods","v":"v1","r":"pods","k":"Pod"}],"s":[[-1]]}`,
		"set out of range":   `{"v":1,"r":[{"n":"pods","v":"v1","r":"pods","k":"Pod"}],"s":[[0]],"c":{"a":1}}`,
		"no kind":            `{"v":1,"r":[{"n":"pods","v":"v1","r":"pods"}],"s":[[0]]}`,
		"too long":           raw + strings.Repeat(" ", 128<<10),
	} {
		if got := ds.resources("r3", bad, "a"); got != nil {
			t.Errorf("%s: %v", name, got)
		}
	}
}

// FuzzDescription: a description from a peer never makes a replica panic, and what it
// reads of it has a resource, a version and a kind.
func FuzzDescription(f *testing.F) {
	f.Add(describe([]aggregate.ClusterStatus{{Name: "a", Resources: []aggregate.ResourceStatus{
		resolved("pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", true)}}}, 1<<20), "a")
	f.Add(`{"v":1,"r":[{"n":"x","v":"v1","r":"x","k":"X"}],"s":[[0,0]]}`, "b")
	f.Fuzz(func(t *testing.T, raw, cluster string) {
		var ds descriptions
		for _, r := range ds.resources("r", raw, cluster) {
			if r.Resource.Resource == "" || r.Resource.Version == "" || r.Kind.Kind == "" || r.Kind.GroupVersion() != r.Resource.GroupVersion() {
				t.Fatalf("read %s", fmt.Sprint(r))
			}
		}
	})
}
