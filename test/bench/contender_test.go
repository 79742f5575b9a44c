package main

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func TestStripManagedFields(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "bench-controller", Operation: metav1.ManagedFieldsOperationApply}}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod"}}
	u.SetName("p")
	u.SetManagedFields(managed)
	for _, tc := range []struct {
		name string
		obj  any
	}{
		{"typed", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: managed}}},
		{"unstructured", u},
		{"metadata", &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: managed}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stripManagedFields(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			a, err := meta.Accessor(got)
			if err != nil {
				t.Fatal(err)
			}
			if a.GetManagedFields() != nil || a.GetName() != "p" {
				t.Errorf("got name %q, managedFields %v; want p without managedFields", a.GetName(), a.GetManagedFields())
			}
		})
	}
	t.Run("tombstone", func(t *testing.T) {
		in := cache.DeletedFinalStateUnknown{Key: "ns/p"}
		got, err := stripManagedFields(in)
		if err != nil || got != in {
			t.Errorf("got %v, %v; want the tombstone unchanged", got, err)
		}
	})
}

func TestParseResources(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      bool
	}{
		{in: "", want: "pods,configmaps"},
		{in: "pods", want: "pods"},
		{in: "configmaps,pods", want: "pods,configmaps"},
		{in: "secrets", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			gvrs, err := parseResources(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("parseResources(%q) = %v, want an error", tc.in, gvrs)
				}
				return
			}
			var names []string
			for _, g := range gvrs {
				names = append(names, g.Resource)
			}
			if err != nil || strings.Join(names, ",") != tc.want {
				t.Errorf("parseResources(%q) = %v, %v; want %s", tc.in, names, err, tc.want)
			}
		})
	}
}
