package fleetwatch

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/shard"
)

// A replica of a sharded fleet publishes on its Lease (shard.Options.Describe) the
// resources that its clusters resolved through their discovery, and reads those of the
// others into the statuses of the clusters it does not watch (placedStatus). So a
// replica knows the kinds of every cluster of the fleet, also when it watches none of
// them, and serves their discovery, lists and watches by asking their owners (see "One
// API from any replica" in docs/design.md). A description holds names only, of the
// shared configuration and of the clusters' discovery: no object, no count.

// descriptionVersion is the version of the description's format; a description of
// another version is ignored (a replica of another release during a rolling update).
const descriptionVersion = 1

// description is what a replica publishes, as JSON.
type description struct {
	V int `json:"v"`
	// Resources are the distinct resources of the replica's clusters.
	Resources []describedResource `json:"r"`
	// Sets are the distinct sets of resources that its clusters resolved, as indexes
	// into Resources: most clusters of a fleet resolve the same set.
	Sets [][]int `json:"s"`
	// Clusters are the index into Sets of each cluster's resources. Absent if the
	// description was cut to fit shard.MaxDescription: then every cluster of the replica
	// is described by Sets[0], which holds every resource.
	Clusters map[string]int `json:"c,omitempty"`
}

// describedResource is a resolved resource: its configured name, its group, version
// and resource, its kind, and whether it is namespaced.
type describedResource struct {
	Name       string `json:"n"`
	Group      string `json:"g,omitempty"`
	Version    string `json:"v"`
	Resource   string `json:"r"`
	Kind       string `json:"k"`
	Namespaced bool   `json:"ns,omitempty"`
}

// describe returns the description of sts, the statuses of the clusters this replica
// watches, at most max bytes long: per cluster if it fits, else the union of their
// resources, else nothing.
func describe(sts []aggregate.ClusterStatus, max int) string {
	d := description{V: descriptionVersion, Clusters: map[string]int{}}
	index := map[describedResource]int{}
	sets := map[string]int{}
	for _, st := range sts {
		if placedElsewhere(st) {
			continue
		}
		var set []int
		for _, rs := range st.Resources {
			if rs.Resource.Empty() || rs.Kind.Kind == "" {
				continue
			}
			r := describedResource{Name: rs.Name, Group: rs.Resource.Group, Version: rs.Resource.Version,
				Resource: rs.Resource.Resource, Kind: rs.Kind.Kind, Namespaced: rs.Namespaced}
			i, ok := index[r]
			if !ok {
				i = len(d.Resources)
				index[r] = i
				d.Resources = append(d.Resources, r)
			}
			set = append(set, i)
		}
		key := fmt.Sprint(set)
		s, ok := sets[key]
		if !ok {
			s = len(d.Sets)
			sets[key] = s
			d.Sets = append(d.Sets, set)
		}
		d.Clusters[st.Name] = s
	}
	if len(d.Clusters) == 0 {
		return ""
	}
	b, _ := json.Marshal(d)
	if len(b) <= max {
		return string(b)
	}
	all := make([]int, len(d.Resources))
	for i := range all {
		all[i] = i
	}
	d.Sets, d.Clusters = [][]int{all}, nil
	if b, _ = json.Marshal(d); len(b) <= max {
		return string(b)
	}
	return ""
}

// placedElsewhere reports whether st is of a cluster that this replica does not watch.
func placedElsewhere(st aggregate.ClusterStatus) bool {
	return st.Phase == aggregate.PhaseRemote || st.Phase == aggregate.PhaseMoving
}

// descriptions are the descriptions of the other replicas, each parsed once.
type descriptions struct {
	mu sync.Mutex
	// byReplica are the last description read of each replica, raw and parsed (nil if
	// it could not be used). Replicas are few, and their identities stable (a
	// StatefulSet's pods): those gone are not dropped.
	byReplica map[string]parsedDescription
}

type parsedDescription struct {
	raw string
	d   *description
}

// resources returns the resources that replica describes for cluster, as statuses
// without a State (this replica does not watch them); nil if it describes none.
func (ds *descriptions) resources(replica, raw, cluster string) []aggregate.ResourceStatus {
	if raw == "" {
		return nil
	}
	ds.mu.Lock()
	p, ok := ds.byReplica[replica]
	if !ok || p.raw != raw {
		p = parsedDescription{raw: raw, d: parseDescription(raw)}
		if ds.byReplica == nil {
			ds.byReplica = map[string]parsedDescription{}
		}
		ds.byReplica[replica] = p
	}
	ds.mu.Unlock()
	d := p.d
	if d == nil {
		return nil
	}
	set := 0
	if d.Clusters != nil {
		if set, ok = d.Clusters[cluster]; !ok {
			return nil
		}
	}
	out := make([]aggregate.ResourceStatus, 0, len(d.Sets[set]))
	for _, i := range d.Sets[set] {
		r := d.Resources[i]
		gv := schema.GroupVersion{Group: r.Group, Version: r.Version}
		out = append(out, aggregate.ResourceStatus{Name: r.Name, Resource: gv.WithResource(r.Resource), Kind: gv.WithKind(r.Kind), Namespaced: r.Namespaced})
	}
	return out
}

// parseDescription returns the description raw, or nil if it is not one this replica
// can use: of another version, malformed, or with an index out of range. Another
// replica wrote it, so it is checked whole before it is used.
func parseDescription(raw string) *description {
	if len(raw) > shard.MaxDescription {
		return nil
	}
	var d description
	if err := json.Unmarshal([]byte(raw), &d); err != nil || d.V != descriptionVersion || len(d.Sets) == 0 {
		return nil
	}
	for _, r := range d.Resources {
		if r.Version == "" || r.Resource == "" || r.Kind == "" {
			return nil
		}
	}
	for _, set := range d.Sets {
		if slices.ContainsFunc(set, func(i int) bool { return i < 0 || i >= len(d.Resources) }) {
			return nil
		}
	}
	for _, s := range d.Clusters {
		if s < 0 || s >= len(d.Sets) {
			return nil
		}
	}
	return &d
}
