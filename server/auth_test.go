package server

import (
	"bytes"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
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
		eventually(t, "the revoked token is refused", func() bool {
			return f.get(pods, "Authorization", "Bearer first-token").code == http.StatusUnauthorized
		})
		if r := f.get(pods, "Authorization", "Bearer third-token"); r.code != http.StatusOK {
			t.Errorf("new token: %d", r.code)
		}
	})

	t.Run("file removed", func(t *testing.T) {
		if err := os.Remove(tokens); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the token of a removed file is refused", func() bool {
			return f.get(pods, "Authorization", "Bearer third-token").code == http.StatusUnauthorized
		})
		writeFile(t, dir, "tokens", "fourth-token\n")
		eventually(t, "the token of the file written again is accepted", func() bool {
			return f.get(pods, "Authorization", "Bearer fourth-token").code == http.StatusOK
		})
	})
}

func TestTokenFilePrincipal(t *testing.T) {
	tf, err := loadTokenFile(writeFile(t, t.TempDir(), "tokens", "a\n# b\nc\nd user=ci clusters=prod,stag*\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := tf.authenticate("c")
	if p == nil || p.name != "token-3" || p.access != nil {
		t.Errorf("principal of c: %+v", p)
	}
	p = tf.authenticate("d")
	if p == nil || p.name != "ci" || p.access == nil {
		t.Fatalf("principal of d: %+v", p)
	}
	if ok, err := p.access.metrics(t.Context()); ok || err != nil {
		t.Errorf("d may read /metrics: %v, %v", ok, err)
	}
	allow, err := p.access.clusters(t.Context(), nil)
	if allow == nil || err != nil {
		t.Fatalf("clusters of d: %v", err)
	}
	for cl, want := range map[string]bool{prod: true, staging: true, edge: false, "prod-2": false} {
		if got := allow(cl); got != want {
			t.Errorf("d may read %q: %v, want %v", cl, got, want)
		}
	}
	if p := tf.authenticate("b"); p != nil {
		t.Errorf("a comment authenticated: %+v", p)
	}
}

func TestTokenFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown key", "s3cret-1 role=admin\n", "1: field 2 has an unknown key (keys: user, clusters)"},
		{"not key=value", "s3cret-1 admin\n", "1: field 2 is not key=value"},
		{"empty user", "\ns3cret-1 user=\n", "2: user is empty"},
		{"empty clusters", "s3cret-1 clusters=\n", "1: clusters is empty"},
		{"invalid glob", "s3cret-1 clusters=prod,[z-a]\n", "1: clusters: item 2 is not a valid glob"},
		{"key twice", "s3cret-1 user=a user=b\n", "1: user is set twice"},
		{"token twice", "s3cret-1\n# x\ns3cret-1 user=b\n", "3: the token of line 1 again"},
		{"every problem", "s3cret-1 x=1\ns3cret-2 y=2\n", "2: field 2 has an unknown key"},
		{"only comments", "# none\n\n", "holds no token"},
		// Lines where a field after the first is a token, or a piece of one.
		{"two tokens on a line", "s3cret-1 s3cret-2\n", "1: field 2 is not key=value"},
		{"a token split by a space", "s3cret-1 s3cret-2 s3cret-3 user=ci\n", "1: field 2 is not key=value"},
		{"a base64 token after another", "s3cret-1 czNjcmV0LTIK=\n", "1: field 2 has an unknown key"},
		{"a token in the place of a key", "s3cret-1 user=ci s3cret-2=x\n", "1: field 3 has an unknown key"},
		{"a token in the place of globs", "s3cret-1 clusters=s3cret-2[\n", "1: clusters: item 1 is not a valid glob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "tokens", tc.file)
			_, err := loadTokenFile(path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("error %v, want one naming %s and saying %q", err, path, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "czNjcmV0") {
				t.Errorf("the error shows a token: %v", err)
			}
		})
	}
}

// TestTokenFileErrorLog edits a token file, as it is being served, into one that does
// not parse: the error is logged, without the tokens of the bad lines.
func TestTokenFileErrorLog(t *testing.T) {
	var log syncBuffer
	klog.SetLogger(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&log))))
	t.Cleanup(klog.ClearLogger)

	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", "first-s3cret\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	pods := clusterPath(prod) + "/api/v1/pods"
	if r := f.get(pods, "Authorization", "Bearer first-s3cret"); r.code != http.StatusOK {
		t.Fatalf("before: %d %s", r.code, r.body)
	}
	replaceFile(t, writeFile(t, t.TempDir(), "new", "first-s3cret second-s3cret\nthird-s3cret user=ci fourth-s3cret=x\n"), tokens)
	eventually(t, "no token is accepted with a token file that does not parse", func() bool {
		return f.get(pods, "Authorization", "Bearer first-s3cret").code == http.StatusUnauthorized
	})
	got := log.String()
	if !strings.Contains(got, "Cannot read the token file") || !strings.Contains(got, "1: field 2 is not key=value") || !strings.Contains(got, "2: field 3 has an unknown key") {
		t.Fatalf("the log does not say what is wrong:\n%s", got)
	}
	if strings.Contains(got, "s3cret") {
		t.Errorf("the log shows a token:\n%s", got)
	}
}

// syncBuffer is a bytes.Buffer that goroutines may write at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func FuzzParseTokenFile(f *testing.F) {
	f.Add([]byte("a\n# b\nc user=x clusters=prod-*,[a-c]\n"))
	f.Add([]byte("s3cret clusters=\\\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := parseTokenFile(data)
		if err != nil {
			return
		}
		for _, e := range entries {
			if e.line < 1 || e.user == "" {
				t.Fatalf("entry %+v", e)
			}
		}
	})
}

// TestClusterAllowList serves a token limited to some clusters: the other clusters are
// forbidden by name and absent from every read of all clusters.
func TestClusterAllowList(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "admin-token user=admin\nci-token user=ci clusters=prod,stag*\nedge-token clusters=arn:*\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	ci := []string{"Authorization", "Bearer ci-token"}
	admin := []string{"Authorization", "Bearer admin-token"}

	var l itemList
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, ci...)
	if got, want := strings.Join(l.refs(), " "), "prod|default/web-1 prod|default/web-2 prod|kube-system/dns-1 staging|default/api-1 staging|default/web-1"; got != want {
		t.Errorf("pods of * for ci: %s, want %s", got, want)
	}
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, admin...)
	if len(l.Items) != 6 {
		t.Errorf("pods of * for admin: %v", l.refs())
	}
	f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, "Authorization", "Bearer edge-token")
	if got := strings.Join(l.refs(), " "); got != edge+"|default/web-3" {
		t.Errorf("pods of * for edge-token: %s", got)
	}

	var cl struct{ Items []Cluster }
	f.getOK("/apis/fleetwatch.io/v1alpha1/clusters", &cl, ci...)
	var names []string
	for _, c := range cl.Items {
		names = append(names, c.Name)
	}
	if got := strings.Join(names, " "); got != "prod staging" {
		t.Errorf("clusters for ci: %s", got)
	}

	for _, path := range []string{
		clusterPath(edge) + "/api/v1/pods",
		clusterPath(edge) + "/api/v1/namespaces/default/pods/web-3",
		clusterPath(edge) + "/api",
		clusterPath(edge) + "/apis",
		clusterPath("no-such-cluster") + "/api/v1/pods",
		"/apis/fleetwatch.io/v1alpha1/clusters/" + url.PathEscape(edge),
		"/apis/fleetwatch.io/v1alpha1/clusters/no-such-cluster",
		"/metrics",
	} {
		r := f.get(path, ci...)
		st := r.status(t, http.StatusForbidden)
		if st.Reason != metav1.StatusReasonForbidden || !strings.Contains(st.Message, "ci may not") {
			t.Errorf("%s: %+v", path, st)
		}
	}
	for _, path := range []string{clusterPath(prod) + "/api/v1/pods", "/apis/fleetwatch.io/v1alpha1/clusters/" + staging, clusterPath(allClusters) + "/apis"} {
		if r := f.get(path, ci...); r.code != http.StatusOK {
			t.Errorf("%s for ci: %d %s", path, r.code, r.body)
		}
	}
	if r := f.get("/metrics", admin...); r.code != http.StatusOK {
		t.Errorf("/metrics for admin: %d", r.code)
	}

	t.Run("watch", func(t *testing.T) {
		f.getOK(clusterPath(allClusters)+"/api/v1/pods", &l, ci...)
		w := f.watch(clusterPath(allClusters)+"/api/v1/pods?watch=true&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion), ci...)
		defer w.stop()
		f.apply(edge, podsGVR, pod("default", "web-4", "302", web))
		f.apply(staging, podsGVR, pod("default", "web-5", "204", web))
		if e := w.nextNot("BOOKMARK"); e.ref() != "ADDED staging|default/web-5" {
			t.Errorf("first event for ci: %s", e.ref())
		}
	})
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
