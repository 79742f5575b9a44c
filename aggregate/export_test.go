package aggregate

import (
	"encoding/binary"
	"errors"
	"os"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
)

// With FLEETWATCH_TEST_CACHE_ENCODING=compact, every fleet of this package's tests is
// compact, with copyCodec, and decodes its handlers' events ahead: the tests then check
// the contracts of a compact fleet too.
func init() {
	if os.Getenv("FLEETWATCH_TEST_CACHE_ENCODING") == "compact" {
		defaultCodec = &copyCodec{}
		defaultDecodeAhead = 64
	}
}

// copyCodec is a Codec that keeps a deep copy of each encoded object and decodes to a
// fresh deep copy of it: exact for every type, which the tests' typed and metadata
// objects need, and it finds a decoded object shared where a fresh one is due.
type copyCodec struct {
	next    atomic.Uint64
	objects sync.Map // uint64 → runtime.Object
}

func (c *copyCodec) Encode(obj runtime.Object) ([]byte, error) {
	id := c.next.Add(1)
	c.objects.Store(id, obj.DeepCopyObject())
	return binary.BigEndian.AppendUint64(nil, id), nil
}

func (c *copyCodec) Decode(data []byte) (runtime.Object, error) {
	if len(data) != 8 {
		return nil, errors.New("copyCodec: not an id")
	}
	obj, ok := c.objects.Load(binary.BigEndian.Uint64(data))
	if !ok {
		return nil, errors.New("copyCodec: unknown id")
	}
	return obj.(runtime.Object).DeepCopyObject(), nil
}

// Compact reports whether f is a compact fleet.
func Compact(f *Fleet) bool { return f.codec != nil }

// LabelSets returns the number of label sets that the entries of a compact ix hold.
func LabelSets(ix *Indexer) int {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	return len(ix.labelSets)
}

// HotObjects returns the number of entries of ix that hold a decoded object.
func HotObjects(ix *Indexer) int {
	ix.lock.RLock()
	defer ix.lock.RUnlock()
	n := 0
	for e := range ix.items.all() {
		if e.hot.Load() != nil {
			n++
		}
	}
	return n
}

// SetDecodeHelpers sets the helper goroutines that decode ahead of each handler
// registered from now on, in a compact fleet whose Options.DecodeAhead is not negative,
// whatever GOMAXPROCS is.
func SetDecodeHelpers(f *Fleet, n int) {
	f.lock.Lock()
	defer f.lock.Unlock()
	if f.codec != nil && f.decodeAhead > 0 {
		f.decodeHelpers = n
	}
	if f.codec != nil {
		f.replayHelpers = n
	}
}

// NoDecodeAhead makes f decode nothing ahead but replays, whatever its Options and
// FLEETWATCH_TEST_CACHE_ENCODING say.
func NoDecodeAhead(f *Fleet) {
	f.lock.Lock()
	defer f.lock.Unlock()
	f.decodeAhead, f.decodeHelpers = 0, 0
}

// ReplayDecodeAhead is the bound on the events decoded ahead of a handler's replay.
const ReplayDecodeAhead = replayDecodeAhead

// DecodeAhead returns how many of r's queued events were taken to decode ahead, and how
// many helpers run and do not wait for the handler.
func DecodeAhead(r *Registration) (claimed, busyHelpers int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.queue.claimed, r.helpers - r.helpersWaiting
}

// AheadTaken returns the events taken to decode ahead of f's handlers.
func AheadTaken(f *Fleet) int { return int(f.aheadTaken.Load()) }

// LabelsKept reports whether ix keeps its label index: once a read needed it.
func LabelsKept(ix *Indexer) bool { return ix.labelsKept.Load() }

// DecodesShared reports whether ix decodes with a SharingDecoder.
func DecodesShared(ix *Indexer) bool { return ix.sharing != nil }
