package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// The informer of one resource in one namespace (or all) of a cluster is a loop: one
// goroutine that lists, then watches, reads each event of the watch from the response
// itself (wire.Stream) and applies it to the store before it reads the next. Client-go's
// informer does the same with four goroutines per informer besides the watch's HTTP/2
// stream: the controller's, which closes its queue when it stops, the reflector's
// ListAndWatch and its resync timer, the StreamWatcher's, which decodes the events, and
// the controller's process loop, which pops them from the queue (docs/design.md, "What a
// cluster costs"). An idle cluster then costs its Set's goroutine, one loop per
// informer, and the HTTP/2 stream of each watch.
//
// The loop keeps what client-go's reflector (tools/cache/reflector.go) does with the
// server:
//   - the first list asks for resourceVersion "0" (served from the watch cache) and
//     later ones for the last resourceVersion seen, in pages of the pager's default size
//     unless the watch cache serves them whole; a list or streaming list whose
//     resourceVersion is gone (410 Gone, Expired) or not yet there ("too large resource
//     version") is made again at "", from etcd;
//   - with the client feature WatchListClient (on by default), a list is first tried as
//     a streaming list (a watch with sendInitialEvents), and a paginated LIST is made if
//     the server does not support it; a seeded informer never streams;
//   - a watch starts from the list's resourceVersion, asks for bookmarks, and lasts a
//     random 5 to 10 minutes (timeoutSeconds), so that connections are recycled; a
//     watch that ends normally (the server's timeout, EOF, a connection lost) is opened
//     again from the last resourceVersion seen, without a list; one refused
//     (connection refused, 429) is retried after a backoff; any other error, an expired
//     resourceVersion included, ends in a list after the backoff;
//   - the backoff is the reflector's: 800 ms, doubled up to 30 s, with jitter, reset
//     after 2 minutes without one;
//   - events of an unexpected type or without metadata are skipped.
//
// And what its queue (RealFIFO) and controller do with the store: a list replaces the
// store's content, with a delete of each object that the store holds and the list does
// not (cache.DeletedFinalStateUnknown, with the last known state); the transform runs on
// every object before it reaches the store; the objects of the first list are applied
// with initialList set.
//
// What is deliberately different:
//   - no resync: the Set never asked for one;
//   - a list whose transform fails for an object is not applied at all, where the
//     queue would have queued its objects up to that one;
//   - a watch request that gets no response is not retried within the request, as
//     rest.Request.Watch does a few times: the loop's backoff retries it;
//   - errors that the store returns are logged, where client-go's controller drops them;
//   - no Table objects check, no MaxInternalErrorRetryDuration (off by default), no
//     reflector metrics or traces.
type loop struct {
	// name names the informer in logs.
	name string
	lw   *listWatch
	// known is what the store holds in the loop's scope: the store, or its part in one
	// namespace (namespaceKeys).
	known     cache.KeyListerGetter
	transform cache.TransformFunc
	apply     applier
	// expectedType, if set, is the type of every object of a watch event: others are
	// skipped.
	expectedType reflect.Type
	// onError is told of each list error, and of each watch that could not be opened
	// and is not retried (Set.watchError).
	onError func(ctx context.Context, err error)
	// streaming is set if lists are tried as streaming lists first.
	streaming bool
	// delay is the backoff between attempts.
	delay wait.DelayFunc
	clock clock.Clock
	// minWatchTimeout is the shortest timeout of a watch; the longest is twice that.
	minWatchTimeout time.Duration

	// synced is closed once the first list has been applied.
	synced chan struct{}

	// mu guards lastSyncResourceVersion.
	mu sync.Mutex
	// lastSyncResourceVersion is the resourceVersion of the last list or event applied.
	lastSyncResourceVersion string

	// The fields below are used by the loop's goroutine only.

	// resourceVersionUnavailable is set when the last list or streaming list was refused
	// because its resourceVersion is gone or too large: the next one asks for "".
	resourceVersionUnavailable bool
	// paginated is set once a list at resourceVersion "0" came in pages: the watch
	// cache is off, and later lists are paginated too.
	paginated bool
	// hasSynced is set once the first list has been applied.
	hasSynced bool
}

// Defaults of a loop, those of client-go's reflector.
const (
	loopMinWatchTimeout = 5 * time.Minute
	loopBackoffInit     = 800 * time.Millisecond
	loopBackoffMax      = 30 * time.Second
	loopBackoffReset    = 2 * time.Minute
)

// loopBackoff is the backoff of client-go's reflector.
func loopBackoff(c clock.Clock) wait.DelayFunc {
	b := wait.Backoff{
		Duration: loopBackoffInit,
		Cap:      loopBackoffMax,
		Steps:    int(math.Ceil(float64(loopBackoffMax) / float64(loopBackoffInit))),
		Factor:   2,
		Jitter:   1,
	}
	return b.DelayWithReset(c, loopBackoffReset)
}

// newLoop returns the informer of lw for store, whose part in the informer's scope is
// known. objType, if not nil, is the type of the objects of every watch event.
func newLoop(name string, lw *listWatch, store Store, known cache.KeyListerGetter, transform cache.TransformFunc, objType runtime.Object, onError func(context.Context, error)) *loop {
	c := clock.RealClock{}
	l := &loop{
		name:            name,
		lw:              lw,
		known:           known,
		transform:       transform,
		apply:           newApplier(store),
		onError:         onError,
		streaming:       clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) && !lw.seeded,
		delay:           loopBackoff(c),
		clock:           c,
		minWatchTimeout: loopMinWatchTimeout,
		synced:          make(chan struct{}),
	}
	if objType != nil {
		l.expectedType = reflect.TypeOf(objType)
	}
	return l
}

// Synced returns a channel that is closed once the first list has been applied to the
// store.
func (l *loop) Synced() <-chan struct{} { return l.synced }

// LastSyncResourceVersion returns the resourceVersion of the last list or event that the
// loop applied.
func (l *loop) LastSyncResourceVersion() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSyncResourceVersion
}

func (l *loop) setLastSyncResourceVersion(rv string) {
	l.mu.Lock()
	l.lastSyncResourceVersion = rv
	l.mu.Unlock()
}

// run lists and watches until ctx is done, with the backoff between attempts.
func (l *loop) run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("informer", l.name)
	ctx = klog.NewContext(ctx, logger)
	logger.V(3).Info("Starting informer")
	defer logger.V(3).Info("Stopping informer")
	for {
		err := l.listAndWatch(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			l.onError(ctx, err)
		}
		if !l.sleep(ctx, l.delay()) {
			return
		}
	}
}

// sleep waits for d, and reports whether ctx is still going on.
func (l *loop) sleep(ctx context.Context, d time.Duration) bool {
	t := l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// listAndWatch lists, then watches until the watch fails in a way that needs a list. It
// returns the error of a list, or of a watch that could not be opened, and nil once ctx
// is done.
func (l *loop) listAndWatch(ctx context.Context) error {
	var w eventStream
	listed := false
	if l.streaming {
		var err error
		w, listed, err = l.streamingList(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			klog.FromContext(ctx).V(4).Info("Data couldn't be fetched in watchlist mode. Falling back to regular list.", "err", err)
		}
	}
	if !listed {
		if err := l.list(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	klog.FromContext(ctx).V(2).Info("Caches populated")
	return l.watch(ctx, w)
}

// list lists at relistResourceVersion, and replaces the store's content with the list.
func (l *loop) list(ctx context.Context) error {
	opts := metav1.ListOptions{ResourceVersion: l.relistResourceVersion()}
	p := pager.New(pager.SimplePageFunc(func(opts metav1.ListOptions) (runtime.Object, error) {
		return l.lw.ListWithContext(ctx, opts)
	}))
	switch {
	case l.paginated:
	case opts.ResourceVersion != "" && opts.ResourceVersion != "0":
		// From the watch cache, which serves a list at a resourceVersion whole if it is
		// not asked for pages (as the reflector does).
		p.PageSize = 0
	}
	list, paginated, err := p.ListWithAlloc(ctx, opts)
	if isExpiredError(err) || isTooLargeResourceVersionError(err) {
		l.resourceVersionUnavailable = true
		list, paginated, err = p.ListWithAlloc(ctx, metav1.ListOptions{ResourceVersion: l.relistResourceVersion()})
	}
	if err != nil {
		return fmt.Errorf("failed to list %s: %w", l.name, err)
	}
	if opts.ResourceVersion == "0" && paginated {
		l.paginated = true
	}
	l.resourceVersionUnavailable = false
	listMeta, err := meta.ListAccessor(list)
	if err != nil {
		return fmt.Errorf("unable to understand list result %T: %w", list, err)
	}
	items, err := meta.ExtractListWithAlloc(list)
	if err != nil {
		return fmt.Errorf("unable to understand list result %T: %w", list, err)
	}
	objs := make([]any, len(items))
	for i, item := range items {
		if objs[i], err = l.transform(item); err != nil {
			return fmt.Errorf("unable to sync list result: %w", err)
		}
	}
	l.replace(ctx, objs, listMeta.GetResourceVersion())
	return nil
}

// streamingList makes a streaming list, the initial events of a watch with
// sendInitialEvents, as the reflector's watchList does, and replaces the store's content
// with it. It returns whether the list was applied and, if so, the watch to go on with,
// or nil if the next watch is to be opened anew (from the list's resourceVersion). It
// fails if the server does not stream the list (or, within the bookmark timeout, does
// not end it), for a paginated list to be made instead.
func (l *loop) streamingList(ctx context.Context) (eventStream, bool, error) {
	for ctx.Err() == nil {
		timeoutSeconds := l.watchTimeoutSeconds()
		opts := metav1.ListOptions{
			ResourceVersion:      l.rewatchResourceVersion(),
			AllowWatchBookmarks:  true,
			SendInitialEvents:    ptr.To(true),
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			TimeoutSeconds:       &timeoutSeconds,
		}
		start := l.clock.Now()
		w, follow, err := l.lw.openStreamingList(ctx, opts)
		if err != nil {
			if l.retryStreamingList(ctx, err) {
				continue
			}
			return nil, false, err
		}
		objs, rv, reopen, err := l.initialEvents(ctx, w, start)
		if err != nil || objs == nil {
			w.Close()
			if ctx.Err() != nil {
				return nil, false, nil
			}
			if err == nil || l.retryStreamingList(ctx, err) {
				// The watch ended before its initial events did: try again.
				continue
			}
			return nil, false, err
		}
		l.resourceVersionUnavailable = false
		l.replace(ctx, objs, rv)
		if follow || reopen {
			w.Close()
			return nil, true, nil
		}
		return w, true, nil
	}
	return nil, false, nil
}

// retryStreamingList reports whether a streaming list that failed with err is tried
// again, after a backoff if the server refused it (connection refused, 429), or at once
// from etcd if its resourceVersion is unavailable. A refusal is reported to onError,
// as a failed list is: the Set's status shows it, and tells by it that a cluster whose
// apiserver is down cannot sync for now (Set.unreachable).
func (l *loop) retryStreamingList(ctx context.Context, err error) bool {
	if isWatchErrorRetriable(err) {
		klog.FromContext(ctx).V(2).Info("watch-list failed - backing off", "err", err)
		l.onError(ctx, err)
		return l.sleep(ctx, l.delay())
	}
	if isExpiredError(err) || isTooLargeResourceVersionError(err) {
		l.resourceVersionUnavailable = true
		return true
	}
	return false
}

// initialEvents reads the initial events of the streaming list w, opened at start, up
// to the initial-events-end bookmark, and returns their objects, transformed, in the
// order they came, and the bookmark's resourceVersion; reopen is set if w cannot be
// watched on (its timeout cancelled it as the bookmark came). It returns no objects and
// no error if the watch ended before the bookmark, unless at once (a
// cache.VeryShortWatchError).
//
// The objects lose their encodings (wire.EncodedObject), which would otherwise stay in
// memory until the list is complete; the store encodes them when it applies the list.
// For a PartialStore (lw.partial), they keep their encodings instead and lose their
// maps, but for the fields that file them (wire.EncodedObject.ToPartial).
func (l *loop) initialEvents(ctx context.Context, w *streamingWatch, start time.Time) (objs []any, resourceVersion string, reopen bool, err error) {
	index := map[string]int{}
	count := 0
	for {
		ev, err := w.Next()
		if err != nil {
			if w.expired.Load() {
				return nil, "", false, l.lw.streamingTimedOut()
			}
			if ctx.Err() != nil {
				return nil, "", false, ctx.Err()
			}
			if err := watchEndError(ctx, err); err != nil {
				return nil, "", false, err
			}
			if count == 0 && l.clock.Since(start) < time.Second {
				return nil, "", false, &cache.VeryShortWatchError{Name: l.name}
			}
			return nil, "", false, nil
		}
		if ev.Type == watch.Error {
			return nil, "", false, apierrors.FromObject(ev.Object)
		}
		ev = l.lw.initialEvent(ev)
		m, ok := l.check(ctx, ev)
		if !ok {
			continue
		}
		count++
		switch ev.Type {
		case watch.Added, watch.Modified:
			if ev.Type == watch.Added && l.lw.listed != nil {
				l.lw.listed(1)
			}
			obj, err := l.transform(ev.Object)
			if err != nil {
				utilRuntimeError(ctx, err, "Unable to add watch event object to store", ev.Object)
				continue
			}
			key, err := objectKey(obj)
			if err != nil {
				utilRuntimeError(ctx, err, "Unable to add watch event object to store", ev.Object)
				continue
			}
			if i, ok := index[key]; ok {
				objs[i] = obj
				continue
			}
			index[key] = len(objs)
			objs = append(objs, obj)
		case watch.Deleted:
			// Not sent by servers before the initial events end; left out of the list
			// if one is.
			if key, err := objectKey(ev.Object); err == nil {
				if i, ok := index[key]; ok {
					objs[i] = nil
					delete(index, key)
				}
			}
		case watch.Bookmark:
			if !isInitialEventsEnd(ev.Object) {
				continue
			}
			list := make([]any, 0, len(index))
			for _, obj := range objs {
				if obj != nil {
					list = append(list, obj)
				}
			}
			return list, m.GetResourceVersion(), !w.initialEventsEnded(), nil
		}
	}
}

// watch watches from the last resourceVersion applied, with w if it is not nil, and
// again each time the watch ends normally. It returns nil once a watch failed in a way
// that needs a list, or ctx is done, and the error of a watch that could not be opened
// for another reason than a server's refusal.
func (l *loop) watch(ctx context.Context, w eventStream) error {
	logger := klog.FromContext(ctx)
	defer func() {
		if w != nil {
			w.Close()
		}
	}()
	for ctx.Err() == nil {
		start := l.clock.Now()
		// Past the first events of a watch from "" or "0" (all Added, in no order of
		// resourceVersion), the resourceVersions of events are in order.
		propagateFromStart := true
		if w == nil {
			timeoutSeconds := l.watchTimeoutSeconds()
			opts := metav1.ListOptions{
				ResourceVersion:     l.LastSyncResourceVersion(),
				TimeoutSeconds:      &timeoutSeconds,
				AllowWatchBookmarks: true,
			}
			propagateFromStart = opts.ResourceVersion != "" && opts.ResourceVersion != "0"
			opened, err := l.lw.openWatch(ctx, opts)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				if isWatchErrorRetriable(err) {
					logger.V(4).Info("Watch failed - backing off", "err", err)
					if !l.sleep(ctx, l.delay()) {
						return nil
					}
					continue
				}
				return err
			}
			w = opened
		}
		err := l.handleWatch(ctx, w, start, propagateFromStart)
		w.Close()
		w = nil
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			switch {
			case isExpiredError(err):
				logger.V(4).Info("Watch closed", "err", err)
			case apierrors.IsTooManyRequests(err):
				logger.V(2).Info("Watch returned 429 - backing off")
				if !l.sleep(ctx, l.delay()) {
					return nil
				}
				continue
			default:
				logger.Info("Warning: watch ended with error", "err", err)
			}
			return nil
		}
	}
	return nil
}

// handleWatch applies the events of w, opened at start, until it ends, and returns nil
// if it ended normally (see watchEndError).
func (l *loop) handleWatch(ctx context.Context, w eventStream, start time.Time, propagateFromStart bool) error {
	count := 0
	pastAdded := false
	for {
		ev, err := w.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err := watchEndError(ctx, err); err != nil {
				return err
			}
			break
		}
		if ev.Type == watch.Error {
			return apierrors.FromObject(ev.Object)
		}
		if l.lw.convert != nil {
			ev = l.lw.convert(ev)
		}
		m, ok := l.check(ctx, ev)
		if !ok {
			continue
		}
		switch ev.Type {
		case watch.Added, watch.Modified, watch.Deleted:
			if ev.Type != watch.Added {
				pastAdded = true
			}
			l.applyEvent(ctx, ev)
		case watch.Bookmark:
			pastAdded = true
			if rv := m.GetResourceVersion(); rv != "" {
				// Every event before it is applied: the state is consistent at rv.
				l.apply.checkpoint(rv)
			}
		}
		if propagateFromStart || pastAdded {
			l.setLastSyncResourceVersion(m.GetResourceVersion())
		}
		count++
	}
	if count == 0 && l.clock.Since(start) < time.Second {
		return &cache.VeryShortWatchError{Name: l.name}
	}
	klog.FromContext(ctx).V(4).Info("Watch close", "totalItems", count)
	return nil
}

// applyEvent transforms the object of the watch event ev and applies it.
func (l *loop) applyEvent(ctx context.Context, ev watch.Event) {
	obj, err := l.transform(ev.Object)
	if err != nil {
		utilRuntimeError(ctx, err, "Unable to apply watch event object", ev.Object)
		return
	}
	var t cache.DeltaType
	switch ev.Type {
	case watch.Added:
		t = cache.Added
	case watch.Modified:
		t = cache.Updated
	default:
		t = cache.Deleted
	}
	if err := l.apply.apply(cache.Delta{Type: t, Object: obj}, false); err != nil {
		utilRuntimeError(ctx, err, "Unable to apply watch event object", ev.Object)
	}
}

// check reports whether the event ev goes on: its object has the expected type and
// metadata, which it returns.
func (l *loop) check(ctx context.Context, ev watch.Event) (metav1.Object, bool) {
	if l.expectedType != nil {
		if a := reflect.TypeOf(ev.Object); a != l.expectedType {
			klog.FromContext(ctx).Error(nil, "Unexpected watch event object type", "expectedType", l.expectedType, "actualType", a)
			return nil, false
		}
	}
	m, err := meta.Accessor(ev.Object)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Unable to understand watch event", "event", ev.Type)
		return nil, false
	}
	switch ev.Type {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		return m, true
	}
	klog.FromContext(ctx).Error(nil, "Unknown watch event", "event", ev.Type)
	return nil, false
}

// replace makes the store hold objs, the transformed objects of a list at
// resourceVersion, as client-go's RealFIFO.Replace and the controller's processing of
// what it queues do: first a delete, with the last known state, of each object that the
// store holds in the loop's scope and the list does not, then each object of the list in
// its order, then the checkpoint at resourceVersion. The first list's deltas are applied
// with initialList set; once they are, the loop has synced.
func (l *loop) replace(ctx context.Context, objs []any, resourceVersion string) {
	initial := !l.hasSynced
	keys := make(map[string]struct{}, len(objs))
	for _, obj := range objs {
		if key, err := objectKey(obj); err == nil {
			keys[key] = struct{}{}
		}
	}
	for _, key := range l.known.ListKeys() {
		if _, ok := keys[key]; ok {
			continue
		}
		obj, exists, err := l.known.GetByKey(key)
		if err != nil || !exists {
			klog.FromContext(ctx).Error(err, "Key does not exist in known objects store, not deleting it", "key", key)
			continue
		}
		tomb := cache.DeletedFinalStateUnknown{Key: key, Obj: obj}
		if err := l.apply.apply(cache.Delta{Type: cache.Deleted, Object: tomb}, initial); err != nil {
			klog.FromContext(ctx).Error(err, "Unable to delete an object missing from a list", "key", key)
		}
	}
	for _, obj := range objs {
		if err := l.apply.apply(cache.Delta{Type: cache.Replaced, Object: obj}, initial); err != nil {
			klog.FromContext(ctx).Error(err, "Unable to apply a listed object")
		}
	}
	l.apply.checkpoint(resourceVersion)
	l.setLastSyncResourceVersion(resourceVersion)
	if !l.hasSynced {
		l.hasSynced = true
		close(l.synced)
	}
}

// relistResourceVersion is the resourceVersion of a list (reflector's
// relistResourceVersion): "" from etcd once the last one is unavailable, "0" from the
// watch cache at first, or the last one seen, which the watch cache serves as recent.
func (l *loop) relistResourceVersion() string {
	if l.resourceVersionUnavailable {
		return ""
	}
	if rv := l.LastSyncResourceVersion(); rv != "" {
		return rv
	}
	return "0"
}

// rewatchResourceVersion is the resourceVersion of a streaming list: "" for the most
// recent, or the last one seen.
func (l *loop) rewatchResourceVersion() string {
	if l.resourceVersionUnavailable {
		return ""
	}
	return l.LastSyncResourceVersion()
}

// watchTimeoutSeconds is the timeout of a watch: random between minWatchTimeout and
// twice that, so that the watches of many informers do not end together.
func (l *loop) watchTimeoutSeconds() int64 {
	return int64(l.minWatchTimeout.Seconds() * (1 + rand.Float64()))
}

// watchEndError returns nil if err, which ended a watch, is a normal end of it (the
// server closed it, or the connection was lost: the watch resumes from where it was),
// or else the error of an event that could not be decoded, as client-go's StreamWatcher
// reports it.
func watchEndError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case errors.Is(err, io.ErrUnexpectedEOF):
		klog.FromContext(ctx).V(1).Info("Unexpected EOF during watch stream event decoding", "err", err)
		return nil
	case utilnet.IsProbableEOF(err) || utilnet.IsTimeout(err):
		klog.FromContext(ctx).V(5).Info("Unable to decode an event from the watch stream", "err", err)
		return nil
	}
	return apierrors.NewInternalError(fmt.Errorf("unable to decode an event from the watch stream: %w", err))
}

// isExpiredError reports whether err says that a resourceVersion is gone.
func isExpiredError(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// isTooLargeResourceVersionError reports whether err says that a resourceVersion is not
// there yet, as the reflector reads it from the servers that it supports.
func isTooLargeResourceVersionError(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	if !apierrors.IsTimeout(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Message == "Too large resource version" {
			return true
		}
	}
	return false
}

// isWatchErrorRetriable reports whether a watch that could not be opened with err is
// tried again after a backoff, without a list: the server is not there, or asks to wait.
func isWatchErrorRetriable(err error) bool {
	return utilnet.IsConnectionRefused(err) || apierrors.IsTooManyRequests(err)
}

// utilRuntimeError logs err about the object of a watch event.
func utilRuntimeError(ctx context.Context, err error, msg string, obj runtime.Object) {
	key, _ := objectKey(obj)
	klog.FromContext(ctx).Error(err, msg, "key", key)
}
