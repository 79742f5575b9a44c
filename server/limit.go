package server

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// retryAfter is the Retry-After, in seconds, of a request refused by a limit, as
// kube-apiserver sends it.
const retryAfter = 1

// Reasons of fleetwatch_http_requests_rejected_total: the limit a request was refused
// by.
const (
	rejectedRequests      = "MaxRequestsInFlight"
	rejectedLargeLists    = "LargeLists"
	rejectedWatches       = "MaxWatches"
	rejectedClientWatches = "MaxWatchesPerClient"
)

// largeList is the number of objects beyond which a list is large. It is the apiserver's
// estimate of the work of one request (its priority and fairness counts a list as one
// seat per 100 objects).
const largeList = 100

// limiter bounds the requests that the server serves at once, in the spirit of
// kube-apiserver's --max-requests-inflight: at most Options.MaxRequestsInFlight requests
// other than watches, and at most Options.MaxWatches watches, which are long-running
// and counted apart, so that watches cannot starve lists and lists cannot refuse
// watches. A request beyond its limit is not queued: it gets 429 TooManyRequests with
// Retry-After, at once, which client-go retries.
//
// The probes and /metrics are exempt, so that the kubelet and Prometheus still get
// their answers from a server that is saturated: they cost little, and a saturated
// server is not dead.
//
// Lists of more than largeList objects may hold at most half of the places of
// MaxRequestsInFlight, and get 429 beyond. Large lists take long to send, and a client
// that asks for them in a loop would otherwise take every place that frees up, before a
// client that asks once; with them capped, the other requests, which are quick, always
// find a place.
//
// A client may hold at most Options.MaxWatchesPerClient of the watches, so that one
// client cannot take them all: a client is the user that authentication established,
// else an IP address. The limits come after authentication, as in kube-apiserver, so
// that a request without valid credentials takes no place.
//
// The limits bound memory because every response is streamed (see writeList): a request
// holds a buffer and the item being encoded, plus a reference per object it lists,
// never a whole body.
type limiter struct {
	// requests, large and watches are semaphores: a request holds one element of each
	// channel that counts it while it is served.
	requests chan struct{}
	large    chan struct{}
	watches  chan struct{}
	// maxClientWatches is Options.MaxWatchesPerClient.
	maxClientWatches int
	metrics          *metrics

	// mu guards clientWatches.
	mu sync.Mutex
	// clientWatches counts the watches of each client that has one, by clientOf.
	clientWatches map[string]int
}

func newLimiter(opts Options, m *metrics) *limiter {
	return &limiter{
		requests:         make(chan struct{}, opts.MaxRequestsInFlight),
		large:            make(chan struct{}, max(1, opts.MaxRequestsInFlight/2)),
		watches:          make(chan struct{}, opts.MaxWatches),
		maxClientWatches: opts.MaxWatchesPerClient,
		metrics:          m,
		clientWatches:    map[string]int{},
	}
}

// exempt reports whether a request is served whatever the load.
func exempt(r *http.Request) bool {
	return r.URL.Path == "/metrics" || slices.Contains(probePaths, r.URL.Path)
}

// isWatch reports whether a request asks for a watch, as the handlers decide it: the
// parameter watch is true. A bad value is not a watch; the handler refuses it.
func isWatch(r *http.Request) bool {
	b, err := strconv.ParseBool(r.URL.Query().Get("watch"))
	return err == nil && b
}

// limit serves a request if its limit allows, and answers 429 otherwise.
func (l *limiter) limit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if exempt(r) {
			next.ServeHTTP(w, r)
			return
		}
		var release func()
		var err error
		if isWatch(r) {
			infoFrom(r.Context()).verb = "watch"
			release, err = l.acquireWatch(clientOf(r))
		} else {
			release, err = l.acquire(l.requests, rejectedRequests, "requests other than watches")
		}
		if err != nil {
			writeStatus(w, r, err)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}

// acquireWatch takes a place for a watch of client, under MaxWatches and
// MaxWatchesPerClient, or returns a 429 Status.
func (l *limiter) acquireWatch(client string) (release func(), err error) {
	releaseAll, err := l.acquire(l.watches, rejectedWatches, "watches")
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.clientWatches[client]
	if n >= l.maxClientWatches {
		releaseAll()
		l.metrics.rejected.WithLabelValues(rejectedClientWatches).Inc()
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("too many watches: the server serves at most %d watches of one client at once; try again later", l.maxClientWatches), retryAfter)
	}
	l.clientWatches[client] = n + 1
	return func() {
		l.mu.Lock()
		if l.clientWatches[client]--; l.clientWatches[client] == 0 {
			delete(l.clientWatches, client)
		}
		l.mu.Unlock()
		releaseAll()
	}, nil
}

// clientOf names the client of a request: the user that authentication established,
// else the IP address it comes from.
func clientOf(r *http.Request) string {
	if p := principalFrom(r); p != nil {
		return "user " + p.name
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "address " + host
}

// acquire takes a place in sem, or returns a 429 Status that names what sem limits.
func (l *limiter) acquire(sem chan struct{}, reason, what string) (release func(), err error) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	default:
		l.metrics.rejected.WithLabelValues(reason).Inc()
		return nil, apierrors.NewTooManyRequests(fmt.Sprintf("too many requests: the server serves at most %d %s at once; try again later", cap(sem), what), retryAfter)
	}
}

// admitList takes a place for a list of n objects, if it is large; release gives it
// back. The list, already counted under MaxRequestsInFlight, gets 429 if there is none.
func (l *limiter) admitList(n int) (release func(), err error) {
	if n <= largeList {
		return func() {}, nil
	}
	return l.acquire(l.large, rejectedLargeLists, fmt.Sprintf("lists of more than %d objects", largeList))
}

// inFlight returns the number of requests other than watches being served under
// MaxRequestsInFlight.
func (l *limiter) inFlight() int { return len(l.requests) }
