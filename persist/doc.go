// Package persist keeps the fleet's snapshot in a bbolt file, so that a restart is warm.
//
// A Store is the file. Open checks it, migrates it, and moves it aside if it cannot be
// read; Load returns its content as a Snapshot: per cluster, the cluster's Identity, and
// per resource the objects and the resourceVersion they were current at. LoadEach hands
// the same out one cluster at a time, decoding the next while the caller takes one, and
// with LoadOptions.Partial only what files each object, with its stored encoding for a
// fleet that keeps encodings. A Writer,
// created by Store.NewWriter, is fed the informers' changes (Upsert, Delete) and
// checkpoints (Checkpoint), and commits them in batches. For each (cluster, resource),
// the stored objects and the stored resourceVersion are written in the same transaction,
// so the objects are always the informer's state at that resourceVersion, whenever the
// process dies. ExportCluster writes what the file holds of one cluster as a stream, its
// values sealed as stored, and ImportCluster checks such a stream whole and puts it in place
// of what another file holds of that cluster, in one transaction: a cluster handed over
// between replicas resumes from the resourceVersions of its old owner. Compact rewrites the file without the free pages in which bbolt keeps
// what was deleted. Inspect and Verify serve the snapshot tool commands.
//
// A resource, here, is what a ResourceKey names: a resource such as "/v1/pods", or the
// part of it that one informer watches, such as "/v1/pods?ns=shop". Each key has its
// own resourceVersion and is its own unit of consistency.
//
// This package knows nothing about HTTP, config files or the other fleetwatch packages:
// its callers translate. Identity converts to and from cluster.Identity, and an
// informer.Scope's String is a ResourceKey.
//
// # Layout
//
// Schema version 7:
//
//	meta/
//	  version -> uint64, big-endian: the schema version
//	  created -> uint64, big-endian: creation time, Unix nanoseconds
//	  compact -> present while the file must be compacted before use (see below)
//	  sum     -> uint32, big-endian: CRC-32C of "meta", version and created
//	dictionaries/                  once a value uses one (format 6)
//	  <id> -> a compression dictionary (dict.go); the id, 8 bytes, is the start of
//	          the SHA-256 of the value
//	clusters/
//	  <cluster name>/
//	    identity -> sealed JSON {"uid": <kube-system namespace UID>, "server": <server URL>}
//	    resources/
//	      <resource key>/          "group/version/resource[?qualifier]", "/v1/pods"
//	        rv -> the sealed resourceVersion the objects are current at
//	        objects/
//	          <namespace>/<name> -> the sealed encoded object
//	          <namespace>/<name> 0 -> sealed: the sequence numbers of the object's
//	                                  newest records in the change log (its list)
//	history/                       the change log
//	  bytes  -> uint64, big-endian: the size of its records and index keys
//	  changes/                     in the order of the bucket's sequence
//	    <seq, 8 bytes big-endian> -> a sealed record
//	  index/
//	    'o' <cluster> <resource> <namespace/name> <seq> -> empty: one object's records
//	                                     that its list does not name
//	    'r' <cluster> <resource> <seq> -> the record's resourceVersion as a uint64
//	                                     (8 bytes), or empty if it is none or not one
//	    'c' <cluster> <resource> -> sealed: from resourceVersion, from seq (8 bytes
//	                                each): the log holds every change of the
//	                                resource after that resourceVersion, in its
//	                                records after that seq
//	    'g' <cluster> -> sealed: the seq that the cluster's import starts after (8
//	                     bytes), then the change logs (Store.ID) whose records of the
//	                     cluster came with it (ClusterSnapshot.LogOrigins)
//
// A sealed value is the byte 3, the CRC-32C of the names of its buckets below clusters,
// its key and the value, big-endian, then the value (seal.go). Cluster and resource
// buckets hold nothing else. Before bbolt reads the file, Open checks its page structure
// (pages.go).
//
// In the index, a cluster, a resource and an object key are each a uvarint length and
// the bytes: a prefix of them selects its records. A record is sealed as a value is,
// its path "history", "changes": the byte 1 (the record's format), its type
// (ChangeType), its time (int64 Unix nanoseconds, big-endian, never less than the
// record before it), the cluster, resource, object key, the checkpoint's and the
// object's resourceVersions (each a uvarint length and the bytes; the object key and
// resource empty in the records of a resource's or a cluster's drop), and for an added
// or modified object other than a Secret, its stored encoding, the bytes the objects
// bucket holds after the seal, compressed (formatCompressed) where S2 shortens an
// encoding that is not by an eighth. A Secret's record never holds its encoding.
//
// A commit appends the records of its changes in the order the Writer was handed them
// per resource, and then drops the oldest: those older than HistoryOptions.Retention,
// and while the log is larger than HistoryOptions.MaxBytes, at most pruneBudget of
// them, so that a commit stays short. Open and Load do not read the log; Verify checks
// every record. A record that does not pass its seal fails the reads that reach it with
// ErrCorrupt, naming it, and is dropped with the oldest ones as any record: the file is
// not moved aside for it, since the snapshot's objects are sound. A 'g' entry is sealed
// as a record is (its path "history", "index"); it stands while a coverage of the
// cluster starts after its seq, and goes with the cluster's drop, replacement or next
// import, or the log's deletion. One that does not pass its seal, or whose coverage is
// gone (a build before 'g' entries, which neither reads nor deletes them, dropped the
// cluster), is not returned by Load; Verify reports the former. Neither needs a schema
// version: a build before them ignores them. A 'c' entry is sealed the same way: one
// that does not pass its seal fails the resumes of its resource with ErrCorrupt (a
// coverage that says what the log does not hold would make a resume skip changes), and
// Verify reports it. A build before the seal wrote the 16 bytes alone: such an entry is
// read as it is and sealed by the next commit of its resource; a build before the seal
// reads a sealed one as no coverage, so that its resumes get ErrTooOld (and its Verify
// reports the entry as malformed).
//
// A Writer's commit names the records of an object in the object's list, beside the
// object in its objects bucket, rather than in 'o' entries: the commit writes that leaf
// anyway, where an 'o' entry was a leaf of the index at a random place per change
// (history_lists.go). A list holds at most 32; the oldest beyond that go to 'o'
// entries, and so does the whole list when its object is deleted or vanishes, or its
// resource or cluster is dropped, replaced or imported over. Each record of an object
// is named by its list or by an 'o' entry, never both; ObjectHistory reads both. A list
// is sealed as an object is (its path the object's and "history"), its value the
// sequence numbers, 8 bytes each, increasing; a read checks each record it names, as
// for an 'o' entry. The log's sequence never starts over in a file, so that a list
// that outlived its log (switched off) names no record of the next. No object key holds
// a 0 byte (the Writer refuses one, as ImportCluster does a state with one), and Load,
// ExportCluster and Inspect skip the lists. A build before lists takes a file that holds
// one for a damaged one, as it does an object format it does not know: it moves the
// file aside and starts cold.
//
// The 'o' and 'r' entries are not sealed: a read checks each entry that leads it to a
// record against the record, which is (history_index.go): the record must be of the
// entry's cluster, resource and object key, at the resourceVersion of an 'r' entry, and
// must be there unless it is before the log's first record (the retention drops one that
// does not parse without its entries, which it cannot name). An entry that does not
// match is ErrCorrupt, naming it, for the read: a resume (ChangesAfter, ChangesSince,
// which check the entry that ends their range too) fails rather than skip or repeat a
// change, and the server answers 410; a query (Changes of clusters, ObjectHistory)
// fails as it does at a damaged record. An entry lost, or moved to another resource or
// object, is not seen by the reads of its resource or object, which would have to scan
// the log for it: Verify checks the index whole, each entry against its record and each
// record for its entries. Open and Load do not read the index, and need not: the
// snapshot's objects do not depend on it. Nothing repairs it: the index is rebuilt as
// the retention drops the records it names, or with the log (history off, then on).
//
// A cluster-scoped object's key has an empty namespace: "/node-1". The first byte of an
// object's encoding, within its seal, says what it decodes to: the head of a CBOR map
// (0xa0 to 0xbf) is an *unstructured.Unstructured, its Object map in CBOR; 2 is a
// *metav1.PartialObjectMetadata (a resource cached metadata-only) in CBOR; 3 is one as
// the CBOR of the map of the apiserver's JSON of it, and 4 one in package metaenc's short
// encoding (member tags, varints, a uid in 16 bytes, integer resourceVersions and
// timestamps where exact), which the informers of a compact fleet write (both decoded
// without TypeMeta; 4 where it holds the object exactly, 3 otherwise, as with
// managedFields kept). Builds before 3 and 4 were added take a file that holds either
// for a damaged one: they move it aside and start cold, losing nothing but the warm
// start. A file of a build before them loads as ever. 5 is any of these compressed as
// one S2 block (Codec.Compress), which a build before it takes for damage in the same
// way; 6 is one of them compressed with a dictionary of its resource (Codec.Dictionary),
// the dictionary's id, 8 bytes, after the 6 (dict.go). Version 1
// wrote 1 before the map of an unstructured object; version 2 reads that too, and its
// migration changes nothing else (see codec.go). Version 4 seals the values that the
// versions before it wrote.
//
// A resource bucket always has both rv and objects; a resource that is not stored has no
// bucket. A file without any bucket is version 0, and is laid out by the first
// migration. Each later change of the layout is a migration appended to the list in
// schema.go, with a test. Version 3 drops the stored Secrets that hold values, which
// versions 1 and 2 kept in the last-applied annotation of kubectl apply (migrateToV3).
// Version 5 drops the stored StatefulSets, which earlier builds took from protobuf
// without their volumeClaimTemplates' apiVersion and kind (migrateToV5). Version 6 drops
// the stored CSINodes, which earlier builds stored with a status of {} that an apiserver
// before Kubernetes 1.37 does not serve (migrateToV6). Version 7 adds the change log,
// empty (migrateToV7).
//
// bbolt keeps what a transaction deletes in the file's free pages until they are
// reused. A migration that deletes what must not stay in the file at all (values of
// Secrets) sets meta/compact in its transaction, and Open then rewrites the file without
// its free pages and renames the copy over it: a file with meta/compact, left by a crash
// in between, is compacted by the next Open.
//
// Of fleetwatch it imports only internal/intern: it knows nothing of clusters as the
// cluster package has them, of informers, of the fleet or of HTTP.
package persist
