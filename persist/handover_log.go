package persist

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// The change log of a cluster handed over: ExportCluster writes the records of each
// resource that the log covers, with where the coverage starts, and ImportCluster
// appends them to the importer's log in the transaction that imports the objects, with
// the same coverage. The importer's log then holds the cluster's changes as the
// exporter's recorded them, in the same order: a position that a reader of the
// exporter's log could place (the server's cursors), a reader of the importer's places
// the same way.

// ImportOptions configures ImportCluster.
type ImportOptions struct {
	// Log appends the change log records that the state carries to the Store's log,
	// covering the cluster's resources as the exporter's log did: set it when the log is
	// kept (HistoryOptions.Enabled). Default false: the records are checked with the
	// rest and left out, and the log no longer covers the cluster's resources.
	Log bool
}

// stateLog is the change log of one resource in a state, its records unsealed.
type stateLog struct {
	key     string
	from    string
	records [][]byte
}

// exportLog writes the change log's frames of cluster, whose bucket is cb: the records
// of each of its resources that the log covers, after the coverage's start, at most
// opts.LogMaxBytes of them, the newest. A resource whose records the log does not have
// whole (one dropped as unreadable) is left out.
func (s *Store) exportLog(tx *bolt.Tx, sw *stateWriter, sent map[uint64]bool, cluster string, cb *bolt.Bucket, opts ExportOptions) error {
	maxBytes := cmp.Or(opts.LogMaxBytes, DefaultExportLogBytes)
	log, index := historyBuckets(tx)
	if log == nil || index == nil || maxBytes < 0 {
		return nil
	}
	type rec struct {
		res  int
		seq  uint64
		rv   uint64
		size int64
	}
	var (
		logs []*stateLog
		from []uint64
		recs []rec
	)
	err := forEachResource(cluster, cb, func(resource string, _ *bolt.Bucket) error {
		covKey := indexPrefix(indexCoverage, cluster, resource, "")
		cov := index.Get(covKey)
		if cov == nil {
			return nil
		}
		fromRV, fromSeq, err := readCoverage(covKey, cov)
		if err != nil {
			// A damaged coverage: the resource's records are not exported, as if
			// the log did not cover it.
			return nil
		}
		prefix := indexPrefix(indexResource, cluster, resource, "")
		var mine []rec
		c := index.Cursor()
		for k, v := c.Seek(append(bytes.Clone(prefix), seqKey(fromSeq+1)...)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			if len(k) != len(prefix)+8 {
				return nil // a damaged entry
			}
			seq := binary.BigEndian.Uint64(k[len(prefix):])
			value := log.Get(seqKey(seq))
			if value == nil || len(v) != 8 {
				// Dropped as unreadable (or lost to damage), or not at an integer
				// resourceVersion: the coverage could not move past it.
				return nil
			}
			if r, err := parseRecord(seq, value); err != nil || checkIndexed(k, v, seq, &r) != nil {
				// A damaged record or index entry: the importer's log would not
				// place a position as this one does.
				return nil
			}
			mine = append(mine, rec{res: len(logs), seq: seq, rv: binary.BigEndian.Uint64(v), size: int64(len(value) - sealSize + 16)})
		}
		logs = append(logs, &stateLog{key: resource})
		from = append(from, fromRV)
		recs = append(recs, mine...)
		return nil
	})
	if err != nil || len(logs) == 0 {
		return err
	}
	// The newest records within the bound: the coverage of a resource whose oldest are
	// left out starts at the last of them, as the retention's does.
	slices.SortFunc(recs, func(a, b rec) int { return cmp.Compare(a.seq, b.seq) })
	var total int64
	for _, r := range recs {
		total += r.size
	}
	for len(recs) > 0 && total > maxBytes {
		r := recs[0]
		from[r.res] = max(from[r.res], r.rv)
		total -= r.size
		recs = recs[1:]
	}
	id, err := storeID(tx)
	if err != nil {
		return err
	}
	for _, id := range slices.Concat([]string{id}, opts.LogOrigins) {
		sw.frame(frameLogID, []byte(id))
	}
	for i, l := range logs {
		sw.frame(frameLog, []byte(l.key), []byte(strconv.FormatUint(from[i], 10)))
		for _, rc := range recs {
			if rc.res != i {
				continue
			}
			v := log.Get(seqKey(rc.seq))
			r, err := parseRecord(rc.seq, v)
			if err != nil {
				return fmt.Errorf("cluster %q: %w", cluster, err)
			}
			if err := exportDictionary(tx, sw, sent, r.object); err != nil {
				return fmt.Errorf("cluster %q, resource %q, change log: %w", cluster, l.key, err)
			}
			// Without the seal, which names the record's sequence number here.
			sw.frame(frameRecord, v[sealSize:])
		}
	}
	return sw.err
}

// checkLogs checks the change log of a state of cluster: each record parses, is of an
// object of its resource, which the state holds, holds no Secret's encoding, and its
// object decodes.
func checkLogs(cluster string, st *state) error {
	stored := make(map[string]bool, len(st.resources))
	for _, res := range st.resources {
		stored[res.key] = true
	}
	for _, l := range st.logs {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: the state of cluster %q, the change log of resource %q: %s", ErrCorrupt, cluster, l.key, fmt.Sprintf(format, args...))
		}
		if !stored[l.key] {
			return bad("a resource the state does not hold")
		}
		if _, ok := parseRV([]byte(l.from)); !ok {
			return bad("it starts at resourceVersion %q", l.from)
		}
		secret := isSecret(ResourceKey(l.key))
		for i, body := range l.records {
			r, err := parseRecordValue(0, body)
			if err != nil {
				return bad("record %d: %v", i, err)
			}
			switch {
			case string(r.cluster) != cluster || string(r.resource) != l.key:
				return bad("record %d is of cluster %q, resource %q", i, r.cluster, r.resource)
			case !objectType(r.typ):
				return bad("record %d is a %s", i, r.typ)
			case secret && r.object != nil:
				return bad("record %d holds a Secret's encoding", i)
			}
			if r.object != nil {
				if _, err := decodeObject(r.object); err != nil {
					return bad("record %d: %v", i, err)
				}
			}
		}
	}
	return nil
}

// importLog stages the records of the state's change log in h, the log of the
// transaction that imports the cluster, after what h already staged of it (the record
// of its replacement), and its coverage, and the change logs ids whose records they are
// (originsKey); the cluster's earlier coverage ends.
func (h *historyTx) importLog(cluster string, ids []string, logs []*stateLog) error {
	if err := h.uncover(cluster, ""); err != nil {
		return err
	}
	h.origins = append(h.origins, imported{cluster: cluster, ids: ids, marker: h.lastMarker(cluster, "")})
	for _, l := range logs {
		for _, body := range l.records {
			r, err := parseRecordValue(0, body)
			if err != nil {
				return err
			}
			// A buffer of its own: bbolt keeps the values it is given until the commit.
			v := append(make([]byte, sealSize, sealSize+len(body)), body...)
			h.add(v, r.typ, r.time, cluster, l.key, string(r.key), string(r.rv))
		}
		h.covers = append(h.covers, coverage{cluster: cluster, resource: l.key, from: []byte(l.from), marker: h.lastMarker(cluster, l.key)})
	}
	return nil
}

// The change logs whose records of a cluster the log holds, imported with it, are kept
// in the index under originsKey, in the transaction of the import, until the cluster's
// records no longer follow from them: a drop or replacement of the cluster, another
// import, the log cleared (uncover, clearHistory). Load returns them
// (ClusterSnapshot.LogOrigins), so that an importer that restarts still places the
// positions of those logs. The value is sealed as a record is (its path "history",
// "index", its key), and holds the sequence number that the import's coverage starts
// after: an entry stands only while a coverage of the cluster starts there
// (loadOrigins). A build before the entry neither reads nor deletes it, so one that
// dropped or replaced the cluster leaves it behind, and the coverage that the cluster
// has since starts elsewhere: the entry is then ignored, and needs no schema version of
// its own.

// imported is an import's change logs, which flush records.
type imported struct {
	cluster string
	ids     []string
	// marker is the index in staged of the record of the cluster's replacement, -1 if
	// none: the import's coverage starts after it, else after the log before the commit.
	marker int
}

// indexSum starts the seal of an index value that has one.
var indexSum = pathSum(string(bucketHistory), string(bucketIndex))

// originsKey is the index key of the change logs that cluster's records came from.
func originsKey(cluster string) []byte {
	return appendString([]byte{indexOrigins}, cluster)
}

// encodeOrigins returns the sealed value of originsKey: after, the sequence number the
// import's coverage starts after (8 bytes), then each id with its length before it.
func encodeOrigins(cluster string, after uint64, ids []string) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, sealSize, sealSize+8+16*len(ids)), after)
	for _, id := range ids {
		v = appendString(v, id)
	}
	sealHead(v, indexSum, originsKey(cluster))
	return v
}

// decodeOrigins checks the seal of the value v of originsKey(cluster) and returns what
// encodeOrigins put in it. An error wraps ErrCorrupt.
func decodeOrigins(cluster string, v []byte) (after uint64, ids []string, err error) {
	value, err := unsealBytes(indexSum, string(originsKey(cluster)), v)
	if err != nil {
		return 0, nil, fmt.Errorf("the change logs of cluster %q: %w", cluster, err)
	}
	if len(value) < 8 {
		return 0, nil, fmt.Errorf("%w: the change logs of cluster %q: too short", ErrCorrupt, cluster)
	}
	after, rest := binary.BigEndian.Uint64(value), value[8:]
	for len(rest) > 0 {
		id, r, ok := readString(rest)
		if !ok || len(id) == 0 {
			return 0, nil, fmt.Errorf("%w: the change logs of cluster %q: a malformed id", ErrCorrupt, cluster)
		}
		ids, rest = append(ids, string(id)), r
	}
	if len(ids) == 0 {
		return 0, nil, fmt.Errorf("%w: the change logs of cluster %q: none", ErrCorrupt, cluster)
	}
	return after, ids, nil
}

// loadOrigins returns the change logs whose records of cluster the log holds, imported
// with it, nil if none: if their entry is there, passes its seal, and a coverage of the
// cluster still starts where the import's did. An entry that does not pass is left
// out, so that only the positions of the importer's own log are placed; Verify reports
// it.
func loadOrigins(index *bolt.Bucket, cluster string) []string {
	if index == nil {
		return nil
	}
	v := index.Get(originsKey(cluster))
	if v == nil {
		return nil
	}
	after, ids, err := decodeOrigins(cluster, v)
	if err != nil {
		return nil
	}
	prefix := appendString([]byte{indexCoverage}, cluster)
	c := index.Cursor()
	for k, cov := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, cov = c.Next() {
		if _, rest, ok := readString(k[len(prefix):]); ok && len(rest) == 0 {
			if _, from, err := readCoverage(k, cov); err == nil && from == after {
				return ids
			}
		}
	}
	return nil
}

// verifyOrigins checks every entry of originsKey, for Verify.
func verifyOrigins(index *bolt.Bucket) error {
	prefix := []byte{indexOrigins}
	c := index.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		cluster, rest, ok := readString(k[1:])
		if !ok || len(rest) > 0 || len(cluster) == 0 {
			return fmt.Errorf("%w: change log index: unexpected key %q", ErrCorrupt, k)
		}
		if _, _, err := decodeOrigins(string(cluster), v); err != nil {
			return err
		}
	}
	return nil
}
