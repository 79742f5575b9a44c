package cluster

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidKubeconfig is wrapped by errors about a kubeconfig file that cannot be
	// used: it is empty, cannot be parsed, or one of its selected contexts is broken. The
	// message names the file and, where it applies, the context.
	ErrInvalidKubeconfig = errors.New("invalid kubeconfig")

	// ErrInvalidGlob is wrapped by errors about an include or exclude pattern.
	ErrInvalidGlob = errors.New("invalid glob")

	// ErrInvalidName is wrapped by errors about an empty cluster name.
	ErrInvalidName = errors.New("invalid cluster name")

	// ErrInvalidOptions is wrapped by errors about a field of Options or HealthOptions.
	ErrInvalidOptions = errors.New("invalid options")

	// ErrDuplicateContext means that two kubeconfig files define the same selected
	// context. The contexts are not merged, as kubectl would; the message names both files.
	ErrDuplicateContext = errors.New("duplicate context")

	// ErrDuplicateCluster means that two selected contexts map to the same cluster name,
	// usually through an alias.
	ErrDuplicateCluster = errors.New("duplicate cluster name")

	// ErrNoClusters means that no context of the kubeconfig files passed the include and
	// exclude globs.
	ErrNoClusters = errors.New("no clusters")

	// ErrClusterRemoved is the cause (see context.Cause) of the context passed to
	// Aware.Engage when the cluster left the set because its context is gone from the
	// kubeconfig files. It is not the cause on shutdown, when the context is cancelled
	// with the cause of the context given to Provider.Start.
	ErrClusterRemoved = errors.New("cluster removed")

	// ErrClusterReplaced is the cause of the context passed to Aware.Engage when the
	// cluster's connection (server, credentials, TLS settings; see Cluster.Fingerprint)
	// changed, and a new Cluster of the same name is about to be engaged in its place.
	// errors.Is(ErrClusterReplaced, ErrClusterRemoved) is true: the old Cluster did leave.
	ErrClusterReplaced = fmt.Errorf("cluster replaced: %w", ErrClusterRemoved)

	// ErrAlreadyStarted is returned by Provider.Start when it is called a second time.
	ErrAlreadyStarted = errors.New("provider already started")
)
