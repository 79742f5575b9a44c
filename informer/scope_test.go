package informer

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestScopeRoundTrip(t *testing.T) {
	for _, s := range []Scope{
		{Resource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}},
		{Resource: schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, Namespace: "shop"},
		{Resource: schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "widgets"}, Namespace: "a", Spec: "labels=app+in+%28a%2Cb%29&metadataOnly=true"},
	} {
		got, err := ParseScope(s.String())
		if err != nil || got != s {
			t.Errorf("ParseScope(%q) = %+v, %v; want %+v", s.String(), got, err, s)
		}
	}
	for _, bad := range []string{"", "pods", "/v1", "a/b/c/d", "/v1/pods?%zz"} {
		if _, err := ParseScope(bad); err == nil {
			t.Errorf("ParseScope(%q) succeeded", bad)
		}
	}
}

func FuzzParseScope(f *testing.F) {
	f.Add("/v1/pods")
	f.Add("apps/v1/deployments?ns=shop&spec=labels%3Dapp")
	f.Fuzz(func(t *testing.T, s string) {
		sc, err := ParseScope(s)
		if err != nil {
			return
		}
		again, err := ParseScope(sc.String())
		if err != nil || again != sc {
			t.Fatalf("ParseScope(%q) = %+v; round trip gives %+v, %v", s, sc, again, err)
		}
	})
}

func TestScopeHoldsSecretValues(t *testing.T) {
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	r := Resource{Name: "secrets"}
	tests := []struct {
		name  string
		scope Scope
		want  bool
	}{
		{"values dropped", Scope{Resource: secrets, Spec: (&Options{}).Spec(r)}, false},
		{"values kept", Scope{Resource: secrets, Spec: (&Options{KeepSecretData: true}).Spec(r)}, true},
		{"metadata-only, values kept", Scope{Resource: secrets, Spec: (&Options{KeepSecretData: true}).Spec(Resource{Name: "secrets", MetadataOnly: true})}, true},
		{"not Secrets", Scope{Resource: schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "secrets"}, Spec: (&Options{KeepSecretData: true}).Spec(r)}, false},
		{"a Spec that does not parse", Scope{Resource: secrets, Spec: "%zz"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.scope.HoldsSecretValues(); got != tt.want {
				t.Errorf("HoldsSecretValues of %s = %v, want %v", tt.scope, got, tt.want)
			}
		})
	}
}
