package aggregate

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// EventType says what happened to an object.
type EventType string

// Event types.
const (
	// Added: the object is new to the handler.
	Added EventType = "Added"
	// Updated: the object changed; OldObject is the state the handler saw before.
	Updated EventType = "Updated"
	// Deleted: the object is gone; Object is its last known state.
	Deleted EventType = "Deleted"
)

// Event is one change of one object in one cluster, as delivered to a Handler.
//
// Object and OldObject are the objects held by the fleet's cache (for Deleted, the final
// state reported by the cluster). They are shared with every other handler and every
// reader: handlers must not mutate them. Deep-copy first if you need to change one.
type Event struct {
	// Cluster is the cluster the object lives in.
	Cluster string
	// Resource is the resource of the object.
	Resource schema.GroupVersionResource
	// Type is Added, Updated or Deleted.
	Type EventType
	// Object is the new state (Added, Updated) or the last known state (Deleted).
	Object runtime.Object
	// OldObject is the state the handler saw before an Updated event, nil otherwise. Its
	// UID can differ from Object's when the object was deleted and re-created while the
	// handler was not told (a relist, or coalescing under backlog), as with client-go.
	OldObject runtime.Object
	// InitialList is set on events of an initial list: the first list of a cluster's
	// informer, or the current state replayed to a handler added late.
	InitialList bool
	// FinalStateUnknown is set on Deleted events for deletions that were not observed as
	// a watch event: detected by a relist (client-go's DeletedFinalStateUnknown), or the
	// removal of a whole cluster or resource from the fleet. Object is then the last
	// state the fleet knew, which may be stale.
	FinalStateUnknown bool
	// Moved is set, with FinalStateUnknown, on the Deleted events of Fleet.MoveCluster:
	// the object is still in its cluster, which another fleet (another replica of a
	// sharded fleet) watches from now on.
	Moved bool
	// Encoded is, in a compact fleet (Options.Codec), Object's encoding in the fleet's
	// Codec, the very bytes the fleet holds, on Added and Updated events; nil on Deleted
	// events and in a plain fleet. With HandlerOptions.EncodedOnly, it is also set on
	// the Deleted events of objects that the fleet held encoded, and Object is nil where
	// it is the only form of the object that the fleet had at hand. A handler that keeps the objects it is given (the
	// HTTP server's watch cache) can keep the encoding instead, sharing the fleet's
	// memory rather than adding the decoded object to it. It must not be modified.
	Encoded []byte
	// OldEncoded is, for a handler with HandlerOptions.EncodedOnly, OldObject's encoding
	// in the fleet's Codec on an Updated event whose old object the fleet had only
	// encoded; OldObject is nil then. Nil otherwise. It must not be modified.
	OldEncoded []byte

	// entry and stored are, on Added and Updated events, the object's entry and what it
	// held once the change was made, the version that Object and Encoded are; nil
	// otherwise (see Held).
	entry  *entry
	stored runtime.Object
}

// Held returns the object of an Added or Updated event as the fleet held it once the
// change was made: Object and Encoded as the event has them, with the Key and the
// Version of that version of the object, for a reader that keeps what it derives from
// the event's object by Version (as it does from GetHeld) and can then reuse it on a
// later read of the same version. The fleet may hold a later version by the time the
// handler runs; the Held is still of the event's. ok is false for Deleted events, whose
// object the fleet no longer holds, and for an Event that no Fleet delivered.
func (e Event) Held() (h Held, ok bool) {
	if e.entry == nil {
		return Held{}, false
	}
	return Held{Object: e.Object, Encoded: e.Encoded, e: e.entry, stored: e.stored}, true
}

// Key returns the key of the event's object. If Object has no metadata, the key has only
// a cluster.
func (e Event) Key() Key {
	m, err := meta.Accessor(e.Object)
	if err != nil {
		return Key{Cluster: e.Cluster}
	}
	return KeyFor(e.Cluster, m)
}
