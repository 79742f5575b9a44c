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
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/history"
)

// HistorySource is a Source that keeps a change log, whose changes and objects'
// histories the server serves (docs/history.md). *fleetwatch.Manager implements it. A
// Source without it, or whose History fails (the log is off), has the paths of the
// history answered with 404 NotFound, saying why.
type HistorySource interface {
	// History returns the reader of the change log. It is called at each request.
	History() (*history.Log, error)
}

// The history's endpoints in GroupName: the changes across the fleet (or a cluster),
// and one object's history, under its cluster's prefix.
const (
	changesResource = "changes"
	historyResource = "history"
)

var (
	changesGR = schema.GroupResource{Group: GroupName, Resource: changesResource}
	historyGR = schema.GroupResource{Group: GroupName, Resource: historyResource}
)

// maxHistoryTokenLen bounds a history's continue token: it holds a digest and a number.
const maxHistoryTokenLen = 256

// serveHistory serves the history's endpoints, rt's resource: changes (of every cluster
// outside /clusters/), and an object's history (under a cluster's prefix only).
func (s *Server) serveHistory(w http.ResponseWriter, r *http.Request, rt route, sc scope, info *requestInfo) error {
	if rt.resource == historyResource {
		info.resource, info.verb = historyGR.String(), "get"
		if rt.cluster == "" {
			return notFoundPath(r.URL.EscapedPath())
		}
		return s.serveObjectHistory(w, r, sc)
	}
	info.resource, info.verb = changesGR.String(), "list"
	if rt.cluster == "" {
		// Every cluster, as under /clusters/*/, and so, forwarded, this replica's own
		// only.
		sc.cluster = allClusters
		if forwarded(r) {
			sc.allow = s.ownedOnly(sc.allow)
		}
	}
	return s.serveChanges(w, r, sc)
}

// historyLog returns the Source's change log, or the 404 Status of a server without one.
func (s *Server) historyLog(gr schema.GroupResource) (*history.Log, error) {
	hs, ok := s.src.(HistorySource)
	var err error = errors.New("the fleet keeps no change log")
	if ok {
		var log *history.Log
		if log, err = hs.History(); err == nil {
			return log, nil
		}
	}
	se := apierrors.NewNotFound(gr, "")
	se.ErrStatus.Message = fmt.Sprintf("the history API is off: %v: set history.enabled in the daemon's config, with a snapshot (docs/history.md)", err)
	return nil, se
}

// serveChanges answers a page of the changes of the clusters of sc (Server.authorize
// decided them): no change of another cluster is returned, whatever the query. In a
// sharded fleet, each replica's log holds the changes of the clusters it watched: a
// request of every cluster is answered with this replica's own, and a Warning names
// the clusters that other replicas watch, whose changes their own prefix serves
// (/clusters/{name}/... is proxied to the owner).
func (s *Server) serveChanges(w http.ResponseWriter, r *http.Request, sc scope) error {
	log, err := s.historyLog(changesGR)
	if err != nil {
		return err
	}
	req, digest, err := parseChanges(r.URL.Query(), sc.cluster, s.clock.Now())
	if err != nil {
		return err
	}
	req.Allow = sc.includes
	if !sc.all() {
		req.Cluster = sc.cluster
	}
	peers, missing := s.fanOut(r, sc, nil)
	if len(peers) > 0 || len(missing) > 0 {
		allow := s.ownedOnly(sc.allow)
		req.Allow = func(cl string) bool { return sc.includes(cl) && allow(cl) }
		for _, id := range slices.Sorted(maps.Keys(peers)) {
			missing = appendClusters(missing, peers[id], fmt.Sprintf("replica %q watches it: its changes are under its own /clusters/ prefix", id))
		}
	}
	req.Kinds = make(map[schema.GroupVersionResource]string)
	for gvr, res := range s.catalog(sc).resources {
		req.Kinds[gvr] = res.kind
	}
	req.ShortNames = shortNames
	page, err := log.Changes(req)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading the change log: %w", err))
	}
	release, err := s.limits.admitList(len(page.Items))
	if err != nil {
		return err
	}
	defer release()
	out := &v1alpha1.ChangeList{
		TypeMeta: metav1.TypeMeta{Kind: "ChangeList", APIVersion: SchemeGroupVersion.String()},
		Items:    page.Items,
	}
	if page.Next != 0 {
		out.Metadata.Continue = historyContinue{Digest: digest, After: page.Next}.String()
	}
	warnNotIncluded(w, missing)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseChanges reads the parameters of a request of changes in the scope of cluster:
// the query (q and the parameters that add terms), since, after, type, limit and
// continue. A bad one gets a 400 Status that names it. digest identifies the request in
// its continue tokens.
func parseChanges(q url.Values, cluster string, now time.Time) (req history.ChangesRequest, digest string, err error) {
	if req.Query, err = parseQuery(q); err != nil {
		return req, "", err
	}
	if v := q.Get("since"); v != "" {
		if req.Since, err = parseSince(v, now); err != nil {
			return req, "", badParameter("since", err)
		}
	}
	if v := q.Get("after"); v != "" {
		if req.After, err = strconv.ParseUint(v, 10, 64); err != nil {
			return req, "", badParameter("after", fmt.Errorf("%q is not a sequence number (a change's seq)", v))
		}
	}
	var types []string
	for _, v := range q["type"] {
		for t := range strings.SplitSeq(v, ",") {
			typ, ok := history.ParseType(t)
			if !ok {
				return req, "", badParameter("type", fmt.Errorf("unknown change type %q: use Added, Modified, Deleted, Vanished, ResourceReset, ClusterRemoved, ClusterReplaced or Lost", t))
			}
			req.Types = append(req.Types, typ)
			types = append(types, t)
		}
	}
	if req.Limit, err = parseLimit(q, history.DefaultLimit, history.MaxLimit); err != nil {
		return req, "", err
	}
	// Since and after are those of the first page, by their text: a since relative to
	// now moves from page to page, and the token, not it, says where a page starts.
	digest = tokenDigest("changes", cluster, req.Query.String(), strings.Join(types, ","), q.Get("since"), q.Get("after"))
	if v := q.Get("continue"); v != "" {
		after, err := parseHistoryContinue(v, digest)
		if err != nil {
			return req, "", badParameter("continue", err)
		}
		req.Since, req.After = time.Time{}, after
	}
	return req, digest, nil
}

// parseSince reads a since parameter: a time in RFC 3339 (2026-12-01T10:00:00Z), or a
// positive duration before now (90s, 15m, 1h).
func parseSince(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is neither a time in RFC 3339 (2026-12-01T10:00:00Z) nor a positive duration before now (15m, 1h)", v)
	}
	return now.Add(-d), nil
}

// serveObjectHistory answers a page of the history of one object of cluster, which sc
// names (Server.authorize decided that the client may read it).
func (s *Server) serveObjectHistory(w http.ResponseWriter, r *http.Request, sc scope) error {
	if sc.all() {
		return badParameter("cluster", errors.New("an object's history is of one cluster: ask under /clusters/{cluster}/, not /clusters/*/"))
	}
	log, err := s.historyLog(historyGR)
	if err != nil {
		return err
	}
	req, digest, err := parseObjectHistory(r.URL.Query(), sc.cluster)
	if err != nil {
		return err
	}
	page, err := log.Object(req)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading the change log: %w", err))
	}
	release, err := s.limits.admitList(len(page.Steps))
	if err != nil {
		return err
	}
	defer release()
	out := &v1alpha1.ObjectHistory{
		TypeMeta: metav1.TypeMeta{Kind: "ObjectHistory", APIVersion: SchemeGroupVersion.String()},
		Object: v1alpha1.ObjectReference{
			Cluster: sc.cluster, Group: req.Resource.Group, Version: req.Resource.Version, Resource: req.Resource.Resource,
			Kind: page.Kind, Namespace: req.Namespace, Name: req.Name,
		},
		Items: page.Steps,
	}
	if page.Next != 0 {
		out.Metadata.Continue = historyContinue{Digest: digest, After: page.Next}.String()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseObjectHistory reads the parameters of an object's history in cluster: group,
// version, resource, namespace and name, limit and continue. A bad one gets a 400
// Status that names it.
func parseObjectHistory(q url.Values, cluster string) (req history.ObjectRequest, digest string, err error) {
	req.Cluster = cluster
	req.Resource = schema.GroupVersionResource{Group: q.Get("group"), Version: q.Get("version"), Resource: q.Get("resource")}
	req.Namespace, req.Name = q.Get("namespace"), q.Get("name")
	for _, p := range []struct {
		name, value string
		required    bool
	}{
		{"group", req.Resource.Group, false}, {"version", req.Resource.Version, true}, {"resource", req.Resource.Resource, true},
		{"namespace", req.Namespace, false}, {"name", req.Name, true},
	} {
		switch {
		case p.value == "" && p.required:
			return req, "", badParameter(p.name, errors.New("required: the object's group (empty for the core group), version, resource, namespace (empty for a cluster-scoped object) and name"))
		case p.value == "":
		case len(p.value) > 253 || strings.ContainsFunc(p.value, func(r rune) bool { return r == '/' || r < ' ' || r == 0x7f }):
			return req, "", badParameter(p.name, fmt.Errorf("%q is not a valid %s", p.value, p.name))
		}
	}
	if req.Limit, err = parseLimit(q, history.DefaultLimit, history.MaxLimit); err != nil {
		return req, "", err
	}
	digest = tokenDigest("history", cluster, req.Resource.String(), req.Namespace, req.Name)
	if v := q.Get("continue"); v != "" {
		if req.After, err = parseHistoryContinue(v, digest); err != nil {
			return req, "", badParameter("continue", err)
		}
	}
	return req, digest, nil
}

// tokenDigest identifies a request in its continue tokens, so that a token is refused
// by any other request: its parts, each with its length, hashed.
func tokenDigest(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// historyContinue is the continue token of the changes and of an object's history: its
// request's digest and the sequence number after which the next page starts, as
// base64url (no padding) of its compact JSON.
type historyContinue struct {
	Digest string `json:"q"`
	After  uint64 `json:"a"`
}

func (t historyContinue) String() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("encode history continue token: %v", err)) // a string and a number always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseHistoryContinue(s, digest string) (uint64, error) {
	if len(s) > maxHistoryTokenLen {
		return 0, fmt.Errorf("longer than %d bytes", maxHistoryTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, errors.New("not a continue token handed out by this server (not base64url)")
	}
	var t historyContinue
	if err := decodeStrict(b, &t); err != nil {
		return 0, fmt.Errorf("not a continue token handed out by this server: %w", err)
	}
	if t.Digest != digest {
		return 0, errors.New("the token is of another request: send the same parameters with it")
	}
	if t.After == 0 {
		return 0, errors.New("not a continue token handed out by this server: no position")
	}
	return t.After, nil
}
