package cluster

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	const arn = "arn:aws:eks:eu-west-1:123:cluster/prod"
	tests := []struct {
		pattern string
		name    string
		want    bool
	}{
		{"*", arn, true},
		{"*", "", true},
		{"arn:aws:eks:*", arn, true},
		{"arn:aws:eks:*:cluster/prod", arn, true},
		{"*/prod", arn, true},
		{"*:123:*", arn, true},
		{"*/staging", arn, false},
		{"arn:aws:eks:eu-west-?:123:cluster/prod", arn, true},
		{"arn:aws:eks:eu-west-??:123:cluster/prod", arn, false},
		{"kind-?", "kind-a", true},
		{"kind-?", "kind-", false},
		{"kind-?", "kind-ab", false},
		{"?", "é", true},
		{"prod", "prod", true},
		{"prod", "prod-2", false},
		{"prod", "x-prod", false},
		{"[a-c]*", "beta", true},
		{"[a-c]*", "delta", false},
		{"[!a-c]*", "delta", true},
		{"[^a-c]*", "alpha", false},
		{"[abc]", "b", true},
		{"[-a]", "-", true},
		{"[a-]", "-", true},
		{`[\]]`, "]", true},
		{`\*`, "*", true},
		{`\*`, "a", false},
		{`a\?`, "a?", true},
		{".*", "a", false}, // regexp metacharacters are literal
		{".*", ".x", true},
		{"a+b", "a+b", true},
		{"a+b", "aab", false},
		{"(x)|y", "(x)|y", true},
		{"$", "$", true},
	}
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.name, func(t *testing.T) {
			re, err := compileGlob(tt.pattern)
			if err != nil {
				t.Fatalf("compileGlob(%q): %v", tt.pattern, err)
			}
			if got := re.MatchString(tt.name); got != tt.want {
				t.Errorf("glob %q matching %q = %v, want %v", tt.pattern, tt.name, got, tt.want)
			}
		})
	}
}

func TestValidateGlob(t *testing.T) {
	tests := []struct {
		pattern string
		reason  string // empty: valid
	}{
		{"*", ""},
		{"arn:aws:eks:*:cluster/*", ""},
		{"[a-z]", ""},
		{"", "empty pattern"},
		{"[", "missing ']'"},
		{"[a-c", "missing ']'"},
		{"[]", "empty character class"},
		{"[!]", "empty character class"},
		{"[z-a]", "out of order"},
		{`a\`, `trailing '\'`},
		{`[a\`, `trailing '\'`},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			err := ValidateGlob(tt.pattern)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("ValidateGlob(%q) = %v, want nil", tt.pattern, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidGlob) {
				t.Fatalf("ValidateGlob(%q) = %v, want ErrInvalidGlob", tt.pattern, err)
			}
			if msg := err.Error(); !strings.Contains(msg, tt.reason) || !strings.Contains(msg, strconv.Quote(tt.pattern)) {
				t.Errorf("ValidateGlob(%q) = %q, want it to quote the pattern and say %q", tt.pattern, msg, tt.reason)
			}
		})
	}
}

func TestCompileGlobs(t *testing.T) {
	g, err := CompileGlobs("prod-*", "staging")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"prod-eu": true, "staging": true, "staging-2": false, "dev": false} {
		if got := g.Match(name); got != want {
			t.Errorf("Match(%q) = %v, want %v", name, got, want)
		}
	}
	if _, err := CompileGlobs("ok", "[z-a]"); !errors.Is(err, ErrInvalidGlob) || !strings.Contains(err.Error(), `"[z-a]"`) {
		t.Errorf("invalid glob: %v", err)
	}
	if (Globs{}).Match("x") {
		t.Error("the zero Globs matched")
	}
}
