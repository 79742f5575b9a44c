package persist

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A cluster's state, as ExportCluster writes it and ImportCluster reads it, is what the
// snapshot stores of the cluster, value by value, in the stored (sealed) form, and the
// change log's records of it:
//
//	"FWCS" 4                          magic and format version
//	'i' <identity>                    the sealed identity, if one is stored
//	'r' <resource key> <rv>           per resource: its key and sealed resourceVersion,
//	'o' <object key> <object>         then its objects, each sealed
//	'd' <id> <dictionary>             before the first object or record that uses it, a
//	                                  compression dictionary (formatDict): its id, 8
//	                                  bytes, and what the snapshot stores of it
//	'g' <log id>                      once any 'l' follows: the change logs whose
//	                                  positions the records below are (Store.ID), the
//	                                  exporter's first
//	'l' <resource key> <from rv>      per resource that the log covers: its records
//	'c' <record>                      hold every change after resourceVersion from,
//	                                  then each record, oldest first, without its seal
//	                                  (a seal names the record's sequence number, which
//	                                  the importer's log gives anew)
//	'e' <frames> <crc>                the end: the number of frames before it (uvarint),
//	                                  and the CRC-32C of every byte before its 'e'
//
// A field is its length (uvarint) then its bytes. The seals cover the cluster's name and
// where each value is stored, so a state is only good for the cluster it was exported
// from, and a value that changed on the way fails its seal; a record, unsealed, is
// checked by the checksum, and names its cluster and resource. A stream that ends before
// its 'e' is truncated, and ImportCluster rejects it as such. A build before 'd' frames
// refuses a state that has one ("an unknown frame"); a state without one reads as ever.
// Version 2 is version 1 from a build whose StatefulSets are exact: the StatefulSets of
// a version 1 state (lossyResource) are left out, as migrateToV5 drops them from a
// file, and listed again. Version 3 is version 2 from a build whose CSINodes are exact:
// the CSINodes of a version 1 or 2 state (skewedResource) are left out, as migrateToV6
// drops them. Version 4 adds the change log's frames ('g', 'l', 'c'); a state of an
// earlier version imports without a log. A build refuses a state of a later version
// than its own, and that cluster starts cold.
const (
	stateMagic   = "FWCS"
	stateVersion = 4
	// stateVersionLossy is the version of states whose lossyResources are left out.
	stateVersionLossy = 1
	// stateVersionSkewed is the last version of states whose skewedResources are left
	// out.
	stateVersionSkewed = 2
	// stateVersionLog is the first version whose states carry the change log.
	stateVersionLog = 4

	frameIdentity byte = 'i'
	frameResource byte = 'r'
	frameObject   byte = 'o'
	frameDict     byte = 'd'
	frameLogID    byte = 'g'
	frameLog      byte = 'l'
	frameRecord   byte = 'c'
	frameEnd      byte = 'e'

	// maxStateField bounds a field's length, so that a garbled length cannot make
	// ImportCluster allocate without bound: a bbolt value is at most 2 GiB, an object
	// at most the apiserver's request limit of 3 MiB and then some.
	maxStateField = 64 << 20
)

// ErrNoState is returned by ExportCluster for a cluster that the Store holds nothing of.
var ErrNoState = errors.New("persist: no stored state of the cluster")

// ExportOptions configures ExportCluster.
type ExportOptions struct {
	// LogOrigins are the change logs (Store.ID) of other Stores whose records of the
	// cluster this Store's log holds, since they came with the cluster
	// (ClusterSnapshot.LogOrigins): the state names them after this Store's own, so that
	// the importer places their positions too. Default none.
	LogOrigins []string
	// LogMaxBytes bounds the change log records that the state carries, the bytes of
	// their frames: past it, the oldest are left out, and the state's log covers less.
	// Default DefaultExportLogBytes; negative: no records.
	LogMaxBytes int64
}

// DefaultExportLogBytes is the default of ExportOptions.LogMaxBytes. A replica keeps
// the state of a cluster handed over in memory until the new owner has it, for every
// cluster that moves at once: 16 MiB holds the last 4,000 changes of the pods of the
// benchmarks (docs/benchmarks.md), more than an hour of a busy cluster's.
const DefaultExportLogBytes = 16 << 20

// ExportCluster writes what the Store holds of cluster to w, in one read transaction:
// its identity and, per resource, its resourceVersion and its objects, each as
// stored, and the change log's records of each resource that the log covers, at most
// opts.LogMaxBytes of them, the newest (see the state format above). The export is one
// consistent point of the snapshot; what a Writer has not committed yet is not in it,
// so call Writer.Flush first. A read transaction lasts as long as the writes to w: give
// it a writer that does not block (a bytes.Buffer), not a network connection. It
// returns ErrNoState if the Store has nothing of cluster.
func (s *Store) ExportCluster(cluster string, w io.Writer, opts ExportOptions) error {
	if err := validateCluster(cluster); err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		if !isSealed(tx) {
			return fmt.Errorf("%w: the snapshot's values are not sealed", ErrInvalid)
		}
		cb := getBucket(tx, bucketClusters, []byte(cluster))
		if cb == nil {
			return fmt.Errorf("%w: cluster %q", ErrNoState, cluster)
		}
		sw := newStateWriter(w)
		if id := cb.Get(keyIdentity); id != nil {
			sw.frame(frameIdentity, id)
		}
		sent := make(map[uint64]bool)
		err := forEachResource(cluster, cb, func(resource string, rb *bolt.Bucket) error {
			rv := rb.Get(keyRV)
			objects := rb.Bucket(bucketObjects)
			if rv == nil || objects == nil {
				return fmt.Errorf("%w: cluster %q, resource %q: no resourceVersion or objects", ErrCorrupt, cluster, resource)
			}
			sw.frame(frameResource, []byte(resource), rv)
			return objects.ForEach(func(k, v []byte) error {
				if v == nil {
					return fmt.Errorf("%w: cluster %q, resource %q: %q is a bucket, not an object", ErrCorrupt, cluster, resource, k)
				}
				if isListKey(k) {
					return nil // the importer's log names the records it imports anew
				}
				if err := exportDictionary(tx, sw, sent, v[min(sealSize, len(v)):]); err != nil {
					return fmt.Errorf("cluster %q, resource %q, object %q: %w", cluster, resource, k, err)
				}
				sw.frame(frameObject, k, v)
				return sw.err
			})
		})
		if err != nil {
			return err
		}
		if err := s.exportLog(tx, sw, sent, cluster, cb, opts); err != nil {
			return err
		}
		return sw.end()
	})
}

// ImportCluster reads a state that ExportCluster wrote of cluster from r, checks it
// whole (its end, its checksum, every seal, that every object decodes and is stored
// under its own key, and that every record of the change log is of an object of the
// cluster's resources), and only then replaces what the Store holds of cluster with it,
// in one transaction: its identity, per resource its objects with the resourceVersion
// they are current at, as a Writer stores them, and with opts.Log the change log's
// records after the cluster's earlier ones, with their coverage. It returns the state
// as Load returns a cluster, with the change logs whose positions the records are
// (LogOrigins). A state that is truncated, corrupt or of another cluster is an error
// wrapping ErrCorrupt, and leaves the Store as it was; an error of r other than io.EOF
// is returned wrapped, not as ErrCorrupt (the stream broke, not the state). No Writer
// of the Store may have changes of cluster pending (Writer.Flush first): they would be
// committed over the import.
func (s *Store) ImportCluster(cluster string, r io.Reader, opts ImportOptions) (*ClusterSnapshot, error) {
	if err := validateCluster(cluster); err != nil {
		return nil, err
	}
	st, err := readState(cluster, r)
	if err != nil {
		return nil, err
	}
	st.resources = slices.DeleteFunc(st.resources, func(res *stateResource) bool {
		key := ResourceKey(res.key)
		return st.version <= stateVersionLossy && lossyResource(key) || st.version <= stateVersionSkewed && skewedResource(key)
	})
	cs := &ClusterSnapshot{Resources: make(map[ResourceKey]*ResourceSnapshot, len(st.resources))}
	if st.identity != nil {
		data, err := unsealBytes(identitySum(cluster), string(keyIdentity), st.identity)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: %w", cluster, err)
		}
		if cs.Identity, err = decodeIdentity(data); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", cluster, err)
		}
	}
	dicts := make(map[uint64]*dictionary, len(st.dicts))
	ids := make(map[uint64]bool, len(st.dicts))
	for _, sd := range st.dicts {
		if len(sd.id) != dictIDSize {
			return nil, fmt.Errorf("%w: the state of cluster %q: a dictionary id of %d bytes", ErrCorrupt, cluster, len(sd.id))
		}
		d, err := parseDictionary(binary.BigEndian.Uint64(sd.id), sd.value)
		if err != nil {
			return nil, fmt.Errorf("the state of cluster %q: %w", cluster, err)
		}
		dicts[d.id], ids[d.id] = registerDictionary(d), true
	}
	var d fastDecoder
	for _, res := range st.resources {
		key, err := ParseResourceKey(res.key)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster %q: %v", ErrCorrupt, cluster, err)
		}
		rv, err := unsealBytes(rvSum(cluster, res.key), string(keyRV), res.rv)
		if err != nil {
			return nil, fmt.Errorf("cluster %q, resource %q: %w", cluster, res.key, err)
		}
		if len(rv) == 0 {
			return nil, fmt.Errorf("%w: cluster %q, resource %q: no resourceVersion", ErrCorrupt, cluster, res.key)
		}
		c := &chunk{cluster: cluster, resource: res.key, sealed: true, sum: objectsSum(cluster, res.key), keys: res.keys, dicts: ids}
		c.values = make([]string, len(res.values))
		for i, v := range res.values {
			c.values[i] = string(v)
		}
		if err := c.decode(&d); err != nil {
			return nil, err
		}
		if _, dup := cs.Resources[key]; dup {
			return nil, fmt.Errorf("%w: cluster %q: resource %q twice", ErrCorrupt, cluster, res.key)
		}
		cs.Resources[key] = &ResourceSnapshot{ResourceVersion: string(rv), Objects: c.objects}
	}
	if err := checkLogs(cluster, st); err != nil {
		return nil, err
	}
	logs := st.logs
	if !opts.Log || len(s.opts.migrations) < historyVersion {
		logs = nil
	}
	if len(logs) > 0 {
		cs.LogOrigins = st.logIDs
	}
	err = s.update(func(tx *bolt.Tx) error {
		if !isSealed(tx) {
			return fmt.Errorf("%w: the snapshot's values are not sealed", ErrInvalid)
		}
		clusters := getClustersBucket(tx)
		if clusters == nil {
			return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketClusters)
		}
		if err := putDictionaries(tx, dicts); err != nil {
			return err
		}
		if len(s.opts.migrations) >= historyVersion {
			// The cluster's records before the import do not lead to what it
			// imports: the log says so, and no longer covers its resources, but
			// from the records that the state carries.
			mode := historyMarkers
			if len(logs) > 0 {
				mode = historyImport
			}
			h, err := openHistory(tx, mode, HistoryOptions{}, s.opts.Clock.Now())
			if err != nil {
				return err
			}
			if h != nil && clusters.Bucket([]byte(cluster)) != nil {
				if err := h.marker(ChangeClusterReplaced, cluster, "", ""); err != nil {
					return err
				}
				if err := h.spillCluster(cluster, clusters.Bucket([]byte(cluster))); err != nil {
					return err
				}
			}
			if h != nil && len(logs) > 0 {
				if err := h.importLog(cluster, st.logIDs, logs); err != nil {
					return err
				}
			}
			if err := h.finish(tx); err != nil {
				return err
			}
		}
		if err := deleteBucket(clusters, []byte(cluster)); err != nil {
			return err
		}
		cb, err := createClusterBucket(tx, cluster)
		if err != nil {
			return err
		}
		if st.identity != nil {
			if err := cb.Put(keyIdentity, st.identity); err != nil {
				return err
			}
		}
		for _, res := range st.resources {
			rb, err := createResourceBucket(tx, cluster, res.key)
			if err != nil {
				return err
			}
			objects, err := rb.CreateBucketIfNotExists(bucketObjects)
			if err != nil {
				return err
			}
			for i, k := range res.keys {
				if err := objects.Put([]byte(k), res.values[i]); err != nil {
					return err
				}
			}
			if err := rb.Put(keyRV, res.rv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("persist: importing cluster %q: %w", cluster, err)
	}
	return cs, nil
}

// stateWriter writes the frames of a state, and keeps the first error.
type stateWriter struct {
	w      *bufio.Writer
	crc    hash.Hash32
	frames uint64
	err    error
	buf    [binary.MaxVarintLen64]byte
}

func newStateWriter(w io.Writer) *stateWriter {
	sw := &stateWriter{crc: crc32.New(castagnoli)}
	sw.w = bufio.NewWriter(io.MultiWriter(w, sw.crc))
	sw.write([]byte(stateMagic))
	sw.write([]byte{stateVersion})
	return sw
}

func (sw *stateWriter) write(p []byte) {
	if sw.err == nil {
		_, sw.err = sw.w.Write(p)
	}
}

func (sw *stateWriter) frame(kind byte, fields ...[]byte) {
	sw.write([]byte{kind})
	for _, f := range fields {
		sw.write(sw.buf[:binary.PutUvarint(sw.buf[:], uint64(len(f)))])
		sw.write(f)
	}
	sw.frames++
}

// end writes the end frame and flushes.
func (sw *stateWriter) end() error {
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	sum := sw.crc.Sum32()
	sw.write([]byte{frameEnd})
	sw.write(sw.buf[:binary.PutUvarint(sw.buf[:], sw.frames)])
	sw.write(binary.BigEndian.AppendUint32(nil, sum))
	if sw.err == nil {
		sw.err = sw.w.Flush()
	}
	return sw.err
}

// state is a cluster's state as read, its values still sealed.
type state struct {
	version   byte
	identity  []byte
	resources []*stateResource
	dicts     []stateDict
	// logIDs and logs are the change log's frames; the records are checked by the
	// caller.
	logIDs []string
	logs   []*stateLog
}

type stateDict struct {
	id, value []byte
}

type stateResource struct {
	key    string
	rv     []byte
	keys   []string
	values [][]byte
}

// stateReader reads the frames of a state, summing what it reads.
type stateReader struct {
	r   *bufio.Reader
	crc hash.Hash32
}

func (sr *stateReader) ReadByte() (byte, error) {
	b, err := sr.r.ReadByte()
	if err == nil {
		sr.crc.Write([]byte{b})
	}
	return b, err
}

func (sr *stateReader) field() ([]byte, error) {
	n, err := binary.ReadUvarint(sr)
	if err != nil {
		return nil, err
	}
	if n > maxStateField {
		return nil, fmt.Errorf("a field of %d bytes, more than %d", n, maxStateField)
	}
	// Grow as the bytes arrive, so that a garbled length costs what the stream holds.
	var out []byte
	for uint64(len(out)) < n {
		chunk := min(n-uint64(len(out)), 1<<20)
		start := len(out)
		out = append(out, make([]byte, chunk)...)
		if _, err := io.ReadFull(sr.r, out[start:]); err != nil {
			return nil, err
		}
		sr.crc.Write(out[start:])
	}
	if out == nil {
		out = []byte{}
	}
	return out, nil
}

// readState reads a whole state of cluster from r and checks its framing and checksum;
// the seals are checked by the caller.
func readState(cluster string, r io.Reader) (*state, error) {
	er := &errReader{r: r}
	st, err := readFrames(er)
	if er.err != nil {
		// The stream broke: the state may be whole where it comes from.
		return nil, fmt.Errorf("reading the state of cluster %q: %w", cluster, er.err)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: the state of cluster %q: %v", ErrCorrupt, cluster, err)
	}
	return st, nil
}

func readFrames(r io.Reader) (*state, error) {
	sr := &stateReader{r: bufio.NewReader(r), crc: crc32.New(castagnoli)}
	head := make([]byte, len(stateMagic)+1)
	if _, err := io.ReadFull(sr.r, head); err != nil {
		return nil, err
	}
	sr.crc.Write(head)
	if string(head[:len(stateMagic)]) != stateMagic {
		return nil, errors.New("not a cluster state")
	}
	version := head[len(stateMagic)]
	if version < stateVersionLossy || version > stateVersion {
		return nil, fmt.Errorf("format version %d, not %d", version, stateVersion)
	}
	st := &state{version: version}
	var frames uint64
	var cur *stateResource
	for {
		sum := sr.crc.Sum32()
		kind, err := sr.ReadByte()
		if err != nil {
			return nil, err
		}
		switch kind {
		case frameIdentity:
			if st.identity != nil || len(st.resources) > 0 {
				return nil, errors.New("an identity out of place")
			}
			if st.identity, err = sr.field(); err != nil {
				return nil, err
			}
		case frameResource:
			key, err := sr.field()
			if err != nil {
				return nil, err
			}
			rv, err := sr.field()
			if err != nil {
				return nil, err
			}
			cur = &stateResource{key: string(key), rv: rv}
			st.resources = append(st.resources, cur)
		case frameObject:
			if cur == nil {
				return nil, errors.New("an object before any resource")
			}
			key, err := sr.field()
			if err != nil {
				return nil, err
			}
			value, err := sr.field()
			if err != nil {
				return nil, err
			}
			if !validObjectKey(string(key)) {
				return nil, fmt.Errorf("object key %q", key)
			}
			cur.keys = append(cur.keys, string(key))
			cur.values = append(cur.values, value)
		case frameDict:
			id, err := sr.field()
			if err != nil {
				return nil, err
			}
			value, err := sr.field()
			if err != nil {
				return nil, err
			}
			st.dicts = append(st.dicts, stateDict{id, value})
		case frameLogID:
			if version < stateVersionLog || len(st.logs) > 0 {
				return nil, errors.New("a change log's id out of place")
			}
			id, err := sr.field()
			if err != nil {
				return nil, err
			}
			if len(id) == 0 {
				return nil, errors.New("an empty change log id")
			}
			st.logIDs = append(st.logIDs, string(id))
		case frameLog:
			if len(st.logIDs) == 0 {
				return nil, errors.New("a change log without its id")
			}
			key, err := sr.field()
			if err != nil {
				return nil, err
			}
			from, err := sr.field()
			if err != nil {
				return nil, err
			}
			st.logs = append(st.logs, &stateLog{key: string(key), from: string(from)})
		case frameRecord:
			if len(st.logs) == 0 {
				return nil, errors.New("a change log record before any change log")
			}
			record, err := sr.field()
			if err != nil {
				return nil, err
			}
			l := st.logs[len(st.logs)-1]
			l.records = append(l.records, record)
		case frameEnd:
			n, err := binary.ReadUvarint(sr.r)
			if err != nil {
				return nil, err
			}
			var want [4]byte
			if _, err := io.ReadFull(sr.r, want[:]); err != nil {
				return nil, err
			}
			if n != frames {
				return nil, fmt.Errorf("%d frames, the end says %d", frames, n)
			}
			if binary.BigEndian.Uint32(want[:]) != sum {
				return nil, errors.New("the checksum does not match")
			}
			if _, err := sr.r.ReadByte(); err != io.EOF {
				return nil, errors.New("bytes after the end")
			}
			return st, nil
		default:
			return nil, fmt.Errorf("an unknown frame %q", kind)
		}
		frames++
	}
}

// errReader keeps the first error of its reader other than io.EOF, to tell a stream that
// broke from a state that is corrupt.
type errReader struct {
	r   io.Reader
	err error
}

func (er *errReader) Read(p []byte) (int, error) {
	n, err := er.r.Read(p)
	if err != nil && err != io.EOF && er.err == nil {
		er.err = err
	}
	return n, err
}

// exportDictionary writes the frame of the dictionary of enc, an object's encoding, if it
// is in formatDict and its dictionary was not sent yet: from the file, where the values
// that use it have it.
func exportDictionary(tx *bolt.Tx, sw *stateWriter, sent map[uint64]bool, enc []byte) error {
	if first(enc) != formatDict {
		return nil
	}
	id, err := dictIDOfEncoding(enc)
	if err != nil || sent[id] {
		return err
	}
	var value []byte
	if b := tx.Bucket(bucketDictionaries); b != nil {
		value = b.Get(dictKey(id))
	}
	if value == nil {
		return fmt.Errorf("%w: its dictionary %016x is not stored", ErrCorrupt, id)
	}
	sent[id] = true
	sw.frame(frameDict, dictKey(id), value)
	return sw.err
}
