package history

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/search"
)

// Defaults and bounds of the requests' Limit, and of Options.MaxScan.
const (
	DefaultLimit = 100
	MaxLimit     = 500
	// DefaultMaxScan bounds the records that one page of changes reads: a query that
	// selects few of them gets pages with fewer items than its limit, even none, and
	// a next page, rather than one request that reads the whole log.
	DefaultMaxScan = 100_000
	// DefaultMaxObjectScan bounds the records that one page of changes reads for a
	// query with label or image terms, which decode the object of each record that the
	// other terms select: about 6 µs each, against 0.3 µs for a record that is not
	// decoded (BenchmarkQuery), so that a page stays within about 30 ms.
	DefaultMaxObjectScan = 5_000
)

// Options configures a Log. The zero value is valid.
type Options struct {
	// MaxScan bounds the records that one page of Changes reads. Default
	// DefaultMaxScan.
	MaxScan int
	// MaxObjectScan bounds the records that one page of Changes reads for a query
	// with label or image terms. Default DefaultMaxObjectScan.
	MaxObjectScan int
}

// Log reads the change log of a snapshot. It is safe for concurrent use; every method
// is one read transaction of the store, which the writer's commits do not wait for.
type Log struct {
	store *persist.Store
	opts  Options
}

// New returns the Log of store, whose writer keeps a change log
// (persist.HistoryOptions.Enabled): a store without one has no changes to return.
func New(store *persist.Store, opts Options) *Log {
	if opts.MaxScan <= 0 {
		opts.MaxScan = DefaultMaxScan
	}
	if opts.MaxObjectScan <= 0 {
		opts.MaxObjectScan = DefaultMaxObjectScan
	}
	return &Log{store: store, opts: opts}
}

// ID identifies the log: its store's file (persist.Store.ID). Sequence numbers are
// positions in one log only: a store whose file was replaced (recovered from a corrupt
// one, or lost) keeps another log, whose sequence numbers start again.
func (l *Log) ID() (string, error) {
	return l.store.ID()
}

// ChangesRequest selects changes across the fleet.
type ChangesRequest struct {
	// Query selects the changes: a change of an object must match every term; a
	// resource's (ResourceReset, Lost) its cluster and kind terms; a cluster's
	// (ClusterRemoved, ClusterReplaced) its cluster terms. A label or image term
	// matches the object as the change left it, so it selects no Deleted or Vanished
	// change, nor any change of a Secret (the log holds no Secret's contents). nil
	// selects every change.
	Query *search.Query
	// Cluster, if not empty, selects that cluster's changes only, read from the log's
	// index of its resources rather than from the whole log.
	Cluster string
	// Allow, if not nil, admits the clusters the caller may read: no change of another
	// cluster is returned. It must not keep the name it is given, which is the file's.
	Allow func(cluster string) bool
	// Kinds are the kinds of resources as the caller knows them from discovery, for the
	// kind terms and the items' Kind. A resource that is not in it matches the kind
	// terms by its resource names, and its items have no Kind.
	Kinds map[schema.GroupVersionResource]string
	// ShortNames are more names that a kind term matches, by resource, as
	// search.Options.ShortNames.
	ShortNames map[schema.GroupResource][]string
	// Types, if not empty, selects changes of those types only.
	Types []persist.ChangeType
	// Since selects changes of that time or later; zero for all.
	Since time.Time
	// After selects the changes after that sequence number: the Next of the page
	// before, or the Seq of the last change a caller saw.
	After uint64
	// Limit is the number of changes of the page. Default DefaultLimit; at most
	// MaxLimit.
	Limit int
}

// ChangesPage is a page of changes.
type ChangesPage struct {
	// Items are the changes, oldest first.
	Items []v1alpha1.Change
	// Next, if not 0, is the After of the next page: more changes may follow. A page
	// may hold fewer items than its limit, even none, and have a next page, when it
	// read Options.MaxScan records (Options.MaxObjectScan for a query with label or
	// image terms).
	Next uint64
}

// Changes returns the page of changes that req selects.
func (l *Log) Changes(req ChangesRequest) (*ChangesPage, error) {
	q := req.Query
	if q == nil {
		q = &search.Query{}
	}
	needsObject := q.NeedsObject()
	pq := persist.ChangesQuery{
		Since:        req.Since,
		After:        req.After,
		Cluster:      req.Cluster,
		FilterObject: needsObject,
		Limit:        limit(req.Limit),
		MaxScan:      l.opts.MaxScan,
	}
	if needsObject {
		pq.MaxScan = l.opts.MaxObjectScan
	}
	if len(q.Clusters) > 0 {
		// Read from the index of the clusters that match, when they are few.
		pq.MatchCluster = q.MatchCluster
	}
	// names is q without the terms that read an object: they are tried first, so that
	// an object is decoded only for a change that the others select.
	names := *q
	names.Labels, names.Images = nil, nil
	// resources are the resources of the changes read, and whether the kind terms
	// match them.
	type resource struct {
		gvr   schema.GroupVersionResource
		match bool
	}
	resources := make(map[persist.ResourceKey]resource)
	pq.Filter = func(c *persist.Change) bool {
		if req.Allow != nil && !req.Allow(c.Cluster) || len(req.Types) > 0 && !slices.Contains(req.Types, c.Type) || !q.MatchCluster(c.Cluster) {
			return false
		}
		if c.Resource == "" {
			return true
		}
		res, ok := resources[c.Resource]
		if !ok {
			// c's strings are the file's, for the call only: the key is copied.
			gvr := c.Resource.GroupVersionResource()
			res = resource{gvr: gvr, match: q.MatchKind(gvr, req.Kinds[gvr], req.ShortNames[gvr.GroupResource()])}
			resources[persist.ResourceKey(strings.Clone(string(c.Resource)))] = res
		}
		gvr := res.gvr
		if !res.match {
			return false
		}
		if c.Name == "" {
			return true
		}
		if !names.MatchObject(gvr.GroupResource(), c.Namespace, c.Name, nil) {
			return false
		}
		if !needsObject {
			return true
		}
		var obj runtime.Object
		if c.Object != nil && !isSecret(gvr) {
			obj, _ = c.Decode() // one that does not decode matches no label or image term
		}
		return q.MatchObject(gvr.GroupResource(), c.Namespace, c.Name, obj)
	}
	changes, next, err := l.store.Changes(pq)
	if err != nil {
		return nil, err
	}
	page := &ChangesPage{Items: make([]v1alpha1.Change, 0, len(changes)), Next: next}
	for i := range changes {
		c := &changes[i]
		item := apiChange(c)
		item.Kind = req.Kinds[c.Resource.GroupVersionResource()]
		page.Items = append(page.Items, item)
	}
	return page, nil
}

// ObjectRequest names one object, and a page of its history.
type ObjectRequest struct {
	Cluster   string
	Resource  schema.GroupVersionResource
	Namespace string
	Name      string
	// After selects the steps after that sequence number: the Next of the page before.
	After uint64
	// Limit is the number of steps of the page. Default DefaultLimit; at most MaxLimit.
	Limit int
}

// ObjectPage is a page of an object's history.
type ObjectPage struct {
	// Kind is the object's kind, as its objects in the log say; "" if none does.
	Kind string
	// Steps are the object's changes, oldest first, each with the fields it changed.
	Steps []v1alpha1.HistoryStep
	// Next, if not 0, is the After of the next page.
	Next uint64
}

// Object returns a page of the history of the object that req names: its changes under
// every stored resource of its cluster with its group, version and resource, each with
// the fields it changed (Diff) from the object's step before, or, for an object new to
// the log or added again after it was deleted, every field. An object that the log
// holds no change of has an empty history.
func (l *Log) Object(req ObjectRequest) (*ObjectPage, error) {
	keys, err := l.store.HistoryResources(req.Cluster)
	if err != nil {
		return nil, err
	}
	var all []persist.Change
	for _, k := range keys {
		if k.GroupVersionResource() != req.Resource {
			continue
		}
		h, err := l.store.ObjectHistory(req.Cluster, k, req.Namespace, req.Name)
		if err != nil {
			return nil, err
		}
		all = append(all, h...)
	}
	slices.SortFunc(all, func(a, b persist.Change) int { return cmp.Compare(a.Seq, b.Seq) })

	start, _ := slices.BinarySearchFunc(all, req.After+1, func(c persist.Change, seq uint64) int { return cmp.Compare(c.Seq, seq) })
	end := min(len(all), start+limit(req.Limit))
	page := &ObjectPage{Steps: make([]v1alpha1.HistoryStep, 0, end-start)}
	if end < len(all) {
		page.Next = all[end-1].Seq
	}
	secret := isSecret(req.Resource)
	// base is the object as the step before left it: nil after a deletion or before
	// the first step; known says whether the log holds that step.
	var base map[string]any
	known := start == 0
	if start > 0 {
		base, known = l.contents(&all[start-1], secret, &page.Kind)
	}
	for i := start; i < end; i++ {
		c := &all[i]
		step := v1alpha1.HistoryStep{Change: apiChange(c)}
		switch c.Type {
		case persist.ChangeAdded, persist.ChangeModified:
			obj, ok := l.contents(c, secret, &page.Kind)
			switch {
			case !ok || secret:
			case c.Type == persist.ChangeModified && !known:
				step.BaseMissing = true
			default:
				step.Fields = Diff(base, obj, secret)
			}
			base, known = obj, ok
		default: // Deleted, Vanished
			base, known = nil, true
		}
		page.Steps = append(page.Steps, step)
	}
	for i := range page.Steps {
		page.Steps[i].Kind = page.Kind
	}
	return page, nil
}

// contents returns the object that c holds as an unstructured map, and whether the log
// holds it: for Added and Modified, unless the record has no object (a Secret's, or
// one that did not encode) or it does not decode; for Deleted and Vanished, nil. It
// sets *kind to the object's kind if it is not set yet.
func (l *Log) contents(c *persist.Change, secret bool, kind *string) (map[string]any, bool) {
	if c.Type != persist.ChangeAdded && c.Type != persist.ChangeModified {
		return nil, true
	}
	if c.Object == nil || secret {
		return nil, false
	}
	obj, err := c.Decode()
	if err != nil {
		return nil, false
	}
	if *kind == "" {
		if gvk := obj.GetObjectKind().GroupVersionKind(); gvk.Group != metav1.GroupName {
			*kind = gvk.Kind
		}
	}
	m, err := toMap(obj)
	if err != nil {
		return nil, false
	}
	return m, true
}

// toMap returns obj's contents as an unstructured map, with integers as int64 as in
// unstructured objects (a round trip through encoding/json would round those beyond
// 2^53).
func toMap(obj runtime.Object) (map[string]any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	return m, nil
}

// apiChange returns c as the API shows it, without its kind.
func apiChange(c *persist.Change) v1alpha1.Change {
	gvr := c.Resource.GroupVersionResource()
	return v1alpha1.Change{
		Seq: c.Seq, Time: metav1.NewMicroTime(c.Time), Type: c.Type.String(),
		Cluster: c.Cluster, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
		Namespace: c.Namespace, Name: c.Name,
		ResourceVersion: c.ResourceVersion, ObjectResourceVersion: c.ObjectResourceVersion,
	}
}

// limit returns a request's Limit with its default and bound.
func limit(n int) int {
	if n <= 0 {
		return DefaultLimit
	}
	return min(n, MaxLimit)
}

// isSecret reports whether gvr is the core group's Secrets.
func isSecret(gvr schema.GroupVersionResource) bool {
	return gvr.Group == "" && gvr.Resource == "secrets"
}

// ParseType returns the ChangeType named s, as ChangeType.String names it.
func ParseType(s string) (persist.ChangeType, bool) {
	for t := persist.ChangeAdded; t <= persist.ChangeLost; t++ {
		if t.String() == s {
			return t, true
		}
	}
	return 0, false
}
