package server

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
)

// The Cluster resource has resourceVersions and watches, as kubectl get -w expects, but
// the clusters' statuses are computed from what the Manager observed (Source.Status),
// not stored: nothing tells the server when one changes. The clusterFeed finds the
// changes by comparing the statuses with those it saw last, each time a list, a get or
// a watch looks (a watch every clusterWatchPoll), and numbers them: its generation is
// the resourceVersion of the list, and a Cluster's is the generation at which its
// status last changed. A watch from a resourceVersion sends the changes after it that
// the feed's history still holds, else 410 Gone, as a watch cache does.
//
// The snapshot lag is left out of the comparison: it changes all the time, and would
// make every status new at every look. The changes between two looks coalesce into one.

const (
	// clusterWatchPoll is how often a watch of clusters looks at the statuses.
	clusterWatchPoll = time.Second
	// clusterFeedMinAge is how old the feed's last look may be for a watch to take it
	// as current, so that many watches do not each compare every status every poll.
	clusterFeedMinAge = clusterWatchPoll / 2
	// clusterHistory is how many changes the feed keeps for watches to resume from.
	clusterHistory = 1024
)

// clusterChange is one change of a Cluster, as the feed numbered it.
type clusterChange struct {
	gen uint64
	typ watch.EventType
	// c is the Cluster after the change (before it, for a deletion), with its
	// resourceVersion at gen.
	c Cluster
}

// clusterFeed numbers the changes of the clusters' statuses. See above.
type clusterFeed struct {
	// epoch tells this feed's resourceVersions from those of an earlier process.
	epoch string

	mu sync.Mutex
	// gen is the number of the last change.
	gen uint64
	// last is each cluster as last seen, with its resourceVersion.
	last map[string]Cluster
	// history holds the last changes, oldest first: the last clusterHistory of them
	// count (see recent); up to as many older ones wait to be dropped in one copy,
	// rather than one copy of the whole history at every change.
	history []clusterChange
	// looked is when the statuses were last compared.
	looked time.Time
	// changed is closed, and replaced, when gen moves.
	changed chan struct{}
}

func newClusterFeed(epoch string) *clusterFeed {
	return &clusterFeed{epoch: epoch, last: map[string]Cluster{}, changed: make(chan struct{})}
}

// rv formats generation gen as a resourceVersion.
func (f *clusterFeed) rv(gen uint64) string {
	return f.epoch + "." + strconv.FormatUint(gen, 10)
}

// parseRV returns the generation of resourceVersion rv. ok is false if rv is not one of
// this feed's.
func (f *clusterFeed) parseRV(rv string) (gen uint64, ok bool) {
	epoch, n, found := strings.Cut(rv, ".")
	if !found || epoch != f.epoch {
		return 0, false
	}
	gen, err := strconv.ParseUint(n, 10, 64)
	return gen, err == nil
}

// observe compares items, every cluster's current status, with what the feed saw last,
// records the differences, and returns the feed's generation and the items with their
// resourceVersions. items must be sorted by name and not used afterwards.
func (f *clusterFeed) observe(items []Cluster) (uint64, []Cluster) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.observeLocked(items)
}

func (f *clusterFeed) observeLocked(items []Cluster) (uint64, []Cluster) {
	// The real clock, not Options.Clock: this paces the looks, and ages nothing.
	f.looked = time.Now()
	gen := f.gen
	seen := make(map[string]bool, len(items))
	for i := range items {
		c := &items[i]
		seen[c.Name] = true
		old, ok := f.last[c.Name]
		switch {
		case !ok:
			f.recordLocked(watch.Added, c)
		case !sameCluster(old, *c):
			f.recordLocked(watch.Modified, c)
		default:
			c.ResourceVersion = old.ResourceVersion
		}
	}
	for name, old := range f.last {
		if !seen[name] {
			delete(f.last, name)
			f.recordLocked(watch.Deleted, &old)
		}
	}
	if f.gen != gen {
		close(f.changed)
		f.changed = make(chan struct{})
	}
	return f.gen, items
}

// recordLocked numbers a change of c and sets c's resourceVersion to it.
func (f *clusterFeed) recordLocked(typ watch.EventType, c *Cluster) {
	f.gen++
	c.ResourceVersion = f.rv(f.gen)
	if typ != watch.Deleted {
		f.last[c.Name] = *c.DeepCopy()
	}
	if len(f.history) == 2*clusterHistory {
		f.history = append(f.history[:0], f.history[clusterHistory:]...)
	}
	f.history = append(f.history, clusterChange{gen: f.gen, typ: typ, c: *c.DeepCopy()})
}

// recentLocked returns the last clusterHistory changes, oldest first.
func (f *clusterFeed) recentLocked() []clusterChange {
	if n := len(f.history); n > clusterHistory {
		return f.history[n-clusterHistory:]
	}
	return f.history
}

// sameCluster reports whether a and b differ in nothing but their snapshot lag and
// resourceVersion.
func sameCluster(a, b Cluster) bool {
	a.Status.SnapshotLag, b.Status.SnapshotLag = nil, nil
	a.ResourceVersion, b.ResourceVersion = "", ""
	return equality.Semantic.DeepEqual(a, b)
}

// since returns the changes after generation gen, and the channel closed at the next
// change. lost is set if the history no longer reaches back to gen.
func (f *clusterFeed) since(gen uint64) (changes []clusterChange, changed <-chan struct{}, lost bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	history := f.recentLocked()
	if gen < f.gen && (len(history) == 0 || history[0].gen > gen+1) {
		return nil, f.changed, true
	}
	for i := range history {
		if history[i].gen > gen {
			changes = append(changes, history[i:]...)
			break
		}
	}
	return changes, f.changed, false
}

// clusterSelector is the selection of a list or watch of clusters: a Cluster has no
// labels, and its only field is metadata.name (what kubectl get clusters NAME -w uses).
type clusterSelector struct {
	labels labels.Selector
	fields fields.Selector
}

func parseClusterSelector(p *listParams) (clusterSelector, error) {
	ls, err := labels.Parse(p.labelSelector)
	if err != nil {
		return clusterSelector{}, badParameter("labelSelector", err)
	}
	fs, err := fields.ParseSelector(p.fieldSelector)
	if err != nil {
		return clusterSelector{}, badParameter("fieldSelector", err)
	}
	for _, r := range fs.Requirements() {
		if r.Field != "metadata.name" {
			return clusterSelector{}, badParameter("fieldSelector", fmt.Errorf("field %q is not supported for clusters.fleetwatch.io: only metadata.name", r.Field))
		}
	}
	return clusterSelector{labels: ls, fields: fs}, nil
}

func (cs clusterSelector) matches(c *Cluster) bool {
	return cs.labels.Matches(labels.Set(c.Labels)) && cs.fields.Matches(fields.Set{"metadata.name": c.Name})
}

// watchClusters serves a watch of clusters.fleetwatch.io, with the framing and the
// parameters of serveWatch: the current state as ADDED events first for resourceVersion
// "" or "0" (or sendInitialEvents=true, followed by the initial-events-end BOOKMARK),
// else the changes after the resourceVersion (410 Gone if it is not this server's or
// too old), and BOOKMARKs with allowWatchBookmarks. Under a cluster prefix, and for a
// token's clusters, only the clusters of the scope are sent. In a sharded fleet, the
// clusters of other replicas are sent as this replica sees them (Remote, with their
// owner), not with their owners' statuses, which a list shows.
func (s *Server) watchClusters(w http.ResponseWriter, r *http.Request, sc scope, name string, hasName bool, p *listParams, sel clusterSelector) error {
	f, ok := negotiate(r.Header.Get("Accept"), false, formatTable)
	if !ok {
		return notAcceptable("watches of clusters.fleetwatch.io are served as application/json or as a meta.k8s.io/v1 Table")
	}
	var opts tableOptions
	if f == formatTable {
		var err error
		if opts, err = parseTableOptions(r.URL.Query()); err != nil {
			return err
		}
	}
	include := func(c *Cluster) bool {
		return sc.includes(c.Name) && (!hasName || c.Name == name) && sel.matches(c)
	}
	gen, items := s.clusterFeed.observe(s.clusterItems())
	zero := p.resourceVersion == "" || p.resourceVersion == "0"
	initial := p.sendInitialEvents != nil && *p.sendInitialEvents || p.sendInitialEvents == nil && zero
	if !zero {
		from, ok := s.clusterFeed.parseRV(p.resourceVersion)
		switch {
		case !ok || from > gen:
			if !initial {
				return expired(fmt.Sprintf("too old resource version: %s is not a resourceVersion of this server's clusters (it is from before the server started); list again", p.resourceVersion))
			}
		case !initial:
			gen = from
		}
	}
	if _, _, lost := s.clusterFeed.since(gen); lost {
		return expired(fmt.Sprintf("too old resource version: the history of the clusters no longer reaches back to %s; list again", p.resourceVersion))
	}

	timeout := s.opts.WatchTimeout
	if p.timeout > 0 {
		timeout = min(timeout, p.timeout)
	}
	ws := &watchStream{s: s, w: bufio.NewWriterSize(w, 64<<10), rctl: http.NewResponseController(w)}
	gr := clustersGR.String()
	s.metrics.watches.WithLabelValues(gr).Inc()
	defer s.metrics.watches.WithLabelValues(gr).Dec()
	sentHeaders := false
	send := func(typ watch.EventType, c *Cluster, rv string) error {
		var obj any = c
		if f == formatTable {
			t := s.clustersTable([]Cluster{*c}, opts)
			if typ == watch.Bookmark {
				t.Rows = nil
				t.ResourceVersion = rv
			}
			if sentHeaders {
				t.ColumnDefinitions = nil
			}
			sentHeaders = true
			obj = t
		}
		if typ != watch.Bookmark {
			s.metrics.watchEvents.WithLabelValues(gr).Inc()
		}
		return ws.writeEvent(typ, obj)
	}
	bookmark := func(annotations map[string]string) error {
		c := &Cluster{TypeMeta: metav1.TypeMeta{Kind: "Cluster", APIVersion: SchemeGroupVersion.String()}}
		c.ResourceVersion, c.Annotations = s.clusterFeed.rv(gen), annotations
		return send(watch.Bookmark, c, c.ResourceVersion)
	}

	w.Header().Set("Content-Type", contentTypeJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	ws.deadline()
	if initial {
		for i := range items {
			if include(&items[i]) {
				if err := send(watch.Added, &items[i], items[i].ResourceVersion); err != nil {
					return nil
				}
			}
		}
		if p.sendInitialEvents != nil && *p.sendInitialEvents {
			if err := bookmark(map[string]string{metav1.InitialEventsAnnotationKey: "true"}); err != nil {
				return nil
			}
		}
	}

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	poll := time.NewTicker(clusterWatchPoll)
	defer poll.Stop()
	var bookmarks <-chan time.Time
	if p.bookmarks {
		t := time.NewTicker(s.opts.BookmarkInterval)
		defer t.Stop()
		bookmarks = t.C
	}
	for {
		changes, changed, lost := s.clusterFeed.since(gen)
		ws.deadline()
		if lost {
			_ = ws.writeEvent(watch.Error, statusOf(r, expired("too old resource version: the watch fell behind the history of the clusters; list again")))
			_ = ws.flush()
			return nil
		}
		for i := range changes {
			ch := &changes[i]
			gen = ch.gen
			if include(&ch.c) {
				if err := send(ch.typ, &ch.c, ch.c.ResourceVersion); err != nil {
					return nil
				}
			}
		}
		if ws.flush() != nil {
			return nil
		}
		select {
		case <-changed:
		case <-poll.C:
			s.lookAtClusters()
		case <-bookmarks:
			if bookmark(nil) != nil || ws.flush() != nil {
				return nil
			}
		case <-timer.C:
			return nil
		case <-r.Context().Done():
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// lookAtClusters has the feed compare the statuses, unless it did so less than
// clusterFeedMinAge ago.
func (s *Server) lookAtClusters() {
	f := s.clusterFeed
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.looked) < clusterFeedMinAge {
		return
	}
	f.observeLocked(s.clusterItems())
}
