// Package dialgate makes the requests that go through one HTTP transport to one server
// take their connections one at a time, so that a burst of requests to a server that
// speaks HTTP/2 dials one connection, not one each.
//
// An http.Transport with HTTP/2 (as client-go configures it) multiplexes requests over
// one connection per server, up to the server's limit of concurrent streams (250 for a
// kube-apiserver). A request that finds no connection with a free stream dials one of
// its own, and so does every other request that comes before that dial is done: the
// TLS handshakes are paid in full, and all but one of the connections are closed at
// once. A fleet of a thousand contexts over a few apiservers starts a thousand
// requests together, and its watches outnumber the streams of a connection: it dialed
// hundreds of connections to hold a few, a sixth of its CPU in handshakes
// (docs/design.md, "What a cluster costs").
//
// Wrap's round tripper lets one request at a time per server look for a connection: it
// holds a gate from the request's start until it has its connection
// (httptrace.ClientTrace.GotConn) or its round trip ends. A request that finds a free
// stream has it at once; one that dials holds the others back until its connection is
// up, and they then share it. A server that negotiates HTTP/1.1, where every request in
// flight needs a connection of its own, is not gated once its first connection says
// so. Gates are per transport and server: a slow or dead server holds back only the
// requests to itself.
package dialgate

import (
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"weak"

	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/fleetwatch/fleetwatch/internal/weakmap"
)

// gates are the gates of the servers of one transport.
type gates struct {
	mu    sync.Mutex
	hosts map[string]*gate
}

// gate is the gate of one server: a request looking for a connection holds its token.
type gate struct {
	token chan struct{}
	// http1 is set once a connection to the server negotiated HTTP/1.x: requests then
	// dial in parallel, as they need to.
	http1 atomic.Bool
}

// table keeps the gates of each transport that some round tripper of Wrap still uses:
// clients made from the same settings share their transport (client-go's TLS cache),
// and so their connections, and must share the gates too.
var table weakmap.Map[weak.Pointer[http.Transport], gates]

// Wrap returns rt with its requests gated as the package says. It fits
// rest.Config.Wrap. The gates are those of the *http.Transport that rt is or wraps
// (utilnet.RoundTripperWrapper, as client-go's transports do); a round tripper that
// wraps none (a test's) is returned as it is.
func Wrap(rt http.RoundTripper) http.RoundTripper {
	t := transportOf(rt)
	if t == nil {
		return rt
	}
	g := table.LoadOrStore(weak.Make(t), func() *gates { return &gates{hosts: map[string]*gate{}} })
	return &roundTripper{rt: rt, gates: g}
}

// transportOf returns the *http.Transport that rt is or wraps, or nil.
func transportOf(rt http.RoundTripper) *http.Transport {
	for rt != nil {
		switch t := rt.(type) {
		case *http.Transport:
			return t
		case utilnet.RoundTripperWrapper:
			rt = t.WrappedRoundTripper()
		default:
			return nil
		}
	}
	return nil
}

// roundTripper gates the requests of rt with gates, the gates of its transport.
type roundTripper struct {
	rt    http.RoundTripper
	gates *gates
}

// of returns the gate of host.
func (g *gates) of(host string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.hosts[host]
	if gt == nil {
		gt = &gate{token: make(chan struct{}, 1)}
		g.hosts[host] = gt
	}
	return gt
}

// RoundTrip implements http.RoundTripper.
func (r *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	g := r.gates.of(req.URL.Host)
	if g.http1.Load() {
		return r.rt.RoundTrip(req)
	}
	ctx := req.Context()
	select {
	case g.token <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	var released atomic.Bool
	release := func() {
		if released.CompareAndSwap(false, true) {
			<-g.token
		}
	}
	defer release()
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if c, ok := info.Conn.(*tls.Conn); !ok || c.ConnectionState().NegotiatedProtocol != "h2" {
			g.http1.Store(true)
		}
		release()
	}}
	return r.rt.RoundTrip(req.WithContext(httptrace.WithClientTrace(ctx, trace)))
}

// CloseIdleConnections closes the idle connections of the transport, as
// http.Client.CloseIdleConnections asks.
func (r *roundTripper) CloseIdleConnections() { utilnet.CloseIdleConnectionsFor(r.rt) }

// WrappedRoundTripper implements utilnet.RoundTripperWrapper.
func (r *roundTripper) WrappedRoundTripper() http.RoundTripper { return r.rt }
