package server

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
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

// maxHistoryTokenLen bounds a history's continue token, and a position in a sharded
// fleet's changes: they hold a digest, a time and, per replica, its identity, its log's
// and a number, about 60 bytes a replica once encoded.
const maxHistoryTokenLen = 64 << 10

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

// historyLog returns the Source's change log and its identity (history.Log.ID), or the
// 404 Status of a server without one.
func (s *Server) historyLog(gr schema.GroupResource) (*history.Log, string, error) {
	hs, ok := s.src.(HistorySource)
	var err error = errors.New("the fleet keeps no change log")
	if ok {
		var log *history.Log
		if log, err = hs.History(); err == nil {
			id, err := log.ID()
			if err != nil {
				return nil, "", apierrors.NewInternalError(fmt.Errorf("reading the change log: %w", err))
			}
			return log, id, nil
		}
	}
	se := apierrors.NewNotFound(gr, "")
	se.ErrStatus.Message = fmt.Sprintf("the history API is off: %v: set history.enabled in the daemon's config, with a snapshot (docs/history.md)", err)
	return nil, "", se
}

// serveChanges answers a page of the changes of the clusters of sc (Server.authorize
// decided them): no change of another cluster is returned, whatever the query. A
// request of every cluster of a sharded fleet is answered for the whole fleet, from the
// log of every replica that owns clusters of sc (serveFleetChanges); any other, from
// this replica's log.
func (s *Server) serveChanges(w http.ResponseWriter, r *http.Request, sc scope) error {
	log, logID, err := s.historyLog(changesGR)
	if err != nil {
		return err
	}
	fleet := s.opts.Replica != "" && mayFanOut(r, sc)
	req, err := parseChanges(r.URL.Query(), sc.cluster, s.clock.Now(), fleet, logID)
	if err != nil {
		return err
	}
	req.Allow = sc.includes
	if !sc.all() {
		req.Cluster = sc.cluster
	}
	req.Kinds = make(map[schema.GroupVersionResource]string)
	for gvr, res := range s.catalog(sc).resources {
		req.Kinds[gvr] = res.kind
	}
	req.ShortNames = shortNames
	if fleet {
		return s.serveFleetChanges(w, r, sc, log, logID, req)
	}
	if forwarded(r) {
		// The replica that asks places its position in this log.
		w.Header().Set(changeLogHeader, logID)
	}
	page, err := s.localChanges(log, req.ChangesRequest)
	if err != nil {
		return err
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
	// The position after the page: the next page's start, or the last change read.
	pos := page.Next
	if pos == 0 && len(page.Items) > 0 {
		pos = page.Items[len(page.Items)-1].Seq
	}
	if pos = max(pos, req.After); pos != 0 {
		out.Metadata.ResourceVersion = strconv.FormatUint(pos, 10)
	}
	if page.Next != 0 {
		out.Metadata.Continue = historyContinue{Digest: req.digest, After: page.Next, Log: logID}.String()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// localChanges reads a page of changes from this replica's log, each change naming
// the replica (Options.Replica).
func (s *Server) localChanges(log *history.Log, req history.ChangesRequest) (*history.ChangesPage, error) {
	page, err := log.Changes(req)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading the change log: %w", err))
	}
	for i := range page.Items {
		page.Items[i].Replica = s.opts.Replica
	}
	return page, nil
}

// changesRequest is a request of changes as its parameters ask it.
type changesRequest struct {
	// ChangesRequest is the request of this replica's log, but for a fleet's: Since is
	// zero on a page after the first (the token says where it starts), and After is
	// the position of a request that reads one log.
	history.ChangesRequest
	// digest identifies the request in its continue tokens.
	digest string
	// positions are, for a request of a sharded fleet's changes, where each replica's
	// log is read after, from after or continue; a replica absent from them is read
	// from floor.
	positions changesPosition
	// floor is the first page's since: where a replica's log that positions do not
	// place is read from.
	floor time.Time
}

// parseChanges reads the parameters of a request of changes in the scope of cluster:
// the query (q and the parameters that add terms), since, after, type, limit and
// continue. fleet is set for a request of a sharded fleet's changes (whose positions
// are of every replica's log), else logID is the identity of the log it reads. A bad
// parameter gets a 400 Status that names it; the token of another log, 410 Gone.
func parseChanges(q url.Values, cluster string, now time.Time, fleet bool, logID string) (*changesRequest, error) {
	req := &changesRequest{}
	var err error
	if req.Query, err = parseQuery(q); err != nil {
		return nil, err
	}
	if v := q.Get("since"); v != "" {
		if req.Since, err = parseSince(v, now); err != nil {
			return nil, badParameter("since", err)
		}
	}
	req.floor = req.Since
	if v := q.Get("after"); v != "" {
		seq, err := strconv.ParseUint(v, 10, 64)
		switch {
		case fleet && err == nil:
			return nil, badParameter("after", fmt.Errorf("%q is a seq of one replica's log: the changes of every cluster of a sharded fleet are read after a position of every replica's log, a ChangeList's metadata.resourceVersion", v))
		case fleet:
			if req.positions, err = parseChangesPosition(v); err != nil {
				return nil, badParameter("after", err)
			}
		case err != nil:
			return nil, badParameter("after", fmt.Errorf("%q is not a sequence number (a change's seq, or a ChangeList's metadata.resourceVersion)", v))
		default:
			req.After = seq
		}
	}
	var types []string
	for _, v := range q["type"] {
		for t := range strings.SplitSeq(v, ",") {
			typ, ok := history.ParseType(t)
			if !ok {
				return nil, badParameter("type", fmt.Errorf("unknown change type %q: use Added, Modified, Deleted, Vanished, ResourceReset, ClusterRemoved, ClusterReplaced or Lost", t))
			}
			req.Types = append(req.Types, typ)
			types = append(types, t)
		}
	}
	if req.Limit, err = parseLimit(q, history.DefaultLimit, history.MaxLimit); err != nil {
		return nil, err
	}
	// Since and after are those of the first page, by their text: a since relative to
	// now moves from page to page, and the token, not it, says where a page starts.
	req.digest = tokenDigest("changes", cluster, req.Query.String(), strings.Join(types, ","), q.Get("since"), q.Get("after"))
	if v := q.Get("continue"); v != "" {
		t, err := parseHistoryContinue(v, req.digest, fleet, logID)
		if err != nil {
			return nil, err
		}
		req.Since, req.After, req.positions = time.Time{}, t.After, t.Parts
		if t.Since != "" {
			// Checked by parseHistoryContinue.
			req.floor, _ = time.Parse(time.RFC3339Nano, t.Since)
		}
	}
	return req, nil
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
	log, logID, err := s.historyLog(historyGR)
	if err != nil {
		return err
	}
	req, digest, err := parseObjectHistory(r.URL.Query(), sc.cluster, logID)
	if err != nil {
		return err
	}
	page, err := log.Object(req)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading the change log: %w", err))
	}
	for i := range page.Steps {
		page.Steps[i].Replica = s.opts.Replica
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
		out.Metadata.Continue = historyContinue{Digest: digest, After: page.Next, Log: logID}.String()
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// parseObjectHistory reads the parameters of an object's history in cluster: group,
// version, resource, namespace and name, limit and continue. A bad one gets a 400
// Status that names it; the token of another log than logID's, 410 Gone.
func parseObjectHistory(q url.Values, cluster, logID string) (req history.ObjectRequest, digest string, err error) {
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
		t, err := parseHistoryContinue(v, digest, false, logID)
		if err != nil {
			return req, "", err
		}
		req.After = t.After
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
// request's digest and where the next page starts, as base64url (no padding) of its
// compact JSON. Of a request that reads one log, that is a sequence number of the log
// (After) and the log's identity (history.Log.ID); of a request of a
// sharded fleet's changes, a position of every replica's log (Parts) and the first
// page's since, which the logs of replicas absent from Parts are read from.
type historyContinue struct {
	Digest string          `json:"q"`
	After  uint64          `json:"a,omitempty"`
	Log    string          `json:"l,omitempty"`
	Parts  changesPosition `json:"p,omitempty"`
	Since  string          `json:"s,omitempty"`
}

func (t historyContinue) String() string {
	b, err := json.Marshal(t)
	if err != nil {
		panic(fmt.Sprintf("encode history continue token: %v", err)) // strings and numbers always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeHistoryContinue decodes a continue token of the history, without checking
// that it is of the request.
func decodeHistoryContinue(s string) (historyContinue, error) {
	var t historyContinue
	if len(s) > maxHistoryTokenLen {
		return t, fmt.Errorf("longer than %d bytes", maxHistoryTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return t, errors.New("not a continue token handed out by this server (not base64url)")
	}
	if err := decodeStrict(b, &t); err != nil {
		return t, fmt.Errorf("not a continue token handed out by this server: %w", err)
	}
	return t, nil
}

// parseHistoryContinue reads the continue token s of the request of digest: of a sharded
// fleet's changes if fleet is set, else of the log whose identity is logID. A token that
// is not one, or of another request, gets a 400 Status naming continue; one of another
// log (the cluster moved to another replica since, or the snapshot's file was
// replaced), 410 Gone.
func parseHistoryContinue(s, digest string, fleet bool, logID string) (historyContinue, error) {
	t, err := decodeHistoryContinue(s)
	switch {
	case err != nil:
		return t, badParameter("continue", err)
	case t.Digest != digest:
		return t, badParameter("continue", errors.New("the token is of another request: send the same parameters with it"))
	case fleet && (t.Parts.check() != nil || t.After != 0 || t.Log != ""):
		return t, badParameter("continue", errors.New("not a continue token of the changes of every cluster of this sharded fleet: no position of its replicas' logs"))
	case !fleet && (t.After == 0 || len(t.Parts) > 0 || t.Since != ""):
		return t, badParameter("continue", errors.New("not a continue token handed out by this server: no position"))
	case !fleet && t.Log != logID:
		return t, expired("the continue token is a position in another change log than the one this replica keeps: the cluster moved to another replica since, or the snapshot's file was replaced; start from the first page")
	}
	if t.Since != "" {
		if _, err := time.Parse(time.RFC3339Nano, t.Since); err != nil {
			return t, badParameter("continue", errors.New("not a continue token handed out by this server: its since is not a time"))
		}
	}
	return t, nil
}
