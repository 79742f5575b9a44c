package persist

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/s2"
	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A Codec with Compress and Dictionary compresses the encodings of a resource with a
// dictionary of that resource (Codec.ForResource), where S2 alone cannot use what the
// objects of one kind share (keys, label keys, images, owner references): the byte
// formatDict, the dictionary's id (8 bytes, big-endian), then the encoding as one S2
// block made with that dictionary. A build before formatDict takes such an object for
// damage (ErrCorrupt: the snapshot is moved aside and the fleet starts cold).
//
// A resource's dictionary is made by the process from the first encodings it compresses
// of the resource (dictSample bytes of them; they are stored formatCompressed), or taken
// from the snapshot that a warm start loads, and it does not change for the process
// after that. Every dictionary the process made or loaded is in a process-wide registry
// by id, so that every reader of an encoding (Codec.Decode, Codec.Expand, a load, an
// import) finds it without being handed it. The snapshot stores the dictionaries that
// its values use in the bucket "dictionaries", written in the transaction of the first
// value that uses one and read before any value on load; ExportCluster ships them with
// the values (a 'd' frame). A dictionary's id is the start of the SHA-256 of what is
// stored of it (dictValue), so a damaged one is told apart: it, and a value whose
// dictionary is missing, is ErrCorrupt.
const formatDict byte = 6

const (
	// dictIDSize is the length of a dictionary's id in a formatDict encoding.
	dictIDSize = 8
	// dictSample is how many bytes of a resource's first encodings its dictionary is
	// made of: as much as S2 can refer back to.
	dictSample = s2.MaxDictSize
)

// dictionary is an S2 dictionary of one resource. It is immutable.
type dictionary struct {
	id uint64
	// resource is the ResourceKey of the resource (without a qualifier) it was made for.
	resource string
	// value is what the snapshot stores of it (dictValue), in memory of its own: never
	// a view of a file's memory map.
	value []byte
	s2    *s2.Dict
	// head is what precedes the S2 block of an encoding in formatDict: the format and
	// the id.
	head []byte
}

// dictValue returns what the snapshot stores of a dictionary: the length of the
// resource's key (uvarint), the key, then the dictionary as s2.Dict.Bytes writes it.
func dictValue(resource string, d *s2.Dict) []byte {
	v := binary.AppendUvarint(nil, uint64(len(resource)))
	v = append(v, resource...)
	return append(v, d.Bytes()...)
}

// dictIDOf returns the id of a dictionary stored as value.
func dictIDOf(value []byte) uint64 {
	sum := sha256.Sum256(value)
	return binary.BigEndian.Uint64(sum[:dictIDSize])
}

// parseDictionary returns the dictionary stored as value under id, in memory of its
// own, so that value may be a view of a memory map. An error wraps ErrCorrupt.
func parseDictionary(id uint64, value []byte) (*dictionary, error) {
	if got := dictIDOf(value); got != id {
		return nil, fmt.Errorf("%w: dictionary %016x: its bytes hash to %016x", ErrCorrupt, id, got)
	}
	n, k := binary.Uvarint(value)
	if k <= 0 || n > uint64(len(value)-k) {
		return nil, fmt.Errorf("%w: dictionary %016x: a bad resource length", ErrCorrupt, id)
	}
	// s2.NewDict keeps its argument if it has room for 16 more bytes: give it memory of
	// its own, never the map's.
	own := make([]byte, len(value), len(value)+16)
	copy(own, value)
	resource := string(own[k : k+int(n)])
	d := s2.NewDict(own[k+int(n):])
	if d == nil {
		return nil, fmt.Errorf("%w: dictionary %016x of %q is not an S2 dictionary", ErrCorrupt, id, resource)
	}
	return &dictionary{id: id, resource: resource, value: own, s2: d, head: binary.BigEndian.AppendUint64([]byte{formatDict}, id)}, nil
}

// dictionaries is the process-wide registry of dictionaries. Reads take no lock: byID is
// replaced, never modified.
var dictionaries struct {
	// mu guards the writes of byID and byResource.
	mu sync.Mutex
	// byID holds every dictionary that the process made or loaded: at most one per
	// resource made here, and those of the snapshots and states it read (one per
	// resource each, the same ones when a warm start reuses its snapshot's).
	byID atomic.Pointer[map[uint64]*dictionary]
	// byResource holds the dictionary, or the sample it is being made of, of each
	// resource that a Codec compressed with a dictionary or that a load brought one of.
	byResource map[string]*resourceDict
}

// lookupDictionary returns the dictionary of id, nil if the process has none.
func lookupDictionary(id uint64) *dictionary {
	m := dictionaries.byID.Load()
	if m == nil {
		return nil
	}
	return (*m)[id]
}

// registerDictionary adds d to the registry, and makes it its resource's dictionary if
// the resource has none yet (a warm start reuses its snapshot's dictionaries). It
// returns the dictionary registered under d's id, d or an equal one.
func registerDictionary(d *dictionary) *dictionary {
	dictionaries.mu.Lock()
	defer dictionaries.mu.Unlock()
	if have := lookupDictionary(d.id); have != nil {
		return have
	}
	old := dictionaries.byID.Load()
	m := make(map[uint64]*dictionary, 1)
	if old != nil {
		for id, have := range *old {
			m[id] = have
		}
	}
	m[d.id] = d
	dictionaries.byID.Store(&m)
	rd := resourceDictLocked(d.resource)
	rd.mu.Lock()
	if rd.dict.Load() == nil {
		rd.dict.Store(d)
		rd.sample = nil
	}
	rd.mu.Unlock()
	return d
}

// resourceDictLocked returns the state of resource's dictionary, creating it.
// dictionaries.mu is held.
func resourceDictLocked(resource string) *resourceDict {
	if dictionaries.byResource == nil {
		dictionaries.byResource = make(map[string]*resourceDict)
	}
	rd := dictionaries.byResource[resource]
	if rd == nil {
		rd = &resourceDict{resource: resource}
		dictionaries.byResource[resource] = rd
	}
	return rd
}

// resourceDictFor returns the state of resource's dictionary.
func resourceDictFor(resource string) *resourceDict {
	dictionaries.mu.Lock()
	defer dictionaries.mu.Unlock()
	return resourceDictLocked(resource)
}

// resetDictionaries forgets every dictionary, as a new process would: for tests, whose
// Codecs made with ForResource before it keep the states they had.
func resetDictionaries() {
	dictionaries.mu.Lock()
	defer dictionaries.mu.Unlock()
	dictionaries.byID.Store(nil)
	dictionaries.byResource = nil
}

// resourceDict is the dictionary of one resource, once made, and until then the sample
// it is made of.
type resourceDict struct {
	resource string
	dict     atomic.Pointer[dictionary]
	// mu guards sample and the making of dict.
	mu sync.Mutex
	// sample is the first encodings compressed without a dictionary, up to dictSample
	// bytes; nil once dict is set, or being made (sampled).
	sample []byte
	// sampled is set once the sample is full: the dictionary is made of it, and no other.
	sampled bool
}

// observe adds enc, an uncompressed encoding of the resource, to the sample, and makes
// the dictionary once the sample is full.
func (rd *resourceDict) observe(enc []byte) {
	rd.mu.Lock()
	if rd.sampled || rd.dict.Load() != nil {
		rd.mu.Unlock()
		return
	}
	if rd.sample == nil {
		rd.sample = make([]byte, 0, dictSample+len(enc))
	}
	rd.sample = append(rd.sample, enc...)
	if len(rd.sample) < dictSample {
		rd.mu.Unlock()
		return
	}
	// The sample's last bytes are the ones S2 refers back to least far.
	made := s2.MakeDict(rd.sample, enc[:min(len(enc), 16)])
	rd.sample, rd.sampled = nil, true
	rd.mu.Unlock()
	if made == nil {
		return
	}
	value := dictValue(rd.resource, made)
	d, err := parseDictionary(dictIDOf(value), value)
	if err != nil {
		return // never: value is made above
	}
	// Another dictionary of the resource may have been registered meanwhile (a load):
	// registerDictionary keeps the first.
	registerDictionary(d)
}

// compress returns enc in formatDict, with the resource's dictionary, if it has one and
// that is at least an eighth shorter; else, without a dictionary, what compress
// returns. It does not modify enc.
func (rd *resourceDict) compress(enc []byte) []byte {
	if len(enc) < minCompressed || enc[0] == formatCompressed || enc[0] == formatDict {
		return enc
	}
	d := rd.dict.Load()
	if d == nil {
		rd.observe(enc)
		return compress(enc)
	}
	return compressBlock(enc, d.head, d.s2.Encode)
}

// dictIDOfEncoding returns the id of the dictionary of enc, an encoding in formatDict.
func dictIDOfEncoding(enc []byte) (uint64, error) {
	if len(enc) < 1+dictIDSize {
		return 0, fmt.Errorf("%w: a compressed object too short for its dictionary's id", ErrCorrupt)
	}
	return binary.BigEndian.Uint64(enc[1:]), nil
}

// ForResource returns the Codec of gvr's objects (aggregate.ResourceCodec): with
// Compress and Dictionary, a Codec that compresses with gvr's dictionary once the
// process has one, and whose Decode and Expand read the encodings of every resource;
// otherwise nil, for c itself. The result is an interface only so that Codec implements
// aggregate.ResourceCodec, which this package cannot import. A type that embeds a Codec
// with Dictionary to wrap it must define ForResource too: the promoted one returns a
// bare Codec.
func (c Codec) ForResource(gvr schema.GroupVersionResource) interface {
	Encode(obj runtime.Object) ([]byte, error)
	Decode(data []byte) (runtime.Object, error)
} {
	if !c.Compress || !c.Dictionary {
		return nil
	}
	return c.forResource(gvr)
}

// forResource is ForResource as a Codec.
func (c Codec) forResource(gvr schema.GroupVersionResource) Codec {
	if !c.Compress || !c.Dictionary {
		return c
	}
	c.dict = resourceDictFor(string(ResourceKeyFor(gvr)))
	return c
}

// isCompressed reports whether b is the first byte of a compressed encoding.
func isCompressed(b byte) bool { return b == formatCompressed || b == formatDict }

// dictionaryOf returns the dictionary of enc, an encoding in formatDict. An error wraps
// ErrCorrupt.
func dictionaryOf(enc []byte) (*dictionary, error) {
	id, err := dictIDOfEncoding(enc)
	if err != nil {
		return nil, err
	}
	d := lookupDictionary(id)
	if d == nil {
		return nil, fmt.Errorf("%w: compressed object: dictionary %016x is not known", ErrCorrupt, id)
	}
	return d, nil
}

// dictKey is the key of the dictionary id in the dictionaries bucket.
func dictKey(id uint64) []byte { return binary.BigEndian.AppendUint64(nil, id) }

// putDictionaries stores the dictionaries of dicts that the file does not have yet, in
// the transaction that stores the first values that use them.
func putDictionaries(tx *bolt.Tx, dicts map[uint64]*dictionary) error {
	if len(dicts) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(bucketDictionaries)
	if err != nil {
		return err
	}
	for id, d := range dicts {
		if k := dictKey(id); b.Get(k) == nil {
			if err := b.Put(k, d.value); err != nil {
				return err
			}
		}
	}
	return nil
}

// readDictionaries checks the dictionaries that the file stores, registers them, and
// returns their ids: the values of the file may use those and no others. A damaged
// one is ErrCorrupt.
func readDictionaries(tx *bolt.Tx) (map[uint64]bool, error) {
	ids := make(map[uint64]bool)
	b := tx.Bucket(bucketDictionaries)
	if b == nil {
		return ids, nil
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil || len(k) != dictIDSize {
			return nil, fmt.Errorf("%w: bucket %q: unexpected key %q", ErrCorrupt, bucketDictionaries, k)
		}
		d, err := parseDictionary(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return nil, err
		}
		registerDictionary(d)
		ids[d.id] = true
	}
	return ids, nil
}
