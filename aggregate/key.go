package aggregate

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// Key identifies one object in the fleet: the cluster it lives in, its namespace (empty
// for cluster-scoped objects) and its name. Key is comparable: use it as a map key or as
// a workqueue item. It does not name the resource; two resources can hold objects with
// equal keys.
type Key struct {
	Cluster   string
	Namespace string
	Name      string
}

// KeyFor returns the key of obj in cluster.
func KeyFor(cluster string, obj metav1.Object) Key {
	return Key{Cluster: cluster, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// String returns the key as cluster/namespace/name. A '/' or '%' in the cluster name is
// percent-encoded (%2F, %25) and nothing else is, so the string always splits into
// exactly three segments: an EKS context arn:aws:eks:eu-west-1:123:cluster/prod becomes
// arn:aws:eks:eu-west-1:123:cluster%2Fprod/ns/name. Cluster-scoped objects have an empty
// namespace segment, as in prod//node-1. ParseKey(k.String()) returns k for every valid
// key.
func (k Key) String() string {
	return escapeCluster(k.Cluster) + "/" + k.Namespace + "/" + k.Name
}

// ObjectName returns the name of the object within its cluster, in client-go's form.
func (k Key) ObjectName() cache.ObjectName {
	return cache.ObjectName{Namespace: k.Namespace, Name: k.Name}
}

// MetaNamespaceKey returns the key of the object within its cluster as
// cache.MetaNamespaceKeyFunc computes it: namespace/name, or name alone for a
// cluster-scoped object.
func (k Key) MetaNamespaceKey() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// validate reports whether k can be stored: a non-empty cluster and name, and no '/' in
// namespace or name, so that k.String() parses back to k.
func (k Key) validate() error {
	switch {
	case k.Cluster == "":
		return fmt.Errorf("key %q: empty cluster: %w", k.String(), ErrInvalidKey)
	case k.Name == "":
		return fmt.Errorf("key %q: empty name: %w", k.String(), ErrInvalidKey)
	case strings.IndexByte(k.Namespace, '/') >= 0:
		return fmt.Errorf("key %q: namespace %q contains '/': %w", k.String(), k.Namespace, ErrInvalidKey)
	case strings.IndexByte(k.Name, '/') >= 0:
		return fmt.Errorf("key %q: name %q contains '/': %w", k.String(), k.Name, ErrInvalidKey)
	}
	return nil
}

// ParseKey parses the string form of a key (see Key.String). It is strict: the string must
// have exactly three '/'-separated segments, the cluster and name segments must not be
// empty, and the only escapes allowed in the cluster segment are %2F and %25, so that
// ParseKey(s) succeeds exactly when ParseKey(s).String() == s. Errors wrap ErrInvalidKey.
func ParseKey(s string) (Key, error) {
	cluster, rest, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, invalidKey(s, "want cluster/namespace/name, found no '/'")
	}
	namespace, name, ok := strings.Cut(rest, "/")
	if !ok {
		return Key{}, invalidKey(s, "want cluster/namespace/name, found 2 segments")
	}
	if strings.IndexByte(name, '/') >= 0 {
		return Key{}, invalidKey(s, fmt.Sprintf("want cluster/namespace/name, found %d segments (namespace and name cannot contain '/')", strings.Count(s, "/")+1))
	}
	if cluster == "" {
		return Key{}, invalidKey(s, "empty cluster segment")
	}
	if name == "" {
		return Key{}, invalidKey(s, "empty name segment")
	}
	cluster, err := unescapeCluster(cluster)
	if err != nil {
		return Key{}, invalidKey(s, err.Error())
	}
	return Key{Cluster: cluster, Namespace: namespace, Name: name}, nil
}

// ParseMetaNamespaceKey returns the key in cluster of the object that client-go knows by
// key, as computed by cache.MetaNamespaceKeyFunc (namespace/name, or name alone).
// Errors wrap ErrInvalidKey.
func ParseMetaNamespaceKey(cluster, key string) (Key, error) {
	namespace, name, ok := splitMetaNamespaceKey(key)
	if !ok {
		return Key{}, fmt.Errorf("client-go key %q: want namespace/name or name: %w", key, ErrInvalidKey)
	}
	k := Key{Cluster: cluster, Namespace: namespace, Name: name}
	if err := k.validate(); err != nil {
		return Key{}, err
	}
	return k, nil
}

// splitMetaNamespaceKey splits a key in the exact form cache.MetaNamespaceKeyFunc
// produces, without allocating. Unlike cache.SplitMetaNamespaceKey it rejects "/name",
// which no client-go store would find either.
func splitMetaNamespaceKey(key string) (namespace, name string, ok bool) {
	namespace, name, found := strings.Cut(key, "/")
	if !found {
		return "", key, true
	}
	if namespace == "" || strings.IndexByte(name, '/') >= 0 {
		return "", "", false
	}
	return namespace, name, true
}

func invalidKey(s, detail string) error {
	return fmt.Errorf("parse key %q: %s: %w", s, detail, ErrInvalidKey)
}

// escapeCluster percent-encodes '/' and '%' in a cluster name.
func escapeCluster(c string) string {
	if !strings.ContainsAny(c, "/%") {
		return c
	}
	var b strings.Builder
	b.Grow(len(c) + 8)
	for i := 0; i < len(c); i++ {
		switch c[i] {
		case '/':
			b.WriteString("%2F")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c[i])
		}
	}
	return b.String()
}

// unescapeCluster reverses escapeCluster. It accepts only the escapes escapeCluster
// writes, so every cluster name has exactly one encoding.
func unescapeCluster(s string) (string, error) {
	if strings.IndexByte(s, '%') < 0 {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		switch esc := s[i:min(i+3, len(s))]; esc {
		case "%2F":
			b.WriteByte('/')
		case "%25":
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("cluster segment has escape %q at byte %d; only %%2F and %%25 are allowed", esc, i)
		}
		i += 2
	}
	return b.String(), nil
}
