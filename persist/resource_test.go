package persist

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestResourceKey(t *testing.T) {
	tests := []struct {
		key       string
		gvr       schema.GroupVersionResource
		qualifier string
	}{
		{"/v1/pods", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ""},
		{"apps/v1/deployments", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, ""},
		{"example.com/v1alpha1/widgets", schema.GroupVersionResource{Group: "example.com", Version: "v1alpha1", Resource: "widgets"}, ""},
		{"/v1/pods?ns=shop&spec=labels%3Dapp%253Dx", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "ns=shop&spec=labels%3Dapp%253Dx"},
		{"/v1/pods?a/b?c", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "a/b?c"},
	}
	for _, tt := range tests {
		if tt.qualifier == "" {
			if got := ResourceKeyFor(tt.gvr); string(got) != tt.key {
				t.Errorf("ResourceKeyFor(%v) = %q, want %q", tt.gvr, got, tt.key)
			}
		}
		key, err := ParseResourceKey(tt.key)
		if err != nil || string(key) != tt.key {
			t.Fatalf("ParseResourceKey(%q) = %q, %v", tt.key, key, err)
		}
		if got := key.GroupVersionResource(); got != tt.gvr {
			t.Errorf("%q.GroupVersionResource() = %v, want %v", tt.key, got, tt.gvr)
		}
		if got := key.Qualifier(); got != tt.qualifier {
			t.Errorf("%q.Qualifier() = %q, want %q", tt.key, got, tt.qualifier)
		}
	}
	for _, key := range []string{"", "pods", "v1/pods", "/v1/", "//pods", "a/b/c/d", "apps//deployments", "?/v1/pods"} {
		if _, err := ParseResourceKey(key); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseResourceKey(%q): got %v, want ErrInvalid", key, err)
		}
		if gvr := ResourceKey(key).GroupVersionResource(); !gvr.Empty() {
			t.Errorf("%q.GroupVersionResource() = %v for an invalid key", key, gvr)
		}
	}
}
