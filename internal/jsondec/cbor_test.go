package jsondec

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// unhex decodes hexadecimal digits, ignoring spaces.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// members returns n JSON members, "k00":0, "k01":0 and so on, and their CBOR.
func members(n int) (jsonText, cborHex string) {
	var j, c []string
	for i := range n {
		j = append(j, fmt.Sprintf(`"k%02d":0`, i))
		c = append(c, fmt.Sprintf("43 6b %x 00", fmt.Sprintf("%02d", i)))
	}
	return strings.Join(j, ","), strings.Join(c, " ")
}

// zeros returns n JSON zeros, separated by commas, and their CBOR.
func zeros(n int) (jsonText, cborHex string) {
	return strings.TrimSuffix(strings.Repeat("0,", n), ","), strings.Repeat("00", n)
}

// TestObjectCBORBytes checks the CBOR of small inputs, byte by byte.
func TestObjectCBORBytes(t *testing.T) {
	const metadata, managedFields = "48 6d65746164617461", "4d 6d616e616765644669656c6473"
	m23, c23 := members(23)
	m24, c24 := members(24)
	z24, c0x24 := zeros(24)
	z30, c0x30 := zeros(30)
	z256, c0x256 := zeros(256)
	z65535, c0x65535 := zeros(65535)
	z65536, c0x65536 := zeros(65536)
	tests := []struct {
		name string
		json string
		drop bool
		want string // hexadecimal; empty for nil
	}{
		{"empty", `{}`, false, "a0"},
		{"null", `null`, false, ""},
		{"scalars", `{"s":"x","t":true,"f":false,"n":null,"e":""}`, false,
			"a5 4173 4178 4174 f5 4166 f4 416e f6 4165 40"},
		{"nested", `{"a":{"b":[1,"two",3.5,null,[{"deep":[true]}]]},"c":[]}`, false,
			"a2 4161 a1 4162 85 01 4374776f fb400c000000000000 f6 81 a1 4464656570 81 f5 4163 80"},
		{"white space", " {\n \"a\" : [ 1 , { } ] } \n", false, "a1 4161 82 01 a0"},
		{"unsigned", `{"a":0,"b":23,"c":24,"d":255,"e":256,"f":65535,"g":65536,"h":4294967295,"i":4294967296,"j":9223372036854775807}`, false,
			"aa 4161 00 4162 17 4163 1818 4164 18ff 4165 190100 4166 19ffff 4167 1a00010000 4168 1affffffff" +
				" 4169 1b0000000100000000 416a 1b7fffffffffffffff"},
		{"negative", `{"a":-1,"b":-24,"c":-25,"d":-256,"e":-257,"f":-65537,"g":-9223372036854775808,"h":-0}`, false,
			"a8 4161 20 4162 37 4163 3818 4164 38ff 4165 390100 4166 3a00010000 4167 3b7fffffffffffffff 4168 00"},
		{"floats", `{"a":1.0,"b":1e3,"c":-0.0,"d":9223372036854775808,"e":5e-324,"f":1e-400,"g":-2.5}`, false,
			"a7 4161 fb3ff0000000000000 4162 fb408f400000000000 4163 fb8000000000000000 4164 fb43e0000000000000" +
				" 4165 fb0000000000000001 4166 fb0000000000000000 4167 fbc004000000000000"},
		{"escapes", `{"a\n":"\u00e9\"\ud83d\ude00","\u0000":"\/","\ud83d":"\\"}`, false,
			"a3 42610a 47c3a922f09f9880 4100 412f 43efbfbd 415c"},
		{"invalid UTF-8", "{\"a\":\"\xff\",\"\xc3\":1}", false, "a2 4161 43efbfbd 43efbfbd 01"},
		{"23 members", `{` + m23 + `}`, false, "b7 " + c23},
		{"24 members", `{` + m24 + `}`, false, "b818 " + c24},
		{"24 members nested", `{"a":[{` + m24 + `}],"b":{` + m24 + `}}`, false, "a2 4161 81 b818 " + c24 + " 4162 b818 " + c24},
		{"string of 23", `{"a":"` + strings.Repeat("x", 23) + `"}`, false, "a1 4161 57" + strings.Repeat("78", 23)},
		{"string of 24", `{"a":"` + strings.Repeat("x", 24) + `"}`, false, "a1 4161 5818" + strings.Repeat("78", 24)},
		{"string of 255", `{"a":"` + strings.Repeat("x", 255) + `"}`, false, "a1 4161 58ff" + strings.Repeat("78", 255)},
		{"string of 256", `{"a":"` + strings.Repeat("x", 256) + `"}`, false, "a1 4161 590100" + strings.Repeat("78", 256)},
		{"escaped string of 256", `{"a":"` + strings.Repeat(`\n`, 256) + `"}`, false, "a1 4161 590100" + strings.Repeat("0a", 256)},
		{"string of 65536", `{"a":"` + strings.Repeat("x", 65536) + `"}`, false, "a1 4161 5a00010000" + strings.Repeat("78", 65536)},
		{"key of 24", `{"` + strings.Repeat("k", 24) + `":1}`, false, "a1 5818" + strings.Repeat("6b", 24) + " 01"},
		{"array of 24", `{"a":[` + z24 + `]}`, false, "a1 4161 9818 " + c0x24},
		{"array of 256", `{"a":[` + z256 + `]}`, false, "a1 4161 990100 " + c0x256},
		{"array of 65535", `{"a":[` + z65535 + `]}`, false, "a1 4161 99ffff " + c0x65535},
		{"array of 65536", `{"a":[` + z65536 + `]}`, false, "a1 4161 9a00010000 " + c0x65536},
		// The inner array ends first, but its head follows the outer one's.
		{"long heads nested", `{"a":[[` + z24 + `],` + z24 + `],"b":[` + z30 + `],"c":[[],[` + z256 + `]]}`, false,
			"a3 4161 9819 9818 " + c0x24 + c0x24 + " 4162 981e " + c0x30 + " 4163 82 80 990100 " + c0x256},
		{"managedFields dropped", `{"metadata":{"name":"a","managedFields":[{"manager":"m"}]},"spec":{"managedFields":1}}`, true,
			"a2 " + metadata + " a1 446e616d65 4161 4473706563 a1 " + managedFields + " 01"},
		{"managedFields kept", `{"metadata":{"name":"a","managedFields":[{"manager":"m"}]},"spec":{"managedFields":1}}`, false,
			"a2 " + metadata + " a2 446e616d65 4161 " + managedFields + " 81 a1 476d616e61676572 416d 4473706563 a1 " + managedFields + " 01"},
		{"managedFields only", `{"metadata":{"managedFields":[` + z256 + `]}}`, true, "a1 " + metadata + " a0"},
		{"managedFields twice dropped", `{"metadata":{"managedFields":[],"managedFields":[1]}}`, true, "a1 " + metadata + " a0"},
		{"managedFields twice kept", `{"metadata":{"managedFields":[],"managedFields":[1]}}`, false, ""},
		{"repeated key", `{"a":1,"a":2}`, false, ""},
		{"repeated escaped key", `{"a":1,"\u0061":1}`, false, ""},
		{"repeated key once made valid UTF-8", "{\"\xff\":{},\"\xe1\":[]}", false, ""},
		{"repeated key nested", `{"x":[{"a":1,"b":2,"a":1}],"y":1}`, false, ""},
		{"repeated key in a long map", `{"a":{` + m24 + `,"k00":1}}`, false, ""},
		{"syntax error", `{"a":[1,]}`, false, ""},
		{"not an object", `[1]`, false, ""},
		{"ambiguous kind", `{"kind":"a","kind":"b"}`, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decoder{DropManagedFields: tt.drop}
			data := []byte(tt.json)
			checkObjectCBOR(t, &d, data)
			_, got, _ := d.ObjectCBOR(data)
			if want := unhex(t, tt.want); !bytes.Equal(got, want) || (got == nil) != (tt.want == "") {
				t.Fatalf("%.200q:\ngot  %.400x\nwant %.400x", data, got, want)
			}
		})
	}
}

// TestObjectCBORDirectMarshal checks that the CBOR of objects whose keys are in the
// order that direct.Marshal sorts them, and that have no floats, is what
// direct.Marshal writes.
func TestObjectCBORDirectMarshal(t *testing.T) {
	m24, _ := members(24)
	z300, _ := zeros(300)
	for _, data := range []string{
		`{}`,
		`{"a":[1,-1,"x",true,false,null,{},[]],"bb":{"c":"d","dd":""},"ccc":-9223372036854775808}`,
		`{"a":"` + strings.Repeat("é", 200) + `","b":{` + m24 + `},"c":[` + z300 + `]}`,
		`{"a":"\u0000\ud83d\ude00\n","b":[{"k":[[]]}]}`,
	} {
		var d Decoder
		m, got, err := d.ObjectCBOR([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		want, err := direct.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%.200s:\nObjectCBOR    %.400x\ndirect.Marshal %.400x", data, got, want)
		}
	}
}

// TestDirectUnmarshal pins down what the checks of ObjectCBOR expect of
// direct.Unmarshal: that it decodes byte strings into strings, map keys included, and
// that it rejects trailing bytes and repeated keys.
func TestDirectUnmarshal(t *testing.T) {
	tests := []struct {
		cbor string
		want map[string]any // nil if decoding fails
	}{
		{"a1 4161 4162", map[string]any{"a": "b"}},
		{"a1 4161 a1 4162 82 4163 40", map[string]any{"a": map[string]any{"b": []any{"c", ""}}}},
		{"a1 41ff 41fe", map[string]any{"\xff": "\xfe"}},
		{"a2 4161 01 4162 3b7fffffffffffffff", map[string]any{"a": int64(1), "b": int64(math.MinInt64)}},
		{"a1 4161 fb8000000000000000", map[string]any{"a": math.Copysign(0, -1)}},
		{"a1 4161 4162 00", nil},       // a trailing byte
		{"a2 4161 4162", nil},          // an entry too few
		{"a2 4161 01 4161 01", nil},    // a repeated key
		{"a2 4161 01 5801 61 01", nil}, // a repeated key, in another form
	}
	for _, tt := range tests {
		var got map[string]any
		err := direct.Unmarshal(unhex(t, tt.cbor), &got)
		switch {
		case tt.want == nil && err == nil:
			t.Errorf("%s: decoded %#v, want an error", tt.cbor, got)
		case tt.want != nil && err != nil:
			t.Errorf("%s: %v", tt.cbor, err)
		case tt.want != nil && !equal(got, tt.want):
			t.Errorf("%s: got %#v, want %#v", tt.cbor, got, tt.want)
		}
	}
}

func TestObjectCBOR(t *testing.T) {
	for _, tt := range objectCases {
		t.Run(tt.name, func(t *testing.T) {
			for _, drop := range []bool{false, true} {
				d := &Decoder{DropManagedFields: drop}
				checkObjectCBOR(t, d, []byte(tt.json))
			}
		})
	}
	for _, name := range []string{"pod.json", "configmap.json"} {
		t.Run(name, func(t *testing.T) {
			for _, drop := range []bool{false, true} {
				d := &Decoder{DropManagedFields: drop}
				checkObjectCBOR(t, d, testdataJSON(t, name))
			}
		})
	}
}

// TestObjectCBORScratch checks that the CBOR that ObjectCBOR returns is not the
// Decoder's, and that Object, List and ObjectCBOR share a Decoder, whatever the inputs
// and failures.
func TestObjectCBORScratch(t *testing.T) {
	pod, configMap := testdataJSON(t, "pod.json"), testdataJSON(t, "configmap.json")
	var d Decoder
	_, first, err := d.ObjectCBOR(pod)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != cap(first) {
		t.Errorf("ObjectCBOR returned %d bytes with a capacity of %d", len(first), cap(first))
	}
	saved := bytes.Clone(first)
	for range 3 {
		for _, data := range [][]byte{configMap, []byte(`{"a":[1,`), pod, []byte(`{"a":1,"a":2}`), []byte(`null`)} {
			checkObjectCBOR(t, &d, data)
			checkObject(t, &d, data)
			checkList(t, &d, data)
		}
		for _, tt := range objectCases {
			checkObjectCBOR(t, &d, []byte(tt.json))
			checkObject(t, &d, []byte(tt.json))
		}
		d.DropManagedFields = !d.DropManagedFields
	}
	if !bytes.Equal(first, saved) {
		t.Error("the CBOR that ObjectCBOR returned changed as the Decoder went on")
	}
}

// checkObjectCBOR checks that ObjectCBOR returns what Object returns, and the CBOR
// that refCBOR writes for data, which direct.Unmarshal decodes into what Object
// returns.
func checkObjectCBOR(t *testing.T, d *Decoder, data []byte) {
	t.Helper()
	m, cbor, err := d.ObjectCBOR(data)
	other := Decoder{DropManagedFields: d.DropManagedFields}
	wantM, wantErr := other.Object(data)
	if fmt.Sprint(err) != fmt.Sprint(wantErr) || !equal(m, wantM) {
		t.Fatalf("%.200q: ObjectCBOR returned %.200v, %v; Object %.200v, %v", data, m, err, wantM, wantErr)
	}
	if err != nil || m == nil {
		if cbor != nil {
			t.Fatalf("%.200q: CBOR %x along with %#v, %v", data, cbor, m, err)
		}
		return
	}
	want, ok := refCBOR(t, data, d.DropManagedFields)
	if !ok {
		if cbor != nil {
			t.Fatalf("%.200q: CBOR %.400x of an object with a repeated key", data, cbor)
		}
		return
	}
	if !bytes.Equal(cbor, want) {
		t.Fatalf("%.200q:\nCBOR %.400x\nwant %.400x", data, cbor, want)
	}
	var out map[string]any
	if err := direct.Unmarshal(cbor, &out); err != nil {
		t.Fatalf("%.200q: direct.Unmarshal(%.400x): %v", data, cbor, err)
	}
	if !equal(out, m) {
		t.Fatalf("%.200q: direct.Unmarshal(%.400x):\ngot  %#v\nwant %#v", data, cbor, out, m)
	}
}

// refCBOR writes the CBOR that ObjectCBOR returns for data, which Object decodes
// without error into a map, from the tokens of encoding/json, without the Decoder's
// code. ok is false if an object has a repeated key.
func refCBOR(t testing.TB, data []byte, dropManagedFields bool) (cbor []byte, ok bool) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	r := refEncoder{t: t, dec: dec, drop: dropManagedFields}
	cbor = r.value(refRoot)
	return cbor, !r.repeated
}

type refEncoder struct {
	t        testing.TB
	dec      *json.Decoder
	drop     bool
	repeated bool
}

// refPlace is where a value is, for the metadata.managedFields that the Decoder drops.
type refPlace int

const (
	refRoot refPlace = iota
	refMetadata
	refOther
)

func (r *refEncoder) token() json.Token {
	tok, err := r.dec.Token()
	if err != nil {
		r.t.Fatal(err)
	}
	return tok
}

func (r *refEncoder) value(place refPlace) []byte {
	switch tok := r.token().(type) {
	case json.Delim:
		var body []byte
		n := 0
		if tok == '[' {
			for ; r.dec.More(); n++ {
				body = append(body, r.value(refOther)...)
			}
			r.token()
			return append(refHead(4, uint64(n)), body...)
		}
		seen := map[string]bool{}
		for r.dec.More() {
			key := r.token().(string)
			inner := refOther
			if place == refRoot && key == "metadata" {
				inner = refMetadata
			}
			v := r.value(inner)
			if place == refMetadata && key == "managedFields" && r.drop {
				continue
			}
			r.repeated = r.repeated || seen[key]
			seen[key] = true
			body = append(body, refHead(2, uint64(len(key)))...)
			body = append(append(body, key...), v...)
			n++
		}
		r.token()
		return append(refHead(5, uint64(n)), body...)
	case string:
		return append(refHead(2, uint64(len(tok))), tok...)
	case json.Number:
		// As k8s.io/apimachinery/pkg/util/json converts numbers.
		if i, err := tok.Int64(); err == nil {
			if i < 0 {
				return refHead(1, uint64(-1-i))
			}
			return refHead(0, uint64(i))
		}
		f, err := tok.Float64()
		if err != nil {
			r.t.Fatal(err)
		}
		return binary.BigEndian.AppendUint64([]byte{0xfb}, math.Float64bits(f))
	case bool:
		if tok {
			return []byte{0xf5}
		}
		return []byte{0xf4}
	case nil:
		return []byte{0xf6}
	}
	r.t.Fatalf("unexpected token")
	return nil
}

// refHead returns the head of a data item of major type major, whose argument is n.
func refHead(major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return []byte{m | byte(n)}
	case n < 1<<8:
		return []byte{m | 24, byte(n)}
	case n < 1<<16:
		return binary.BigEndian.AppendUint16([]byte{m | 25}, uint16(n))
	case n < 1<<32:
		return binary.BigEndian.AppendUint32([]byte{m | 26}, uint32(n))
	}
	return binary.BigEndian.AppendUint64([]byte{m | 27}, n)
}

// FuzzObjectCBOR checks that ObjectCBOR returns what Object returns, with the CBOR
// that refCBOR writes, which direct.Unmarshal decodes into the same map.
func FuzzObjectCBOR(f *testing.F) {
	addSmallCases(f)
	f.Add(testdataJSON(f, "pod.json"))
	f.Add(testdataJSON(f, "configmap.json"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Decoder
		for _, drop := range []bool{false, true} {
			d.DropManagedFields = drop
			checkObjectCBOR(t, &d, data)
		}
	})
}

// filing returns what ObjectPartialCBOR keeps of m, a whole object's map.
func filing(m map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"apiVersion", "kind", "metadata"} {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	if md, ok := m["metadata"].(map[string]any); ok {
		kept := map[string]any{}
		for _, k := range []string{"name", "namespace", "uid", "resourceVersion", "labels"} {
			if v, ok := md[k]; ok {
				kept[k] = v
			}
		}
		out["metadata"] = kept
	}
	return out
}

// checkPartial fails t unless partial.ObjectPartialCBOR returns for data what
// ObjectCBOR does: the same error, the same CBOR byte for byte, and of the map what files
// the object (the whole map when there is no CBOR). partial is reused, to find state
// left behind by an earlier call.
func checkPartial(t *testing.T, partial *Decoder, data []byte) {
	t.Helper()
	whole := &Decoder{DropManagedFields: partial.DropManagedFields}
	wm, wc, werr := whole.ObjectCBOR(data)
	pm, pc, perr := partial.ObjectPartialCBOR(data)
	if fmt.Sprint(werr) != fmt.Sprint(perr) {
		t.Fatalf("error %v, want %v", perr, werr)
	}
	if !bytes.Equal(pc, wc) {
		t.Fatalf("CBOR %x, want %x", pc, wc)
	}
	want := wm
	if wc != nil {
		want = filing(wm)
	}
	if werr == nil && !reflect.DeepEqual(pm, want) {
		t.Fatalf("map %v, want %v", pm, want)
	}
	// The decoder reads the input through an unsafe string and its scratch space: what
	// it returned must change neither when the input is overwritten nor when the decoder
	// decodes something else.
	got := func() any { return []any{pm, pc} }
	checkNoAlias(t, data, got)
	before := fmt.Sprintf("%#v", got())
	_, _, _ = partial.ObjectPartialCBOR([]byte(`{"kind":"Other","apiVersion":"v9","metadata":{"name":"\u0078-overwritten","labels":{"x\u0079":"zz"}},"spec":{"s":"\u00e9\u00e9"}}`))
	if after := fmt.Sprintf("%#v", got()); after != before {
		t.Fatalf("%q: what was decoded changed when the decoder decoded again", data)
	}
}

func TestObjectPartialCBOR(t *testing.T) {
	cases := []string{
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"7","labels":{"x":"y"},"annotations":{"k":"v"},"managedFields":[{"m":1}]},"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}]}],"n":1.5,"t":true,"f":false,"z":null},"status":{}}`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b"},"data":{"a":"1","a":"2"}}`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b"},"data":{},"data":{}}`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"b","name":"c"}}`,
		`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"annotations":{},"annotations":{}}}`,
		`{"kind":"X","apiVersion":"v1","spec":[1,2,[3,{"a":[]}],"s\u00e9"],"big":` + strings.Repeat(`[`, 10) + strings.Repeat(`]`, 10) + `}`,
		`{"kind":"X","apiVersion":"v1","spec":{"n":1e400}}`,
		`{"kind":"X","apiVersion":"v1","spec":{"s":"\ud800"}}`,
		`{"kind":"X","apiVersion":"v1","spec":{"a":1,}}`,
		`{"kind":"X","apiVersion":"v1","Kind":"Y"}`,
		`{"kind":"X","apiVersion":"v1","spec":` + strings.Repeat(`{"a":`, 30) + `1` + strings.Repeat(`}`, 30) + `}`,
		`{"kind":"X","apiVersion":"v1","spec":{` + manyMembers(40) + `}}`,
		`{"kind":"X","apiVersion":"v1",` + manyMembers(40) + `,"metadata":{"name":"m",` + manyMembers(30) + `}}`,
		`{"kind":"X","apiVersion":"v1",` + manyMembers(30) + `,` + manyMembers(1) + `}`,
		// Filing fields too long to be interned, so that they are copies of the input.
		`{"kind":"X","apiVersion":"v1","metadata":{"name":"` + strings.Repeat("n", 300) + `","labels":{"l":"` + strings.Repeat("v", 300) + `"}}}`,
		`null`,
		`[]`,
	}
	d := new(Decoder)
	for _, c := range cases {
		for _, drop := range []bool{false, true} {
			t.Run(fmt.Sprintf("%.40s/drop=%v", c, drop), func(t *testing.T) {
				d.DropManagedFields = drop
				checkPartial(t, d, []byte(c))
			})
		}
	}
	for _, name := range []string{"pod.json", "configmap.json"} {
		checkPartial(t, d, testdataJSON(t, name))
	}
}

// manyMembers returns n members "k0":0, ... for an object whose head takes more than
// one byte.
func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String()
}

func FuzzObjectPartialCBOR(f *testing.F) {
	addSmallCases(f)
	f.Add(testdataJSON(f, "pod.json"))
	f.Add(testdataJSON(f, "configmap.json"))
	var d Decoder
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, drop := range []bool{false, true} {
			d.DropManagedFields = drop
			checkPartial(t, &d, data)
		}
	})
}

// TestAppendValueCBOR: the CBOR of a value is what ObjectCBOR writes for it as the value
// of a member, appended to what dst holds; a value with a repeated key is
// ErrRepeatedKey, and one that Object would not decode, or too deep for its depth, an
// *Error; either way dst is as it was.
func TestAppendValueCBOR(t *testing.T) {
	for _, tc := range []struct {
		value string
		depth int
		err   error
	}{
		{value: `1`, depth: 1},
		{value: ` "s\u00e9\ud800 <>" `, depth: 1},
		{value: `[1, -0, 3.0, 1e2, 12345678901234567890, true, false, null, {}, []]`, depth: 1},
		{value: `{"a":{"b":[` + manyMembers(0) + `{` + manyMembers(40) + `}]},"metadata":{"name":"n","managedFields":[]}}`, depth: 1},
		{value: `{"a":1,"a":2}`, depth: 1, err: ErrRepeatedKey},
		{value: `{"a":{"b":1,"b":1}}`, depth: 1, err: ErrRepeatedKey},
		{value: `[1e400]`, depth: 1, err: new(Error)},
		{value: `{"a":`, depth: 1, err: new(Error)},
		{value: `1 2`, depth: 1, err: new(Error)},
		{value: ``, depth: 1, err: new(Error)},
		{value: `[[]]`, depth: MaxDepth - 2},
		{value: `[[]]`, depth: MaxDepth - 1, err: new(Error)},
	} {
		t.Run(tc.value, func(t *testing.T) {
			var d Decoder
			dst := []byte("prefix")
			got, err := d.AppendValueCBOR(dst, []byte(tc.value), tc.depth)
			if tc.err != nil {
				var syntax *Error
				if !errors.Is(err, tc.err) && !(errors.As(tc.err, &syntax) && errors.As(err, &syntax)) {
					t.Fatalf("got %v, want %T %v", err, tc.err, tc.err)
				}
				if string(got) != "prefix" {
					t.Fatalf("dst %q after an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, whole, err := d.ObjectCBOR([]byte(`{"v":` + tc.value + `}`))
			if err != nil {
				t.Fatal(err)
			}
			// The map's head, and the key.
			if want := "prefix" + string(whole[1+2:]); string(got) != want {
				t.Errorf("got %x, want %x", got, want)
			}
		})
	}
}

// TestCopiesUniqueValues checks that the uid and resourceVersion of whole and partial
// objects are copies, not interned: a table that kept them would hold every listed
// object's until it starts over, for no sharing. The name, the namespace and the
// labels repeat, and stay interned.
func TestCopiesUniqueValues(t *testing.T) {
	var d Decoder
	data := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-a","namespace":"ns-1","uid":"uid-1","resourceVersion":"1234","labels":{"x":"yes"}},"data":{"k":"v"}}`)
	md := func() map[string]any {
		m, _, err := d.ObjectPartialCBOR(bytes.Clone(data))
		if err != nil {
			t.Fatal(err)
		}
		return m["metadata"].(map[string]any)
	}
	checkUniqueCopied(t, md(), md())
	whole := func() map[string]any {
		m, err := d.Object(bytes.Clone(data))
		if err != nil {
			t.Fatal(err)
		}
		return m["metadata"].(map[string]any)
	}
	checkUniqueCopied(t, whole(), whole())
}

// checkUniqueCopied fails t unless the metadata first and second, decoded by one
// Decoder from the same input, have equal copies of their uid and resourceVersion,
// and share their name, namespace and label values.
func checkUniqueCopied(t *testing.T, first, second map[string]any) {
	t.Helper()
	same := func(k string) bool {
		return unsafe.StringData(first[k].(string)) == unsafe.StringData(second[k].(string))
	}
	for _, k := range []string{"uid", "resourceVersion"} {
		if first[k] != second[k] || same(k) {
			t.Errorf("%s: %q and %q, want equal copies", k, first[k], second[k])
		}
	}
	for _, k := range []string{"name", "namespace"} {
		if !same(k) {
			t.Errorf("the %s is not interned", k)
		}
	}
	l1, l2 := first["labels"].(map[string]any)["x"].(string), second["labels"].(map[string]any)["x"].(string)
	if unsafe.StringData(l1) != unsafe.StringData(l2) {
		t.Errorf("the label value is not interned")
	}
}

// TestCBORPrefix: with CBORPrefix, ObjectCBOR and ObjectPartialCBOR return the prefix
// and then the CBOR they return without it, long heads included; the maps are the same.
func TestCBORPrefix(t *testing.T) {
	inputs := [][]byte{
		[]byte(`{"kind":"X","apiVersion":"v1",` + manyMembers(30) + `,"metadata":{"name":"m","labels":{` + manyMembers(25) + `}}}`),
		testdataJSON(t, "pod.json"),
	}
	prefix := []byte{3}
	for _, in := range inputs {
		for _, partial := range []bool{false, true} {
			decode := (*Decoder).ObjectCBOR
			if partial {
				decode = (*Decoder).ObjectPartialCBOR
			}
			plain := new(Decoder)
			wantM, want, err := decode(plain, in)
			if err != nil || want == nil {
				t.Fatalf("partial=%v: %v, %d bytes", partial, err, len(want))
			}
			d := &Decoder{CBORPrefix: prefix}
			m, got, err := decode(d, in)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append(slices.Clone(prefix), want...)) || len(got) != cap(got) {
				t.Errorf("partial=%v: got % x (cap %d), want %x then % x", partial, got, cap(got), prefix, want)
			}
			if !reflect.DeepEqual(m, wantM) {
				t.Errorf("partial=%v: the map differs with a prefix: %v, want %v", partial, m, wantM)
			}
		}
	}
}

// TestRewrite: with Rewrite, ObjectCBOR and ObjectPartialCBOR hand it the prefix and the
// CBOR they would return, and return what it returns, or, if it declines, a copy of
// the CBOR of its exact length, which the next object does not change.
func TestRewrite(t *testing.T) {
	in := []byte(`{"kind":"X","apiVersion":"v1","metadata":{"name":"m","labels":{` + manyMembers(25) + `}}}`)
	plain := &Decoder{CBORPrefix: []byte{3}}
	_, want, err := plain.ObjectCBOR(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, partial := range []bool{false, true} {
		decode := (*Decoder).ObjectCBOR
		if partial {
			decode = (*Decoder).ObjectPartialCBOR
		}
		var seen []byte
		d := &Decoder{CBORPrefix: []byte{3}, Rewrite: func(cbor []byte) ([]byte, bool) {
			seen = slices.Clone(cbor)
			return []byte("short"), true
		}}
		if _, got, err := decode(d, in); err != nil || string(got) != "short" || !bytes.Equal(seen, want) {
			t.Fatalf("partial=%v: got %q, %v; Rewrite saw % x, want % x", partial, got, err, seen, want)
		}
		d.Rewrite = func([]byte) ([]byte, bool) { return nil, false }
		_, got, err := decode(d, in)
		if err != nil || !bytes.Equal(got, want) || cap(got) != len(got) {
			t.Fatalf("partial=%v, declined: % x (cap %d), %v; want % x", partial, got, cap(got), err, want)
		}
		if _, _, err := decode(d, []byte(`{"kind":"Y","apiVersion":"v2","metadata":{"name":"other-name","labels":{"z":"zz"}}}`)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("partial=%v: the returned CBOR changed with the next object", partial)
		}
	}
}
