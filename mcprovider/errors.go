package mcprovider

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them, so callers test with
// errors.Is; the message around it says what exactly was wrong. Reads of a kind the fleet
// does not cache fail with controller-runtime's cache.ErrResourceNotCached, and Get of a
// cluster that is not engaged with multicluster.ErrClusterNotFound, as their callers
// expect.
var (
	// ErrAlreadyStarted means Start was called twice.
	ErrAlreadyStarted = errors.New("mcprovider: provider already started")

	// ErrShared means an operation would change what every cluster and every reader
	// share: an informer's indexers (use IndexField, which indexes the fleet) or its
	// removal (change the fleetwatch Manager's resources).
	ErrShared = errors.New("mcprovider: the fleet's informers are shared")
)
