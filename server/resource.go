package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// primeWait bounds how long a request waits for the watch cache to catch up with the
// fleet after the server was created, before it is answered 503 with Retry-After.
const primeWait = 5 * time.Second

// waitPrimed waits until the watch cache has caught up with the fleet once.
func (s *Server) waitPrimed(ctx context.Context) error {
	select {
	case <-s.cache.primed:
		return nil
	default:
	}
	t := time.NewTimer(primeWait)
	defer t.Stop()
	select {
	case <-s.cache.primed:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	se := apierrors.NewServiceUnavailable("the server's cache of the fleet is initializing")
	se.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return se
}

// waitIndexed waits until the watch cache is primed, bounded as waitPrimed, and then
// until the search index has caught up with it: it builds the index if the fleet was not
// ready yet (watchCache.indexWhenReady), or waits for the build in progress.
func (s *Server) waitIndexed(ctx context.Context) error {
	if err := s.waitPrimed(ctx); err != nil {
		return err
	}
	select {
	case <-s.cache.indexed:
	default:
		s.cache.buildIndex()
	}
	return nil
}

// serveResource serves a collection or an object of a cached resource: get, list or
// watch.
func (s *Server) serveResource(w http.ResponseWriter, r *http.Request, rt route, sc scope, c *catalog, info *requestInfo) error {
	gvr := schema.GroupVersionResource{Group: rt.group, Version: rt.version, Resource: rt.resource}
	res := c.get(gvr)
	switch {
	case res == nil:
		return notFound(gvr.GroupResource(), "")
	case rt.subresource != "":
		return notFound(schema.GroupResource{Group: gvr.Group, Resource: gvr.Resource + "/" + rt.subresource}, "")
	case rt.hasNamespace && !res.namespaced:
		return notFound(gvr.GroupResource(), "")
	case rt.hasName && res.namespaced && !rt.hasNamespace:
		return notFound(gvr.GroupResource(), rt.name)
	}
	info.resource = gvr.GroupResource().String()
	q := r.URL.Query()
	watching, err := parseBool(q, "watch")
	if err != nil {
		return err
	}
	if rt.hasName && !watching {
		info.verb = "get"
		if err := s.waitPrimed(r.Context()); err != nil {
			return err
		}
		return s.serveGet(w, r, res, sc, rt.namespace, rt.name)
	}
	p, err := parseListParams(q, false)
	if err != nil {
		return err
	}
	qr := &query{scope: sc, namespace: rt.namespace, codec: s.cache.codec}
	if qr.labels, err = parseLabelSelector(p.labelSelector); err != nil {
		return err
	}
	if qr.fields, err = parseFieldSelector(p.fieldSelector, gvr.GroupResource()); err != nil {
		return err
	}
	if rt.hasName {
		// A watch of one object by its path, as the apiserver allows it.
		qr.fields = append(qr.fields, fieldRequirement{field: "metadata.name", value: rt.name, equal: true})
	}
	if err := s.waitPrimed(r.Context()); err != nil {
		return err
	}
	if p.watch {
		info.verb = "watch"
		// Read before the parts are chosen, so that a move after it ends the watch.
		var placed placedAs
		if mayFanOut(r, qr.scope) {
			var err error
			if placed, err = s.waitMoves(r.Context(), p.resourceVersion, qr.scope); err != nil {
				return err
			}
		}
		if peers, missing := s.fanOut(r, qr.scope, res); len(peers) > 0 || len(missing) > 0 {
			return s.serveFanOutWatch(w, r, p, qr.scope, placed, peers, missing)
		}
		return s.serveWatch(w, r, res, qr, p)
	}
	info.verb = "list"
	return s.serveList(w, r, res, qr, p)
}

// serveGet serves one object. In the scope of every cluster, the object is looked up in
// every cluster: if more than one has it, the request is ambiguous (409 Conflict), since
// answering with one of them would hide the others.
func (s *Server) serveGet(w http.ResponseWriter, r *http.Request, res *apiResource, sc scope, namespace, name string) error {
	f, ok := negotiate(r.Header.Get("Accept"), false, formatTable, formatPartial)
	if !ok {
		return notAcceptable(fmt.Sprintf("%s is served as application/json, a meta.k8s.io/v1 Table or PartialObjectMetadata", res.gvr.GroupResource()))
	}
	var opts tableOptions
	if f == formatTable {
		var err error
		if opts, err = parseTableOptions(r.URL.Query()); err != nil {
			return err
		}
	}
	rc := s.cache.resource(res.gvr)
	rc.mu.RLock()
	found := rc.getLocked(sc, namespace, name)
	rc.mu.RUnlock()
	switch len(found) {
	case 0:
		return notFound(res.gvr.GroupResource(), name)
	case 1:
	default:
		return ambiguous(res, name, found)
	}
	switch f {
	case formatTable:
		writeJSON(w, http.StatusOK, s.table(r.Context(), res, found, opts, metav1.ListMeta{}, true, ""))
	case formatPartial:
		writeJSON(w, http.StatusOK, partial(found[0], ""))
	default:
		writeJSON(w, http.StatusOK, served(res, found[0], ""))
	}
	return nil
}

func ambiguous(res *apiResource, name string, found []object) error {
	clusters := make([]string, len(found))
	causes := make([]metav1.StatusCause, len(found))
	for i, o := range found {
		clusters[i] = fmt.Sprintf("%q", o.cluster)
		causes[i] = metav1.StatusCause{
			Type:    metav1.CauseTypeFieldValueDuplicate,
			Field:   "metadata.annotations[" + ClusterAnnotation + "]",
			Message: o.cluster,
		}
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusConflict,
		Reason: metav1.StatusReasonConflict,
		Message: fmt.Sprintf("%s %q is in more than one cluster (%s): get it from one cluster under /clusters/{cluster}/, or list it with fieldSelector=metadata.name=%s",
			res.gvr.GroupResource(), name, strings.Join(clusters, ", "), name),
		Details: &metav1.StatusDetails{
			Name:   name,
			Group:  res.gvr.Group,
			Kind:   res.gvr.Resource,
			Causes: causes,
		},
	}}
}

// serveList serves a list, one page of it if limit is set.
//
// Each page is read from the current state, in (cluster, namespace, name) order, and
// continues after the last key of the page before: an object present from the first page
// to the last is returned exactly once, one created or deleted meanwhile may or may not
// be. Every page reports the resourceVersion of the first, so that a watch from it
// misses nothing that happened during the paging.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request, res *apiResource, qr *query, p *listParams) error {
	f, ok := negotiate(r.Header.Get("Accept"), true, formatTable, formatPartial)
	if !ok {
		return notAcceptable(fmt.Sprintf("%s is served as application/json, a meta.k8s.io/v1 Table or PartialObjectMetadataList", res.gvr.GroupResource()))
	}
	var opts tableOptions
	if f == formatTable {
		var err error
		if opts, err = parseTableOptions(r.URL.Query()); err != nil {
			return err
		}
	}
	want, _, foreign, err := resolveResourceVersion(p.resourceVersion, s.cache, qr.scope)
	if err != nil {
		return err
	}
	if peers, missing := s.fanOut(r, qr.scope, res); len(peers) > 0 || len(missing) > 0 {
		if p.rvMatch == metav1.ResourceVersionMatchExact {
			return expired(fmt.Sprintf("resourceVersion %s: a list of every cluster of a sharded fleet is of the current state only; list without resourceVersionMatch=Exact", p.resourceVersion))
		}
		return s.serveFanOutList(w, r, res, qr, p, f, opts, peers, missing)
	}
	var after *aggregate.Key
	if p.continueToken != nil {
		after = &p.continueToken.after
	}
	limit := int(min(p.limit, math.MaxInt32))

	rc := s.cache.resource(res.gvr)
	rc.mu.RLock()
	current := rc.listCursorLocked(s.cache, qr.scope)
	if p.rvMatch == metav1.ResourceVersionMatchExact && (foreign || !rc.currentLocked(s.cache, want, qr.scope)) {
		rc.mu.RUnlock()
		return expired(fmt.Sprintf("resourceVersion %s: only the current state is kept, at resourceVersion %s; list without resourceVersionMatch=Exact", p.resourceVersion, current))
	}
	found := rc.listLocked(qr, after, limit)
	rc.mu.RUnlock()
	items, more := found.items()
	release, err := s.limits.admitList(len(items))
	if err != nil {
		return err
	}
	defer release()

	lm := metav1.ListMeta{ResourceVersion: current.String()}
	if p.continueToken != nil {
		lm.ResourceVersion = p.continueToken.resourceVersion
	}
	if more {
		last := items[len(items)-1]
		m := mustAccessor(last.obj)
		lm.Continue = continueToken{
			resourceVersion: lm.ResourceVersion,
			after:           aggregate.Key{Cluster: last.cluster, Namespace: m.GetNamespace(), Name: m.GetName()},
		}.String()
	}

	return s.writeListAs(w, r, res, f, opts, lm, items)
}

// writeListAs writes items as a list in the format f.
func (s *Server) writeListAs(w http.ResponseWriter, r *http.Request, res *apiResource, f format, opts tableOptions, lm metav1.ListMeta, items []object) error {
	switch f {
	case formatTable:
		p := s.printer(r.Context(), res, items, opts)
		return writeList(w, r, p.table(lm, true), len(items), func(i int) any {
			return p.row(items[i], "")
		})
	case formatPartial:
		return writeList(w, r, newListHead(partialGVK.GroupVersion().WithKind("PartialObjectMetadataList"), lm), len(items), func(i int) any {
			return partial(items[i], "")
		})
	default:
		return writeList(w, r, newListHead(res.gvr.GroupVersion().WithKind(res.listKind()), lm), len(items), func(i int) any {
			return served(res, items[i], "")
		})
	}
}

// listHead is a list of Kubernetes objects without its items, which writeList streams.
type listHead struct {
	Kind       string          `json:"kind"`
	APIVersion string          `json:"apiVersion"`
	Metadata   metav1.ListMeta `json:"metadata"`
	Items      []struct{}      `json:"items"`
}

func newListHead(gvk schema.GroupVersionKind, lm metav1.ListMeta) *listHead {
	return &listHead{Kind: gvk.Kind, APIVersion: gvk.GroupVersion().String(), Metadata: lm, Items: []struct{}{}}
}

// writeList streams a list: head is the list with its items (or a Table with its rows),
// the last field, empty; the n items are encoded one at a time into its brackets. The
// body is what json.Marshal makes of the whole list, and a newline, but the response
// costs the memory of a buffer and of one item, however long the list: this is what
// makes Options.MaxRequestsInFlight bound the memory spent on responses.
//
// If the client goes away, encoding stops at once, and the request ends, which frees
// its place under the limit.
func writeList(w http.ResponseWriter, r *http.Request, head any, n int, item func(i int) any) error {
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	if !bytes.HasSuffix(b, []byte("[]}")) {
		return fmt.Errorf("the JSON of a list head, %T, does not end with its empty items: %.100s", head, b)
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ctx := r.Context()
	bw := bufio.NewWriterSize(w, 64<<10)
	_, _ = bw.Write(b[:len(b)-2])
	sent := 0
	var buf []byte
	for ; sent < n && ctx.Err() == nil; sent++ {
		var err error
		buf, err = appendItem(buf[:0], item(sent))
		if err != nil {
			// The headers are sent: nothing left but to cut the response short.
			klog.FromContext(ctx).Error(err, "Cannot encode a list item; response cut short", "head", fmt.Sprintf("%T", head))
			panic(http.ErrAbortHandler)
		}
		if sent > 0 {
			_ = bw.WriteByte(',')
		}
		if _, err := bw.Write(buf); err != nil {
			break
		}
	}
	if sent < n {
		klog.FromContext(ctx).V(4).Info("Client went away during a list", "path", r.URL.Path, "items", n, "sent", sent)
		return nil
	}
	_, _ = bw.WriteString("]}\n")
	_ = bw.Flush()
	return nil
}

// appendItem appends json.Marshal(v) to b. An *unstructured.Unstructured, most of what
// lists serve, is written by appendJSON from its map, which gives the same bytes as its
// MarshalJSON with far fewer allocations; an object of a compact fleet, from its
// encoding (compact.go).
func appendItem(b []byte, v any) ([]byte, error) {
	if u, ok := v.(*unstructured.Unstructured); ok && u.Object != nil {
		return appendJSON(b, u.Object)
	}
	if e, ok := v.(*encodedServed); ok {
		return e.appendJSON(b)
	}
	raw, err := json.Marshal(v)
	return append(b, raw...), err
}
