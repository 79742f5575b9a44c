package dialgate

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/testcert"
)

// server is a TLS server whose handler holds every request until release is closed,
// and counts the connections it accepted and the requests it holds. Each has a
// certificate of its own, so that the configs of one server share a transport (client-go's
// TLS cache) that no other test's share: with httptest's one certificate, every test of
// the package shared one transport, and so the gates of its servers' addresses, which a
// later test's server may be given again (an HTTP/1.1 server's gate, ungated, under a
// dead server's address let a second request dial).
type server struct {
	*httptest.Server
	conns, held atomic.Int32
	release     chan struct{}
}

func newServer(t *testing.T, http2 bool, streams int) *server {
	t.Helper()
	s := &server{release: make(chan struct{})}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.held.Add(1)
		defer s.held.Add(-1)
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
	}))
	certFile, keyFile := testcert.Write(t, t.TempDir(), "dialgate")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	s.EnableHTTP2 = http2
	s.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: streams}
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(func() {
		s.releaseAll()
		s.Close()
	})
	return s
}

var releaseMu sync.Mutex

func (s *server) releaseAll() {
	releaseMu.Lock()
	defer releaseMu.Unlock()
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// config is a client-go config of s, as a cluster's: client-go's TLS cache gives the
// configs of the same CA one transport, whatever their host.
func config(s *server, host string, wrap bool) *rest.Config {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	cfg := &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	if wrap {
		cfg.Wrap(Wrap)
	}
	return cfg
}

// burst sends n requests to s at once, through the transports of n configs made alike
// (n clusters of one server), and returns once the server holds them all.
func burst(t *testing.T, s *server, n int, wrap bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range n {
		rt, err := rest.TransportFor(config(s, s.URL, wrap))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/watch", nil)
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for s.held.Load() < int32(n) {
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d of %d requests after 20 s", s.held.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBurstDialsWhatItNeeds sends a burst of requests that outnumber the streams of a
// connection, as the watches of hundreds of clusters of one apiserver do: gated, they
// open the connections that their streams need, and not one each.
func TestBurstDialsWhatItNeeds(t *testing.T) {
	// A client takes a new connection to allow 100 streams until the server's settings
	// say otherwise (golang.org/x/net/http2): a server that allows fewer refuses the
	// streams beyond its limit, which the client sends again without the gate. A
	// kube-apiserver allows 250.
	const requests, streams = 350, 100
	ungated := newServer(t, true, streams)
	burst(t, ungated, requests, false)
	gated := newServer(t, true, streams)
	burst(t, gated, requests, true)
	t.Logf("connections for %d requests of %d streams each: %d ungated, %d gated", requests, streams, ungated.conns.Load(), gated.conns.Load())
	if got, most := gated.conns.Load(), int32((requests+streams-1)/streams); got > most {
		t.Errorf("gated: %d connections, want at most %d", got, most)
	}
}

// TestHTTP1NotSerialized: a server that speaks HTTP/1.1 needs a connection for each
// request in flight; once the first says so, the requests dial in parallel, and none
// waits for another's response.
func TestHTTP1NotSerialized(t *testing.T) {
	s := newServer(t, false, 0)
	burst(t, s, 20, true)
	if got := s.conns.Load(); got < 20 {
		t.Errorf("%d connections for 20 requests held at once over HTTP/1.1", got)
	}
}

// TestDeadServerHoldsBackOnlyItself: a server that accepts connections and never
// answers the handshake holds the gate of its own requests, which give up with their
// contexts, and not those of another server of the same transport.
func TestDeadServerHoldsBackOnlyItself(t *testing.T) {
	live := newServer(t, true, 100)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	var accepted []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := dead.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepted = append(accepted, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range accepted {
			c.Close()
		}
	})
	deadURL := "https://" + dead.Addr().String()
	// Same CA: the same transport as the live server's, and only theirs.
	rtDead, err := rest.TransportFor(config(live, deadURL, true))
	if err != nil {
		t.Fatal(err)
	}
	rtLive, err := rest.TransportFor(config(live, live.URL, true))
	if err != nil {
		t.Fatal(err)
	}
	// The first request to the dead server holds its gate in the handshake.
	holder, cancelHolder := context.WithCancel(context.Background())
	defer cancelHolder()
	go func() {
		req, _ := http.NewRequestWithContext(holder, http.MethodGet, deadURL+"/", nil)
		if resp, err := rtDead.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(accepted) == 1 })

	// Another request to the dead server waits at the gate, and ends with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, deadURL+"/", nil)
	if _, err := rtDead.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second request to the dead server: %v, want the deadline of its context", err)
	}
	mu.Lock()
	if len(accepted) != 1 {
		t.Errorf("the dead server accepted %d connections, want 1: the second request dialed", len(accepted))
	}
	mu.Unlock()

	// The live server answers meanwhile.
	live.releaseAll()
	start := time.Now()
	req, _ = http.NewRequestWithContext(context.Background(), http.MethodGet, live.URL+"/", nil)
	resp, err := rtLive.RoundTrip(req)
	if err != nil {
		t.Fatalf("the live server, while the dead one holds its gate: %v", err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the live server answered after %v", d)
	}
}

// TestWrapSharesGatesOfATransport: the round trippers of one transport share its
// gates, those of another transport do not, and a transport's gates leave with the
// last round tripper that uses them.
func TestWrapSharesGatesOfATransport(t *testing.T) {
	t1, t2 := &http.Transport{}, &http.Transport{}
	a, b, c := Wrap(t1).(*roundTripper), Wrap(t1).(*roundTripper), Wrap(t2).(*roundTripper)
	if a.gates != b.gates {
		t.Error("two round trippers of one transport have gates of their own")
	}
	if a.gates == c.gates {
		t.Error("round trippers of two transports share gates")
	}
	if rt := Wrap(http.DefaultTransport.(*http.Transport).Clone()); rt == nil {
		t.Error("Wrap returned nil")
	}
	other := roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	if got := Wrap(other); got == nil {
		t.Error("Wrap of a round tripper that is no transport returned nil")
	}
	key := weak.Make(t2)
	c = nil
	waitFor(t, func() bool {
		runtime.GC()
		return !table.Has(key)
	})
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
