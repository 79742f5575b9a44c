// Package aggregatetest helps test code that uses package aggregate: constructors of
// unstructured objects, and handlers that record events and replay them into the state a
// handler should have.
package aggregatetest

import (
	"context"
	"fmt"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// Resources used by the constructors.
var (
	Pods  = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	Nodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// Pod returns an unstructured v1 Pod. Its UID is derived from namespace and name.
func Pod(namespace, name, resourceVersion string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "Pod",
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "main", "image": "registry.k8s.io/pause:3.10"}},
		},
	}}
	setMeta(u, namespace, name, resourceVersion, labels)
	return u
}

// Node returns an unstructured v1 Node, a cluster-scoped object.
func Node(name, resourceVersion string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node"}}
	setMeta(u, "", name, resourceVersion, labels)
	return u
}

func setMeta(u *unstructured.Unstructured, namespace, name, resourceVersion string, labels map[string]string) {
	u.SetNamespace(namespace)
	u.SetName(name)
	u.SetResourceVersion(resourceVersion)
	u.SetUID(types.UID("uid-" + namespace + "-" + name))
	if len(labels) > 0 {
		u.SetLabels(labels)
	}
}

// WithRV returns a deep copy of obj with another resourceVersion.
func WithRV(obj *unstructured.Unstructured, resourceVersion string) *unstructured.Unstructured {
	c := obj.DeepCopy()
	c.SetResourceVersion(resourceVersion)
	return c
}

// RV returns the resourceVersion of obj, or "" if it has no metadata.
func RV(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

// Recorder is a Handler that records the events it receives and lets tests wait for
// them.
type Recorder struct {
	mu sync.Mutex
	// events are the recorded events; changed is closed and replaced on every event.
	events  []aggregate.Event
	changed chan struct{}
}

var _ aggregate.Handler = (*Recorder)(nil)

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{changed: make(chan struct{})}
}

// OnEvent records e.
func (r *Recorder) OnEvent(e aggregate.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	close(r.changed)
	r.changed = make(chan struct{})
}

// Events returns a copy of the recorded events, in order.
func (r *Recorder) Events() []aggregate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]aggregate.Event(nil), r.events...)
}

// WaitFor blocks until cond, called with the recorded events, returns true, or ctx is
// done.
func (r *Recorder) WaitFor(ctx context.Context, cond func([]aggregate.Event) bool) error {
	for {
		r.mu.Lock()
		ok := cond(r.events)
		changed := r.changed
		n := len(r.events)
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for events (have %d): %w", n, ctx.Err())
		}
	}
}

// WaitForLen blocks until at least n events were recorded, or ctx is done.
func (r *Recorder) WaitForLen(ctx context.Context, n int) error {
	return r.WaitFor(ctx, func(events []aggregate.Event) bool { return len(events) >= n })
}

// ObjectRef names an object of a resource in the fleet.
type ObjectRef struct {
	Resource schema.GroupVersionResource
	Key      aggregate.Key
}

// View replays events into the state a handler should see, checking that each event is
// consistent with what came before: Added only for objects the handler does not know,
// Updated and Deleted only for objects it knows, Updated with the OldObject it last saw,
// and resourceVersions that never go back (when Monotonic is set). A View is safe for
// concurrent use.
type View struct {
	// Monotonic makes Apply check that resourceVersions, compared as integers, never
	// decrease for an object, except across a Deleted.
	Monotonic bool

	mu      sync.Mutex
	objects map[ObjectRef]runtime.Object
	errs    []error
}

// Apply replays e. It records and returns an error if e is inconsistent.
func (v *View) Apply(e aggregate.Event) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.objects == nil {
		v.objects = make(map[ObjectRef]runtime.Object)
	}
	ref := ObjectRef{Resource: e.Resource, Key: e.Key()}
	cur, known := v.objects[ref]
	var err error
	switch e.Type {
	case aggregate.Added:
		if known {
			err = fmt.Errorf("Added %s/%s (rv %s) which the handler knows at rv %s", e.Resource.Resource, ref.Key, RV(e.Object), RV(cur))
		}
		v.objects[ref] = e.Object
	case aggregate.Updated:
		switch {
		case !known:
			err = fmt.Errorf("Updated %s/%s which the handler does not know", e.Resource.Resource, ref.Key)
		case RV(e.OldObject) != RV(cur):
			err = fmt.Errorf("Updated %s/%s with old rv %s, but the handler saw rv %s", e.Resource.Resource, ref.Key, RV(e.OldObject), RV(cur))
		case v.Monotonic && rvLess(RV(e.Object), RV(cur)):
			err = fmt.Errorf("Updated %s/%s back from rv %s to %s", e.Resource.Resource, ref.Key, RV(cur), RV(e.Object))
		}
		v.objects[ref] = e.Object
	case aggregate.Deleted:
		if !known {
			err = fmt.Errorf("Deleted %s/%s which the handler does not know", e.Resource.Resource, ref.Key)
		}
		delete(v.objects, ref)
	default:
		err = fmt.Errorf("event of unknown type %q for %s", e.Type, ref.Key)
	}
	if err != nil {
		v.errs = append(v.errs, err)
	}
	return err
}

// OnEvent is Apply, so that a View is a Handler.
func (v *View) OnEvent(e aggregate.Event) { _ = v.Apply(e) }

// Objects returns a copy of the current state.
func (v *View) Objects() map[ObjectRef]runtime.Object {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.objects)
}

// Errors returns the inconsistencies found so far.
func (v *View) Errors() []error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]error(nil), v.errs...)
}

func rvLess(a, b string) bool {
	var x, y int64
	if _, err := fmt.Sscan(a, &x); err != nil {
		return false
	}
	if _, err := fmt.Sscan(b, &y); err != nil {
		return false
	}
	return x < y
}

// ApplyEncoded applies obj to s as the informers of a compact fleet do: data, its
// encoding, with the partial object that files it (its kind, namespace, name, UID,
// resourceVersion and labels), so that the fleet holds it encoded only.
func ApplyEncoded(s *aggregate.ClusterStore, obj *unstructured.Unstructured, data []byte, initialList bool) error {
	partial := &unstructured.Unstructured{}
	partial.SetAPIVersion(obj.GetAPIVersion())
	partial.SetKind(obj.GetKind())
	partial.SetNamespace(obj.GetNamespace())
	partial.SetName(obj.GetName())
	partial.SetUID(obj.GetUID())
	partial.SetResourceVersion(obj.GetResourceVersion())
	partial.SetLabels(obj.GetLabels())
	return s.ApplyPartial(partial, data, initialList)
}
