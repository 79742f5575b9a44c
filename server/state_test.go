package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateOnlyForReplicas: the state of a cluster handed over is served to a client
// that the home cluster allows "get" on its clusters/state, again and again until that
// client acknowledges it (a DELETE), then no more; to no one else, and acknowledged by
// no one else, as an attacker would try: without a token, with a token of the token
// file (restricted to the cluster or not), with a delegated token that may read the
// cluster or every cluster, with the grant of another cluster's state, or through
// another path.
func TestStateOnlyForReplicas(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("all-token\nprod-token user=ci clusters=prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, home := newDelegatedFixture(t, nil)
	g := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	state := []byte("FWCS\x01 the state of prod")
	for _, src := range []*fakeSource{f.src, g.src} {
		src.mu.Lock()
		src.states = map[string][]byte{prod: state}
		src.mu.Unlock()
	}
	home.set(func(h *fakeHome) {
		h.users["replica-token"] = "system:serviceaccount:fleetwatch:fleetwatch"
		h.grants["system:serviceaccount:fleetwatch:fleetwatch"] = []string{"state:" + prod}
		h.users["reader-token"] = "reader"
		h.grants["reader"] = []string{""}
		h.users["prod-reader-token"] = "prod-reader"
		h.grants["prod-reader"] = []string{prod}
		h.users["other-state-token"] = "other"
		h.grants["other"] = []string{"state:" + staging}
	})
	path := StatePath(prod)
	for _, tc := range []struct {
		name   string
		f      *fixture
		path   string
		header []string
		code   int
	}{
		{"no token", f, path, nil, http.StatusUnauthorized},
		{"a token the home cluster does not know", f, path, bearer("guess"), http.StatusUnauthorized},
		{"a reader of every cluster", f, path, bearer("reader-token"), http.StatusForbidden},
		{"a reader of the cluster", f, path, bearer("prod-reader-token"), http.StatusForbidden},
		{"the state of another cluster only", f, path, bearer("other-state-token"), http.StatusForbidden},
		{"through the cluster's prefix", f, clusterPath(prod) + path, bearer("replica-token"), http.StatusForbidden},
		{"an unrestricted token of the token file", g, path, bearer("all-token"), http.StatusForbidden},
		{"a token of the token file limited to the cluster", g, path, bearer("prod-token"), http.StatusForbidden},
		{"a replica's, for a cluster not handed over", f, StatePath(staging), bearer("replica-token"), http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.f.get(tc.path, tc.header...)
			if r.code != tc.code {
				t.Fatalf("got %d %s, want %d", r.code, r.body, tc.code)
			}
			if string(r.body) == string(state) {
				t.Fatal("the state was served")
			}
			// Nor can it make the state's new owner start cold by acknowledging it.
			want := tc.code
			if tc.code == http.StatusForbidden && !strings.HasPrefix(tc.path, "/apis/") {
				want = http.StatusMethodNotAllowed // not a state's path: read-only
			}
			if r := tc.f.do(http.MethodDelete, tc.path, tc.header...); r.code != want {
				t.Fatalf("DELETE: got %d %s, want %d", r.code, r.body, want)
			}
		})
	}
	// Served whole at every attempt until acknowledged: a transfer that broke off can
	// be made again.
	for range 2 {
		r := f.get(path, bearer("replica-token")...)
		if r.code != http.StatusOK || string(r.body) != string(state) {
			t.Fatalf("the replica got %d %q", r.code, r.body)
		}
	}
	if r := f.do(http.MethodDelete, path, bearer("replica-token")...); r.code != http.StatusOK {
		t.Fatalf("the acknowledgement: got %d %s", r.code, r.body)
	}
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		if r := f.do(method, path, bearer("replica-token")...); r.code != http.StatusNotFound {
			t.Errorf("%s after the acknowledgement: got %d %s, want 404", method, r.code, r.body)
		}
	}
	// DELETE stays refused everywhere else.
	if r := f.do(http.MethodDelete, clusterPath(prod)+"/api/v1/pods", bearer("replica-token")...); r.code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE of pods: got %d, want 405", r.code)
	}
}
