package mcprovider

import (
	"fmt"
	"runtime"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// clusterInformer is the informer of one resource of one cluster, read as one target.
// Each handler added to it is a handler of the fleet limited to the cluster and the
// resource (aggregate.HandlerOptions.Cluster): it first gets the cluster's current
// objects as adds, then every change, each event's objects converted into the target;
// the new object of a typed target's add or update is read through the Provider's memo
// of typed objects, which keeps a copy of its own (handlerAdapter.object). Like
// client-go's, handlers must not modify the objects they get, which for an
// unstructured or metadata-only target are the cached objects themselves. A deletion
// the fleet did not watch (a relist, or the cluster leaving the fleet) comes as a
// toolscache.DeletedFinalStateUnknown. There is no resync: resync periods are ignored.
type clusterInformer struct {
	c        *clusterCache
	target   target
	resource schema.GroupVersionResource
}

var _ cache.Informer = (*clusterInformer)(nil)

func (i *clusterInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (i *clusterInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, _ time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, toolscache.HandlerOptions{})
}

func (i *clusterInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	logger := klog.Background()
	if opts.Logger != nil {
		logger = *opts.Logger
	}
	a := &handlerAdapter{h: h, target: i.target, logger: logger.WithValues("cluster", i.c.name, "resource", i.resource)}
	reg, err := i.c.p.fleet.AddHandler(a, aggregate.HandlerOptions{
		Name:      fmt.Sprintf("mcprovider %s %s as %s", i.c.name, i.resource.GroupResource(), i.target.gvk.Kind),
		Resources: []schema.GroupVersionResource{i.resource},
		Cluster:   i.c.name,
		// A typed handler of a compact fleet decodes each object from its encoding
		// straight into the Go type (target.fromEncoded): the fleet need not decode it
		// into a map first, which nothing would read.
		EncodedOnly: i.target.form == formTyped && i.target.decoder != nil,
	})
	if err != nil {
		return nil, err
	}
	r := &registration{reg: reg, synced: i.c.member.synced, done: make(chan struct{})}
	go r.wait(i.c.member.ctx.Done())
	return r, nil
}

func (i *clusterInformer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*registration)
	if !ok {
		return fmt.Errorf("mcprovider: %T is not a registration of this informer", handle)
	}
	r.reg.Remove()
	return nil
}

// AddIndexers fails: index the fleet with IndexField, which every cluster reads.
func (i *clusterInformer) AddIndexers(toolscache.Indexers) error {
	return fmt.Errorf("add indexers to the informer of %s in cluster %s: %w; use IndexField, which indexes the fleet", i.resource.GroupResource(), i.c.name, ErrShared)
}

// HasSynced reports whether the cluster's objects are complete in the fleet.
func (i *clusterInformer) HasSynced() bool { return isClosed(i.c.member.synced) }

func (i *clusterInformer) HasSyncedChecker() toolscache.DoneChecker {
	return doneChecker{name: fmt.Sprintf("%s in cluster %s", i.resource, i.c.name), done: i.c.member.synced}
}

// IsStopped reports whether the cluster has left the fleet.
func (i *clusterInformer) IsStopped() bool { return i.c.member.ctx.Err() != nil }

// registration is a handler added to a clusterInformer. It has synced once the cluster
// has, and the handler has been delivered the objects the cluster had when it was added.
type registration struct {
	reg    *aggregate.Registration
	synced <-chan struct{}
	// done is closed once both have happened.
	done chan struct{}
}

var _ toolscache.ResourceEventHandlerRegistration = (*registration)(nil)

// wait closes done once the registration has synced; it gives up when stop is closed.
func (r *registration) wait(stop <-chan struct{}) {
	for _, c := range []<-chan struct{}{r.synced, r.reg.Replayed()} {
		select {
		case <-c:
		case <-stop:
			return
		}
	}
	close(r.done)
}

func (r *registration) HasSynced() bool { return isClosed(r.done) }

func (r *registration) HasSyncedChecker() toolscache.DoneChecker {
	return doneChecker{name: r.reg.Name(), done: r.done}
}

type doneChecker struct {
	name string
	done <-chan struct{}
}

func (d doneChecker) Name() string          { return d.name }
func (d doneChecker) Done() <-chan struct{} { return d.done }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// handlerAdapter hands the fleet's events to a client-go handler.
type handlerAdapter struct {
	h      toolscache.ResourceEventHandler
	target target
	logger klog.Logger
}

var _ aggregate.Handler = (*handlerAdapter)(nil)

func (a *handlerAdapter) OnEvent(e aggregate.Event) {
	// With EncodedOnly, Object may be nil and Encoded the object: its key is known
	// once it is converted.
	obj, err := a.object(e)
	if err != nil {
		a.logger.Error(err, "Dropping an event whose object does not convert", "key", e.Key().String(), "type", e.Type)
		return
	}
	switch e.Type {
	case aggregate.Added:
		a.h.OnAdd(obj, e.InitialList)
		if e.InitialList {
			// A replay converts thousands of objects without blocking: yield, so that
			// what the handler woke (a controller's queue and workers) runs now rather
			// than when the replay has ended.
			runtime.Gosched()
		}
	case aggregate.Updated:
		old, err := a.target.convertEncoded(e.OldObject, e.OldEncoded, true)
		if err != nil {
			a.logger.Error(err, "Dropping an event whose old object does not convert", "key", e.Cluster+"/"+toolscache.MetaObjectToName(obj).String())
			return
		}
		a.h.OnUpdate(old, obj)
	case aggregate.Deleted:
		if e.FinalStateUnknown {
			a.h.OnDelete(toolscache.DeletedFinalStateUnknown{Key: toolscache.MetaObjectToName(obj).String(), Obj: obj})
			return
		}
		a.h.OnDelete(obj)
	}
}

// object returns the object of e as an object of the target. A typed one of an Added or
// Updated event is read as a Get of the version that the event delivers reads it
// (target.read): a copy of what the Provider's memo keeps for that version, else a
// conversion, which the memo keeps a copy of. The Get of that object that a reconcile
// of the event makes then copies what the memo keeps rather than converting it again,
// and so does every other handler of the kind.
func (a *handlerAdapter) object(e aggregate.Event) (client.Object, error) {
	h, ok := e.Held()
	if !ok || a.target.form != formTyped {
		return a.target.convertEncoded(e.Object, e.Encoded, true)
	}
	obj, err := a.target.newObject()
	if err != nil {
		return nil, err
	}
	return obj, a.target.read(h, obj)
}
