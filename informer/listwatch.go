package informer

import (
	"context"
	"fmt"
	"sync"
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
// with the configured selectors, through the dynamic or the metadata client.
//
// Streaming lists (a WATCH with sendInitialEvents=true) are guarded: if the server does
// not send the initial-events-end bookmark within bookmarkTimeout, the watch ends with
// an error, which makes the reflector fall back to a paginated LIST, and every later
// streaming attempt through this listWatch fails at once so that the fallback is quick.
type listWatch struct {
	list  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// streamingWatch, if set, opens the watches of streaming lists instead of watch: in
	// protobuf, whose initial events cost the server half of what JSON does. Once they
	// are over, the relay goes on with a watch from watch (see relay.follow).
	streamingWatch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// tweak applies the configured selectors.
	tweak func(*metav1.ListOptions)
	// quiet limits the logging of the requests (quietContext): their responses hold
	// values that must not be logged.
	quiet bool
	// partial makes the objects of a streaming list partial, with their encodings
	// (wire.EncodedObject.ToPartial), for a PartialStore; otherwise they lose their
	// encodings (see relay).
	partial         bool
	bookmarkTimeout time.Duration
	// convert, if set, changes each event of a watch before the reflector gets it (see
	// metadataOnly): the relay of a streaming list calls it, and the events of other
	// watches go through a watch.Filter.
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

// seed makes the first list return the objects of known at resourceVersion, without
// asking the cluster, so that the watch resumes from there. It also turns streaming
// lists off for this informer: they would bypass List.
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
// no longer holds it (the list then fails, and the reflector lists from the server).
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

// IsWatchListSemanticsUnSupported tells client-go's reflector not to use streaming
// lists for a seeded informer, whose first list must go through List.
func (lw *listWatch) IsWatchListSemanticsUnSupported() bool { return lw.seeded }

var (
	_ cache.ListerWatcher            = (*listWatch)(nil)
	_ cache.ListerWatcherWithContext = (*listWatch)(nil)
)

// With protobuf, full objects are asked for in protobuf where wire can transcode them
// (wire.WithProtobuf). With partial, dyn is a client of wire.NewPartialDynamicClients,
// and the objects are for a PartialStore (see the field). A metadata-only resource is
// read through md, or if md is nil through dyn, which must then be one of
// wire.NewPartialMetadataClients (see metadataOnly).
func newListWatch(dyn dynamic.Interface, md metadata.Interface, m Mapping, r Resource, namespace string, bookmarkTimeout time.Duration, protobuf, partial bool) *listWatch {
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
	if r.MetadataOnly && md != nil {
		var c metadata.ResourceInterface = md.Resource(m.Resource)
		if m.Namespaced {
			c = md.Resource(m.Resource).Namespace(namespace)
		}
		lw.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }
		lw.watch = c.Watch
	} else {
		var c dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Namespaced {
			c = dyn.Resource(m.Resource).Namespace(namespace)
		}
		kind := m.Kind
		lw.list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, o) }
		lw.watch = c.Watch
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
			watchProtobuf := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
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

func (lw *listWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), opts)
}

func (lw *listWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), opts)
}

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

func (lw *listWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	lw.tweak(&opts)
	streaming := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	if streaming && lw.noStreaming.Load() {
		return nil, notStreamingError()
	}
	if lw.quiet {
		ctx = quietContext(ctx)
	}
	if !streaming {
		w, err := lw.watch(ctx, opts)
		if err != nil || lw.convert == nil {
			return w, err
		}
		convert := lw.convert
		return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) { return convert(ev), true }), nil
	}
	open := lw.watch
	var follow func(resourceVersion string) (watch.Interface, error)
	if lw.streamingWatch != nil {
		open = lw.streamingWatch
		follow = func(resourceVersion string) (watch.Interface, error) {
			o := opts
			o.ResourceVersion, o.ResourceVersionMatch, o.SendInitialEvents = resourceVersion, "", nil
			return lw.watch(ctx, o)
		}
	}
	w, err := open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newRelay(w, lw.bookmarkTimeout, lw.partial, lw.convert, func() { lw.noStreaming.Store(true) }, follow, lw.listed), nil
}

// notStreamingError is an error that the reflector does not retry as a streaming list:
// it falls back to a paginated LIST.
func notStreamingError() error {
	return apierrors.NewBadRequest(ErrNoInitialEventsEnd.Error())
}

// relay passes the events of a streaming list's watch through, and ends the watch with
// an error event if the initial-events-end bookmark does not arrive within timeout.
//
// It drops the encodings of the initial events' objects (wire.EncodedObject): the reflector
// keeps those objects until the list has ended, and a whole cluster's encodings would
// stay in memory with them. The store encodes them when it commits the list. With
// partial, for a store that keeps only encodings, it keeps the encodings and drops the
// objects instead, but for the fields that file them (wire.EncodedObject.ToPartial).
//
// With convert, every event is converted first (listWatch.convert), in the relay's
// goroutine rather than in one more between the watch and the relay: each goroutine that
// an event goes through is a hand-over, and a wait for a core, per object of the list.
// For the same reason the relay hands its events on through a buffer of relayBuffer:
// it runs ahead of the reflector, and each waits for a core once per batch of events
// rather than once per event.
//
// With follow, once the initial-events-end bookmark is passed on, the relay stops the
// streaming list's watch and goes on with follow's, a watch from the bookmark's
// resourceVersion: to the reflector, one watch, which missed nothing (the server
// replays what came after that version). If follow fails, the relay ends with an error
// event, and the reflector watches again.
type relay struct {
	partial bool
	convert func(watch.Event) watch.Event
	in      watch.Interface
	follow  func(resourceVersion string) (watch.Interface, error)
	// listed, if set, counts each object of the initial events (listWatch.listed).
	listed   func(int)
	out      chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
}

// relayBuffer is how many events a relay holds that the reflector has not taken yet.
// Unbuffered, the first streaming list of a metadata-only fleet ended about 0.3 s later
// than the metadatainformer's, whose events pass between one goroutine fewer. The
// buffer holds a few hundred of one watch's objects, which the reflector keeps until the
// list has ended anyway.
const relayBuffer = 256

func newRelay(in watch.Interface, timeout time.Duration, partial bool, convert func(watch.Event) watch.Event, onTimeout func(), follow func(string) (watch.Interface, error), listed func(int)) *relay {
	g := &relay{partial: partial, convert: convert, in: in, follow: follow, listed: listed, out: make(chan watch.Event, relayBuffer), stopped: make(chan struct{})}
	go g.run(timeout, onTimeout)
	return g
}

func (g *relay) run(timeout time.Duration, onTimeout func()) {
	defer close(g.out)
	defer func() { g.in.Stop() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	// expired is nil once the initial events are over.
	expired := timer.C
	for {
		select {
		case <-g.stopped:
			return
		case <-expired:
			onTimeout()
			st := notStreamingError().(*apierrors.StatusError).ErrStatus
			st.Message = fmt.Sprintf("%s within %v", st.Message, timeout)
			select {
			case g.out <- watch.Event{Type: watch.Error, Object: &st}:
			case <-g.stopped:
			}
			return
		case ev, ok := <-g.in.ResultChan():
			if !ok {
				return
			}
			if g.convert != nil {
				ev = g.convert(ev)
			}
			if expired != nil {
				if e, ok := ev.Object.(*wire.EncodedObject); ok {
					if g.partial && ev.Type == watch.Added {
						if !e.Partial {
							ev.Object = e.ToPartial()
						}
					} else {
						ev.Object = e.Unstructured
					}
				}
				if ev.Type == watch.Bookmark && isInitialEventsEnd(ev.Object) {
					expired = nil
				} else if ev.Type == watch.Added && g.listed != nil {
					g.listed(1)
				}
			}
			select {
			case g.out <- ev:
			case <-g.stopped:
				return
			}
			if expired == nil && g.follow != nil {
				if !g.switchWatch(ev.Object) {
					return
				}
			}
		}
	}
}

// switchWatch replaces the streaming list's watch, whose initial events ended with the
// bookmark obj, with follow's, and reports whether the relay goes on.
func (g *relay) switchWatch(obj runtime.Object) bool {
	follow := g.follow
	g.follow = nil
	m, err := meta.Accessor(obj)
	var w watch.Interface
	if err == nil {
		w, err = follow(m.GetResourceVersion())
	}
	if err != nil {
		var st metav1.Status
		if se, ok := err.(apierrors.APIStatus); ok {
			st = se.Status()
		} else {
			st = apierrors.NewInternalError(err).ErrStatus
		}
		select {
		case g.out <- watch.Event{Type: watch.Error, Object: &st}:
		case <-g.stopped:
		}
		return false
	}
	g.in.Stop()
	g.in = w
	return true
}

func isInitialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	return m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

func (g *relay) Stop() {
	g.stopOnce.Do(func() { close(g.stopped) })
}

func (g *relay) ResultChan() <-chan watch.Event { return g.out }
