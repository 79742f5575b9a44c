package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/search"
)

// searchResource is the name of the search endpoint in GroupName: GET
// /apis/fleetwatch.io/v1alpha1/search?q=... (docs/search.md).
const searchResource = "search"

// searchParams are the parameters that add terms to q, each as a term of its own.
var searchParams = []string{"name", "kind", "namespace", "cluster", "labelSelector", "image"}

// maxSearchTokenLen bounds a search's continue token: it holds one key.
const maxSearchTokenLen = 4096

// SearchResult is the answer of a search (kind SearchResult, fleetwatch.io/v1alpha1).
type SearchResult struct {
	metav1.TypeMeta `json:",inline"`
	// Metadata holds the continue token of the next page, if there is one.
	Metadata metav1.ListMeta `json:"metadata"`
	// Total is the number of objects found, over every page.
	Total int `json:"total"`
	// Counts are the objects found by cluster and by kind, over every page.
	Counts SearchCounts `json:"counts"`
	// Items are the objects of the page, by cluster, kind, namespace and name.
	Items []SearchItem `json:"items"`
}

// SearchCounts count the objects found. Only clusters and kinds with objects found are
// present. A kind is its Kind, followed by .group for a resource of a named group, as
// Deployment.apps.
type SearchCounts struct {
	Clusters map[string]int `json:"clusters"`
	Kinds    map[string]int `json:"kinds"`
}

// SearchItem is an object found: its resource and metadata, never its contents (a
// Secret's values cannot be in it).
type SearchItem struct {
	Cluster           string            `json:"cluster"`
	Group             string            `json:"group"`
	Version           string            `json:"version"`
	Resource          string            `json:"resource"`
	Kind              string            `json:"kind"`
	Namespace         string            `json:"namespace,omitempty"`
	Name              string            `json:"name"`
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Images            []string          `json:"images,omitempty"`
	CreationTimestamp *metav1.Time      `json:"creationTimestamp,omitempty"`
}

var searchGR = schema.GroupResource{Group: GroupName, Resource: searchResource}

// serveSearch answers a search in scope sc, decided before (Server.authorize): no item,
// count or total comes from a cluster outside it.
func (s *Server) serveSearch(w http.ResponseWriter, r *http.Request, sc scope) error {
	q := r.URL.Query()
	query, err := search.Parse(q.Get("q"))
	if err != nil {
		return badSearch("q", err)
	}
	for _, p := range searchParams {
		for _, v := range q[p] {
			if err := query.Add(p, v); err != nil {
				return badSearch(p, err)
			}
		}
	}
	limit := search.DefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return badParameter("limit", fmt.Errorf("%q is not a non-negative integer", v))
		}
		if n > 0 {
			limit = min(n, search.MaxLimit)
		}
	}
	s.warnNotSearched(w, r, sc)
	digest := queryDigest(query)
	var after *search.Key
	if v := q.Get("continue"); v != "" {
		k, err := parseSearchContinue(v, digest)
		if err != nil {
			return badParameter("continue", err)
		}
		after = &k
	}
	if err := s.waitPrimed(r.Context()); err != nil {
		return err
	}
	kinds := make(map[schema.GroupVersionResource]string)
	for gvr, res := range s.catalog(sc).resources {
		kinds[gvr] = res.kind
	}
	res := s.cache.index.Search(search.Request{Query: query, Allow: sc.includes, Kinds: kinds, After: after, Limit: limit})
	release, err := s.limits.admitList(len(res.Items))
	if err != nil {
		return err
	}
	defer release()

	out := &SearchResult{
		TypeMeta: metav1.TypeMeta{Kind: "SearchResult", APIVersion: SchemeGroupVersion.String()},
		Total:    res.Total,
		Counts:   SearchCounts{Clusters: res.Clusters, Kinds: res.Kinds},
		Items:    make([]SearchItem, 0, len(res.Items)),
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
		out.Items = append(out.Items, item)
	}
	if res.More {
		out.Metadata.Continue = searchContinue{Query: digest, After: res.Items[len(res.Items)-1].Key}.String()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
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
