package persist

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strconv"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/runtime"
)

// The change log: every change that a Writer commits, in the order of its sequence
// number, in the transactions that commit the objects. See the package documentation
// for the layout, and docs/design.md ("Change log") for what it is for.

// Defaults of HistoryOptions.
const (
	DefaultHistoryRetention = 24 * time.Hour
	// DefaultHistoryMaxBytes holds 24 hours of 100 changes per second, 8,640,000
	// records, of the pod of testdata/pod.json (6.9 KB in the compact encoding): a
	// record counts its object's encoding, compressed by S2 (3.4 KB), plus about 140
	// bytes (header, key, two index keys), 28.6 GiB in all, and takes about 16% more of
	// the file than it counts (BenchmarkHistoryRecordSize), 33 GiB. The pods of the
	// benchmark harness (3.9 KiB) take less; objects that S2 does not shorten fill it
	// in 15 hours from 6.9 KB, in 24 from 4.3 KB.
	DefaultHistoryMaxBytes = 36 << 30
)

// HistoryOptions configures the change log. The zero value keeps it, with the defaults.
type HistoryOptions struct {
	// Enabled keeps the change log. Off, commits cost what they cost without it, and a
	// log that the file holds is deleted at the first commit: it would not say what
	// changed while it was off. Default false, for what the log costs: a commit takes
	// about 1.3 times its CPU and its time (BenchmarkHistoryWriteCost; a fleet's watch
	// event, of which the commit is a part, 1.04 times in make bench), and the file
	// grows by about 0.6 of each changed object's compact encoding, up to twice
	// MaxBytes.
	Enabled bool

	// Retention is how long a change is kept: older ones are dropped, oldest first.
	// Default DefaultHistoryRetention.
	Retention time.Duration

	// MaxBytes bounds the size of the log: the bytes of its records and index keys.
	// Beyond it the oldest records are dropped. The file holds them in pages that bbolt
	// fills by half to all, and keeps the pages freed for reuse, so the log's share of
	// the file is up to about twice MaxBytes. Default DefaultHistoryMaxBytes.
	MaxBytes int64
}

func (o HistoryOptions) withDefaults() HistoryOptions {
	if o.Retention <= 0 {
		o.Retention = DefaultHistoryRetention
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultHistoryMaxBytes
	}
	return o
}

// ChangeType says what a Change is.
type ChangeType uint8

// The types of changes. Added, Modified, Deleted and Vanished are of one object; the
// others are of a whole resource or cluster, and have no object.
const (
	// ChangeAdded is an object that the resource did not hold.
	ChangeAdded ChangeType = iota + 1
	// ChangeModified is a new state of an object that the resource held.
	ChangeModified
	// ChangeDeleted is an object deleted (Writer.Delete).
	ChangeDeleted
	// ChangeVanished is an object that a relist found gone: deleted while the informer
	// was away (Writer.DeleteVanished).
	ChangeVanished
	// ChangeResourceReset is a resource dropped (DropResource), whose informer starts
	// over: what follows is a new list, and its deletions are not recorded.
	ChangeResourceReset
	// ChangeClusterRemoved is a cluster dropped (DropCluster).
	ChangeClusterRemoved
	// ChangeClusterReplaced is a cluster dropped because its identity changed
	// (Writer.ReplaceCluster): what follows is another cluster under the same name.
	ChangeClusterReplaced
	// ChangeLost says that the Writer did not keep the changes of the resource up to
	// this record for the log (more than it holds were pending): the log misses some.
	ChangeLost
)

var changeTypeNames = [...]string{"", "Added", "Modified", "Deleted", "Vanished", "ResourceReset", "ClusterRemoved", "ClusterReplaced", "Lost"}

func (t ChangeType) String() string {
	if int(t) < len(changeTypeNames) && t != 0 {
		return changeTypeNames[t]
	}
	return "ChangeType(" + strconv.Itoa(int(t)) + ")"
}

// Change is one record of the change log. It shares no memory with the file.
type Change struct {
	// Seq is the record's sequence number: it increases with each record, across
	// restarts, and is never reused.
	Seq uint64
	// Time is when the Writer was handed the change, or the time of the record before
	// it if that is later: times do not decrease along Seq.
	Time time.Time
	Type ChangeType
	// Cluster and Resource are those of the change. A cluster's record has no
	// Resource.
	Cluster  string
	Resource ResourceKey
	// Namespace and Name are the object's; empty for a resource's or a cluster's record.
	Namespace, Name string
	// ResourceVersion is that of the checkpoint that committed the change: the stored
	// resourceVersion of the resource after it, the position of the change in the
	// resource's stream. For a watch event it is the object's resourceVersion; for the
	// changes of a list, the list's. Empty for a cluster's record.
	ResourceVersion string
	// ObjectResourceVersion is the object's own resourceVersion, for Added and
	// Modified.
	ObjectResourceVersion string
	// Object is the object's encoding, for Added and Modified (Decode): the stored one,
	// compressed as a Codec with Compress keeps it if it is not already; nil for
	// the other types, and for every Secret: the log never holds a Secret's values,
	// whatever the snapshot keeps.
	Object []byte
}

// Decode decodes c.Object, as Load decodes an object of the snapshot.
func (c *Change) Decode() (runtime.Object, error) {
	if c.Object == nil {
		return nil, fmt.Errorf("%w: change %d (%s) has no object", ErrInvalid, c.Seq, c.Type)
	}
	obj, err := decodeObject(c.Object)
	if err != nil {
		return nil, fmt.Errorf("change %d: %w", c.Seq, err)
	}
	return obj, nil
}

// Names of the change log's buckets and keys.
var (
	bucketHistory = []byte("history")
	bucketChanges = []byte("changes")
	bucketIndex   = []byte("index")
	// keyBytes is the size of the log, which retention bounds.
	keyBytes = []byte("bytes")
)

// Prefixes of the index keys.
const (
	indexObject   = 'o' // cluster, resource, object key, seq -> nothing
	indexResource = 'r' // cluster, resource, seq -> the resourceVersion as an integer
	indexCoverage = 'c' // cluster, resource -> from resourceVersion, from seq
	indexOrigins  = 'g' // cluster -> sealed: the import's seq, the change logs it came from
)

// recordFormat is the first byte of a record, after its seal.
const recordFormat = 1

// changesSum starts the seal of a record.
var changesSum = pathSum(string(bucketHistory), string(bucketChanges))

// seqKey is the key of the record seq.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), seq) }

// appendString appends s with its length before it, as a uvarint.
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// readString reads what appendString wrote, as a slice of b.
func readString(b []byte) (s, rest []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// indexPrefix returns the prefix of the index keys of kind for cluster and resource,
// and key if it is not empty.
func indexPrefix(kind byte, cluster, resource, key string) []byte {
	b := make([]byte, 0, 1+len(cluster)+len(resource)+len(key)+3+3+8)
	b = appendString(appendString(append(b, kind), cluster), resource)
	if kind == indexObject {
		b = appendString(b, key)
	}
	return b
}

// record is the parsed content of a stored record; its slices alias the value.
type record struct {
	typ                                  ChangeType
	time                                 int64
	cluster, resource, key, rv, objectRV []byte
	object                               []byte
}

// headSize is what a record's header takes before its strings: seal, format, type, time.
const headSize = sealSize + 2 + 8

// appendRecord appends the stored form of a record to b, its type and seal not written
// yet (finishRecord writes them). The object is compressed where S2 shortens it by an
// eighth, as a Codec with Compress keeps it: the object is most of what a record adds to
// a commit and to the file, and a pod's takes half the bytes, for about 10 µs of S2
// (BenchmarkHistoryRecordSize, BenchmarkSteadyCommit).
func appendRecord(b []byte, cluster, resource, key, rv, objectRV string, t int64, object []byte) []byte {
	b = append(b, make([]byte, sealSize)...)
	b = append(b, recordFormat, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(t))
	for _, s := range [...]string{cluster, resource, key, rv, objectRV} {
		b = appendString(b, s)
	}
	return appendCompressed(b, object)
}

// finishRecord writes the type, time and seal of a record that appendRecord made.
func finishRecord(v []byte, seq uint64, typ ChangeType, t int64) {
	v[sealSize+1] = byte(typ)
	binary.BigEndian.PutUint64(v[sealSize+2:], uint64(t))
	sealHead(v, changesSum, seqKey(seq))
}

// recordTime returns the time of a stored record without checking its seal, for the
// search of a time in a sorted log.
func recordTime(v []byte) (int64, bool) {
	if len(v) < headSize {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v[sealSize+2:])), true
}

// parseRecord checks the seal of the stored record seq and parses it. The result
// aliases v. An error wraps ErrCorrupt and names the record.
func parseRecord(seq uint64, v []byte) (record, error) {
	// The seal checked without an allocation, as the queries read many records; the
	// error, if any, from unsealBytes.
	var key [8]byte
	binary.BigEndian.PutUint64(key[:], seq)
	if len(v) < sealSize || v[0] != formatSealed ||
		crc32.Update(crc32.Update(changesSum, castagnoli, key[:]), castagnoli, v[sealSize:]) != binary.BigEndian.Uint32(v[1:]) {
		_, err := unsealBytes(changesSum, string(key[:]), v)
		if err == nil {
			err = fmt.Errorf("%w: the value does not match its seal", ErrCorrupt)
		}
		return record{}, fmt.Errorf("change log record %d: %w", seq, err)
	}
	return parseRecordValue(seq, v[sealSize:])
}

// parseRecordValue parses the record seq without its seal, value.
func parseRecordValue(seq uint64, value []byte) (record, error) {
	bad := func(what string) (record, error) {
		return record{}, fmt.Errorf("%w: change log record %d: %s", ErrCorrupt, seq, what)
	}
	if len(value) < headSize-sealSize {
		return bad("too short")
	}
	if value[0] != recordFormat {
		return bad(fmt.Sprintf("unknown format %d", value[0]))
	}
	r := record{typ: ChangeType(value[1]), time: int64(binary.BigEndian.Uint64(value[2:]))}
	if r.typ < ChangeAdded || r.typ > ChangeLost {
		return bad(fmt.Sprintf("unknown type %d", value[1]))
	}
	rest := value[10:]
	for _, s := range [...]*[]byte{&r.cluster, &r.resource, &r.key, &r.rv, &r.objectRV} {
		var ok bool
		if *s, rest, ok = readString(rest); !ok {
			return bad("a string runs past its end")
		}
	}
	if len(r.cluster) == 0 {
		return bad("no cluster")
	}
	if r.object = rest; len(rest) == 0 {
		r.object = nil
	}
	if objectType(r.typ) != (len(r.key) > 0) {
		return bad(fmt.Sprintf("a record of type %s with object key %q", r.typ, r.key))
	}
	if r.object != nil && r.typ != ChangeAdded && r.typ != ChangeModified {
		return bad(fmt.Sprintf("a record of type %s with an object", r.typ))
	}
	return r, nil
}

// objectType reports whether t is the type of an object's change.
func objectType(t ChangeType) bool { return t >= ChangeAdded && t <= ChangeVanished }

// change returns r as a Change that shares no memory with the file.
func (r *record) change(seq uint64, withObject bool) Change {
	c := Change{
		Seq:                   seq,
		Time:                  time.Unix(0, r.time),
		Type:                  r.typ,
		Cluster:               string(r.cluster),
		Resource:              ResourceKey(r.resource),
		ResourceVersion:       string(r.rv),
		ObjectResourceVersion: string(r.objectRV),
	}
	if len(r.key) > 0 {
		ns, name, _ := bytes.Cut(r.key, []byte("/"))
		c.Namespace, c.Name = string(ns), string(name)
	}
	if withObject && r.object != nil {
		c.Object = bytes.Clone(r.object)
	}
	return c
}

// view returns r as a Change whose strings alias the record, for a filter that does not
// keep it; without its Object.
func (r *record) view(seq uint64) Change {
	c := Change{
		Seq:                   seq,
		Time:                  time.Unix(0, r.time),
		Type:                  r.typ,
		Cluster:               aliasString(r.cluster),
		Resource:              ResourceKey(aliasString(r.resource)),
		ResourceVersion:       aliasString(r.rv),
		ObjectResourceVersion: aliasString(r.objectRV),
	}
	if len(r.key) > 0 {
		ns, name, _ := bytes.Cut(r.key, []byte("/"))
		c.Namespace, c.Name = aliasString(ns), aliasString(name)
	}
	return c
}

// aliasString returns b as a string that shares its memory: for what is read within a
// transaction, and not kept past it.
func aliasString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// decodeChange parses the stored record seq into a Change that shares no memory with v.
func decodeChange(seq uint64, v []byte) (Change, error) {
	r, err := parseRecord(seq, v)
	if err != nil {
		return Change{}, err
	}
	return r.change(seq, true), nil
}

// isSecret reports whether key is of the core group's Secrets, whose encodings the log
// never holds.
func isSecret(key ResourceKey) bool {
	gvr := key.GroupVersionResource()
	return gvr.Group == "" && gvr.Resource == "secrets"
}

// parseRV returns rv as an integer, the form the resume index compares.
// It accepts what strconv.ParseUint(rv, 10, 64) does, without its error: the reads
// check the index against each record they read (checkIndexed).
func parseRV(rv []byte) (uint64, bool) {
	if len(rv) == 0 || len(rv) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range rv {
		d := uint64(c - '0')
		if d > 9 || n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// historyMode says what a commit writes to the log.
type historyMode uint8

const (
	// historyOff writes nothing, and deletes the log if clear is set (historyTx).
	historyOff historyMode = iota
	// historyMarkers writes the records of drops only, for a Store without a Writer
	// whose file holds a log: the log must not outlive what it says is stored.
	historyMarkers
	// historyOn writes every change, and enforces the retention.
	historyOn
	// historyImport writes the records of a cluster imported (ImportCluster), without
	// the retention, which the Writer's next commit enforces as it configures it.
	historyImport
)

// historyTx writes to the change log within one commit's transaction.
type historyTx struct {
	tx      *bolt.Tx
	mode    historyMode
	opts    HistoryOptions
	now     time.Time
	changes *bolt.Bucket
	index   *bolt.Bucket
	bytes   uint64
	// last is the time of the last record, which the next may not precede.
	last int64
	// appended counts the records this transaction added.
	appended int
	// staged are the commit's records, appended by flush; covers the coverages it
	// records then; markers the index in staged of the last drop's record of each
	// resource ("cluster\x00resource") and cluster ("cluster\x00").
	staged  []staged
	covers  []coverage
	markers map[string]int
	// origins are the change logs whose records of a cluster the commit imports
	// (importLog), recorded by flush with the sequence number its coverage starts
	// after.
	origins []imported
	// before is the log's sequence before the commit.
	before uint64
	// keys are the index keys of the records added, put in key order at the end
	// (flush): bbolt splits nodes at the commit only, and inserting thousands of keys
	// at random places of one node, as a cold start's list does, moves the node's
	// elements at each insert.
	keys []op
}

// openHistory returns the historyTx of a commit, nil if it writes nothing to the log.
func openHistory(tx *bolt.Tx, mode historyMode, opts HistoryOptions, now time.Time) (*historyTx, error) {
	if mode == historyOff {
		return nil, nil
	}
	hist := tx.Bucket(bucketHistory)
	if hist == nil {
		return nil, fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketHistory)
	}
	changes, index := hist.Bucket(bucketChanges), hist.Bucket(bucketIndex)
	if changes == nil || index == nil {
		return nil, fmt.Errorf("%w: bucket %q lacks %q or %q", ErrCorrupt, bucketHistory, bucketChanges, bucketIndex)
	}
	if mode == historyMarkers {
		k, _ := changes.Cursor().First()
		i, _ := index.Cursor().First()
		if k == nil && i == nil {
			return nil, nil
		}
	}
	// Records are appended at the end: full pages, rather than bbolt's half-full
	// ones of a split, halve the pages of small records. (Not stored: per transaction.)
	changes.FillPercent = 1
	h := &historyTx{tx: tx, mode: mode, opts: opts, now: now, changes: changes, index: index}
	h.bytes, _ = getUint64(hist, keyBytes)
	h.before = changes.Sequence()
	if k, v := changes.Cursor().Last(); k != nil {
		h.last, _ = recordTime(v)
	}
	return h, nil
}

// clearHistory deletes the change log, if the file holds one.
func clearHistory(tx *bolt.Tx) error {
	hist := tx.Bucket(bucketHistory)
	if hist == nil {
		return fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketHistory)
	}
	if k, _ := hist.Bucket(bucketChanges).Cursor().First(); k == nil {
		if k, _ := hist.Bucket(bucketIndex).Cursor().First(); k == nil {
			return nil
		}
	}
	// The sequence goes on: the lists that the objects buckets keep of this log name
	// records before the next log's first one (history_lists.go).
	seq := hist.Bucket(bucketChanges).Sequence()
	if err := tx.DeleteBucket(bucketHistory); err != nil {
		return err
	}
	if err := createHistoryBucket(tx); err != nil {
		return err
	}
	return tx.Bucket(bucketHistory).Bucket(bucketChanges).SetSequence(seq)
}

// createHistoryBucket lays out an empty change log.
func createHistoryBucket(tx *bolt.Tx) error {
	_, err := createBucketIfNotExists(tx, bucketHistory, bucketChanges)
	if err == nil {
		_, err = createBucketIfNotExists(tx, bucketHistory, bucketIndex)
	}
	return err
}

// staged is a record of the commit, appended at its end (flush) in the order of time.
type staged struct {
	v                          []byte
	typ                        ChangeType
	t                          int64 // 0 for a drop's record: the oldest change's time
	cluster, resource, key, rv string
	seq                        uint64
}

// coverage is a resource whose coverage the commit records if it has none (cover).
type coverage struct {
	cluster, resource string
	from              []byte
	// marker is the index in staged of the drop's record that the coverage follows,
	// -1 if none: the coverage starts after it, else after the log before the commit.
	marker int
}

// add stages a record, made by appendRecord in v, for flush.
func (h *historyTx) add(v []byte, typ ChangeType, t int64, cluster, resource, key, rv string) {
	h.staged = append(h.staged, staged{v: v, typ: typ, t: t, cluster: cluster, resource: resource, key: key, rv: rv})
}

// flush appends the staged records and their index keys, and records the coverages.
// The records are put in the order of their times, each resource's in its order (the
// Writer's order, in which their times do not decrease), so that the log's times do
// not decrease along its sequence, as the queries by time need; a drop's record takes
// the time of the commit's oldest change, and comes before the changes that follow it.
func (h *historyTx) flush() error {
	oldest := h.now.UnixNano()
	for _, r := range h.staged {
		if r.t != 0 {
			oldest = min(oldest, r.t)
		}
	}
	order := make([]int, len(h.staged))
	for i := range order {
		order[i] = i
		if h.staged[i].t == 0 {
			h.staged[i].t = oldest
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(h.staged[a].t, h.staged[b].t) })
	var lists []listed
	for _, i := range order {
		r := &h.staged[i]
		seq, err := h.changes.NextSequence()
		if err != nil {
			return err
		}
		r.seq = seq
		nanos := max(r.t, h.last)
		h.last = nanos
		finishRecord(r.v, seq, r.typ, nanos)
		k := seqKey(seq)
		if err := h.changes.Put(k, r.v); err != nil {
			return err
		}
		size := len(k) + len(r.v)
		if r.key != "" {
			// The size of the log counts a record's 'o' entry, whether its object's
			// list names it instead or not.
			ok := append(indexPrefix(indexObject, r.cluster, r.resource, r.key), k...)
			size += len(ok)
			if h.mode == historyOn {
				lists = append(lists, listed{cluster: r.cluster, resource: r.resource, key: r.key, seq: seq})
			} else {
				h.keys = append(h.keys, op{key: ok, value: []byte{}})
			}
		}
		rk := append(indexPrefix(indexResource, r.cluster, r.resource, ""), k...)
		rvv := []byte{}
		if n, ok := parseRV([]byte(r.rv)); ok {
			rvv = binary.BigEndian.AppendUint64(nil, n)
		}
		h.keys = append(h.keys, op{key: rk, value: rvv})
		h.bytes += uint64(size + len(rk) + len(rvv))
		h.appended++
	}
	if err := h.updateLists(lists); err != nil {
		return err
	}
	slices.SortFunc(h.keys, func(a, b op) int { return bytes.Compare(a.key, b.key) })
	for _, k := range h.keys {
		if err := h.index.Put(k.key, k.value); err != nil {
			return err
		}
	}
	for _, c := range h.covers {
		after := h.before
		if c.marker >= 0 {
			after = h.staged[c.marker].seq
		}
		if err := h.cover(c.cluster, c.resource, c.from, after); err != nil {
			return err
		}
	}
	for _, o := range h.origins {
		after := h.before
		if o.marker >= 0 {
			after = h.staged[o.marker].seq
		}
		if err := h.index.Put(originsKey(o.cluster), encodeOrigins(o.cluster, after, o.ids)); err != nil {
			return err
		}
	}
	return nil
}

// marker stages the record of a resource's or a cluster's change, and ends the
// coverage of what it drops: the resume index cannot say what changed across it.
func (h *historyTx) marker(typ ChangeType, cluster, resource, rv string) error {
	// A buffer of its own: bbolt keeps the values it is given until the commit.
	v := appendRecord(nil, cluster, resource, "", rv, "", 0, nil)
	h.add(v, typ, 0, cluster, resource, "", rv)
	if h.markers == nil {
		h.markers = make(map[string]int)
	}
	h.markers[cluster+"\x00"+resource] = len(h.staged) - 1
	return h.uncover(cluster, resource)
}

// lastMarker returns the index in staged of the last drop's record of (cluster,
// resource) or of cluster, -1 if the commit has none.
func (h *historyTx) lastMarker(cluster, resource string) int {
	i, ok := h.markers[cluster+"\x00"+resource]
	if !ok {
		i = -1
	}
	if j, ok := h.markers[cluster+"\x00"]; ok {
		i = max(i, j)
	}
	return i
}

// uncover deletes the coverage of (cluster, resource), of every resource of cluster if
// resource is "", and then the change logs that the cluster's records were imported
// from too (originsKey): what follows is not what came with it.
func (h *historyTx) uncover(cluster, resource string) error {
	prefix := indexPrefix(indexCoverage, cluster, resource, "")
	if resource != "" {
		return h.index.Delete(prefix)
	}
	if err := h.index.Delete(originsKey(cluster)); err != nil {
		return err
	}
	prefix = prefix[:len(prefix)-1] // without the empty resource
	var keys [][]byte
	c := h.index.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := h.index.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// cover records, if it is not recorded yet, that the log holds every change of
// (cluster, resource) after resourceVersion from, as of the record after seq: the
// resource's stored resourceVersion before the commit, or the first checkpoint's of a
// resource that was not stored. A resourceVersion that is not an integer ends the
// coverage.
func (h *historyTx) cover(cluster, resource string, from []byte, seq uint64) error {
	key := indexPrefix(indexCoverage, cluster, resource, "")
	n, ok := parseRV(from)
	if !ok {
		return h.index.Delete(key)
	}
	if v := h.index.Get(key); v != nil {
		if len(v) == legacyCoverage {
			// Of a build before coverages were sealed: sealed as it stands.
			from, seq, _ := readCoverage(key, v)
			return h.index.Put(key, coverageValue(key, from, seq))
		}
		return nil
	}
	return h.index.Put(key, coverageValue(key, n, seq))
}

// prune drops the oldest records, those older than the retention and those beyond
// MaxBytes, at most budget of them, and stores the size of the log. The budget keeps a
// commit short after the retention shrank; each commit drops more than it adds.
func (h *historyTx) prune(hist *bolt.Bucket, budget int) error {
	cutoff := h.now.Add(-h.opts.Retention).UnixNano()
	type pruned struct {
		seq     []byte
		indexes [][]byte
	}
	var drop []pruned
	// coverage raises the coverage of the resources whose records are dropped.
	coverage := make(map[string]uint64)
	c := h.changes.Cursor()
	for k, v := c.First(); k != nil && len(drop) < budget; k, v = c.Next() {
		t, _ := recordTime(v)
		if t >= cutoff && h.bytes <= uint64(h.opts.MaxBytes) {
			break
		}
		p := pruned{seq: bytes.Clone(k)}
		size := uint64(len(k) + len(v))
		if r, err := parseRecord(binary.BigEndian.Uint64(k), v); err == nil && len(k) == 8 {
			// A record that does not parse is dropped without its index keys, which
			// the reads skip as they find no record.
			if len(r.key) > 0 {
				ok := append(indexPrefix(indexObject, string(r.cluster), string(r.resource), string(r.key)), k...)
				p.indexes = append(p.indexes, ok)
				size += uint64(len(ok))
			}
			rk := append(indexPrefix(indexResource, string(r.cluster), string(r.resource), ""), k...)
			p.indexes = append(p.indexes, rk)
			size += uint64(len(rk))
			if n, ok := parseRV(r.rv); ok {
				size += 8
				ck := string(indexPrefix(indexCoverage, string(r.cluster), string(r.resource), ""))
				coverage[ck] = max(coverage[ck], n)
			}
		}
		h.bytes -= min(h.bytes, size)
		drop = append(drop, p)
	}
	for _, p := range drop {
		if err := h.changes.Delete(p.seq); err != nil {
			return err
		}
		for _, k := range p.indexes {
			if err := h.index.Delete(k); err != nil {
				return err
			}
		}
	}
	for ck, n := range coverage {
		v := h.index.Get([]byte(ck))
		if v == nil {
			continue
		}
		// A damaged coverage stays as it is: the reads that reach it fail, and Verify
		// reports it.
		from, seq, err := readCoverage([]byte(ck), v)
		if err != nil || from >= n {
			continue
		}
		if err := h.index.Put([]byte(ck), coverageValue([]byte(ck), n, seq)); err != nil {
			return err
		}
	}
	return putUint64(hist, keyBytes, h.bytes)
}

// pruneBudget is how many records a commit that added n may drop.
func pruneBudget(n int) int { return max(2*n, 1024) }

// finish ends the commit's writes to the log: the retention, and the size of the log.
func (h *historyTx) finish(tx *bolt.Tx) error {
	if h == nil {
		return nil
	}
	if err := h.flush(); err != nil {
		return err
	}
	hist := tx.Bucket(bucketHistory)
	if h.mode != historyOn {
		return putUint64(hist, keyBytes, h.bytes)
	}
	return h.prune(hist, pruneBudget(h.appended))
}

// logGroup stages the records of a resource's changes, recs, in the transaction that
// writes them to objects, before it does (whether an upsert adds or modifies is read
// from objects), and the coverage of the resource; flush appends them at the end of the
// transaction. rb is the resource's bucket, which holds its resourceVersion before the
// commit.
func (h *historyTx) logGroup(rb, objects *bolt.Bucket, cluster, resource string, gb *groupBatch, recs []prepared, sealed bool) error {
	// A resource that was not stored is covered from its first checkpoint on.
	from := []byte(gb.rv)
	if len(recs) > 0 {
		from = []byte(recs[0].e.rv)
	}
	if gb.lost {
		from = []byte(gb.rv)
		if err := h.marker(ChangeLost, cluster, resource, gb.rv); err != nil {
			return err
		}
	} else if prev := rb.Get(keyRV); prev != nil {
		from = prev
		if sealed {
			from, _ = unsealBytes(rvSum(cluster, resource), string(keyRV), prev)
		}
	}
	h.covers = append(h.covers, coverage{cluster: cluster, resource: resource, from: bytes.Clone(from), marker: h.lastMarker(cluster, resource)})
	// exists says whether an object is stored, as of the records so far.
	var exists map[string]bool
	var t int64
	for _, p := range recs {
		e := p.e
		typ := e.typ
		if typ == 0 {
			there, known := exists[e.key]
			if !known {
				there = objects.Get(bytesOf(e.key)) != nil
			}
			typ = ChangeModified
			if !there {
				typ = ChangeAdded
			}
		}
		if exists == nil {
			exists = make(map[string]bool, len(recs))
		}
		exists[e.key] = typ == ChangeAdded || typ == ChangeModified
		// Within a resource, times do not decrease, whatever the wall clock does.
		t = max(t, e.time.UnixNano())
		h.add(p.v, typ, t, cluster, resource, e.key, e.rv)
	}
	return nil
}

// records are the change log records of a batch, made before its transaction, in one
// buffer: bbolt keeps the values it is given until the commit. The buffer is the Store's
// (recordBuf), reused by the next commit: a commit of 60 changed pods allocated 0.4 MB
// less, which the collector would have paid for across the whole heap
// (BenchmarkSteadyCommit).
type records struct {
	buf     []byte
	byGroup map[*groupBatch][]prepared
}

// maxRecordBuf is the largest record buffer that the Store keeps for the next commit: a
// cold start's first commit would keep its whole log's worth.
const maxRecordBuf = 4 << 20

// prepared is a record made for a log entry, at buf[off:end] and then v.
type prepared struct {
	e        *logEntry
	off, end int
	v        []byte
}

// prepare makes the records of gb's log. list is what the commit stores of gb's
// objects: the record of an object's last change takes its encoding from there, and
// only the changes that the pending state coalesced away are encoded again.
func (r *records) prepare(enc *cborEncoder, cluster string, resource ResourceKey, gb *groupBatch, list []op, sealed bool, dicts map[uint64]*dictionary) {
	if r.byGroup == nil {
		r.byGroup = make(map[*groupBatch][]prepared)
	}
	secret := isSecret(resource)
	var stored map[string][]byte
	out := make([]prepared, 0, len(gb.log))
	if len(r.buf) == 0 {
		// One allocation for the batch's records, most of which are an encoding of
		// about the size of the stored one.
		size := 0
		for _, o := range list {
			size += len(o.value) + 64
		}
		r.buf = slices.Grow(r.buf, size+len(gb.log)*(64+len(cluster)+len(resource)))
	}
	for i := range gb.log {
		e := &gb.log[i]
		var object []byte
		switch {
		case e.typ != 0 || secret:
		case e.st.encoded != nil:
			object = e.st.encoded
			if first(object) == formatDict {
				if d, err := dictionaryOf(object); err == nil {
					dicts[d.id] = d
				} else {
					object = nil
				}
			}
		case e.st.obj != nil && gb.changes[e.key].obj == e.st.obj:
			if stored == nil {
				stored = make(map[string][]byte, len(list))
				for _, o := range list {
					stored[string(o.key)] = o.value
				}
			}
			object = stored[e.key]
			if sealed && len(object) >= sealSize {
				object = object[sealSize:]
			}
		case e.st.obj != nil:
			// A state that a later change of the object replaced: encoded for the
			// log alone. One that does not encode is recorded without its object.
			object, _ = enc.encodeObject(e.st.obj)
		}
		off := len(r.buf)
		r.buf = appendRecord(r.buf, cluster, string(resource), e.key, e.rv, e.objectRV, 0, object)
		out = append(out, prepared{e: e, off: off, end: len(r.buf)})
	}
	r.byGroup[gb] = out
}

// seal takes the records out of the buffer, once it has all of them.
func (r *records) seal() {
	for _, recs := range r.byGroup {
		for i := range recs {
			recs[i].v = r.buf[recs[i].off:recs[i].end:recs[i].end]
		}
	}
}

// of returns the records of gb.
func (r *records) of(gb *groupBatch) []prepared { return r.byGroup[gb] }
