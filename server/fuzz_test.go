package server

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/history"
)

func FuzzParseCursor(f *testing.F) {
	f.Add(cursor{epoch: "e", positions: map[string]position{"a": {rv: 1, n: 2}}}.String())
	f.Add(cursor{epoch: "e", positions: map[string]position{"a": {gen: 3, rv: 1, n: 2}, "b": {gen: 1}}}.String())
	f.Add(cursor{epoch: "e", positions: map[string]position{"a": {gen: 1, rv: 14, n: 1, scopes: "shop=12.1,web=14"}}}.String())
	f.Add("123")
	f.Add("eyJlIjoiZSJ9")
	f.Add(cursor{epoch: "e", replica: "r0", peers: map[string]string{"r1": cursor{epoch: "f"}.String()}}.String())
	f.Add("")
	f.Add(cursor{epoch: "e", short: true, resource: "pods.v1", seq: 7}.String())
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = partJSON(s) // any input, without a panic
		c, err := parseCursor(s)
		if err != nil {
			return
		}
		again, err := parseCursor(c.String())
		if err != nil || again.String() != c.String() {
			t.Fatalf("cursor %q does not round-trip: %v", s, err)
		}
		if c.String() != cursorViaJSON(c) {
			t.Fatalf("cursor %q encodes as %q, not as encoding/json writes it, %q", s, c.String(), cursorViaJSON(c))
		}
		// A replica's own part, as its watch writes it: the merged cursor written around
		// it is the one encoded whole.
		if part, ok := partJSON(c.String()); ok {
			peers := map[string]string{"r1": "x"}
			if got, want := mergedAround(part, peersJSON(peers), "r0"), (cursor{epoch: c.epoch, positions: c.positions, peers: peers, replica: "r0"}).String(); got != want {
				t.Fatalf("cursor %q: merged around %q, want %q", s, got, want)
			}
		}
		// Any replica can take it over, and what it hands out parses.
		for _, self := range []string{"r0", "r1", c.replica} {
			r := c.rootedAt(self)
			if r.epoch == "" {
				r.epoch = "new"
			}
			if _, err := parseCursor(r.String()); err != nil {
				t.Fatalf("cursor %q rooted at %q: %+v does not parse: %v", s, self, r, err)
			}
		}
	})
}

func FuzzParseContinue(f *testing.F) {
	f.Add(continueToken{resourceVersion: cursor{epoch: "e"}.String(), after: aggregate.Key{Cluster: "a/b", Name: "n"}}.String())
	f.Add("")
	f.Add("e30")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := parseContinue(s)
		if err != nil {
			return
		}
		if again, err := parseContinue(tok.String()); err != nil || again != tok {
			t.Fatalf("token %q does not round-trip: %+v, %v", s, again, err)
		}
	})
}

func FuzzParseRoute(f *testing.F) {
	for _, s := range []string{"/clusters/*/api/v1/pods", "/clusters/a%2Fb/apis/apps/v1/namespaces/x/deployments/y/scale", "/apis", "/clusters/%zz", "//"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		rt, err := parseRoute(path)
		if err != nil || rt.kind == routeNotFound {
			return
		}
		if rt.kind == routeResource && (rt.resource == "" || rt.version == "") {
			t.Fatalf("route %+v of %q has no resource or version", rt, path)
		}
	})
}

// FuzzListParameters sends lists and watches with arbitrary parameters: the server never
// panics or fails, and every error is a Status naming the parameter.
func FuzzListParameters(f *testing.F) {
	fx := newFixture(f, nil)
	var l itemList
	fx.getOK(clusterPath(allClusters)+"/api/v1/pods?limit=2", &l)
	for _, seed := range [][6]string{
		{"app=web", "metadata.name=web-1", "2", "", "", ""},
		{"app in (web", "", "", "", "", ""},
		{"", "spec.x=1", "", "", "", ""},
		{"", "", "-3", l.Metadata.Continue, "", ""},
		{"", "", "1", "", l.Metadata.ResourceVersion, "Exact"},
		{"", "", "", "bad", "bad", "Newest"},
		{"!app", "metadata.namespace!=default", "", "", "0", "NotOlderThan"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], false)
		f.Add(seed[0], seed[1], seed[2], seed[3], seed[4], seed[5], true)
	}
	h := fx.server.Handler()
	f.Fuzz(func(t *testing.T, labelSel, fieldSel, limit, cont, rv, rvMatch string, watching bool) {
		q := url.Values{}
		for k, v := range map[string]string{"labelSelector": labelSel, "fieldSelector": fieldSel, "limit": limit,
			"continue": cont, "resourceVersion": rv, "resourceVersionMatch": rvMatch} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if watching {
			q.Set("watch", "1")
			q.Set("timeoutSeconds", "1")
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, clusterPath(allClusters)+"/api/v1/pods?"+q.Encode(), nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := newRecorder()
		if watching {
			// A watch that started is ended right away: what matters is how it starts.
			cancel()
		}
		h.ServeHTTP(rec, req)
		switch rec.code {
		case http.StatusOK:
			return
		case http.StatusBadRequest, http.StatusGone:
		default:
			t.Fatalf("?%s: %d %s", q.Encode(), rec.code, rec.buf)
		}
		var st metav1.Status
		if err := json.Unmarshal(rec.buf, &st); err != nil || st.Kind != "Status" || int(st.Code) != rec.code {
			t.Fatalf("?%s: not a Status: %s", q.Encode(), rec.buf)
		}
		if rec.code == http.StatusBadRequest {
			param, _, _ := strings.Cut(st.Message, ":")
			if q.Get(param) == "" {
				t.Fatalf("?%s: 400 names %q, which was not sent: %s", q.Encode(), param, st.Message)
			}
		}
	})
}

func FuzzParseHistoryContinue(f *testing.F) {
	f.Add(historyContinue{Digest: "0123456789abcdef", After: 7}.String(), "0123456789abcdef", false)
	f.Add(historyContinue{Digest: "0123456789abcdef", Parts: changesPosition{"fleetwatch-0": {Seq: 7}}, Since: "2026-12-01T10:00:00Z"}.String(), "0123456789abcdef", true)
	f.Add("", "", false)
	f.Add("e30", "", true)
	f.Add(`eyJxIjoiIiwiYSI6MX0`, "", false)
	f.Fuzz(func(t *testing.T, s, digest string, fleet bool) {
		tok, err := parseHistoryContinue(s, digest, fleet, "")
		if err != nil {
			return
		}
		if tok.After == 0 && len(tok.Parts) == 0 {
			t.Fatalf("token %q parses to no position", s)
		}
		again, err := parseHistoryContinue(tok.String(), digest, fleet, "")
		if err != nil || again.After != tok.After || !maps.Equal(again.Parts, tok.Parts) || again.Since != tok.Since {
			t.Fatalf("token %q does not round-trip: %+v, %v", s, again, err)
		}
	})
}

// FuzzHistoryParameters parses arbitrary parameters of the changes and of an object's
// history: never a panic, and every error is a 400 Status naming a parameter.
func FuzzHistoryParameters(f *testing.F) {
	for _, q := range []string{
		"q=web&limit=2", "since=1h&type=Added,Deleted", "after=12&cluster=prod-*", "since=2026-12-01T10:00:00Z",
		"continue=eyJxIjoiIiwiYSI6MX0", "version=v1&resource=pods&name=a&namespace=b&group=", "type=,", "limit=99999999999999999999",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		check := func(err error) {
			t.Helper()
			if err == nil {
				return
			}
			var se *apierrors.StatusError
			if errors.As(err, &se) && se.ErrStatus.Code == http.StatusGone && q.Get("continue") != "" {
				return // a token of another replica's log
			}
			if !errors.As(err, &se) || se.ErrStatus.Code != http.StatusBadRequest || se.ErrStatus.Details == nil ||
				len(se.ErrStatus.Details.Causes) == 0 || se.ErrStatus.Details.Causes[0].Field == "" {
				t.Fatalf("%q: %v is not a 400 naming a parameter", raw, err)
			}
		}
		for _, fleet := range []bool{false, true} {
			req, err := parseChanges(q, allClusters, now, fleet, "fleetwatch-0")
			check(err)
			if err == nil && (req.Limit < 1 || req.Limit > history.MaxLimit) {
				t.Fatalf("%q: limit %d", raw, req.Limit)
			}
		}
		_, _, err = parseObjectHistory(q, prod, "")
		check(err)
	})
}
