package mcprovider

import (
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/persist"
)

// fleetForms returns the object of data, JSON as an apiserver sends it, in the forms a
// fleet holds it: as the informers decode it into a plain fleet (jsondec), and as a
// compact fleet keeps it (the CBOR that jsondec writes while decoding, decoded by
// persist.Codec when read). ok is false if jsondec refuses data.
func fleetForms(t testing.TB, data []byte) (plain, compact *unstructured.Unstructured, ok bool) {
	t.Helper()
	var d jsondec.Decoder
	m, cbor, err := d.ObjectCBOR(data)
	if err != nil || m == nil {
		return nil, nil, false
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
	return plain, obj.(*unstructured.Unstructured), true
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
			plain, compact, ok := fleetForms(t, []byte(tc.json))
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
			plain, compact, ok := fleetForms(t, []byte(tc.json))
			if !ok {
				continue
			}
			tt := typedTarget(tc.kind)
			fromPlain, errPlain := tt.convert(plain, false)
			fromCompact, errCompact := tt.convert(compact, false)
			if (errPlain == nil) != (errCompact == nil) {
				t.Fatalf("%s: plain fleet: %v, compact fleet: %v", tc.json, errPlain, errCompact)
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
