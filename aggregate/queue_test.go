package aggregate_test

import (
	"slices"
	"sync"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// metricsProvider records the queue names client-go's workqueue creates metrics for.
type metricsProvider struct {
	mu    sync.Mutex
	names []string
}

type noopMetric struct{}

func (noopMetric) Inc()            {}
func (noopMetric) Dec()            {}
func (noopMetric) Set(float64)     {}
func (noopMetric) Observe(float64) {}

func (p *metricsProvider) NewDepthMetric(name string) workqueue.GaugeMetric {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.names = append(p.names, name)
	return noopMetric{}
}
func (p *metricsProvider) NewAddsMetric(string) workqueue.CounterMetric      { return noopMetric{} }
func (p *metricsProvider) NewLatencyMetric(string) workqueue.HistogramMetric { return noopMetric{} }
func (p *metricsProvider) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return noopMetric{}
}
func (p *metricsProvider) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noopMetric{}
}
func (p *metricsProvider) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noopMetric{}
}
func (p *metricsProvider) NewRetriesMetric(string) workqueue.CounterMetric { return noopMetric{} }

// provider is set as the workqueue metrics provider once per test binary: client-go
// accepts only the first.
var (
	provider        = &metricsProvider{}
	setProviderOnce sync.Once
)

func TestQueue(t *testing.T) {
	setProviderOnce.Do(func() { workqueue.SetProvider(provider) })
	q := aggregate.NewQueue("fleet-pods")
	defer q.ShutDown()
	provider.mu.Lock()
	if !slices.Contains(provider.names, "fleet-pods") {
		t.Errorf("workqueue metrics created for %v, want fleet-pods", provider.names)
	}
	provider.mu.Unlock()

	f := aggregate.New(aggregate.Options{})
	startFleet(t, f)
	filtered := aggregate.NewQueue("")
	defer filtered.ShutDown()
	onlyDeletes := aggregate.FilteredEnqueueHandler(filtered, func(e aggregate.Event) bool { return e.Type == aggregate.Deleted })
	for _, h := range []aggregate.Handler{aggregate.EnqueueHandler(q), onlyDeletes} {
		if _, err := f.AddHandler(h, aggregate.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s := f.ClusterStore("arn:aws:eks:eu-west-1:123:cluster/prod", aggregatetest.Pods)
	mustApply(t, s, pod("p", "1"), false)
	mustApply(t, s, pod("p", "2"), false) // same key: one queue item
	mustApply(t, s, pod("q", "1"), false)
	mustDelete(t, s, pod("q", "1"), false)

	// Events reach the queue asynchronously, so p may be queued again after it was
	// processed; read until both keys were seen.
	want := []string{"arn:aws:eks:eu-west-1:123:cluster%2Fprod/default/p", "arn:aws:eks:eu-west-1:123:cluster%2Fprod/default/q"}
	seen := map[string]bool{}
	for len(seen) < len(want) {
		k, _ := q.Get()
		if !slices.Contains(want, k.String()) {
			t.Errorf("queue gave %v, want one of %v", k, want)
		}
		seen[k.String()] = true
		q.Done(k)
	}
	k, _ := filtered.Get()
	if k.Name != "q" {
		t.Errorf("filtered queue gave %v, want the deleted q", k)
	}
}
