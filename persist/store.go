package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"k8s.io/utils/clock"
)

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// LockTimeout is how long Open waits for another process to release the file before
	// it fails with ErrLocked. Default: 1s.
	LockTimeout time.Duration

	// ReadOnly opens an existing file for reading only, as the snapshot inspect and
	// verify commands do. It takes a shared lock, so it fails with ErrLocked while a
	// daemon has the file open. It never creates, migrates or moves the file: what a
	// writable Store would recover from is an error wrapping ErrCorrupt.
	ReadOnly bool

	// Clock gives the creation time of a new file and the time in the name of a file
	// moved aside. Default: the real clock.
	Clock clock.PassiveClock

	// KeepCorrupt is how many files moved aside ("<path>.corrupt-<time>") are kept: each
	// move deletes the oldest beyond it. Default (0): DefaultKeepCorrupt. A negative
	// value keeps none: an unreadable file is deleted instead of moved.
	KeepCorrupt int

	// maxSize, when positive, is bbolt's Options.MaxSize: a commit that would grow the
	// file beyond it fails. Tests use it to fail commits the way a full disk does.
	maxSize int
	// migrations replaces the package's list of migrations, for tests.
	migrations []migration
}

// DefaultKeepCorrupt is the default of Options.KeepCorrupt.
const DefaultKeepCorrupt = 3

func (o Options) withDefaults() Options {
	if o.KeepCorrupt == 0 {
		o.KeepCorrupt = DefaultKeepCorrupt
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.migrations == nil {
		o.migrations = migrations
	}
	return o
}

// Store is the snapshot file. Its methods are safe for concurrent use. Writes go through
// a Writer (NewWriter), which batches them; SetIdentity, DropCluster and DropResource
// commit at once.
type Store struct {
	path string
	opts Options

	// mu guards db, file, closed, movedTo and recoverCause. Operations hold it for
	// reading as long as they use db; Close and the recovery of Load hold it for writing.
	mu sync.RWMutex
	db *bolt.DB
	// file is db's file, closed by itself if db does not close after a panic.
	file         *os.File
	closed       bool
	movedTo      string
	recoverCause error

	// poisoned is set when bbolt panicked while db was open; see closeAfterPanic.
	poisoned atomic.Bool

	// commitMu serializes commits, so that batches reach the file in the order in which
	// they were taken. It also guards writer and recordBuf.
	commitMu sync.Mutex
	writer   *Writer
	// recordBuf is the buffer of the last commit's change log records, which the next
	// reuses (records.prepare): bbolt holds the values it is given only until the
	// commit ends.
	recordBuf []byte
}

// Open opens the snapshot file at path, creating it with mode 0600 if it does not exist,
// and migrates it to the schema version of this binary. A writable Store takes from an
// existing file any permission beyond 0600: the objects may be Secrets.
//
// A file that cannot be read (truncated, garbage, empty, a bad page, a malformed bucket
// tree) is moved aside as "<path>.corrupt-<UTC time>", mode 0600, and an empty snapshot
// takes its place; Recovered says so. Of the files moved aside, the newest
// Options.KeepCorrupt are kept. Open checks the page structure of the whole file before
// bbolt reads it (see checkPages), and the bucket tree down to each resource: whatever
// the bytes of the file, Open and Load neither crash nor hand out what the file does not
// hold. Load decodes the objects and recovers in the same way from what those checks
// cannot see, an object that does not decode.
//
// Open fails, and leaves the file as it is, when another process holds it (ErrLocked,
// after Options.LockTimeout), when its schema version is newer than this binary's
// (ErrSchemaTooNew), when it is a bbolt file of something else (ErrNotSnapshot), and on
// errors of the file system such as a missing directory or a permission denied.
func Open(path string, opts Options) (*Store, error) {
	s := &Store{path: path, opts: opts.withDefaults()}
	db, file, err := s.openDB()
	if errors.Is(err, ErrCorrupt) && !s.opts.ReadOnly {
		db, file, err = s.replaceCorrupt(err)
	}
	if err != nil {
		return nil, err
	}
	s.db, s.file = db, file
	return s, nil
}

// Path returns the path of the file.
func (s *Store) Path() string { return s.path }

// ID identifies the file: its creation time (meta/created) in base 36, which its
// migrations and compactions keep. A file moved aside and started again has another.
// The server's cursors carry it, so that a watch of another file is told apart.
func (s *Store) ID() (string, error) {
	var id string
	err := s.view(func(tx *bolt.Tx) (err error) {
		id, err = storeID(tx)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("reading the identity of snapshot %s: %w", s.path, err)
	}
	return id, nil
}

// storeID returns the ID of the file that tx reads.
func storeID(tx *bolt.Tx) (string, error) {
	meta := getMetaBucket(tx)
	if meta == nil {
		return "", fmt.Errorf("%w: no %q bucket", ErrCorrupt, bucketMeta)
	}
	created, ok := getUint64(meta, keyCreated)
	if !ok {
		return "", fmt.Errorf("%w: no creation time", ErrCorrupt)
	}
	return strconv.FormatUint(created, 36), nil
}

// Recovered reports whether Open or Load found the file unreadable (cause, which wraps
// ErrCorrupt, says why), moved it to movedTo and started an empty snapshot in its place.
// The daemon logs it once and starts cold. cause is nil if nothing was recovered from;
// movedTo is "" if nothing was moved, or if the file was deleted (a negative
// Options.KeepCorrupt).
func (s *Store) Recovered() (movedTo string, cause error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.movedTo, s.recoverCause
}

// Close closes the file. Stop the Writer first (cancel the context of its Start and
// wait for Start to return): later commits fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.closeDBLocked()
}

// closeDBLocked closes db. s.mu is held for writing.
func (s *Store) closeDBLocked() error {
	var err error
	if s.poisoned.Load() {
		err = closeAfterPanic(s.db, s.file)
	} else {
		err = s.db.Close()
	}
	if err != nil {
		return fmt.Errorf("closing snapshot %s: %w", s.path, err)
	}
	return nil
}

// closeAfterPanicTimeout bounds closeAfterPanic.
const closeAfterPanicTimeout = 5 * time.Second

// closeAfterPanic closes a database in which bbolt panicked. The panics seen on bad
// pages happen inside View and Update, whose deferred rollback releases bbolt's locks, so
// Close works. Should bbolt have panicked holding a lock without a deferred release,
// Close would wait forever: then the file is closed by itself, and the lock stays held
// by the mapping of the file until the process exits.
func closeAfterPanic(db *bolt.DB, file *os.File) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("closing panicked: %v", r)
			}
		}()
		done <- db.Close()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(closeAfterPanicTimeout):
		file.Close()
		return errors.New("bbolt did not close after a panic; the file stays mapped")
	}
}

// errEmptyFile and errLockTimeout are translated to ErrCorrupt and ErrLocked by openDB.
var (
	errEmptyFile   = errors.New("the file is empty")
	errLockTimeout = errors.New("lock timeout")
)

// badPagesError is what checkPages found wrong, translated to ErrCorrupt by openDB.
type badPagesError struct{ err error }

func (e badPagesError) Error() string { return e.err.Error() }

// openDB opens the file with bbolt and checks or migrates it. Faults and panics of bbolt
// on a bad page become ErrCorrupt.
func (s *Store) openDB() (db *bolt.DB, file *os.File, err error) {
	var created bool
	ro := s.opts.ReadOnly
	bopts := &bolt.Options{
		Timeout:  s.opts.LockTimeout,
		ReadOnly: ro,
		// Every commit rewrites the pages of the objects that changed, so in a file of
		// hundreds of megabytes the freelist is long and fragmented; the hashmap freelist
		// allocates in constant time where the array one scans.
		FreelistType: bolt.FreelistMapType,
		// NoFreelistSync stays off. It would save writing the freelist once per commit,
		// which at one commit per interval is little, but every Open would then rebuild
		// the freelist by walking the whole file in a goroutine of bbolt's own, where a
		// bad page panics beyond any recover and takes the process down.
		NoFreelistSync: false,
		MaxSize:        s.opts.maxSize,
		// A map as large as the file will grow is made once: bbolt remaps as the file
		// grows, doubling from 32 KiB, and each remap in a commit first copies every key
		// and value that the commit's nodes point at out of the old map (68 MB of garbage
		// in the first commit of a cold start of 1,000 small clusters), and waits for
		// the read transactions to end. The map reserves address space only.
		InitialMmapSize: initialMapSize(ro),
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, fi, err := openLocked(name, flag, perm, !ro, s.opts.LockTimeout)
			if err != nil {
				return nil, err
			}
			if mode := fi.Mode().Perm(); !ro && mode&^0o600 != 0 {
				if err := f.Chmod(mode & 0o600); err != nil {
					f.Close()
					return nil, fmt.Errorf("taking the permissions beyond 0600 from %s (mode %v): %w", name, mode, err)
				}
			}
			created = fi.created
			// An empty file that another process created is one that it did not get to
			// initialize, since it holds the lock from creation to initialization.
			if fi.Size() == 0 && !fi.created {
				f.Close()
				return nil, errEmptyFile
			}
			if fi.Size() > 0 {
				if err := checkPages(f, fi.Size()); err != nil {
					f.Close()
					return nil, badPagesError{err}
				}
			}
			file = f
			return f, nil
		},
	}

	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				_ = closeAfterPanic(db, file)
			} else if file != nil {
				// bolt.Open panicked (reading the freelist) and did not return db, so its
				// mapping of the file, which holds the lock too, stays until the process
				// exits. The file is moved aside; the new one has a lock of its own.
				file.Close()
			}
			db, file, err = nil, nil, fmt.Errorf("%w: %s: reading the file panicked: %v", ErrCorrupt, s.path, r)
		}
	}()
	db, err = bolt.Open(s.path, 0o600, bopts)
	if err != nil {
		return nil, nil, s.openError(err)
	}
	setGrowth(db)
	if err := s.prepare(db, file); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("snapshot %s: %w", s.path, err)
	}
	if created {
		syncDir(filepath.Dir(s.path))
	}
	if !s.opts.ReadOnly {
		var compact bool
		_ = db.View(func(tx *bolt.Tx) error { compact = needsCompaction(tx); return nil })
		if compact {
			cdb, cfile, err := s.compact(db)
			if err != nil {
				db.Close()
				return nil, nil, err
			}
			return cdb, cfile, nil
		}
	}
	return db, file, nil
}

// Compact rewrites the file without its free pages, in which bbolt keeps what was
// deleted until it reuses them: afterwards, nothing deleted from the snapshot (the
// values of Secrets in a resource that DropResource dropped, for one) is left in the
// file. It copies the live content, which takes about as long as a Load, and must be
// called before NewWriter. A crash in the middle leaves the file as it was, marked for
// the next Open to compact (CompactAtNextOpen).
func (s *Store) Compact() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if s.writer != nil {
		return fmt.Errorf("%w: compacting snapshot %s: it has a Writer", ErrInvalid, s.path)
	}
	if err := s.CompactAtNextOpen(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	var db *bolt.DB
	var file *os.File
	err := s.guard(func() error {
		var err error
		db, file, err = s.compact(s.db)
		return err
	})
	if err != nil {
		return err
	}
	s.db, s.file = db, file
	return nil
}

// CompactAtNextOpen marks the file so that the next Open compacts it (see Compact),
// for what is deleted while a Writer runs.
func (s *Store) CompactAtNextOpen() error {
	return s.update(func(tx *bolt.Tx) error { return getMetaBucket(tx).Put(keyCompact, []byte{1}) })
}

// compact rewrites the file of db without its free pages, and returns the new file,
// opened and locked; db is closed then. It copies the file's content to
// "<path>.compact", deletes meta/compact there, and renames it over the file. A crash
// before the rename leaves the old file, with meta/compact, for the next Open to
// compact; a file left at "<path>.compact" is overwritten then. If compact fails, db
// stays open and the file as it was.
func (s *Store) compact(db *bolt.DB) (_ *bolt.DB, _ *os.File, err error) {
	tmp := s.path + ".compact"
	defer func() {
		if err != nil {
			os.Remove(tmp)
			err = fmt.Errorf("compacting snapshot %s: %w", s.path, err)
		}
	}()
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	var file *os.File
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{
		Timeout:         s.opts.LockTimeout,
		FreelistType:    bolt.FreelistMapType,
		MaxSize:         s.opts.maxSize,
		InitialMmapSize: initialMapSize(false),
		OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
			f, _, err := openLocked(name, flag, perm, true, s.opts.LockTimeout)
			file = f
			return f, err
		},
	})
	if err != nil {
		return nil, nil, err
	}
	setGrowth(dst)
	err = bolt.Compact(dst, db, compactTxSize)
	if err == nil {
		err = dst.Update(func(tx *bolt.Tx) error { return getMetaBucket(tx).Delete(keyCompact) })
	}
	if err == nil {
		err = os.Rename(tmp, s.path)
	}
	if err != nil {
		dst.Close()
		return nil, nil, err
	}
	syncDir(filepath.Dir(s.path))
	// The old file is no longer the snapshot: closing it releases its lock, and a process
	// waiting for it finds the new file (openLocked), locked by dst. An error closing it
	// concerns a file that is gone.
	_ = db.Close()
	return dst, file, nil
}

// compactTxSize bounds the size of each transaction of a compaction, so that it does not
// hold a whole large file in memory.
const compactTxSize = 64 << 20

// openedFile describes a file that openLocked opened.
type openedFile struct {
	os.FileInfo
	// created is set if openLocked created the file.
	created bool
}

// openLocked opens the file at name and locks it. If flag has O_CREATE, it tells
// whether it created the file. If the file was moved aside while openLocked waited for
// the lock (by the process that held it), it opens the file that is at name now, so that
// it never works on a file that is no longer the snapshot.
func openLocked(name string, flag int, perm os.FileMode, exclusive bool, timeout time.Duration) (*os.File, openedFile, error) {
	deadline := time.Now().Add(timeout)
	for {
		f, created, err := openOrCreate(name, flag, perm)
		if err != nil {
			return nil, openedFile{}, err
		}
		if err := lockFile(f, exclusive, time.Until(deadline)); err != nil {
			f.Close()
			return nil, openedFile{}, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, openedFile{}, err
		}
		if now, err := os.Stat(name); err == nil && os.SameFile(fi, now) {
			return f, openedFile{FileInfo: fi, created: created}, nil
		}
		f.Close()
		if !time.Now().Before(deadline) {
			return nil, openedFile{}, errLockTimeout
		}
	}
}

// openOrCreate opens the file at name, and tells whether it created it.
func openOrCreate(name string, flag int, perm os.FileMode) (*os.File, bool, error) {
	if flag&os.O_CREATE == 0 {
		f, err := os.OpenFile(name, flag, perm)
		return f, false, err
	}
	for {
		f, err := os.OpenFile(name, flag|os.O_EXCL, perm)
		if err == nil {
			return f, true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, false, err
		}
		f, err = os.OpenFile(name, flag&^os.O_CREATE, perm)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, false, err
		}
		// Removed in between: try to create it again.
	}
}

// openError translates an error of bolt.Open.
func (s *Store) openError(err error) error {
	var bad badPagesError
	switch {
	case errors.As(err, &bad):
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, s.path, bad.err)
	case errors.Is(err, errLockTimeout), errors.Is(err, berrors.ErrTimeout):
		return fmt.Errorf("%w: %s (gave up after %v)", ErrLocked, s.path, s.opts.LockTimeout)
	case errors.Is(err, errEmptyFile),
		errors.Is(err, berrors.ErrInvalid),
		errors.Is(err, berrors.ErrChecksum),
		errors.Is(err, berrors.ErrVersionMismatch),
		// bbolt has no sentinel for a file shorter than its two meta pages.
		strings.Contains(err.Error(), "file size too small"):
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, s.path, err)
	}
	return fmt.Errorf("opening snapshot %s: %w", s.path, err)
}

// prepare checks the file that bbolt opened and migrates it.
func (s *Store) prepare(db *bolt.DB, file *os.File) error {
	fi, err := file.Stat()
	if err != nil {
		return err
	}
	if err := db.View(func(tx *bolt.Tx) error { return checkSize(tx, fi.Size()) }); err != nil {
		return err
	}
	if s.opts.ReadOnly {
		return db.View(func(tx *bolt.Tx) error {
			if err := checkVersion(tx, s.opts.migrations); err != nil {
				return err
			}
			return checkTree(tx)
		})
	}
	if err := migrate(db, s.opts.migrations, s.opts.Clock.Now()); err != nil {
		return err
	}
	return db.View(checkTree)
}

// replaceCorrupt moves the unreadable file aside, or deletes it, and opens an empty one
// in its place.
func (s *Store) replaceCorrupt(cause error) (*bolt.DB, *os.File, error) {
	var movedTo string
	var err error
	if s.opts.KeepCorrupt < 0 {
		if err = os.Remove(s.path); err == nil {
			pruneCorrupt(s.path, 0)
			syncDir(filepath.Dir(s.path))
		}
	} else {
		movedTo, err = moveAside(s.path, s.opts.Clock.Now(), s.opts.KeepCorrupt)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w; moving it aside failed: %w", cause, err)
	}
	db, file, err := s.openDB()
	if err != nil {
		return nil, nil, fmt.Errorf("starting a new snapshot %s after moving the unreadable one to %s: %w", s.path, movedTo, err)
	}
	s.movedTo, s.recoverCause = movedTo, cause
	return db, file, nil
}

// moveAside renames the file at path to "<path>.corrupt-<UTC time>", with a counter
// above those of the files already moved aside at that time, makes it 0600, deletes the
// oldest of those files beyond the newest keep, and returns the new name.
func moveAside(path string, now time.Time, keep int) (string, error) {
	stamp := now.UTC().Format(corruptTimeFormat)
	last := 0
	for _, f := range corruptFiles(path) {
		if f.stamp == stamp {
			last = max(last, f.counter)
		}
	}
	base := path + ".corrupt-" + stamp
	for i := last + 1; i <= last+100; i++ {
		to := base
		if i > 1 {
			to = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := os.Lstat(to); err == nil {
			continue
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if err := os.Rename(path, to); err != nil {
			return "", err
		}
		if err := os.Chmod(to, 0o600); err != nil {
			return "", err
		}
		pruneCorrupt(path, keep)
		syncDir(filepath.Dir(path))
		return to, nil
	}
	return "", fmt.Errorf("%s and 99 more names are taken", base)
}

// movedFile is a file that moveAside made: its name in the directory of the snapshot,
// and the time and counter in it.
type movedFile struct {
	name    string
	stamp   string
	counter int
}

// corruptFiles returns the files that moveAside made for path, newest first.
func corruptFiles(path string) []movedFile {
	prefix := filepath.Base(path) + ".corrupt-"
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		return nil
	}
	var files []movedFile
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		stamp, n, _ := strings.Cut(rest, "-")
		if _, err := time.Parse(corruptTimeFormat, stamp); err != nil {
			continue // not one of ours
		}
		counter := 1
		if n != "" {
			if counter, err = strconv.Atoi(n); err != nil {
				continue
			}
		}
		files = append(files, movedFile{e.Name(), stamp, counter})
	}
	slices.SortFunc(files, func(a, b movedFile) int {
		if c := strings.Compare(b.stamp, a.stamp); c != 0 {
			return c
		}
		return b.counter - a.counter
	})
	return files
}

// pruneCorrupt deletes the files that moveAside made for path, but the newest keep,
// which it makes 0600 (an older fleetwatch left them with the snapshot's mode). Errors
// are ignored: the files are only kept for a look at what went wrong.
func pruneCorrupt(path string, keep int) {
	files := corruptFiles(path)
	keep = min(max(keep, 0), len(files))
	for _, f := range files[:keep] {
		_ = os.Chmod(filepath.Join(filepath.Dir(path), f.name), 0o600)
	}
	for _, f := range files[keep:] {
		_ = os.Remove(filepath.Join(filepath.Dir(path), f.name))
	}
}

// corruptTimeFormat is the format of the time in the name of a file moved aside.
const corruptTimeFormat = "20060102T150405Z"

// syncDir makes a rename or a creation in dir durable. Errors are ignored: at worst, a
// crash forgets it, as if it had not happened.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// guard runs fn, turning a fault or a panic (bbolt on a bad page) into ErrCorrupt. It
// marks the Store poisoned, for Close.
func (s *Store) guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			s.poisoned.Store(true)
			err = fmt.Errorf("%w: reading the file panicked: %v", ErrCorrupt, r)
		}
	}()
	return fn()
}

// view runs fn in a read transaction.
func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.guard(func() error { return s.db.View(fn) })
}

// update runs fn in a write transaction.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return s.guard(func() error { return s.db.Update(fn) })
}

// fileSize returns the size of the file, or 0 if it cannot be read.
func (s *Store) fileSize() int64 {
	fi, err := os.Stat(s.path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// SetIdentity stores the identity of cluster. If the Store has a Writer, what the
// Writer has ready to commit is committed with it, in the order it arrived.
func (s *Store) SetIdentity(cluster string, id Identity) error {
	if err := validateCluster(cluster); err != nil {
		return err
	}
	return s.commit(func(p *pending) { p.setIdentity(cluster, id) })
}

// DropCluster deletes everything stored about cluster: its identity and its resources.
// With a Writer, it also discards what the Writer holds for cluster, so call it in order
// with the Writer's changes (see Writer.DropCluster).
func (s *Store) DropCluster(cluster string) error {
	if err := validateCluster(cluster); err != nil {
		return err
	}
	return s.commit(func(p *pending) { p.dropCluster(cluster, false) })
}

// DropResource deletes the stored objects and resourceVersion of one resource key of
// cluster. With a Writer, it also discards what the Writer holds for that resource, so
// call it in order with the Writer's changes (see Writer.DropResource).
func (s *Store) DropResource(cluster string, resource ResourceKey) error {
	if err := validateGroup(cluster, resource); err != nil {
		return err
	}
	return s.commit(func(p *pending) { p.dropResource(cluster, resource) })
}

func validateCluster(cluster string) error {
	if cluster == "" {
		return fmt.Errorf("%w: empty cluster name", ErrInvalid)
	}
	return nil
}

func validateGroup(cluster string, resource ResourceKey) error {
	if err := validateCluster(cluster); err != nil {
		return err
	}
	_, err := ParseResourceKey(string(resource))
	return err
}
