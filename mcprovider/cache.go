package mcprovider

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// clusterCache is the controller-runtime cache of one cluster: a view of the fleet's
// objects of that cluster. It holds nothing of its own.
//
// Get and List return objects that the caller owns: a typed object is a deep copy of the
// one that the Provider's memo keeps for the version of the cached object (aggregate.TypedMemo),
// or else converted from the cached one through the scheme, which the memo then keeps;
// an unstructured one is deep-copied. UnsafeDisableDeepCopy changes nothing. The
// informers it gives are handlers of the fleet limited to the cluster (see
// clusterInformer), whose typed events fill the memo too.
type clusterCache struct {
	p      *Provider
	name   string
	member *member
}

var _ cache.Cache = (*clusterCache)(nil)

// resolve returns the target and resource of obj, an object or a list.
func (c *clusterCache) resolve(obj runtime.Object) (target, *meta.RESTMapping, error) {
	gvk, err := apiutil.GVKForObject(obj, c.p.scheme)
	if err != nil {
		return target{}, nil, err
	}
	t, err := newTarget(obj, gvk, c.p.scheme, c.p.decoder)
	if err != nil {
		return target{}, nil, err
	}
	t.memo = c.p.memo
	m, err := c.resolveKind(t.gvk)
	return t, m, err
}

// resolveKind returns the mapping of gvk, or cache.ErrResourceNotCached.
func (c *clusterCache) resolveKind(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m := c.p.mapper.mapping(gvk)
	if m == nil {
		return nil, &cache.ErrResourceNotCached{GVK: gvk}
	}
	return m, nil
}

// Get reads the object key of the cluster into obj, or returns a NotFound error as
// controller-runtime's cache does.
func (c *clusterCache) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	t, m, err := c.resolve(obj)
	if err != nil {
		return err
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		key.Namespace = ""
	}
	ix, k := c.p.fleet.Indexer(m.Resource), aggregate.Key{Cluster: c.name, Namespace: key.Namespace, Name: key.Name}
	var held aggregate.Held
	var ok bool
	if t.form == formTyped {
		// As the fleet holds it, with its Version: a typed read copies the object that the
		// memo keeps for that version, or decodes the encoding of a compact fleet straight
		// into obj, without the map that Get would decode (and keep among the fleet's hot
		// objects).
		held, ok = ix.GetHeld(k)
	} else {
		held.Object, ok = ix.Get(k)
	}
	if !ok {
		// The kind as the resource, as controller-runtime's cache has it.
		return apierrors.NewNotFound(schema.GroupResource{Group: t.gvk.Group, Resource: t.gvk.Kind}, key.Name)
	}
	return t.read(held, obj)
}

// List reads the objects of the cluster that opts select into list: in a namespace, by
// labels, and by indexed fields (exact matches only, as in controller-runtime's cache),
// at most Limit of them. Continue is not supported.
func (c *clusterCache) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	t, m, err := c.resolve(list)
	if err != nil {
		return err
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	if o.Continue != "" {
		return errors.New("continue list option is not supported by the cache")
	}
	namespace := o.Namespace
	if m.Scope.Name() == meta.RESTScopeNameRoot {
		namespace = ""
	}
	selector := o.LabelSelector
	if selector == nil {
		selector = labels.Everything()
	}
	// The objects come as the fleet holds them, so that a typed list of a compact fleet
	// decodes each encoding straight into the Go type (target.fromEncoded).
	var held []aggregate.Held
	filter := false
	if o.FieldSelector != nil {
		held, err = c.byFields(m.Resource, o.FieldSelector.Requirements(), namespace)
		filter = !selector.Empty()
	} else {
		// The fleet's label index narrows the objects of the cluster or namespace.
		held = c.p.fleet.Indexer(m.Resource).SelectEncoded(c.name, namespace, selector)
	}
	if err != nil {
		return err
	}
	keep := func(item client.Object) bool { return !filter || selector.Matches(labels.Set(item.GetLabels())) }
	if err := t.fill(list, held, o.Limit, keep); err != nil {
		return err
	}
	list.SetContinue("continue-not-supported")
	return nil
}

// byFields returns the objects of the cluster in namespace (every namespace if empty)
// that match every requirement, each an exact match of an indexed field, as the fleet
// holds them (aggregate.Indexer.GetHeld).
func (c *clusterCache) byFields(gvr schema.GroupVersionResource, reqs fields.Requirements, namespace string) ([]aggregate.Held, error) {
	if len(reqs) == 0 {
		return nil, errors.New("non-exact field matches are not supported by the cache")
	}
	ix := c.p.fleet.Indexer(gvr)
	var keys map[aggregate.Key]bool
	for _, r := range reqs {
		if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
			return nil, errors.New("non-exact field matches are not supported by the cache")
		}
		found, err := ix.IndexKeys(indexName(r.Field), indexValue(namespace, r.Value))
		if err != nil {
			if errors.Is(err, aggregate.ErrUnknownIndex) {
				return nil, fmt.Errorf("index with name %s does not exist", indexName(r.Field))
			}
			return nil, err
		}
		next := map[aggregate.Key]bool{}
		for _, k := range found {
			if k.Cluster == c.name && (keys == nil || keys[k]) {
				next[k] = true
			}
		}
		keys = next
		if len(keys) == 0 {
			return nil, nil
		}
	}
	out := make([]aggregate.Held, 0, len(keys))
	for k := range keys {
		if h, ok := ix.GetHeld(k); ok {
			out = append(out, h)
		}
	}
	return out, nil
}

// GetInformer returns the informer of obj's kind in the cluster. Unless
// cache.BlockUntilSynced(false) is given, it waits until the cluster's objects are
// complete in the fleet, or ctx is done.
func (c *clusterCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	t, m, err := c.resolve(obj)
	if err != nil {
		return nil, err
	}
	return c.informer(ctx, t, m, opts)
}

// GetInformerForKind is GetInformer of a kind: of its Go type if the scheme has one,
// else of unstructured objects.
func (c *clusterCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	t := target{gvk: gvk, scheme: c.p.scheme, form: formUnstructured, decoder: c.p.decoder, memo: c.p.memo}
	if c.p.scheme.Recognizes(gvk) && !strings.HasSuffix(gvk.Kind, "List") {
		t.form = formTyped
	}
	m, err := c.resolveKind(gvk)
	if err != nil {
		return nil, err
	}
	return c.informer(ctx, t, m, opts)
}

func (c *clusterCache) informer(ctx context.Context, t target, m *meta.RESTMapping, opts []cache.InformerGetOption) (cache.Informer, error) {
	var o cache.InformerGetOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.BlockUntilSynced == nil || *o.BlockUntilSynced {
		select {
		case <-c.member.synced:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for cluster %s to sync: %w", c.name, ctx.Err())
		}
	}
	return &clusterInformer{c: c, target: t, resource: m.Resource}, nil
}

// RemoveInformer fails: the fleet's informers are shared by every cluster and every
// reader; a resource leaves them through the fleetwatch Manager's Reconfigure.
func (c *clusterCache) RemoveInformer(_ context.Context, obj client.Object) error {
	return fmt.Errorf("remove the informer of %T: %w; change the fleetwatch Manager's resources instead", obj, ErrShared)
}

// Start blocks until ctx is done: the fleetwatch Manager runs the informers.
func (c *clusterCache) Start(ctx context.Context) error {
	<-ctx.Done()
	return nil
}

// WaitForCacheSync waits until the cluster's objects are complete in the fleet
// (fleetwatch.Manager.ClusterHasSynced), and reports whether they are; false if ctx
// ended first.
func (c *clusterCache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.member.synced:
		return true
	case <-ctx.Done():
		return false
	}
}

// IndexField indexes a field for the whole fleet; see Provider.IndexField.
func (c *clusterCache) IndexField(ctx context.Context, obj client.Object, field string, extractValue client.IndexerFunc) error {
	return c.p.IndexField(ctx, obj, field, extractValue)
}
