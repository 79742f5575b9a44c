package server

import (
	"context"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/internal/filewatch"
)

const (
	// filesReloadDelay is how long the server waits after an event of the token file or
	// the TLS files before it reads them, so that a burst of events (a rename, the
	// kubelet's "..data" swap of a mounted Secret) leads to one read of the finished
	// files.
	filesReloadDelay = 100 * time.Millisecond
	// filesPollInterval is how often the files are checked in case a change was not
	// seen by the file watcher; a check that finds them unchanged reads nothing.
	filesPollInterval = 10 * time.Second
)

// followFiles re-reads the token file and the TLS files when they change, until ctx is
// done: a changed token file or a rotated certificate applies without a restart, and no
// request pays for a check of the files. Serve runs it; it returns at once without
// such files.
func (s *Server) followFiles(ctx context.Context) {
	var paths []string
	if s.tokens != nil {
		paths = append(paths, s.tokens.path)
	}
	if s.certs != nil {
		paths = append(paths, s.certs.certFile, s.certs.keyFile)
	}
	if len(paths) == 0 {
		return
	}
	logger := klog.FromContext(ctx)
	f := &filewatch.Follower{
		What:         "the token and TLS files",
		Paths:        func() []string { return paths },
		Clock:        clock.RealClock{},
		Delay:        filesReloadDelay,
		PollInterval: filesPollInterval,
		Reread: func() {
			if s.tokens != nil {
				s.tokens.reload(logger)
			}
			if s.certs != nil {
				s.certs.reload(logger)
			}
		},
	}
	// Run fails only if its first function does, and there is none.
	_ = f.Run(ctx, logger, nil)
}
