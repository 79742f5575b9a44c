package persist

import (
	"bytes"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ChangesQuery selects records of the change log, for Store.Changes.
type ChangesQuery struct {
	// Since selects the records of that time or later; zero for all.
	Since time.Time
	// After selects the records after that sequence number: the next of a previous
	// page; 0 for all.
	After uint64
	// Cluster, if not empty, selects that cluster's records, read from the index of its
	// resources rather than from the whole log; Resource, with it, that resource's.
	Cluster  string
	Resource ResourceKey
	// MatchCluster, if not nil (and Cluster is empty), selects the records of the
	// clusters it admits (Filter selects among them): read from the index of their
	// resources if it admits at most half of the clusters of the log, else from the
	// whole log. Its answer for a cluster must not change during the call, and it must
	// not keep the name it is given (as Filter must not keep what it sees).
	MatchCluster func(cluster string) bool
	// Filter, if not nil, selects among the others; it sees a Change without its
	// Object (with it if FilterObject is set), which it must not keep.
	Filter func(*Change) bool
	// FilterObject has Filter see the Object of the records that hold one, for filters
	// that decode it (Change.Decode copies what it reads). Default false: decoding is
	// left to the caller, for the records selected.
	FilterObject bool
	// Limit bounds the records returned; zero or less means DefaultChangesLimit.
	Limit int
	// MaxScan, if positive, bounds the records read, selected or not, so that a filter
	// that selects few records does not read the whole log in one transaction: past
	// it, Changes returns what it found with the sequence number of the last record
	// read as the After of the next page. Default (0): no bound.
	MaxScan int
}

// DefaultChangesLimit is the default of ChangesQuery.Limit.
const DefaultChangesLimit = 500

// historyBuckets returns the change log's buckets, nil if the file has none (a file of
// an older schema, read-only).
func historyBuckets(tx *bolt.Tx) (changes, index *bolt.Bucket) {
	hist := tx.Bucket(bucketHistory)
	if hist == nil {
		return nil, nil
	}
	return hist.Bucket(bucketChanges), hist.Bucket(bucketIndex)
}

// Changes returns the records that q selects, oldest first, and the After of the next
// page, 0 if there is none. The records share no memory with the file. A record that
// does not parse is ErrCorrupt, naming it; the log's other records stay readable. So is
// an index entry, read for the records of clusters, that does not match its record or
// names one that the log lacks (checkIndexed).
//
// A record is parsed and filtered where it lies in the file: only those selected are
// copied, and Filter sees the others without an allocation (which is why it must not
// keep what it sees).
func (s *Store) Changes(q ChangesQuery) (changes []Change, next uint64, err error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultChangesLimit
	}
	err = s.view(func(tx *bolt.Tx) error {
		log, index := historyBuckets(tx)
		if log == nil || index == nil {
			return nil
		}
		start := q.After + 1
		if !q.Since.IsZero() {
			start = max(start, seqAtTime(log, q.Since.UnixNano()))
		}
		scanned := 0
		first := uint64(0) // the log's first record, read at the first that is missing
		var view Change    // what Filter sees, one for every record
		for at := range changesFrom(log, index, q, start) {
			if at.malformed {
				return fmt.Errorf("%w: change log index: malformed entry %q", ErrCorrupt, at.key)
			}
			seq, v := at.seq, at.v
			if len(changes) == limit {
				next = changes[len(changes)-1].Seq
				return nil
			}
			if q.MaxScan > 0 && scanned == q.MaxScan {
				next = seq - 1
				return nil
			}
			scanned++
			if v == nil {
				if first == 0 {
					first = firstSeq(log)
				}
				if dropped(seq, first) {
					continue // an index key of a record that was dropped as unreadable
				}
				return missingRecord(at.key, seq)
			}
			r, err := parseRecord(seq, v)
			if err != nil {
				return err
			}
			if at.key != nil {
				if err := checkIndexed(at.key, at.value, seq, &r); err != nil {
					return err
				}
			}
			if q.Resource != "" && string(r.resource) != string(q.Resource) ||
				q.Cluster == "" && q.MatchCluster != nil && !q.MatchCluster(aliasString(r.cluster)) {
				continue
			}
			if q.Filter != nil {
				view = r.view(seq)
				if q.FilterObject {
					view.Object = r.object
				}
				if !q.Filter(&view) {
					continue
				}
			}
			changes = append(changes, r.change(seq, true))
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading the change log of snapshot %s: %w", s.path, err)
	}
	return changes, next, nil
}

// located is a record that a query reads: its sequence number, its stored value (nil
// if the log lacks it), and the index entry that led to it, if any.
type located struct {
	seq        uint64
	v          []byte
	key, value []byte // the index entry; nil if read from the log in order
	// malformed is an index entry under the prefix read that is not a sequence
	// number: damage.
	malformed bool
}

// changesFrom yields, in order, the records from start on that q may select: from the
// log itself, or, for the records of one cluster or of the clusters that q.MatchCluster
// admits, from the index of their resources (which the caller checks them against).
func changesFrom(log, index *bolt.Bucket, q ChangesQuery, start uint64) func(yield func(located) bool) {
	var prefixes [][]byte
	switch {
	case q.Cluster != "" && q.Resource != "":
		prefixes = [][]byte{indexPrefix(indexResource, q.Cluster, string(q.Resource), "")}
	case q.Cluster != "":
		prefixes = resourcePrefixes(index, q.Cluster)
	case q.MatchCluster != nil:
		clusters := historyClusters(index)
		var match []string
		for _, c := range clusters {
			if q.MatchCluster(c) {
				match = append(match, c)
			}
		}
		if len(match) > len(clusters)/2 {
			// Most of the log: read in order, rather than at the places the
			// index says.
			return logFrom(log, start)
		}
		for _, c := range match {
			prefixes = append(prefixes, resourcePrefixes(index, c)...)
		}
	default:
		return logFrom(log, start)
	}
	return func(yield func(located) bool) {
		for at := range indexSeqs(index, prefixes, start) {
			if !at.malformed {
				at.v = log.Get(at.key[len(at.key)-8:])
			}
			if !yield(at) {
				return
			}
		}
	}
}

// logFrom yields the records of the log from start on, in order.
func logFrom(log *bolt.Bucket, start uint64) func(yield func(located) bool) {
	return func(yield func(located) bool) {
		c := log.Cursor()
		for k, v := c.Seek(seqKey(start)); k != nil; k, v = c.Next() {
			if len(k) != 8 || !yield(located{seq: binary.BigEndian.Uint64(k), v: v}) {
				return
			}
		}
	}
}

// seqAtTime returns the sequence number of the first record of time t or later, or one
// past the last record: times do not decrease along the sequence (historyTx.add).
func seqAtTime(log *bolt.Bucket, t int64) uint64 {
	c := log.Cursor()
	first, _ := c.First()
	last, _ := c.Last()
	if first == nil || len(first) != 8 || len(last) != 8 {
		return 1
	}
	lo, hi := binary.BigEndian.Uint64(first), binary.BigEndian.Uint64(last)+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		k, v := c.Seek(seqKey(mid))
		if k == nil {
			hi = mid
			continue
		}
		if rt, ok := recordTime(v); ok && rt < t {
			lo = binary.BigEndian.Uint64(k) + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// prefixEnd returns the first key past every key that starts with p (nil if none is:
// p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i]++; end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// historyClusters returns the clusters that the index of resources holds records of,
// in the order of their keys: one seek per cluster.
func historyClusters(index *bolt.Bucket) []string {
	var clusters []string
	c := index.Cursor()
	for k, _ := c.Seek([]byte{indexResource}); len(k) > 0 && k[0] == indexResource; {
		name, _, ok := readString(k[1:])
		if !ok {
			break
		}
		clusters = append(clusters, string(name))
		end := prefixEnd(appendString([]byte{indexResource}, string(name)))
		if end == nil {
			break
		}
		k, _ = c.Seek(end)
	}
	return clusters
}

// resourcePrefixes returns the prefixes of the index keys of each resource of cluster
// (and of the cluster itself) that the index holds: one seek per resource.
func resourcePrefixes(index *bolt.Bucket, cluster string) [][]byte {
	var prefixes [][]byte
	all := appendString([]byte{indexResource}, cluster)
	c := index.Cursor()
	for k, _ := c.Seek(all); k != nil && bytes.HasPrefix(k, all); {
		res, _, ok := readString(k[len(all):])
		if !ok {
			break
		}
		p := appendString(bytes.Clone(all), string(res))
		prefixes = append(prefixes, p)
		end := prefixEnd(p)
		if end == nil {
			break
		}
		k, _ = c.Seek(end)
	}
	return prefixes
}

// indexSeqs yields, in order, the index entries from sequence number start on under
// prefixes (each a prefix of sequence numbers in order), merged, each with its
// sequence number and without its record.
func indexSeqs(index *bolt.Bucket, prefixes [][]byte, start uint64) func(yield func(located) bool) {
	return func(yield func(located) bool) {
		streams := make(seqHeap, 0, len(prefixes))
		for _, p := range prefixes {
			st := &seqStream{c: index.Cursor(), prefix: p}
			if st.advance(st.c.Seek(append(bytes.Clone(p), seqKey(start)...))) {
				streams = append(streams, st)
			}
		}
		heap.Init(&streams)
		for len(streams) > 0 {
			st := streams[0]
			if !yield(located{seq: st.seq, key: st.key, value: st.value, malformed: st.malformed}) {
				return
			}
			if st.advance(st.c.Next()) {
				heap.Fix(&streams, 0)
			} else {
				heap.Pop(&streams)
			}
		}
	}
}

// seqStream reads the index entries under prefix.
type seqStream struct {
	c          *bolt.Cursor
	prefix     []byte
	seq        uint64
	key, value []byte // the entry at seq
	// malformed is set at an entry under the prefix that is not a sequence number,
	// given seq 0 so that it comes first, and ends the stream.
	malformed bool
}

// advance reads the entry k, v, and reports whether k is under the prefix.
func (st *seqStream) advance(k, v []byte) bool {
	if k == nil || !bytes.HasPrefix(k, st.prefix) || st.malformed {
		return false
	}
	st.key, st.value = k, v
	if len(k) != len(st.prefix)+8 {
		st.seq, st.malformed = 0, true
		return true
	}
	st.seq = binary.BigEndian.Uint64(k[len(st.prefix):])
	return true
}

// seqHeap is a heap of streams by their next sequence number (container/heap).
type seqHeap []*seqStream

func (h seqHeap) Len() int           { return len(h) }
func (h seqHeap) Less(i, j int) bool { return h[i].seq < h[j].seq }
func (h seqHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *seqHeap) Push(x any)        { *h = append(*h, x.(*seqStream)) }
func (h *seqHeap) Pop() any {
	old := *h
	st := old[len(old)-1]
	*h = old[:len(old)-1]
	return st
}

// HistoryResources returns the resources of cluster that the change log holds records
// of, sorted: each ResourceKey under which an object's history can be read
// (ObjectHistory), qualified ones included.
func (s *Store) HistoryResources(cluster string) ([]ResourceKey, error) {
	var keys []ResourceKey
	err := s.view(func(tx *bolt.Tx) error {
		_, index := historyBuckets(tx)
		if index == nil {
			return nil
		}
		all := appendString([]byte{indexResource}, cluster)
		c := index.Cursor()
		for k, _ := c.Seek(all); k != nil && bytes.HasPrefix(k, all); {
			res, _, ok := readString(k[len(all):])
			if !ok {
				return nil
			}
			if len(res) > 0 {
				keys = append(keys, ResourceKey(res))
			}
			// Past the last key of this resource.
			k, _ = c.Seek(append(appendString(bytes.Clone(all), string(res)), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the change log of snapshot %s: %w", s.path, err)
	}
	slices.Sort(keys)
	return keys, nil
}

// ObjectHistory returns the records of one object, oldest first: its changes, without
// those of its resource or cluster as a whole (see Changes). They share no memory with
// the file. A damaged record, or an index entry of the object that does not match its
// record, is ErrCorrupt, naming it.
func (s *Store) ObjectHistory(cluster string, resource ResourceKey, namespace, name string) ([]Change, error) {
	var changes []Change
	err := s.view(func(tx *bolt.Tx) error {
		log, index := historyBuckets(tx)
		if log == nil || index == nil {
			return nil
		}
		prefix := indexPrefix(indexObject, cluster, string(resource), objectKey(namespace, name))
		first := firstSeq(log)
		c := index.Cursor()
		for k, iv := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, iv = c.Next() {
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: change log index: malformed entry %q", ErrCorrupt, k)
			}
			seq := binary.BigEndian.Uint64(k[len(prefix):])
			v := log.Get(k[len(prefix):])
			if v == nil {
				if dropped(seq, first) {
					continue // an index key of a record that was dropped as unreadable
				}
				return missingRecord(k, seq)
			}
			r, err := parseRecord(seq, v)
			if err != nil {
				return err
			}
			if err := checkIndexed(k, iv, seq, &r); err != nil {
				return err
			}
			changes = append(changes, r.change(seq, true))
		}
		// The newest records are named by the object's list, in its objects bucket.
		indexed := len(changes)
		err := objectList(tx, log, cluster, string(resource), []byte(objectKey(namespace, name)), func(seq uint64, r *record) {
			changes = append(changes, r.change(seq, true))
		})
		if err != nil {
			return err
		}
		if indexed > 0 && indexed < len(changes) {
			slices.SortFunc(changes, func(a, b Change) int { return cmp.Compare(a.Seq, b.Seq) })
			for i := 1; i < len(changes); i++ {
				if changes[i].Seq == changes[i-1].Seq {
					return fmt.Errorf("%w: change log: record %d is named by an 'o' entry and by its object's list", ErrCorrupt, changes[i].Seq)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the change log of snapshot %s: %w", s.path, err)
	}
	return changes, nil
}

// ChangesAfter returns the records of (cluster, resource) after resourceVersion rv,
// oldest first: what a watch of that resource that saw it up to rv missed. It fails
// with ErrTooOld when the log does not hold every change of the resource after rv:
// older ones were dropped, the log was off or lost some, the resource was dropped or
// not stored at rv, or rv is not an integer; and with ErrCorrupt when a record it reads
// is damaged, or an index entry it follows does not match its record (never with a
// sequence that skips or repeats a change). Positions are resourceVersions as integers,
// as the server's cursors compare them; a caller must know that the cluster is the one
// its rv is of (a cluster replaced under its name starts its resourceVersions over).
func (s *Store) ChangesAfter(cluster string, resource ResourceKey, rv string) ([]Change, error) {
	return s.changesFrom(cluster, resource, rv, false)
}

// ChangesSince is ChangesAfter with the records at resourceVersion rv too: those of a
// list at rv, among which a watcher that saw part of the list finds where it stands
// (an object's resourceVersion can be the list's). It fails with ErrTooOld where
// ChangesAfter would, and also when rv is where the log's coverage starts: the log
// need not hold every record at rv then.
func (s *Store) ChangesSince(cluster string, resource ResourceKey, rv string) ([]Change, error) {
	return s.changesFrom(cluster, resource, rv, true)
}

// changesFrom returns the records of (cluster, resource) after resourceVersion rv, and
// at rv too if inclusive.
func (s *Store) changesFrom(cluster string, resource ResourceKey, rv string, inclusive bool) ([]Change, error) {
	after, ok := parseRV([]byte(rv))
	if !ok {
		return nil, fmt.Errorf("%w: cluster %q, resource %q: resourceVersion %q is not an integer", ErrTooOld, cluster, resource, rv)
	}
	var changes []Change
	err := s.view(func(tx *bolt.Tx) error {
		log, index := historyBuckets(tx)
		if log == nil || index == nil {
			return fmt.Errorf("%w: the snapshot has no change log", ErrTooOld)
		}
		covKey := indexPrefix(indexCoverage, string(cluster), string(resource), "")
		cov := index.Get(covKey)
		if cov == nil {
			return fmt.Errorf("%w: cluster %q, resource %q: the change log does not cover it", ErrTooOld, cluster, resource)
		}
		from, fromSeq, err := readCoverage(covKey, cov)
		if err != nil {
			return err
		}
		if after < from || inclusive && after == from {
			return fmt.Errorf("%w: cluster %q, resource %q: the change log holds its changes after resourceVersion %d, not from %d", ErrTooOld, cluster, resource, from, after)
		}
		// From the end back to the first record before the range.
		before := func(v uint64) bool { return v <= after }
		if inclusive {
			before = func(v uint64) bool { return v < after }
		}
		// The entries are checked against their records (checkIndexed), the one
		// before the range too: a value damaged to a resourceVersion before it would
		// end the range early.
		prefix := indexPrefix(indexResource, cluster, string(resource), "")
		var entries []located
		c := index.Cursor()
		k, _ := c.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
		var v []byte
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		var bound located // the entry before the range, if any (key not nil)
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Prev() {
			if len(k) != len(prefix)+8 {
				return fmt.Errorf("%w: change log index: malformed entry %q", ErrCorrupt, k)
			}
			seq := binary.BigEndian.Uint64(k[len(prefix):])
			if seq <= fromSeq {
				break
			}
			at := located{seq: seq, key: k, value: v}
			if len(v) == 8 && before(binary.BigEndian.Uint64(v)) {
				bound = at
				break
			}
			entries = append(entries, at)
		}
		first := firstSeq(log)
		read := func(at *located) (record, error) {
			v := log.Get(at.key[len(at.key)-8:])
			if v == nil {
				if dropped(at.seq, first) {
					return record{}, fmt.Errorf("%w: cluster %q, resource %q: record %d was dropped as unreadable", ErrTooOld, cluster, resource, at.seq)
				}
				return record{}, missingRecord(at.key, at.seq)
			}
			r, err := parseRecord(at.seq, v)
			if err != nil {
				return record{}, err
			}
			return r, checkIndexed(at.key, at.value, at.seq, &r)
		}
		if bound.key != nil {
			if _, err := read(&bound); err != nil && !errors.Is(err, ErrTooOld) {
				return err
			}
		}
		for i := len(entries) - 1; i >= 0; i-- {
			r, err := read(&entries[i])
			if err != nil {
				return err
			}
			changes = append(changes, r.change(entries[i].seq, true))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the change log of snapshot %s: %w", s.path, err)
	}
	return changes, nil
}

// checkHistoryTree checks, in a file with a change log, that its buckets are there.
// The records are read by the queries, and checked whole by Verify (verifyHistory).
func checkHistoryTree(tx *bolt.Tx) error {
	if v, err := readVersion(tx); err != nil || v < historyVersion {
		return err
	}
	hist := tx.Bucket(bucketHistory)
	if hist == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketHistory)
	}
	c := hist.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		switch {
		case bytes.Equal(k, keyBytes) && len(v) == 8:
		case (bytes.Equal(k, bucketChanges) || bytes.Equal(k, bucketIndex)) && v == nil:
		default:
			return fmt.Errorf("%w: bucket %q: unexpected key %q", ErrCorrupt, bucketHistory, k)
		}
	}
	if hist.Bucket(bucketChanges) == nil || hist.Bucket(bucketIndex) == nil {
		return fmt.Errorf("%w: bucket %q lacks %q or %q", ErrCorrupt, bucketHistory, bucketChanges, bucketIndex)
	}
	return nil
}

// verifyHistory checks every record of the change log, and its index against them
// (verifyIndex), for Verify.
func verifyHistory(tx *bolt.Tx) error {
	log, index := historyBuckets(tx)
	if log == nil {
		return nil
	}
	if index != nil {
		if err := verifyOrigins(index); err != nil {
			return err
		}
	}
	var records, objects int
	c := log.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 || v == nil {
			return fmt.Errorf("%w: change log: unexpected key %q", ErrCorrupt, k)
		}
		r, err := parseRecord(binary.BigEndian.Uint64(k), v)
		if err != nil {
			return err
		}
		records++
		if len(r.key) > 0 {
			objects++
		}
	}
	if index == nil {
		return nil
	}
	return verifyIndex(tx, log, index, records, objects)
}
