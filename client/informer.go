package client

import (
	"fmt"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// InformerOptions configure NewInformer.
type InformerOptions struct {
	// ListerWatcher lists and watches the objects, of fleetwatch's API (see ConfigFor).
	// Required.
	ListerWatcher cache.ListerWatcher
	// ObjectType is an object of the type that the ListerWatcher returns. Required.
	ObjectType runtime.Object
	// Handler, if set, is told of every change, as a client-go informer's handlers are:
	// from one goroutine, in order, after the store has been changed.
	Handler cache.ResourceEventHandler
	// ResyncPeriod, if set, redelivers every object as an update this often.
	ResyncPeriod time.Duration
	// Indexers are indexes of the store besides ClusterIndex, which it always has.
	Indexers cache.Indexers
	// Transform, if set, changes each object before it is stored.
	Transform cache.TransformFunc
}

// NewInformer returns a store of the objects that opts.ListerWatcher lists and watches,
// keyed by KeyFunc and indexed by cluster (ClusterIndex), and the controller that fills
// it once run: client-go's informer machinery (a DeltaFIFO and its controller), with
// the store keyed so that the objects of every cluster are kept apart. The store is the
// controller's to write: callers only read it, and must not modify what it returns.
// Its List and ByIndex return every object once, of every cluster; GetByKey takes a
// key of KeyFunc.
func NewInformer(opts InformerOptions) (cache.Indexer, cache.Controller) {
	indexers := cache.Indexers{ClusterIndex: ClusterIndexFunc}
	maps.Copy(indexers, opts.Indexers)
	store := cache.NewIndexer(KeyFunc, indexers)
	fifo := cache.NewDeltaFIFOWithOptions(cache.DeltaFIFOOptions{
		KeyFunction:           KeyFunc,
		KnownObjects:          store,
		EmitDeltaTypeReplaced: true,
		Transformer:           opts.Transform,
	})
	handler := opts.Handler
	if handler == nil {
		handler = cache.ResourceEventHandlerFuncs{}
	}
	return store, cache.New(&cache.Config{
		Queue:            fifo,
		ListerWatcher:    opts.ListerWatcher,
		ObjectType:       opts.ObjectType,
		FullResyncPeriod: opts.ResyncPeriod,
		Process: func(obj any, isInInitialList bool) error {
			deltas, ok := obj.(cache.Deltas)
			if !ok {
				return fmt.Errorf("processing %T: not Deltas", obj)
			}
			return apply(store, handler, deltas, isInInitialList)
		},
	})
}

// apply applies deltas to store, oldest first, and tells handler, as client-go's
// informers do.
func apply(store cache.Store, handler cache.ResourceEventHandler, deltas cache.Deltas, isInInitialList bool) error {
	for _, d := range deltas {
		switch d.Type {
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated:
			old, exists, err := store.Get(d.Object)
			if err != nil {
				return err
			}
			if exists {
				if err := store.Update(d.Object); err != nil {
					return err
				}
				handler.OnUpdate(old, d.Object)
				continue
			}
			if err := store.Add(d.Object); err != nil {
				return err
			}
			handler.OnAdd(d.Object, isInInitialList)
		case cache.Deleted:
			if err := store.Delete(d.Object); err != nil {
				return err
			}
			handler.OnDelete(d.Object)
		}
	}
	return nil
}
