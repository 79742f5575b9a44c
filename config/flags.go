package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// ConfigFlag is the flag that names the config file, and ConfigEnv its environment
// variable. See LoadOptions.File.
const (
	ConfigFlag = "config"
	ConfigEnv  = EnvPrefix + "CONFIG"
)

// usages describe every key, for flag help and docs/config.md. Keys inside the items of
// resources are written "resources[].name".
var usages = map[string]string{
	"kubeconfig":                       "kubeconfig files or directories; empty means $KUBECONFIG, else ~/.kube/config",
	"contexts.include":                 "globs over context names that select clusters; empty means all",
	"contexts.exclude":                 "globs over context names that are never clusters; wins over include",
	"contexts.aliases":                 "cluster names of contexts, as context=cluster pairs; other contexts are named after themselves",
	"resources":                        "resources cached in every cluster; empty means the default set",
	"resources[].name":                 "kubectl-style resource name, such as pods, deployments.apps or widgets.v1alpha1.example.com",
	"resources[].namespaces":           "namespaces to cache; empty means all (ignored for cluster-scoped resources)",
	"resources[].labelSelector":        "label selector, as for kubectl --selector; empty means all",
	"resources[].fieldSelector":        "field selector, as for kubectl --field-selector; empty means all",
	"resources[].metadataOnly":         "cache only the metadata of the objects",
	"sync.timeout":                     "time a cluster may take for its initial sync before it stops holding back readiness",
	"sync.maxConcurrent":               "number of clusters that do their initial sync at once",
	"sync.maxObjects":                  "number of objects that the clusters' initial syncs list at once",
	"health.path":                      "path probed on each cluster's apiserver to tell whether it serves",
	"health.interval":                  "time between probes of a healthy cluster; an unreachable one is probed with a backoff from 1s to 2m",
	"health.timeout":                   "time each probe may take before the cluster counts as unreachable",
	"cache.encoding":                   "how full objects are cached: objects (decoded), compact (the snapshot's CBOR, served as JSON from it; less memory, a decode per Table row or library read) compressed (that CBOR compressed where it shortens it: less memory still, for a few µs per write and read) or compressed-dict (compressed with a dictionary per resource made of its first objects; less memory again)",
	"cache.keepManagedFields":          "keep metadata.managedFields, which are stripped by default",
	"cache.keepSecretData":             "keep the values of Secrets (data, stringData and kubectl's last-applied annotation), which are dropped by default",
	"cache.jsonOnly":                   "ask the apiservers for JSON only, not for protobuf where fleetwatch can read it (built-in kinds)",
	"snapshot.path":                    "snapshot file; empty disables persistence",
	"snapshot.interval":                "longest time a change waits before the snapshot is committed",
	"snapshot.maxPending":              "number of pending changes that commits the snapshot before snapshot.interval",
	"snapshot.keepCorrupt":             "number of unreadable snapshot files moved aside that are kept; 0 deletes them",
	"history.enabled":                  "keep a change log in the snapshot: every change the fleet sees, retained by history.retention and history.maxBytes",
	"history.retention":                "how long the change log keeps a change",
	"history.maxBytes":                 "bytes of the change log's records and index keys beyond which the oldest are dropped; the file takes up to about twice as much; lowered to a quarter of the snapshot's filesystem where twice it would take more than half of it",
	"server.address":                   "host:port of the HTTP server; other than loopback requires TLS and authentication",
	"server.acceptHosts":               "regexps over the host names of requests (Host without port); loopback names are always accepted; empty means only those without authentication, any with it",
	"server.tls.certFile":              "PEM certificate (and intermediates) of the server; enables HTTPS with keyFile",
	"server.tls.keyFile":               "PEM private key of server.tls.certFile",
	"server.auth.tokenFile":            "file of accepted bearer tokens, one a line, each optionally with user=NAME and clusters=GLOB,...",
	"server.auth.delegated.enabled":    "authenticate tokens with TokenReview and authorize clusters with SubjectAccessReview in the home cluster",
	"server.auth.delegated.kubeconfig": "kubeconfig of the home cluster for delegated auth; empty means the in-cluster config",
	"server.auth.delegated.audiences":  "audiences a token must be meant for, checked by the home cluster's TokenReview; empty means its own",
	"server.auth.delegated.qps":        "reviews per second that delegated auth may send to the home cluster",
	"server.auth.delegated.burst":      "reviews that delegated auth may send to the home cluster in a burst, before server.auth.delegated.qps applies",
	"shard.enabled":                    "run as one replica of a sharded fleet: watch only the clusters this replica owns, coordinated by Leases in the home cluster",
	"shard.identity":                   "name of this replica, unique and stable across restarts; empty means the host name (the pod's name)",
	"shard.namespace":                  "namespace of the Leases in the home cluster; empty means the pod's namespace",
	"shard.homeKubeconfig":             "kubeconfig of the home cluster that holds the Leases; empty means server.auth.delegated.kubeconfig, else the in-cluster config",
	"shard.address":                    "URL at which the other replicas reach this one's API, published on its Lease; empty publishes none",
	"shard.leaseDuration":              "time after the last renewal of a replica's Lease that the others see before they take its clusters",
	"shard.renewDeadline":              "time after its last successful renewal at which a replica stops watching its clusters; shorter than shard.leaseDuration",
	"shard.retryPeriod":                "interval of a replica's renewals and of its attempts to take clusters",
	"shard.replicas":                   "how many replicas the fleet runs: a replica that starts takes no cluster until it sees that many, so that replicas started together list each cluster once; 0 means not known",
	"shard.startTimeout":               "longest time a replica that starts waits for shard.replicas replicas before it takes its share among those that joined",
	"shard.handoverTimeout":            "time a replica waits for a moved cluster's state from its old owner before it starts the cluster cold; 0 turns the warm handover off",
	"shard.parallelReceives":           "how many moved clusters' states a replica fetches from their old owners at once",
	"shard.balance":                    "what the placement balances among the replicas: count (clusters) or objects (the clusters' objects, as their owners publish them on the cluster Leases); objects only while every replica says objects",
	"shard.peerCaFile":                 "PEM CAs of the other replicas' serving certificates, trusted to ask them for their clusters and their handed-over states; empty means server.tls.certFile's certificates and the system's roots",
	"log.verbosity":                    "log verbosity, as klog's -v",
	"log.format":                       "log format: text or json",

	"server.limits.maxRequestsInFlight": "requests other than watches served at once; more get 429 with Retry-After (the probes and /metrics are not limited)",
	"server.limits.maxWatches":          "watches served at once, counted apart from other requests; more get 429 with Retry-After",
	"server.limits.maxWatchesPerClient": "watches of one client (authenticated user, else IP address) served at once; more get 429 with Retry-After",
}

// BindFlags defines on fs a flag for every key, named after the key path
// ("server.tls.certFile" is --server-tls-cert-file), and --config for the file. Load
// reads them from LoadOptions.Flags: only the flags set on the command line override.
//
// Lists are repeatable and comma-separated (--contexts-include 'prod-*,staging-*'),
// except --kubeconfig, which takes one path at a time. --contexts-aliases takes
// context=cluster pairs. --resources takes resource names, each with default settings,
// and replaces the resources of the file.
//
// The flags live here, not in package main, so that keys, environment variables and
// flags are derived from one schema and cannot drift apart; main owns the FlagSet and
// parses it.
func BindFlags(fs *pflag.FlagSet) {
	fs.String(ConfigFlag, "", "config file (YAML); default $"+ConfigEnv+", else none")
	def := Default()
	for i := range leaves {
		l := &leaves[i]
		usage := usages[l.path]
		switch v := l.value(&def).(type) {
		case string:
			fs.String(l.flag, v, usage)
		case bool:
			fs.Bool(l.flag, v, usage)
		case int:
			fs.Int(l.flag, v, usage)
		case time.Duration:
			fs.Duration(l.flag, v, usage)
		case map[string]string:
			fs.StringToString(l.flag, v, usage)
		case []Resource:
			// The default set is too long for a flag default; docs/config.md lists it.
			fs.StringSlice(l.flag, nil, usage)
		case []string:
			if l.isPath {
				fs.StringArray(l.flag, v, usage)
			} else {
				fs.StringSlice(l.flag, v, usage)
			}
		default:
			panic(fmt.Sprintf("config: no flag for key %s", l.path))
		}
	}
}

// parseFlags reads the flags of fs that were set on the command line. Flags that fs
// does not define are skipped, so that a program may define only some of them.
func parseFlags(fs *pflag.FlagSet) (layer, error) {
	ly := newLayer()
	if fs == nil {
		return ly, nil
	}
	for i := range leaves {
		l := &leaves[i]
		f := fs.Lookup(l.flag)
		if f == nil || !f.Changed {
			continue
		}
		ly.set[l.path] = true
		v, err := flagValue(fs, f, l)
		if err != nil {
			return ly, fmt.Errorf("config: flag --%s: %w", l.flag, err)
		}
		if l.isPath {
			if v, err = resolvePaths(v); err != nil {
				fe := newFieldError(ErrInvalidValue, l.path, err)
				fe.Flag = l.flag
				ly.errs = append(ly.errs, fe)
				ly.bad[l.path] = true
				continue
			}
		}
		setNested(ly.values, l.path, v)
	}
	return ly, nil
}

// flagValue returns the value of flag f as the type of l.
func flagValue(fs *pflag.FlagSet, f *pflag.Flag, l *leaf) (any, error) {
	switch l.kind {
	case kindString:
		return fs.GetString(f.Name)
	case kindBool:
		return fs.GetBool(f.Name)
	case kindInt:
		return fs.GetInt(f.Name)
	case kindDuration:
		return fs.GetDuration(f.Name)
	case kindMap:
		return fs.GetStringToString(f.Name)
	case kindStrings, kindResources:
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return nil, fmt.Errorf("a flag of type %s is not a list", f.Value.Type())
		}
		var items []string
		for _, s := range sv.GetSlice() {
			if s = strings.TrimSpace(s); s != "" {
				items = append(items, s)
			}
		}
		if l.kind == kindResources {
			return resourcesNamed(items), nil
		}
		return items, nil
	}
	panic(fmt.Sprintf("config: no flag value for key %s", l.path))
}

// resolvePaths expands "~" in a path or a list of paths from the environment or the
// command line, where relative paths are relative to the working directory.
func resolvePaths(v any) (any, error) {
	switch v := v.(type) {
	case string:
		return resolvePath(v, "")
	case []string:
		out := make([]string, len(v))
		for i, p := range v {
			var err error
			if out[i], err = resolvePath(p, ""); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return v, nil
}
