package persist

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The change log's index is not sealed: its 'o' and 'r' entries are checked against the
// records they lead to, which are. A read that an entry leads to a record checks that
// the record is the entry's (checkIndexed): damage in the index fails the read with
// ErrCorrupt, as a damaged record does, rather than answering with another resource's
// records or placing a resume at the wrong record. An entry lost to damage is not seen
// by the reads, which do not scan the log; Verify (verifyIndex) checks the index whole
// against the log.

// checkIndexed checks that the record r at seq is the one that the index entry k, v
// names: of its cluster, resource and, for an 'o' entry, object key; for an 'r' entry,
// with the resourceVersion that its value holds. An error wraps ErrCorrupt and names
// the entry. It does not allocate.
func checkIndexed(k, v []byte, seq uint64, r *record) error {
	if !indexedBy(k, v, seq, r) {
		return fmt.Errorf("%w: change log index: entry %q does not match record %d (cluster %q, resource %q, object %q, resourceVersion %q)", ErrCorrupt, k, seq, r.cluster, r.resource, r.key, r.rv)
	}
	return nil
}

// indexedBy reports whether the index entry k, v is one that record r at seq has.
func indexedBy(k, v []byte, seq uint64, r *record) bool {
	if len(k) < 1+8 || binary.BigEndian.Uint64(k[len(k)-8:]) != seq {
		return false
	}
	fields := [...][]byte{r.cluster, r.resource, r.key}
	n := 2
	switch k[0] {
	case indexObject:
		if len(r.key) == 0 || len(v) != 0 {
			return false
		}
		n = 3
	case indexResource:
		if rv, ok := parseRV(r.rv); ok {
			if len(v) != 8 || binary.BigEndian.Uint64(v) != rv {
				return false
			}
		} else if len(v) != 0 {
			return false
		}
	default:
		return false
	}
	rest := k[1 : len(k)-8]
	for _, want := range fields[:n] {
		got, after, ok := readString(rest)
		if !ok || !bytes.Equal(got, want) {
			return false
		}
		rest = after
	}
	return len(rest) == 0
}

// missingRecord is the error of an index entry k whose record seq the log lacks, though
// the log holds records from first on: the retention drops the oldest records only (and
// leaves the index entries of one that does not parse, which lie before first).
func missingRecord(k []byte, seq uint64) error {
	return fmt.Errorf("%w: change log index: entry %q names record %d, which the log lacks", ErrCorrupt, k, seq)
}

// firstSeq returns the sequence number of the log's first record, 0 if it has none:
// the index entries before it are those of records that the retention dropped as
// unreadable, without their entries (historyTx.prune).
func firstSeq(log *bolt.Bucket) uint64 {
	k, _ := log.Cursor().First()
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// dropped reports whether the record seq, which the log lacks, was dropped by the
// retention: it is before the log's first record, first (0 if the log is empty).
func dropped(seq, first uint64) bool { return first == 0 || seq < first }

// verifyIndex checks the index of the change log against its records, for Verify,
// after verifyHistory checked every record (records of them, objects of an object):
// each 'o' and 'r' entry, and each sequence number of an object's list, names a record
// of the log that has it (checkIndexed, objectList), or one before the log's first
// record (dropped as unreadable, or by the retention for a list), and each record has
// its 'r' entry and, if it is of an object, its 'o' entry or a place in its object's
// list; each 'c' entry is a coverage. An entry that matches is its record's only one
// of its kind, so the counts of those that match say whether one is missing (or one is
// named twice); then the records are read again to name it.
func verifyIndex(tx *bolt.Tx, log, index *bolt.Bucket, records, objects int) error {
	first := firstSeq(log)
	var matchedR, matchedO int
	// The objects' lists name the records of objects that have no 'o' entry.
	err := forEachCluster(tx, func(cluster string, cb *bolt.Bucket, _ Identity) error {
		return forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
			return eachList(rb.Bucket(bucketObjects), func(lk, v []byte) error {
				return listRecords(log, cluster, resource, lk, v, func(uint64, *record) { matchedO++ })
			})
		})
	})
	if err != nil {
		return err
	}
	ic := index.Cursor()
	for k, v := ic.First(); k != nil; k, v = ic.Next() {
		switch k[0] {
		case indexOrigins:
			continue // verifyOrigins
		case indexCoverage:
			if _, rest, ok := readCoverageKey(k); !ok || len(rest) != 0 {
				return fmt.Errorf("%w: change log index: malformed coverage %q", ErrCorrupt, k)
			}
			if _, _, err := readCoverage(k, v); err != nil {
				return err
			}
			continue
		case indexObject, indexResource:
		default:
			return fmt.Errorf("%w: change log index: unexpected key %q", ErrCorrupt, k)
		}
		if !wellFormed(k) {
			return fmt.Errorf("%w: change log index: malformed entry %q", ErrCorrupt, k)
		}
		seq := binary.BigEndian.Uint64(k[len(k)-8:])
		rv := log.Get(k[len(k)-8:])
		if rv == nil {
			if dropped(seq, first) {
				continue
			}
			return missingRecord(k, seq)
		}
		r, err := parseRecord(seq, rv)
		if err != nil {
			return err
		}
		if err := checkIndexed(k, v, seq, &r); err != nil {
			return err
		}
		if k[0] == indexObject {
			matchedO++
		} else {
			matchedR++
		}
	}
	if matchedR == records && matchedO == objects {
		return nil
	}
	c := log.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		r, _ := parseRecord(binary.BigEndian.Uint64(k), v)
		want := [][]byte{append(indexPrefix(indexResource, string(r.cluster), string(r.resource), ""), k...)}
		if len(r.key) > 0 {
			want = append(want, append(indexPrefix(indexObject, string(r.cluster), string(r.resource), string(r.key)), k...))
		}
		for i, w := range want {
			if got, _ := ic.Seek(w); !bytes.Equal(got, w) && (i == 0 || !inList(tx, log, &r, binary.BigEndian.Uint64(k))) {
				return fmt.Errorf("%w: change log index: record %d lacks its entry %q (or, for an object, a place in its list)", ErrCorrupt, binary.BigEndian.Uint64(k), w)
			}
		}
	}
	return fmt.Errorf("%w: change log index: %d of %d records have their 'r' entry, %d of %d their 'o' entry or a place in their object's list", ErrCorrupt, matchedR, records, matchedO, objects)
}

// wellFormed reports whether k is an 'o' or 'r' entry as flush writes them: a
// cluster, a resource, an object key for 'o', and a sequence number.
func wellFormed(k []byte) bool {
	if len(k) < 1+8 {
		return false
	}
	rest := k[1 : len(k)-8]
	n := 2
	if k[0] == indexObject {
		n = 3
	}
	for i := range n {
		s, after, ok := readString(rest)
		if !ok || len(s) == 0 && (i == 0 || k[0] == indexObject) {
			return false
		}
		rest = after
	}
	return len(rest) == 0
}

// readCoverageKey reads the cluster of a 'c' key, and what follows its resource.
func readCoverageKey(k []byte) (cluster, rest []byte, ok bool) {
	cluster, rest, ok = readString(k[1:])
	if !ok || len(cluster) == 0 {
		return nil, nil, false
	}
	_, rest, ok = readString(rest)
	return cluster, rest, ok
}

// coverageValue returns the value of the coverage entry key, sealed as an origins entry
// is (its path "history", "index"): from resourceVersion and from seq, 8 bytes each.
func coverageValue(key []byte, from, seq uint64) []byte {
	v := make([]byte, sealSize, sealSize+16)
	v = binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(v, from), seq)
	sealHead(v, indexSum, key)
	return v
}

// legacyCoverage is the size of a coverage entry of a build before they were sealed:
// the 16 bytes alone. One is read as it is, and sealed by the next commit of its
// resource (historyTx.cover).
const legacyCoverage = 16

// readCoverage returns what the coverage entry key holds, v its value: the log holds
// every change of its resource after resourceVersion from, in its records after seq.
// An error wraps ErrCorrupt and names the entry: a damaged coverage would place a
// resumed watch where the log does not cover it.
func readCoverage(key, v []byte) (from, seq uint64, err error) {
	value := v
	if len(v) != legacyCoverage {
		if value, err = unsealBytes(indexSum, string(key), v); err != nil {
			return 0, 0, fmt.Errorf("change log coverage %q: %w", key, err)
		}
		if len(value) != 16 {
			return 0, 0, fmt.Errorf("%w: change log coverage %q: %d bytes", ErrCorrupt, key, len(value))
		}
	}
	return binary.BigEndian.Uint64(value), binary.BigEndian.Uint64(value[8:]), nil
}

// inList reports whether the list of the object of record r names seq, for Verify.
func inList(tx *bolt.Tx, log *bolt.Bucket, r *record, seq uint64) bool {
	found := false
	_ = objectList(tx, log, string(r.cluster), string(r.resource), r.key, func(s uint64, _ *record) { found = found || s == seq })
	return found
}
