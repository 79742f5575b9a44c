package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// ClusterConfigs is an optional capability of a Source: the rest.Config of each cluster,
// with which the server fetches from a cluster what the fleet does not cache, its OpenAPI
// documents (for kubectl explain) and its CustomResourceDefinitions (for the printer
// columns of custom resources). *fleetwatch.Manager implements it. Without it, the
// OpenAPI paths answer 404 and custom resources get the AGE column only.
type ClusterConfigs interface {
	// RESTConfig returns a copy of the rest.Config of a cluster of the fleet, or an error
	// if the cluster is not connected.
	RESTConfig(cluster string) (*rest.Config, error)
}

// Bounds of what the server fetches from the clusters.
const (
	// memberTimeout bounds each request to a cluster.
	memberTimeout = 30 * time.Second
	// maxOpenAPIBytes bounds one OpenAPI document: a cluster's /openapi/v2 is a few MiB.
	maxOpenAPIBytes = 64 << 20
	// openAPICacheSize bounds the OpenAPI documents kept, over every cluster; the least
	// recently used goes first.
	openAPICacheSize = 128
	// openAPIFresh is how long a document is served without asking its cluster again:
	// after it, the cluster is asked with the document's ETag, and a 304 keeps it. A
	// document addressed by its hash (/openapi/v3/...?hash=, as /openapi/v3 lists them)
	// never changes and is not asked for again while it is kept.
	openAPIFresh = 30 * time.Second
	// openAPIKept is how long an unused document is kept.
	openAPIKept = time.Hour
)

// openAPIDoc is a document as fetched from a cluster, with what a client needs to cache it.
type openAPIDoc struct {
	code        int
	body        []byte
	contentType string
	etag        string
	fetched     time.Time
	immutable   bool
}

// openAPIProxy serves the OpenAPI documents of the clusters, fetched from each and kept.
type openAPIProxy struct {
	configs ClusterConfigs
	// docs maps openAPIKey strings to *openAPIDoc.
	docs     *utilcache.LRUExpireCache
	inFlight singleflight.Group
}

func newOpenAPIProxy(src Source) *openAPIProxy {
	configs, _ := src.(ClusterConfigs)
	return &openAPIProxy{configs: configs, docs: utilcache.NewLRUExpireCache(openAPICacheSize)}
}

// openAPIPath reports whether segs, the path after a cluster prefix, is an OpenAPI path
// that kubectl reads: /openapi/v2, /openapi/v3, /openapi/v3/{group-version path}.
func openAPIPath(segs []string) (string, bool) {
	if len(segs) < 2 || segs[0] != "openapi" {
		return "", false
	}
	switch {
	case len(segs) == 2 && (segs[1] == "v2" || segs[1] == "v3"):
	case len(segs) >= 3 && segs[1] == "v3" && (segs[2] == "api" || segs[2] == "apis"):
		for _, s := range segs[2:] {
			if s == "" || s == "." || s == ".." {
				return "", false
			}
		}
	default:
		return "", false
	}
	return "/" + strings.Join(segs, "/"), true
}

// serveOpenAPI serves path (openAPIPath) of a cluster the client may read, as its
// apiserver serves it, except that /openapi/v3 lists the documents of its group versions
// under the cluster's prefix, where kubectl then asks for them.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request, cluster, path string) error {
	if cluster == allClusters {
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: "OpenAPI documents are served per cluster, under /clusters/{cluster}/openapi/: the clusters of a fleet may differ",
		}}
	}
	p := s.openAPI
	if p.configs == nil {
		return notFoundPath(r.URL.EscapedPath())
	}
	q := url.Values{}
	if h := r.URL.Query().Get("hash"); h != "" {
		q.Set("hash", h)
	}
	accept := "application/json"
	if a := r.Header.Get("Accept"); strings.Contains(a, "protobuf") {
		accept = a
	}
	key := cluster + "\x00" + path + "\x00" + q.Encode() + "\x00" + accept
	doc, err := p.get(r.Context(), cluster, path, q, accept, key)
	if err != nil {
		return err
	}
	if doc.etag != "" {
		w.Header().Set("ETag", doc.etag)
		if r.Header.Get("If-None-Match") == doc.etag {
			w.WriteHeader(http.StatusNotModified)
			return nil
		}
	}
	if doc.immutable {
		w.Header().Set("Cache-Control", "public, immutable")
	}
	writeBody(w, doc.code, doc.contentType, doc.body)
	return nil
}

// get returns the document of key, fetched at most once at a time.
func (p *openAPIProxy) get(ctx context.Context, cluster, path string, q url.Values, accept, key string) (*openAPIDoc, error) {
	var kept *openAPIDoc
	if v, ok := p.docs.Get(key); ok {
		kept = v.(*openAPIDoc)
		if kept.immutable || time.Since(kept.fetched) < openAPIFresh {
			return kept, nil
		}
	}
	ch := p.inFlight.DoChan(key, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), memberTimeout)
		defer cancel()
		doc, err := p.fetch(ctx, cluster, path, q, accept, kept)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot fetch an OpenAPI document from a cluster", "cluster", cluster, "path", path)
			return nil, err
		}
		if doc.code == http.StatusOK {
			p.docs.Add(key, doc, openAPIKept)
		}
		return doc, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			se := apierrors.NewServiceUnavailable(fmt.Sprintf("the OpenAPI document %s of cluster %q could not be fetched from it; see the server's log", path, cluster))
			se.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
			return nil, se
		}
		return res.Val.(*openAPIDoc), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// fetch asks the cluster for a document, revalidating kept if not nil.
func (p *openAPIProxy) fetch(ctx context.Context, cluster, path string, q url.Values, accept string, kept *openAPIDoc) (*openAPIDoc, error) {
	cfg, err := p.configs.RESTConfig(cluster)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{"Accept": {accept}}
	if kept != nil && kept.etag != "" {
		hdr.Set("If-None-Match", kept.etag)
	}
	res, err := memberGet(ctx, cfg, path, q, hdr)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotModified && kept != nil {
		renewed := *kept
		renewed.fetched = time.Now()
		return &renewed, nil
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxOpenAPIBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > maxOpenAPIBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxOpenAPIBytes)
	}
	doc := &openAPIDoc{
		code:        res.StatusCode,
		body:        body,
		contentType: res.Header.Get("Content-Type"),
		etag:        res.Header.Get("ETag"),
		fetched:     time.Now(),
		immutable:   q.Get("hash") != "" && res.StatusCode == http.StatusOK,
	}
	if doc.contentType == "" {
		doc.contentType = contentTypeJSON
	}
	if path == "/openapi/v3" && res.StatusCode == http.StatusOK {
		if doc.body, err = prefixOpenAPIPaths(body, cluster); err != nil {
			return nil, fmt.Errorf("/openapi/v3: %w", err)
		}
	}
	return doc, nil
}

// prefixOpenAPIPaths puts the cluster's prefix in front of each serverRelativeURL of an
// /openapi/v3 discovery document: kubectl asks for the URL as it is, from the server's
// root.
func prefixOpenAPIPaths(body []byte, cluster string) ([]byte, error) {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, err
	}
	prefix := "/clusters/" + url.PathEscape(cluster)
	for gv, item := range doc.Paths {
		u, ok := item["serverRelativeURL"].(string)
		if !ok || !strings.HasPrefix(u, "/") {
			return nil, fmt.Errorf("path %q has no serverRelativeURL from the root", gv)
		}
		item["serverRelativeURL"] = prefix + u
	}
	return json.Marshal(doc)
}

// memberGet sends GET path?q to a cluster with its own credentials.
func memberGet(ctx context.Context, cfg *rest.Config, path string, q url.Values, hdr http.Header) (*http.Response, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, err
	}
	if u.Scheme == "" { // a host without a scheme, as rest.Config allows
		if u, err = url.Parse("https://" + cfg.Host); err != nil {
			return nil, err
		}
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header = hdr
	return hc.Do(req)
}
