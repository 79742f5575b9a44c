package aggregate

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"

	"github.com/fleetwatch/fleetwatch/internal/labelenc"
	"github.com/fleetwatch/fleetwatch/internal/wire"
)

// TestCompactLabels holds compactLabels to the labels.Set they are made from: the same
// labels in key order, the same answers to Has, Get, Lookup and selectors, one copy for
// equal sets.
func TestCompactLabels(t *testing.T) {
	long := strings.Repeat("k", 300)
	for _, tc := range []struct {
		name string
		set  labels.Set
	}{
		{"none", nil},
		{"empty", labels.Set{}},
		{"one", labels.Set{"app": "web"}},
		{"several", labels.Set{"tier": "backend", "app.kubernetes.io/name": "cart", "app.kubernetes.io/part-of": "shop"}},
		{"empty value", labels.Set{"canary": "", "app": "x"}},
		{"any bytes", labels.Set{"a=b,c": "d\x00e", "\xff": "=", "": "empty key"}},
		{"long", labels.Set{long: long + "v", "z": long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := makeCompactLabels(tc.set)
			if len(tc.set) == 0 && c.p != nil {
				t.Errorf("no labels made %q, want the zero compactLabels", c.String())
			}
			var got []labelPair
			for k, v := range c.all() {
				got = append(got, labelPair{k, v})
			}
			var want []labelPair
			for _, k := range slices.Sorted(maps.Keys(tc.set)) {
				want = append(want, labelPair{k, tc.set[k]})
			}
			if !slices.Equal(got, want) {
				t.Errorf("each: %q, want %q", got, want)
			}
			if n := labelCount(c); n != len(tc.set) {
				t.Errorf("labelCount %d, want %d", n, len(tc.set))
			}
			for _, k := range append(slices.Collect(maps.Keys(tc.set)), "absent", "", "zzz", long+"x") {
				wv, wok := tc.set[k]
				if v, ok := c.Lookup(k); v != wv || ok != wok {
					t.Errorf("Lookup(%q) = %q, %v; want %q, %v", k, v, ok, wv, wok)
				}
				if c.Has(k) != wok || c.Get(k) != wv {
					t.Errorf("Has, Get(%q) = %v, %q; want %v, %q", k, c.Has(k), c.Get(k), wok, wv)
				}
			}
			if again := makeCompactLabels(rawLabels(toRaw(tc.set))); again.String() != c.String() || !sameLabels(again, c) {
				t.Error("equal labels made different compactLabels")
			}
			if !sameLabels(c, tc.set) || !sameLabels(tc.set, c) {
				t.Error("sameLabels: differ from the set they were made from")
			}
			for _, sel := range []string{"", "app", "!app", "app=web", "app in (web,x)", "tier notin (backend)", "canary="} {
				s, err := labels.Parse(sel)
				if err != nil {
					t.Fatal(err)
				}
				if s.Matches(c) != s.Matches(tc.set) {
					t.Errorf("selector %q matches %v, the set %v", sel, s.Matches(c), s.Matches(tc.set))
				}
			}
		})
	}
	if sameLabels(makeCompactLabels(labels.Set{"a": "1"}), makeCompactLabels(labels.Set{"a": "2"})) {
		t.Error("sameLabels: different values found the same")
	}
}

func toRaw(s labels.Set) map[string]any {
	out := make(map[string]any, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

// FuzzCompactLabels: whatever the labels, compactLabels hold exactly them.
func FuzzCompactLabels(f *testing.F) {
	f.Add("app", "web", "tier", "backend", "")
	f.Add("a", "", "", "b", "\x80\x80")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3 string) {
		set := labels.Set{k1: v1, k2: v2, k3: v1 + v2}
		c := makeCompactLabels(set)
		n := 0
		prev := ""
		for k, v := range c.all() {
			if n > 0 && k <= prev {
				t.Fatalf("keys out of order: %q after %q", k, prev)
			}
			if set[k] != v {
				t.Fatalf("%q=%q, want %q", k, v, set[k])
			}
			n, prev = n+1, k
		}
		if n != len(set) {
			t.Fatalf("%d labels, want %d", n, len(set))
		}
		for k, v := range set {
			if got, ok := c.Lookup(k); !ok || got != v {
				t.Fatalf("Lookup(%q) = %q, %v; want %q", k, got, ok, v)
			}
		}
	})
}

// TestCompactLabelsOf: compactLabelsOf, which reads an unstructured labels map once, makes
// the labels that makeCompactLabels(labelsOf(obj)) makes, for every kind of object and
// of labels map: strings, nulls (read as ""), a value that is not a string (no labels at
// all), none, more labels than its buffer, an informer's partial object that read its
// map when it was made, an object that encoded its labels (encodedLabels), and a typed
// object.
func TestCompactLabelsOf(t *testing.T) {
	many := map[string]any{}
	for i := range 40 {
		many[strings.Repeat("k", i+1)] = strings.Repeat("v", 40-i)
	}
	for _, tc := range []struct {
		name string
		raw  map[string]any
	}{
		{"none", nil},
		{"empty", map[string]any{}},
		{"strings", map[string]any{"tier": "backend", "app.kubernetes.io/name": "cart", "a": ""}},
		{"null", map[string]any{"app": "x", "canary": nil}},
		{"not a string", map[string]any{"app": "x", "replicas": int64(3)}},
		{"many", many},
	} {
		t.Run(tc.name, func(t *testing.T) {
			md := map[string]any{"name": "a", "namespace": "ns", "resourceVersion": "1"}
			if tc.raw != nil {
				md["labels"] = tc.raw
			}
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": md}}
			encoded, err := direct.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			partial := (&wire.EncodedObject{Unstructured: u, Encoded: encoded}).ToPartial()
			typed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: labels.Set(u.GetLabels())}}
			var pairs []labelenc.Pair
			for k, v := range u.GetLabels() {
				pairs = append(pairs, labelenc.Pair{Key: k, Value: v})
			}
			enc, _ := labelenc.Append(nil, pairs)
			objs := []runtime.Object{u, partial, typed,
				// As a snapshot's partial load makes them; one whose encoding is broken,
				// and one that made none, are read as their metadata says.
				encodedLabelsObject{u, string(enc), true},
				encodedLabelsObject{u, "\x05broken", true},
				encodedLabelsObject{u, "ignored", false},
			}
			for _, obj := range objs {
				got, want := compactLabelsOf(obj), makeCompactLabels(labelsOf(obj))
				if got.String() != want.String() {
					t.Errorf("%T: compactLabelsOf %q, makeCompactLabels(labelsOf) %q", obj, got.String(), want.String())
				}
			}
			if got := compactLabelsOf(u); labelCount(got) != len(u.GetLabels()) {
				t.Errorf("%d labels, GetLabels has %d", labelCount(got), len(u.GetLabels()))
			}
		})
	}
}

// encodedLabelsObject is an object that encoded its labels when it was made, as a
// snapshot's partial load's persist.PartialObject does.
type encodedLabelsObject struct {
	*unstructured.Unstructured
	encoded string
	ok      bool
}

func (o encodedLabelsObject) EncodedLabels() (string, bool) { return o.encoded, o.ok }
