package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strconv"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
)

// SearchOptions narrow and page a search.
type SearchOptions struct {
	// Cluster narrows the search to one cluster. Default "": every cluster.
	Cluster string
	// Limit is the number of items of a page. Default 0: the server's (100; at most 500).
	Limit int
	// Continue is the Metadata.Continue of the previous page, for the next one.
	Continue string
}

// Searcher asks fleetwatch's search API (docs/search.md).
type Searcher struct {
	client *rest.RESTClient
}

// NewSearcher returns a Searcher of the API that cfg reaches: a rest.Config of
// fleetwatch's API itself, not of a cluster (ConfigFor's).
func NewSearcher(cfg *rest.Config) (*Searcher, error) {
	c := rest.CopyConfig(cfg)
	c.APIPath, c.GroupVersion = "", nil
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.UnversionedRESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("search client: %w", err)
	}
	return &Searcher{client: rc}, nil
}

// Search returns the page of the answer to query q that opts ask for. q is the search
// grammar of docs/search.md (`pay* kind:Deployment ns:shop cluster:prod-*`); a bad
// query is an error whose Status names the term (apierrors.IsBadRequest).
func (s *Searcher) Search(ctx context.Context, q string, opts SearchOptions) (*v1alpha1.SearchResult, error) {
	path := "/apis/" + v1alpha1.GroupName + "/" + v1alpha1.Version + "/search"
	if opts.Cluster != "" {
		path = clusterPrefix(opts.Cluster) + path
	}
	req := s.client.Get().AbsPath(path).Param("q", q)
	if opts.Limit > 0 {
		req = req.Param("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Continue != "" {
		req = req.Param("continue", opts.Continue)
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("search %q: %w", q, err)
	}
	var res v1alpha1.SearchResult
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("search %q: decoding the answer: %w", q, err)
	}
	return &res, nil
}

// All returns every item of the answer to q, page after page (opts.Continue is where it
// starts). It stops at the first error, which it yields.
func (s *Searcher) All(ctx context.Context, q string, opts SearchOptions) iter.Seq2[v1alpha1.SearchItem, error] {
	return func(yield func(v1alpha1.SearchItem, error) bool) {
		for {
			res, err := s.Search(ctx, q, opts)
			if err != nil {
				yield(v1alpha1.SearchItem{}, err)
				return
			}
			for _, it := range res.Items {
				if !yield(it, nil) {
					return
				}
			}
			if res.Metadata.Continue == "" {
				return
			}
			opts.Continue = res.Metadata.Continue
		}
	}
}
