package aggregate

import (
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// objectRef names one object of one resource. The indexer pointer stands for the
// resource: it is cheaper to hash than a GroupVersionResource.
type objectRef struct {
	ix  *Indexer
	key Key
}

// pending is one event waiting in a handler's backlog, possibly the merge of several.
type pending struct {
	ref objectRef
	typ EventType
	obj runtime.Object
	// encoded is, in a compact fleet, obj's encoding as its entry holds it (Added and
	// Updated); see Event.Encoded.
	encoded []byte
	// entry and stored are, for Added and Updated events, the object's entry and what it
	// held once the change was made (entry.obj then), the version that obj is; nil for
	// Deleted. See Event.Held.
	entry  *entry
	stored runtime.Object
	// old is the object the handler saw before this event: OldObject of an Updated
	// event, and, for Deleted, the object the store held (not delivered; obj is the final
	// state).
	old               runtime.Object
	initialList       bool
	finalStateUnknown bool
	// moved is set on the Deleted events of Fleet.MoveCluster (Event.Moved).
	moved bool

	// seq is the sequence number of the first event merged into this one; see
	// Registration.doneThrough.
	seq uint64

	// merged is set once another event was merged into this one. Then seen and present
	// describe what the handler knew of the object before this pending event: present is
	// false if the first merged event was Added, and seen is the object the handler saw
	// otherwise.
	merged  bool
	present bool
	seen    runtime.Object

	// dead marks a slot whose event was merged into an earlier one or cancelled.
	dead bool

	// ahead is the decoding of the event's objects by a helper goroutine, if one took
	// it (Registration.decodeAhead); a merge drops it and sets aheadDropped: an
	// object that changes while it waits may change again, so no helper takes it
	// again, and the handler's goroutine decodes what it comes to.
	ahead        *aheadDecode
	aheadDropped bool
}

// aheadDecode is the decoding of one pending event's objects by a helper goroutine,
// ahead of the handler. Its fields are guarded by the Registration's mu; the helper
// decodes outside it.
type aheadDecode struct {
	// obj and old are the encodings decoded: the event's obj, and old of an Updated
	// event, when the helper took it (nil for an object not held encoded).
	obj, old *encodedObject
	// decodedObj and decodedOld are their objects, set with done.
	decodedObj, decodedOld runtime.Object
	done                   bool
}

// needsDecode reports whether the handler's Event of p has objects to decode: p's
// object, or the old object of an Updated event, is held encoded.
func (p *pending) needsDecode() bool {
	if _, ok := p.obj.(*encodedObject); ok {
		return true
	}
	_, ok := p.old.(*encodedObject)
	return ok && p.typ == Updated
}

// decodedObjects returns the objects of the handler's Event of p, decoded: what a
// helper decoded ahead for p, if it did, and decoded now otherwise. old is nil unless p
// is Updated.
func (p *pending) decodedObjects() (obj, old runtime.Object) {
	ix, d := p.ref.ix, p.ahead
	if d == nil || !d.done {
		d = &aheadDecode{}
	}
	if o, ok := p.obj.(*encodedObject); ok && o == d.obj {
		obj = d.decodedObj
	} else {
		obj = ix.decoded(p.obj)
	}
	if p.typ != Updated {
		return obj, nil
	}
	if o, ok := p.old.(*encodedObject); ok && o == d.old {
		old = d.decodedOld
	} else {
		old = ix.decoded(p.old)
	}
	return obj, old
}

// event returns the Event the handler receives for p.
//
// In a compact fleet, it decodes the objects that the event carries encoded, unless
// encodedOnly (HandlerOptions.EncodedOnly) or a helper decoded them ahead (p.ahead,
// done): event is called by the handler's goroutine, outside the indexer's lock.
func (p *pending) event(encodedOnly bool) Event {
	ix := p.ref.ix
	if encodedOnly {
		e := Event{
			Cluster:           p.ref.key.Cluster,
			Resource:          ix.resource,
			Type:              p.typ,
			InitialList:       p.initialList,
			FinalStateUnknown: p.finalStateUnknown,
			Moved:             p.moved,
			Encoded:           p.encodedObj(),
			entry:             p.entry,
			stored:            p.stored,
		}
		if o, ok := p.obj.(*encodedObject); ok {
			e.Encoded = o.data // on Deleted events too
		} else {
			e.Object = p.obj
		}
		if p.typ == Updated {
			if o, ok := p.old.(*encodedObject); ok {
				e.OldEncoded = o.data
			} else {
				e.OldObject = p.old
			}
		}
		return e
	}
	obj, oldObject := p.decodedObjects()
	return Event{
		Cluster:           p.ref.key.Cluster,
		Resource:          ix.resource,
		Type:              p.typ,
		Object:            obj,
		OldObject:         oldObject,
		InitialList:       p.initialList,
		FinalStateUnknown: p.finalStateUnknown,
		Moved:             p.moved,
		Encoded:           p.encodedObj(),
		entry:             p.entry,
		stored:            p.stored,
	}
}

// encodedObj returns the encoding of p's object, if p is an Added or Updated event of a
// compact fleet.
func (p *pending) encodedObj() []byte {
	if p.typ == Deleted {
		return nil
	}
	if p.encoded != nil {
		return p.encoded
	}
	if o, ok := p.obj.(*encodedObject); ok {
		return o.data
	}
	return nil
}

// merge folds the later event e for the same object into p, so that p takes the handler
// from what it knew before p straight to the state after e. It returns false if the two
// cancel out: the handler never saw the object, and it is gone again.
//
// Writing "before" for what the handler knew before p and "after" for the state after e:
//   - absent before, present after: Added with the latest object;
//   - absent before, absent after: nothing (Added then Deleted cancel out);
//   - present before, present after: Updated from the object the handler saw to the
//     latest one. This includes Deleted then Added: like a client-go relist, the two
//     objects can then have different UIDs;
//   - present before, absent after: Deleted with the last known object and the
//     FinalStateUnknown of the last deletion.
//
// InitialList stays set only if every merged event had it.
func (p *pending) merge(e *pending) bool {
	if !p.merged {
		p.merged = true
		switch p.typ {
		case Added:
			p.present, p.seen = false, nil
		case Updated, Deleted:
			p.present, p.seen = true, p.old
		}
	}
	p.initialList = p.initialList && e.initialList
	p.finalStateUnknown, p.moved = false, false
	switch {
	case !p.present && e.typ == Deleted:
		return false
	case !p.present:
		p.typ, p.obj, p.old = Added, e.obj, nil
	case e.typ == Deleted:
		p.typ, p.obj, p.old = Deleted, e.obj, nil
		p.finalStateUnknown, p.moved = e.finalStateUnknown, e.moved
	default:
		p.typ, p.obj, p.old = Updated, e.obj, p.seen
	}
	p.encoded, p.entry, p.stored = e.encoded, e.entry, e.stored
	return true
}

// dropAhead forgets what a helper decoded ahead for items[i], whose objects are about
// to change (a merge), so that the decoded objects of a state the handler will not see
// are not kept. No helper takes it again: each event is decoded ahead at most once, and
// an object that changes faster than its handler takes its events costs no decode per
// change.
func (b *backlog) dropAhead(i int) {
	if b.items[i].ahead == nil {
		return
	}
	b.items[i].ahead, b.items[i].aheadDropped = nil, true
	b.claimed--
}

// backlog is the queue of events waiting for one handler. It is a FIFO until it holds
// more than max events; then it coalesces: an event for an object that already has a
// pending event is merged into it (see pending.merge), so the backlog holds at most one
// event per object, in the position of the object's earliest pending event. Per-object
// order is kept either way. It leaves coalescing mode when it runs empty.
//
// backlog is not safe for concurrent use; Registration.mu guards it.
type backlog struct {
	max int
	// items[head:] are the queued events, oldest first, including dead slots.
	items []pending
	head  int
	// live is the number of events that are not dead.
	live int
	// dead is the number of dead slots in items[head:].
	dead int
	// byRef maps an object to the index in items of its pending event. It is non-nil
	// exactly in coalescing mode.
	byRef map[objectRef]int

	// claimed is the number of live events that a helper took to decode ahead (ahead
	// set), which Registration.decodeAhead bounds. scan is where nextToDecode looks
	// from: no event in items[head:scan] is one to take.
	claimed int
	scan    int
}

// push appends p and returns how many events were coalesced as a result: merged into an
// earlier event, or cancelled together with it.
func (b *backlog) push(p pending) (coalesced int) {
	if b.byRef != nil {
		if i, ok := b.byRef[p.ref]; ok {
			b.dropAhead(i)
			if b.items[i].merge(&p) {
				return 1
			}
			b.kill(i)
			b.maybeCompact()
			return 2
		}
		b.byRef[p.ref] = len(b.items)
	}
	b.items = append(b.items, p)
	b.live++
	if b.byRef == nil && b.live > b.max {
		return b.startCoalescing()
	}
	return 0
}

// reserve makes room for n more events, as a handler's replay of n objects queues
// them: its array is then allocated once, rather than grown and copied a dozen times on
// the way of a warm start's first event.
func (b *backlog) reserve(n int) {
	b.items = slices.Grow(b.items, n)
}

// startCoalescing enters coalescing mode, merging the events already queued.
func (b *backlog) startCoalescing() (coalesced int) {
	b.byRef = make(map[objectRef]int, b.live)
	for i := b.head; i < len(b.items); i++ {
		p := &b.items[i]
		if p.dead {
			continue
		}
		first, ok := b.byRef[p.ref]
		if !ok {
			b.byRef[p.ref] = i
			continue
		}
		// Consume p into the earlier event for the same object.
		b.dropAhead(first)
		b.dropAhead(i)
		if b.items[first].merge(p) {
			coalesced++
		} else {
			b.kill(first)
			coalesced += 2
		}
		b.live--
		b.dead++
		*p = pending{dead: true}
	}
	b.maybeCompact()
	return coalesced
}

// kill cancels the event at items[i].
func (b *backlog) kill(i int) {
	b.dropAhead(i)
	delete(b.byRef, b.items[i].ref)
	b.items[i] = pending{dead: true}
	b.live--
	b.dead++
}

// pop removes and returns the oldest event.
func (b *backlog) pop() (pending, bool) {
	for b.head < len(b.items) {
		p := b.items[b.head]
		b.items[b.head] = pending{}
		b.head++
		if p.dead {
			b.dead--
			continue
		}
		b.live--
		if p.ahead != nil {
			b.claimed--
		}
		if b.byRef != nil {
			delete(b.byRef, p.ref)
		}
		b.maybeCompact()
		return p, true
	}
	return pending{}, false
}

// front returns the oldest event without removing it. It drops the dead slots before it.
func (b *backlog) front() (*pending, bool) {
	for b.head < len(b.items) {
		if p := &b.items[b.head]; !p.dead {
			return p, true
		}
		b.items[b.head] = pending{}
		b.head++
		b.dead--
	}
	return nil, false
}

// keptSlots is the capacity up to which a backlog that runs empty keeps its array for
// the events that come next.
const keptSlots = 256

// maybeCompact reclaims the slots before head and the dead ones, once they are the
// majority, so that memory stays proportional to the live events.
func (b *backlog) maybeCompact() {
	if b.live == 0 {
		b.byRef = nil
		if cap(b.items) > keptSlots {
			// A handler's replay of the objects it was added after, or a burst:
			// kept, the array would hold its slots' memory (about 170 bytes each, 1.5
			// MB for 9,000 objects) for as long as the handler is registered.
			b.items = nil
		} else {
			clear(b.items[b.head:])
			b.items = b.items[:0]
		}
		b.head, b.dead, b.scan = 0, 0, 0
		return
	}
	if waste := b.head + b.dead; waste < 512 || waste < b.live {
		return
	}
	n := 0
	for i := b.head; i < len(b.items); i++ {
		if b.items[i].dead {
			continue
		}
		b.items[n] = b.items[i]
		if b.byRef != nil {
			b.byRef[b.items[n].ref] = n
		}
		n++
	}
	clear(b.items[n:])
	b.items = b.items[:n]
	// The events moved: nextToDecode looks again from the first, past those taken.
	b.head, b.dead, b.scan = 0, 0, 0
}

// nextToDecode returns the oldest queued event that has objects to decode and that no
// helper took, or nil. The pointer is valid until the backlog changes.
func (b *backlog) nextToDecode() *pending {
	b.scan = max(b.scan, b.head)
	for ; b.scan < len(b.items); b.scan++ {
		if p := &b.items[b.scan]; !p.dead && p.ahead == nil && !p.aheadDropped && p.needsDecode() {
			return p
		}
	}
	return nil
}

// reset drops every queued event.
func (b *backlog) reset() {
	*b = backlog{max: b.max}
}
