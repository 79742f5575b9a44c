package informer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/internal/wire"
)

// listWatch lists and watches one resource in one namespace (or all) of one cluster,
// with the configured selectors, through the dynamic or the metadata client, for a loop.
//
// Streaming lists (a WATCH with sendInitialEvents=true) are guarded: if the server does
// not send the initial-events-end bookmark within bookmarkTimeout, the watch is
// cancelled and fails (streamingTimedOut), which makes the loop fall back to a paginated
// LIST, and every later streaming attempt through this listWatch fails at once so that
// the fallback is quick.
type listWatch struct {
	list func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	// watch opens watches that the loop reads itself (wire.Watcher).
	watch func(ctx context.Context, opts metav1.ListOptions) (eventStream, error)
	// streamingWatch, if set, opens the watches of streaming lists instead of watch: in
	// protobuf, whose initial events cost the server half of what JSON does. Once they
	// are over, the loop closes it and goes on with a watch from watch, from the
	// bookmark's resourceVersion.
	streamingWatch func(ctx context.Context, opts metav1.ListOptions) (eventStream, error)
	// tweak applies the configured selectors.
	tweak func(*metav1.ListOptions)
	// quiet limits the logging of the requests (quietContext): their responses hold
	// values that must not be logged.
	quiet bool
	// partial makes the objects of a streaming list partial, with their encodings
	// (wire.EncodedObject.ToPartial), for a PartialStore; otherwise they lose their
	// encodings (see initialEvent).
	partial         bool
	bookmarkTimeout time.Duration
	// convert, if set, changes each event of a watch before the loop handles it (see
	// metadataOnly).
	convert func(watch.Event) watch.Event
	// noStreaming is set once a streaming list failed to end.
	noStreaming atomic.Bool
	// listed, if set, is told how many objects each list (not the seed) and each
	// streaming list's initial events brought (Set.listed).
	listed func(n int)

	// seeded is set by seed; then the first list is seedList, without a request.
	seeded   bool
	seedList func() (runtime.Object, error)
	// seedUsed is set once the seed list was handed out.
	seedUsed atomic.Bool
}

// eventStream is an open watch whose events the loop reads itself, from its own
// goroutine: a wire.Stream, or a fake in tests.
type eventStream interface {
	// Next blocks until the next event and returns it, or the error that ended the
	// watch: io.EOF if the server ended it, the context's error once the context that
	// opened it is done.
	Next() (watch.Event, error)
	// Close ends the watch. It may be called more than once, and from any goroutine.
	Close()
}

var _ eventStream = (*wire.Stream)(nil)

// streamOf returns s as an eventStream, or a nil one with err: never a nil *wire.Stream
// in a non-nil eventStream.
func streamOf(s *wire.Stream, err error) (eventStream, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// seed makes the first list return the objects of known at resourceVersion, without
// asking the cluster, so that the watch resumes from there. It also turns streaming
// lists off for this informer (newLoop): they would bypass the list.
//
// A known that tells resourceVersions without decoding (versionGetter: a compact fleet's
// store, whose objects are encodings) gets a list of seedObjects, each only the key and
// resourceVersion of a stored object, which the informer's transform turns into a no-op
// update (the store keeps what it holds): a warm start decodes no object.
func (lw *listWatch) seed(known cache.KeyListerGetter, m Mapping, metadataOnly bool, resourceVersion string) {
	lw.seeded = true
	if vg, ok := versionGetterOf(known); ok {
		lw.seedList = func() (runtime.Object, error) {
			keys := known.ListKeys()
			list := &metav1.List{Items: make([]runtime.RawExtension, 0, len(keys))}
			list.ResourceVersion = resourceVersion
			apiVersion, kind := m.Kind.GroupVersion().String(), m.Kind.Kind
			for _, k := range keys {
				rv, ok := vg.ResourceVersionByKey(k)
				if !ok {
					continue
				}
				ns, name, err := cache.SplitMetaNamespaceKey(k)
				if err != nil {
					continue
				}
				md := map[string]any{"name": name, "resourceVersion": rv}
				if ns != "" {
					md["namespace"] = ns
				}
				o := &seedObject{Unstructured: &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": md}}, metadataOnly: metadataOnly}
				list.Items = append(list.Items, runtime.RawExtension{Object: o})
			}
			return list, nil
		}
		return
	}
	lw.seedList = func() (runtime.Object, error) {
		keys := known.ListKeys()
		if metadataOnly {
			list := &metav1.PartialObjectMetadataList{Items: make([]metav1.PartialObjectMetadata, 0, len(keys))}
			list.ResourceVersion = resourceVersion
			for _, k := range keys {
				if obj, ok, _ := known.GetByKey(k); ok {
					if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
						list.Items = append(list.Items, *p)
					}
				}
			}
			return list, nil
		}
		list := &unstructured.UnstructuredList{Object: map[string]interface{}{}, Items: make([]unstructured.Unstructured, 0, len(keys))}
		list.SetAPIVersion(m.Kind.GroupVersion().String())
		list.SetKind(m.Kind.Kind + "List")
		list.SetResourceVersion(resourceVersion)
		for _, k := range keys {
			if obj, ok, _ := known.GetByKey(k); ok {
				if u, ok := obj.(*unstructured.Unstructured); ok {
					list.Items = append(list.Items, *u)
				}
			}
		}
		return list, nil
	}
}

// versionGetter is a store that tells the resourceVersion of an object without decoding
// it (aggregate.ClusterStore).
type versionGetter interface {
	ResourceVersionByKey(key string) (rv string, exists bool)
}

// versionGetterOf returns the versionGetter of known, or of the store whose keys in one
// namespace known lists.
func versionGetterOf(known cache.KeyListerGetter) (versionGetter, bool) {
	if n, ok := known.(namespaceKeys); ok {
		known = n.store
	}
	vg, ok := known.(versionGetter)
	return vg, ok
}

// seedObject is an object of a seeded list over a versionGetter: only the key and
// resourceVersion of an object that the store holds. The informer's transform turns it
// into what the store takes as a no-op update, or into the stored object if the store
// no longer holds it at that resourceVersion; it never reaches the store.
type seedObject struct {
	*unstructured.Unstructured
	metadataOnly bool
}

var _ runtime.Object = (*seedObject)(nil)

// seeded returns what the transform of a seeded list's object hands on: an object with
// its key and resourceVersion, which the store keeps its own object for, while known
// holds it at that resourceVersion; otherwise the stored object, or an error if known
// no longer holds it (the list then fails, and the loop lists from the server).
func (o *seedObject) seeded(known cache.KeyListerGetter) (any, error) {
	key, err := cache.MetaNamespaceKeyFunc(o.Unstructured)
	if err != nil {
		return nil, err
	}
	if vg, ok := versionGetterOf(known); ok {
		if rv, ok := vg.ResourceVersionByKey(key); ok && rv == o.GetResourceVersion() {
			if o.metadataOnly {
				return &metav1.PartialObjectMetadata{
					TypeMeta:   metav1.TypeMeta{APIVersion: o.GetAPIVersion(), Kind: o.GetKind()},
					ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: o.GetName(), ResourceVersion: o.GetResourceVersion()},
				}, nil
			}
			return o.Unstructured, nil
		}
	}
	if stored, ok, _ := known.GetByKey(key); ok {
		return stored, nil
	}
	return nil, fmt.Errorf("the seeded object %s left the store before its list was applied", key)
}

// With protobuf, full objects are asked for in protobuf where wire can transcode them
// (wire.WithProtobuf). With partial, dyn is a client of wire.NewPartialDynamicClients,
// and the objects are for a PartialStore (see the field). A metadata-only resource is
// read and watched through md, or if md is nil through dyn, which must then be one of
// wire.NewPartialMetadataClients (see metadataOnly).
func newListWatch(dyn *wire.Client, md *metadataClient, m Mapping, r Resource, namespace string, bookmarkTimeout time.Duration, protobuf, partial bool) *listWatch {
	lw := &listWatch{
		partial:         partial,
		bookmarkTimeout: bookmarkTimeout,
		tweak: func(o *metav1.ListOptions) {
			if r.LabelSelector != "" {
				o.LabelSelector = r.LabelSelector
			}
			if r.FieldSelector != "" {
				o.FieldSelector = r.FieldSelector
			}
		},
	}
	if !m.Namespaced {
		namespace = metav1.NamespaceAll
	}
	if r.MetadataOnly && md != nil {
		var c metadata.ResourceInterface = md.Resource(m.Resource)
		if namespace != metav1.NamespaceAll {
			c = md.Resource(m.Resource).Namespace(namespace)
		}
		lw.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }
		lw.watch = func(ctx context.Context, o metav1.ListOptions) (eventStream, error) {
			return streamOf(md.watcher.Watch(ctx, m.Resource, namespace, o))
		}
		return lw
	}
	var c dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if namespace != metav1.NamespaceAll {
		c = dyn.Resource(m.Resource).Namespace(namespace)
	}
	kind := m.Kind
	lw.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }
	lw.watch = func(ctx context.Context, o metav1.ListOptions) (eventStream, error) {
		return streamOf(dyn.Watcher.Watch(ctx, m.Resource, namespace, o))
	}
	if r.MetadataOnly {
		kind = wire.MetadataKind
		lw.metadataOnly()
	}
	if protobuf {
		// Lists, those streamed included, in protobuf: the server spends about half
		// the CPU that JSON costs it.
		list, open := lw.list, lw.watch
		lw.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return list(wire.WithProtobuf(ctx, kind), o)
		}
		watchProtobuf := func(ctx context.Context, o metav1.ListOptions) (eventStream, error) {
			return open(wire.WithProtobuf(ctx, kind), o)
		}
		if partial {
			// Every watch in protobuf: the partial clients write a protobuf event's
			// object as CBOR directly, at no more CPU than a JSON event, and about a
			// third of it when managedFields are dropped (wire's
			// BenchmarkWatchEventPartial).
			lw.watch = watchProtobuf
		} else {
			// The watch events after a streaming list in JSON: a transcoded event
			// costs this process more than a JSON one (about 45 µs for a pod), and
			// the server encodes each event once for all its watchers.
			lw.streamingWatch = watchProtobuf
		}
	}
	return lw
}

// metadataOnly makes lw, whose list and watch are those of wire.NewPartialMetadataClients,
// hand out what client-go's metadata client does: a list as a
// *metav1.PartialObjectMetadataList, and the objects of watch events that come whole
// (bookmarks, or the objects of a server that ignores the kind asked for) as
// *metav1.PartialObjectMetadata. The partial objects of watch events, whose encodings
// decode to PartialObjectMetadata (wire.MetadataFormat), go on as they are.
func (lw *listWatch) metadataOnly() {
	list := lw.list
	lw.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		obj, err := list(ctx, o)
		if err != nil {
			return nil, err
		}
		ul, ok := obj.(*unstructured.UnstructuredList)
		if !ok {
			return nil, fmt.Errorf("a list of metadata is a %T", obj)
		}
		out := &metav1.PartialObjectMetadataList{
			ListMeta: metav1.ListMeta{ResourceVersion: ul.GetResourceVersion(), Continue: ul.GetContinue(), RemainingItemCount: ul.GetRemainingItemCount()},
			Items:    make([]metav1.PartialObjectMetadata, len(ul.Items)),
		}
		for i := range ul.Items {
			out.Items[i] = *asPartialObjectMetadata(&ul.Items[i])
		}
		return out, nil
	}
	lw.convert = func(ev watch.Event) watch.Event {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok {
			ev.Object = asPartialObjectMetadata(u)
		}
		return ev
	}
}

// asPartialObjectMetadata returns the metadata of u as client-go's metadata client
// returns it: a *metav1.PartialObjectMetadata without TypeMeta.
func asPartialObjectMetadata(u *unstructured.Unstructured) *metav1.PartialObjectMetadata {
	p := meta.AsPartialObjectMetadata(u)
	p.TypeMeta = metav1.TypeMeta{}
	return p
}

// ListWithContext lists, the seed the first time if lw is seeded.
func (lw *listWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if lw.seeded && lw.seedUsed.CompareAndSwap(false, true) {
		return lw.seedList()
	}
	lw.tweak(&opts)
	if lw.quiet {
		ctx = quietContext(ctx)
	}
	list, err := lw.list(ctx, opts)
	if err == nil && lw.listed != nil {
		lw.listed(meta.LenList(list))
	}
	return list, err
}

// openWatch opens a watch with opts, which the loop reads itself.
func (lw *listWatch) openWatch(ctx context.Context, opts metav1.ListOptions) (eventStream, error) {
	lw.tweak(&opts)
	if lw.quiet {
		ctx = quietContext(ctx)
	}
	return lw.watch(ctx, opts)
}

// openStreamingList opens the watch of a streaming list with opts, with streamingWatch
// if set: follow then says that the loop goes on with another watch once the initial
// events are over. It fails at once once a streaming list timed out.
func (lw *listWatch) openStreamingList(ctx context.Context, opts metav1.ListOptions) (w *streamingWatch, follow bool, err error) {
	lw.tweak(&opts)
	if lw.noStreaming.Load() {
		return nil, false, notStreamingError()
	}
	if lw.quiet {
		ctx = quietContext(ctx)
	}
	open := lw.watch
	if lw.streamingWatch != nil {
		open, follow = lw.streamingWatch, true
	}
	ctx, cancel := context.WithCancel(ctx)
	w = &streamingWatch{cancel: cancel}
	// The bookmark timeout cancels the watch's request, which ends a Next that waits
	// on it: no goroutine waits for the timeout.
	w.timer = time.AfterFunc(lw.bookmarkTimeout, func() {
		w.expired.Store(true)
		cancel()
	})
	if w.eventStream, err = open(ctx, opts); err != nil {
		w.timer.Stop()
		cancel()
		if w.expired.Load() {
			return nil, false, lw.streamingTimedOut()
		}
		return nil, false, err
	}
	return w, follow, nil
}

// streamingTimedOut turns streaming lists off for lw, and returns the error of one whose
// initial events did not end within the bookmark timeout: one that the loop does not
// retry as a streaming list.
func (lw *listWatch) streamingTimedOut() error {
	lw.noStreaming.Store(true)
	st := notStreamingError().(*apierrors.StatusError).ErrStatus
	st.Message = fmt.Sprintf("%s within %v", st.Message, lw.bookmarkTimeout)
	return &apierrors.StatusError{ErrStatus: st}
}

// initialEvent returns ev, an event of a streaming list before the end of its initial
// events, converted (lw.convert), and its object without its encoding, or for a
// PartialStore an Added one partial.
func (lw *listWatch) initialEvent(ev watch.Event) watch.Event {
	if lw.convert != nil {
		ev = lw.convert(ev)
	}
	if e, ok := ev.Object.(*wire.EncodedObject); ok {
		if lw.partial && ev.Type == watch.Added {
			if !e.Partial {
				ev.Object = e.ToPartial()
			}
		} else {
			ev.Object = e.Unstructured
		}
	}
	return ev
}

// notStreamingError is an error that the loop does not retry as a streaming list: it
// falls back to a paginated LIST.
func notStreamingError() error {
	return apierrors.NewBadRequest(ErrNoInitialEventsEnd.Error())
}

// streamingWatch is the watch of a streaming list, cancelled unless its initial events
// end within the bookmark timeout.
type streamingWatch struct {
	eventStream
	timer  *time.Timer
	cancel context.CancelFunc
	// expired is set once the timeout has cancelled the watch.
	expired atomic.Bool
}

// initialEventsEnded stops the timeout, and reports whether the watch goes on: false if
// the timeout has cancelled it already.
func (w *streamingWatch) initialEventsEnded() bool {
	return w.timer.Stop()
}

func (w *streamingWatch) Close() {
	w.timer.Stop()
	w.cancel()
	w.eventStream.Close()
}

func isInitialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}
