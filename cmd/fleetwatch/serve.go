package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/metrics"
	"github.com/fleetwatch/fleetwatch/persist"
	"github.com/fleetwatch/fleetwatch/server"
)

// shutdownTimeout bounds a graceful shutdown (the Manager's GracefulShutdownTimeout),
// after which the snapshot is closed; closeTimeout bounds that close, which waits for a
// commit still in progress. A second signal cuts both short. They are variables so that
// tests can shorten them.
var (
	shutdownTimeout = fleetwatch.DefaultGracefulShutdownTimeout
	closeTimeout    = 5 * time.Second
)

func newServeCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: watch the clusters, keep the snapshot, serve the inventory API",
		Long: `Run the daemon: watch every cluster that the kubeconfig files select, keep the
federated cache and its snapshot, and serve the kube-style inventory API.

Configuration comes from defaults, then the --config file, then FLEETWATCH_*
environment variables, then flags; see docs/config.md. When the config file
changes, the configuration is loaded again and the keys that select clusters and
resources apply at once; see "Reloading" in docs/config.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			loadOpts := config.LoadOptions{Flags: cmd.Flags()}
			cfg, err := loadConfig(loadOpts)
			if err != nil {
				return err
			}
			return serve(cmd.Context(), loadOpts, cfg)
		},
	}
	config.BindFlags(cmd.Flags())
	return cmd
}

// loadConfig loads the configuration and fills in what it leaves to the environment.
func loadConfig(opts config.LoadOptions) (*config.Config, error) {
	cfg, err := config.Load(opts)
	if err != nil {
		return nil, err
	}
	if err := resolveShard(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// serve runs the daemon with cfg, loaded with loadOpts, until SIGINT or SIGTERM. A
// second signal exits at once, and so does a shutdown that overran both shutdownTimeout
// and closeTimeout.
func serve(ctx context.Context, loadOpts config.LoadOptions, cfg *config.Config) error {
	logger, setVerbosity := newLogger(cfg.Log)
	klog.SetLogger(logger)
	ctx = klog.NewContext(ctx, logger)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		sig, ok := <-signals
		if !ok {
			return
		}
		logger.Info("Shutting down", "signal", sig.String(), "timeout", shutdownTimeout)
		cancel(fmt.Errorf("received %s", sig))
		select {
		case sig := <-signals:
			logger.Info("Second signal; exiting now", "signal", sig.String())
			os.Exit(1)
		case <-time.After(shutdownTimeout + closeTimeout):
			logger.Info("Graceful shutdown took too long; exiting now", "timeout", shutdownTimeout+closeTimeout)
			os.Exit(1)
		}
	}()

	opts := managerOptions(cfg)
	opts.GracefulShutdownTimeout = shutdownTimeout
	shardOpts, home, err := shardOptions(cfg)
	if err != nil {
		return err
	}
	opts.Shard = shardOpts
	if opts.Handover, err = handoverOptions(ctx, cfg, home); err != nil {
		return err
	}
	if cfg.Snapshot.Path != "" {
		store, err := persist.Open(cfg.Snapshot.Path, persist.Options{KeepCorrupt: keepCorrupt(cfg.Snapshot.KeepCorrupt)})
		if err != nil {
			return err
		}
		defer func() {
			if err := store.Close(); err != nil {
				logger.Error(err, "Closing the snapshot")
			}
		}()
		opts.Snapshot = store
		if h := &opts.SnapshotWriter.History; h.Enabled {
			var lowered string
			h.MaxBytes, lowered = historyBound(h.MaxBytes, cfg.Snapshot.Path, filesystemBytes(cfg.Snapshot.Path), config.MinHistoryMaxBytes)
			if lowered != "" {
				logger.Info("Bounding the change log by the snapshot's filesystem", "reason", lowered)
			}
		}
		// The kubeconfig files are read, the clusters made and the API served while
		// the snapshot loads, on another core: at 1,000 clusters that was a fifth of a
		// warm start. Each cluster is engaged once its state is loaded.
		opts.LoadSnapshotInBackground = !cfg.Shard.Enabled
	}
	mgr, err := fleetwatch.NewManager(opts)
	if err != nil {
		return err
	}
	if opts.Snapshot != nil {
		go func() {
			// Open or the load may have found it unreadable.
			<-mgr.SnapshotLoaded()
			switch moved, cause := opts.Snapshot.Recovered(); {
			case moved != "":
				logger.Info("Snapshot was unreadable; moved it aside and starting cold", "path", cfg.Snapshot.Path, "movedTo", moved, "reason", cause.Error())
			case cause != nil: // snapshot.keepCorrupt is 0
				logger.Info("Snapshot was unreadable; deleted it and starting cold", "path", cfg.Snapshot.Path, "reason", cause.Error())
			}
		}()
	}
	logger.Info("Starting", "version", buildVersion(), "config", cfg.String())
	var rl *reloader
	if file := loadOpts.FileName(); file != "" {
		rl = newReloader(file, cfg, func() (*config.Config, error) { return loadConfig(loadOpts) }, func(ctx context.Context, old, next *config.Config) error {
			return applyConfig(ctx, mgr, setVerbosity, old, next)
		})
	}
	return runDaemon(ctx, cfg, mgr, rl)
}

// applyConfig applies the live keys of the configuration next to the running daemon,
// whose configuration is old.
func applyConfig(ctx context.Context, mgr *fleetwatch.Manager, setVerbosity func(int), old, next *config.Config) error {
	if keysWhere(old, next, func(key string) bool { return isLive(key) && key != "log.verbosity" }) != nil {
		if err := mgr.Reconfigure(managerOptions(next)); err != nil {
			return err
		}
	}
	if next.Log.Verbosity != old.Log.Verbosity {
		setVerbosity(next.Log.Verbosity)
		klog.FromContext(ctx).Info("Log verbosity changed", "verbosity", next.Log.Verbosity)
	}
	return nil
}

// newLogger returns the daemon's logger and a func that changes its verbosity.
func newLogger(cfg config.Log) (logr.Logger, func(verbosity int)) {
	if cfg.Format == config.LogFormatJSON {
		// logr's V(n) is slog level -n.
		var level slog.LevelVar
		level.Set(slog.Level(-cfg.Verbosity))
		logger := logr.FromSlogHandler(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: &level}))
		return logger, func(v int) { level.Set(slog.Level(-v)) }
	}
	c := textlogger.NewConfig(textlogger.Verbosity(cfg.Verbosity))
	return textlogger.NewLogger(c), func(v int) {
		// Not expected to fail: any integer is a verbosity.
		_ = c.Verbosity().Set(strconv.Itoa(v))
	}
}

// A failed /readyz of a fleet of thousands names the clusters that hold it back without
// building every cluster's status.
var _ server.NotSyncedSource = (*fleetwatch.Manager)(nil)

// A replica of a sharded fleet hands out resourceVersions that the other replicas resume.
var _ server.ShardedSource = (*fleetwatch.Manager)(nil)

// With history.enabled, a fleet watch resumes across a restart from the change log.
var _ server.ChangeLogSource = (*fleetwatch.Manager)(nil)

// runDaemon serves the inventory API, runs the manager and follows the config file with
// rl (if not nil) until ctx is done. The server runs under the manager, which stops it
// last, after the clusters (sources), the snapshot writer's final flush and the
// handlers, so that the API answers until the cache has stopped changing, all within
// one shutdownTimeout (see fleetwatch.Manager.Start).
func runDaemon(ctx context.Context, cfg *config.Config, mgr *fleetwatch.Manager, rl *reloader) error {
	logger := klog.FromContext(ctx)
	delegated, err := delegatedAuth(cfg.Server.Auth.Delegated)
	if err != nil {
		return err
	}
	if delegated != nil && cfg.Shard.Enabled {
		// The replicas' Role, next to their Leases, lets them read handed-over states.
		delegated.StateNamespace = cfg.Shard.Namespace
	}
	var peerCAs *x509.CertPool
	if cfg.Shard.Enabled {
		if peerCAs, err = peerRoots(cfg); err != nil {
			return err
		}
	}
	srv, err := server.New(mgr, server.Options{
		Address:     cfg.Server.Address,
		AcceptHosts: cfg.Server.AcceptHosts,
		TLSCertFile: cfg.Server.TLS.CertFile,
		TLSKeyFile:  cfg.Server.TLS.KeyFile,
		TokenFile:   cfg.Server.Auth.TokenFile,
		Delegated:   delegated,
		PeerRoots:   peerCAs,
		Replica:     replicaOf(cfg),
		Version:     versionInfo(readBuild()),
		Collectors:  []prometheus.Collector{metrics.NewSnapshotCollector(mgr)},
		// client-go's workqueue, informer and REST client metrics on /metrics.
		ClientGoMetrics: true,

		MaxRequestsInFlight: cfg.Server.Limits.MaxRequestsInFlight,
		MaxWatches:          cfg.Server.Limits.MaxWatches,
		MaxWatchesPerClient: cfg.Server.Limits.MaxWatchesPerClient,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Server.Address)
	if err != nil {
		return fmt.Errorf("server.address: %w", err)
	}
	scheme := "http"
	if cfg.Server.TLS.CertFile != "" {
		scheme = "https"
	}
	logger.Info("Serving the inventory API", "url", scheme+"://"+ln.Addr().String())
	if err := mgr.Add(fleetwatch.RunnableFunc(func(ctx context.Context) error {
		if err := srv.Serve(ctx, ln); err != nil {
			return fmt.Errorf("inventory API: %w", err)
		}
		return nil
	})); err != nil {
		_ = ln.Close()
		return err
	}

	rlCtx, stopRl := context.WithCancel(ctx)
	defer stopRl()
	rlDone := make(chan struct{})
	if rl != nil {
		go func() {
			defer close(rlDone)
			_ = rl.Start(rlCtx)
		}()
	} else {
		close(rlDone)
	}

	err = mgr.Start(ctx)
	stopRl()
	<-rlDone
	reason := context.Cause(ctx)
	if reason == nil {
		reason = err
	}
	logger.Info("Stopped", "reason", reason)
	return err
}

// delegatedAuth returns the server's delegated authentication, reaching the home cluster
// through the configured kubeconfig's current context, or the in-cluster config.
func delegatedAuth(cfg config.Delegated) (*server.DelegatedAuth, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("server.auth.delegated.kubeconfig: %w", err)
		}
	} else if rc, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("server.auth.delegated.enabled: no server.auth.delegated.kubeconfig, and not in a cluster: %w", err)
	}
	rc.UserAgent = "fleetwatch/" + buildVersion() + " (delegated auth)"
	return &server.DelegatedAuth{Config: rc, QPS: float32(cfg.QPS), Burst: cfg.Burst, Audiences: cfg.Audiences}, nil
}

// versionInfo is what /version serves of b, in the fields kubectl version reads.
func versionInfo(b build) apiversion.Info {
	info := apiversion.Info{GitVersion: b.Version, GitCommit: b.Revision, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if b.Revision != "" {
		info.GitTreeState = "clean"
		if b.Modified {
			info.GitTreeState = "dirty"
		}
	}
	return info
}
