package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	fleetmetrics "github.com/fleetwatch/fleetwatch/metrics"
)

// metrics are the server's Prometheus metrics, served at /metrics from a registry of the
// server's own: those of HTTP requests, watches and limits, which it keeps, and the
// fleet's, whose collectors package metrics owns.
type metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	watches     *prometheus.GaugeVec
	watchEvents *prometheus.CounterVec
	rejected    *prometheus.CounterVec
}

func newMetrics(s *Server, opts Options) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwatch_http_requests_total",
			Help: "HTTP requests, by verb (get, list, watch, search, openapi, discovery, probe, metrics, version, page, other), resource and status code.",
		}, []string{"verb", "resource", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetwatch_http_request_duration_seconds",
			Help:    "Time to serve HTTP requests other than watches, by verb and resource.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"verb", "resource"}),
		watches: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetwatch_http_watches",
			Help: "Watches being served, by resource.",
		}, []string{"resource"}),
		watchEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwatch_http_watch_events_total",
			Help: "Events sent to watches, by resource.",
		}, []string{"resource"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetwatch_http_requests_rejected_total",
			Help: "Requests refused with 429 TooManyRequests, by the limit they were over: MaxRequestsInFlight (server.limits.maxRequestsInFlight), LargeLists (half of it, for lists of more than 100 objects), MaxWatches (server.limits.maxWatches) or MaxWatchesPerClient (server.limits.maxWatchesPerClient).",
		}, []string{"reason"}),
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "fleetwatch_http_requests_in_flight",
		Help: "Requests other than watches being served, which server.limits.maxRequestsInFlight bounds; the probes and /metrics are not counted.",
	}, func() float64 { return float64(s.limits.inFlight()) })
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.requests, m.latency, m.watches, m.watchEvents, m.rejected, inFlight,
		fleetmetrics.NewFleetCollector(s.src), watchCacheCollector{s.cache},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for i, c := range opts.Collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("Options.Collectors[%d]: %w: %w", i, err, ErrInvalidOptions)
		}
	}
	if opts.ClientGoMetrics {
		if err := reg.Register(fleetmetrics.ClientGo()); err != nil {
			return nil, fmt.Errorf("Options.ClientGoMetrics: %w: %w", err, ErrInvalidOptions)
		}
	}
	m.reg = reg
	return m, nil
}

// serve serves the metrics. The handler is made for each scrape, which is rare, so that
// it logs its errors through the request's logger.
func (m *metrics) serve(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: promLogger{klog.FromContext(r.Context())}}).ServeHTTP(w, r)
}

// instrument counts requests and times those that are not watches.
func (m *metrics) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := &requestInfo{verb: "other"}
		sw := &statusWriter{ResponseWriter: w, started: time.Now()}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info)))
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		m.requests.WithLabelValues(info.verb, info.resource, strconv.Itoa(code)).Inc()
		if info.verb != "watch" || code != http.StatusOK {
			m.latency.WithLabelValues(info.verb, info.resource).Observe(time.Since(sw.started).Seconds())
		}
	})
}

func (m *metrics) watchStarted(res *apiResource) {
	m.watches.WithLabelValues(res.gvr.GroupResource().String()).Inc()
}

func (m *metrics) watchEnded(res *apiResource) {
	m.watches.WithLabelValues(res.gvr.GroupResource().String()).Dec()
}

func (m *metrics) watchEvent(res *apiResource) {
	m.watchEvents.WithLabelValues(res.gvr.GroupResource().String()).Inc()
}

// promLogger is promhttp's ErrorLog.
type promLogger struct{ logger klog.Logger }

func (l promLogger) Println(v ...any) {
	l.logger.Error(nil, "Serving metrics failed", "error", fmt.Sprint(v...))
}

// watchCacheCollector reads the changes that the watch cache has received, by cluster
// and resource. The rest of the fleet's state is collected by package metrics.
type watchCacheCollector struct{ cache *watchCache }

var _ prometheus.Collector = watchCacheCollector{}

var eventsDesc = prometheus.NewDesc("fleetwatch_events_total",
	"Changes of objects received from the fleet, by cluster and resource; the first are the state at the server's start. Use rate() for events per second.",
	[]string{"cluster", "resource"}, nil)

func (c watchCacheCollector) Describe(ch chan<- *prometheus.Desc) { ch <- eventsDesc }

func (c watchCacheCollector) Collect(ch chan<- prometheus.Metric) {
	// Several versions of a resource would repeat a cluster and group-resource pair.
	events := make(map[[2]string]uint64)
	for _, rc := range c.cache.all() {
		gr := rc.resource.GroupResource().String()
		rc.mu.RLock()
		for cl, n := range rc.events {
			events[[2]string{cl, gr}] += n
		}
		rc.mu.RUnlock()
	}
	for k, n := range events {
		ch <- prometheus.MustNewConstMetric(eventsDesc, prometheus.CounterValue, float64(n), k[0], k[1])
	}
}
