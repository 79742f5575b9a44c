package main

import (
	"strings"
	"testing"

	"github.com/fleetwatch/fleetwatch/config"
)

// TestHistoryBound: the change log's bound is lowered to a quarter of the snapshot's
// filesystem where twice the bound would take more than half of it, never below the
// least bound, and kept where the filesystem is large enough or its size unknown.
func TestHistoryBound(t *testing.T) {
	const gib = 1 << 30
	min := int64(config.MinHistoryMaxBytes)
	for _, tc := range []struct {
		name     string
		maxBytes int64
		fs       uint64
		want     int64
	}{
		{"the default on a 2 GiB volume", config.DefaultHistoryMaxBytes, 2 * gib, gib / 2},
		{"the default on a 1 TiB volume", config.DefaultHistoryMaxBytes, 1024 * gib, config.DefaultHistoryMaxBytes},
		{"at a quarter", gib, 4 * gib, gib},
		{"just over a quarter", gib + 1, 4 * gib, gib},
		{"a tiny volume", gib, 1 << 20, min},
		{"unknown size", config.DefaultHistoryMaxBytes, 0, config.DefaultHistoryMaxBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, msg := historyBound(tc.maxBytes, "/var/lib/fleetwatch/fleet.db", tc.fs, min)
			if got != tc.want {
				t.Errorf("bound %d, want %d", got, tc.want)
			}
			if lowered := got < tc.maxBytes; lowered != (msg != "") || lowered && !strings.Contains(msg, "/var/lib/fleetwatch") {
				t.Errorf("lowered %v, message %q", lowered, msg)
			}
		})
	}
	if n := filesystemBytes(t.TempDir() + "/fleet.db"); n == 0 {
		t.Error("the size of the test's filesystem is unknown")
	}
}
