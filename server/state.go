package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// StateSource is a Source that keeps the states of the clusters its replica handed
// over, for their new owners (fleetwatch.Manager is one). The server serves them at
// StatePath, to the other replicas only.
type StateSource interface {
	// HandoverState returns the state of cluster name, if it is kept. It is kept, the
	// same bytes at every call, until HandoverReceived, so that a transfer that broke
	// off can be made again. The returned slice is not modified.
	HandoverState(name string) ([]byte, bool)
	// HandoverReceived forgets the state of cluster name: its new owner received it
	// whole. It reports whether the state was kept.
	HandoverReceived(name string) bool
}

// StateSubresource is the subresource of a Cluster under which its handed-over state is
// served: GET /apis/fleetwatch.io/v1alpha1/clusters/{name}/state. Only a client that
// the home cluster allows "get" on "clusters/state" of GroupName in
// DelegatedAuth.StateNamespace (the replicas' Role does; see deploy/components/sharded)
// may read it, through delegated authentication: it holds whole objects of the
// cluster.
const StateSubresource = "state"

// StatePath returns the path of cluster name's handed-over state. A GET reads it; a
// DELETE, by a client that may read it, acknowledges it: the new owner received it
// whole, and this replica forgets it.
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
	src, err := s.stateSource(r, name)
	if err != nil {
		return err
	}
	if r.Method == http.MethodDelete {
		if !src.HandoverReceived(name) {
			return notFound(stateGR, name)
		}
		writeJSON(w, http.StatusOK, &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusSuccess, Details: &metav1.StatusDetails{Name: name, Group: GroupName, Kind: stateGR.Resource}})
		return nil
	}
	state, found := src.HandoverState(name)
	if !found {
		return notFound(stateGR, name)
	}
	writeBody(w, http.StatusOK, "application/octet-stream", state)
	return nil
}

// stateSource returns the StateSource of the state of cluster name, if the client of
// r may read it. The acknowledgement (a DELETE) needs what a read needs: who may read
// the state could always make its new owner start cold by taking it first.
func (s *Server) stateSource(r *http.Request, name string) (StateSource, error) {
	p := principalFrom(r)
	denied := apierrors.NewForbidden(stateGR, name, fmt.Errorf("only the replicas of a sharded fleet may read the state of a cluster handed over"))
	if p == nil || p.access == nil {
		return nil, denied
	}
	ok, err := p.access.handover(r.Context(), name)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, denied
	}
	src, isState := s.src.(StateSource)
	if !isState {
		return nil, notFound(stateGR, name)
	}
	return src, nil
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
