package persist

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// fastDecodeCases are maps of every kind of value an unstructured object holds, with the
// edge cases of the encoding's shortest forms.
var fastDecodeCases = []struct {
	name string
	m    map[string]any
}{
	{"empty", map[string]any{}},
	{"strings", map[string]any{"a": "", "b": "x", "long": strings.Repeat("ü", 300), "ключ": "значение"}},
	{"integers", map[string]any{
		"zero": int64(0), "small": int64(23), "byte": int64(24), "u16": int64(300), "u32": int64(70000),
		"u64": int64(1 << 40), "max": int64(math.MaxInt64), "min": int64(math.MinInt64),
		"neg": int64(-1), "neg24": int64(-25), "neg16": int64(-1000),
	}},
	{"floats", map[string]any{
		"half": 1.5, "one": 1.0, "zero": 0.0, "negzero": math.Copysign(0, -1), "subnormal16": 5.960464477539063e-08,
		"single": 3.4028234663852886e+38, "double": 0.1, "tiny": 5e-324, "big": 1e300, "neg": -2.5,
	}},
	{"others", map[string]any{"t": true, "f": false, "null": nil}},
	{"nested", map[string]any{
		"empty map": map[string]any{}, "empty list": []any{},
		"list": []any{int64(1), "two", 3.5, nil, []any{map[string]any{"deep": []any{true}}}},
		"map":  map[string]any{"a": map[string]any{"b": map[string]any{"c": "d"}}},
	}},
	{"many keys", func() map[string]any {
		m := map[string]any{}
		for i := range 1000 {
			m[strings.Repeat("k", i%40)+string(rune('a'+i%26))+strings.Repeat("v", i/26)] = int64(i)
		}
		return m
	}()},
}

func TestFastDecodeMatchesDirect(t *testing.T) {
	cases := fastDecodeCases
	cases = append(cases, struct {
		name string
		m    map[string]any
	}{"pod", testPod(t, "ns", "p").Object})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			data, err := direct.Marshal(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			var d fastDecoder
			got, ok := d.decodeMap(string(data))
			if !ok {
				t.Fatal("the fast decoder gave up on what direct.Marshal wrote")
			}
			var want map[string]any
			if err := direct.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("fast decoder: %#v\ndirect.Unmarshal: %#v", got, want)
			}
			if !reflect.DeepEqual(got, tt.m) {
				t.Errorf("got %#v, encoded %#v", got, tt.m)
			}
			if f, ok := tt.m["negzero"].(float64); ok && !math.Signbit(got["negzero"].(float64)) {
				t.Errorf("negative zero decoded as %v", f)
			}
		})
	}
}

func TestFastDecodeGivesUp(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"not a map", []byte{0x80}},
		{"null", []byte{0xf6}},
		{"trailing bytes", []byte{0xa0, 0x00}},
		{"truncated", []byte{0xa1, 0x41, 'a'}},
		{"duplicate key", []byte{0xa2, 0x41, 'a', 0x01, 0x41, 'a', 0x02}},
		{"integer key", []byte{0xa1, 0x01, 0x01}},
		{"indefinite map", []byte{0xbf, 0xff}},
		{"uint64 beyond int64", []byte{0xa1, 0x41, 'a', 0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0}},
		{"invalid UTF-8 text", []byte{0xa1, 0x41, 'a', 0x61, 0xff}},
		{"NaN", []byte{0xa1, 0x41, 'a', 0xf9, 0x7e, 0x00}},
		{"infinity", []byte{0xa1, 0x41, 'a', 0xf9, 0x7c, 0x00}},
		{"undefined", []byte{0xa1, 0x41, 'a', 0xf7}},
		{"tag", []byte{0xa1, 0x41, 'a', 0xc1, 0x01}},
		{"long array header", []byte{0xa1, 0x41, 'a', 0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{"deep", append(append([]byte{0xa1, 0x41, 'a'}, []byte(strings.Repeat("\x81", maxFastDepth+1))...), 0x01)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d fastDecoder
			if m, ok := d.decodeMap(string(tt.data)); ok {
				t.Errorf("decoded %#v", m)
			}
		})
	}
}

// FuzzFastDecode checks that the fast decoder accepts only what direct.Unmarshal
// accepts, and decodes it to the same value, with shared values (as the loader decodes)
// or without.
func FuzzFastDecode(f *testing.F) {
	for _, tt := range fastDecodeCases {
		data, err := direct.Marshal(tt.m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	data, err := direct.Marshal(testPod(f, "ns", "p").Object)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		var d fastDecoder
		got, ok := d.decodeMap(string(data))
		if !ok {
			return
		}
		var want map[string]any
		if err := direct.Unmarshal(data, &want); err != nil {
			t.Fatalf("the fast decoder accepted what direct.Unmarshal rejects (%v): %#v", err, got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("fast decoder: %#v\ndirect.Unmarshal: %#v", got, want)
		}
		// With shared values, as the loader decodes: the second decoding finds the
		// maps and arrays of the first.
		shared := fastDecoder{shared: new(sharedValues)}
		for i := range 2 {
			got, ok := shared.decodeMap(string(data))
			if !ok {
				t.Fatalf("decoding %d with shared values gave up", i)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoding %d with shared values: %#v\ndirect.Unmarshal: %#v", i, got, want)
			}
		}
		// As Codec.DecodeShared decodes, with a table that keeps its encodings: the
		// third decoding finds the maps and arrays that the second kept, though the
		// buffer decoded from is scribbled over after each.
		owner := fastDecoder{kept: new(keptValues)}
		for i := range 3 {
			buf := slices.Clone(data)
			got, ok := owner.decodeMap(unsafe.String(unsafe.SliceData(buf), len(buf)))
			for j := range buf {
				buf[j] ^= 0xff
			}
			if !ok {
				t.Fatalf("decoding %d with kept values gave up", i)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoding %d with kept values: %#v\ndirect.Unmarshal: %#v", i, got, want)
			}
		}
	})
}

// TestDecoderCopiesUniqueMetadata: the decoder, whole or partial, copies the uid and the
// resourceVersion of an object's metadata rather than interning them (they are one
// object's values), and still interns the other short strings: two objects decoded by
// one decoder share their namespace and label values, not their uid or
// resourceVersion, even when those are equal; a uid elsewhere than in the root's
// metadata is interned.
func TestDecoderCopiesUniqueMetadata(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name": "cm", "namespace": "ns", "uid": "6f1c2d7e", "resourceVersion": "42",
			"labels": map[string]any{"uid": "6f1c2d7e"},
		},
		"data": map[string]any{"uid": "6f1c2d7e"},
	}
	data, err := direct.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b any) bool {
		sa, sb := a.(string), b.(string)
		return sa == sb && unsafe.StringData(sa) == unsafe.StringData(sb)
	}
	md := func(m map[string]any) map[string]any { return m["metadata"].(map[string]any) }
	var d fastDecoder
	first, ok := d.decodeMap(string(data))
	if !ok {
		t.Fatal("the decoder gave up")
	}
	second, ok := d.decodeMap(string(data))
	if !ok {
		t.Fatal("the decoder gave up")
	}
	if !reflect.DeepEqual(first, obj) {
		t.Fatalf("decoded %#v, want %#v", first, obj)
	}
	for _, k := range []string{"uid", "resourceVersion"} {
		if same(md(first)[k], md(second)[k]) {
			t.Errorf("metadata.%s was interned", k)
		}
	}
	if !same(md(first)["namespace"], md(second)["namespace"]) || !same(md(first)["name"], md(second)["name"]) {
		t.Error("the namespace or the name was not interned")
	}
	if !same(md(first)["labels"].(map[string]any)["uid"], md(second)["labels"].(map[string]any)["uid"]) ||
		!same(first["data"].(map[string]any)["uid"], second["data"].(map[string]any)["uid"]) {
		t.Error("a value named uid outside the root's metadata was not interned")
	}

	// The partial decoding, of the same decoder.
	p1, enc, err := d.decodePartial(string(data))
	if err != nil || enc == nil {
		t.Fatalf("decodePartial: %v, encoding %v", err, enc)
	}
	p2, _, err := d.decodePartial(string(data))
	if err != nil {
		t.Fatal(err)
	}
	m1, m2 := &p1.(*PartialObject).PartialObjectMetadata, &p2.(*PartialObject).PartialObjectMetadata
	unique := func(m *metav1.PartialObjectMetadata) map[string]any {
		return map[string]any{"uid": string(m.UID), "resourceVersion": m.ResourceVersion}
	}
	for _, k := range []string{"uid", "resourceVersion"} {
		if unique(m1)[k] != md(obj)[k] || same(unique(m1)[k], unique(m2)[k]) || same(unique(m1)[k], md(first)[k]) {
			t.Errorf("partial: metadata.%s %q was interned", k, unique(m1)[k])
		}
	}
	if !same(m1.Namespace, md(first)["namespace"]) {
		t.Error("partial: the namespace was not interned")
	}
	// The labels are one string per set, the same for the objects that carry the same.
	l1, _ := p1.(*PartialObject).EncodedLabels()
	l2, _ := p2.(*PartialObject).EncodedLabels()
	if l1 == "" || !same(l1, l2) {
		t.Errorf("partial: the encoded labels %q of two decodings are not one string", l1)
	}
}
