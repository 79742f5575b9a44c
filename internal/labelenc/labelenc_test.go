package labelenc

import (
	"maps"
	"strings"
	"testing"
)

func pairsOf(m map[string]string) []Pair {
	var out []Pair
	for k, v := range m {
		out = append(out, Pair{k, v})
	}
	return out
}

func TestAppendAndAll(t *testing.T) {
	for _, m := range []map[string]string{
		nil,
		{"app": "web"},
		{"app.kubernetes.io/name": "cart", "tier": "backend", "app.kubernetes.io/part-of": "shop"},
		{"": "", "empty": ""},
		{strings.Repeat("k", 200): strings.Repeat("v", 70000)},
	} {
		pairs := pairsOf(m)
		b, ok := Append([]byte("prefix"), pairs)
		if !ok {
			t.Fatalf("%v: Append refused distinct keys", m)
		}
		s := string(b[len("prefix"):])
		if !Valid(s) {
			t.Errorf("%v: Valid refuses what Append wrote", m)
		}
		got := maps.Collect(All(s))
		if len(m) == 0 && len(got) == 0 {
			continue
		}
		if !maps.Equal(got, m) {
			t.Errorf("All = %v, want %v", got, m)
		}
		var last string
		i := 0
		for k := range All(s) {
			if i > 0 && k <= last {
				t.Errorf("%v: keys out of order: %q after %q", m, k, last)
			}
			last, i = k, i+1
		}
	}
}

func TestAppendRefusesARepeatedKey(t *testing.T) {
	b, ok := Append([]byte("x"), []Pair{{"a", "1"}, {"b", "2"}, {"a", "3"}})
	if ok || string(b) != "x" {
		t.Errorf("Append = %q, %v; want the buffer as it was, false", b, ok)
	}
}

func TestValidRefuses(t *testing.T) {
	for name, s := range map[string]string{
		"a key without its value":     "\x01a",
		"a length past the end":       "\x05ab",
		"a length not in short form":  "\x81\x00",
		"keys out of order":           "\x01b\x00\x01a\x00",
		"a repeated key":              "\x01a\x00\x01a\x00",
		"a truncated length":          "\x80",
		"a length beyond any string":  "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
		"a value whose length is cut": "\x01a\x85",
	} {
		if Valid(s) {
			t.Errorf("%s: Valid(%q) = true", name, s)
		}
	}
}

// FuzzValid checks that Valid accepts exactly what Append writes: whatever it accepts,
// All reads whole and Append writes again byte for byte; and that All reads any string
// without a panic or a read past it.
func FuzzValid(f *testing.F) {
	for _, m := range []map[string]string{nil, {"app": "web"}, {"a": "", "b": strings.Repeat("x", 300)}} {
		b, _ := Append(nil, pairsOf(m))
		f.Add(string(b))
	}
	f.Add("\x81\x00")
	f.Fuzz(func(t *testing.T, s string) {
		var pairs []Pair
		for k, v := range All(s) {
			pairs = append(pairs, Pair{k, v})
		}
		if !Valid(s) {
			return
		}
		b, ok := Append(nil, pairs)
		if !ok || string(b) != s {
			t.Fatalf("Valid(%q), but Append of what All read = %q, %v", s, b, ok)
		}
	})
}
