package aggregate

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them, so callers test with
// errors.Is; the message around it says what exactly was wrong.
var (
	// ErrInvalidKey means a key, or the name of an object, does not have the form
	// cluster/namespace/name with a non-empty cluster and name.
	ErrInvalidKey = errors.New("aggregate: invalid key")

	// ErrNoMetadata means an object does not carry ObjectMeta (meta.Accessor failed).
	ErrNoMetadata = errors.New("aggregate: object has no metadata")

	// ErrUnknownIndex means no index has the given name.
	ErrUnknownIndex = errors.New("aggregate: unknown index")

	// ErrIndexExists means an index with the given name already exists. The built-in
	// index names are always taken.
	ErrIndexExists = errors.New("aggregate: index already exists")

	// ErrInvalidIndexer means an index function is nil.
	ErrInvalidIndexer = errors.New("aggregate: invalid indexer")

	// ErrInvalidIndexValue means an indexed value does not have the form the built-in
	// index requires (cluster/namespace for IndexClusterNamespace, key=value for
	// IndexLabel).
	ErrInvalidIndexValue = errors.New("aggregate: invalid index value")

	// ErrTypeMismatch means the objects of a resource cannot be read as the type of a
	// TypedLister: the scheme does not register the type in the resource's group and
	// version, or a cached object is of another kind, is metadata-only, or does not
	// convert.
	ErrTypeMismatch = errors.New("aggregate: object does not convert to the lister's type")

	// ErrPartialObject means a partial object (ClusterStore.ApplyPartial) went to a
	// fleet that is not compact, or came without its encoding.
	ErrPartialObject = errors.New("aggregate: partial object to a fleet that keeps whole ones")

	// ErrStoreRemoved means a write went to a ClusterStore whose cluster or resource has
	// been removed from the fleet. Ask the Fleet for a new ClusterStore.
	ErrStoreRemoved = errors.New("aggregate: cluster store removed")

	// ErrInvalidHandler means AddHandler was given a nil Handler or invalid options.
	ErrInvalidHandler = errors.New("aggregate: invalid handler")

	// ErrStopped means the Fleet's Start has returned; no handler runs any more.
	ErrStopped = errors.New("aggregate: fleet stopped")

	// ErrAlreadyStarted means Start was called twice.
	ErrAlreadyStarted = errors.New("aggregate: fleet already started")

	// ErrShutdownTimeout means some handlers were still inside OnEvent when the
	// shutdown timeout expired.
	ErrShutdownTimeout = errors.New("aggregate: handlers did not stop in time")
)
