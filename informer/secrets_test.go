package informer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/internal/wire"
)

var secretsMapping = Mapping{Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, Namespaced: true, Kind: schema.GroupVersionKind{Version: "v1", Kind: "Secret"}}

// secretValue is the value of the Secret of secretJSON, in data (base64) and in the
// last-applied annotation (stringData, as kubectl apply keeps it).
const secretValue = "s3cr3t-v4lue-0f-th3-test"

// secretJSON is a Secret as the API server sends it after `kubectl apply` of a
// manifest with stringData.
var secretJSON = []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"db","namespace":"shop","resourceVersion":"7","uid":"u1",` +
	`"labels":{"app":"db"},"annotations":{"team":"payments","` + LastAppliedAnnotation + `":` +
	string(mustJSON(`{"apiVersion":"v1","kind":"Secret","metadata":{"annotations":{"team":"payments"},"name":"db","namespace":"shop"},"stringData":{"password":"`+secretValue+`"}}`+"\n")) + `},` +
	`"managedFields":[{"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:password":{}},"f:metadata":{"f:annotations":{".":{},"f:` + LastAppliedAnnotation + `":{},"f:team":{}}},"f:type":{}}}]},` +
	`"data":{"password":"` + base64.StdEncoding.EncodeToString([]byte(secretValue)) + `"},"type":"Opaque"}`)

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}

// holdsSecretValue reports whether the JSON of obj holds secretValue, plain or base64.
func holdsSecretValue(t *testing.T, obj any) bool {
	t.Helper()
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(data), secretValue) || strings.Contains(string(data), base64.StdEncoding.EncodeToString([]byte(secretValue)))
}

func TestTransformDropsSecretValues(t *testing.T) {
	decoded := func(t *testing.T) any {
		obj, _, err := unstructured.UnstructuredJSONScheme.Decode(secretJSON, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	encoded := func(t *testing.T) any { return encodedObject(t, secretJSON) }
	metadataOnly := func(t *testing.T) any {
		u := decoded(t).(*unstructured.Unstructured)
		p := &metav1.PartialObjectMetadata{}
		if err := runtimeFromUnstructured(u.Object["metadata"], &p.ObjectMeta); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		in   func(*testing.T) any
		opts Options
		// keeps says that the values stay.
		keeps bool
	}{
		{"decoded", decoded, Options{}, false},
		{"decoded with managedFields kept", decoded, Options{KeepManagedFields: true}, false},
		{"decoded, values kept", decoded, Options{KeepSecretData: true}, true},
		{"watched with its encoding", encoded, Options{}, false},
		{"watched with its encoding, values kept", encoded, Options{KeepSecretData: true}, true},
		{"metadata-only", metadataOnly, Options{}, false},
		{"metadata-only, values kept", metadataOnly, Options{KeepSecretData: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in(t)
			if !holdsSecretValue(t, in) {
				t.Fatal("the test Secret holds no value")
			}
			out, err := transform(tt.opts, secretsMapping, cache.NewStore(cache.MetaNamespaceKeyFunc), false)(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := holdsSecretValue(t, out); got != tt.keeps {
				t.Fatalf("the transformed Secret holds its value: %v, want %v", got, tt.keeps)
			}
			if tt.keeps {
				return
			}
			if _, ok := out.(*wire.EncodedObject); ok {
				t.Error("a Secret without its values kept the encoding of the values")
			}
			var ann map[string]string
			switch o := out.(type) {
			case *unstructured.Unstructured:
				ann = o.GetAnnotations()
				if _, found, _ := unstructured.NestedFieldNoCopy(o.Object, "data"); found {
					t.Error("data kept")
				}
			case *metav1.PartialObjectMetadata:
				ann = o.Annotations
			}
			if want := map[string]string{"team": "payments"}; !reflect.DeepEqual(ann, want) {
				t.Errorf("annotations %v, want %v", ann, want)
			}
		})
	}
}

func runtimeFromUnstructured(in any, out *metav1.ObjectMeta) error {
	data, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, out)
}

// TestDropSecretValuesOfAnnotationOnly: an annotations map that held only the
// last-applied annotation goes, rather than stay empty.
func TestDropSecretValuesOfAnnotationOnly(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "a", "annotations": map[string]any{LastAppliedAnnotation: "{}"}},
		"data":     map[string]any{"k": "dg=="},
	}}
	dropSecretValues(u)
	if want := map[string]any{"metadata": map[string]any{"name": "a"}}; !reflect.DeepEqual(u.Object, want) {
		t.Errorf("got %v, want %v", u.Object, want)
	}
	p := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{LastAppliedAnnotation: "{}"}}}
	dropSecretValues(p)
	if p.Annotations != nil {
		t.Errorf("annotations %v left", p.Annotations)
	}
}

// TestQuietContext checks that the requests of an informer of Secrets do not log at the
// level at which client-go logs response bodies, and log everything else as before.
func TestQuietContext(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 10})
	ctx := quietContext(klog.NewContext(context.Background(), logger))
	quiet := klog.FromContext(ctx).WithName("rest").WithValues("cluster", "prod")

	if quiet.V(maxSecretRequestLogLevel + 1).Enabled() {
		t.Error("level 8 is enabled")
	}
	quiet.V(8).Info("Response Body", "body", secretValue)
	quiet.V(10).WithCallDepth(2).Info("Response Body", "body", secretValue)
	quiet.V(7).Info("at 7")
	quiet.Info("at 0")
	quiet.V(9).Error(context.Canceled, "an error")
	got := strings.Join(lines, "\n")
	if strings.Contains(got, secretValue) {
		t.Errorf("a body was logged:\n%s", got)
	}
	for _, want := range []string{`"msg"="at 7"`, `"msg"="at 0"`, `"msg"="an error"`, `"cluster"="prod"`} {
		if !strings.Contains(got, want) {
			t.Errorf("%s not logged:\n%s", want, got)
		}
	}
	if !logger.V(8).Enabled() {
		t.Error("the logger of the context was changed")
	}
}
