package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/server"
	"github.com/fleetwatch/fleetwatch/shard"
)

// Validate reports every problem with c at once, joined with errors.Join, each a
// *FieldError that names the key. It does no I/O: the files that c names are not
// opened, and resources are not looked up in any cluster. An empty Resources is valid;
// it stands for DefaultResources.
func (c Config) Validate() error {
	return joinFieldErrors(c.validate())
}

func joinFieldErrors(fes []*FieldError) error {
	errs := make([]error, len(fes))
	for i, fe := range fes {
		errs[i] = fe
	}
	return errors.Join(errs...)
}

// validator collects the problems of a Config.
type validator struct {
	errs []*FieldError
}

func (v *validator) add(key string, format string, args ...any) {
	v.errs = append(v.errs, newFieldError(ErrInvalidValue, key, fmt.Errorf(format, args...)))
}

// addAt adds a problem with key that is caused by the value of the key at.
func (v *validator) addAt(at, key string, format string, args ...any) {
	fe := newFieldError(ErrInvalidValue, key, fmt.Errorf(format, args...))
	fe.at = at
	v.errs = append(v.errs, fe)
}

func (c *Config) validate() []*FieldError {
	var v validator
	v.unique("kubeconfig", c.Kubeconfig, func(key, p string) {
		if p == "" {
			v.add(key, "the path is empty")
		}
	})
	for _, list := range []struct {
		key   string
		globs []string
	}{{"contexts.include", c.Contexts.Include}, {"contexts.exclude", c.Contexts.Exclude}} {
		v.unique(list.key, list.globs, func(key, g string) {
			if err := cluster.ValidateGlob(g); err != nil {
				v.add(key, "%w", err)
			}
		})
	}
	v.aliases(c.Contexts.Aliases)
	v.resources(c.Resources)

	if c.Sync.Timeout <= 0 {
		v.add("sync.timeout", "must be positive, got %s", formatDuration(c.Sync.Timeout))
	}
	if c.Sync.MaxConcurrent < 1 {
		v.add("sync.maxConcurrent", "must be at least 1, got %d", c.Sync.MaxConcurrent)
	}
	if c.Sync.MaxObjects < 1 {
		v.add("sync.maxObjects", "must be at least 1, got %d", c.Sync.MaxObjects)
	}
	v.health(c.Health)
	switch c.Cache.Encoding {
	case CacheEncodingObjects, CacheEncodingCompact, CacheEncodingCompressed, CacheEncodingCompressedDict:
	default:
		v.add("cache.encoding", "%q is none of %q, %q, %q and %q", c.Cache.Encoding, CacheEncodingObjects, CacheEncodingCompact, CacheEncodingCompressed, CacheEncodingCompressedDict)
	}
	if c.Snapshot.Interval <= 0 {
		v.add("snapshot.interval", "must be positive, got %s", formatDuration(c.Snapshot.Interval))
	}
	if c.Snapshot.MaxPending < 1 {
		v.add("snapshot.maxPending", "must be at least 1, got %d", c.Snapshot.MaxPending)
	}
	if c.Snapshot.KeepCorrupt < 0 {
		v.add("snapshot.keepCorrupt", "must not be negative, got %d", c.Snapshot.KeepCorrupt)
	}
	if c.History.Retention <= 0 {
		v.add("history.retention", "must be positive, got %s", formatDuration(c.History.Retention))
	}
	if c.History.MaxBytes < MinHistoryMaxBytes {
		v.add("history.maxBytes", "must be at least %d (1 MiB), got %d: it counts bytes", MinHistoryMaxBytes, c.History.MaxBytes)
	}
	v.server(c.Server)
	v.shard(c.Shard)
	if c.Log.Verbosity < 0 {
		v.add("log.verbosity", "must not be negative, got %d", c.Log.Verbosity)
	}
	if c.Log.Format != LogFormatText && c.Log.Format != LogFormatJSON {
		v.add("log.format", "%q is neither %q nor %q", c.Log.Format, LogFormatText, LogFormatJSON)
	}
	return v.errs
}

// unique calls check for every item of list, and reports items listed twice.
func (v *validator) unique(key string, list []string, check func(key, item string)) {
	first := map[string]int{}
	for i, item := range list {
		k := indexKey(key, i)
		if j, dup := first[item]; dup {
			v.add(k, "%q is already listed as %s", item, indexKey(key, j))
			continue
		}
		first[item] = i
		check(k, item)
	}
}

func (v *validator) aliases(aliases map[string]string) {
	const key = "contexts.aliases"
	contextOf := map[string]string{}
	for _, context := range slices.Sorted(maps.Keys(aliases)) {
		k := mapKey(key, context)
		name := aliases[context]
		if context == "" {
			v.add(k, "the context name is empty")
		}
		if err := cluster.ValidateName(name); err != nil {
			v.add(k, "%w", err)
			continue
		}
		if other, dup := contextOf[name]; dup {
			v.add(k, "cluster name %q is also the alias of context %q", name, other)
			continue
		}
		contextOf[name] = context
	}
}

// resources checks the resources with the informers' own rule, naming the keys of the
// file.
func (v *validator) resources(rs []Resource) {
	err := informer.ValidateResources(informerResources(rs), informer.FieldNames{
		List:          "resources",
		Name:          "name",
		Namespaces:    "namespaces",
		LabelSelector: "labelSelector",
		FieldSelector: "fieldSelector",
	})
	if err == nil {
		return
	}
	// Joined by ValidateResources, each a *informer.FieldError.
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *informer.FieldError
		if errors.As(e, &fe) {
			v.errs = append(v.errs, newFieldError(ErrInvalidValue, fe.Field, fe.Err))
		}
	}
}

func (v *validator) server(s Server) {
	v.unique("server.acceptHosts", s.AcceptHosts, func(key, p string) {
		if err := server.ValidateHostPattern(p); err != nil {
			v.add(key, "%w", err)
		}
	})
	const (
		address   = "server.address"
		certFile  = "server.tls.certFile"
		keyFile   = "server.tls.keyFile"
		tokenFile = "server.auth.tokenFile"
		delegated = "server.auth.delegated.enabled"
		homeKube  = "server.auth.delegated.kubeconfig"
	)
	if s.Auth.Delegated.Kubeconfig != "" && !s.Auth.Delegated.Enabled {
		v.add(homeKube, "is set, but %s is false", delegated)
	}
	v.delegated(s.Auth.Delegated)
	if s.Limits.MaxRequestsInFlight < 1 {
		v.add("server.limits.maxRequestsInFlight", "must be at least 1, got %d", s.Limits.MaxRequestsInFlight)
	}
	if s.Limits.MaxWatches < 1 {
		v.add("server.limits.maxWatches", "must be at least 1, got %d", s.Limits.MaxWatches)
	}
	if s.Limits.MaxWatchesPerClient < 1 {
		v.add("server.limits.maxWatchesPerClient", "must be at least 1, got %d", s.Limits.MaxWatchesPerClient)
	}
	loopback, err := isLoopback(s.Address)
	if err != nil {
		v.add(address, "%q: %w", s.Address, err)
		return
	}
	if !loopback {
		// DESIGN.md: listening on any other address requires TLS and authentication.
		for _, missing := range []struct{ key, value string }{
			{certFile, s.TLS.CertFile}, {keyFile, s.TLS.KeyFile},
		} {
			if missing.value == "" {
				v.addAt(address, missing.key, "required because %s %q is not a loopback address", address, s.Address)
			}
		}
		if s.Auth.TokenFile == "" && !s.Auth.Delegated.Enabled {
			v.addAt(address, tokenFile, "required (or %s) because %s %q is not a loopback address", delegated, address, s.Address)
		}
		return
	}
	switch {
	case s.TLS.CertFile != "" && s.TLS.KeyFile == "":
		v.addAt(certFile, keyFile, "required because %s is set", certFile)
	case s.TLS.CertFile == "" && s.TLS.KeyFile != "":
		v.addAt(keyFile, certFile, "required because %s is set", keyFile)
	}
}

// shard checks the shard keys with package shard's rules, also when sharding is off,
// so that a mistake shows before it is turned on.
func (v *validator) shard(s Shard) {
	if s.Identity != "" {
		if err := shard.ValidateIdentity(s.Identity); err != nil {
			v.add("shard.identity", "%w", err)
		}
	}
	if s.Replicas < 0 {
		v.add("shard.replicas", "must not be negative, got %d", s.Replicas)
	}
	if s.StartTimeout <= 0 {
		v.add("shard.startTimeout", "must be positive, got %s", formatDuration(s.StartTimeout))
	}
	if s.HandoverTimeout < 0 {
		v.add("shard.handoverTimeout", "must not be negative, got %v", s.HandoverTimeout)
	}
	if s.ParallelReceives < 1 {
		v.add("shard.parallelReceives", "must be at least 1, got %d", s.ParallelReceives)
	}
	if b := shard.Balance(s.Balance); b != shard.BalanceCount && b != shard.BalanceObjects {
		v.add("shard.balance", "%q is neither %q nor %q", s.Balance, shard.BalanceCount, shard.BalanceObjects)
	}
	keys := map[string]string{"LeaseDuration": "shard.leaseDuration", "RenewDeadline": "shard.renewDeadline", "RetryPeriod": "shard.retryPeriod"}
	if err := shard.ValidateTiming(s.LeaseDuration, s.RenewDeadline, s.RetryPeriod); err != nil {
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var te *shard.TimingError
			if errors.As(e, &te) {
				v.add(keys[te.Field], "%s", te.Reason(func(field string) string { return keys[field] }))
			}
		}
	}
}

func (v *validator) delegated(d Delegated) {
	const audiences = "server.auth.delegated.audiences"
	if len(d.Audiences) > 0 && !d.Enabled {
		v.add(audiences, "is set, but server.auth.delegated.enabled is false")
	}
	v.unique(audiences, d.Audiences, func(key, a string) {
		if a == "" {
			v.add(key, "the audience is empty")
		}
	})
	if d.QPS < 1 {
		v.add("server.auth.delegated.qps", "must be at least 1, got %d", d.QPS)
	}
	if d.Burst < 1 {
		v.add("server.auth.delegated.burst", "must be at least 1, got %d", d.Burst)
	}
}

// isLoopback parses a host:port listen address and reports whether its host is a
// loopback address. An empty host listens on every interface. Host names other than
// localhost are taken not to be loopback: resolving them would be I/O, and their
// addresses can change.
func isLoopback(addr string) (bool, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return false, errors.New(ae.Err)
		}
		return false, err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return false, fmt.Errorf("the port %q is not a number from 0 to 65535", port)
	}
	if host == "localhost" {
		return true, nil
	}
	host, _, _ = strings.Cut(host, "%") // an IPv6 zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// health checks the health.* keys.
func (v *validator) health(h Health) {
	if !strings.HasPrefix(h.Path, "/") {
		v.add("health.path", "must be an absolute path such as %q, got %q", DefaultHealthPath, h.Path)
	} else if u, err := url.Parse(h.Path); err != nil || u.Path != h.Path {
		v.add("health.path", "must be a path without query, fragment or escapes, got %q", h.Path)
	}
	if h.Interval <= 0 {
		v.add("health.interval", "must be positive, got %s", formatDuration(h.Interval))
	}
	if h.Timeout <= 0 {
		v.add("health.timeout", "must be positive, got %s", formatDuration(h.Timeout))
	}
}
