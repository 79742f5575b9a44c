package informer

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Resource configures one resource of a Set.
type Resource struct {
	// Name is a kubectl-style resource name: "pods", "deployments.apps",
	// "widgets.v1alpha1.example.com", or a short name such as "deploy". It is resolved
	// through each cluster's own discovery.
	Name string
	// Namespaces limits the informer to these namespaces; empty means all. It is ignored
	// for cluster-scoped resources.
	Namespaces []string
	// LabelSelector and FieldSelector filter what is listed and watched, as in
	// metav1.ListOptions. Empty means everything.
	LabelSelector string
	FieldSelector string
	// MetadataOnly caches only the objects' metadata (metav1.PartialObjectMetadata),
	// which costs a fraction of the memory of full objects.
	MetadataOnly bool
}

// ValidateName checks that name has the form of a kubectl resource argument:
// resource[.version][.group], each part a DNS label or subdomain. It does not ask any
// cluster whether the resource exists.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrInvalidResource)
	}
	if strings.ToLower(name) != name {
		return fmt.Errorf("%w: %q must be lower case", ErrInvalidResource, name)
	}
	res, rest, dotted := strings.Cut(name, ".")
	if errs := validation.IsDNS1035Label(res); len(errs) > 0 && validation.IsDNS1123Label(res) != nil {
		return fmt.Errorf("%w: %q: %s", ErrInvalidResource, name, strings.Join(errs, "; "))
	}
	if dotted {
		if errs := validation.IsDNS1123Subdomain(rest); len(errs) > 0 {
			return fmt.Errorf("%w: %q: %s", ErrInvalidResource, name, strings.Join(errs, "; "))
		}
	}
	return nil
}

// Mapping is a configured resource as one cluster serves it.
type Mapping struct {
	Resource   schema.GroupVersionResource
	Kind       schema.GroupVersionKind
	Namespaced bool
}

// resolve maps a kubectl-style name to the resource a cluster serves, the way kubectl
// does: a fully specified resource.version.group first, then resource.group with the
// preferred version.
func resolve(mapper meta.RESTMapper, name string) (Mapping, error) {
	var gvk schema.GroupVersionKind
	full, gr := schema.ParseResourceArg(name)
	if full != nil {
		if k, err := mapper.KindFor(*full); err == nil {
			gvk = k
		}
	}
	if gvk.Empty() {
		k, err := mapper.KindFor(gr.WithVersion(""))
		if err != nil {
			if meta.IsNoMatchError(err) {
				return Mapping{}, fmt.Errorf("%s: %w", name, ErrResourceNotFound)
			}
			return Mapping{}, fmt.Errorf("resolving %s: %w", name, err)
		}
		gvk = k
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		if meta.IsNoMatchError(err) {
			return Mapping{}, fmt.Errorf("%s: %w", name, ErrResourceNotFound)
		}
		return Mapping{}, fmt.Errorf("resolving %s: %w", name, err)
	}
	return Mapping{
		Resource:   m.Resource,
		Kind:       m.GroupVersionKind,
		Namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace,
	}, nil
}
