package server

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
	"github.com/fleetwatch/fleetwatch/history"
)

// The changes of a sharded fleet (docs/history.md, "In a sharded fleet"). Each replica
// keeps a log of its own, whose sequence numbers are its own: a position in the fleet's
// changes is one sequence number per replica's log (changesPosition), as a fan-out
// watch's cursor is one cursor per replica (cursor.peers). A request of every cluster
// is answered, through any replica, by reading the log of each replica that owns
// clusters in its scope after that replica's sequence number, each for the clusters it
// owns (ownedOnly), and merging the parts (mergeChanges): oldest first by time, each
// part in the order of its log. The answer's position, and its continue token, hold
// where each part stopped, so that every change is returned once over the pages.

// changeLogHeader names, in a replica's answer to a request of changes that another
// replica forwarded, the log it read (history.Log.ID): a position in another log is not
// one in it.
const changeLogHeader = "X-Fleetwatch-Change-Log"

// changesPosition is where a sharded fleet's changes stand: of each replica's log, by
// replica identity, the last change returned. A replica absent from it has had none of
// its log's changes returned.
type changesPosition map[string]logPosition

// logPosition is a position in one log: the log's identity (history.Log.ID), which a
// replica keeps until its snapshot's file is replaced, and a sequence number.
type logPosition struct {
	Log string `json:"l"`
	Seq uint64 `json:"s"`
}

// changesPositionJSON is the encoded form of a position, as base64url (no padding) of
// its compact JSON: {"p":{"fleetwatch-0":{"l":"sdk1v7ofk1s","s":812}}}.
type changesPositionJSON struct {
	Parts changesPosition `json:"p"`
}

// String encodes p. Equal positions encode equally: JSON sorts map keys.
func (p changesPosition) String() string {
	b, err := json.Marshal(changesPositionJSON{Parts: p})
	if err != nil {
		panic(fmt.Sprintf("encode changes position: %v", err)) // strings and numbers always marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseChangesPosition decodes the String form of a position.
func parseChangesPosition(s string) (changesPosition, error) {
	const what = "not a position handed out by this server (a ChangeList's metadata.resourceVersion)"
	if len(s) > maxHistoryTokenLen {
		return nil, fmt.Errorf("longer than %d bytes", maxHistoryTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s: not base64url", what)
	}
	var j changesPositionJSON
	if err := decodeStrict(b, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := j.Parts.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return j.Parts, nil
}

// check says what makes p not a position that a replica hands out.
func (p changesPosition) check() error {
	if len(p) == 0 {
		return errors.New("no replica's")
	}
	for id, lp := range p {
		if id == "" || lp.Seq == 0 {
			return fmt.Errorf("replica %q at %d", id, lp.Seq)
		}
	}
	return nil
}

// changesPart is one replica's page of a sharded fleet's changes.
type changesPart struct {
	// replica is the replica whose log it is read from, and log that log's identity.
	replica, log string
	// items are its changes after its position, in the order of its log.
	items []v1alpha1.Change
	// next, if not 0, is where its log is read after for the changes after items: more
	// may follow. It is past the last of items when the replica read as many records as
	// it reads for a page (history.Options.MaxScan) and found fewer changes.
	next uint64
	// err is why the replica did not answer: its part is left out of the page, and
	// its position kept.
	err error
}

// serveFleetChanges serves a request of every cluster's changes of a sharded fleet: this
// replica's part, of the clusters it owns, and the part of each other replica that owns
// clusters of sc, merged by mergeChanges. The clusters that no replica could be asked
// for, or whose replica did not answer, are named in a Warning and the page is served
// without them, as a list is (serveFanOutList); the position of a replica that did not
// answer is kept, so that the pages after it returns have what it missed. A replica
// that refused the request (4xx) fails it with its Status.
func (s *Server) serveFleetChanges(w http.ResponseWriter, r *http.Request, sc scope, log *history.Log, logID string, req *changesRequest) error {
	peers, missing := s.fanOut(r, sc, nil)
	ids := slices.Sorted(maps.Keys(peers))
	parts := make([]changesPart, 1+len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { parts[1+i] = peers[id].changes(r.Context(), s.peers.client, r, req) })
	}
	var err error
	parts[0], err = s.localChangesPart(sc, log, logID, req)
	wg.Wait()
	if err != nil {
		return err
	}
	for i, id := range ids {
		err := parts[1+i].err
		var se *apierrors.StatusError
		switch {
		case errors.As(err, &se):
			return se
		case err != nil:
			klog.FromContext(r.Context()).V(2).Info("A replica did not answer a fleet's changes", "replica", id, "err", err)
			missing = appendClusters(missing, peers[id], fmt.Sprintf("replica %q did not answer: %v", id, err))
		}
	}

	items, to, more := mergeChanges(parts, req.positions, req.Limit)
	release, err := s.limits.admitList(len(items))
	if err != nil {
		return err
	}
	defer release()
	out := &v1alpha1.ChangeList{
		TypeMeta: metav1.TypeMeta{Kind: "ChangeList", APIVersion: SchemeGroupVersion.String()},
		Items:    items,
	}
	if len(to) > 0 {
		out.Metadata.ResourceVersion = to.String()
	}
	if more {
		t := historyContinue{Digest: req.digest, Parts: to}
		if !req.floor.IsZero() {
			t.Since = req.floor.UTC().Format(time.RFC3339Nano)
		}
		out.Metadata.Continue = t.String()
	}
	warnNotIncluded(w, missing)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// localChangesPart reads this replica's part of the sharded fleet's changes that req
// asks for: of the clusters of sc that it owns, not the changes of others that its log
// still holds (of a cluster before it moved), as its peers answer. id is the log's
// identity.
func (s *Server) localChangesPart(sc scope, log *history.Log, id string, req *changesRequest) (changesPart, error) {
	local := req.ChangesRequest
	owned := s.ownedOnly(nil)
	local.Allow = func(cl string) bool { return sc.includes(cl) && owned(cl) }
	local.After, local.Since = req.start(s.opts.Replica, id)
	page, err := s.localChanges(log, local)
	if err != nil {
		return changesPart{}, err
	}
	return changesPart{replica: s.opts.Replica, log: id, items: page.Items, next: page.Next}, nil
}

// start returns where the log of replica id, whose identity is log, is read from for
// req: after its position, with the first page's since on the first page; or, a log
// that the position does not place (none, or another log of that replica), from the
// first page's since.
func (req *changesRequest) start(id, log string) (after uint64, since time.Time) {
	if p, ok := req.positions[id]; ok && p.Log == log {
		return p.Seq, req.Since
	}
	return 0, req.floor
}

// changes asks the peer for its page of the changes that r and req ask for, as a
// request forwarded with the caller's credentials, which the peer answers from its own
// log, for the clusters it owns. Its log is read after its position in req; if the
// peer answers from another log than the position's (its snapshot's file was replaced
// since), it is asked again, from req's first page's since.
func (pp *peerPart) changes(ctx context.Context, client *http.Client, r *http.Request, req *changesRequest) changesPart {
	p, ok := req.positions[pp.id]
	if !ok {
		return pp.readChanges(ctx, client, r, 0, req.floor, req.Limit)
	}
	part := pp.readChanges(ctx, client, r, p.Seq, req.Since, req.Limit)
	if part.err == nil && part.log != p.Log {
		part = pp.readChanges(ctx, client, r, 0, req.floor, req.Limit)
	}
	return part
}

// readChanges asks the peer for a page of the changes that r asks for, after its log's
// sequence number after (if not 0), from since (if not zero), at most limit changes.
func (pp *peerPart) readChanges(ctx context.Context, client *http.Client, r *http.Request, after uint64, since time.Time, limit int) changesPart {
	part := changesPart{replica: pp.id}
	q := r.URL.Query()
	for _, k := range []string{"continue", "after", "since", "limit"} {
		q.Del(k)
	}
	q.Set("limit", strconv.Itoa(limit))
	if after != 0 {
		q.Set("after", strconv.FormatUint(after, 10))
	}
	if !since.IsZero() {
		q.Set("since", since.UTC().Format(time.RFC3339Nano))
	}
	body, header, err := pp.getWithHeader(ctx, client, r, q)
	if err != nil {
		part.err = err
		return part
	}
	part.log = header.Get(changeLogHeader)
	var l v1alpha1.ChangeList
	if err := json.Unmarshal(body, &l); err != nil {
		part.err = fmt.Errorf("decode the changes: %w", err)
		return part
	}
	if l.Metadata.Continue != "" {
		t, err := decodeHistoryContinue(l.Metadata.Continue)
		if err != nil || t.After == 0 {
			part.err = fmt.Errorf("the continue token of its changes: not one of a log (%v)", err)
			return part
		}
		part.next = t.After
	}
	part.items = l.Items
	for i := range part.items {
		// The peer's log, whatever an older replica says.
		part.items[i].Replica = pp.id
	}
	return part
}

// mergeChanges merges the parts of a sharded fleet's changes read after the position
// from into one page of at most limit changes, oldest first: at each step, the oldest
// of the parts' next changes (by time, then replica, then sequence number), so that
// each part's changes keep the order of its log, where a change's time may be older
// than its log's changes before it (one that came with a cluster handed over). The
// page ends when a part whose log may have more changes than it returned has none
// left: its next one may be older than the others'. It returns the position after the
// page, which holds, for each part, its last change in the page, or where its log is
// read after if the page has all it returned (its next), keeps from's position of a
// part that failed, and drops from's position in another log than a part's that has
// none of its changes in the page; more is set if any part may have changes after the page. Every
// change is returned once over the pages read from each page's position, and the pages
// are the same whatever their limit.
func mergeChanges(parts []changesPart, from changesPosition, limit int) (items []v1alpha1.Change, to changesPosition, more bool) {
	taken := make([]int, len(parts))
	items = []v1alpha1.Change{}
	for len(items) < limit {
		best := -1
		blocked := false
		for i := range parts {
			p := &parts[i]
			switch {
			case p.err != nil:
			case taken[i] == len(p.items):
				blocked = blocked || p.next != 0
			case best < 0 || compareChanges(&p.items[taken[i]], &parts[best].items[taken[best]]) < 0:
				best = i
			}
		}
		if blocked || best < 0 {
			break
		}
		items = append(items, parts[best].items[taken[best]])
		taken[best]++
	}
	to = maps.Clone(from)
	if to == nil {
		to = changesPosition{}
	}
	for i := range parts {
		p := &parts[i]
		switch {
		case p.err != nil:
			continue
		case taken[i] == len(p.items) && p.next != 0:
			to[p.replica] = logPosition{Log: p.log, Seq: p.next}
		case taken[i] > 0:
			to[p.replica] = logPosition{Log: p.log, Seq: p.items[taken[i]-1].Seq}
		case from[p.replica].Log != p.log:
			// None of a log that the position does not place is in the page: it is read
			// from the first page's since again.
			delete(to, p.replica)
		}
		more = more || taken[i] < len(p.items) || p.next != 0
	}
	return items, to, more
}

// compareChanges orders the changes of a sharded fleet's parts: by time, then replica,
// then sequence number.
func compareChanges(a, b *v1alpha1.Change) int {
	return cmp.Or(a.Time.Time.Compare(b.Time.Time), cmp.Compare(a.Replica, b.Replica), cmp.Compare(a.Seq, b.Seq))
}
