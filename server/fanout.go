package server

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// One API from any replica of a sharded fleet. A replica holds the objects of the
// clusters it owns only; the statuses of the others (aggregate.PhaseRemote) name their
// owner and its address, as the Leases of the home cluster publish them (see package
// shard). A request is answered for the whole fleet by asking the owners:
//
//   - /clusters/{name}/... of a cluster another replica owns is proxied to that replica,
//     as it is: lists, gets, watches, Tables and discovery keep their semantics.
//   - A list under /clusters/*/ is the replica's own part merged with one list of every
//     other replica that owns clusters in the request's scope, in (cluster, namespace,
//     name) order, as a local list is. Paging works across them: every part is asked
//     for the page that starts after the last key returned, and the continue token
//     carries, besides that key, the resourceVersion of each replica (cursor.peers).
//   - A search of every cluster is the replica's own part merged with one search of
//     every other replica that owns clusters in its scope, in search.Key order, with the
//     totals summed and the counts merged (serveSearch). Its continue token is the key
//     of the last item only: every part is asked for the page after it, with a token of
//     its own built from that key.
//
// A request that a replica sends to another carries forwardedHeader, and is answered
// with that replica's own clusters only: it is never sent on again, so requests cannot
// loop between replicas whose views of the owners differ for a moment.
//
// Security: the peers' addresses come from the Leases only, never from a request; the
// caller's bearer token is forwarded, so that the peer authenticates and authorizes the
// caller as this replica did (the replicas share the token file or the delegated
// authentication); a token is never sent over plain HTTP by a replica that serves
// HTTPS, and redirects are not followed.

// forwardedHeader marks a request that a replica sent to another.
const forwardedHeader = "X-Fleetwatch-Forwarded"

// peerTimeout bounds a list or a search asked of another replica.
const peerTimeout = 30 * time.Second

// peerClient sends requests to the other replicas of a sharded fleet.
type peerClient struct {
	client *http.Client
	// tlsOnly is set when this replica serves HTTPS: its peers must too.
	tlsOnly bool
}

func newPeerClient(opts Options) (*peerClient, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	// nil: the system's roots.
	tr.TLSClientConfig.RootCAs = opts.PeerRoots
	return &peerClient{
		client: &http.Client{
			Transport: tr,
			// A peer's redirect would send the caller's token where the peer says.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		tlsOnly: opts.TLSCertFile != "",
	}, nil
}

// peer is another replica, as the Leases publish it.
type peer struct {
	id   string
	base *url.URL
}

// peerOf returns the replica that owns the cluster st, if another live replica does and
// publishes an address this replica may send a token to.
func (s *Server) peerOf(st aggregate.ClusterStatus) (peer, error) {
	if st.Phase != aggregate.PhaseRemote || st.Replica == "" {
		return peer{}, errors.New("no live replica watches it now; it is moving")
	}
	u, err := url.Parse(st.ReplicaAddress)
	switch {
	case st.ReplicaAddress == "":
		return peer{}, fmt.Errorf("replica %q watches it, and publishes no address", st.Replica)
	case err != nil || u.Host == "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http"):
		return peer{}, fmt.Errorf("replica %q watches it, at %q, which is not an http(s) URL", st.Replica, st.ReplicaAddress)
	case u.Scheme == "http" && s.peers.tlsOnly:
		return peer{}, fmt.Errorf("replica %q watches it, at %s, which is not HTTPS: this replica sends no token there", st.Replica, st.ReplicaAddress)
	}
	u.Path, u.RawPath, u.RawQuery, u.Fragment = strings.TrimSuffix(u.Path, "/"), "", "", ""
	return peer{id: st.Replica, base: u}, nil
}

// forwarded reports whether r was sent by another replica: it is answered from this
// replica's own clusters only.
func forwarded(r *http.Request) bool { return r.Header.Get(forwardedHeader) != "" }

// proxyRemote serves a request under /clusters/{name}/ for a cluster that another
// replica owns, by proxying it to that replica. It reports false, having written
// nothing, if the request is to be served here: the cluster is watched here, the
// request came from a replica, or no replica can be asked (then watchedElsewhere says
// why).
func (s *Server) proxyRemote(w http.ResponseWriter, r *http.Request, name string) bool {
	if forwarded(r) {
		return false
	}
	st, ok := s.src.ClusterStatus(name)
	if !ok || st.Phase != aggregate.PhaseRemote {
		return false
	}
	p, err := s.peerOf(st)
	if err != nil {
		return false
	}
	info := infoFrom(r.Context())
	info.verb = "proxy"
	if isWatch(r) {
		// The peer bounds the watch (its WatchTimeout); each write is bounded as a local
		// watch's is, so that a client that stops reading is dropped.
		w = &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: s.opts.WriteTimeout}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = p.base.Scheme, p.base.Host
			out.URL.Path = p.base.Path + r.URL.Path
			out.URL.RawPath = p.base.EscapedPath() + r.URL.EscapedPath()
			out.Host = p.base.Host
			// Only what the API reads: the credentials, the format, the agent.
			out.Header = http.Header{}
			for _, h := range []string{"Authorization", "Accept", "Accept-Encoding", "User-Agent"} {
				if v := r.Header.Values(h); len(v) > 0 {
					out.Header[h] = slices.Clone(v)
				}
			}
			out.Header.Set(forwardedHeader, "1")
		},
		Transport:     s.peers.client.Transport,
		FlushInterval: -1, // watches stream
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			klog.FromContext(r.Context()).V(2).Info("Cannot reach the replica that watches a cluster", "cluster", name, "replica", p.id, "err", err)
			se := apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %q is watched by replica %q, at %s, which cannot be reached: %v", name, p.id, p.base, err))
			se.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
			writeStatus(w, req, se)
		},
	}
	rp.ServeHTTP(w, r)
	return true
}

// fanOut returns the other replicas that own clusters of sc that serve res, each with
// the clusters it owns, and the clusters of sc that no replica can be asked for
// (moving, or owned by a replica without a usable address), with the reason. A cluster
// whose owner publishes its resources (see catalog) is asked only if res is one of
// them: a replica answers 404 for a resource none of its clusters serves. A nil res
// (a search) is every resource. It returns nothing for a request that another replica
// forwarded, or for a fleet that is not sharded.
func (s *Server) fanOut(r *http.Request, sc scope, res *apiResource) (peers map[string]*peerPart, missing []string) {
	if !mayFanOut(r, sc) {
		return nil, nil
	}
	for _, st := range s.src.Status() {
		if !sc.includes(st.Name) || (st.Phase != aggregate.PhaseRemote && st.Phase != aggregate.PhaseMoving) {
			continue
		}
		if res != nil && len(st.Resources) > 0 && !slices.ContainsFunc(st.Resources, func(rs aggregate.ResourceStatus) bool { return rs.Resource == res.gvr }) {
			continue
		}
		p, err := s.peerOf(st)
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (%v)", st.Name, err))
			continue
		}
		if peers == nil {
			peers = map[string]*peerPart{}
		}
		part := peers[p.id]
		if part == nil {
			part = &peerPart{peer: p, clusters: map[string]bool{}}
			peers[p.id] = part
		}
		part.clusters[st.Name] = true
	}
	return peers, missing
}

// mayFanOut reports whether a request in scope sc may be answered with other replicas'
// parts: one of every cluster that no replica forwarded.
func mayFanOut(r *http.Request, sc scope) bool { return !forwarded(r) && sc.all() }

// peerPart is what one other replica returns of a list.
type peerPart struct {
	peer
	// clusters are those this replica sees the peer own: objects of others (the peer
	// still has a cluster that moved) are dropped.
	clusters map[string]bool
	items    []object
	rv       string
	more     bool
	// last, if more, is the key of the last object the peer returned, dropped or not:
	// it has none of its objects between there and the next page.
	last *aggregate.Key
	err  error
}

// peerList is the JSON of a list as a replica serves it.
type peerList struct {
	Metadata metav1.ListMeta             `json:"metadata"`
	Items    []unstructured.Unstructured `json:"items"`
}

// get asks the peer for what r asks, at r's path with the query q, as a request
// forwarded with the caller's credentials, bounded by peerTimeout, and returns the body
// of its 200 answer. A refusal (a 4xx Status: the caller may not read it) is returned as
// its *apierrors.StatusError, as this replica would have refused it; any other failure
// as an error.
func (p peer) get(ctx context.Context, client *http.Client, r *http.Request, q url.Values) ([]byte, error) {
	body, _, err := p.getWithHeader(ctx, client, r, q)
	return body, err
}

// getWithHeader is get, which also returns the answer's header.
func (p peer) getWithHeader(ctx context.Context, client *http.Client, r *http.Request, q url.Values) ([]byte, http.Header, error) {
	u := *p.base
	u.Path = p.base.Path + r.URL.Path
	u.RawPath = p.base.EscapedPath() + r.URL.EscapedPath()
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, nil, err
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	req.Header.Set("Accept", contentTypeJSON)
	req.Header.Set("User-Agent", cmp.Or(r.Header.Get("User-Agent"), "fleetwatch"))
	req.Header.Set(forwardedHeader, "1")
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Code != 0 && st.Code < 500 {
			return nil, nil, &apierrors.StatusError{ErrStatus: st}
		}
		return nil, nil, fmt.Errorf("%s: %.200s", resp.Status, body)
	}
	return body, resp.Header, nil
}

// list asks the peer for one page of the list that r asks for, after the key after
// (if not nil), at most limit objects (0: all), at its resourceVersion rv (if not
// empty, from the continue token).
func (pp *peerPart) list(ctx context.Context, client *http.Client, r *http.Request, after *aggregate.Key, limit int64, rv string) {
	q := r.URL.Query()
	q.Del("continue")
	q.Del("limit")
	if limit > 0 {
		q.Set("limit", strconv.FormatInt(limit, 10))
	}
	if after != nil {
		// The peer checks the token; its resourceVersion only needs to be one of its
		// own, which a first page returned, or any well-formed cursor.
		tokenRV := cmp.Or(rv, cursor{epoch: "peer"}.String())
		q.Set("continue", continueToken{resourceVersion: tokenRV, after: *after}.String())
	}
	// The resourceVersion of a fleet list is this replica's: the peer lists its current state.
	q.Del("resourceVersion")
	q.Del("resourceVersionMatch")
	body, err := pp.get(ctx, client, r, q)
	if err != nil {
		pp.err = err
		return
	}
	var l peerList
	if err := json.Unmarshal(body, &l); err != nil {
		pp.err = fmt.Errorf("decode the list: %w", err)
		return
	}
	pp.rv, pp.more = l.Metadata.ResourceVersion, l.Metadata.Continue != ""
	if n := len(l.Items); pp.more && n > 0 {
		o := &l.Items[n-1]
		k := aggregate.Key{Cluster: o.GetAnnotations()[ClusterAnnotation], Namespace: o.GetNamespace(), Name: o.GetName()}
		pp.last = &k
	}
	for i := range l.Items {
		o := &l.Items[i]
		cl := o.GetAnnotations()[ClusterAnnotation]
		if !pp.clusters[cl] {
			continue
		}
		pp.items = append(pp.items, object{cluster: cl, obj: o})
	}
}

// search asks the peer for the page of the search req that r asks for: the same query
// and parameters, after req.after, at most req.limit items. Of its answer, it keeps the
// items and counts of the clusters this replica sees the peer own only, as list does;
// the total is the sum of those clusters' counts. The counts by kind cannot be split by
// cluster: while a cluster moves, they may count for a moment the objects of one that
// the peer has taken before this replica sees it do so.
func (pp *peerPart) search(ctx context.Context, client *http.Client, r *http.Request, req *searchRequest) (searchPart, error) {
	q := r.URL.Query()
	q.Set("limit", strconv.Itoa(req.limit))
	q.Del("continue")
	if req.after != nil {
		// The peer's own token for the same key: it reads the same parameters, so its
		// query's digest is this one.
		q.Set("continue", searchContinue{Query: req.digest, After: *req.after}.String())
	}
	body, err := pp.get(ctx, client, r, q)
	if err != nil {
		return searchPart{}, err
	}
	var res SearchResult
	if err := json.Unmarshal(body, &res); err != nil {
		return searchPart{}, fmt.Errorf("decode the search: %w", err)
	}
	part := searchPart{counts: SearchCounts{Clusters: map[string]int{}, Kinds: res.Counts.Kinds}}
	for _, it := range res.Items {
		if pp.clusters[it.Cluster] {
			part.items = append(part.items, it)
		}
	}
	for cl, n := range res.Counts.Clusters {
		if pp.clusters[cl] {
			part.counts.Clusters[cl] = n
			part.total += n
		}
	}
	if n := len(res.Items); n > 0 && res.Metadata.Continue != "" {
		k := itemKey(&res.Items[n-1])
		part.last = &k
	}
	return part, nil
}

// serveFanOutList serves a list under /clusters/*/ that other replicas have parts of:
// this replica's part and theirs, merged (see the top of this file). The clusters that
// no replica could be asked for are named in a Warning header (299, as kube-apiserver
// sends its warnings, which kubectl prints), and so are those whose replica did not
// answer (unreachable, or failing): the list is served without them, since a replica
// that is down must not take the API of the others down with it. A replica that refused
// the request (4xx: the caller may not read it) fails the list with its Status.
func (s *Server) serveFanOutList(w http.ResponseWriter, r *http.Request, res *apiResource, qr *query, p *listParams, f format, opts tableOptions,
	peers map[string]*peerPart, missing []string) error {
	var after *aggregate.Key
	var peerRVs map[string]string
	if p.continueToken != nil {
		after = &p.continueToken.after
		if c, err := parseCursor(p.continueToken.resourceVersion); err == nil {
			peerRVs = c.peers
		}
	}
	limit := int(min(p.limit, math.MaxInt32))

	var wg sync.WaitGroup
	for _, pp := range peers {
		wg.Go(func() { pp.list(r.Context(), s.peers.client, r, after, int64(limit), peerRVs[pp.id]) })
	}
	rc := s.cache.resource(res.gvr)
	rc.mu.RLock()
	current := rc.cursorLocked(s.cache, qr.scope)
	found := rc.listLocked(qr, after, limit)
	rc.mu.RUnlock()
	items, more := found.items()
	wg.Wait()

	current.peers, current.replica = map[string]string{}, s.opts.Replica
	// end is the earliest last key of a part with more objects than it returned.
	var end *aggregate.Key
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		pp := peers[id]
		var se *apierrors.StatusError
		switch {
		case errors.As(pp.err, &se):
			return se
		case pp.err != nil:
			klog.FromContext(r.Context()).V(2).Info("A replica did not answer a fleet list", "replica", id, "err", pp.err)
			for _, cl := range slices.Sorted(maps.Keys(pp.clusters)) {
				missing = append(missing, fmt.Sprintf("%s (replica %q did not answer: %v)", cl, id, pp.err))
			}
			continue
		}
		items = append(items, pp.items...)
		more = more || pp.more
		if pp.last != nil && (end == nil || compareKeys(*pp.last, *end) < 0) {
			end = pp.last
		}
		if pp.rv != "" {
			current.peers[id] = pp.rv
		}
	}
	slices.SortFunc(items, func(a, b object) int { return compareKeys(keyOf(a), keyOf(b)) })
	if end != nil {
		// A part with more objects than it returned may have some before the objects of
		// the others after its last (it returned fewer than the limit here: those of
		// clusters it does not answer for were dropped): the page ends at the earliest
		// such last, so that the next one misses none of them.
		items = items[:sort.Search(len(items), func(i int) bool { return compareKeys(keyOf(items[i]), *end) > 0 })]
	}
	cut := limit > 0 && len(items) > limit
	if cut {
		items, more = items[:limit], true
	}
	release, err := s.limits.admitList(len(items))
	if err != nil {
		return err
	}
	defer release()
	warnNotIncluded(w, missing)

	lm := metav1.ListMeta{ResourceVersion: current.String()}
	if p.continueToken != nil {
		lm.ResourceVersion = p.continueToken.resourceVersion
	}
	switch {
	case more && end != nil && !cut:
		// Every object up to end is in the page: the next one starts after end, also
		// when the objects of a part up to there were all dropped and this page is
		// empty (as kube-apiserver's may be).
		lm.Continue = continueToken{resourceVersion: lm.ResourceVersion, after: *end}.String()
	case more && len(items) > 0:
		lm.Continue = continueToken{resourceVersion: lm.ResourceVersion, after: keyOf(items[len(items)-1])}.String()
	}
	return s.writeListAs(w, r, res, f, opts, lm, items)
}

// warnNotIncluded names in a Warning header the clusters that a merged answer does not
// include, each with the reason, if there are any.
func warnNotIncluded(w http.ResponseWriter, missing []string) {
	if len(missing) > 0 {
		w.Header().Add("Warning", warning("clusters not included: "+strings.Join(missing, "; ")))
	}
}

func keyOf(o object) aggregate.Key {
	m := mustAccessor(o.obj)
	return aggregate.Key{Cluster: o.cluster, Namespace: m.GetNamespace(), Name: m.GetName()}
}

// compareKeys orders keys as lists are: by cluster, namespace and name.
func compareKeys(a, b aggregate.Key) int {
	return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// warning is the value of a Warning header, as kube-apiserver writes them (RFC 7234,
// code 299, agent "-").
func warning(text string) string {
	text = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, text)
	const maxLen = 4096
	if len(text) > maxLen {
		text = text[:maxLen] + "..."
	}
	return "299 - " + strconv.Quote(text)
}

// ownersStatus replaces, in items, the status of each cluster that another replica owns
// (Remote) with the owner's own, asking each owner once, so that every replica shows
// every cluster's real state. A cluster whose owner does not answer keeps this
// replica's view (Remote, with its owner), and a Warning names it. Nothing is asked for
// a request that another replica forwarded.
func (s *Server) ownersStatus(w http.ResponseWriter, r *http.Request, items []Cluster) {
	if forwarded(r) {
		return
	}
	byPeer := map[string]*peerPart{}
	for _, c := range items {
		if c.Status.Phase != string(aggregate.PhaseRemote) {
			continue
		}
		p, err := s.peerOf(aggregate.ClusterStatus{Name: c.Name, Phase: aggregate.PhaseRemote, Replica: c.Status.Replica, ReplicaAddress: c.Status.ReplicaAddress})
		if err != nil {
			continue
		}
		if byPeer[p.id] == nil {
			byPeer[p.id] = &peerPart{peer: p, clusters: map[string]bool{}}
		}
		byPeer[p.id].clusters[c.Name] = true
	}
	if len(byPeer) == 0 {
		return
	}
	owned := map[string]ClusterStatus{}
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for _, pp := range byPeer {
		wg.Go(func() {
			var l ClusterList
			err := s.peers.getJSON(r, pp.peer, "/apis/"+SchemeGroupVersion.String()+"/clusters", &l)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				klog.FromContext(r.Context()).V(2).Info("A replica did not answer for the status of its clusters", "replica", pp.id, "err", err)
				for cl := range pp.clusters {
					failed = append(failed, cl)
				}
				return
			}
			for _, c := range l.Items {
				// Only what the owner says of the clusters it owns, as it owns them.
				if pp.clusters[c.Name] && c.Status.Replica == pp.id && c.Status.Phase != string(aggregate.PhaseRemote) && c.Status.Phase != string(aggregate.PhaseMoving) {
					owned[c.Name] = c.Status
				}
			}
		})
	}
	wg.Wait()
	for i := range items {
		if st, ok := owned[items[i].Name]; ok {
			st.ReplicaAddress = items[i].Status.ReplicaAddress
			items[i].Status = st
			items[i].UID = types.UID(st.UID)
		}
	}
	if len(failed) > 0 {
		slices.Sort(failed)
		w.Header().Add("Warning", warning("the status of "+strings.Join(failed, ", ")+" is this replica's view: their replica did not answer"))
	}
}

// getJSON gets path from the peer with the caller's credentials, and decodes the answer.
func (pc *peerClient) getJSON(r *http.Request, p peer, path string, v any) error {
	ctx, cancel := context.WithTimeout(r.Context(), peerTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base.String()+path, nil)
	if err != nil {
		return err
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	req.Header.Set("Accept", contentTypeJSON)
	req.Header.Set(forwardedHeader, "1")
	resp, err := pc.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(v)
}

// serveFanOutWatch serves a watch under /clusters/*/ that other replicas have parts of:
// one stream merged from this replica's own watch and one watch of each other replica
// that owns clusters in the scope, each from its part of the resourceVersion. That
// resourceVersion is a cursor whose peers hold the other replicas' cursors (as a merged
// list hands out); each event's object carries the merged cursor just after it, so that
// a client resumes every part where it stopped. A part that ends (its timeout, its
// replica gone) ends the whole watch, and a part that fails (410 Gone from a cursor too
// old for it) fails it with its Status: the client watches again, or lists. Clusters
// that no replica can be asked for are named in a Warning, as in a list. A replica
// absent from a resumed cursor (it had sent nothing yet) starts its part as a watch
// from resourceVersion "" does. A cursor that holds the position of a cluster in the
// scope in the part of a replica that no longer watches it has it carried to the part
// of the replica that watches it now, which resumes it if the cluster came to it with
// its change log, else answers 410 Gone (carryMoved).
//
// placed is the placement read before peers were chosen: a move after it ends the watch.
func (s *Server) serveFanOutWatch(w http.ResponseWriter, r *http.Request, p *listParams, sc scope, placed placedAs, peers map[string]*peerPart, missing []string) error {
	var from cursor
	if p.resourceVersion != "" && p.resourceVersion != "0" {
		c, err := parseCursor(p.resourceVersion)
		if err != nil {
			return expired(fmt.Sprintf("too old resource version: %s is not a resourceVersion of a watch of every cluster of this fleet; list again", p.resourceVersion))
		}
		// Handed out by another replica: this one's part is among the peers.
		from = c.rootedAt(s.opts.Replica)
		var cl string
		var ok bool
		if from, cl, ok = carryMoved(from, s.opts.Replica, sc, placed.owners); !ok {
			return expired(fmt.Sprintf("too old resource version: %s moved between replicas since %s; list again", cl, p.resourceVersion))
		}
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	type line struct {
		src string
		b   []byte
		err error
	}
	lines := make(chan line)
	read := func(src string, body io.Reader) {
		sc := bufio.NewScanner(body)
		sc.Buffer(nil, 64<<20)
		for sc.Scan() {
			select {
			case lines <- line{src: src, b: slices.Clone(sc.Bytes())}:
			case <-ctx.Done():
				return
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.EOF
		}
		select {
		case lines <- line{src: src, err: err}:
		case <-ctx.Done():
		}
	}
	query := func(rv string) url.Values {
		q := r.URL.Query()
		q.Del("resourceVersion")
		if rv != "" {
			q.Set("resourceVersion", rv)
		} else if p.resourceVersion == "0" {
			q.Set("resourceVersion", "0")
		}
		return q
	}

	// Every part is opened before anything is written, so that one refused fails the
	// whole watch with its Status.
	var bodies []io.Closer
	defer func() {
		cancel()
		for _, b := range bodies {
			_ = b.Close()
		}
	}()
	local := ""
	if from.epoch != "" {
		local = from.part().String()
	}
	pr, pw := io.Pipe()
	bodies = append(bodies, pr)
	lw := &pipeWriter{header: http.Header{}, w: pw, started: make(chan int, 1)}
	lr := r.Clone(ctx)
	lr.Header.Set(forwardedHeader, "1")
	lr.URL.RawQuery = query(local).Encode()
	go func() {
		s.route(lw, lr)
		lw.start(http.StatusOK)
		_ = pw.Close()
	}()
	if code := <-lw.started; code != http.StatusOK {
		b, _ := io.ReadAll(pr)
		var st metav1.Status
		if json.Unmarshal(b, &st) == nil && st.Code != 0 {
			return &apierrors.StatusError{ErrStatus: st}
		}
		return fmt.Errorf("the local part of a fan-out watch: %d", code)
	}
	srcs := []string{""}
	for _, id := range slices.Sorted(maps.Keys(peers)) {
		pp := peers[id]
		u := *pp.base
		u.Path = pp.base.Path + r.URL.Path
		u.RawPath = pp.base.EscapedPath() + r.URL.EscapedPath()
		u.RawQuery = query(from.peers[id]).Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return err
		}
		for _, h := range []string{"Authorization", "Accept", "User-Agent"} {
			if v := r.Header.Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
		req.Header.Set(forwardedHeader, "1")
		resp, err := s.peers.client.Do(req)
		if err != nil {
			missing = appendClusters(missing, pp, fmt.Sprintf("replica %q did not answer: %v", id, err))
			continue
		}
		bodies = append(bodies, resp.Body)
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			var st metav1.Status
			if json.Unmarshal(b, &st) == nil && st.Kind == "Status" && st.Code != 0 && st.Code < 500 {
				return &apierrors.StatusError{ErrStatus: st}
			}
			missing = appendClusters(missing, pp, fmt.Sprintf("replica %q did not answer: %s", id, resp.Status))
			continue
		}
		srcs = append(srcs, id)
		go read(id, resp.Body)
	}
	go read("", pr)

	for k, v := range lw.header {
		if k != "Content-Length" {
			w.Header()[k] = v
		}
	}
	warnNotIncluded(w, missing)
	rctl := http.NewResponseController(w)
	// Each write is bounded, as a local watch's is, so that a client that stops reading
	// is dropped.
	_ = rctl.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	w.WriteHeader(http.StatusOK)
	_ = rctl.Flush()

	merged := cursor{epoch: from.epoch, positions: from.positions, origins: from.origins, peers: maps.Clone(from.peers), replica: s.opts.Replica}
	if merged.peers == nil {
		merged.peers = map[string]string{}
	}
	// part is the JSON of the local part's last cursor, if partJSON took it: the merged
	// cursor is then written around it (mergedAround), its positions not decoded at
	// each event (a third of a fan-out event's CPU at 1,000 clusters).
	var part []byte
	peersMember := peersJSON(merged.peers)
	sentColumns := false
	// Each part answers for the clusters its replica owned when it started (ownedOnly):
	// once a cluster of the scope moves, the watch ends, and the client watches again
	// from its last cursor (which carryMoved carries to the new owner's part).
	gen, owners := placed.gen, inScope(placed.owners, sc)
	moves := time.NewTicker(ownersCheckInterval)
	defer moves.Stop()
	for {
		var l line
		select {
		case l = <-lines:
		case <-moves.C:
			now := s.placed(false)
			if now.gen == gen {
				continue
			}
			if !maps.Equal(owners, inScope(now.owners, sc)) {
				return nil
			}
			gen = now.gen
			continue
		case <-ctx.Done():
			return nil
		}
		if l.err != nil {
			// A part ended: so does the watch, and the client watches again from the
			// last cursor it got.
			return nil
		}
		// The event as it came, its resourceVersion replaced (scanEvent), or else
		// decoded, changed and encoded again.
		ev, spliced := scanEvent(l.b)
		var e struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if !spliced {
			// Numbers as json.Number, written again as they came: a float64 would
			// round integers beyond 2^53 (TestFanOutKeepsNumbers).
			dec := json.NewDecoder(bytes.NewReader(l.b))
			dec.UseNumber()
			if err := dec.Decode(&e); err != nil {
				return nil
			}
			ev.typ, ev.rv = e.Type, objectRV(e.Object)
		}
		if ev.typ == "ERROR" {
			_, _ = w.Write(append(l.b, '\n'))
			_ = rctl.Flush()
			return nil
		}
		rv := ev.rv
		if l.src == "" {
			if b, ok := partJSON(rv); ok {
				part = b
			} else if c, err := parseCursor(rv); err == nil {
				part = nil
				merged.epoch, merged.positions, merged.origins = c.epoch, c.positions, c.origins
			}
		} else {
			if rv != "" && merged.peers[l.src] != rv {
				merged.peers[l.src] = rv
				peersMember = peersJSON(merged.peers)
			}
			// Every event of the peer's part is sent: the peer sends those of the
			// clusters it owns only (ownedOnly), and a cluster that moves from one
			// peer to another is DELETED by the one before the other, which takes it
			// only once the first has stopped, ADDs it.
		}
		if merged.epoch == "" {
			merged.epoch = s.cache.epoch
		}
		var mergedRV string
		if part != nil {
			mergedRV = mergedAround(part, peersMember, merged.replica)
		} else {
			mergedRV = merged.String()
		}
		var b []byte
		if spliced {
			b = spliceRV(l.b, ev, mergedRV)
		} else {
			setObjectRV(e.Object, mergedRV)
			if _, ok := e.Object["columnDefinitions"]; ok {
				if sentColumns {
					delete(e.Object, "columnDefinitions")
				}
				sentColumns = true
			}
			var err error
			if b, err = json.Marshal(e); err != nil {
				return nil
			}
			b = append(b, '\n')
		}
		_ = rctl.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return nil
		}
		if rctl.Flush() != nil {
			return nil
		}
	}
}

// ownersCheckInterval is how often a fan-out watch looks for clusters that moved.
const ownersCheckInterval = time.Second

// owner is who watches a cluster, as this replica sees it: a replica, this one included
// (Options.Replica), or none while the cluster moves.
type owner struct {
	replica string
	moving  bool
}

// ownerOf returns the owner of the cluster of st.
func (s *Server) ownerOf(st aggregate.ClusterStatus) owner {
	switch st.Phase {
	case aggregate.PhaseMoving:
		return owner{moving: true}
	case aggregate.PhaseRemote:
		return owner{replica: st.Replica}
	}
	return owner{replica: s.opts.Replica}
}

// placement is the owner of each cluster of the fleet, read from the Source at most
// once half an ownersCheckInterval for all the fan-out watches, and numbered: gen
// changes when a cluster changes owner, starts moving, or comes or goes.
type placement struct {
	mu     sync.Mutex
	at     time.Time
	gen    uint64
	owners map[string]owner
}

// placedAs is a placement as placed returned it.
type placedAs struct {
	gen    uint64
	owners map[string]owner
}

// placed returns the placement, read again if fresh is set or it is older than half an
// ownersCheckInterval. A watch that starts reads it fresh (as fanOut reads the
// statuses), and its checks every ownersCheckInterval take what another read.
func (s *Server) placed(fresh bool) placedAs {
	p := &s.placement
	p.mu.Lock()
	defer p.mu.Unlock()
	if !fresh && p.owners != nil && time.Since(p.at) < ownersCheckInterval/2 {
		return placedAs{p.gen, p.owners}
	}
	owners := map[string]owner{}
	for _, st := range s.src.Status() {
		owners[st.Name] = s.ownerOf(st)
	}
	if !maps.Equal(owners, p.owners) {
		p.gen++
		p.owners = owners
	}
	p.at = time.Now()
	return placedAs{p.gen, p.owners}
}

// inScope returns the owners of the clusters of sc.
func inScope(owners map[string]owner, sc scope) map[string]owner {
	out := map[string]owner{}
	for cl, o := range owners {
		if sc.includes(cl) {
			out[cl] = o
		}
	}
	return out
}

// partsAt returns the parts of c, a cursor rooted at replica self, by replica: its own
// and its peers'.
func (c cursor) partsAt(self string) map[string]cursor {
	parts := map[string]cursor{self: c.part()}
	for id, rv := range c.peers {
		// Checked by parseCursor.
		p, _ := parseCursor(rv)
		parts[id] = p
	}
	return parts
}

// moveWait bounds how long a fan-out watch from a cursor waits for the clusters it
// holds positions of to end their moves between replicas (a var for tests).
var moveWait = primeWait

// waitMoves waits, at most moveWait, until no cluster of sc that a part of the cursor
// rv holds a position of is moving between replicas: carryMoved carries such a position
// to the cluster's new owner once it watches it, where a cluster moving now would get
// 410 and the client would list again. Past it: 503 with Retry-After, and the client
// watches again from rv. A cursor that does not parse is left to serveFanOutWatch. It
// returns the placement it read last, by which the watch chooses its parts.
func (s *Server) waitMoves(ctx context.Context, rv string, sc scope) (placedAs, error) {
	if rv == "" || rv == "0" {
		return s.placed(true), nil
	}
	c, err := parseCursor(rv)
	if err != nil {
		return s.placed(true), nil
	}
	var held []string
	for _, part := range c.rootedAt(s.opts.Replica).partsAt(s.opts.Replica) {
		for cl := range part.positions {
			if sc.includes(cl) {
				held = append(held, cl)
			}
		}
	}
	deadline := time.Now().Add(moveWait)
	for {
		placed := s.placed(true)
		i := slices.IndexFunc(held, func(cl string) bool { return placed.owners[cl].moving })
		if i < 0 {
			return placed, nil
		}
		if time.Now().After(deadline) {
			se := apierrors.NewServiceUnavailable(fmt.Sprintf("cluster %q is moving between replicas; watch again from the same resourceVersion", held[i]))
			se.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
			return placedAs{}, se
		}
		select {
		case <-ctx.Done():
			return placedAs{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// carryMoved returns from with the position of each cluster of the request's scope sc
// that moved since from carried to the part of the replica that watches it now
// (owners), or the first cluster that cannot be carried. A part of from holds the
// position of such a cluster, but the replica that watches it now holds none, or an
// older one, because the cluster moved there after that part streamed it. The part of
// its old owner answers for the clusters that replica owns now only (ownedOnly), so it
// would not send what the cluster lost in the move; the new owner's part, given the
// position with the old part's epoch (cursor.origins), sends the changes after it from
// the change log that came with the cluster on a warm handover, or answers 410 Gone if
// none did (a cold move, a log off, a position too old for what came), and the client
// lists again. A cluster that is moving or left the fleet cannot be carried.
//
// A cluster that moved more than once (A to B to C, or back to A) can have positions
// in several parts, those of its earlier owners left in their parts. The newest is the
// one of the greatest resourceVersion: a warm handover continues the cluster's stream
// of changes where the old owner stopped (its new owner starts at the resourceVersion
// the old one committed last, and places the old positions in the log that came with
// it), so along the owners the resourceVersions of one cluster's positions grow. The
// changes counted after one resourceVersion (the n of rv.n) do not order positions of
// different parts (a relist's deletions that one owner counted, say). So among the
// positions of the greatest resourceVersion, the owner's is
// taken if it has one, else the one position they all are, else the cluster cannot be
// carried. A part may hold the position of a cluster that its replica no longer
// watches (its watch cache saw the cluster leave).
func carryMoved(from cursor, self string, sc scope, owners map[string]owner) (cursor, string, bool) {
	parts := from.partsAt(self)
	holders := map[string][]string{}
	for id, c := range parts {
		for cl := range c.positions {
			if sc.includes(cl) {
				holders[cl] = append(holders[cl], id)
			}
		}
	}
	carried := false
	for _, cl := range slices.Sorted(maps.Keys(holders)) {
		o, ok := owners[cl]
		if !ok || o.moving {
			return from, cl, false
		}
		newest, ok := newestHolder(parts, holders[cl], cl, o.replica)
		switch {
		case !ok:
			return from, cl, false
		case newest == o.replica:
			continue
		}
		src, dst := parts[newest], parts[o.replica]
		epoch := src.epochOf(cl)
		if dst.epoch == "" {
			dst.epoch = epoch
		}
		dst.positions = maps.Clone(dst.positions)
		if dst.positions == nil {
			dst.positions = map[string]position{}
		}
		dst.positions[cl] = src.positions[cl]
		dst.origins = maps.Clone(dst.origins)
		delete(dst.origins, cl)
		if epoch != dst.epoch {
			if dst.origins == nil {
				dst.origins = map[string]string{}
			}
			dst.origins[cl] = epoch
		}
		parts[o.replica] = dst
		carried = true
	}
	if !carried {
		return from, "", true
	}
	out := cursor{peers: map[string]string{}, replica: from.replica}
	for id, c := range parts {
		if id == self {
			out.epoch, out.positions, out.origins = c.epoch, c.positions, c.origins
			continue
		}
		out.peers[id] = c.String()
	}
	return out, "", true
}

// newestHolder returns which of the parts ids holds the newest position of cluster cl
// (see carryMoved), the owner's if it is as new; ok is false if that cannot be told.
func newestHolder(parts map[string]cursor, ids []string, cl, owner string) (string, bool) {
	var top uint64
	for _, id := range ids {
		top = max(top, parts[id].positions[cl].rv)
	}
	var at []string
	for _, id := range ids {
		if parts[id].positions[cl].rv == top {
			at = append(at, id)
		}
	}
	if slices.Contains(at, owner) {
		return owner, true
	}
	slices.Sort(at)
	for _, id := range at[1:] {
		if parts[id].positions[cl] != parts[at[0]].positions[cl] {
			return "", false
		}
	}
	return at[0], true
}

// deadlineWriter bounds each write of a proxied watch by timeout.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (w *deadlineWriter) Write(b []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer's Flush.
func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func appendClusters(missing []string, pp *peerPart, why string) []string {
	for _, cl := range slices.Sorted(maps.Keys(pp.clusters)) {
		missing = append(missing, fmt.Sprintf("%s (%s)", cl, why))
	}
	return missing
}

// objectRV returns the resourceVersion of a watch event's object: its metadata's, or,
// for a Table, its first row's object's.
func objectRV(o map[string]any) string {
	if md, ok := o["metadata"].(map[string]any); ok {
		if rv, ok := md["resourceVersion"].(string); ok && rv != "" {
			return rv
		}
	}
	if rows, ok := o["rows"].([]any); ok && len(rows) > 0 {
		if row, ok := rows[0].(map[string]any); ok {
			if obj, ok := row["object"].(map[string]any); ok {
				return objectRV(obj)
			}
		}
	}
	return ""
}

// setObjectRV sets the resourceVersion of a watch event's object, and of a Table's rows.
func setObjectRV(o map[string]any, rv string) {
	if md, ok := o["metadata"].(map[string]any); ok {
		if _, ok := md["resourceVersion"]; ok || o["rows"] == nil {
			md["resourceVersion"] = rv
		}
	}
	if rows, ok := o["rows"].([]any); ok {
		for _, r := range rows {
			if row, ok := r.(map[string]any); ok {
				if obj, ok := row["object"].(map[string]any); ok {
					setObjectRV(obj, rv)
				}
			}
		}
	}
}

// pipeWriter is the ResponseWriter of the local part of a fan-out watch: what the
// local watch writes is read from the other end of a pipe.
type pipeWriter struct {
	header  http.Header
	w       *io.PipeWriter
	once    sync.Once
	started chan int
}

func (pw *pipeWriter) Header() http.Header { return pw.header }

func (pw *pipeWriter) start(code int) {
	pw.once.Do(func() { pw.started <- code })
}

func (pw *pipeWriter) WriteHeader(code int) { pw.start(code) }

func (pw *pipeWriter) Write(b []byte) (int, error) {
	pw.start(http.StatusOK)
	return pw.w.Write(b)
}

// FlushError implements the flushing of http.ResponseController: a pipe has no buffer.
func (pw *pipeWriter) FlushError() error { return nil }

// ownedOnly narrows allow to the clusters this replica owns, for a request under
// /clusters/*/ that another replica forwarded: it answers for those only, and not for
// what it may still hold of others (a snapshot's clusters before it gives them up), so
// that the merged answers never hold a cluster twice, also in a watch, where the asking
// replica's view of the owners may lag.
func (s *Server) ownedOnly(allow func(string) bool) func(string) bool {
	owned := map[string]bool{}
	for _, st := range s.src.Status() {
		if st.Phase != aggregate.PhaseRemote && st.Phase != aggregate.PhaseMoving {
			owned[st.Name] = true
		}
	}
	return func(cl string) bool { return owned[cl] && (allow == nil || allow(cl)) }
}
