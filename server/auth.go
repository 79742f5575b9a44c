package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// principal is the client a request comes from, as authentication established it.
type principal struct {
	// name identifies the client in logs and Statuses without revealing its credential:
	// the user of its token-file line, "token-3" for a line without one, or the user
	// name that the home cluster's TokenReview returned.
	name string
	// access, if not nil, restricts what the client may read; nil: everything.
	access authorizer
}

// authorizer decides what a principal may read. Its methods may ask the home cluster,
// which can be slow or down, so a request calls them before it takes any lock of the
// cache, and the filter they return does no I/O: a slow answer holds back only the
// request that waits for it. An error is an API Status, and means that a decision could
// not be made: the request fails rather than read fewer clusters than it may.
type authorizer interface {
	// clusters returns the filter of the clusters the client may read. Each of names,
	// the clusters the request reads, is decided before it returns; any other cluster
	// is admitted only if the filter can tell without I/O (a glob, or access to every
	// cluster), and denied otherwise. A nil filter admits every cluster.
	clusters(ctx context.Context, names []string) (func(cluster string) bool, error)
	// metrics reports whether the client may read /metrics, which names every cluster.
	metrics(ctx context.Context) (bool, error)
}

type principalKey struct{}

func principalFrom(r *http.Request) *principal {
	p, _ := r.Context().Value(principalKey{}).(*principal)
	return p
}

// authenticate establishes the principal of every request, when authentication is
// configured: a bearer token of the token file, else one that the home cluster accepts.
// The probes need none: a probe without an Authorization header is served without a
// principal, and /readyz then withholds the reasons that name clusters.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if !s.authenticates() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(probePaths, r.URL.Path) && r.Header.Get("Authorization") == "" {
			next.ServeHTTP(w, r)
			return
		}
		tok, ok := bearerToken(r.Header.Get("Authorization"))
		var p *principal
		if ok && s.tokens != nil {
			p = s.tokens.authenticate(tok)
		}
		if p == nil && ok && s.delegated != nil {
			var err error
			if p, err = s.delegated.authenticate(r.Context(), tok); err != nil {
				writeStatus(w, r, err)
				return
			}
		}
		if p == nil {
			writeStatus(w, r, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// authenticates reports whether the server authenticates its clients. Without
// authentication every client may read everything.
func (s *Server) authenticates() bool { return s.tokens != nil || s.delegated != nil }

// authorize decides which clusters the request's client may read, before the request
// reads anything: the clusters that rt names, or for the scope of every cluster each
// cluster of the fleet now. The filter it returns does no I/O; nil admits every
// cluster. A client that may not read the cluster rt names, or the Cluster object it
// names, gets a 403 Status.
func (s *Server) authorize(r *http.Request, rt route) (func(cluster string) bool, error) {
	p := principalFrom(r)
	if p == nil || p.access == nil {
		return nil, nil
	}
	clusterObject := rt.kind == routeResource && rt.groupVersion() == SchemeGroupVersion && rt.resource == "clusters"
	var named []string // the clusters rt names
	if rt.cluster != "" && rt.cluster != allClusters {
		named = append(named, rt.cluster)
	}
	if clusterObject && rt.hasName {
		named = append(named, rt.name)
	}
	names := named
	if len(named) == 0 && (rt.cluster == allClusters || clusterObject) {
		names = s.clusterNames()
	}
	if len(names) == 0 {
		// Nothing of any cluster is read.
		return func(string) bool { return false }, nil
	}
	allow, err := p.access.clusters(r.Context(), names)
	if err != nil {
		return nil, err
	}
	for _, name := range named {
		if allow != nil && !allow(name) {
			return nil, forbiddenCluster(p, name)
		}
	}
	return allow, nil
}

// authorizeMetrics returns a 403 Status if the request's client may not read /metrics.
func (s *Server) authorizeMetrics(r *http.Request) error {
	p := principalFrom(r)
	if p == nil || p.access == nil {
		return nil
	}
	ok, err := p.access.metrics(r.Context())
	if err != nil {
		return err
	}
	if !ok {
		return apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf("%s may not get path %q", p.name, "/metrics"))
	}
	return nil
}

// bearerToken returns the token of an "Authorization: Bearer" header.
func bearerToken(header string) (string, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// forbiddenCluster returns the 403 Status of a client that may not read a cluster. It
// is the same whether or not the cluster exists, so that it tells nothing about the
// clusters the client may not see.
func forbiddenCluster(p *principal, name string) error {
	return apierrors.NewForbidden(clustersGR, name, fmt.Errorf("%s may not read cluster %q", p.name, name))
}

// tokenFile holds the accepted bearer tokens, read from a file and read again when the
// file changes. Only the tokens' SHA-256 hashes are kept.
//
// Each line holds a token, optionally followed by space-separated fields:
//
//	TOKEN [user=NAME] [clusters=GLOB[,GLOB...]]
//
// user names the client in logs and Statuses (default "token-LINE"); clusters limits
// the clusters it may read to those matching one of the globs (cluster.ValidateGlob
// syntax; default every cluster). Blank lines and lines starting with # are ignored.
type tokenFile struct {
	path string

	// mu guards the fields below.
	mu      sync.Mutex
	entries []tokenEntry
	// stat identifies the version of the file that was read; nil if it could not be.
	stat os.FileInfo
}

// tokenEntry is one line of a token file.
type tokenEntry struct {
	hash [sha256.Size]byte
	line int
	user string
	// clusters is nil for a token that may read every cluster.
	clusters *cluster.Globs
}

// loadTokenFile reads a token file. It fails if the file cannot be read, holds a line
// that does not parse, or holds no token.
func loadTokenFile(path string) (*tokenFile, error) {
	t := &tokenFile{path: path}
	if err := t.reloadLocked(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%s holds no token", path)
	}
	return t, nil
}

// reloadLocked reads the file if it changed since it was last read. If it cannot be
// read or parsed, no token is accepted: a token file removed, or edited, to revoke a
// token must not leave the old tokens valid.
func (t *tokenFile) reloadLocked() error {
	fi, err := os.Stat(t.path)
	if err == nil && sameFile(fi, t.stat) {
		return nil
	}
	var entries []tokenEntry
	if err == nil {
		entries, err = readTokenFile(t.path)
	}
	if err != nil {
		if t.stat != nil || t.entries != nil {
			klog.ErrorS(err, "Cannot read the token file; no token is accepted until it can be read", "path", t.path)
		}
		t.entries, t.stat = nil, nil
		return err
	}
	if t.stat != nil || t.entries != nil {
		klog.InfoS("Token file changed; tokens reloaded", "path", t.path, "tokens", len(entries))
	}
	t.entries, t.stat = entries, fi
	return nil
}

// readTokenFile reads and parses a token file. Its errors name the path and line, and
// never show a token.
func readTokenFile(path string) ([]tokenEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entries, err := parseTokenFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s:%w", path, err)
	}
	return entries, nil
}

// parseTokenFile parses the lines of a token file. An error starts with the line
// number ("3: ...").
func parseTokenFile(data []byte) ([]tokenEntry, error) {
	var entries []tokenEntry
	seen := make(map[[sha256.Size]byte]int)
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var errs []error
	n := 0
	for sc.Scan() {
		n++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		e, err := parseTokenLine(n, fields)
		if err != nil {
			errs = append(errs, fmt.Errorf("%d: %w", n, err))
			continue
		}
		if first, dup := seen[e.hash]; dup {
			errs = append(errs, fmt.Errorf("%d: the token of line %d again", n, first))
			continue
		}
		seen[e.hash] = n
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%d: %w", n+1, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return entries, nil
}

// parseTokenLine parses the fields of one line: the token, then key=value pairs. Its
// errors name a field by its position on the line, and quote nothing of it: a line that
// does not parse may hold a token in any field (two tokens on a line, a token with a
// space in it, a base64 token whose "=" looks like a key).
func parseTokenLine(n int, fields []string) (tokenEntry, error) {
	e := tokenEntry{hash: sha256.Sum256([]byte(fields[0])), line: n, user: fmt.Sprintf("token-%d", n)}
	set := make(map[string]bool)
	for i, f := range fields[1:] {
		field := i + 2
		key, value, ok := strings.Cut(f, "=")
		if !ok {
			return e, fmt.Errorf("field %d is not key=value (keys: user, clusters)", field)
		}
		if key != "user" && key != "clusters" {
			return e, fmt.Errorf("field %d has an unknown key (keys: user, clusters)", field)
		}
		if set[key] {
			return e, fmt.Errorf("%s is set twice", key)
		}
		set[key] = true
		switch key {
		case "user":
			if value == "" {
				return e, errors.New("user is empty")
			}
			e.user = value
		case "clusters":
			if value == "" {
				return e, errors.New("clusters is empty; leave it out to allow every cluster")
			}
			patterns := strings.Split(value, ",")
			g, err := cluster.CompileGlobs(patterns...)
			if err != nil {
				// The error of CompileGlobs quotes the glob.
				bad := slices.IndexFunc(patterns, func(p string) bool { return cluster.ValidateGlob(p) != nil })
				return e, fmt.Errorf("clusters: item %d is not a valid glob (the syntax of contexts.include)", bad+1)
			}
			e.clusters = &g
		}
	}
	return e, nil
}

// authenticate checks a bearer token. Every token is compared, in constant time, so the
// time taken tells nothing about which token nearly matched. It returns nil for a token
// the file does not hold.
func (t *tokenFile) authenticate(tok string) *principal {
	sum := sha256.Sum256([]byte(tok))
	t.mu.Lock()
	_ = t.reloadLocked()
	entries := t.entries
	t.mu.Unlock()
	match := -1
	for i := range entries {
		if subtle.ConstantTimeCompare(sum[:], entries[i].hash[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return nil
	}
	e := entries[match]
	p := &principal{name: e.user}
	if e.clusters != nil {
		p.access = globAccess{e.clusters}
	}
	return p
}

// globAccess limits a token of the token file to the clusters its globs match.
type globAccess struct{ globs *cluster.Globs }

var _ authorizer = globAccess{}

func (g globAccess) clusters(context.Context, []string) (func(string) bool, error) {
	return g.globs.Match, nil
}

// metrics denies /metrics, which names every cluster.
func (globAccess) metrics(context.Context) (bool, error) { return false, nil }

// certificates holds the server's TLS certificate, read from files and read again when
// they change.
type certificates struct {
	certFile, keyFile string

	// mu guards the fields below.
	mu   sync.Mutex
	cert *tls.Certificate
	// certStat and keyStat identify the versions of the files that were read.
	certStat, keyStat os.FileInfo
}

func loadCertificates(certFile, keyFile string) (*certificates, error) {
	c := &certificates{certFile: certFile, keyFile: keyFile}
	if err := c.reloadLocked(); err != nil {
		return nil, err
	}
	return c, nil
}

func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

func (c *certificates) reloadLocked() error {
	cs, err1 := os.Stat(c.certFile)
	ks, err2 := os.Stat(c.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	if c.cert != nil && sameFile(cs, c.certStat) && sameFile(ks, c.keyStat) {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.cert, c.certStat, c.keyStat = &cert, cs, ks
	return nil
}

// get is tls.Config.GetCertificate. If the files changed but cannot be loaded (a
// rotation half done), the certificate loaded before is used, and the error logged.
func (c *certificates) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.reloadLocked(); err != nil {
		klog.ErrorS(err, "Cannot reload the TLS certificate; serving the one loaded before", "certFile", c.certFile, "keyFile", c.keyFile)
	}
	return c.cert, nil
}

// recoverPanics turns a panic in a handler into a 500 Status, if nothing was written
// yet, and logs it. http.ErrAbortHandler, the way to cut a response short, passes.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			klog.ErrorS(fmt.Errorf("panic: %v", v), "Request handler panicked", "method", r.Method, "path", r.URL.Path, "stack", string(debug.Stack()))
			if sw, ok := w.(*statusWriter); ok && sw.code != 0 {
				panic(http.ErrAbortHandler)
			}
			writeStatus(w, r, apierrors.NewInternalError(errors.New("the server panicked; see its log")))
		}()
		next.ServeHTTP(w, r)
	})
}

// statusWriter records the status code of a response.
type statusWriter struct {
	http.ResponseWriter
	code    int
	started time.Time
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush and Unwrap let http.ResponseController reach the connection.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
