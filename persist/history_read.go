package persist

import (
	"bytes"
	"encoding/binary"
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
// does not parse is ErrCorrupt, naming it; the log's other records stay readable.
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
		var seqs func(yield func(uint64) bool)
		if q.Cluster == "" {
			seqs = func(yield func(uint64) bool) {
				c := log.Cursor()
				for k, _ := c.Seek(seqKey(start)); k != nil; k, _ = c.Next() {
					if len(k) != 8 || !yield(binary.BigEndian.Uint64(k)) {
						return
					}
				}
			}
		} else {
			seqs = resourceSeqs(index, q.Cluster, string(q.Resource), start)
		}
		scanned := 0
		for seq := range seqs {
			if len(changes) == limit {
				next = changes[len(changes)-1].Seq
				return nil
			}
			if q.MaxScan > 0 && scanned == q.MaxScan {
				next = seq - 1
				return nil
			}
			scanned++
			v := log.Get(seqKey(seq))
			if v == nil {
				continue // an index key of a record that was dropped as unreadable
			}
			r, err := parseRecord(seq, v)
			if err != nil {
				return err
			}
			if q.Resource != "" && string(r.resource) != string(q.Resource) {
				continue
			}
			c := r.change(seq, false)
			if q.FilterObject {
				c.Object = r.object
			}
			if q.Filter != nil && !q.Filter(&c) {
				continue
			}
			c.Object = nil
			if r.object != nil {
				c.Object = bytes.Clone(r.object)
			}
			changes = append(changes, c)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("reading the change log of snapshot %s: %w", s.path, err)
	}
	return changes, next, nil
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

// resourceSeqs yields, in order, the sequence numbers from start on of the records of
// cluster: of resource if it is not empty, else of each of the cluster's resources
// (and of the cluster itself), merged.
func resourceSeqs(index *bolt.Bucket, cluster, resource string, start uint64) func(yield func(uint64) bool) {
	return func(yield func(uint64) bool) {
		var prefixes [][]byte
		if resource != "" {
			prefixes = [][]byte{indexPrefix(indexResource, cluster, resource, "")}
		} else {
			// The resources of the cluster: each key past the last of the one before.
			all := appendString([]byte{indexResource}, cluster)
			c := index.Cursor()
			for k, _ := c.Seek(all); k != nil && bytes.HasPrefix(k, all); k, _ = c.Seek(append(bytes.Clone(prefixes[len(prefixes)-1]), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0)) {
				res, _, ok := readString(k[len(all):])
				if !ok {
					return
				}
				prefixes = append(prefixes, appendString(bytes.Clone(all), string(res)))
			}
		}
		type stream struct {
			c      *bolt.Cursor
			prefix []byte
			seq    uint64
			done   bool
		}
		streams := make([]*stream, len(prefixes))
		advance := func(st *stream, k []byte) {
			if k == nil || !bytes.HasPrefix(k, st.prefix) || len(k) != len(st.prefix)+8 {
				st.done = true
				return
			}
			st.seq = binary.BigEndian.Uint64(k[len(st.prefix):])
		}
		for i, p := range prefixes {
			st := &stream{c: index.Cursor(), prefix: p}
			k, _ := st.c.Seek(append(bytes.Clone(p), seqKey(start)...))
			advance(st, k)
			streams[i] = st
		}
		for {
			var min *stream
			for _, st := range streams {
				if !st.done && (min == nil || st.seq < min.seq) {
					min = st
				}
			}
			if min == nil || !yield(min.seq) {
				return
			}
			k, _ := min.c.Next()
			advance(min, k)
		}
	}
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
// the file.
func (s *Store) ObjectHistory(cluster string, resource ResourceKey, namespace, name string) ([]Change, error) {
	var changes []Change
	err := s.view(func(tx *bolt.Tx) error {
		log, index := historyBuckets(tx)
		if log == nil || index == nil {
			return nil
		}
		prefix := indexPrefix(indexObject, cluster, string(resource), objectKey(namespace, name))
		c := index.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) != len(prefix)+8 {
				continue
			}
			seq := binary.BigEndian.Uint64(k[len(prefix):])
			v := log.Get(k[len(prefix):])
			if v == nil {
				continue
			}
			ch, err := decodeChange(seq, v)
			if err != nil {
				return err
			}
			changes = append(changes, ch)
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
// not stored at rv, or rv is not an integer. Positions are resourceVersions as integers,
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
		cov := index.Get(indexPrefix(indexCoverage, string(cluster), string(resource), ""))
		if len(cov) != 16 {
			return fmt.Errorf("%w: cluster %q, resource %q: the change log does not cover it", ErrTooOld, cluster, resource)
		}
		from, fromSeq := binary.BigEndian.Uint64(cov), binary.BigEndian.Uint64(cov[8:])
		if after < from || inclusive && after == from {
			return fmt.Errorf("%w: cluster %q, resource %q: the change log holds its changes after resourceVersion %d, not from %d", ErrTooOld, cluster, resource, from, after)
		}
		// From the end back to the first record before the range.
		before := func(v uint64) bool { return v <= after }
		if inclusive {
			before = func(v uint64) bool { return v < after }
		}
		prefix := indexPrefix(indexResource, cluster, string(resource), "")
		var seqs []uint64
		c := index.Cursor()
		k, _ := c.Seek(append(bytes.Clone(prefix), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff))
		var v []byte
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8; k, v = c.Prev() {
			seq := binary.BigEndian.Uint64(k[len(prefix):])
			if seq <= fromSeq || len(v) == 8 && before(binary.BigEndian.Uint64(v)) {
				break
			}
			seqs = append(seqs, seq)
		}
		for i := len(seqs) - 1; i >= 0; i-- {
			v := log.Get(seqKey(seqs[i]))
			if v == nil {
				return fmt.Errorf("%w: cluster %q, resource %q: record %d is missing", ErrTooOld, cluster, resource, seqs[i])
			}
			ch, err := decodeChange(seqs[i], v)
			if err != nil {
				return err
			}
			changes = append(changes, ch)
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

// verifyHistory checks every record of the change log, for Verify.
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
	c := log.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 8 || v == nil {
			return fmt.Errorf("%w: change log: unexpected key %q", ErrCorrupt, k)
		}
		if _, err := parseRecord(binary.BigEndian.Uint64(k), v); err != nil {
			return err
		}
	}
	return nil
}
