package server

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cursorForms runs test with each form of cursor that a server hands out: short (a
// server without a change log, outside a sharded fleet: the default) and positions
// (here as a replica of a sharded fleet, as with a change log).
func cursorForms(t *testing.T, test func(t *testing.T, opts func(*Options))) {
	t.Run("short", func(t *testing.T) { test(t, func(*Options) {}) })
	t.Run("positions", func(t *testing.T) { test(t, func(o *Options) { o.Replica = "r0" }) })
}

// TestShortCursor: without a change log and outside a sharded fleet, the
// resourceVersions of lists, events and bookmarks are short, whatever the number of
// clusters; with either, they name each cluster's position.
func TestShortCursor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  func(*Options)
		short bool
	}{
		{"alone", nil, true},
		{"replica", func(o *Options) { o.Replica = "r0" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts)
			pods := clusterPath(allClusters) + "/api/v1/pods"
			for i := range 200 {
				f.apply(fmt.Sprintf("cluster-%03d", i), podsGVR, pod("default", "p", "7", web))
			}
			f.sync()
			var l itemList
			f.getOK(pods, &l)
			c, err := parseCursor(l.Metadata.ResourceVersion)
			if err != nil || c.short != tc.short {
				t.Fatalf("list resourceVersion %q: %#v, %v; want short %v", l.Metadata.ResourceVersion, c, err, tc.short)
			}
			if tc.short && (len(l.Metadata.ResourceVersion) > 64 || c.resource != "pods.v1") {
				t.Errorf("short list resourceVersion %q (%d bytes): %#v", l.Metadata.ResourceVersion, len(l.Metadata.ResourceVersion), c)
			}
			if !tc.short && len(c.positions) != 203 {
				t.Errorf("list resourceVersion names %d clusters, want 203", len(c.positions))
			}
			w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
			f.apply("cluster-007", podsGVR, pod("default", "p", "8", web))
			e := w.next()
			if c, err := parseCursor(e.Object.GetResourceVersion()); err != nil || c.short != tc.short || tc.short && len(e.Object.GetResourceVersion()) > 64 {
				t.Errorf("event resourceVersion %q: %#v, %v", e.Object.GetResourceVersion(), c, err)
			}
		})
	}
}

// TestShortCursorResumesEveryEvent: a watch from the resourceVersion of any event of a
// watch of every cluster, or of a watch of one, gets exactly the changes after it in
// its scope.
func TestShortCursorResumesEveryEvent(t *testing.T) {
	cursorForms(t, func(t *testing.T, opts func(*Options)) {
		f := newFixture(t, opts)
		for _, scope := range []string{allClusters, staging} {
			pods := clusterPath(scope) + "/api/v1/pods"
			var l itemList
			f.getOK(pods, &l)
			w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
			var want []string
			for i := range 9 {
				cl := []string{prod, staging, edge}[i%3]
				name := fmt.Sprintf("%s-%d", scope, i)
				f.apply(cl, podsGVR, pod("default", name, fmt.Sprint(1000+i), web))
				if scope == allClusters || cl == scope {
					want = append(want, "ADDED "+cl+"|default/"+name)
				}
			}
			var got, rvs []string
			for range want {
				e := w.next()
				got, rvs = append(got, e.ref()), append(rvs, e.Object.GetResourceVersion())
			}
			w.stop()
			if !slices.Equal(got, want) {
				t.Fatalf("%s: events %q, want %q", scope, got, want)
			}
			for i, rv := range rvs {
				w := f.watch(pods + "?watch=1&resourceVersion=" + url.QueryEscape(rv))
				var rest []string
				for range want[i+1:] {
					rest = append(rest, w.next().ref())
				}
				if !slices.Equal(rest, want[i+1:]) {
					t.Errorf("%s: from the cursor of event %d: %q, want %q", scope, i, rest, want[i+1:])
				}
				w.none(50 * time.Millisecond)
				w.stop()
			}
		}
	})
}

// TestShortCursorRefused: a short cursor is resumed only by the run and the resource
// that handed it out, and only while the history reaches back to it for every cluster
// of the watch's scope.
func TestShortCursorRefused(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.HistorySize = 4 })
	pods := clusterPath(allClusters) + "/api/v1/pods"
	var l itemList
	f.getOK(pods, &l)
	c, err := parseCursor(l.Metadata.ResourceVersion)
	if err != nil || !c.short {
		t.Fatalf("list resourceVersion %#v, %v", c, err)
	}
	gone := func(path, rv, message string) {
		t.Helper()
		st := f.get(path+"?watch=1&resourceVersion="+url.QueryEscape(rv)).status(t, http.StatusGone)
		if st.Reason != metav1.StatusReasonExpired || !strings.Contains(st.Message, message) {
			t.Errorf("watch of %s from %s: Status %+v, want one that says %q", path, rv, st, message)
		}
	}
	gone(clusterPath(allClusters)+"/api/v1/nodes", l.Metadata.ResourceVersion, "a resourceVersion of pods.v1, not of nodes.v1")
	future := c
	future.seq += 100
	gone(pods, future.String(), "after the")
	other := c
	other.epoch = "other"
	gone(pods, other.String(), "not a resourceVersion of this server's view")

	// Five changes of prod: the history of 4 lost one.
	for i := range 5 {
		f.apply(prod, podsGVR, pod("default", fmt.Sprint("n-", i), fmt.Sprint(600+i), nil))
	}
	f.sync()
	gone(pods, l.Metadata.ResourceVersion, `the history of cluster "prod" no longer reaches back`)
	// The other clusters lost nothing.
	w := f.watch(clusterPath(staging) + "/api/v1/pods?watch=1&resourceVersion=" + url.QueryEscape(l.Metadata.ResourceVersion))
	f.apply(staging, podsGVR, pod("default", "s", "260", nil))
	if e := w.next(); e.ref() != "ADDED staging|default/s" {
		t.Errorf("got %s", e.ref())
	}
	// Exact: at the list's resourceVersion, edge's state is still the current one;
	// prod's and staging's changed since.
	w.stop()
	f.get(pods+"?resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)+"&resourceVersionMatch=Exact").status(t, http.StatusGone)
	f.getOK(clusterPath(edge)+"/api/v1/pods?resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)+"&resourceVersionMatch=Exact", &itemList{})
	f.get(clusterPath(staging)+"/api/v1/pods?resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)+"&resourceVersionMatch=Exact").status(t, http.StatusGone)

	// A server that hands out positions, as with a change log, takes no short cursor.
	r := newFixture(t, func(o *Options) { o.Replica = "r0" })
	st := r.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion)).status(t, http.StatusGone)
	if st.Reason != metav1.StatusReasonExpired {
		t.Errorf("a short cursor at a server of positions: Status %+v", st)
	}
}

func TestParseShortCursor(t *testing.T) {
	c := cursor{epoch: "e", short: true, resource: "deployments.v1.apps", seq: 42}
	got, err := parseCursor(c.String())
	if err != nil || !got.short || got.resource != c.resource || got.seq != 42 || got.epoch != "e" {
		t.Errorf("%s: %#v, %v", c, got, err)
	}
	zero := cursor{epoch: "e", short: true, resource: "pods.v1"}
	if got, err := parseCursor(zero.String()); err != nil || !got.short || got.seq != 0 {
		t.Errorf("%s: %#v, %v", zero, got, err)
	}
	for _, j := range []string{
		`{"e":"e","s":1}`,
		`{"e":"e","g":"pods.v1"}`,
		`{"e":"e","g":"pods.v1","s":-1}`,
		`{"e":"e","g":"pods.v1","s":1.5}`,
		`{"e":"e","g":"pods.v1","s":"1"}`,
		`{"e":"e","g":"pods.v1","s":1,"c":{"prod":"1"}}`,
		`{"e":"e","g":"pods.v1","s":1,"r":"r0"}`,
		`{"e":"e","g":"pods.v1","s":1,"p":{"r1":"x"}}`,
		`{"g":"pods.v1","s":1}`,
	} {
		if c, err := parseCursor(base64.RawURLEncoding.EncodeToString([]byte(j))); err == nil {
			t.Errorf("%s parsed: %#v", j, c)
		}
	}
}

// TestShortCursorNotForALimitedToken: a short cursor counts the changes of every
// cluster, so a token limited to some clusters gets cursors of their positions only,
// in lists, events and bookmarks, and a short cursor it got elsewhere is not resumed:
// it would learn how much the other clusters change.
func TestShortCursorNotForALimitedToken(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "all-s3cret user=admin\nstaging-s3cret user=ci clusters=staging\n")
	f := newFixture(t, func(o *Options) {
		o.TokenFile = tokens
		o.BookmarkInterval = 30 * time.Millisecond
	})
	admin := []string{"Authorization", "Bearer all-s3cret"}
	ci := []string{"Authorization", "Bearer staging-s3cret"}
	pods := clusterPath(allClusters) + "/api/v1/pods"
	var all, limited itemList
	f.getOK(pods, &all, admin...)
	f.getOK(pods, &limited, ci...)
	if c, err := parseCursor(all.Metadata.ResourceVersion); err != nil || !c.short {
		t.Errorf("the admin's list: %#v, %v; want a short cursor", c, err)
	}
	c, err := parseCursor(limited.Metadata.ResourceVersion)
	if err != nil || c.short || len(c.positions) != 1 || c.positions[staging] == (position{}) {
		t.Fatalf("the limited token's list: %#v, %v; want staging's position only", c, err)
	}
	w := f.watch(pods+"?watch=1&allowWatchBookmarks=true&resourceVersion="+url.QueryEscape(limited.Metadata.ResourceVersion), ci...)
	f.apply(prod, podsGVR, pod("default", "p-1", "150", web))
	f.apply(staging, podsGVR, pod("default", "s-1", "250", web))
	seen := 0
	for seen < 3 {
		e := w.next()
		if c, err := parseCursor(e.Object.GetResourceVersion()); err != nil || c.short || len(c.positions) != 1 {
			t.Fatalf("%s: resourceVersion %#v, %v; want staging's position only", e.ref(), c, err)
		}
		if e.Type != "BOOKMARK" && e.ref() != "ADDED staging|default/s-1" {
			t.Fatalf("got %s", e.ref())
		}
		seen++
	}
	w.stop()
	st := f.get(pods+"?watch=1&resourceVersion="+url.QueryEscape(all.Metadata.ResourceVersion), ci...).status(t, http.StatusGone)
	if st.Reason != metav1.StatusReasonExpired {
		t.Errorf("the admin's short cursor, with the limited token: Status %+v", st)
	}
	f.get(clusterPath(staging)+"/api/v1/pods?resourceVersionMatch=Exact&resourceVersion="+url.QueryEscape(all.Metadata.ResourceVersion), ci...).status(t, http.StatusGone)
	// The admin resumes it.
	w = f.watch(pods+"?watch=1&resourceVersion="+url.QueryEscape(all.Metadata.ResourceVersion), admin...)
	if e := w.next(); e.ref() != "ADDED prod|default/p-1" {
		t.Errorf("the admin, from its list: %s", e.ref())
	}
}
