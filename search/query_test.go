package search

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, q string
		// want is the canonical form (Query.String); err, if set, a substring of the
		// error, which must name the term.
		want, err, term string
	}{
		{name: "empty", q: "", want: ""},
		{name: "spaces only", q: "  \t ", want: ""},
		{name: "bare word", q: "Pay", want: "name:pay"},
		{name: "prefix", q: "pay*", want: "name:pay*"},
		{name: "star alone is every name", q: "*", want: "name:*"},
		{name: "star inside", q: "p*y", err: "only allowed at the end", term: "p*y"},
		{name: "two stars", q: "pay**", err: "only allowed at the end", term: "pay**"},
		{name: "kind", q: "kind:Deployment", want: "kind:deployment"},
		{name: "ns", q: "ns:shop", want: "ns:shop"},
		{name: "namespace", q: "namespace:shop", want: "ns:shop"},
		{name: "cluster glob", q: "cluster:prod-*", want: "cluster:prod-*"},
		{name: "bad glob", q: "cluster:[z-a]", err: "glob", term: "cluster:[z-a]"},
		{name: "label", q: "label:app=web,tier!=db", want: "label:app=web,tier!=db"},
		{name: "l", q: "l:app", want: "label:app"},
		{name: "bad label", q: "label:a=b=c", err: "", term: "label:a=b=c"},
		{name: "bad label key", q: "l:-a=b", err: "", term: "l:-a=b"},
		{name: "image", q: "image:NGINX", want: "image:nginx"},
		{name: "empty value", q: "kind:", err: "empty value", term: "kind:"},
		{name: "unknown prefix", q: "owner:me", err: "unknown prefix", term: "owner:me"},
		{name: "order does not matter", q: "ns:a pay kind:Pod", want: "kind:pod name:pay ns:a"},
		{name: "a colon in the value", q: "cluster:arn:aws:*", want: "cluster:arn:aws:*"},
		{name: "too many terms", q: strings.Repeat("a ", MaxTerms+1), err: "more than", term: "a"},
		{name: "as many terms as allowed", q: strings.TrimSpace(strings.Repeat("a ", MaxTerms)), want: strings.TrimSpace(strings.Repeat("name:a ", MaxTerms))},
		{name: "too long", q: strings.Repeat("x", MaxQueryLen+1), err: "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := Parse(tc.q)
			if tc.err != "" || tc.term != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %q, want an error", tc.q, q)
				}
				var te *TermError
				if !errors.As(err, &te) || !errors.Is(err, ErrBadQuery) {
					t.Fatalf("error %v is not a *TermError wrapping ErrBadQuery", err)
				}
				if tc.term != "" && te.Term != tc.term {
					t.Errorf("term = %q, want %q", te.Term, tc.term)
				}
				if !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %q does not contain %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.q, err)
			}
			if got := q.String(); got != tc.want {
				t.Errorf("Parse(%q) = %q, want %q", tc.q, got, tc.want)
			}
		})
	}
}

func TestQueryAdd(t *testing.T) {
	for _, tc := range []struct {
		param, value, want, err string
	}{
		{"name", "web*", "name:web*", ""},
		{"kind", "pods", "kind:pods", ""},
		{"namespace", "shop", "ns:shop", ""},
		{"cluster", "prod", "cluster:prod", ""},
		{"labelSelector", "env in (a, b)", "label:env in (a,b)", ""},
		{"image", "pay", "image:pay", ""},
		{"labelSelector", "env in (", "", `labelSelector=env in (`},
		{"owner", "me", "", "not a search parameter"},
		{"name", "", "", "empty value"},
	} {
		t.Run(tc.param+"="+tc.value, func(t *testing.T) {
			q := &Query{}
			err := q.Add(tc.param, tc.value)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Add = %v, want an error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := q.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// FuzzParse checks that no query makes Parse panic, that its answer is a Query or a
// TermError, and that the canonical form of a Query parses into the same Query.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "pay", "pay*", "*", "kind:Deployment ns:shop", "cluster:prod-* l:app=web,tier!=db",
		"label:env in (a,b)", "image:nginx:1.2", "cluster:[a-", "l:a==", ":", "::", "kind::", "name:x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := Parse(s)
		if err != nil {
			var te *TermError
			if !errors.As(err, &te) || !errors.Is(err, ErrBadQuery) {
				t.Fatalf("Parse(%q): error %v is not a *TermError wrapping ErrBadQuery", s, err)
			}
			return
		}
		if len(q.terms) > MaxTerms {
			t.Fatalf("Parse(%q): %d terms", s, len(q.terms))
		}
		if !utf8.ValidString(s) {
			return // strings.Fields splits invalid UTF-8 as it likes; nothing to compare
		}
		// Each canonical term is a term of the grammar, except a label selector that
		// has spaces: it only parses as a parameter.
		if strings.Contains(q.String(), " in (") || strings.Contains(q.String(), " notin (") {
			return
		}
		again, err := Parse(q.String())
		if err != nil {
			t.Fatalf("Parse(%q) = %q, which does not parse: %v", s, q.String(), err)
		}
		if again.String() != q.String() {
			t.Fatalf("Parse(%q) = %q, parsed again %q", s, q.String(), again.String())
		}
	})
}
