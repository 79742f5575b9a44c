package search

import (
	"slices"
	"testing"
)

// TestMatchAgreesWithSearch checks that a query matched against one object at a time
// finds what Index.Search finds from its sets.
func TestMatchAgreesWithSearch(t *testing.T) {
	x := testIndex()
	for _, q := range []string{
		"", "pay", "MENTS-7", "x1", "web*", "ments*", "w*", "zzz", "paymentsx",
		"kind:Deployment", "kind:deployments.apps", "kind:deploy", "kind:cronjob.batch", "kind:Deployment.example.com",
		"kind:Gadget", "kind:Pod kind:Deployment", "kind:pods.v1", "kind:widgets", "ns:ops", "namespace:nope", "cluster:w* pay",
		"label:app=payments,tier!=backend kind:pods", "l:tier", "l:!app", "l:app=payments w1",
		"image:pay", "image:busy", "image:report", "image:pay:1.3",
		"pay* kind:Pod ns:shop cluster:east l:app=payments image:registry", "cluster:{east,north}",
	} {
		query, err := Parse(q)
		if err != nil {
			t.Fatalf("Parse(%q): %v", q, err)
		}
		var want []string
		for _, it := range x.Search(Request{Query: query, Limit: MaxLimit}).Items {
			want = append(want, it.Cluster+"/"+it.Namespace+"/"+it.Name)
		}
		var got []string
		for _, d := range x.docs {
			if d.obj == nil {
				continue
			}
			r := x.resources[d.resource]
			cl := x.clusterNames[d.cluster]
			if query.MatchCluster(cl) && query.MatchKind(r.gvr, r.kind, x.opts.ShortNames[r.gvr.GroupResource()]) &&
				query.MatchObject(r.gvr.GroupResource(), d.namespace, d.name, d.obj) {
				got = append(got, cl+"/"+d.namespace+"/"+d.name)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q: matched %q, Search found %q", q, got, want)
		}
	}
}

func TestMatchObjectWithoutTheObject(t *testing.T) {
	for _, tc := range []struct {
		q    string
		want bool
	}{
		{"pay ns:shop", true},
		{"pay ns:ops", false},
		{"l:app", false},
		{"l:!app", false},
		{"image:pay", false},
	} {
		query, err := Parse(tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if got := query.MatchObject(podsGVR.GroupResource(), "shop", "payments", nil); got != tc.want {
			t.Errorf("%q without the object: %v, want %v", tc.q, got, tc.want)
		}
		if got := query.NeedsObject(); got != (tc.q[0] == 'l' || tc.q[0] == 'i') {
			t.Errorf("%q: NeedsObject %v", tc.q, got)
		}
	}
}
