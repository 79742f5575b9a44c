package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/search"
)

// searchResource is the name of the search endpoint in GroupName: GET
// /apis/fleetwatch.io/v1alpha1/search?q=... (docs/search.md).
const searchResource = "search"

// searchParams are the parameters that add terms to q, each as a term of its own.
var searchParams = []string{"name", "kind", "namespace", "cluster", "labelSelector", "image"}

// maxSearchTokenLen bounds a search's continue token: it holds one key.
const maxSearchTokenLen = 4096

// The answer of a search: package api/v1alpha1's types.
type (
	SearchResult = v1alpha1.SearchResult
	SearchCounts = v1alpha1.SearchCounts
	SearchItem   = v1alpha1.SearchItem
)

var searchGR = schema.GroupResource{Group: GroupName, Resource: searchResource}

// serveSearch answers a search in scope sc, decided before (Server.authorize): no item,
// count or total comes from a cluster outside it. A search of every cluster of a
// sharded fleet is answered for the whole fleet (see fanout.go): this replica's part,
// of the clusters it owns, and the part of each other replica that owns clusters of
// sc, merged by mergeSearch. The clusters that no replica could be asked for, or whose
// replica did not answer, are named in a Warning and the search is served without
// them, as a list is; a replica that refused the search (4xx) fails it with its Status.
func (s *Server) serveSearch(w http.ResponseWriter, r *http.Request, sc scope) error {
	req, err := parseSearch(r.URL.Query())
	if err != nil {
		return err
	}
	if err := s.waitIndexed(r.Context()); err != nil {
		return err
	}
	peers, missing := s.fanOut(r, sc, nil)
	local := sc
	if len(peers) > 0 || len(missing) > 0 {
		// This replica answers for the clusters it owns, as its peers do: not for what
		// it may still hold of the others.
		local.allow = s.ownedOnly(sc.allow)
	}
	ids := slices.Sorted(maps.Keys(peers))
	parts := make([]searchPart, 1+len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { parts[1+i], errs[i] = peers[id].search(r.Context(), s.peers.client, r, req) })
	}
	parts[0] = s.searchLocal(local, req)
	wg.Wait()
	for i, id := range ids {
		var se *apierrors.StatusError
		switch {
		case errors.As(errs[i], &se):
			return se
		case errs[i] != nil:
			klog.FromContext(r.Context()).V(2).Info("A replica did not answer a fleet search", "replica", id, "err", errs[i])
			missing = appendClusters(missing, peers[id], fmt.Sprintf("replica %q did not answer: %v", id, errs[i]))
		}
	}

	out, next := mergeSearch(parts, req.limit)
	release, err := s.limits.admitList(len(out.Items))
	if err != nil {
		return err
	}
	defer release()
	if next != nil {
		out.Metadata.Continue = searchContinue{Query: req.digest, After: *next}.String()
	}
	warnNotIncluded(w, missing)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// searchRequest is a search as its parameters ask it.
type searchRequest struct {
	query *search.Query
	// digest identifies the query in its continue tokens (queryDigest).
	digest string
	// after, if not nil, is the key of the last item of the page before: the page
	// starts after it.
	after *search.Key
	// limit is the number of items of the page, between 1 and search.MaxLimit.
	limit int
}

// parseSearch reads a search's parameters: q and the parameters that add terms, limit
// and continue. A bad one gets a 400 Status that names it.
func parseSearch(q url.Values) (*searchRequest, error) {
	query, err := parseQuery(q)
	if err != nil {
		return nil, err
	}
	req := &searchRequest{query: query, digest: queryDigest(query)}
	if req.limit, err = parseLimit(q, search.DefaultLimit, search.MaxLimit); err != nil {
		return nil, err
	}
	if v := q.Get("continue"); v != "" {
		k, err := parseSearchContinue(v, req.digest)
		if err != nil {
			return nil, badParameter("continue", err)
		}
		req.after = &k
	}
	return req, nil
}

// parseQuery reads a query of the search grammar: q and the parameters that add terms
// (searchParams). A bad term gets a 400 Status that names its parameter.
func parseQuery(q url.Values) (*search.Query, error) {
	query, err := search.Parse(q.Get("q"))
	if err != nil {
		return nil, badSearch("q", err)
	}
	for _, p := range searchParams {
		for _, v := range q[p] {
			if err := query.Add(p, v); err != nil {
				return nil, badSearch(p, err)
			}
		}
	}
	return query, nil
}

// parseLimit reads the limit parameter of a page: def if it is absent or 0, at most
// maxLimit; a negative or non-numeric one gets a 400 Status.
func parseLimit(q url.Values, def, maxLimit int) (int, error) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, badParameter("limit", fmt.Errorf("%q is not a non-negative integer", v))
	}
	if n == 0 {
		return def, nil
	}
	return min(n, maxLimit), nil
}

// searchPart is one replica's answer to a search.
type searchPart struct {
	// items are the part's page, in search.Key order.
	items  []SearchItem
	total  int
	counts SearchCounts
	// last, if the part has items after its page, is the key of the last item it
	// returned (kept or not): what follows it is not known yet, so the merged page
	// ends there at the latest.
	last *search.Key
}

// searchLocal answers the search req from this replica's index, in scope sc.
func (s *Server) searchLocal(sc scope, req *searchRequest) searchPart {
	kinds := make(map[schema.GroupVersionResource]string)
	for gvr, res := range s.catalog(sc).resources {
		kinds[gvr] = res.kind
	}
	res := s.cache.index.Search(search.Request{Query: req.query, Allow: sc.includes, Kinds: kinds, After: req.after, Limit: req.limit})
	part := searchPart{
		items:  make([]SearchItem, 0, len(res.Items)),
		total:  res.Total,
		counts: SearchCounts{Clusters: res.Clusters, Kinds: res.Kinds},
	}
	for _, it := range res.Items {
		m := mustAccessor(it.Object)
		item := SearchItem{
			Cluster: it.Cluster, Group: it.Group, Version: it.Version, Resource: it.Resource, Kind: it.Kind,
			Namespace: it.Namespace, Name: it.Name,
			ResourceVersion: m.GetResourceVersion(), UID: string(m.GetUID()), Labels: m.GetLabels(), Images: it.Images,
		}
		if ts := m.GetCreationTimestamp(); !ts.IsZero() {
			item.CreationTimestamp = &ts
		}
		part.items = append(part.items, item)
	}
	if res.More {
		part.last = &res.Items[len(res.Items)-1].Key
	}
	return part
}

// mergeSearch merges the parts of a search, whose clusters are disjoint, into one page
// of at most limit items in search.Key order: the totals are summed and the counts
// merged. next, if not nil, is the key that the next page starts after: every part is
// asked for the items after it, so that each item is returned once over the pages.
func mergeSearch(parts []searchPart, limit int) (out *SearchResult, next *search.Key) {
	out = &SearchResult{
		TypeMeta: metav1.TypeMeta{Kind: "SearchResult", APIVersion: SchemeGroupVersion.String()},
		Counts:   SearchCounts{Clusters: map[string]int{}, Kinds: map[string]int{}},
		Items:    []SearchItem{},
	}
	var end *search.Key
	for _, p := range parts {
		out.Total += p.total
		for cl, n := range p.counts.Clusters {
			out.Counts.Clusters[cl] += n
		}
		for k, n := range p.counts.Kinds {
			out.Counts.Kinds[k] += n
		}
		out.Items = append(out.Items, p.items...)
		if p.last != nil && (end == nil || p.last.Compare(*end) < 0) {
			end = p.last
		}
	}
	slices.SortFunc(out.Items, func(a, b SearchItem) int { return itemKey(&a).Compare(itemKey(&b)) })
	more := end != nil
	if end != nil {
		// A part that has more items than it returned may have some before the items
		// of the others after its last: the page ends at the earliest such last.
		n, _ := slices.BinarySearchFunc(out.Items, *end, func(it SearchItem, k search.Key) int {
			if itemKey(&it).Compare(k) <= 0 {
				return -1
			}
			return 1
		})
		out.Items = out.Items[:n]
	}
	if len(out.Items) > limit {
		out.Items, more = out.Items[:limit], true
	}
	switch {
	case !more:
		return out, nil
	case len(out.Items) == 0:
		// Every item a part returned before end was of a cluster it does not answer
		// for here: the next page starts after them.
		return out, end
	}
	k := itemKey(&out.Items[len(out.Items)-1])
	return out, &k
}

// itemKey is the item's position in the order of search results.
func itemKey(it *SearchItem) search.Key {
	return search.Key{
		Cluster: it.Cluster, Kind: it.Kind, Group: it.Group, Version: it.Version, Resource: it.Resource,
		Namespace: it.Namespace, Name: it.Name,
	}
}

// badSearch returns the 400 Status of a bad query, naming the parameter and the term.
func badSearch(param string, err error) error {
	var te *search.TermError
	if errors.As(err, &te) {
		se := badParameter(param, err).(*apierrors.StatusError)
		se.ErrStatus.Details.Causes[0].Message = fmt.Sprintf("%q: %v", te.Term, errors.Unwrap(te.Err))
		return se
	}
	return badParameter(param, err)
}

// queryDigest identifies a query in its continue tokens, so that a token is refused by
// any other query.
func queryDigest(q *search.Query) string {
	sum := sha256.Sum256([]byte(q.String()))
	return hex.EncodeToString(sum[:8])
}

// searchContinue is the continue token of a search: its query's digest and the key of
// the last item of the page, as base64url (no padding) of its compact JSON.
type searchContinue struct {
	Query string     `json:"q"`
	After search.Key `json:"k"`
}

func (t searchContinue) String() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("encode search continue token: %v", err)) // strings always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseSearchContinue(s, digest string) (search.Key, error) {
	if len(s) > maxSearchTokenLen {
		return search.Key{}, fmt.Errorf("longer than %d bytes", maxSearchTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return search.Key{}, errors.New("not a continue token handed out by this server (not base64url)")
	}
	var t searchContinue
	if err := decodeStrict(b, &t); err != nil {
		return search.Key{}, fmt.Errorf("not a continue token handed out by this server: %w", err)
	}
	if t.Query != digest {
		return search.Key{}, errors.New("the token is of another query: send the same query and parameters with it")
	}
	return t.After, nil
}
