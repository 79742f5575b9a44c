package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// StateSource is a Source that keeps the states of the clusters its replica handed
// over, for their new owners (fleetwatch.Manager is one). The server serves them at
// StatePath, to the other replicas only.
type StateSource interface {
	// HandoverState returns the state of cluster name, if it is kept, and forgets it.
	// The returned slice is not modified.
	HandoverState(name string) ([]byte, bool)
}

// StateSubresource is the subresource of a Cluster under which its handed-over state is
// served: GET /apis/fleetwatch.io/v1alpha1/clusters/{name}/state. Only a client that
// the home cluster allows "get" on "clusters/state" of GroupName in
// DelegatedAuth.StateNamespace (the replicas' Role does; see deploy/components/sharded)
// may read it, through delegated authentication: it holds whole objects of the
// cluster.
const StateSubresource = "state"

// StatePath returns the path of cluster name's handed-over state.
func StatePath(name string) string {
	return "/apis/" + SchemeGroupVersion.String() + "/clusters/" + url.PathEscape(name) + "/" + StateSubresource
}

var stateGR = schema.GroupResource{Group: GroupName, Resource: "clusters/" + StateSubresource}

// isStateRoute reports whether rt is the state of a Cluster.
func isStateRoute(rt route) bool {
	return rt.kind == routeResource && rt.cluster == "" && rt.groupVersion() == SchemeGroupVersion &&
		rt.resource == "clusters" && rt.hasName && !rt.hasNamespace && rt.subresource == StateSubresource
}

// serveState serves the state of cluster name, that this replica handed over, to a
// replica. No other client may read it: not without authentication, not with a token
// of the token file (none is a replica's), and not with one that the home cluster
// allows to read the cluster but not its state. The answer is the same whether or not
// the state exists, until the client is allowed.
func (s *Server) serveState(w http.ResponseWriter, r *http.Request, name string) error {
	p := principalFrom(r)
	denied := apierrors.NewForbidden(stateGR, name, fmt.Errorf("only the replicas of a sharded fleet may read the state of a cluster handed over"))
	if p == nil || p.access == nil {
		return denied
	}
	ok, err := p.access.handover(r.Context(), name)
	if err != nil {
		return err
	}
	if !ok {
		return denied
	}
	src, isState := s.src.(StateSource)
	if !isState {
		return notFound(stateGR, name)
	}
	state, found := src.HandoverState(name)
	if !found {
		return notFound(stateGR, name)
	}
	writeBody(w, http.StatusOK, "application/octet-stream", state)
	return nil
}

func (a *delegatedAccess) handover(ctx context.Context, name string) (bool, error) {
	ra := &authorizationv1.ResourceAttributes{Verb: "get", Namespace: a.d.opts.StateNamespace, Group: GroupName, Resource: "clusters", Subresource: StateSubresource, Name: name}
	ok, err := a.d.authorize(ctx, a.user, ra, nil)
	if err != nil {
		return false, a.reviewFailed(fmt.Sprintf("get the state of cluster %q", name), err)
	}
	return ok, nil
}

// handover denies the states of clusters: no token of the token file is a replica's.
func (globAccess) handover(context.Context, string) (bool, error) { return false, nil }
