package jsondec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// objectCases are inputs for Object, valid or not, with the edge cases of JSON and of
// its decoding by apimachinery.
var objectCases = []struct {
	name string
	json string
}{
	{"empty", `{}`},
	{"white space", " \t\r\n{ \t\r\n\"a\" \n: \r1 \t, \"b\":[ ] ,\"c\":{ } } \n"},
	{"null", `null`},
	{"scalars", `{"s":"x","t":true,"f":false,"n":null,"i":1,"e":""}`},
	{"nested", `{"a":{"b":[1,"two",3.5,null,[{"deep":[true]}]]},"c":[]}`},
	{"duplicate keys", `{"a":1,"b":2,"a":{"x":1},"a":[3]}`},
	{"integers", `{"zero":0,"neg":-1,"small":255,"big":256,"max":9223372036854775807,"min":-9223372036854775808,` +
		`"18 digits":999999999999999999,"19 digits":1000000000000000000}`},
	{"integers beyond int64", `{"max+1":9223372036854775808,"min-1":-9223372036854775809,"20 digits":12345678901234567890}`},
	{"huge integer", `{"a":1` + strings.Repeat("0", 400) + `}`},
	{"negative zero", `{"int":-0,"float":-0.0,"exp":-0e0}`},
	{"floats", `{"a":1.0,"b":1e3,"c":1E3,"d":1e+3,"e":1e-3,"f":0.1,"g":-2.5,"h":5e-324,"i":1.7976931348623157e308}`},
	{"float underflow", `{"a":1e-400}`},
	{"float overflow", `{"a":1e400}`},
	{"negative float overflow", `{"a":-1e400}`},
	{"escapes", `{"a":"\"\\\/\b\f\n\r\t","b":"\u0041\u00e9\u20AC","\u006b":"key"}`},
	{"NUL", `{"a":"\u0000","\u0000":"b"}`},
	{"surrogate pair", `{"a":"\ud83d\ude00"}`},
	{"lone high surrogate", `{"a":"\ud83dx"}`},
	{"lone high surrogate at end", `{"a":"\ud83d"}`},
	{"lone low surrogate", `{"a":"\ude00\ud83d"}`},
	{"high surrogate twice", `{"a":"\ud83d\ud83d\ude00"}`},
	{"high surrogate and escape", `{"a":"\ud83d\n"}`},
	{"high surrogate and bad escape", `{"a":"\ud83d\uZZZZ"}`},
	{"invalid UTF-8", "{\"a\":\"\xff\",\"\xfe\":\"b\",\"c\":\"x\xc3\",\"d\":\"\xed\xa0\x80\"}"},
	{"invalid UTF-8 and escape", "{\"a\":\"\xff\\n\xc3\xa9\"}"},
	{"valid UTF-8", `{"ключ":"значение","emoji":"😀","replacement":"�"}`},
	{"long string", `{"a":"` + strings.Repeat("ü", 300) + `"}`},
	{"long escaped string", `{"a":"` + strings.Repeat(`\n`, 300) + `"}`},
	{"fold-cased type meta", `{"APIVERSION":"v1","kind":"Pod"}`},
	{"Kelvin kind", "{\"\u212aind\":\"Pod\"}"},
	{"repeated kind", `{"kind":5,"kind":"Pod"}`},
	{"typed meta in metadata", `{"apiVersion":"v1","kind":"Pod","metadata":{"Kind":1,"kind":2}}`},
	{"managedFields", `{"metadata":{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}]},"spec":{"managedFields":1}}`},
	{"managedFields null", `{"metadata":{"managedFields":null}}`},
	{"managedFields twice", `{"metadata":{"managedFields":[],"managedFields":[1]},"metadata":{"managedFields":{}}}`},
	{"managedFields in a nested metadata", `{"spec":{"metadata":{"managedFields":[1]}}}`},
	{"escaped managedFields", `{"metadata":{"managed\u0046ields":[1]}}`},
	{"invalid managedFields", `{"metadata":{"managedFields":[1,]}}`},
	{"managedFields out of range", `{"metadata":{"managedFields":[1e999]}}`},
	{"managedFields huge integer", `{"metadata":{"managedFields":[1` + strings.Repeat("0", 400) + `]}}`},
	{"managedFields bad escape", `{"metadata":{"managedFields":["\x"]}}`},
	{"managedFields control character", "{\"metadata\":{\"managedFields\":[\"\n\"]}}"},
	{"managedFields deep", `{"metadata":{"managedFields":` + strings.Repeat("[", MaxDepth-2) + strings.Repeat("]", MaxDepth-2) + `}}`},
	{"managedFields too deep", `{"metadata":{"managedFields":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}}`},
	{"deep", `{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`},
	{"too deep", `{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`},
	{"deep maps", strings.Repeat(`{"a":`, MaxDepth) + `1` + strings.Repeat("}", MaxDepth)},
	{"too deep maps", strings.Repeat(`{"a":`, MaxDepth+1) + `1` + strings.Repeat("}", MaxDepth+1)},

	{"empty input", ``},
	{"only space", ` `},
	{"array", `[1]`},
	{"string", `"a"`},
	{"number", `1`},
	{"true", `true`},
	{"trailing garbage", `{}x`},
	{"trailing value", `{} {}`},
	{"trailing comma", `{"a":1,}`},
	{"array trailing comma", `{"a":[1,]}`},
	{"missing colon", `{"a" 1}`},
	{"missing value", `{"a":}`},
	{"non-string key", `{1:1}`},
	{"truncated", `{"a":[1,{"b":"c`},
	{"truncated escape", `{"a":"\`},
	{"truncated unicode escape", `{"a":"\u12`},
	{"bad unicode escape", `{"a":"\u12x4"}`},
	{"bad escape", `{"a":"\x"}`},
	{"single quote escape", `{"a":"\'"}`},
	{"control character", "{\"a\":\"\t\"}"},
	{"leading zero", `{"a":01}`},
	{"minus alone", `{"a":-}`},
	{"plus", `{"a":+1}`},
	{"dot", `{"a":.5}`},
	{"trailing dot", `{"a":1.}`},
	{"empty exponent", `{"a":1e}`},
	{"exponent sign only", `{"a":1e+}`},
	{"NaN", `{"a":NaN}`},
	{"bad literal", `{"a":tru}`},
	{"literal prefix", `{"a":nulll}`},
	{"byte order mark", "\xef\xbb\xbf{}"},
	{"single quotes", `{'a':1}`},
}

// listCases are inputs for List.
var listCases = []struct {
	name string
	json string
}{
	{"empty", `{}`},
	{"null", `null`},
	{"no items", `{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"1"}}`},
	{"null items", `{"kind":"PodList","items":null}`},
	{"empty items", `{"kind":"PodList","items":[]}`},
	{"items", `{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"1"},"items":[` +
		`{"metadata":{"name":"a","managedFields":[{"manager":"m"}]}},` +
		`{"apiVersion":"v2","metadata":{"name":"b"}},` +
		`{"kind":"Other"},` +
		`{"kind":5,"apiVersion":null},` +
		`null,{}]}`},
	{"items twice", `{"kind":"PodList","items":[{"a":1}],"items":[{"b":2}]}`},
	{"items then null", `{"kind":"PodList","items":[{"a":1}],"items":null}`},
	{"kind without List", `{"apiVersion":"x/v1","kind":"Pods","items":[{}]}`},
	{"list managedFields kept", `{"kind":"List","metadata":{"managedFields":[1]},"items":[]}`},
	{"item nested items", `{"kind":"List","items":[{"items":[1],"spec":{"items":[{"metadata":{"managedFields":1}}]}}]}`},
	{"item number", `{"kind":"List","items":[1]}`},
	{"item array", `{"kind":"List","items":[[]]}`},
	{"item string", `{"kind":"List","items":["a"]}`},
	{"items object", `{"kind":"List","items":{}}`},
	{"items string", `{"kind":"List","items":"a"}`},
	{"items number", `{"kind":"List","items":1}`},
	{"items bad", `{"kind":"List","items":[{},]}`},
	{"items truncated", `{"kind":"List","items":[{}`},
	{"items upper case", `{"kind":"List","ITEMS":[{}]}`},
	{"item too deep", `{"kind":"List","items":[` + strings.Repeat(`{"a":`, MaxDepth-1) + `1` + strings.Repeat("}", MaxDepth-1) + `]}`},
	{"item deep", `{"kind":"List","items":[` + strings.Repeat(`{"a":`, MaxDepth-2) + `1` + strings.Repeat("}", MaxDepth-2) + `]}`},
	{"fold-cased kind", `{"Kind":"List","items":[]}`},
	{"array", `[]`},
	{"trailing garbage", `{"items":[]}]`},
}

// wantObject decodes data as unstructured.UnstructuredJSONScheme decodes an object,
// and drops the object's managedFields if asked.
func wantObject(data []byte, dropManagedFields bool) (map[string]any, error) {
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if dropManagedFields {
		dropManaged(m)
	}
	return m, nil
}

// wantList decodes data as unstructured.UnstructuredJSONScheme decodes it into an
// UnstructuredList, and drops the items' managedFields if asked.
func wantList(data []byte, dropManagedFields bool) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{}
	// The scheme also requires a kind, which List leaves to its caller.
	if _, _, err := unstructured.UnstructuredJSONScheme.Decode(data, nil, list); err != nil && !runtime.IsMissingKind(err) {
		return nil, err
	}
	if dropManagedFields {
		for _, item := range list.Items {
			dropManaged(item.Object)
		}
	}
	return list, nil
}

func dropManaged(m map[string]any) {
	if md, ok := m["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
}

// checkObject checks that d decodes data as apimachinery does.
func checkObject(t *testing.T, d *Decoder, data []byte) {
	t.Helper()
	got, err := d.Object(data)
	want, wantErr := wantObject(data, d.DropManagedFields)
	compare(t, data, got, err, want, wantErr)
	if err == nil {
		checkNoAlias(t, data, func() any { return got })
	}
}

func checkList(t *testing.T, d *Decoder, data []byte) {
	t.Helper()
	got, err := d.List(data)
	want, wantErr := wantList(data, d.DropManagedFields)
	compare(t, data, got, err, want, wantErr)
	if err == nil {
		checkNoAlias(t, data, func() any { return got })
	}
}

func compare(t *testing.T, data []byte, got any, err error, want any, wantErr error) {
	t.Helper()
	if errors.Is(err, ErrAmbiguousTypeMeta) {
		return
	}
	switch {
	case err != nil && wantErr == nil:
		t.Fatalf("%q: error %v, apimachinery decodes %#v", data, err, want)
	case err == nil && wantErr != nil:
		t.Fatalf("%q: decoded %#v, apimachinery fails: %v", data, got, wantErr)
	case err == nil && !equal(got, want):
		t.Fatalf("%q:\ngot  %#v\nwant %#v", data, got, want)
	}
}

// equal is reflect.DeepEqual, which also tells negative zero from zero.
func equal(a, b any) bool {
	return reflect.DeepEqual(a, b) && fmt.Sprintf("%#v", a) == fmt.Sprintf("%#v", b)
}

// checkNoAlias checks that what decoded returns does not change when data does.
func checkNoAlias(t *testing.T, data []byte, decoded func() any) {
	t.Helper()
	before := fmt.Sprintf("%#v", decoded())
	saved := bytes.Clone(data)
	for i := range data {
		data[i] = 'x'
	}
	after := fmt.Sprintf("%#v", decoded())
	copy(data, saved)
	if before != after {
		t.Fatalf("%q: the decoded value shares memory with the input", data)
	}
}

func TestObject(t *testing.T) {
	for _, tt := range objectCases {
		t.Run(tt.name, func(t *testing.T) {
			for _, drop := range []bool{false, true} {
				d := &Decoder{DropManagedFields: drop}
				checkObject(t, d, []byte(tt.json))
			}
		})
	}
}

func TestList(t *testing.T) {
	for _, tt := range listCases {
		t.Run(tt.name, func(t *testing.T) {
			for _, drop := range []bool{false, true} {
				d := &Decoder{DropManagedFields: drop}
				checkList(t, d, []byte(tt.json))
			}
		})
	}
}

// TestEdgeCases pins down what apimachinery does with the edge cases, so that a change
// of both sides shows.
func TestEdgeCases(t *testing.T) {
	tests := []struct {
		json string
		want any // an error if decoding fails
	}{
		{`{"a":-0}`, int64(0)},
		{`{"a":-0.0}`, math.Copysign(0, -1)},
		{`{"a":1e3}`, 1000.0},
		{`{"a":1.0}`, 1.0},
		{`{"a":9223372036854775807}`, int64(math.MaxInt64)},
		{`{"a":9223372036854775808}`, 9223372036854775808.0},
		{`{"a":1e400}`, errors.New("out of range")},
		{`{"a":1e-400}`, 0.0},
		{`{"a":"\u0000"}`, "\x00"},
		{`{"a":"\ud83d\ude00"}`, "😀"},
		{`{"a":"\ud83d"}`, "\ufffd"},
		{`{"a":"\ude00\ud83d"}`, "\ufffd\ufffd"},
		{"{\"a\":\"\xff\"}", "\ufffd"},
		{"{\"a\":\"\xed\xa0\x80\"}", "\ufffd\ufffd\ufffd"},
		{`{"a":1,"a":2}`, int64(2)},
		{`{"a":[]}`, []any{}},
		{`{"a":1} x`, errors.New("trailing")},
	}
	for _, tt := range tests {
		var d Decoder
		m, err := d.Object([]byte(tt.json))
		if wantErr, ok := tt.want.(error); ok {
			if err == nil {
				t.Errorf("%s: decoded %#v, want an error (%v)", tt.json, m, wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.json, err)
			continue
		}
		if !equal(m["a"], tt.want) {
			t.Errorf("%s: got %#v, want %#v", tt.json, m["a"], tt.want)
		}
	}
}

func TestAmbiguousTypeMeta(t *testing.T) {
	for _, data := range []string{
		`{"APIVERSION":"v1","kind":"Pod"}`,
		`{"apiVersion":"v1","Kind":"Pod"}`,
		"{\"\u212aind\":\"Pod\"}",
		`{"kind":"Pod","kind":"Pod"}`,
		`{"apiVersion":1,"apiVersion":"v1"}`,
	} {
		var d Decoder
		if _, err := d.Object([]byte(data)); !errors.Is(err, ErrAmbiguousTypeMeta) {
			t.Errorf("Object(%s): %v, want ErrAmbiguousTypeMeta", data, err)
		}
		if _, err := d.List([]byte(data)); !errors.Is(err, ErrAmbiguousTypeMeta) {
			t.Errorf("List(%s): %v, want ErrAmbiguousTypeMeta", data, err)
		}
	}
	// Items and nested maps are not read for their type by the serializer.
	var d Decoder
	if _, err := d.List([]byte(`{"kind":"List","items":[{"Kind":"a","kind":"b"}]}`)); err != nil {
		t.Error(err)
	}
}

func TestInterning(t *testing.T) {
	var d Decoder
	list, err := d.List([]byte(`{"kind":"PodList","apiVersion":"v1","items":[` +
		`{"spec":{"image":"nginx:1.27","long":"` + strings.Repeat("x", 200) + `"}},` +
		`{"spec":{"image":"nginx:1.27","long":"` + strings.Repeat("x", 200) + `"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	spec := func(i int) map[string]any { return list.Items[i].Object["spec"].(map[string]any) }
	a, b := spec(0)["image"].(string), spec(1)["image"].(string)
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("the same short value of two items is not one string")
	}
	ia, ib := spec(0)["image"], spec(1)["image"]
	if (*[2]unsafe.Pointer)(unsafe.Pointer(&ia))[1] != (*[2]unsafe.Pointer)(unsafe.Pointer(&ib))[1] {
		t.Error("the same short value of two items is not one box")
	}
	for k := range spec(0) {
		for k2 := range spec(1) {
			if k == k2 && unsafe.StringData(k) != unsafe.StringData(k2) {
				t.Errorf("key %q of two items is not one string", k)
			}
		}
	}
	if la, lb := spec(0)["long"].(string), spec(1)["long"].(string); unsafe.StringData(la) == unsafe.StringData(lb) {
		t.Error("a long value was interned")
	}
	if list.Items[0].GetKind() != "Pod" || list.Items[0].GetAPIVersion() != "v1" {
		t.Errorf("item type %s %s, want v1 Pod", list.Items[0].GetAPIVersion(), list.Items[0].GetKind())
	}
}

func TestScratchReuse(t *testing.T) {
	// One Decoder, used for many inputs, some of them failing halfway.
	var d Decoder
	for range 3 {
		for _, tt := range objectCases {
			checkObject(t, &d, []byte(tt.json))
		}
		for _, tt := range listCases {
			checkList(t, &d, []byte(tt.json))
		}
		d.DropManagedFields = !d.DropManagedFields
	}
}

func TestNormalize(t *testing.T) {
	d := Decoder{DropManagedFields: true}
	decoded, err := d.Object([]byte(`{"metadata":{"name":"a"},"spec":{"image":"nginx"}}`))
	if err != nil {
		t.Fatal(err)
	}
	other, err := wantObject([]byte(`{"metadata":{"name":"a","managedFields":[]},"spec":{"image":"nginx"}}`), false)
	if err != nil {
		t.Fatal(err)
	}
	d.Normalize(other)
	if !equal(other, decoded) {
		t.Fatalf("normalized %#v, decoded %#v", other, decoded)
	}
	a, b := decoded["spec"].(map[string]any)["image"].(string), other["spec"].(map[string]any)["image"].(string)
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Error("Normalize does not intern as the decoder does")
	}
}

// addSmallCases seeds f with the inputs of objectCases and listCases shorter than 1000
// bytes.
func addSmallCases(f *testing.F) {
	for _, tt := range objectCases {
		if len(tt.json) < 1000 {
			f.Add([]byte(tt.json))
		}
	}
	for _, tt := range listCases {
		if len(tt.json) < 1000 {
			f.Add([]byte(tt.json))
		}
	}
}

// FuzzDecoder checks that Object and List fail where apimachinery fails, and decode
// what it decodes to the same value, apart from the managedFields they are asked to
// drop.
func FuzzDecoder(f *testing.F) {
	addSmallCases(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var d Decoder
		for _, drop := range []bool{false, true} {
			d.DropManagedFields = drop
			checkObject(t, &d, data)
			checkList(t, &d, data)
		}
	})
}
