package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/internal/filewatch"
)

// Defaults of reloader: the config file is followed as the cluster.Provider follows
// the kubeconfig files.
const (
	// configReloadDelay is how long the reloader waits after a file event before it
	// loads the config, so that a burst of events (an editor's rename, the kubelet's
	// "..data" swap) leads to one load of the finished file.
	configReloadDelay = cluster.DefaultReloadDelay
	// configPollInterval is how often the config is loaded in case a change was not
	// seen by the file watcher.
	configPollInterval = cluster.DefaultPollInterval
)

// liveKeys are the config keys, or prefixes of keys ending in ".", that a running
// daemon applies; a change of any other key takes effect at the next start.
var liveKeys = []string{
	"kubeconfig", "contexts.", "resources", "sync.", "cache.keepManagedFields", "cache.keepSecretData", // Manager.Reconfigure
	"snapshot.interval", "snapshot.maxPending", // Manager.Reconfigure
	"log.verbosity",
}

// isLive reports whether a change of key applies without a restart.
func isLive(key string) bool {
	for _, k := range liveKeys {
		if key == k || strings.HasSuffix(k, ".") && strings.HasPrefix(key, k) {
			return true
		}
	}
	return false
}

// keysWhere returns the keys that differ between a and b and that keep says to keep.
func keysWhere(a, b *config.Config, keep func(key string) bool) []string {
	var keys []string
	for _, key := range config.Changed(a, b) {
		if keep(key) {
			keys = append(keys, key)
		}
	}
	return keys
}

// reloader follows the config file and applies the changes of the configuration to the
// running daemon. It loads the whole configuration again (defaults, file, environment,
// flags: the environment and flags still win over the file) when a file event arrives
// in the file's directory, as cluster.Provider does for kubeconfig files, and every
// pollInterval as a fallback.
//
// A configuration that does not load (invalid, the file missing or empty) changes
// nothing: the daemon keeps the current one, the error is logged once, and the next
// event or poll tries again. Of a valid one, the live keys (see liveKeys) are applied,
// and a change of any other key is logged as needing a restart.
type reloader struct {
	// file is the config file.
	file string
	// load loads the whole configuration.
	load func() (*config.Config, error)
	// apply applies next, whose live keys differ from old, the configuration last
	// applied. If it fails, old stays in effect.
	apply func(ctx context.Context, old, next *config.Config) error
	// started is the configuration the daemon started with: the keys that are not live
	// keep its values.
	started *config.Config
	// current is the configuration last applied, and restart the keys that differ from
	// started and wait for a restart. Only Start's goroutine uses them.
	current *config.Config
	restart []string

	clock        clock.WithTicker
	delay        time.Duration
	pollInterval time.Duration

	// Test hooks, set before Start.
	noWatch     bool   // rely on polling alone
	afterReload func() // called after each reload
}

func newReloader(file string, current *config.Config, load func() (*config.Config, error), apply func(ctx context.Context, old, next *config.Config) error) *reloader {
	return &reloader{
		file:         file,
		load:         load,
		apply:        apply,
		started:      current,
		current:      current,
		clock:        clock.RealClock{},
		delay:        configReloadDelay,
		pollInterval: configPollInterval,
	}
}

// Start follows the config file until ctx is done, and returns nil.
func (r *reloader) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("config")
	var lastErr string // of the last failed reload, to log each failure once
	f := &filewatch.Follower{
		What:         "the config file",
		Paths:        func() []string { return []string{r.file} },
		Clock:        r.clock,
		Delay:        r.delay,
		PollInterval: r.pollInterval,
		NoWatch:      r.noWatch,
		Reread: func() {
			r.reload(ctx, logger, &lastErr)
			if r.afterReload != nil {
				r.afterReload()
			}
		},
	}
	return f.Run(ctx, logger, nil)
}

// reload loads the configuration and applies what changed.
func (r *reloader) reload(ctx context.Context, logger klog.Logger, lastErr *string) {
	failed := func(msg string, err error) {
		if err.Error() == *lastErr {
			logger.V(4).Info(msg, "err", err)
			return
		}
		*lastErr = err.Error()
		logger.Error(err, msg, "file", r.file)
	}
	// A file written in place is empty for a moment, and an empty file is a valid
	// configuration: the defaults. Write "{}" to mean them.
	if fi, err := os.Stat(r.file); err == nil && fi.Size() == 0 {
		failed("Reloading the configuration failed; keeping the current one", fmt.Errorf("config: %s is empty", r.file))
		return
	}
	next, err := r.load()
	if err != nil {
		failed("Reloading the configuration failed; keeping the current one", err)
		return
	}
	live := keysWhere(r.current, next, isLive)
	if len(live) > 0 {
		if err := r.apply(ctx, r.current, next); err != nil {
			failed("Applying the new configuration failed; keeping the current one", err)
			return
		}
	}
	if *lastErr != "" {
		logger.Info("Reloading the configuration works again", "file", r.file)
		*lastErr = ""
	}
	if len(live) > 0 {
		logger.Info("Applied the new configuration", "keys", live)
	}
	r.current = next
	restart := keysWhere(r.started, next, func(key string) bool { return !isLive(key) })
	if len(restart) > 0 && !slices.Equal(restart, r.restart) {
		logger.Info("Configuration keys changed that take effect only at the next start; restart fleetwatch to apply them", "keys", restart)
	}
	r.restart = restart
}
