package aggregate

import "k8s.io/client-go/util/workqueue"

// NewQueue returns a client-go rate-limited work queue of keys, with the default
// controller rate limiter and the given name, so that client-go's workqueue metrics
// report it under that name once a metrics provider is set
// (workqueue.SetProvider).
//
// A Key does not name a resource: use one queue per resource, as controllers do.
func NewQueue(name string) workqueue.TypedRateLimitingInterface[Key] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[Key](),
		workqueue.TypedRateLimitingQueueConfig[Key]{Name: name},
	)
}

// Enqueuer is the part of a work queue the enqueue handlers use. Every
// workqueue.TypedInterface[Key] is one.
type Enqueuer interface {
	Add(item Key)
}

// EnqueueHandler returns a Handler that adds the key of every event to q. Register it
// with HandlerOptions.Resources set to the one resource q is for.
func EnqueueHandler(q Enqueuer) Handler {
	return HandlerFunc(func(e Event) { q.Add(e.Key()) })
}

// FilteredEnqueueHandler is EnqueueHandler for the events for which filter returns true.
func FilteredEnqueueHandler(q Enqueuer, filter func(Event) bool) Handler {
	return HandlerFunc(func(e Event) {
		if filter(e) {
			q.Add(e.Key())
		}
	})
}
