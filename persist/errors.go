package persist

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them (or an error of the
// operating system), so callers test with errors.Is; the message around it says what
// exactly was wrong and names the file.
var (
	// ErrLocked means another process holds the snapshot file. Open gives up after
	// Options.LockTimeout instead of waiting for it.
	ErrLocked = errors.New("persist: snapshot file is locked by another process")

	// ErrCorrupt means the file, or an object in it, could not be read. Open and Load
	// of a writable Store do not return it: they move the file aside and start an empty
	// one (see Store.Recovered). A read-only Store, Verify and decoding return it.
	ErrCorrupt = errors.New("persist: snapshot is corrupt")

	// ErrSchemaTooNew means the file was written by a newer fleetwatch, with a schema
	// version this binary does not know. The file is left as it is.
	ErrSchemaTooNew = errors.New("persist: snapshot schema is newer than this binary")

	// ErrSchemaTooOld means a read-only Store found a file that needs a migration, which
	// only a writable Store performs.
	ErrSchemaTooOld = errors.New("persist: snapshot schema needs a migration")

	// ErrNotSnapshot means the file is a bbolt database, but not a fleetwatch snapshot.
	// It is left as it is.
	ErrNotSnapshot = errors.New("persist: file is not a fleetwatch snapshot")

	// ErrReadOnly means a write was attempted on a Store opened with Options.ReadOnly.
	ErrReadOnly = errors.New("persist: snapshot is open read-only")

	// ErrStarted means Writer.Start was called twice.
	ErrStarted = errors.New("persist: writer already started")

	// ErrClosed means the Store has been closed.
	ErrClosed = errors.New("persist: snapshot is closed")

	// ErrTooOld means that the change log does not hold every change asked for
	// (Store.ChangesAfter): a watch cannot resume from it, and lists again.
	ErrTooOld = errors.New("persist: the change log does not reach back that far")

	// ErrInvalid means a cluster name, resource key or object cannot be stored: an empty
	// cluster name, a key that ParseResourceKey rejects, an object of another type than
	// *unstructured.Unstructured or *metav1.PartialObjectMetadata, or an object without
	// a name; or Compact is called on a Store that has a Writer.
	ErrInvalid = errors.New("persist: invalid argument")
)
