package persist

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// fastEncodeCases add to fastDecodeCases what only an encoder meets: keys at the
// boundaries of the length encodings, which decide the order of the entries, nil
// containers, and strings that are not UTF-8.
var fastEncodeCases = []struct {
	name string
	m    map[string]any
}{
	{"key lengths", map[string]any{
		strings.Repeat("a", 23): int64(1), strings.Repeat("b", 24): int64(2), strings.Repeat("a", 24): int64(3),
		strings.Repeat("c", 255): int64(4), strings.Repeat("c", 256): int64(5), strings.Repeat("d", 65536): int64(6),
		"": int64(7), "z": int64(8), "aa": int64(9), "B": int64(10),
	}},
	{"nil containers", map[string]any{"map": map[string]any(nil), "list": []any(nil), "in list": []any{[]any(nil), map[string]any(nil)}}},
	{"not UTF-8", map[string]any{"\xff": "\xfe\xfd", "ok": "\x00"}},
	{"integer boundaries", map[string]any{
		"23": int64(23), "255": int64(255), "256": int64(256), "65535": int64(65535), "65536": int64(65536),
		"4294967295": int64(4294967295), "4294967296": int64(4294967296),
		"-24": int64(-24), "-25": int64(-25), "-256": int64(-256), "-257": int64(-257), "-65537": int64(-65537),
		"-4294967297": int64(-4294967297),
	}},
	{"float widths", map[string]any{
		"f16 max": 65504.0, "f16 min subnormal": 5.960464477539063e-08, "f32 only": 3.1415927410125732,
		"f64": math.Pi, "f32 subnormal": 1.401298464324817e-45, "negative": -0.1,
	}},
}

func TestFastEncodeMatchesDirect(t *testing.T) {
	var cases []struct {
		name string
		m    map[string]any
	}
	cases = append(cases, fastDecodeCases...)
	cases = append(cases, fastEncodeCases...)
	cases = append(cases, struct {
		name string
		m    map[string]any
	}{"pod", testPod(t, "ns", "p").Object})
	var e cborEncoder // reused, as the writer does
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			want, err := direct.Marshal(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			e.buf = e.buf[:0]
			if !e.appendMap(tt.m) {
				t.Fatal("the encoder gave up")
			}
			if !bytes.Equal(e.buf, want) {
				t.Errorf("encoder:        %x\ndirect.Marshal: %x", e.buf, want)
			}
			if len(e.entries) != 0 {
				t.Errorf("%d entries left on the stack", len(e.entries))
			}
		})
	}
}

// Values of other types, and values that direct.Marshal rejects, make the encoder give
// up; encodeObject then gives direct.Marshal's result or error.
func TestFastEncodeGivesUp(t *testing.T) {
	tests := []struct {
		name    string
		m       map[string]any
		wantErr bool
	}{
		{"int", map[string]any{"a": 1}, false},
		{"typed map", map[string]any{"a": map[string]string{"b": "c"}}, false},
		{"nested typed value", map[string]any{"a": []any{map[string]any{"b": int32(2)}}}, false},
		{"NaN", map[string]any{"a": math.NaN()}, true},
		{"infinity", map[string]any{"a": []any{math.Inf(-1)}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var e cborEncoder
			if e.appendMap(tt.m) {
				t.Fatalf("encoded %x", e.buf)
			}
			got, err := encodeObject(&unstructured.Unstructured{Object: tt.m})
			if tt.wantErr {
				if err == nil {
					t.Fatalf("encodeObject: %x, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want, err := direct.Marshal(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("encodeObject: %x\ndirect.Marshal: %x", got, want)
			}
		})
	}
}

// FuzzFastEncode checks that the encoder writes what direct.Marshal writes, for every
// map that direct.Unmarshal makes of the input.
func FuzzFastEncode(f *testing.F) {
	for _, tt := range append(append(fastDecodeCases[:len(fastDecodeCases):len(fastDecodeCases)], fastEncodeCases...), struct {
		name string
		m    map[string]any
	}{"pod", testPod(f, "ns", "p").Object}) {
		data, err := direct.Marshal(tt.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if err := direct.Unmarshal(data, &m); err != nil {
			return
		}
		want, wantErr := direct.Marshal(m)
		var e cborEncoder
		ok := e.appendMap(m)
		switch {
		case ok && wantErr != nil:
			t.Fatalf("encoded %x, where direct.Marshal fails: %v", e.buf, wantErr)
		case ok && !bytes.Equal(e.buf, want):
			t.Fatalf("encoder:        %x\ndirect.Marshal: %x", e.buf, want)
		case !ok && wantErr == nil && handledTypes(m):
			t.Fatalf("gave up on %#v, which direct.Marshal encodes", m)
		}
	})
}

// handledTypes reports whether v holds only values of the types that the encoder
// handles.
func handledTypes(v any) bool {
	switch x := v.(type) {
	case nil, string, int64, bool, float64:
		return true
	case map[string]any:
		for _, item := range x {
			if !handledTypes(item) {
				return false
			}
		}
		return true
	case []any:
		for _, item := range x {
			if !handledTypes(item) {
				return false
			}
		}
		return true
	default:
		return false
	}
}
