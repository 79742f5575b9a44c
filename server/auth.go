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
	"k8s.io/klog/v2"
)

// principal is the client a request comes from, as authentication established it.
type principal struct {
	// name identifies the client in logs without revealing its credential: the line
	// of its token in the token file, as "token-3".
	name string
	// allowCluster, if not nil, restricts the clusters the client may read. This is
	// where per-token cluster allow-lists plug in: every cluster a request reads is
	// checked through its scope, which carries this function.
	allowCluster func(cluster string) bool
}

type principalKey struct{}

// allow returns the filter of the clusters the request's client may read; nil admits
// every cluster.
func (s *Server) allow(r *http.Request) func(string) bool {
	if p, ok := r.Context().Value(principalKey{}).(*principal); ok {
		return p.allowCluster
	}
	return nil
}

// authenticate checks the bearer token of every request except the probes, when a token
// file is configured.
func (s *Server) authenticate(next http.Handler) http.Handler {
	if s.tokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slices.Contains(probePaths, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		p, ok := s.tokens.authenticate(r.Header.Get("Authorization"))
		if !ok {
			writeStatus(w, r, apierrors.NewUnauthorized("Unauthorized"))
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// tokenFile holds the accepted bearer tokens, read from a file and read again when the
// file changes. Only the tokens' SHA-256 hashes are kept.
type tokenFile struct {
	path string

	// mu guards the fields below.
	mu sync.Mutex
	// hashes are the hashes of the tokens, in file order; lines has the line of each.
	hashes [][sha256.Size]byte
	lines  []int
	// stat identifies the version of the file that was read; nil if it could not be.
	stat os.FileInfo
}

// loadTokenFile reads a token file. It fails if the file cannot be read or holds no
// token.
func loadTokenFile(path string) (*tokenFile, error) {
	t := &tokenFile{path: path}
	if err := t.reloadLocked(); err != nil {
		return nil, err
	}
	if len(t.hashes) == 0 {
		return nil, fmt.Errorf("%s holds no token", path)
	}
	return t, nil
}

// reloadLocked reads the file if it changed since it was last read. If it cannot be
// read, no token is accepted: a token file removed to revoke every token must not leave
// the old ones valid.
func (t *tokenFile) reloadLocked() error {
	fi, err := os.Stat(t.path)
	if err == nil && sameFile(fi, t.stat) {
		return nil
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(t.path)
	}
	if err != nil {
		if t.stat != nil || t.hashes != nil {
			klog.ErrorS(err, "Cannot read the token file; no token is accepted until it can be read", "path", t.path)
		}
		t.hashes, t.lines, t.stat = nil, nil, nil
		return err
	}
	var hashes [][sha256.Size]byte
	var lines []int
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		tok := strings.TrimSpace(sc.Text())
		if tok == "" || strings.HasPrefix(tok, "#") {
			continue
		}
		hashes = append(hashes, sha256.Sum256([]byte(tok)))
		lines = append(lines, n)
	}
	if err := sc.Err(); err != nil {
		klog.ErrorS(err, "Cannot read the token file; no token is accepted until it can be read", "path", t.path)
		t.hashes, t.lines, t.stat = nil, nil, nil
		return fmt.Errorf("read %s: %w", t.path, err)
	}
	if t.stat != nil || t.hashes != nil {
		klog.InfoS("Token file changed; tokens reloaded", "path", t.path, "tokens", len(hashes))
	}
	t.hashes, t.lines, t.stat = hashes, lines, fi
	return nil
}

// authenticate checks an Authorization header. Every token is compared, in constant
// time, so the time taken tells nothing about which token nearly matched.
func (t *tokenFile) authenticate(header string) (*principal, bool) {
	scheme, tok, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return nil, false
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(tok))
	t.mu.Lock()
	_ = t.reloadLocked()
	hashes, lines := t.hashes, t.lines
	t.mu.Unlock()
	match := -1
	for i := range hashes {
		if subtle.ConstantTimeCompare(sum[:], hashes[i][:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return nil, false
	}
	return &principal{name: fmt.Sprintf("token-%d", lines[match])}, true
}

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
