package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// metrics are the server's Prometheus metrics, served at /metrics from a registry of the
// server's own.
type metrics struct {
	handler     http.Handler
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
			Help: "HTTP requests, by verb (get, list, watch, discovery, probe, metrics, version, other), resource and status code.",
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
	reg.MustRegister(m.requests, m.latency, m.watches, m.watchEvents, m.rejected, inFlight, &fleetCollector{s: s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for i, c := range opts.Collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("Options.Collectors[%d]: %w: %w", i, err, ErrInvalidOptions)
		}
	}
	if opts.ClientGoMetrics {
		if err := reg.Register(ClientGoCollector()); err != nil {
			return nil, fmt.Errorf("Options.ClientGoMetrics: %w: %w", err, ErrInvalidOptions)
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: promLogger{}})
	return m, nil
}

func (m *metrics) serve(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

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

type promLogger struct{}

func (promLogger) Println(v ...any) {
	klog.ErrorS(nil, "Serving metrics failed", "error", fmt.Sprint(v...))
}

// fleetCollector reads the state of the fleet at each scrape: the phase of each cluster,
// the objects and events of each cluster and resource, and the backlog of each handler.
// The snapshot lag and other metrics of other components are added through
// Options.Collectors.
type fleetCollector struct {
	s *Server
}

var (
	clusterPhaseDesc = prometheus.NewDesc("fleetwatch_cluster_phase",
		"The phase of each cluster: 1 for its current phase, 0 for the others.", []string{"cluster", "phase"}, nil)
	clusterLastSyncDesc = prometheus.NewDesc("fleetwatch_cluster_last_sync_timestamp_seconds",
		"When each cluster last completed its initial sync, in seconds since the epoch.", []string{"cluster"}, nil)
	objectsDesc = prometheus.NewDesc("fleetwatch_objects",
		"Objects in the cache, by cluster and resource.", []string{"cluster", "resource"}, nil)
	storeSyncedDesc = prometheus.NewDesc("fleetwatch_store_synced",
		"Whether the informer of each cluster and resource has completed its initial list (1) or not (0).", []string{"cluster", "resource"}, nil)
	eventsDesc = prometheus.NewDesc("fleetwatch_events_total",
		"Changes of objects received from the fleet, by cluster and resource; the first are the state at the server's start. Use rate() for events per second.",
		[]string{"cluster", "resource"}, nil)
	backlogDesc = prometheus.NewDesc("fleetwatch_handler_backlog",
		"Events waiting for each fleet handler.", []string{"handler"}, nil)
	deliveredDesc = prometheus.NewDesc("fleetwatch_handler_delivered_total",
		"Events delivered to each fleet handler.", []string{"handler"}, nil)
	coalescedDesc = prometheus.NewDesc("fleetwatch_handler_coalesced_total",
		"Events merged away while each fleet handler was behind by more than its maximum backlog.", []string{"handler"}, nil)
	panicsDesc = prometheus.NewDesc("fleetwatch_handler_panics_total",
		"Panics of each fleet handler.", []string{"handler"}, nil)
	readyDesc = prometheus.NewDesc("fleetwatch_ready",
		"Whether the fleet is ready (1) or not (0), as /readyz reports it.", nil, nil)
)

var phases = []aggregate.Phase{aggregate.PhaseConnecting, aggregate.PhaseSyncing, aggregate.PhaseSynced, aggregate.PhaseUnreachable, aggregate.PhaseStale}

func (c *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{clusterPhaseDesc, clusterLastSyncDesc, objectsDesc, storeSyncedDesc, eventsDesc,
		backlogDesc, deliveredDesc, coalescedDesc, panicsDesc, readyDesc} {
		ch <- d
	}
}

func (c *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.s.src.Status() {
		for _, p := range phases {
			ch <- prometheus.MustNewConstMetric(clusterPhaseDesc, prometheus.GaugeValue, boolValue(st.Phase == p), st.Name, string(p))
		}
		if !st.LastSyncTime.IsZero() {
			ch <- prometheus.MustNewConstMetric(clusterLastSyncDesc, prometheus.GaugeValue, float64(st.LastSyncTime.UnixNano())/1e9, st.Name)
		}
	}
	stats := c.s.src.Fleet().Stats()
	for _, st := range stats.Stores {
		gr := st.Resource.GroupResource().String()
		ch <- prometheus.MustNewConstMetric(objectsDesc, prometheus.GaugeValue, float64(st.Objects), st.Cluster, gr)
		ch <- prometheus.MustNewConstMetric(storeSyncedDesc, prometheus.GaugeValue, boolValue(st.Synced), st.Cluster, gr)
	}
	for _, h := range stats.Handlers {
		ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(h.Backlog), h.Name)
		ch <- prometheus.MustNewConstMetric(deliveredDesc, prometheus.CounterValue, float64(h.Delivered), h.Name)
		ch <- prometheus.MustNewConstMetric(coalescedDesc, prometheus.CounterValue, float64(h.Coalesced), h.Name)
		ch <- prometheus.MustNewConstMetric(panicsDesc, prometheus.CounterValue, float64(h.Panics), h.Name)
	}
	// Several versions of a resource would repeat a cluster and group-resource pair.
	events := make(map[[2]string]uint64)
	for _, rc := range c.s.cache.all() {
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
	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, boolValue(c.s.src.Ready()))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// client-go's metrics. client-go takes one provider of work queue metrics and one of
// informer metrics per process, the first installed; reflector metrics are no longer
// reported by client-go at all.

var clientGo struct {
	once sync.Once
	c    *clientGoCollector
}

// ClientGoCollector returns the collector of the metrics of client-go's work queues
// (workqueue_*, by queue name, as aggregate.NewQueue names them) and informers
// (informer_*, for informers created with a name). The first call installs it as
// client-go's provider of both; if another provider was installed before, client-go
// keeps that one and these metrics stay empty. Later calls return the same collector.
func ClientGoCollector() prometheus.Collector {
	clientGo.once.Do(func() {
		c := newClientGoCollector()
		workqueue.SetProvider(c)
		cache.SetInformerMetricsProvider(c)
		clientGo.c = c
	})
	return clientGo.c
}

type clientGoCollector struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	queueLatency, workDuration *prometheus.HistogramVec
	queued, storeRV            *prometheus.GaugeVec
	processing                 *prometheus.HistogramVec
	all                        []prometheus.Collector
}

var (
	_ workqueue.MetricsProvider     = (*clientGoCollector)(nil)
	_ cache.InformerMetricsProvider = (*clientGoCollector)(nil)
	_ prometheus.Collector          = (*clientGoCollector)(nil)
)

func newClientGoCollector() *clientGoCollector {
	name := []string{"name"}
	informer := []string{"name", "group", "version", "resource"}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	c := &clientGoCollector{
		depth:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the work queue."}, name),
		adds:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the work queue."}, name),
		queueLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "Time an item stays in the work queue before it is requested.", Buckets: buckets}, name),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "Time processing an item from the work queue takes.", Buckets: buckets}, name),
		unfinished:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, name),
		longest:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor of the work queue has been running."}, name),
		retries:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries handled by the work queue."}, name),
		queued:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informer_queued_items", Help: "Items queued in the informer's FIFO, waiting to be processed."}, informer),
		processing:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "informer_processing_latency_seconds", Help: "Time the informer's handlers take to process an item popped from its FIFO.", Buckets: prometheus.DefBuckets}, informer),
		storeRV:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "informer_store_resource_version", Help: "The resourceVersion of the informer's store."}, informer),
	}
	c.all = []prometheus.Collector{c.depth, c.adds, c.queueLatency, c.workDuration, c.unfinished, c.longest, c.retries, c.queued, c.processing, c.storeRV}
	return c
}

func (c *clientGoCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.all {
		m.Describe(ch)
	}
}

func (c *clientGoCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.all {
		m.Collect(ch)
	}
}

func (c *clientGoCollector) NewDepthMetric(name string) workqueue.GaugeMetric {
	return c.depth.WithLabelValues(name)
}
func (c *clientGoCollector) NewAddsMetric(name string) workqueue.CounterMetric {
	return c.adds.WithLabelValues(name)
}
func (c *clientGoCollector) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return c.queueLatency.WithLabelValues(name)
}
func (c *clientGoCollector) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return c.workDuration.WithLabelValues(name)
}
func (c *clientGoCollector) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return c.unfinished.WithLabelValues(name)
}
func (c *clientGoCollector) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return c.longest.WithLabelValues(name)
}
func (c *clientGoCollector) NewRetriesMetric(name string) workqueue.CounterMetric {
	return c.retries.WithLabelValues(name)
}

func informerLabels(id cache.InformerNameAndResource) []string {
	gvr := id.GroupVersionResource()
	return []string{id.Name(), gvr.Group, gvr.Version, gvr.Resource}
}

func (c *clientGoCollector) NewQueuedItemMetric(id cache.InformerNameAndResource) cache.GaugeMetric {
	return reservedGauge{id, c.queued.WithLabelValues(informerLabels(id)...)}
}
func (c *clientGoCollector) NewProcessingLatencyMetric(id cache.InformerNameAndResource) cache.HistogramMetric {
	return reservedObserver{id, c.processing.WithLabelValues(informerLabels(id)...)}
}
func (c *clientGoCollector) NewStoreResourceVersionMetric(id cache.InformerNameAndResource) cache.GaugeMetric {
	return reservedGauge{id, c.storeRV.WithLabelValues(informerLabels(id)...)}
}

// reservedGauge and reservedObserver update their metric only while the informer's name
// is reserved, as client-go asks of providers: a stopped informer's name can be taken
// by a new one.
type reservedGauge struct {
	id cache.InformerNameAndResource
	g  prometheus.Gauge
}

func (r reservedGauge) Set(v float64) {
	if r.id.Reserved() {
		r.g.Set(v)
	}
}

type reservedObserver struct {
	id cache.InformerNameAndResource
	o  prometheus.Observer
}

func (r reservedObserver) Observe(v float64) {
	if r.id.Reserved() {
		r.o.Observe(v)
	}
}
