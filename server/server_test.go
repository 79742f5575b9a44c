package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"

	fleetwatch "github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/internal/testcert"
)

// The Manager is the Source of the daemon.
var _ Source = (*fleetwatch.Manager)(nil)

func TestNewOptions(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "a")
	tokens := writeFile(t, dir, "tokens", "s3cret\n")
	fleet := aggregate.New(aggregate.Options{Codec: testCodec()})
	src := &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}}
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr error
		naming  string
	}{
		{"defaults", Options{}, nil, ""},
		{"localhost", Options{Address: "localhost:0"}, nil, ""},
		{"IPv6 loopback", Options{Address: "[::1]:8080"}, nil, ""},
		{"127/8", Options{Address: "127.1.2.3:80"}, nil, ""},
		{"every interface", Options{Address: ":8443"}, ErrInsecureAddress, "Options.Address"},
		{"public without TLS", Options{Address: "0.0.0.0:8080", TokenFile: tokens}, ErrInsecureAddress, "Options.TLSCertFile"},
		{"public without tokens", Options{Address: "10.0.0.1:8080", TLSCertFile: cert, TLSKeyFile: key}, ErrInsecureAddress, "Options.TokenFile"},
		{"host name", Options{Address: "example.com:8080"}, ErrInsecureAddress, "Options.Address"},
		{"public, secured", Options{Address: "0.0.0.0:0", TLSCertFile: cert, TLSKeyFile: key, TokenFile: tokens}, nil, ""},
		{"public, delegated auth", Options{Address: "0.0.0.0:0", TLSCertFile: cert, TLSKeyFile: key, Delegated: &DelegatedAuth{Config: &rest.Config{Host: "https://127.0.0.1:1"}}}, nil, ""},
		{"delegated auth without a config", Options{Delegated: &DelegatedAuth{}}, ErrInvalidOptions, "Options.Delegated.Config"},
		{"delegated auth, negative TTL", Options{Delegated: &DelegatedAuth{Config: &rest.Config{}, DenyCacheTTL: -1}}, ErrInvalidOptions, "Options.Delegated.DenyCacheTTL"},
		{"token file line that does not parse", Options{TokenFile: writeFile(t, dir, "bad", "s3cret role=admin\n")}, nil, "Options.TokenFile"},
		{"no port", Options{Address: "127.0.0.1"}, ErrInvalidOptions, "Options.Address"},
		{"bad port", Options{Address: "127.0.0.1:http"}, ErrInvalidOptions, "Options.Address"},
		{"cert without key", Options{TLSCertFile: cert}, ErrInvalidOptions, "Options.TLSKeyFile"},
		{"negative timeout", Options{WriteTimeout: -time.Second}, ErrInvalidOptions, "Options.WriteTimeout"},
		{"negative history", Options{HistorySize: -1}, ErrInvalidOptions, "Options.HistorySize"},
		{"negative requests in flight", Options{MaxRequestsInFlight: -1}, ErrInvalidOptions, "Options.MaxRequestsInFlight"},
		{"negative watches", Options{MaxWatches: -1}, ErrInvalidOptions, "Options.MaxWatches"},
		{"negative watches per client", Options{MaxWatchesPerClient: -1}, ErrInvalidOptions, "Options.MaxWatchesPerClient"},
		{"accepted host", Options{AcceptHosts: []string{`fleetwatch\.example\.com`, `.*\.svc`}}, nil, ""},
		{"accepted host, not a regexp", Options{AcceptHosts: []string{"localhost", "(a"}}, ErrInvalidOptions, "Options.AcceptHosts[1]"},
		{"accepted host, empty", Options{AcceptHosts: []string{""}}, ErrInvalidOptions, "Options.AcceptHosts[0]"},
		{"nil collector", Options{Collectors: []prometheus.Collector{nil}}, ErrInvalidOptions, "Options.Collectors[0]"},
		{"duplicate collector", Options{Collectors: []prometheus.Collector{collectors.NewGoCollector()}}, ErrInvalidOptions, "Options.Collectors[0]"},
		{"missing token file", Options{TokenFile: filepath.Join(dir, "none")}, nil, "Options.TokenFile"},
		{"empty token file", Options{TokenFile: writeFile(t, dir, "empty", "# none\n\n")}, nil, "Options.TokenFile"},
		{"missing key file", Options{TLSCertFile: cert, TLSKeyFile: filepath.Join(dir, "none")}, nil, "Options.TLSKeyFile"},
		{"key of another certificate", Options{TLSCertFile: cert, TLSKeyFile: writeFile(t, dir, "other.key", otherKey(t))}, nil, "Options.TLSCertFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(src, tc.opts)
			if tc.naming == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				s.reg.Remove()
				return
			}
			if err == nil {
				s.reg.Remove()
				t.Fatalf("New succeeded, want an error naming %s", tc.naming)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.naming) {
				t.Errorf("error %q does not name %s", err, tc.naming)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("error shows a token: %v", err)
			}
		})
	}
	if _, err := New(nil, Options{}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("New(nil) = %v", err)
	}
}

// TestValidateOrder sets every number and duration negative: the errors come in the
// order of the fields, the same at every run.
func TestValidateOrder(t *testing.T) {
	neg := Options{
		Address:           DefaultAddress,
		ReadHeaderTimeout: -1, ReadTimeout: -1, WriteTimeout: -1, IdleTimeout: -1, WatchTimeout: -1,
		BookmarkInterval: -1, ShutdownTimeout: -1,
		HistorySize: -1, MaxRequestsInFlight: -1, MaxWatches: -1, MaxWatchesPerClient: -1,
	}
	want := []string{"ReadHeaderTimeout", "ReadTimeout", "WriteTimeout", "IdleTimeout", "WatchTimeout",
		"BookmarkInterval", "ShutdownTimeout", "HistorySize", "MaxRequestsInFlight", "MaxWatches", "MaxWatchesPerClient"}
	first := ""
	for range 20 {
		err := neg.validate()
		if err == nil {
			t.Fatal("validate accepted negative options")
		}
		lines := strings.Split(err.Error(), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%d errors, want %d:\n%v", len(lines), len(want), err)
		}
		for i, name := range want {
			if !strings.HasPrefix(lines[i], "Options."+name+": ") {
				t.Fatalf("error %d is %q, want one about Options.%s", i, lines[i], name)
			}
		}
		if first == "" {
			first = err.Error()
		} else if err.Error() != first {
			t.Fatalf("errors changed from\n%s\nto\n%s", first, err)
		}
	}
}

func TestStart(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Address = "127.0.0.1:0" })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.server.Start(ctx) }()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start did not return")
	}
	if err := f.server.Start(context.Background()); !errors.Is(err, ErrAlreadyStarted) {
		t.Errorf("second Start: %v", err)
	}
	// Start removed the server's handler from the fleet.
	for _, h := range f.fleet.Stats().Handlers {
		if h.Name == "server" {
			t.Errorf("handler still registered")
		}
	}
}

func TestStartListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := newFixture(t, func(o *Options) { o.Address = ln.Addr().String() })
	err = f.server.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Options.Address") {
		t.Errorf("Start on a taken port: %v", err)
	}
}

// TestServeTLS serves HTTPS with bearer tokens on every interface, and shuts down with a
// watch open.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := testcert.Write(t, dir, "first")
	tokens := writeFile(t, dir, "tokens", "s3cret\n")
	f := newFixture(t, func(o *Options) {
		o.Address = "0.0.0.0:0"
		o.TLSCertFile, o.TLSKeyFile, o.TokenFile = cert, key, tokens
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.server.Serve(ctx, ln) }()

	pool := testcert.Pool(t, cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	base := "https://" + ln.Addr().String()
	get := func(path, token string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	if res, body := get("/healthz", ""); res.StatusCode != http.StatusOK || body != "ok" {
		t.Errorf("healthz: %d %s", res.StatusCode, body)
	}
	if res, _ := get("/api", ""); res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without token: %d", res.StatusCode)
	}
	if res, _ := get(clusterPath(prod)+"/api/v1/pods", "s3cret"); res.StatusCode != http.StatusOK {
		t.Errorf("with token: %d", res.StatusCode)
	}
	if res, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil && res.StatusCode == http.StatusOK {
		t.Errorf("plain HTTP served")
	}

	// A rotated certificate is served to new connections.
	newCert, newKey := testcert.Write(t, t.TempDir(), "second")
	replaceFile(t, newCert, cert)
	replaceFile(t, newKey, key)
	eventually(t, "the rotated certificate is served", func() bool {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName == "second"
	})

	// Shut down with a watch open: the watch ends, Serve returns.
	req, _ := http.NewRequest(http.MethodGet, base+clusterPath(prod)+"/api/v1/pods?watch=1", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	client.Transport.(*http.Transport).TLSClientConfig.InsecureSkipVerify = true
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return with a watch open")
	}
	if _, err := io.ReadAll(res.Body); err != nil {
		t.Errorf("watch did not end cleanly: %v", err)
	}
}

func TestProbes(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Version = version.Info{GitVersion: "v1.2.3"} })
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		if r := f.get(path); r.code != http.StatusOK || string(r.body) != "ok" {
			t.Errorf("%s: %d %s", path, r.code, r.body)
		}
	}
	if r := f.get("/readyz?verbose"); r.code != http.StatusOK || !strings.Contains(string(r.body), "[+]fleet ok") {
		t.Errorf("verbose readyz: %d %s", r.code, r.body)
	}

	f.src.setReady(false)
	f.src.setStatus(clusterStatus(staging, aggregate.PhaseSyncing, false))
	f.src.setStatus(clusterStatus(edge, aggregate.PhaseConnecting, false))
	r := f.get("/readyz")
	want := `[-]fleet failed: clusters not synced: "` + edge + `" (Connecting), "staging" (Syncing)`
	if r.code != http.StatusServiceUnavailable || !strings.Contains(string(r.body), want) || !strings.Contains(string(r.body), "[+]cache ok") {
		t.Errorf("readyz: %d %s", r.code, r.body)
	}
	// Liveness does not depend on readiness.
	if r := f.get("/livez"); r.code != http.StatusOK {
		t.Errorf("livez: %d", r.code)
	}

	for _, path := range []string{"/version", clusterPath(prod) + "/version"} {
		var v version.Info
		f.getOK(path, &v)
		if v.GitVersion != "v1.2.3" || v.GoVersion != runtime.Version() || v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
			t.Errorf("%s: %+v", path, v)
		}
	}
}

// TestReadyzWithholdsReasons serves /readyz with a token file: a probe without a token
// learns whether the server is ready, and no cluster name; a client with a token sees
// the names of the clusters it may read.
func TestReadyzWithholdsReasons(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "all-s3cret\nprod-s3cret user=p clusters=prod\n")
	f := newFixture(t, func(o *Options) { o.TokenFile = tokens })
	if r := f.get("/readyz"); r.code != http.StatusOK || string(r.body) != "ok" {
		t.Fatalf("ready, without a token: %d %s", r.code, r.body)
	}
	f.src.setReady(false)
	f.src.setStatus(clusterStatus(staging, aggregate.PhaseSyncing, false))
	f.src.setStatus(clusterStatus(edge, aggregate.PhaseConnecting, false))
	for _, tc := range []struct {
		name, path, token string
		code              int
		want              string
		// hidden are clusters the body must not name.
		hidden []string
	}{
		{"no token", "/readyz", "", http.StatusServiceUnavailable, "[-]fleet failed: reason withheld\n[+]cache ok", []string{staging, edge, prod}},
		{"no token, verbose", "/readyz?verbose", "", http.StatusServiceUnavailable, "[-]fleet failed: reason withheld", []string{staging, edge, prod}},
		{"every cluster", "/readyz", "all-s3cret", http.StatusServiceUnavailable, `[-]fleet failed: clusters not synced: "` + edge + `" (Connecting), "staging" (Syncing)`, nil},
		{"prod only", "/readyz?verbose", "prod-s3cret", http.StatusServiceUnavailable, "[-]fleet failed: clusters that you may not read are not synced", []string{staging, edge}},
		{"a wrong token", "/readyz", "wrong", http.StatusUnauthorized, "Unauthorized", []string{staging, edge}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h []string
			if tc.token != "" {
				h = []string{"Authorization", "Bearer " + tc.token}
			}
			r := f.get(tc.path, h...)
			if r.code != tc.code || !strings.Contains(string(r.body), tc.want) {
				t.Errorf("%d %s, want %d and %q", r.code, r.body, tc.code, tc.want)
			}
			for _, name := range tc.hidden {
				if strings.Contains(string(r.body), name) {
					t.Errorf("the body names cluster %q: %s", name, r.body)
				}
			}
		})
	}
	f.src.setStatus(clusterStatus(prod, aggregate.PhaseSyncing, true))
	r := f.get("/readyz", "Authorization", "Bearer prod-s3cret")
	if want := `clusters not synced: "prod" (Syncing), and clusters that you may not read`; !strings.Contains(string(r.body), want) || strings.Contains(string(r.body), staging) {
		t.Errorf("prod only, prod syncing: %s, want %q", r.body, want)
	}
}

func TestReadyzWaitsForCache(t *testing.T) {
	// A fleet whose handlers do not run yet: the server's cache cannot catch up.
	fleet := aggregate.New(aggregate.Options{Codec: testCodec()})
	if err := fleet.ClusterStore(prod, podsGVR).Apply(pod("default", "a", "1", nil), false); err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}, ready: true}
	src.setStatus(clusterStatus(prod, aggregate.PhaseSynced, false))
	s, err := New(src, Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	rec := recordRequest(h, "/readyz")
	if rec.code != http.StatusServiceUnavailable || !strings.Contains(string(rec.body), "[-]cache failed") {
		t.Errorf("readyz: %d %s", rec.code, rec.body)
	}
	// Requests for objects wait for the cache, then give up with 503 and Retry-After.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	rec = recordRequestContext(ctx, h, clusterPath(prod)+"/api/v1/pods")
	if rec.code != http.StatusServiceUnavailable || rec.header.Get("Retry-After") != "1" || time.Since(start) > 3*time.Second {
		t.Errorf("list before the cache caught up: %d %s %v", rec.code, rec.body, rec.header)
	}

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fleet.Start(ctx)
	}()
	defer func() {
		stop()
		<-done
	}()
	deadline := time.Now().Add(10 * time.Second)
	for recordRequest(h, "/readyz").code != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var l itemList
	if rec := recordRequest(h, clusterPath(prod)+"/api/v1/pods"); rec.code != http.StatusOK || json.Unmarshal(rec.body, &l) != nil || len(l.Items) != 1 {
		t.Errorf("list after: %d %s", rec.code, rec.body)
	}
}

func recordRequest(h http.Handler, path string) response {
	return recordRequestContext(context.Background(), h, path)
}

func recordRequestContext(ctx context.Context, h http.Handler, path string) response {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
	rec := newRecorder()
	h.ServeHTTP(rec, req)
	return response{code: rec.code, header: rec.Header(), body: rec.buf}
}

// recorder is a minimal ResponseWriter.
type recorder struct {
	header http.Header
	code   int
	buf    []byte
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.buf = append(r.buf, b...)
	return len(b), nil
}

func otherKey(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// replaceFile renames from over to, as a rotation does, with a later modification time.
func replaceFile(t *testing.T, from, to string) {
	t.Helper()
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(from, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(from, to); err != nil {
		t.Fatal(err)
	}
}

// notSyncedSource is a fakeSource that is a NotSyncedSource, whose Status is not to be
// asked.
type notSyncedSource struct {
	*fakeSource
	statusAsk atomic.Int32
}

func (s *notSyncedSource) Status() []aggregate.ClusterStatus {
	s.statusAsk.Add(1)
	return s.fakeSource.Status()
}

func (s *notSyncedSource) NotSynced(limit int) (first []aggregate.ClusterStatus, notSynced, all int) {
	for _, st := range s.fakeSource.Status() {
		all++
		if st.Phase == aggregate.PhaseSynced {
			continue
		}
		if notSynced++; len(first) < limit {
			first = append(first, st)
		}
	}
	return first, notSynced, all
}

// TestReadyzAsksNotSynced: a failed /readyz of a NotSyncedSource names the first
// clusters it returns, and how many more, without asking every cluster's status; but
// for a client that may read some clusters only, whose reason is filtered from them.
func TestReadyzAsksNotSynced(t *testing.T) {
	tokens := writeFile(t, t.TempDir(), "tokens", "all-s3cret\nprod-s3cret user=p clusters=prod\n")
	fleet := aggregate.New(aggregate.Options{Codec: testCodec()})
	src := &notSyncedSource{fakeSource: &fakeSource{fleet: fleet, statuses: map[string]aggregate.ClusterStatus{}}}
	for i := range 25 {
		src.setStatus(clusterStatus(fmt.Sprintf("c-%02d", i), aggregate.PhaseSyncing, false))
	}
	src.setStatus(clusterStatus(prod, aggregate.PhaseSynced, false))
	s, err := New(src, Options{TokenFile: tokens})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	get := func(token string) response {
		req, _ := http.NewRequest(http.MethodGet, "/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		return response{code: rec.code, header: rec.Header(), body: rec.buf}
	}
	rec := get("all-s3cret")
	want := `clusters not synced: "c-00" (Syncing), "c-01" (Syncing), "c-02" (Syncing), "c-03" (Syncing), "c-04" (Syncing), "c-05" (Syncing), "c-06" (Syncing), "c-07" (Syncing), "c-08" (Syncing), "c-09" (Syncing), and 15 more`
	if rec.code != http.StatusServiceUnavailable || !strings.Contains(string(rec.body), want) {
		t.Errorf("readyz: %d %s, want %q", rec.code, rec.body, want)
	}
	if n := src.statusAsk.Load(); n != 0 {
		t.Errorf("Status asked %d times", n)
	}
	rec = get("prod-s3cret")
	if want := "clusters that you may not read are not synced"; rec.code != http.StatusServiceUnavailable || !strings.Contains(string(rec.body), want) {
		t.Errorf("readyz, for prod only: %d %s, want %q", rec.code, rec.body, want)
	}
}
