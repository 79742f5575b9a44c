package server

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"

	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// TestAppendJSON holds appendJSON to json.Marshal, byte for byte, on a realistic pod and
// on the values whose encoding has special cases.
func TestAppendJSON(t *testing.T) {
	for name, v := range map[string]any{
		"realistic pod": aggregatetest.RealisticPod("shop", "web-1", "42", map[string]string{"app": "web"}).Object,
		"html":          map[string]any{"<k>": "a<b>&c", "q": `"\`},
		"control":       []any{"tab\there", "nl\n", "\x00\x1f\x7f", "\b\f"},
		"unicode":       []any{"héllo", "\u2028\u2029", "😀", "\xff\xfe invalid"},
		"numbers":       []any{int64(0), int64(-1), int64(math.MaxInt64), 0.0, -0.5, 1e-7, 1e21, 123456789.125, 1e20, math.SmallestNonzeroFloat64},
		"empty":         map[string]any{"m": map[string]any{}, "s": []any{}, "nil map": map[string]any(nil), "nil slice": []any(nil), "null": nil, "b": false},
		"other types":   map[string]any{"int": 3, "strings": []string{"a"}, "map": map[string]string{"x": "y"}},
	} {
		t.Run(name, func(t *testing.T) {
			want, werr := json.Marshal(v)
			got, gerr := appendJSON([]byte("prefix"), v)
			if (werr != nil) != (gerr != nil) {
				t.Fatalf("error %v, json.Marshal's %v", gerr, werr)
			}
			if werr == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("got  %s\nwant prefix%s", got, want)
			}
		})
	}
	for _, f := range []float64{math.NaN(), math.Inf(1)} {
		if _, err := appendJSON(nil, map[string]any{"f": f}); err == nil {
			t.Errorf("%v: no error, json.Marshal gives one", f)
		}
	}
}

// FuzzAppendJSON checks appendJSON against json.Marshal on objects built of fuzzed
// strings and numbers.
func FuzzAppendJSON(f *testing.F) {
	f.Add("app", "web<1>", int64(3), 1.5)
	f.Add("\u2028", "\xff", int64(-7), 1e-9)
	f.Fuzz(func(t *testing.T, k, s string, i int64, x float64) {
		v := map[string]any{k: s, "n": []any{i, x, nil, true, map[string]any{s: k}}, s: map[string]any{"x": x}}
		want, werr := json.Marshal(v)
		got, gerr := appendJSON(nil, v)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("error %v, json.Marshal's %v", gerr, werr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
	})
}
