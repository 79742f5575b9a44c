package mcprovider

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/persist"
)

// fleetForms returns the object of data, JSON as an apiserver sends it, in the forms a
// fleet holds it: as the informers decode it into a plain fleet (jsondec), and as a
// compact fleet keeps it (the CBOR that jsondec writes while decoding, decoded by
// persist.Codec when read), with that CBOR. ok is false if jsondec refuses data.
func fleetForms(t testing.TB, data []byte) (plain, compact *unstructured.Unstructured, encoded []byte, ok bool) {
	t.Helper()
	var d jsondec.Decoder
	m, cbor, err := d.ObjectCBOR(data)
	if err != nil || m == nil {
		return nil, nil, nil, false
	}
	plain = &unstructured.Unstructured{Object: m}
	if cbor == nil { // a repeated key: the informer encodes the object instead
		if cbor, err = (persist.Codec{}).Encode(plain); err != nil {
			t.Fatalf("encoding %s: %v", data, err)
		}
	}
	obj, err := persist.Codec{}.Decode(cbor)
	if err != nil {
		t.Fatalf("decoding the CBOR of %s: %v", data, err)
	}
	return plain, obj.(*unstructured.Unstructured), cbor, true
}

// dictCodec is a Codec that compresses with a dictionary (persist.Codec with
// Dictionary), made of the encodings of a few large ConfigMaps on its first use.
var dictCodec = sync.OnceValue(func() persist.Codec {
	c := persist.Codec{Compress: true, Dictionary: true}.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "typedreads"}).(persist.Codec)
	for i := range 200 {
		cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": "n", "labels": map[string]any{"app": "x"}},
			"data":     map[string]any{"settings": strings.Repeat(fmt.Sprintf("option-%d=on; ", i%10), 40)}}}
		if _, err := c.Encode(cm); err != nil {
			panic(err)
		}
	}
	return c
})

// fromEncodings returns the typed reads of tt from encoded, the CBOR of an object, as
// a compact fleet holds it and as a compressed one does (persist.Codec with Compress;
// compressed or not, as the Codec decides; with a dictionary too), by form, each with
// its error.
func fromEncodings(t testing.TB, tt target, encoded []byte) map[string]runtime.Object {
	t.Helper()
	out := map[string]runtime.Object{}
	for form, codec := range map[string]persist.Codec{"encoded": {}, "compressed": {Compress: true}, "compressed-dict": dictCodec()} {
		tt.decoder = newEncodedDecoder(codec, scheme.Scheme)
		got, err := tt.newObject()
		if err != nil {
			t.Fatal(err)
		}
		if err := tt.fromEncoded(nil, codec.Shorten(encoded), got); err != nil {
			out[form] = nil
			continue
		}
		out[form] = got
	}
	return out
}

// typedTarget is the target of *corev1.T reads of kind.
func typedTarget(kind string) target {
	return target{gvk: schema.GroupVersionKind{Version: "v1", Kind: kind}, scheme: scheme.Scheme}
}

// TestTypedReadsEqualTheServers checks, on the corner cases of typed conversion, that a
// typed read of an object from a plain fleet and from a compact one equals the object
// that a typed client decodes from the same JSON (encoding/json with the API types,
// what client-go's JSON decoding does): integers and floats, quantities, times,
// int-or-strings, empty and null collections, base64 bytes, unknown fields.
func TestTypedReadsEqualTheServers(t *testing.T) {
	for _, tc := range []struct {
		name, kind, json string
	}{
		{"configmap", "ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","resourceVersion":"7","uid":"u-1","labels":{"app":"x"},"annotations":{"k":"v"}},"data":{"a":"1","b":""}}`},
		{"empty and null maps", "ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{},"annotations":null},"data":{},"binaryData":null}`},
		{"binary data as base64", "ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"binaryData":{"bin":"AAEC/w==","empty":""}}`},
		{"immutable and unknown fields", "ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","futureField":{"x":[1,2.5,"s",null,true]}},"immutable":true,"future":1.5e300}`},
		{"times", "ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","creationTimestamp":"2026-11-23T22:00:00Z","deletionTimestamp":"2026-11-23T22:00:01Z","deletionGracePeriodSeconds":30}}`},
		{"null time", "ConfigMap", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","creationTimestamp":null}}`},
		{"pod: quantities, int-or-strings, int32 and int64, floats", "Pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n","generation":9007199254740993},
			"spec":{"containers":[{"name":"c","image":"i","resources":{"limits":{"cpu":"500m","memory":"128Mi"},"requests":{"cpu":"0.25","memory":"1e3"}},
				"ports":[{"containerPort":8080,"protocol":"TCP"}],
				"livenessProbe":{"httpGet":{"path":"/","port":"http"},"periodSeconds":10},
				"readinessProbe":{"tcpSocket":{"port":8080}},"env":[],"volumeMounts":null}],
				"terminationGracePeriodSeconds":30,"activeDeadlineSeconds":9223372036854775807,
				"tolerations":[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],
				"overhead":{"cpu":"1.5"}},
			"status":{"phase":"Running","startTime":"2026-11-23T22:00:00Z","conditions":[{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-23T22:00:02Z"}],
				"containerStatuses":[{"name":"c","ready":true,"restartCount":2,"image":"i","imageID":"","state":{"running":{"startedAt":"2026-11-23T22:00:01Z"}}}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt := typedTarget(tc.kind)
			want, err := tt.newObject()
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.json), want); err != nil {
				t.Fatal(err)
			}
			plain, compact, encoded, ok := fleetForms(t, []byte(tc.json))
			if !ok {
				t.Fatalf("jsondec refused %s", tc.json)
			}
			for form, cached := range map[string]*unstructured.Unstructured{"plain": plain, "compact": compact} {
				got, err := tt.convert(cached, false)
				if err != nil {
					t.Fatalf("%s: %v", form, err)
				}
				if !equality.Semantic.DeepEqual(want, got) {
					t.Errorf("%s fleet:\n got %#v\nwant %#v", form, got, want)
				}
			}
			// Decoded from the encoding straight into the type, as a Get of a compact
			// fleet does, not by the conversion it falls back to.
			tt.decoder = newEncodedDecoder(persist.Codec{}, scheme.Scheme)
			direct, err := tt.newObject()
			if err != nil {
				t.Fatal(err)
			}
			if !tt.decoder.intoTyped(encoded, tt.gvk, direct) {
				t.Fatal("the CBOR serializer did not decode the encoding")
			}
			if !equality.Semantic.DeepEqual(want, direct) {
				t.Errorf("decoded by the CBOR serializer:\n got %#v\nwant %#v", direct, want)
			}
			for form, got := range fromEncodings(t, tt, encoded) {
				if got == nil {
					t.Fatalf("%s: the typed read failed", form)
				}
				if !equality.Semantic.DeepEqual(want, got) {
					t.Errorf("%s fleet, from the encoding:\n got %#v\nwant %#v", form, got, want)
				}
			}
		})
	}
}

// FuzzTypedReads checks that the typed read of an object is the same from a plain fleet
// and from a compact one, and, when a typed client decodes the same JSON, equal to
// what it decodes: a ConfigMap whose data, labels and binary data are the fuzzer's, and
// a Pod whose numeric and quantity fields are.
func FuzzTypedReads(f *testing.F) {
	f.Add("k", "v", "AAEC", int64(1), 0.5, "100m", true)
	f.Add("", "", "", int64(-1), 1e300, "1Gi", false)
	f.Add("ünï", "\u0000\"", "not base64", int64(1<<53+1), 1e-300, "1.5", true)
	f.Fuzz(func(t *testing.T, key, value, binary string, n int64, x float64, q string, b bool) {
		for _, tc := range []struct{ kind, json string }{
			{"ConfigMap", fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{%q:%q},"generation":%d},"data":{%q:%q},"binaryData":{"b":%q},"immutable":%t,"unknown":%g}`,
				key, value, n, key, value, binary, b, x)},
			{"Pod", fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":%q}},"ports":[{"containerPort":%d}]}],"activeDeadlineSeconds":%d,"overhead":{"x":%q}},"status":{"phase":%q}}`,
				q, n, n, q, value)},
		} {
			if !json.Valid([]byte(tc.json)) {
				continue
			}
			plain, compact, encoded, ok := fleetForms(t, []byte(tc.json))
			if !ok {
				continue
			}
			tt := typedTarget(tc.kind)
			fromPlain, errPlain := tt.convert(plain, false)
			fromCompact, errCompact := tt.convert(compact, false)
			if (errPlain == nil) != (errCompact == nil) {
				t.Fatalf("%s: plain fleet: %v, compact fleet: %v", tc.json, errPlain, errCompact)
			}
			for form, got := range fromEncodings(t, tt, encoded) {
				if (got == nil) != (errPlain != nil) {
					t.Fatalf("%s: plain fleet: %v, %s fleet from the encoding: %v", tc.json, errPlain, form, got)
				}
				if got != nil && !equality.Semantic.DeepEqual(runtime.Object(fromPlain), got) {
					t.Fatalf("%s:\nplain   %#v\n%s %#v", tc.json, fromPlain, form, got)
				}
			}
			if errPlain != nil {
				continue
			}
			if !equality.Semantic.DeepEqual(fromPlain, fromCompact) {
				t.Fatalf("%s:\nplain   %#v\ncompact %#v", tc.json, fromPlain, fromCompact)
			}
			want, err := tt.newObject()
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(tc.json), want); err != nil {
				continue // a typed client refuses it too; the fleet's read may not
			}
			if !equality.Semantic.DeepEqual(want, runtime.Object(fromPlain)) {
				t.Fatalf("%s:\nfleet %#v\nwant  %#v", tc.json, fromPlain, want)
			}
		}
	})
}

// TestFromEncodedFallsBack checks the reads that the CBOR serializer does not make: a
// value that the type holds only converted (a float in an integer field, which
// runtime.DefaultUnstructuredConverter converts) reads as the conversion gives it, and
// an object of another kind fails as the conversion fails, both leaving no half-decoded
// object behind.
func TestFromEncodedFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name, kind, json string
		wantErr          bool
	}{
		{"float in an integer field", "Pod", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"terminationGracePeriodSeconds":30.0,"containers":[{"name":"c"}]}}`, false},
		{"another kind", "Pod", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, compact, encoded, ok := fleetForms(t, []byte(tc.json))
			if !ok {
				t.Fatalf("jsondec refused %s", tc.json)
			}
			tt := typedTarget(tc.kind)
			tt.decoder = newEncodedDecoder(persist.Codec{}, scheme.Scheme)
			want, wantErr := tt.convert(compact, false)
			if (wantErr != nil) != tc.wantErr {
				t.Fatalf("conversion: %v, want an error: %t", wantErr, tc.wantErr)
			}
			got, err := tt.newObject()
			if err != nil {
				t.Fatal(err)
			}
			got.SetName("left over")
			if tt.decoder.intoTyped(encoded, tt.gvk, got) {
				t.Fatal("the CBOR serializer decoded it")
			}
			if got.GetName() != "" {
				t.Errorf("a failed decode left %q as the name, want a zero object", got.GetName())
			}
			err = tt.fromEncoded(nil, encoded, got)
			if (err != nil) != tc.wantErr {
				t.Fatalf("fromEncoded: %v, want an error: %t", err, tc.wantErr)
			}
			if err == nil && !equality.Semantic.DeepEqual(want, got) {
				t.Errorf("fromEncoded:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

// TestIntoTypedLeavesTheFleetsBytes reads, typed, the encodings of a compressed fleet of
// both forms in turn: one that S2 does not shorten, which the fleet holds as its plain
// CBOR and Expand returns as it is, and one that it does. The decoder keeps the scratch
// space that it expands a compressed encoding into; were the fleet's own bytes taken
// for it, expanding the next encoding would write into them.
func TestIntoTypedLeavesTheFleetsBytes(t *testing.T) {
	codec := persist.Codec{Compress: true}
	random := make([]byte, 3<<10)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"incompressible": base64.StdEncoding.EncodeToString(random),
		"compressible":   strings.Repeat("a", 2<<10),
	}
	encodings, held := map[string][]byte{}, map[string][]byte{}
	for name, v := range want {
		enc, err := codec.Encode(&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name}, "data": map[string]any{"v": v},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if shortened := len(enc) < len(v); shortened != (name == "compressible") {
			t.Fatalf("%s: %d bytes encoded for a value of %d; the test needs one encoding compressed and one not", name, len(enc), len(v))
		}
		encodings[name], held[name] = enc, bytes.Clone(enc)
	}
	tt := typedTarget("ConfigMap")
	tt.decoder = newEncodedDecoder(codec, scheme.Scheme)
	for range 3 {
		for _, name := range []string{"incompressible", "compressible"} {
			var cm corev1.ConfigMap
			if !tt.decoder.intoTyped(encodings[name], tt.gvk, &cm) {
				t.Fatalf("%s: not decoded", name)
			}
			if cm.Name != name || cm.Data["v"] != want[name] {
				t.Fatalf("%s: read %s with %d bytes that differ from the %d encoded", name, cm.Name, len(cm.Data["v"]), len(want[name]))
			}
		}
	}
	for name, enc := range encodings {
		if !bytes.Equal(enc, held[name]) {
			t.Errorf("%s: the encoding changed while it was read", name)
		}
	}
}

// BenchmarkGetTyped compares the two ways a typed Get reads a Pod that a compressed
// fleet holds encoded: decoded into a map, then converted by reflection
// (runtime.DefaultUnstructuredConverter), and decoded from the encoding straight into
// the type (encodedDecoder), which Get does.
func BenchmarkGetTyped(b *testing.B) {
	codec := persist.Codec{Compress: true}
	pod := aggregatetest.RealisticPod("ns", "pod-1", "7", map[string]string{"app": "web"})
	encoded, err := codec.Encode(pod)
	if err != nil {
		b.Fatal(err)
	}
	tt := typedTarget("Pod")
	tt.decoder = newEncodedDecoder(codec, scheme.Scheme)
	b.Run("decoded and converted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			obj, err := codec.Decode(encoded)
			if err != nil {
				b.Fatal(err)
			}
			if err := tt.into(obj, &corev1.Pod{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("from the encoding", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !tt.decoder.intoTyped(encoded, tt.gvk, &corev1.Pod{}) {
				b.Fatal("not decoded")
			}
		}
	})
}

// TestIntoTypedCopiesOutOfTheScratchSpace reads, typed, a compressed ConfigMap with
// binaryData, then other ones, which the decoder expands into the same scratch space: an
// object that kept a view of that space (a []byte field, a string) would change. It also
// checks that binaryData, base64 in the fleet's CBOR as in JSON, comes out as its bytes,
// the same as through the conversion from the decoded object.
func TestIntoTypedCopiesOutOfTheScratchSpace(t *testing.T) {
	codec := persist.Codec{Compress: true}
	raw := bytes.Repeat([]byte{0, 1, 2, 250}, 600)
	enc, err := codec.Encode(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata":   map[string]any{"name": "b"},
		"data":       map[string]any{"v": strings.Repeat("x", 2000)},
		"binaryData": map[string]any{"bin": base64.StdEncoding.EncodeToString(raw)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tt := typedTarget("ConfigMap")
	tt.decoder = newEncodedDecoder(codec, scheme.Scheme)
	var cm corev1.ConfigMap
	ok := tt.decoder.intoTyped(enc, tt.gvk, &cm)
	if !ok || !bytes.Equal(cm.BinaryData["bin"], raw) {
		t.Fatalf("intoTyped: decoded %t, binaryData of %d bytes, want the %d encoded", ok, len(cm.BinaryData["bin"]), len(raw))
	}
	var cm2 corev1.ConfigMap
	if err := tt.fromEncoded(nil, enc, &cm2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(cm2.BinaryData["bin"], raw) {
		t.Fatalf("fromEncoded: binaryData %q, want %d raw bytes", cm2.BinaryData["bin"][:20], len(raw))
	}
	other := bytes.Repeat([]byte{9, 9, 9, 9}, 600)
	enc2, err := codec.Encode(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata":   map[string]any{"name": "c"},
		"data":       map[string]any{"v": strings.Repeat("y", 2000)},
		"binaryData": map[string]any{"bin": base64.StdEncoding.EncodeToString(other)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var cm3 corev1.ConfigMap
		if !tt.decoder.intoTyped(enc2, tt.gvk, &cm3) {
			t.Fatal("not decoded")
		}
	}
	if !bytes.Equal(cm.BinaryData["bin"], raw) || cm.Data["v"] != strings.Repeat("x", 2000) {
		t.Fatal("the first object changed when the scratch space was reused")
	}
}
