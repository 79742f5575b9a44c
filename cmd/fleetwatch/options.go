package main

import (
	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/persist"
)

// keepCorrupt turns snapshot.keepCorrupt into persist.Options.KeepCorrupt, where zero
// is the default and keeping none is negative.
func keepCorrupt(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// managerOptions turns the configuration into the Manager's options.
func managerOptions(cfg *config.Config) fleetwatch.Options {
	return fleetwatch.Options{
		Clusters: cluster.Options{
			Kubeconfigs: cfg.Kubeconfig,
			Include:     cfg.Contexts.Include,
			Exclude:     cfg.Contexts.Exclude,
			Aliases:     cfg.Contexts.Aliases,
			UserAgent:   userAgent(cfg),
		},
		Resources:          cfg.InformerResources(),
		SyncTimeout:        cfg.Sync.Timeout,
		MaxConcurrentSyncs: cfg.Sync.MaxConcurrent,
		MaxSyncObjects:     cfg.Sync.MaxObjects,
		Health: cluster.HealthOptions{
			Path:     cfg.Health.Path,
			Interval: cfg.Health.Interval,
			Timeout:  cfg.Health.Timeout,
		},
		KeepManagedFields: cfg.Cache.KeepManagedFields,
		KeepSecretData:    cfg.Cache.KeepSecretData,
		JSONOnly:          cfg.Cache.JSONOnly,
		SnapshotWriter: persist.WriterOptions{
			Interval:   cfg.Snapshot.Interval,
			MaxPending: cfg.Snapshot.MaxPending,
			History: persist.HistoryOptions{
				Enabled:   cfg.History.Enabled,
				Retention: cfg.History.Retention,
				MaxBytes:  int64(cfg.History.MaxBytes),
			},
		},
		Encoding: fleetwatch.Encoding(cfg.Cache.Encoding),
	}
}
