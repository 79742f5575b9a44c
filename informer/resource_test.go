package informer

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestValidateResources(t *testing.T) {
	keys := FieldNames{List: "resources", Name: "name", Namespaces: "namespaces", LabelSelector: "labelSelector", FieldSelector: "fieldSelector"}
	tests := []struct {
		name      string
		resources []Resource
		names     FieldNames
		// want are the problems: each error's Field, then its Err's message.
		want [][2]string
	}{
		{"none", nil, keys, nil},
		{"valid", []Resource{
			{Name: "pods", Namespaces: []string{"shop", "kube-system"}, LabelSelector: "app in (web, api),tier!=cache", FieldSelector: "status.phase=Running"},
			{Name: "deployments.apps", MetadataOnly: true},
			{Name: "widgets.v1alpha1.example.com"},
		}, keys, nil},
		{"a name twice", []Resource{{Name: "pods"}, {Name: "po"}, {Name: "pods", MetadataOnly: true}, {Name: "po"}}, GoFieldNames("Options.Resources"), [][2]string{
			{"Options.Resources[2].Name", `"pods" is already configured by Options.Resources[0]`},
			{"Options.Resources[3].Name", `"po" is already configured by Options.Resources[1]`},
		}},
		{"bad names", []Resource{{Name: ""}, {Name: "Pods"}, {Name: "Pods"}}, keys, [][2]string{
			{"resources[0].name", "invalid resource name: empty"},
			{"resources[1].name", `invalid resource name: "Pods" must be lower case`},
			{"resources[2].name", `invalid resource name: "Pods" must be lower case`},
		}},
		{"namespaces", []Resource{{Name: "pods", Namespaces: []string{"a", "B", "a", "", "B"}}}, keys, [][2]string{
			{"resources[0].namespaces[1]", `"B" is not a namespace name: `},
			{"resources[0].namespaces[2]", `"a" is already listed as resources[0].namespaces[0]`},
			{"resources[0].namespaces[3]", `"" is not a namespace name: `},
			{"resources[0].namespaces[4]", `"B" is already listed as resources[0].namespaces[1]`},
		}},
		{"selectors", []Resource{{Name: "pods", LabelSelector: "app in (web", FieldSelector: "metadata.name"}}, keys, [][2]string{
			{"resources[0].labelSelector", `"app in (web": `},
			{"resources[0].fieldSelector", `"metadata.name": `},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateResources(tt.resources, tt.names)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			joined, ok := err.(interface{ Unwrap() []error })
			if !ok {
				t.Fatalf("got %v, want joined errors", err)
			}
			errs := joined.Unwrap()
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, e := range errs {
				fe, ok := e.(*FieldError)
				if !ok {
					t.Fatalf("error %d is a %T, want a *FieldError", i, e)
				}
				if fe.Field != tt.want[i][0] || !strings.HasPrefix(fe.Err.Error(), tt.want[i][1]) {
					t.Errorf("error %d: %q: %q, want %q: %q...", i, fe.Field, fe.Err, tt.want[i][0], tt.want[i][1])
				}
				if fe.Error() != fe.Field+": "+fe.Err.Error() {
					t.Errorf("error %d reads %q", i, fe.Error())
				}
			}
		})
	}
	// A bad name is an ErrInvalidResource.
	if err := ValidateResources([]Resource{{Name: "pods/status"}}, keys); !errors.Is(err, ErrInvalidResource) {
		t.Errorf("got %v, want ErrInvalidResource", err)
	}
}

// TestSetValidatesResources: New and Reconfigure refuse the lists that ValidateResources
// refuses, and a refused Reconfigure changes nothing.
func TestSetValidatesResources(t *testing.T) {
	opts := Options{
		Cluster:   "down",
		Config:    &rest.Config{Host: "http://127.0.0.1:1"},
		Resources: []Resource{{Name: "pods"}, {Name: "pods", LabelSelector: "app=web"}},
		Sink:      nopSink{},
	}
	const dup = `Options.Resources[1].Name: "pods" is already configured by Options.Resources[0]`
	if _, err := New(opts); err == nil || err.Error() != dup {
		t.Errorf("New: %v, want %s", err, dup)
	}
	opts.Resources = []Resource{{Name: "pods"}, {Name: "configmaps"}}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	before := s.Status()
	err = s.Reconfigure(Options{Resources: []Resource{{Name: "secrets"}, {Name: "pods", LabelSelector: "app in (web"}, {Name: "secrets"}}, KeepManagedFields: true})
	if err == nil || !strings.Contains(err.Error(), "Options.Resources[1].LabelSelector: ") ||
		!strings.Contains(err.Error(), `Options.Resources[2].Name: "secrets" is already configured by Options.Resources[0]`) {
		t.Errorf("Reconfigure: %v, want both problems", err)
	}
	if after := s.Status(); !reflect.DeepEqual(after, before) {
		t.Errorf("after a refused Reconfigure the status is %+v, want %+v", after, before)
	}
	if got := s.options(); !reflect.DeepEqual(got.Resources, opts.Resources) || got.KeepManagedFields {
		t.Errorf("after a refused Reconfigure the options are %+v", got)
	}
}
