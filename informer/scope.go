package informer

import (
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scope is what one informer of a Set watches: one resource, in one namespace or in all,
// with a Spec that says which objects it holds and in what shape. A Set runs one informer
// per namespace configured for a resource, all writing to the resource's Store, each
// with its own resourceVersion.
type Scope struct {
	// Resource is the resource as the cluster serves it.
	Resource schema.GroupVersionResource
	// Namespace is the watched namespace; empty for all namespaces and for
	// cluster-scoped resources.
	Namespace string
	// Spec encodes the label and field selectors, whether objects are metadata-only, and
	// the transforms. State saved under one Spec must not seed an informer of another:
	// it could hold objects that the new selectors exclude, and no watch event would
	// ever remove them.
	Spec string
}

// String returns the scope as one string, such as
// "apps/v1/deployments?ns=shop&spec=...", that ParseScope reads back. The core group is
// empty: "/v1/pods".
func (s Scope) String() string {
	q := url.Values{}
	if s.Namespace != "" {
		q.Set("ns", s.Namespace)
	}
	if s.Spec != "" {
		q.Set("spec", s.Spec)
	}
	out := s.Resource.Group + "/" + s.Resource.Version + "/" + s.Resource.Resource
	if len(q) > 0 {
		out += "?" + q.Encode()
	}
	return out
}

// HoldsSecretValues reports whether the informer of s keeps the values of Secrets: s
// is of Secrets, and its Spec was made with Options.KeepSecretData.
func (s Scope) HoldsSecretValues() bool {
	q, err := url.ParseQuery(s.Spec)
	return isSecrets(s.Resource) && (err != nil || q.Get("secretData") == "true")
}

// ParseScope parses the form of Scope.String.
func ParseScope(s string) (Scope, error) {
	path, query, _ := strings.Cut(s, "?")
	parts := strings.Split(path, "/")
	if len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return Scope{}, fmt.Errorf("scope %q: want group/version/resource[?ns=...&spec=...]", s)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Scope{}, fmt.Errorf("scope %q: %w", s, err)
	}
	return Scope{
		Resource:  schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]},
		Namespace: q.Get("ns"),
		Spec:      q.Get("spec"),
	}, nil
}

// Spec returns the Spec of the informers of r in a Set configured by o. Saved state of
// another Spec does not seed them: it may hold objects that they would not list, or
// objects in another form (with the values of Secrets that they drop, for one).
func (o *Options) Spec(r Resource) string {
	q := url.Values{}
	if r.LabelSelector != "" {
		q.Set("labels", r.LabelSelector)
	}
	if r.FieldSelector != "" {
		q.Set("fields", r.FieldSelector)
	}
	if r.MetadataOnly {
		q.Set("metadataOnly", "true")
	}
	if o.KeepManagedFields {
		q.Set("managedFields", "true")
	}
	if o.KeepSecretData {
		q.Set("secretData", "true")
	}
	if o.TransformID != "" {
		q.Set("transform", o.TransformID)
	}
	return q.Encode()
}
