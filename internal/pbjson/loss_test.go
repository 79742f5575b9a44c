package pbjson

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Types of no API, for TestLosses.
type (
	nestedObject struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	}
	holdsObjects struct {
		metav1.TypeMeta `json:",inline"`
		Spec            holdsObjectsSpec `json:"spec" protobuf:"bytes,1,opt,name=spec"`
	}
	holdsObjectsSpec struct {
		One      *nestedObject           `json:"one,omitempty" protobuf:"bytes,1,opt,name=one"`
		Many     []nestedObject          `json:"many,omitempty" protobuf:"bytes,2,rep,name=many"`
		ByName   map[string]nestedObject `json:"byName,omitempty" protobuf:"bytes,3,rep,name=byName"`
		Deeper   []map[string]*wrapper   `json:"deeper,omitempty" protobuf:"bytes,4,rep,name=deeper"`
		Untagged string                  `json:"untagged,omitempty"`
		NoJSON   string
		Skipped  string `json:"-"`
	}
	tagged struct {
		Name   string            `json:"name" protobuf:"bytes,1,opt,name=name"`
		Times  []metav1.Time     `json:"times,omitempty" protobuf:"bytes,2,rep,name=times"`
		Labels map[string]string `json:"labels,omitempty" protobuf:"bytes,3,rep,name=labels"`
		Self   *tagged           `json:"self,omitempty" protobuf:"bytes,4,opt,name=self"`
	}
	wrapper struct {
		Tagged tagged        `json:"tagged" protobuf:"bytes,1,opt,name=tagged"`
		Object *nestedObject `json:"object,omitempty" protobuf:"bytes,2,opt,name=object"`
	}
	allTagged struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
		Spec              []tagged `json:"spec,omitempty" protobuf:"bytes,2,rep,name=spec"`
	}
	// cyclic holds cycA, which holds cycB, which holds cycA: cycB is met first inside
	// cycA's walk, where the cycle is cut, and again from cyclic.
	cyclic struct {
		metav1.TypeMeta `json:",inline"`
		X               cycA `json:"x" protobuf:"bytes,1,opt,name=x"`
		Z               cycB `json:"z" protobuf:"bytes,2,opt,name=z"`
	}
	cycA struct {
		metav1.TypeMeta `json:",inline"`
		B               *cycB `json:"b,omitempty" protobuf:"bytes,1,opt,name=b"`
	}
	cycB struct {
		A *cycA `json:"a,omitempty" protobuf:"bytes,1,opt,name=a"`
	}
	allTaggedList struct {
		metav1.TypeMeta `json:",inline"`
		metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
		Items           []allTagged `json:"items" protobuf:"bytes,2,rep,name=items"`
	}
)

func TestLosses(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		want []string
	}{
		{"StatefulSet", reflect.TypeFor[appsv1.StatefulSet](), []string{"spec.volumeClaimTemplates[].apiVersion", "spec.volumeClaimTemplates[].kind"}},
		{"StatefulSetList", reflect.TypeFor[*appsv1.StatefulSetList](), []string{"items[].spec.volumeClaimTemplates[].apiVersion", "items[].spec.volumeClaimTemplates[].kind"}},
		{"nested TypeMeta, untagged fields", reflect.TypeFor[holdsObjects](), []string{
			"spec.NoJSON", "spec.byName{}.apiVersion", "spec.byName{}.kind",
			"spec.deeper[]{}.object.apiVersion", "spec.deeper[]{}.object.kind",
			"spec.many[].apiVersion", "spec.many[].kind",
			"spec.one.apiVersion", "spec.one.kind", "spec.untagged",
		}},
		{"all tagged, recursive", reflect.TypeFor[allTagged](), nil},
		{"mutually recursive", reflect.TypeFor[cyclic](), []string{"x.apiVersion", "x.kind", "z.a.apiVersion", "z.a.kind"}},
		{"the items of a list", reflect.TypeFor[allTaggedList](), nil},
		{"Pod", reflect.TypeFor[corev1.Pod](), nil},
		{"PersistentVolumeClaim", reflect.TypeFor[corev1.PersistentVolumeClaim](), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Losses(tc.typ); !slices.Equal(got, tc.want) {
				t.Errorf("Losses:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestLossy pins the kinds of client-go's scheme whose protobuf carries less than their
// JSON (docs/design.md lists them), and requires that none of them is Supported: their
// informers ask for JSON. A new version of k8s.io/api that changes the set fails here.
func TestLossy(t *testing.T) {
	want := []string{
		"apps/v1, Kind=StatefulSet", "apps/v1, Kind=StatefulSetList",
		"apps/v1beta1, Kind=StatefulSet", "apps/v1beta1, Kind=StatefulSetList",
		"apps/v1beta2, Kind=StatefulSet", "apps/v1beta2, Kind=StatefulSetList",
		"policy/v1, Kind=Eviction", "policy/v1beta1, Kind=Eviction",
		"/v1, Kind=APIGroupList",
	}
	var got []string
	for gvk, l := range Lossy() {
		if Supported(gvk) {
			t.Errorf("%v loses %q but is Supported", gvk, l)
		}
		if gvk.Version == runtime.APIVersionInternal {
			// The watch.Event of every group's internal version, whose fields have no
			// tags at all: never on the wire.
			if gvk.Kind != "WatchEvent" {
				t.Errorf("%v: lossy internal kind", gvk)
			}
			continue
		}
		got = append(got, gvk.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("lossy kinds:\n got %s\nwant %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	for _, gvk := range []schema.GroupVersionKind{
		appsv1.SchemeGroupVersion.WithKind("Deployment"), corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim"),
	} {
		if _, ok := Lossy()[gvk]; ok || !Supported(gvk) {
			t.Errorf("%v: lossy %v, supported %v", gvk, ok, Supported(gvk))
		}
	}
	for gvk, l := range Lossy() {
		if gvk.Version != runtime.APIVersionInternal {
			t.Logf("%v: %s", gvk, strings.Join(l, ", "))
		}
	}
}
