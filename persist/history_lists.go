package persist

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// An object's list: the sequence numbers of the object's newest records, which a
// Writer's commit keeps beside the object, in its resource's objects bucket, under the
// object's key and a 0 byte (listKey), rather than as 'o' entries of the index. The
// commit writes the object's leaf anyway; an 'o' entry was a leaf of the index at a
// random place per change, read, grown by a key and written again with its branches,
// and again when the retention deleted it: most of what the log added to a commit's
// cost (BenchmarkHistoryWriteCost). A list holds at most maxListSeqs; beyond them the
// oldest go to 'o' entries (adjacent keys of one object, a leaf for many), and so does
// the whole list when its object is deleted or vanishes, or its resource or cluster is
// dropped, replaced or imported over: an 'o' entry stands for a record of an object
// that the list cannot reach. Every record of an object is named by one of the two,
// never by both; ObjectHistory reads both, and Verify checks both against the records.
//
// A list is sealed as an object is, its path the object's and "history", and holds the
// sequence numbers, 8 bytes each big-endian, increasing. Those of records that the
// retention dropped stay until the list is written again (the reads skip them, as
// they skip the 'o' entries of records dropped as unreadable). The log's sequence
// numbers never start over in a file (clearHistory keeps the sequence), so a list that
// outlived its log, as one does when the log is switched off, names records before
// the next log's first one, and reads as empty.
//
// An object's key never holds a 0 byte (Kubernetes names cannot): Load, ExportCluster
// and Inspect skip the keys that end with one. A build before lists takes a file that
// holds one for a damaged one, as it does the object formats it does not know: it moves
// the file aside and starts cold.

// maxListSeqs is the most sequence numbers a list holds; listKeep is how many it keeps
// when it overflows, the others going to 'o' entries: an object changed without pause
// writes its 'o' entries maxListSeqs-listKeep at a time, adjacent in the index.
const (
	maxListSeqs = 32
	listKeep    = 16
)

// listKey returns the key of the list of the object key.
func listKey(key []byte) []byte {
	return append(append(make([]byte, 0, len(key)+1), key...), 0)
}

// isListKey reports whether k, a key of an objects bucket, is a list's.
func isListKey(k []byte) bool { return len(k) > 0 && k[len(k)-1] == 0 }

// validObjectKey reports whether key can be an object's in an objects bucket: a key
// with a 0 byte could be taken for a list's.
func validObjectKey(key string) bool { return len(key) > 0 && strings.IndexByte(key, 0) < 0 }

// errObjectKey is the error of an object key with a 0 byte, which no Kubernetes object
// has.
func errObjectKey(key string) error {
	return fmt.Errorf("%w: object key %q holds a 0 byte", ErrInvalid, key)
}

// listSum starts the seal of a list of an object of resource.
func listSum(cluster, resource string) uint32 {
	return pathSum(cluster, resource, string(bucketObjects), string(bucketHistory))
}

// encodeList returns the sealed value of the list lk of (cluster, resource).
func encodeList(cluster, resource string, lk []byte, seqs []uint64) []byte {
	v := make([]byte, sealSize, sealSize+8*len(seqs))
	for _, s := range seqs {
		v = binary.BigEndian.AppendUint64(v, s)
	}
	sealHead(v, listSum(cluster, resource), lk)
	return v
}

// readList appends the sequence numbers of the list lk of (cluster, resource), its
// stored value v, to dst. An error wraps ErrCorrupt and names the list; v is not kept.
func readList(dst []uint64, cluster, resource string, lk, v []byte) ([]uint64, error) {
	value, err := unsealBytes(listSum(cluster, resource), string(lk), v)
	if err != nil {
		return dst, fmt.Errorf("change log: cluster %q, resource %q, the list of %q: %w", cluster, resource, lk[:len(lk)-1], err)
	}
	if len(value)%8 != 0 {
		return dst, fmt.Errorf("%w: change log: cluster %q, resource %q, the list of %q: %d bytes", ErrCorrupt, cluster, resource, lk[:len(lk)-1], len(value))
	}
	var last uint64
	for i := 0; i < len(value); i += 8 {
		s := binary.BigEndian.Uint64(value[i:])
		if s <= last {
			return dst, fmt.Errorf("%w: change log: cluster %q, resource %q, the list of %q: its sequence numbers do not increase", ErrCorrupt, cluster, resource, lk[:len(lk)-1])
		}
		last = s
		dst = append(dst, s)
	}
	return dst, nil
}

// listedBy reports whether record r is of the object key of (cluster, resource): one
// that the object's list may name.
func listedBy(r *record, cluster, resource string, key []byte) bool {
	return string(r.cluster) == cluster && string(r.resource) == resource && bytes.Equal(r.key, key)
}

// listed is a record of an object, staged by flush for its object's list.
type listed struct {
	cluster, resource, key string
	seq                    uint64
}

// updateLists adds the records of objects that flush appended to their objects'
// lists, after the commit's writes to the objects: the list of an object that is no
// longer stored goes to 'o' entries with them, and a list that overflows sends its
// oldest there. Records of an object whose resource bucket is missing (which apply
// does not leave) get 'o' entries. A list that does not pass its seal is written anew: the records it named
// are lost to ObjectHistory, as they would be with their 'o' entries lost, and Verify
// reports them.
func (h *historyTx) updateLists(recs []listed) error {
	slices.SortFunc(recs, func(a, b listed) int {
		return cmp.Or(strings.Compare(a.cluster, b.cluster), strings.Compare(a.resource, b.resource),
			strings.Compare(a.key, b.key), cmp.Compare(a.seq, b.seq))
	})
	first := firstSeq(h.changes)
	var objects *bolt.Bucket
	var seqs []uint64
	for i := 0; i < len(recs); {
		r := recs[i]
		j := i + 1
		for j < len(recs) && recs[j].cluster == r.cluster && recs[j].resource == r.resource && recs[j].key == r.key {
			j++
		}
		if i == 0 || recs[i-1].cluster != r.cluster || recs[i-1].resource != r.resource {
			objects = getBucket(h.tx, bucketClusters, []byte(r.cluster), bucketResources, []byte(r.resource), bucketObjects)
		}
		seqs = seqs[:0]
		key := bytesOf(r.key)
		lk := listKey(key)
		if objects != nil {
			if v := objects.Get(lk); v != nil {
				old, err := readList(nil, r.cluster, r.resource, lk, v)
				if err == nil {
					for _, s := range old {
						if !dropped(s, first) {
							seqs = append(seqs, s)
						}
					}
				}
			}
		}
		for _, n := range recs[i:j] {
			seqs = append(seqs, n.seq)
		}
		switch {
		case objects == nil:
			h.spill(r.cluster, r.resource, r.key, seqs)
		case objects.Get(key) == nil:
			h.spill(r.cluster, r.resource, r.key, seqs)
			if err := objects.Delete(lk); err != nil {
				return err
			}
		default:
			if len(seqs) > maxListSeqs {
				h.spill(r.cluster, r.resource, r.key, seqs[:len(seqs)-listKeep])
				seqs = seqs[len(seqs)-listKeep:]
			}
			if err := objects.Put(lk, encodeList(r.cluster, r.resource, lk, seqs)); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

// spill stages the 'o' entries of seqs, records of the object key of (cluster,
// resource), for flush to put in the index.
func (h *historyTx) spill(cluster, resource, key string, seqs []uint64) {
	prefix := indexPrefix(indexObject, cluster, resource, key)
	for _, s := range seqs {
		h.keys = append(h.keys, op{key: binary.BigEndian.AppendUint64(slices.Clip(prefix), s), value: []byte{}})
	}
}

// spillObjects stages the 'o' entries of every list of the objects bucket of
// (cluster, resource), before the bucket is deleted: its resource's or its cluster's
// drop, replacement or import. The lists' records of objects stay reachable by
// ObjectHistory through them. A list that does not pass its seal is left out, as
// updateLists leaves it.
func (h *historyTx) spillObjects(cluster, resource string, objects *bolt.Bucket) {
	first := firstSeq(h.changes)
	var seqs []uint64
	_ = eachList(objects, func(lk, v []byte) error {
		var err error
		if seqs, err = readList(seqs[:0], cluster, resource, lk, v); err == nil {
			seqs = slices.DeleteFunc(seqs, func(s uint64) bool { return dropped(s, first) })
			h.spill(cluster, resource, string(lk[:len(lk)-1]), seqs)
		}
		return nil
	})
}

// eachList calls fn with the key and the stored value of each list of objects, an
// objects bucket (nil: none), in key order, until fn fails.
func eachList(objects *bolt.Bucket, fn func(lk, v []byte) error) error {
	if objects == nil {
		return nil
	}
	c := objects.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if isListKey(k) && v != nil {
			if err := fn(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// spillCluster is spillObjects for each resource of the cluster bucket cb.
func (h *historyTx) spillCluster(cluster string, cb *bolt.Bucket) error {
	if cb == nil {
		return nil
	}
	return forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
		h.spillObjects(cluster, resource, rb.Bucket(bucketObjects))
		return nil
	})
}

// objectList calls fn with each record that the list of the object key of (cluster,
// resource) names, as listRecords does, in the transaction of log.
func objectList(tx *bolt.Tx, log *bolt.Bucket, cluster, resource string, key []byte, fn func(seq uint64, r *record)) error {
	objects := getBucket(tx, bucketClusters, []byte(cluster), bucketResources, []byte(resource), bucketObjects)
	if objects == nil {
		return nil
	}
	lk := listKey(key)
	v := objects.Get(lk)
	if v == nil {
		return nil
	}
	return listRecords(log, cluster, resource, lk, v, fn)
}

// listRecords calls fn with each record that the list lk of (cluster, resource), its
// stored value v, names, checked against the list (listedBy). Those that the retention
// dropped are skipped; a list that does not pass its seal, a missing record of the
// log's range, or one of another object, is ErrCorrupt.
func listRecords(log *bolt.Bucket, cluster, resource string, lk, v []byte, fn func(seq uint64, r *record)) error {
	seqs, err := readList(nil, cluster, resource, lk, v)
	if err != nil {
		return err
	}
	key := lk[:len(lk)-1]
	first := firstSeq(log)
	for _, seq := range seqs {
		rv := log.Get(seqKey(seq))
		if rv == nil {
			if dropped(seq, first) {
				continue
			}
			return fmt.Errorf("%w: change log: cluster %q, resource %q, the list of %q names record %d, which the log lacks", ErrCorrupt, cluster, resource, key, seq)
		}
		r, err := parseRecord(seq, rv)
		if err != nil {
			return err
		}
		if !listedBy(&r, cluster, resource, key) {
			return fmt.Errorf("%w: change log: cluster %q, resource %q, the list of %q names record %d (cluster %q, resource %q, object %q)", ErrCorrupt, cluster, resource, key, seq, r.cluster, r.resource, r.key)
		}
		fn(seq, &r)
	}
	return nil
}
