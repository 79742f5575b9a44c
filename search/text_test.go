package search

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
)

// TestTextIndexModel adds and removes documents of a few texts at random, so that texts
// go from no document to one (held inline), to several (a bitmap), and back, and checks
// every match against the documents a plain map says have a matching text.
func TestTextIndexModel(t *testing.T) {
	texts := []string{"pod-a1", "pod-a12", "pod-b1", "web", "web-1", "nginx:1.27", "a", "pod"}
	terms := []TextTerm{{Value: "pod"}, {Value: "a1"}, {Value: "1"}, {Value: "web"}, {Value: "pod-a", Prefix: true}, {Value: "nginx"}, {Value: "zzz"}, {Value: "a"}}
	rng := rand.New(rand.NewPCG(7, 11))
	x := newTextIndex()
	model := map[string]map[uint32]bool{}
	for step := range 5000 {
		text, doc := texts[rng.IntN(len(texts))], uint32(rng.IntN(6))
		if model[text][doc] || rng.IntN(3) == 0 {
			x.remove(text, doc)
			delete(model[text], doc)
		} else {
			x.add(text, doc)
			if model[text] == nil {
				model[text] = map[uint32]bool{}
			}
			model[text][doc] = true
		}
		for _, term := range terms {
			var want []uint32
			for text, docs := range model {
				if term.Prefix && strings.HasPrefix(text, term.Value) || !term.Prefix && strings.Contains(text, term.Value) {
					for d := range docs {
						want = append(want, d)
					}
				}
			}
			slices.Sort(want)
			want = slices.Compact(want)
			if got := x.match(term).ToArray(); !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Fatalf("step %d: match(%+v) = %v, want %v", step, term, got, want)
			}
		}
	}
	// A text that no document has any more is gone, and its id free for the next one.
	for _, text := range texts {
		for d := range model[text] {
			x.remove(text, d)
		}
	}
	if len(x.ids) != 0 || len(x.grams) != 0 {
		t.Errorf("after every removal: %d texts, %d trigrams kept", len(x.ids), len(x.grams))
	}
	x.add("fresh", 9)
	if got := fmt.Sprint(x.match(TextTerm{Value: "fresh"}).ToArray()); got != "[9]" {
		t.Errorf("fresh: %s", got)
	}
}

// TestLabelValuesModel puts, relabels and deletes objects at random, so that label values
// go from one object (held inline) to several (a bitmap) and back, and checks each
// selector's answer against the objects a plain map says match it.
func TestLabelValuesModel(t *testing.T) {
	selectors := []string{"app=a", "app in (a,b)", "app!=a", "app notin (b,c)", "app", "!app", "pod=p1", "pod in (p1,p2),app=a", "pod"}
	rng := rand.New(rand.NewPCG(3, 5))
	x := New(Options{})
	model := map[string]map[string]string{} // name -> labels
	for step := range 3000 {
		name := fmt.Sprintf("p%d", rng.IntN(5))
		if _, ok := model[name]; ok && rng.IntN(4) == 0 {
			del(x, "east", podsGVR, object(podsGVR, "Pod", "shop", name, nil))
			delete(model, name)
		} else {
			l := map[string]string{}
			if v := rng.IntN(4); v > 0 {
				l["app"] = string(rune('a' + v - 1))
			}
			if rng.IntN(2) == 0 {
				l["pod"] = name // a value of one object's
			}
			put(x, "east", podsGVR, object(podsGVR, "Pod", "shop", name, l))
			model[name] = l
		}
		for _, sel := range selectors {
			s, err := labels.Parse(sel)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for name, l := range model {
				if s.Matches(labels.Set(l)) {
					want = append(want, "east/Pod/shop/"+name)
				}
			}
			slices.Sort(want)
			q := &Query{}
			if err := q.Add("labelSelector", sel); err != nil {
				t.Fatal(err)
			}
			if got := refs(x.Search(Request{Query: q, Limit: MaxLimit}).Items); !slices.Equal(got, want) && len(got)+len(want) > 0 {
				t.Fatalf("step %d: %q finds %q, want %q", step, sel, got, want)
			}
		}
	}
}
