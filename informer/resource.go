package informer

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
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

// FieldNames name the fields of a list of Resources in the errors of
// ValidateResources, as the caller's users know them: the fields of a Go options struct
// for a library, the keys of a config file for a daemon.
type FieldNames struct {
	// List names the list, such as "Options.Resources" or "resources".
	List string
	// Name, Namespaces, LabelSelector and FieldSelector name the fields of one item.
	Name, Namespaces, LabelSelector, FieldSelector string
}

// GoFieldNames names the fields of a list of Resources after their Go names, under
// list: "Options.Resources[2].LabelSelector".
func GoFieldNames(list string) FieldNames {
	return FieldNames{List: list, Name: "Name", Namespaces: "Namespaces", LabelSelector: "LabelSelector", FieldSelector: "FieldSelector"}
}

// FieldError is one problem that ValidateResources found in a list of Resources.
type FieldError struct {
	// Field is the path of the field, as FieldNames name it, with list items by index:
	// "Options.Resources[2].Name", "resources[0].namespaces[1]".
	Field string
	// Err describes the problem; it does not repeat Field. A bad name matches
	// ErrInvalidResource.
	Err error
}

// Error reads like "Options.Resources[2].Name: <problem>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e *FieldError) Unwrap() error { return e.Err }

// ValidateResources checks a list of Resources without asking any cluster: every name is
// valid (ValidateName) and configured once, every namespace is a namespace name listed
// once in its item, and the selectors parse. It reports every problem at once, in the
// order of the list, each a *FieldError named by names, joined with errors.Join; nil if
// there is none. An empty list is valid here: whether it may be empty, and what it then
// means, is the caller's rule.
//
// It is the one validation of resources: New and Set.Reconfigure, the Manager of package
// fleetwatch, and the daemon's config all call it, so that a list that one of them
// accepts is accepted by all.
func ValidateResources(resources []Resource, names FieldNames) error {
	var errs []error
	add := func(field string, err error) {
		errs = append(errs, &FieldError{Field: field, Err: err})
	}
	first := map[string]int{}
	for i, r := range resources {
		item := indexed(names.List, i)
		if err := ValidateName(r.Name); err != nil {
			add(item+"."+names.Name, err)
		} else if j, dup := first[r.Name]; dup {
			add(item+"."+names.Name, fmt.Errorf("%q is already configured by %s", r.Name, indexed(names.List, j)))
		} else {
			first[r.Name] = i
		}
		namespaces := item + "." + names.Namespaces
		firstNS := map[string]int{}
		for k, ns := range r.Namespaces {
			if j, dup := firstNS[ns]; dup {
				add(indexed(namespaces, k), fmt.Errorf("%q is already listed as %s", ns, indexed(namespaces, j)))
				continue
			}
			firstNS[ns] = k
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				add(indexed(namespaces, k), fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
			}
		}
		if _, err := labels.Parse(r.LabelSelector); err != nil {
			add(item+"."+names.LabelSelector, fmt.Errorf("%q: %w", r.LabelSelector, err))
		}
		if _, err := fields.ParseSelector(r.FieldSelector); err != nil {
			add(item+"."+names.FieldSelector, fmt.Errorf("%q: %w", r.FieldSelector, err))
		}
	}
	return errors.Join(errs...)
}

func indexed(list string, i int) string { return fmt.Sprintf("%s[%d]", list, i) }

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
