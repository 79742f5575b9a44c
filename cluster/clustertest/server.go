package clustertest

import (
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Server is a fake kube-apiserver. It serves over TLS and requires a bearer token:
//   - GET /api/v1/namespaces/kube-system: the namespace, with the UID of SetUID;
//   - GET /readyz, /livez, /healthz: "ok".
//
// Every other path is 404. SetFailure makes every request fail with a status code: 500
// as from an apiserver whose etcd is down, 401 or 403 as with revoked credentials.
// SetHangDiscovery makes discovery (/api, /apis and below) hang until the client gives
// up, as an apiserver stopped with SIGSTOP does.
type Server struct {
	// URL is the server URL, https://127.0.0.1:port.
	URL string
	// CAData is the PEM certificate that clients must trust.
	CAData []byte
	// Token is the bearer token that clients must send.
	Token string

	srv *httptest.Server

	// mu guards uid, failure, hang and requests.
	mu       sync.Mutex
	uid      types.UID
	failure  int
	hang     bool
	requests map[string]int
	// closed is closed when the server closes, which ends hung requests.
	closed chan struct{}
}

// NewServer starts a Server, closed when the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{
		Token:    "token-" + strings.ReplaceAll(t.Name(), "/", "-"),
		uid:      "00000000-0000-0000-0000-000000000001",
		requests: map[string]int{},
		closed:   make(chan struct{}),
	}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serveHTTP))
	s.URL = s.srv.URL
	s.CAData = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	t.Cleanup(func() {
		close(s.closed)
		s.srv.Close()
	})
	return s
}

// SetHangDiscovery makes discovery requests hang (true) until their client gives up or
// the server closes, or be served again (false).
func (s *Server) SetHangDiscovery(hang bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hang = hang
}

// Context returns a kubeconfig context of that name connecting to s.
func (s *Server) Context(name string) Context {
	return Context{Name: name, Server: s.URL, CAData: s.CAData, Token: s.Token}
}

// SetUID sets the UID of the kube-system namespace.
func (s *Server) SetUID(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uid = uid
}

// UID returns the UID of the kube-system namespace.
func (s *Server) UID() types.UID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uid
}

// SetFailure makes every authenticated request fail with the HTTP status code, or, with
// 0, serve again.
func (s *Server) SetFailure(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failure = code
}

// Requests returns how many requests for path were received, answered or not. A path
// with a query ("/api/v1/namespaces/kube-system?resourceVersion=0") counts the requests
// with that query only.
func (s *Server) Requests(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[path]
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests[r.URL.Path]++
	if r.URL.RawQuery != "" {
		s.requests[r.URL.Path+"?"+r.URL.RawQuery]++
	}
	uid, failure, hang := s.uid, s.failure, s.hang
	s.mu.Unlock()
	if hang && (r.URL.Path == "/api" || r.URL.Path == "/apis" || strings.HasPrefix(r.URL.Path, "/api/") && r.URL.Path != "/api/v1/namespaces/kube-system" || strings.HasPrefix(r.URL.Path, "/apis/")) {
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
		return
	}

	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		writeStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	if failure != 0 {
		if isHealthPath(r.URL.Path) && failure == http.StatusInternalServerError {
			http.Error(w, "[-]etcd failed: reason withheld\nhealthz check failed", failure)
			return
		}
		writeStatus(w, failure, reasonFor(failure), http.StatusText(failure))
		return
	}
	switch {
	case r.Method != http.MethodGet:
		writeStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "read-only fake")
	case isHealthPath(r.URL.Path):
		_, _ = w.Write([]byte("ok"))
	case r.URL.Path == "/api/v1/namespaces/kube-system":
		ns := corev1.Namespace{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem, UID: uid, ResourceVersion: "1"},
			Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		}
		writeJSON(w, http.StatusOK, ns)
	default:
		writeStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "not served by the fake")
	}
}

func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusUnauthorized:
		return metav1.StatusReasonUnauthorized
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusTooManyRequests:
		return metav1.StatusReasonTooManyRequests
	case http.StatusInternalServerError:
		return metav1.StatusReasonInternalError
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	}
	return metav1.StatusReasonUnknown
}

func isHealthPath(p string) bool {
	return p == "/readyz" || p == "/livez" || p == "/healthz"
}

func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	writeJSON(w, code, metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  msg,
		Reason:   reason,
		Code:     int32(code),
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
