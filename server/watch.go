package server

import (
	"bufio"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
)

// watchBatch is how many changes a watch takes from the history under one lock.
const watchBatch = 256

// serveWatch serves a watch with the Kubernetes framing: one JSON metav1.WatchEvent per
// line.
//
// Where it starts:
//   - resourceVersion "" or "0" (without sendInitialEvents), or sendInitialEvents=true:
//     the current state as ADDED events, then the changes after it. With
//     sendInitialEvents=true, a BOOKMARK annotated k8s.io/initial-events-end follows
//     the current state, as client-go's streaming lists expect.
//   - a cursor (the resourceVersion of a list, an event or a bookmark): the changes after
//     it, from the history; 410 Gone if the history no longer reaches back to it for
//     some cluster, or if it is not from this server's watch cache. A cursor of an
//     earlier run of the server over the same change log resumes too, from the log up to
//     where the snapshot was loaded (resume.go).
//   - sendInitialEvents=false without resourceVersion: the changes from now on.
//
// Streaming lists (sendInitialEvents=true) are refused in the scope of every cluster,
// with 400: client-go would merge objects of different clusters (see below), and falls
// back to a list when a streaming list is refused.
//
// The resourceVersion of every object sent is the cursor just after its event, so a
// client resumes where it stopped, as a reflector does; the object's resourceVersion in
// its cluster is kept in ResourceVersionAnnotation. Changes to objects that the
// selectors do not match move the cursor too, as bookmarks show. An object that starts
// to match is sent as ADDED, one that stops matching as DELETED.
func (s *Server) serveWatch(w http.ResponseWriter, r *http.Request, res *apiResource, qr *query, p *listParams) error {
	f, ok := negotiate(r.Header.Get("Accept"), false, formatTable, formatPartial)
	if !ok {
		return notAcceptable(fmt.Sprintf("watches of %s are served as application/json, a meta.k8s.io/v1 Table or PartialObjectMetadata", res.gvr.GroupResource()))
	}
	var opts tableOptions
	if f == formatTable {
		var err error
		if opts, err = parseTableOptions(r.URL.Query()); err != nil {
			return err
		}
	}
	from, zero, foreign, err := resolveResourceVersion(p.resourceVersion, s.cache, qr.scope)
	if err != nil {
		return err
	}
	if p.sendInitialEvents != nil && *p.sendInitialEvents && qr.scope.all() {
		// client-go collects a streaming list in a store keyed by namespace and name,
		// where objects of different clusters would overwrite each other. Refusing makes
		// reflectors fall back to a list, into their own store.
		return badParameter("sendInitialEvents", errors.New("streaming lists are not served for every cluster (/clusters/*/): "+
			"objects of different clusters can have the same namespace and name, which client-go would merge; list instead"))
	}
	initial := p.sendInitialEvents != nil && *p.sendInitialEvents || p.sendInitialEvents == nil && zero
	if foreign && !initial {
		if cl := s.cache.unplaced(from); cl != "" {
			return expired(fmt.Sprintf("too old resource version: %s: the position of cluster %q is of another run or replica of the server, "+
				"whose change log this one does not hold (it started without one, or the cluster moved here without it); list again", p.resourceVersion, cl))
		}
		return expired(fmt.Sprintf("too old resource version: %s is not a resourceVersion of this server's view of the fleet "+
			"(it is a cluster's own, or from before the server started); list again", p.resourceVersion))
	}
	if !initial && !zero && s.cache.fromLog(from) {
		if err := s.cache.waitLoaded(r.Context()); err != nil {
			return err
		}
	}

	rc := s.cache.resource(res.gvr)
	ws := &watchStream{s: s, res: res, rc: rc, query: qr, format: f, opts: opts, positions: map[string]position{}}
	if f == formatTable {
		// The columns are decided once: every row of the stream must have them.
		ws.printer = s.printerIn(r.Context(), res, s.scopeClusters(qr.scope), false, opts)
	}
	var initialItems listing
	var gaps []logGap
	rc.mu.RLock()
	switch {
	case initial || zero:
		if initial {
			initialItems = rc.listLocked(qr, nil, 0)
		}
		if ws.short = s.cache.shortFor(qr.scope); !ws.short {
			ws.startAt(rc.cursorLocked(s.cache, qr.scope).positions)
		}
		ws.next = rc.nextSeq
	case from.short:
		if err = rc.checkShortLocked(from, qr.scope); err != nil {
			err = expired(fmt.Sprintf("too old resource version: %s: %v; list again", p.resourceVersion, err))
			break
		}
		ws.short, ws.next = true, from.seq
	default:
		gaps, err = ws.resumeLocked(rc, from, p.resourceVersion)
	}
	rc.mu.RUnlock()
	if err != nil {
		return err
	}
	if err := s.cache.readGaps(r.Context(), res.gvr, gaps); err != nil {
		return expired(fmt.Sprintf("too old resource version: %s: %v; list again", p.resourceVersion, err))
	}
	items, _ := initialItems.items()

	timeout := s.opts.WatchTimeout
	if p.timeout > 0 {
		timeout = min(timeout, p.timeout)
	}
	rctl := http.NewResponseController(w)
	ws.w = bufio.NewWriterSize(w, 64<<10)
	ws.rctl = rctl
	s.metrics.watchStarted(res)
	defer s.metrics.watchEnded(res)

	w.Header().Set("Content-Type", contentTypeJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ws.deadline()
	if initial {
		rv := ws.cursor()
		for i, o := range items {
			if i%watchBatch == 0 {
				ws.deadline()
			}
			if err := ws.send(watch.Added, o, rv); err != nil {
				return nil
			}
		}
		if p.sendInitialEvents != nil && *p.sendInitialEvents {
			if err := ws.bookmark(map[string]string{metav1.InitialEventsAnnotationKey: "true"}); err != nil {
				return nil
			}
		}
	}
	for _, g := range gaps {
		if ws.sendGap(g) != nil {
			return nil
		}
	}
	if ws.flush() != nil {
		return nil
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var bookmarks <-chan time.Time
	if p.bookmarks {
		t := time.NewTicker(s.opts.BookmarkInterval)
		defer t.Stop()
		bookmarks = t.C
	}
	bookmarkDue := false
	buf := make([]entry, 0, watchBatch)
	for {
		rc.mu.RLock()
		var lost bool
		buf, lost = ws.readLocked(rc, buf[:0])
		changed := rc.changedLocked()
		rc.mu.RUnlock()
		ws.deadline()
		if lost {
			// The history moved past changes this watch had not sent: it is too slow.
			_ = ws.writeEvent(watch.Error, statusOf(r, expired("too old resource version: the watch fell behind the server's history; list again")))
			_ = ws.flush()
			return nil
		}
		for _, e := range buf {
			if err := ws.apply(e); err != nil {
				return nil
			}
		}
		if len(buf) == watchBatch {
			continue
		}
		if bookmarkDue {
			bookmarkDue = false
			if ws.bookmark(nil) != nil {
				return nil
			}
		}
		if ws.flush() != nil {
			return nil
		}
		select {
		case <-changed:
		case <-bookmarks:
			bookmarkDue = true
		case <-timer.C:
			return nil
		case <-r.Context().Done():
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// watchStream is the sending side of one watch.
type watchStream struct {
	s      *Server
	res    *apiResource
	rc     *resourceCache
	query  *query
	format format
	opts   tableOptions
	w      *bufio.Writer
	rctl   *http.ResponseController
	// next is the sequence number of the next change to look at.
	next uint64
	// short is set where the watch's cursors are short (watchCache.sequenced): the
	// watch takes every change of the history from next on, and stands after the
	// first next changes, in every cluster. positions, scopes and skips are then
	// empty.
	short bool
	// positions is where the watch stands for each cluster of its scope; order holds
	// their clusters in order, for its cursors, once cursor has made it (clusters are
	// added to positions, never removed).
	positions map[string]position
	order     []string
	// scopes is, for each cluster whose resource one informer per namespace watches,
	// where the watch stands in each namespace, which its cursors carry
	// (position.scopes); skips where a watch resumed by namespace started in each
	// (resumed.skips).
	scopes, skips map[string]map[string]position
	// buf is writeEvent's, kept from one event to the next.
	buf []byte
	// sentHeaders is set once a Table with column definitions was sent.
	sentHeaders bool
	// printer prints the rows of a watch of Tables.
	printer *tablePrinter
}

func (ws *watchStream) cursor() string {
	if ws.short {
		return cursor{epoch: ws.s.cache.epoch, short: true, resource: resourceID(ws.rc.resource), seq: ws.next}.String()
	}
	ws.rc.mu.RLock()
	for cl, p := range ws.positions {
		// The history has nothing of cl between the two: the objects loaded from the
		// snapshot are before, the changes after.
		sp := ws.rc.settledLocked(cl, p)
		sp.scopes = ws.rc.scopesLocked(cl, p, ws.scopes[cl])
		ws.positions[cl] = sp
	}
	ws.rc.mu.RUnlock()
	if len(ws.order) != len(ws.positions) {
		ws.order = slices.Sorted(maps.Keys(ws.positions))
	}
	return cursor{epoch: ws.s.cache.epoch, positions: ws.positions}.encode(ws.order)
}

// startAt starts the watch at positions, a cursor's, and in each namespace where their
// scopes say.
func (ws *watchStream) startAt(positions map[string]position) {
	ws.positions = positions
	for cl, p := range positions {
		if p.scopes == "" {
			continue
		}
		at, err := parseScopes(p.scopes, p.gen)
		if err != nil {
			continue // checked by parseCursor; encoded by scopesLocked
		}
		if ws.scopes == nil {
			ws.scopes = map[string]map[string]position{}
		}
		ws.scopes[cl] = at
	}
}

// resumeLocked starts the watch from cursor from, given as rv: at the positions of
// from in the history, after the gaps that it returns, to read from the change log and
// send first (see watchCache.resumeLocked). It fails with 410 if the history or the log
// no longer reaches back to from.
func (ws *watchStream) resumeLocked(rc *resourceCache, from cursor, rv string) ([]logGap, error) {
	r, err := ws.s.cache.resumeLocked(rc, from, ws.query.scope)
	if err != nil {
		return nil, expired(fmt.Sprintf("too old resource version: %s: %v; list again", rv, err))
	}
	if cl, old := rc.expiredLocked(cursor{positions: r.starts}, ws.query.scope); old {
		return nil, expired(fmt.Sprintf("too old resource version: the history of cluster %q no longer reaches back to %s; list again", cl, rv))
	}
	// Until the gaps are sent, the watch stands where the cursor has it in each
	// namespace.
	ws.positions, ws.scopes, ws.skips = r.starts, r.scopes, r.skips
	// Until its gap is sent, a cluster stands where the cursor has it.
	for _, g := range r.gaps {
		if g.namespace == "" {
			ws.positions[g.cluster] = g.from
		}
	}
	ws.next = rc.firstSeqLocked()
	return r.gaps, nil
}

// sendGap sends the changes of a gap read from the change log, then stands at its
// base, where the history takes over. The changes of a namespace's gap move the watch
// in that namespace only: the cluster stands at its start (resumeScopesLocked) from the
// first.
func (ws *watchStream) sendGap(g logGap) error {
	for i, e := range g.changes {
		if i%watchBatch == 0 {
			ws.deadline()
		}
		pos := ws.positions[g.cluster]
		if g.namespace != "" {
			pos = ws.scopes[g.cluster][g.namespace]
		}
		en, ok := gapEntry(g.cluster, pos, e)
		switch {
		case g.namespace != "":
			en.scope, en.spos = g.namespace, en.pos
			if !ok {
				ws.scopes[g.cluster][g.namespace] = pos.next("")
				continue
			}
		case !ok:
			ws.positions[g.cluster] = pos.next("")
			continue
		}
		if err := ws.applyEntry(en, g.namespace != ""); err != nil {
			return err
		}
	}
	if g.namespace != "" {
		ws.scopes[g.cluster][g.namespace] = position{gen: g.gen, rv: g.base}
		return nil
	}
	ws.positions[g.cluster] = position{gen: g.gen, rv: g.base}
	return nil
}

// readLocked appends to buf the next changes to look at. If the history has moved past
// some of them, the watch goes on only if none was of a cluster it watches that it had
// not seen: lost is set otherwise.
func (ws *watchStream) readLocked(rc *resourceCache, buf []entry) (_ []entry, lost bool) {
	if first := rc.firstSeqLocked(); ws.next < first {
		if ws.short {
			if _, old := rc.expiredSinceLocked(ws.next, ws.query.scope); old {
				return buf, true
			}
		} else if _, old := rc.expiredLocked(cursor{positions: ws.positions}, ws.query.scope); old {
			return buf, true
		}
		ws.next = first
	}
	return rc.readLocked(ws.next, watchBatch, buf), false
}

// apply sends what change e means to this watch, if anything.
func (ws *watchStream) apply(e entry) error {
	ws.next = e.seq + 1
	if e.scope != "" {
		if p, ok := ws.skips[e.cluster][e.scope]; ok && e.spos.gen == p.gen && e.spos.compare(p) <= 0 {
			// Sent before a restart, and received again.
			return nil
		}
	}
	return ws.applyEntry(e, false)
}

// applyEntry is apply of an entry of the history or of a gap; inScope: of the gap of a
// namespace, which moves the watch in that namespace only.
func (ws *watchStream) applyEntry(e entry, inScope bool) error {
	if !ws.query.scope.includes(e.cluster) {
		return nil
	}
	if !inScope && !ws.short {
		if e.pos.compare(ws.positions[e.cluster]) <= 0 {
			return nil
		}
		ws.positions[e.cluster] = e.pos
	}
	if e.scope != "" {
		if ws.scopes == nil {
			ws.scopes = map[string]map[string]position{}
		}
		if ws.scopes[e.cluster] == nil {
			ws.scopes[e.cluster] = map[string]position{}
		}
		ws.scopes[e.cluster][e.scope] = e.spos
	}
	var typ watch.EventType
	obj := e.obj
	switch e.typ {
	case watch.Added:
		if ws.query.matches(e.obj) {
			typ = watch.Added
		}
	case watch.Modified:
		now, before := ws.query.matches(e.obj), ws.query.matches(e.old)
		switch {
		case now && before:
			typ = watch.Modified
		case now:
			typ = watch.Added
		case before:
			typ, obj = watch.Deleted, e.old
		}
	case watch.Deleted:
		if ws.query.matches(e.old) {
			typ = watch.Deleted
		}
	}
	if typ == "" {
		return nil
	}
	return ws.send(typ, object{cluster: e.cluster, obj: obj, codec: ws.s.cache.codec}, ws.cursor())
}

// send sends one event of object o, whose resourceVersion becomes rv.
func (ws *watchStream) send(typ watch.EventType, o object, rv string) error {
	var obj any
	switch ws.format {
	case formatTable:
		ws.printer.now = ws.s.clock.Now()
		obj = ws.printer.rows([]object{o}, metav1.ListMeta{}, !ws.sentHeaders, rv)
		ws.sentHeaders = true
	case formatPartial:
		obj = partial(o, rv)
	default:
		obj = served(ws.res, o, rv)
	}
	ws.s.metrics.watchEvent(ws.res)
	return ws.writeEvent(typ, obj)
}

// bookmark sends a BOOKMARK at the current cursor.
func (ws *watchStream) bookmark(annotations map[string]string) error {
	rv := ws.cursor()
	var obj any
	switch ws.format {
	case formatTable:
		t := ws.printer.rows(nil, metav1.ListMeta{ResourceVersion: rv}, !ws.sentHeaders, "")
		ws.sentHeaders = true
		obj = t
	case formatPartial:
		obj = &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{Kind: partialGVK.Kind, APIVersion: partialGVK.GroupVersion().String()},
			ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv, Annotations: maps.Clone(annotations)},
		}
	default:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ws.res.gvk())
		u.SetResourceVersion(rv)
		if len(annotations) > 0 {
			u.SetAnnotations(annotations)
		}
		obj = u
	}
	return ws.writeEvent(watch.Bookmark, obj)
}

// writeEvent writes one line of the watch framing.
func (ws *watchStream) writeEvent(typ watch.EventType, obj any) error {
	// The JSON of a metav1.WatchEvent, as json.Marshal writes it: appendItem writes the
	// object as json.Marshal does, which would only scan it again (a cursor of positions
	// in its resourceVersion is some 30 bytes per cluster). Event types need no escaping.
	b := append(ws.buf[:0], `{"type":"`...)
	b = append(append(b, typ...), `","object":`...)
	b, err := appendItem(b, obj)
	if err != nil {
		return err
	}
	b = append(b, '}', '\n')
	if _, err := ws.w.Write(b); err != nil {
		return err
	}
	if cap(b) <= maxEventBuf {
		ws.buf = b
	}
	return nil
}

// maxEventBuf bounds the buffer that a watch keeps from one event to the next: an event
// of a larger object is written from a buffer of its own.
const maxEventBuf = 256 << 10

// flush sends what is buffered to the client. A watch flushes before it waits, so no
// event is held back while nothing else happens.
func (ws *watchStream) flush() error {
	if err := ws.w.Flush(); err != nil {
		return err
	}
	if err := ws.rctl.Flush(); err != nil && err != http.ErrNotSupported {
		return err
	}
	return nil
}

// deadline bounds the writes that follow, so a client that stops reading cannot hold
// the watch forever.
func (ws *watchStream) deadline() {
	_ = ws.rctl.SetWriteDeadline(time.Now().Add(ws.s.opts.WriteTimeout))
}
