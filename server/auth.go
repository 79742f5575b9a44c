package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// principal is the client a request comes from, as authentication established it.
type principal struct {
	// name identifies the client in logs and Statuses without revealing its credential:
	// the user of its token-file line, "token-3" for a line without one, or the user
	// name that the home cluster's TokenReview returned.
	name string
	// access, if not nil, restricts what the client may read; nil: everything.
	access authorizer
}

// authorizer decides what a principal may read. Its methods may ask the home cluster,
// which can be slow or down, so a request calls them before it takes any lock of the
// cache, and the filter they return does no I/O: a slow answer holds back only the
// request that waits for it. An error is an API Status, and means that a decision could
// not be made: the request fails rather than read fewer clusters than it may.
type authorizer interface {
	// clusters returns the filter of the clusters the client may read. Each of names,
	// the clusters the request reads, is decided before it returns; any other cluster
	// is admitted only if the filter can tell without I/O (a glob, or access to every
	// cluster), and denied otherwise. A nil filter admits every cluster.
	clusters(ctx context.Context, names []string) (func(cluster string) bool, error)
	// metrics reports whether the client may read /metrics, which names every cluster.
	metrics(ctx context.Context) (bool, error)
	// handover reports whether the client may read the state of cluster name that a
	// replica handed over (see serveState): only the replicas may.
	handover(ctx context.Context, name string) (bool, error)
}

type principalKey struct{}

func principalFrom(r *http.Request) *principal {
	p, _ := r.Context().Value(principalKey{}).(*principal)
	return p
}

// authenticate establishes the principal of every request, when authentication is
// configured: a bearer token of the token file, else one that the home cluster accepts.
// The probes need none: a probe without an Authorization header is served without a
// principal, and /readyz then withholds the reasons that name clusters.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if !s.authenticates() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(probePaths, r.URL.Path) && r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := bearerToken(r.Header.Get("Authorization"))
		var p *principal
		if ok && s.tokens != nil {
			p = s.tokens.authenticate(tok)
		}
		if p == nil && ok && s.delegated != nil {
			var err error
			if p, err = s.delegated.authenticate(r.Context(), tok); err != nil {
				writeStatus(w, r, err)
				return
			}
		}
		if p == nil {
			writeStatus(w, r, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authenticates reports whether the server authenticates its clients. Without
// authentication every client may read everything.
func (s *Server) authenticates() bool { return s.tokens != nil || s.delegated != nil }

// authorize decides which clusters the request's client may read, before the request
// reads anything: the clusters that rt names, or for the scope of every cluster each
// cluster of the fleet now. The filter it returns does no I/O; nil admits every
// cluster. A client that may not read the cluster rt names, or the Cluster object it
// names, gets a 403 Status.
func (s *Server) authorize(r *http.Request, rt route) (func(cluster string) bool, error) {
	p := principalFrom(r)
	if p == nil || p.access == nil {
		return nil, nil
	}
	clusterObject := rt.kind == routeResource && rt.groupVersion() == SchemeGroupVersion && rt.resource == "clusters"
	// A search or the changes outside /clusters/ read every cluster.
	searching := rt.kind == routeResource && rt.groupVersion() == SchemeGroupVersion && (rt.resource == searchResource || rt.resource == changesResource)
	var named []string // the clusters rt names
	if rt.cluster != "" && rt.cluster != allClusters {
		named = append(named, rt.cluster)
	}
	if clusterObject && rt.hasName {
		named = append(named, rt.name)
	}
	names := named
	if len(named) == 0 && (rt.cluster == allClusters || clusterObject || searching) {
		names = s.clusterNames()
	}
	if len(names) == 0 {
		// Nothing of any cluster is read.
		return func(string) bool { return false }, nil
	}
	allow, err := p.access.clusters(r.Context(), names)
	if err != nil {
		return nil, err
	}
	for _, name := range named {
		if allow != nil && !allow(name) {
			return nil, forbiddenCluster(p, name)
		}
	}
	return allow, nil
}

// authorizeMetrics returns a 403 Status if the request's client may not read /metrics.
func (s *Server) authorizeMetrics(r *http.Request) error {
	p := principalFrom(r)
	if p == nil || p.access == nil {
		return nil
	}
	ok, err := p.access.metrics(r.Context())
	if err != nil {
		return err
	}
	if !ok {
		return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("%s may not get path %q", p.name, "/metrics"))
	}
	return nil
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// forbiddenCluster returns the 403 Status of a client that may not read a cluster. It
// is the same whether or not the cluster exists, so that it tells nothing about the
// clusters the client may not see.
func forbiddenCluster(p *principal, name string) error {
	return apierrors.NewForbidden(clustersGR, name, fmt.Errorf("%s may not read cluster %q", p.name, name))
}
