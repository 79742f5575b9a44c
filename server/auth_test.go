package server

import (
	"net/http"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestAuthentication(t *testing.T) {
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", "# operators\nfirst-token\n\n  second-token  \n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	pods := clusterPath(prod) + "/api/v1/pods"
	for _, tc := range []struct {
		name, path, auth string
		code             int
	}{
		{"no header", pods, "", http.StatusUnauthorized},
		{"wrong token", pods, "Bearer third-token", http.StatusUnauthorized},
		{"prefix of a token", pods, "Bearer first", http.StatusUnauthorized},
		{"comment", pods, "Bearer # operators", http.StatusUnauthorized},
		{"not bearer", pods, "Basic Zmlyc3QtdG9rZW4=", http.StatusUnauthorized},
		{"empty bearer", pods, "Bearer ", http.StatusUnauthorized},
		{"first token", pods, "Bearer first-token", http.StatusOK},
		{"second token, trimmed", pods, "bearer second-token", http.StatusOK},
		{"metrics need a token", "/metrics", "", http.StatusUnauthorized},
		{"discovery needs a token", "/apis", "", http.StatusUnauthorized},
		{"healthz", "/healthz", "", http.StatusOK},
		{"livez", "/livez", "", http.StatusOK},
		{"readyz", "/readyz", "", http.StatusOK},
		{"path that only looks like a probe", "/healthz/../api", "", http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.auth != "" {
				h = []string{"Authorization", tc.auth}
			}
			r := f.get(tc.path, h...)
			if r.code != tc.code {
				t.Fatalf("%d %s, want %d", r.code, r.body, tc.code)
			}
			if tc.code == http.StatusUnauthorized {
				st := r.status(t, http.StatusUnauthorized)
				if st.Reason != metav1.StatusReasonUnauthorized || r.header.Get("WWW-Authenticate") == "" {
					t.Errorf("Status %+v, WWW-Authenticate %q", st, r.header.Get("WWW-Authenticate"))
				}
				if strings.Contains(string(r.body), "token") && strings.Contains(string(r.body), "first") {
					t.Errorf("the response shows a token: %s", r.body)
				}
			}
		})
	}

	t.Run("rotation", func(t *testing.T) {
		replaceFile(t, writeFile(t, t.TempDir(), "new", "third-token\n"), tokens)
		if r := f.get(pods, "Authorization", "Bearer first-token"); r.code != http.StatusUnauthorized {
			t.Errorf("revoked token: %d", r.code)
		}
		if r := f.get(pods, "Authorization", "Bearer third-token"); r.code != http.StatusOK {
			t.Errorf("new token: %d", r.code)
		}
	})

	t.Run("file removed", func(t *testing.T) {
		if err := os.Remove(tokens); err != nil {
			t.Fatal(err)
		}
		if r := f.get(pods, "Authorization", "Bearer third-token"); r.code != http.StatusUnauthorized {
			t.Errorf("token of a removed file: %d", r.code)
		}
		writeFile(t, dir, "tokens", "fourth-token\n")
		if r := f.get(pods, "Authorization", "Bearer fourth-token"); r.code != http.StatusOK {
			t.Errorf("token of the file written again: %d", r.code)
		}
	})
}

func TestTokenFilePrincipal(t *testing.T) {
	tf, err := loadTokenFile(writeFile(t, t.TempDir(), "tokens", "a\n# b\nc\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := tf.authenticate("Bearer c")
	if !ok || p.name != "token-3" || p.allowCluster != nil {
		t.Errorf("principal %+v, %v", p, ok)
	}
}

func TestRecoverPanics(t *testing.T) {
	h := recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	rec := newRecorder()
	req, _ := http.NewRequest(http.MethodGet, "/x", nil)
	h.ServeHTTP(&statusWriter{ResponseWriter: rec}, req)
	r := response{code: rec.code, header: rec.header, body: rec.buf}
	st := r.status(t, http.StatusInternalServerError)
	if strings.Contains(st.Message, "boom") {
		t.Errorf("the panic's value reached the client: %+v", st)
	}
}
