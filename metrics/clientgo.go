package metrics

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"

	"github.com/fleetwatch/fleetwatch/cluster"
)

// client-go's metrics. client-go takes one provider of work queue metrics, one of
// informer metrics and one set of REST client metrics per process, the first installed;
// reflector metrics are no longer reported by client-go at all.

var clientGo struct {
	once sync.Once
	c    *clientGoCollector
}

// ClientGo returns the collector of the metrics of client-go's work queues (workqueue_*,
// by queue name, as aggregate.NewQueue names them), informers (informer_*, for
// informers created with a name) and REST clients (rest_client_*). The REST clients'
// counts are by cluster, as the request's context carries it (cluster.NameFromContext;
// empty for the requests that client-go makes without it, such as discovery), and by
// the host of the apiserver; their latencies are by verb only, for the fleet: a
// histogram is 15 series (12 buckets, +Inf, sum, count), which by cluster made 30 per
// cluster, 300,000 at 10,000 clusters, and about 4 KiB of memory.
// The first call installs it as client-go's provider of all three; if another provider
// was installed before, client-go keeps that one and these metrics stay empty. Later
// calls return the same collector.
func ClientGo() prometheus.Collector {
	clientGo.once.Do(func() {
		c := newClientGoCollector()
		workqueue.SetProvider(c)
		cache.SetInformerMetricsProvider(c)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency:     restLatency{c.restLatency},
			RateLimiterLatency: restLatency{c.rateLimiterLatency},
			RequestResult:      restResult{c.restRequests},
			RequestRetry:       restRetry{c.restRetries},
		})
		clientGo.c = c
	})
	return clientGo.c
}

type clientGoCollector struct {
	depth, unfinished, longest      *prometheus.GaugeVec
	adds, retries                   *prometheus.CounterVec
	queueLatency, workDuration      *prometheus.HistogramVec
	queued, storeRV                 *prometheus.GaugeVec
	processing                      *prometheus.HistogramVec
	restLatency, rateLimiterLatency *prometheus.HistogramVec
	restRequests, restRetries       *prometheus.CounterVec
	all                             []prometheus.Collector
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
	// The buckets and labels of the REST client's metrics are those of Kubernetes'
	// own components (k8s.io/component-base/metrics/prometheus/restclient).
	restBuckets := []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}
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
		restLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help: "Latency of the requests to the apiservers of every cluster, by verb.", Buckets: restBuckets}, []string{"verb"}),
		rateLimiterLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_rate_limiter_duration_seconds",
			Help: "Time the requests to the apiservers of every cluster waited for client-go's rate limiter, by verb.", Buckets: restBuckets}, []string{"verb"}),
		restRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "Requests to the apiservers, by cluster, status code (\"<error>\" for a request that got no response), method and host."}, []string{"cluster", "code", "method", "host"}),
		restRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_request_retries_total",
			Help: "Requests to the apiservers that client-go retried, by cluster, status code, verb and host."}, []string{"cluster", "code", "verb", "host"}),
	}
	c.all = []prometheus.Collector{c.depth, c.adds, c.queueLatency, c.workDuration, c.unfinished, c.longest, c.retries, c.queued, c.processing, c.storeRV,
		c.restLatency, c.rateLimiterLatency, c.restRequests, c.restRetries}
	return c
}

// restLatency, restResult and restRetry are client-go's REST client metrics. Of the
// URL they take the host at most: its path and query can name objects, and its user
// info is a credential.
type restLatency struct{ h *prometheus.HistogramVec }

func (m restLatency) Observe(_ context.Context, verb string, _ url.URL, latency time.Duration) {
	m.h.WithLabelValues(verb).Observe(latency.Seconds())
}

type restResult struct{ c *prometheus.CounterVec }

func (m restResult) Increment(ctx context.Context, code, method, host string) {
	m.c.WithLabelValues(clusterOf(ctx), code, method, host).Inc()
}

type restRetry struct{ c *prometheus.CounterVec }

func (m restRetry) IncrementRetry(ctx context.Context, code, method, host string) {
	m.c.WithLabelValues(clusterOf(ctx), code, method, host).Inc()
}

// clusterOf returns the cluster whose request it is, or "" if its context does not
// tell. client-go passes a nil context in some paths.
func clusterOf(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	name, _ := cluster.NameFromContext(ctx)
	return name
}

var (
	_ clientmetrics.LatencyMetric = restLatency{}
	_ clientmetrics.ResultMetric  = restResult{}
	_ clientmetrics.RetryMetric   = restRetry{}
)

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
