package informer

import "errors"

var (
	// ErrResourceNotFound means that a configured resource is not served by the cluster,
	// for example a custom resource whose CRD is not installed there.
	ErrResourceNotFound = errors.New("resource not served by the cluster")
	// ErrDuplicateResource means that a configured resource name resolves to the same
	// resource as a name configured before it, such as "po" after "pods". Only the
	// first one is cached: two informers of one resource would each delete the other's
	// objects when they list.
	ErrDuplicateResource = errors.New("resolves to a resource that is already configured")
	// ErrInvalidResource means that a configured resource name cannot be parsed.
	ErrInvalidResource = errors.New("invalid resource name")
	// ErrSyncTimeout means that a resource did not finish its initial list within the
	// sync timeout. It keeps trying.
	ErrSyncTimeout = errors.New("initial sync timed out")
	// ErrNoInitialEventsEnd means that a streaming list never sent its
	// initial-events-end bookmark; the informer falls back to a paginated LIST.
	ErrNoInitialEventsEnd = errors.New("streaming list sent no initial-events-end bookmark")
)
