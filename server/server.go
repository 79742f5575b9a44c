package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// Source is what the server serves: the fleet's cache, and the state of its clusters.
// *fleetwatch.Manager implements it.
//
// The server reads Status and ClusterStatus on every request that needs the resources
// of a cluster (discovery, resolving a path), so they should be cheap; the slices they
// return belong to the server. Ready is read by /readyz.
type Source interface {
	// Fleet returns the federated cache. It must return the same Fleet every time.
	Fleet() *aggregate.Fleet
	// Status returns the status of every cluster, sorted by name.
	Status() []aggregate.ClusterStatus
	// ClusterStatus returns the status of one cluster.
	ClusterStatus(name string) (aggregate.ClusterStatus, bool)
	// Ready reports whether every cluster has synced, or has failed to sync within its
	// timeout and serves its last known state.
	Ready() bool
}

// NotSyncedSource is a Source that tells which clusters hold readiness back without
// the status of every cluster: a failed /readyz names the first of them, and at
// thousands of clusters building every status at each probe cost more than the rest of
// the probe. Sources that do not implement it are asked Status.
type NotSyncedSource interface {
	// NotSynced returns the statuses of the first limit clusters by name whose phase
	// is not Synced (nor Remote or Moving), how many such clusters there are, and how
	// many clusters in all (as Status has them, but for those other replicas watch).
	NotSynced(limit int) (first []aggregate.ClusterStatus, notSynced, all int)
}

// ShardedSource is a Source that may be one replica of a sharded fleet, such as a
// fleetwatch.Manager with Options.Shard. A replica hands out resourceVersions that name
// each cluster's position, which the other replicas resume (a cluster moves with its
// position); a server of a Source that is not sharded, without a change log, hands
// out short ones (see docs/design.md, "HTTP API of the daemon").
type ShardedSource interface {
	// Sharded reports whether the Source is a replica of a sharded fleet. It must not
	// change.
	Sharded() bool
}

// Defaults of Options.
const (
	DefaultAddress           = "127.0.0.1:8080"
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultWatchTimeout      = 30 * time.Minute
	DefaultBookmarkInterval  = time.Minute
	DefaultHistorySize       = 4096
	DefaultShutdownTimeout   = 30 * time.Second
	// DefaultMaxRequestsInFlight and DefaultMaxWatches are sized for the base
	// deployment's 2 CPUs and 1 GiB: see "Sizing" in docs/deploy.md.
	DefaultMaxRequestsInFlight = 32
	DefaultMaxWatches          = 512
	DefaultMaxWatchesPerClient = 128
)

// Options configures a Server. The zero value serves on DefaultAddress without TLS or
// authentication; every field documents its default.
type Options struct {
	// Address is the host:port to listen on. Default DefaultAddress. Any address that is
	// not loopback (localhost, 127.0.0.0/8, ::1) requires TLSCertFile, TLSKeyFile and
	// authentication: TokenFile, Delegated or both.
	Address string

	// TLSCertFile and TLSKeyFile are PEM files of the server's certificate (followed by
	// any intermediates) and its key. Both or neither; when set, the server speaks HTTPS
	// only. The files are read again when they change, so a rotated certificate is used
	// without a restart: at once where file events are delivered, else within 10s.
	// Default: none.
	TLSCertFile string
	TLSKeyFile  string

	// TokenFile is a file of bearer tokens, one a line, each optionally followed by
	// "user=NAME" (the client's name in logs and Statuses) and "clusters=GLOB,..." (the
	// only clusters it may read; such a token cannot read /metrics). Blank lines and
	// lines starting with # are ignored. When set, every request except the probes
	// (/healthz, /livez, /readyz) and the web page's files (GET / from a browser,
	// /ui/...), which hold no data, must carry "Authorization: Bearer <token>" with one of
	// them, or one that Delegated accepts. The file is read again when it changes (at
	// once where file events are delivered, else within 10s), not at each request; if
	// it cannot be read or parsed, no token of it is accepted until it can. Tokens are
	// never logged. Default: none.
	TokenFile string
	// Delegated, if not nil, has the home cluster check the bearer tokens that TokenFile
	// does not hold, and authorize their users per cluster. See DelegatedAuth. Default:
	// nil. Without TokenFile and Delegated, requests are not authenticated.
	Delegated *DelegatedAuth

	// AcceptHosts are regular expressions (RE2 syntax) over the host that a request is
	// sent to: the name of its Host header, in lower case, without the port and, for an
	// IPv6 address, without brackets. A request for any other host gets 403, as with
	// kubectl proxy's --accept-hosts, except that each pattern must match the whole name.
	// Loopback names (localhost, localhost., 127.0.0.0/8, ::1) are always accepted, and
	// so is a request without a Host header (HTTP/1.0), which no browser sends.
	//
	// Default: none. Then, when the server does not authenticate (neither TokenFile nor
	// Delegated), only loopback names are accepted, so that a web page cannot read the
	// API through DNS rebinding; when it does, every host is accepted, since a browser
	// sends no bearer token of its own accord. Setting AcceptHosts checks the host in
	// both cases.
	AcceptHosts []string

	// ReadHeaderTimeout bounds reading a request's headers. Default
	// DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request. Default DefaultReadTimeout.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing the response of a request that is not a watch, and
	// each write of a watch, so that a client that stops reading is dropped; a watch
	// itself lasts up to WatchTimeout. Default DefaultWriteTimeout.
	WriteTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its next request.
	// Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// WatchTimeout is the longest a watch lasts; a client's timeoutSeconds can shorten
	// it. Clients such as reflectors then watch again from where they stopped. Default
	// DefaultWatchTimeout.
	WatchTimeout time.Duration
	// BookmarkInterval is how often a watch that allows bookmarks gets one. Default
	// DefaultBookmarkInterval.
	BookmarkInterval time.Duration
	// HistorySize is how many changes of each resource are kept for watches to resume
	// from. A watch from a resourceVersion older than the history gets 410 Gone, and
	// its client lists again. Default DefaultHistorySize.
	HistorySize int
	// ShutdownTimeout bounds how long Start waits, once its context is done, for
	// requests in progress to complete. Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration

	// MaxRequestsInFlight bounds the requests other than watches that are served at
	// once, as kube-apiserver's --max-requests-inflight does; one more gets 429
	// TooManyRequests with Retry-After: 1. Responses are streamed, so each request in
	// flight holds a buffer and the item being encoded, not its whole body: this bounds
	// the memory that clients can make the server spend on responses. Lists of more
	// than 100 objects may take only half of these places, so that clients that ask for
	// large lists in a loop leave room for the others. The probes (/healthz, /livez,
	// /readyz) and /metrics are not counted, and always served. Default
	// DefaultMaxRequestsInFlight.
	MaxRequestsInFlight int
	// MaxWatches bounds the watches that are served at once, counted apart from the
	// other requests since they last long, as the apiserver exempts long-running
	// requests from its in-flight limit; one more gets 429 TooManyRequests with
	// Retry-After: 1. Default DefaultMaxWatches.
	MaxWatches int
	// MaxWatchesPerClient bounds the watches of one client, so that it cannot take all
	// of MaxWatches: a client is the user that TokenFile or Delegated authenticates,
	// else the IP address a request comes from. One more gets 429 TooManyRequests with
	// Retry-After: 1. Default DefaultMaxWatchesPerClient.
	MaxWatchesPerClient int

	// Version is served at /version. GoVersion, Compiler and Platform are filled in
	// when empty, and GitVersion from the main module's version. Default: those only.
	Version version.Info

	// Collectors are more Prometheus collectors to serve at /metrics, next to the
	// server's own (HTTP requests, watches, limits, Go runtime and process) and the
	// fleet's (metrics.NewFleetCollector of the Source), such as
	// metrics.NewSnapshotCollector. Default: none.
	Collectors []prometheus.Collector
	// ClientGoMetrics serves the metrics of client-go's work queues, informers and REST
	// clients at /metrics. client-go takes one metrics provider per process, so this
	// installs metrics.ClientGo's provider if no other was installed first. Default
	// false.
	ClientGoMetrics bool

	// PeerRoots are the certificate authorities that sign the serving certificates of
	// the other replicas of a sharded fleet, which a replica asks for the clusters they
	// watch (their https addresses on the Leases). A replica that serves HTTPS asks only
	// https addresses, so that the caller's token, which it forwards, never travels in
	// clear. Default: nil, the system's roots.
	PeerRoots *x509.CertPool
	// Replica is this replica's identity in a sharded fleet (shard.Options.Identity).
	// The resourceVersions of merged lists and watches name it, so that a watch handed
	// out by one replica resumes through any other. Default: none; then such a
	// resourceVersion resumes only through this replica.
	Replica string

	// Clock tells the time for the AGE columns of tables. Default: the real clock.
	Clock clock.PassiveClock
}

func (o Options) withDefaults() Options {
	if o.Address == "" {
		o.Address = DefaultAddress
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&o.ReadTimeout, DefaultReadTimeout)
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.WatchTimeout, DefaultWatchTimeout)
	def(&o.BookmarkInterval, DefaultBookmarkInterval)
	def(&o.ShutdownTimeout, DefaultShutdownTimeout)
	if o.HistorySize == 0 {
		o.HistorySize = DefaultHistorySize
	}
	if o.MaxRequestsInFlight == 0 {
		o.MaxRequestsInFlight = DefaultMaxRequestsInFlight
	}
	if o.MaxWatches == 0 {
		o.MaxWatches = DefaultMaxWatches
	}
	if o.MaxWatchesPerClient == 0 {
		o.MaxWatchesPerClient = DefaultMaxWatchesPerClient
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Version.GitVersion == "" {
		o.Version.GitVersion = "v0.0.0-devel"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			o.Version.GitVersion = bi.Main.Version
		}
	}
	if o.Version.GoVersion == "" {
		o.Version.GoVersion = runtime.Version()
	}
	if o.Version.Compiler == "" {
		o.Version.Compiler = runtime.Compiler
	}
	if o.Version.Platform == "" {
		o.Version.Platform = runtime.GOOS + "/" + runtime.GOARCH
	}
	o.Collectors = slices.Clone(o.Collectors)
	o.AcceptHosts = slices.Clone(o.AcceptHosts)
	if o.Delegated != nil {
		d := o.Delegated.withDefaults()
		o.Delegated = &d
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	// Slices, not maps, so that the errors come in the order of the fields, the same
	// at every run.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"ReadHeaderTimeout", o.ReadHeaderTimeout}, {"ReadTimeout", o.ReadTimeout}, {"WriteTimeout", o.WriteTimeout},
		{"IdleTimeout", o.IdleTimeout}, {"WatchTimeout", o.WatchTimeout}, {"BookmarkInterval", o.BookmarkInterval},
		{"ShutdownTimeout", o.ShutdownTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("Options.%s: negative duration %v: %w", d.name, d.v, ErrInvalidOptions))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"HistorySize", o.HistorySize}, {"MaxRequestsInFlight", o.MaxRequestsInFlight}, {"MaxWatches", o.MaxWatches},
		{"MaxWatchesPerClient", o.MaxWatchesPerClient},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("Options.%s: negative number %d: %w", n.name, n.v, ErrInvalidOptions))
		}
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		errs = append(errs, fmt.Errorf("Options.TLSCertFile and Options.TLSKeyFile: set both or neither: %w", ErrInvalidOptions))
	}
	loopback, err := isLoopback(o.Address)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("Options.Address %q: %v: %w", o.Address, err, ErrInvalidOptions))
	case !loopback && (o.TLSCertFile == "" || o.TLSKeyFile == "" || (o.TokenFile == "" && o.Delegated == nil)):
		errs = append(errs, fmt.Errorf("Options.Address %q is not a loopback address: Options.TLSCertFile, Options.TLSKeyFile and "+
			"authentication (Options.TokenFile or Options.Delegated) are required: %w", o.Address, ErrInsecureAddress))
	}
	if o.Delegated != nil {
		errs = append(errs, o.Delegated.validate())
	}
	for i, p := range o.AcceptHosts {
		if err := ValidateHostPattern(p); err != nil {
			errs = append(errs, fmt.Errorf("Options.AcceptHosts[%d]: %v: %w", i, err, ErrInvalidOptions))
		}
	}
	for i, c := range o.Collectors {
		if c == nil {
			errs = append(errs, fmt.Errorf("Options.Collectors[%d]: nil: %w", i, ErrInvalidOptions))
		}
	}
	return errors.Join(errs...)
}

// isLoopback reports whether the host of addr is localhost or a loopback IP.
func isLoopback(addr string) (bool, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return false, fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	if host == "localhost" {
		return true, nil
	}
	host, _, _ = strings.Cut(host, "%")
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// Server is the read-only HTTP API of the fleet. Create it with New; serve it with Start,
// or mount Handler in a server of your own.
type Server struct {
	src   Source
	opts  Options
	clock clock.PassiveClock
	cache *watchCache
	// clusterFeed numbers the changes of the clusters' statuses.
	clusterFeed *clusterFeed
	// reg is the watch cache's registration with the fleet.
	reg *aggregate.Registration
	// catchUp is the channel of caughtUp, once the source was first seen ready.
	catchUp   atomic.Pointer[<-chan struct{}]
	hosts     *hostFilter
	tokens    *tokenFile     // nil without a token file
	delegated *delegatedAuth // nil without delegated authentication
	certs     *certificates  // nil without TLS
	metrics   *metrics
	limits    *limiter
	peers     *peerClient
	handler   http.Handler
	// openAPI serves the clusters' OpenAPI documents; crds finds the printer columns of
	// custom resources.
	openAPI *openAPIProxy
	crds    *crdColumns
	// placement is who watches each cluster, as fan-out watches check it.
	placement placement

	// stopping is closed when the server shuts down, to end watches.
	stopping chan struct{}
	stopOnce sync.Once

	// mu guards started.
	mu      sync.Mutex
	started bool
}

// New validates opts and returns a Server of src. It reads the token file and the TLS
// files, and registers a handler (named "server") with the fleet, which keeps the
// server's view of the fleet and the history that watches resume from; the handler is
// removed when Start returns.
func New(src Source, opts Options) (*Server, error) {
	if src == nil || src.Fleet() == nil {
		return nil, fmt.Errorf("server.New: nil Source or Fleet: %w", ErrInvalidOptions)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	s := &Server{
		src:      src,
		opts:     opts,
		clock:    opts.Clock,
		cache:    newWatchCache(opts.HistorySize, src.Fleet().Codec(), changeLogOf(src)),
		hosts:    newHostFilter(opts),
		openAPI:  newOpenAPIProxy(src),
		crds:     newCRDColumns(src),
		stopping: make(chan struct{}),
	}
	sharded, _ := src.(ShardedSource)
	s.cache.sequenced = s.cache.log == nil && opts.Replica == "" && (sharded == nil || !sharded.Sharded())
	s.clusterFeed = newClusterFeed(s.cache.epoch)
	if opts.TokenFile != "" {
		t, err := loadTokenFile(opts.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("Options.TokenFile: %w", err)
		}
		s.tokens = t
	}
	if opts.Delegated != nil {
		d, err := newDelegatedAuth(*opts.Delegated)
		if err != nil {
			return nil, err
		}
		s.delegated = d
	}
	if opts.TLSCertFile != "" {
		c, err := loadCertificates(opts.TLSCertFile, opts.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("Options.TLSCertFile, Options.TLSKeyFile: %w", err)
		}
		s.certs = c
	}
	peers, err := newPeerClient(opts)
	if err != nil {
		return nil, err
	}
	s.peers = peers
	m, err := newMetrics(s, opts)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.limits = newLimiter(opts, m)
	reg, err := s.cache.register(src.Fleet())
	if err != nil {
		return nil, fmt.Errorf("server.New: register with the fleet: %w", err)
	}
	s.reg = reg
	go s.cache.indexWhenReady(reg.HasSyncedChecker().Done(), func() <-chan struct{} { return s.caughtUp(s.src.Ready()) }, s.stopping)
	// The limits come after authentication, as in kube-apiserver: a request refused for
	// its host or its credentials takes no place, and a watch is counted against its
	// client. The web page and its assets come before authentication: they hold no data.
	s.handler = s.metrics.instrument(recoverPanics(s.checkHost(s.servePage(s.authenticate(s.limits.limit(http.HandlerFunc(s.route)))))))
	return s, nil
}

// Handler returns the server's HTTP handler, for tests and for mounting in another
// server. It sets no timeouts of its own beyond those of each request (WriteTimeout);
// the http.Server it runs in should set the rest, as Start does. The token file and
// the TLS files are re-read when they change only while Start or Serve runs. Requests
// log through the logger of their context (klog.FromContext).
func (s *Server) Handler() http.Handler { return s.handler }

// Start listens on Options.Address and serves until ctx is done, then shuts down: it
// ends the watches, waits up to Options.ShutdownTimeout for the other requests in
// progress, and removes its handler from the fleet. It returns nil after a shutdown on
// ctx, or the error that stopped it.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.opts.Address)
	if err != nil {
		return fmt.Errorf("listen on Options.Address %q: %w", s.opts.Address, err)
	}
	return s.Serve(ctx, ln)
}

// Serve is Start on a listener of the caller's, which it closes. The listener's address
// is not checked against Options.Address.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		_ = ln.Close()
		return ErrAlreadyStarted
	}
	s.started = true
	s.mu.Unlock()
	defer s.reg.Remove()

	logger := klog.FromContext(ctx)
	followCtx, stopFollowing := context.WithCancel(ctx)
	following := make(chan struct{})
	go func() {
		defer close(following)
		s.followFiles(followCtx)
	}()
	defer func() {
		stopFollowing()
		<-following
	}()
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		// WriteTimeout is left unset: it would end every watch. Each request sets its own
		// write deadline instead (Options.WriteTimeout).
		MaxHeaderBytes: 1 << 20,
		ErrorLog:       log.New(logWriter{logger}, "", 0),
		BaseContext:    func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	if s.certs != nil {
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.certs.get}
	}
	done := make(chan error, 1)
	go func() {
		if s.certs != nil {
			done <- srv.ServeTLS(ln, "", "")
		} else {
			done <- srv.Serve(ln)
		}
	}()
	logger.Info("Serving the fleet API", "address", ln.Addr().String(), "tls", s.certs != nil, "tokenFile", s.tokens != nil, "delegatedAuth", s.delegated != nil)

	select {
	case err := <-done:
		s.stop()
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	s.stop()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	if err != nil {
		_ = srv.Close()
		err = fmt.Errorf("shut down within Options.ShutdownTimeout (%v): %w", s.opts.ShutdownTimeout, err)
	}
	<-done
	logger.Info("Stopped serving the fleet API")
	return err
}

// logWriter is the http.Server's ErrorLog: its lines (such as failed TLS handshakes)
// go to the logger of Serve's context.
type logWriter struct{ logger klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.logger.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}

// caughtUp returns nil until the source is first seen ready (ready is whether it is
// now), and from then on a channel closed once the watch cache has been delivered every
// event the fleet had queued for it then: the server's view holds what the ready fleet
// held. The view primes (primed) whenever it catches up with the fleet, also at the
// start of a warm start's load, with nothing loaded yet.
func (s *Server) caughtUp(ready bool) <-chan struct{} {
	if p := s.catchUp.Load(); p != nil {
		return *p
	}
	if !ready {
		return nil
	}
	ch := s.reg.CaughtUp()
	if s.catchUp.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *s.catchUp.Load()
}

// stop ends the watches.
func (s *Server) stop() { s.stopOnce.Do(func() { close(s.stopping) }) }

// requestInfo describes a request for metrics; the handlers fill it in.
type requestInfo struct {
	verb     string
	resource string
}

type requestInfoKey struct{}

func infoFrom(ctx context.Context) *requestInfo {
	if ri, ok := ctx.Value(requestInfoKey{}).(*requestInfo); ok {
		return ri
	}
	return &requestInfo{}
}

// probePaths need no authentication.
var probePaths = []string{"/healthz", "/livez", "/readyz"}

// route serves a request that passed authentication.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	info := infoFrom(r.Context())
	// A watch replaces this deadline before each of its writes.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
	if rt, err := parseRoute(r.URL.EscapedPath()); r.Method == http.MethodDelete && err == nil && isStateRoute(rt) {
		// The acknowledgement of a handed-over state, the one write (see StatePath).
		info.resource, info.verb = stateGR.String(), "delete"
		if err := s.serveState(w, r, rt.name); err != nil {
			writeStatus(w, r, err)
		}
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeStatus(w, r, methodNotAllowed(r))
		return
	}
	if err := s.serve(w, r, info); err != nil {
		writeStatus(w, r, err)
	}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request, info *requestInfo) error {
	path := r.URL.EscapedPath()
	switch path {
	case "/healthz", "/livez":
		info.verb = "probe"
		writeBody(w, http.StatusOK, "text/plain; charset=utf-8", []byte("ok"))
		return nil
	case "/readyz":
		info.verb = "probe"
		s.serveReadyz(w, r)
		return nil
	case "/version":
		info.verb = "version"
		writeJSON(w, http.StatusOK, &s.opts.Version)
		return nil
	case "/metrics":
		info.verb = "metrics"
		if err := s.authorizeMetrics(r); err != nil {
			return err
		}
		s.metrics.serve(w, r)
		return nil
	case "/":
		info.verb = "discovery"
		writeJSON(w, http.StatusOK, map[string][]string{"paths": rootPaths})
		return nil
	}
	rt, err := parseRoute(path)
	if err != nil || rt.kind == routeNotFound {
		return notFoundPath(path)
	}
	if isStateRoute(rt) {
		info.resource, info.verb = stateGR.String(), "get"
		return s.serveState(w, r, rt.name)
	}
	// The clusters the client may read are decided here, before the cache is read.
	allow, err := s.authorize(r, rt)
	if err != nil {
		return err
	}
	// The resources served are those of every cluster the client may read, also for a
	// request another replica forwarded (or the local part of a fan-out watch), which is
	// answered from this replica's clusters only: a resource that only other replicas'
	// clusters serve is then an empty list here, not a 404 that would fail the whole.
	catalogScope := scope{cluster: rt.cluster, allow: allow}
	if rt.cluster == allClusters && forwarded(r) {
		allow = s.ownedOnly(allow)
	}
	sc := scope{cluster: rt.cluster, allow: allow, fanOut: rt.cluster == allClusters && !forwarded(r)}
	if rt.cluster != "" && rt.cluster != allClusters {
		if !s.clusterExists(rt.cluster, sc) {
			return clusterNotFound(rt.cluster)
		}
		// Another replica of a sharded fleet watches it: it answers.
		if s.proxyRemote(w, r, rt.cluster) {
			return nil
		}
		// The Cluster resource under the prefix says where the cluster is watched.
		if rt.kind != routeResource || rt.groupVersion() != SchemeGroupVersion {
			if err := s.watchedElsewhere(rt.cluster); err != nil {
				return err
			}
		}
	}
	c := &catalog{}
	if rt.cluster != "" {
		catalogScope.fanOut = sc.fanOut || rt.cluster == allClusters
		c = s.catalog(catalogScope)
	}
	info.verb = "discovery"
	switch rt.kind {
	case routeVersion:
		info.verb = "version"
		writeJSON(w, http.StatusOK, &s.opts.Version)
		return nil
	case routeOpenAPI:
		info.verb = "openapi"
		return s.serveOpenAPI(w, r, rt.cluster, rt.openAPI)
	case routeAPIVersions:
		return serveAPIVersions(w, r, c)
	case routeAPIGroupList:
		return serveAPIGroupList(w, r, c)
	case routeAPIGroup:
		return serveAPIGroup(w, r, c, rt.group)
	case routeResourceList:
		return serveAPIResourceList(w, r, c, rt.groupVersion())
	}
	// routeResource
	if rt.groupVersion() == SchemeGroupVersion {
		if rt.resource == searchResource && !rt.hasNamespace && !rt.hasName {
			info.resource, info.verb = searchGR.String(), "search"
			if rt.cluster == "" {
				// Every cluster, as under /clusters/*/, and so, forwarded, this
				// replica's own only.
				sc.cluster = allClusters
				if forwarded(r) {
					sc.allow = s.ownedOnly(sc.allow)
				}
			}
			return s.serveSearch(w, r, sc)
		}
		if (rt.resource == changesResource || rt.resource == historyResource) && !rt.hasNamespace && !rt.hasName {
			return s.serveHistory(w, r, rt, sc, info)
		}
		if rt.resource != "clusters" || rt.hasNamespace || rt.subresource != "" {
			return notFound(schema.GroupResource{Group: GroupName, Resource: rt.resource}, "")
		}
		info.resource, info.verb = clustersGR.String(), "list"
		if rt.hasName {
			info.verb = "get"
		}
		if rt.cluster == "" {
			sc.cluster = allClusters
		}
		return s.serveClusters(w, r, sc, rt.name, rt.hasName)
	}
	if rt.cluster == "" {
		return notFoundPath(path)
	}
	info.verb = "other"
	return s.serveResource(w, r, rt, sc, c, info)
}

// rootPaths are listed at /, as the apiserver lists its own.
var rootPaths = []string{
	"/api", "/apis", "/apis/" + GroupName, "/apis/" + SchemeGroupVersion.String(), "/apis/" + SchemeGroupVersion.String() + "/" + searchResource,
	"/apis/" + SchemeGroupVersion.String() + "/" + changesResource, "/clusters/{cluster}/apis/" + SchemeGroupVersion.String() + "/" + historyResource,
	"/clusters/{cluster}/api", "/clusters/{cluster}/apis", "/clusters/*/api", "/clusters/*/apis",
	"/healthz", "/livez", "/metrics", "/readyz", "/version",
}

func notFoundPath(path string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusNotFound,
		Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the server could not find the requested resource %s: the fleet's resources are served under "+
			"/clusters/{cluster}/ (a path-escaped cluster name), or /clusters/*/ for every cluster", path),
	}}
}

// clusterNames returns the name of every cluster of the fleet: those with a status,
// and those with cached objects.
func (s *Server) clusterNames() []string {
	names := make(map[string]bool)
	for _, st := range s.src.Status() {
		names[st.Name] = true
	}
	for _, rc := range s.cache.all() {
		rc.mu.RLock()
		for cl := range rc.clusters {
			names[cl] = true
		}
		rc.mu.RUnlock()
	}
	return slices.Sorted(maps.Keys(names))
}

// watchedElsewhere returns a 503 ServiceUnavailable if the fleet is sharded and this
// replica does not watch the cluster name: it holds none of its objects, and an empty
// answer would hide that. The Status says which replica watches it, if one does.
func (s *Server) watchedElsewhere(name string) error {
	st, ok := s.src.ClusterStatus(name)
	if !ok || (st.Phase != aggregate.PhaseRemote && st.Phase != aggregate.PhaseMoving) {
		return nil
	}
	msg := fmt.Sprintf("cluster %q is not watched by this replica: ", name)
	switch {
	case st.Replica != "" && st.ReplicaAddress != "":
		msg += fmt.Sprintf("replica %q watches it, at %s", st.Replica, st.ReplicaAddress)
	case st.Replica != "":
		msg += fmt.Sprintf("replica %q watches it", st.Replica)
	default:
		msg += "no replica watches it now; it is moving"
	}
	return apierrors.NewServiceUnavailable(msg)
}

// clusterExists reports whether name is a cluster of the fleet in sc: one with a status,
// or with cached objects.
func (s *Server) clusterExists(name string, sc scope) bool {
	if !sc.includes(name) {
		return false
	}
	if _, ok := s.src.ClusterStatus(name); ok {
		return true
	}
	return slices.ContainsFunc(s.cache.all(), func(rc *resourceCache) bool { return rc.hasCluster(name) })
}

// scopeClusters returns the clusters of sc: its cluster, or every cluster of the fleet
// that it admits.
func (s *Server) scopeClusters(sc scope) []string {
	if !sc.all() {
		return []string{sc.cluster}
	}
	return slices.DeleteFunc(s.clusterNames(), func(cl string) bool { return !sc.includes(cl) })
}
