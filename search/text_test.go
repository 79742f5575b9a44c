package search

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
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
