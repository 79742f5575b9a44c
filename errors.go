package fleetwatch

import "errors"

// Sentinel errors. Errors returned by this package wrap one of them, so callers test with
// errors.Is; the message around it says what exactly was wrong.
var (
	// ErrAlreadyStarted means Start was called twice, or Add after Start.
	ErrAlreadyStarted = errors.New("fleetwatch: manager already started")

	// ErrUnknownCluster means no engaged cluster has the name.
	ErrUnknownCluster = errors.New("fleetwatch: cluster not engaged")

	// ErrShutdownTimeout means Start stopped waiting for parts of the fleet that were
	// still stopping when Options.GracefulShutdownTimeout was spent.
	ErrShutdownTimeout = errors.New("fleetwatch: graceful shutdown timed out")
)
