package fleetwatch

import (
	"errors"
	"time"
)

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

	// ErrHistoryOff means the change log is not kept: the Manager has no snapshot, or
	// its writer keeps no log (Options.SnapshotWriter.History.Enabled).
	ErrHistoryOff = errors.New("fleetwatch: the change log is off")
)

// TransientError is an error of a StateFetcher, or of reading the stream it returned,
// that another attempt may not meet: the old owner could not be reached or reset the
// connection, answered 5xx or 429, or the stream broke before its end. Manager.Receive
// tries again with backoff within HandoverOptions.Timeout; any other error starts the
// cluster cold at once.
type TransientError struct {
	Err error
	// RetryAfter is the least wait before the next attempt (a 503's Retry-After); 0
	// leaves it to the backoff.
	RetryAfter time.Duration
}

func (e *TransientError) Error() string { return e.Err.Error() }
func (e *TransientError) Unwrap() error { return e.Err }
