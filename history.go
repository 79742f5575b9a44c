package fleetwatch

import (
	"fmt"

	"github.com/fleetwatch/fleetwatch/history"
)

// History returns the reader of the change log that Options.Snapshot keeps when
// Options.SnapshotWriter.History.Enabled is set: the changes across the fleet, filtered
// by a search query, and one object's history with its field diffs (package history,
// docs/history.md). The log holds what the writer committed: a change appears there
// within Options.SnapshotWriter.Interval of its event. Without a snapshot, or with the
// log off, it fails with ErrHistoryOff.
func (m *Manager) History() (*history.Log, error) {
	switch {
	case m.opts.Snapshot == nil:
		return nil, fmt.Errorf("%w: the manager has no snapshot (Options.Snapshot)", ErrHistoryOff)
	case !m.opts.SnapshotWriter.History.Enabled:
		return nil, fmt.Errorf("%w: the snapshot keeps no change log (Options.SnapshotWriter.History.Enabled)", ErrHistoryOff)
	}
	return history.New(m.opts.Snapshot, history.Options{}), nil
}
