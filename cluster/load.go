package cluster

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/homedir"
	"k8s.io/utils/clock"

	"github.com/fleetwatch/fleetwatch/internal/dialgate"
)

// Defaults of Options.
const (
	// DefaultQPS and DefaultBurst leave room for the initial lists of many informers
	// without client-side throttling; client-go's own defaults (5 and 10) are meant for
	// one-shot CLI calls.
	DefaultQPS   = 50
	DefaultBurst = 100
	// DefaultPollInterval is how often a Provider re-reads the kubeconfig files when no
	// file event arrived.
	DefaultPollInterval = 30 * time.Second
	// DefaultReloadDelay is how long a Provider waits after a file event before it
	// re-reads the kubeconfig files.
	DefaultReloadDelay = 250 * time.Millisecond
)

// Options says which kubeconfig files and contexts become clusters, and how to talk to
// them. The zero value is usable: every context of $KUBECONFIG (or ~/.kube/config)
// becomes a cluster.
type Options struct {
	// Kubeconfigs lists kubeconfig files and directories. A directory stands for every
	// file in it (symbolic links followed) whose name does not start with '.', in
	// lexical order; dot files are skipped so that editor swap files and the "..data"
	// entries of a mounted Secret are not read. Subdirectories are not read. A leading
	// "~/" is replaced by the home directory. Every listed path must exist.
	//
	// Default: the path list in $KUBECONFIG, else ~/.kube/config, as they are when Load
	// or NewProvider is called. Unlike kubectl, a missing file in $KUBECONFIG is an
	// error, not skipped: a file that is briefly missing while it is rewritten must not
	// remove its clusters.
	//
	// Each context is resolved against the cluster and user entries of its own file.
	// Contexts are not merged across files as kubectl does: that would silently bind a
	// context to another file's user of the same name (such as "kubernetes-admin"), and a
	// context name defined by two files is an error (ErrDuplicateContext).
	Kubeconfigs []string

	// Include lists globs over context names; a context becomes a cluster when it
	// matches one of them and no Exclude glob. See ValidateGlob for the syntax.
	// Default: ["*"].
	Include []string

	// Exclude lists globs over context names; it wins over Include. Default: none.
	Exclude []string

	// Aliases maps context names to cluster names. A context without an alias is named
	// after itself. Aliases of contexts that do not exist or are not selected are
	// ignored, so that a context can disappear from a kubeconfig file without making the
	// options invalid. Cluster names must be unique (ErrDuplicateCluster) and non-empty.
	Aliases map[string]string

	// QPS and Burst set the client-side rate limit of every cluster's rest.Config.
	// Default: DefaultQPS and DefaultBurst. A negative QPS disables client-side rate
	// limiting, as with rest.Config.
	QPS   float32
	Burst int

	// UserAgent is the User-Agent of every request. Default: client-go's
	// (rest.DefaultKubernetesUserAgent), which names the binary and its version.
	UserAgent string

	// PollInterval is how often a Provider re-reads the kubeconfig files in case a
	// change was not seen by the file watcher (network file systems, files behind
	// symbolic links that change elsewhere). Unused by Load. Default: DefaultPollInterval.
	PollInterval time.Duration

	// ReloadDelay is how long a Provider waits after a file event before re-reading the
	// kubeconfig files, so that a burst of events (kubectl takes a lock file, truncates
	// and writes) leads to one reload of the finished file. Events during the wait do not
	// extend it. Unused by Load. Default: DefaultReloadDelay.
	ReloadDelay time.Duration

	// Clock drives a Provider's timers. Unused by Load. Default: the real clock.
	Clock clock.WithTicker
}

// ValidateName reports whether name can be a cluster name. Any non-empty string can:
// the aggregate key escapes '/' and '%'. The error wraps ErrInvalidName.
func ValidateName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: the name is empty", ErrInvalidName)
	}
	return nil
}

// Load reads the kubeconfig files of opts and returns one Cluster for every selected
// context, sorted by name. It returns an error if opts are invalid, if a file is
// missing, unreadable, empty or not a kubeconfig, if a selected context is unusable
// (for example it names a cluster entry its file does not define, or a CA file that
// cannot be read), if a context is defined twice, if two contexts map to one cluster
// name, or if no context is selected (ErrNoClusters). All problems are reported at once,
// joined, each naming the file and context. Errors never contain credentials.
func Load(opts Options) ([]*Cluster, error) {
	l, err := newLoader(opts)
	if err != nil {
		return nil, err
	}
	return l.loadSome()
}

// loader holds validated and defaulted options, read-only once built, and the last
// load (last).
type loader struct {
	paths     []string
	include   []glob
	exclude   []glob
	aliases   map[string]string
	qps       float32
	burst     int
	userAgent string

	// mu guards last: the files and result of the last load that succeeded.
	mu   sync.Mutex
	last lastLoad
}

// lastLoad is the result of a load, with the files it read: a load of the same bytes
// returns it again, without parsing the files or building the clusters. A poll reads a
// kubeconfig of 10,000 contexts every interval, and parsing it and building its
// clusters cost 3 s of CPU.
type lastLoad struct {
	sum      [sha256.Size]byte
	ok       bool
	clusters []*Cluster
	stats    loadStats
}

func newLoader(opts Options) (*loader, error) {
	var errs []error
	l := &loader{
		aliases:   maps.Clone(opts.Aliases),
		qps:       cmp.Or(opts.QPS, DefaultQPS),
		burst:     cmp.Or(opts.Burst, DefaultBurst),
		userAgent: opts.UserAgent,
	}
	if opts.Burst < 0 {
		errs = append(errs, fmt.Errorf("%w: Burst is negative (%d)", ErrInvalidOptions, opts.Burst))
	}
	paths, err := kubeconfigPaths(opts.Kubeconfigs)
	if err != nil {
		errs = append(errs, err)
	}
	l.paths = paths
	include := opts.Include
	if len(include) == 0 {
		include = []string{"*"}
	}
	if l.include, err = compileGlobs(include); err != nil {
		errs = append(errs, fmt.Errorf("include: %w", err))
	}
	if l.exclude, err = compileGlobs(opts.Exclude); err != nil {
		errs = append(errs, fmt.Errorf("exclude: %w", err))
	}
	for _, context := range slices.Sorted(maps.Keys(opts.Aliases)) {
		if err := ValidateName(opts.Aliases[context]); err != nil {
			errs = append(errs, fmt.Errorf("alias of context %q: %w", context, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l, nil
}

// kubeconfigPaths applies the default to Options.Kubeconfigs and cleans the paths.
func kubeconfigPaths(configured []string) ([]string, error) {
	paths := configured
	if len(paths) == 0 {
		for _, p := range filepath.SplitList(os.Getenv(clientcmd.RecommendedConfigPathEnvVar)) {
			if p != "" {
				paths = append(paths, p)
			}
		}
	}
	if len(paths) == 0 {
		home := homedir.HomeDir()
		if home == "" {
			return nil, fmt.Errorf("%w: no kubeconfig given, $%s is empty, and there is no home directory", ErrInvalidOptions, clientcmd.RecommendedConfigPathEnvVar)
		}
		paths = []string{filepath.Join(home, clientcmd.RecommendedHomeDir, clientcmd.RecommendedFileName)}
	}
	out := make([]string, 0, len(paths))
	for i, p := range paths {
		if p == "" {
			return nil, fmt.Errorf("%w: Kubeconfigs[%d] is empty", ErrInvalidOptions, i)
		}
		if p == "~" || strings.HasPrefix(p, "~"+string(filepath.Separator)) {
			home := homedir.HomeDir()
			if home == "" {
				return nil, fmt.Errorf("%w: kubeconfig %s: there is no home directory to expand '~'", ErrInvalidOptions, p)
			}
			p = filepath.Join(home, p[1:])
		}
		out = append(out, filepath.Clean(p))
	}
	return out, nil
}

// loadSome is load, but an empty result is an error (ErrNoClusters).
func (l *loader) loadSome() ([]*Cluster, error) {
	clusters, stats, err := l.load()
	if err != nil {
		return nil, err
	}
	if len(clusters) == 0 {
		return nil, l.noClustersError(stats)
	}
	return clusters, nil
}

// loadStats describes what load found, for messages.
type loadStats struct {
	files    []string
	contexts int
}

func (l *loader) noClustersError(s loadStats) error {
	return fmt.Errorf("%w: %d context(s) in %s, none is selected by include %q and exclude %q",
		ErrNoClusters, s.contexts, strings.Join(s.files, ", "), globPatterns(l.include), globPatterns(l.exclude))
}

func globPatterns(gs []glob) []string {
	ps := make([]string, len(gs))
	for i, g := range gs {
		ps[i] = g.pattern
	}
	return ps
}

func (l *loader) selected(context string) bool {
	return matchAny(l.include, context) && !matchAny(l.exclude, context)
}

// load reads all files and returns the selected clusters sorted by name. Any problem
// fails the whole load: a partial result would remove the clusters of the broken part.
//
// A load of the same files with the same bytes as the last load that succeeded returns
// its clusters again: nothing that a Cluster holds comes from elsewhere (the files that
// a kubeconfig names, CA, certificates and tokens, are read by client-go, by path).
func (l *loader) load() ([]*Cluster, loadStats, error) {
	var stats loadStats
	files, errs := l.files()
	stats.files = files
	data := make([][]byte, len(files))
	read := make([]bool, len(files))
	sum := sha256.New()
	for i, path := range files {
		var err error
		if data[i], err = os.ReadFile(path); err != nil {
			errs = append(errs, fmt.Errorf("reading kubeconfig: %w", err))
			continue
		}
		read[i] = true
		fmt.Fprintf(sum, "%d:%s\x00%d:", len(path), path, len(data[i]))
		sum.Write(data[i])
	}
	var key [sha256.Size]byte
	sum.Sum(key[:0])
	if len(errs) == 0 {
		l.mu.Lock()
		last := l.last
		l.mu.Unlock()
		if last.ok && last.sum == key {
			return last.clusters, last.stats, nil
		}
	}
	// The contexts in order, each with the error that it found or the cluster it makes:
	// the clusters are made on every core (a client configuration each, which clientcmd
	// merges field by field by reflection, about 65 µs a context), and the errors are
	// reported in the order of the files and their contexts.
	type item struct {
		err     error
		path    string
		kc      *clientcmdapi.Config
		context string
		c       *Cluster
	}
	var items []*item
	var made []*item
	contextFile := map[string]string{}
	for i, path := range files {
		if !read[i] {
			continue
		}
		kc, err := readKubeconfig(path, data[i])
		if err != nil {
			items = append(items, &item{err: err})
			continue
		}
		stats.contexts += len(kc.Contexts)
		for _, context := range slices.Sorted(maps.Keys(kc.Contexts)) {
			if !l.selected(context) {
				continue
			}
			if prev, ok := contextFile[context]; ok {
				items = append(items, &item{err: fmt.Errorf("%w %q: defined in %s and in %s", ErrDuplicateContext, context, prev, path)})
				continue
			}
			contextFile[context] = path
			it := &item{path: path, kc: kc, context: context}
			items = append(items, it)
			made = append(made, it)
		}
	}
	// A few workers that take the contexts in turn, rather than a goroutine each, whose
	// stack would grow anew in each.
	configs := new(configMemo)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(made)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(made)); i = next.Add(1) - 1 {
				it := made[i]
				it.c, it.err = l.newCluster(it.path, it.kc, it.context, configs)
			}
		})
	}
	wg.Wait()
	byName := map[string]*Cluster{}
	for _, it := range items {
		if it.err != nil {
			errs = append(errs, it.err)
			continue
		}
		c := it.c
		if prev, ok := byName[c.Name]; ok {
			errs = append(errs, fmt.Errorf("%w %q: used by context %q (%s) and context %q (%s)",
				ErrDuplicateCluster, c.Name, prev.Context, prev.Kubeconfig, c.Context, c.Kubeconfig))
			continue
		}
		byName[c.Name] = c
	}
	if len(errs) > 0 {
		return nil, stats, errors.Join(errs...)
	}
	clusters := slices.Collect(maps.Values(byName))
	slices.SortFunc(clusters, func(a, b *Cluster) int { return strings.Compare(a.Name, b.Name) })
	l.mu.Lock()
	l.last = lastLoad{sum: key, ok: true, clusters: clusters, stats: stats}
	l.mu.Unlock()
	return slices.Clone(clusters), stats, nil
}

// files expands the configured paths into kubeconfig files. A file reached twice (listed
// itself and through its directory) is read once.
func (l *loader) files() ([]string, []error) {
	var (
		files []string
		errs  []error
		seen  = map[string]bool{}
	)
	add := func(path string) {
		key := path
		if abs, err := filepath.Abs(path); err == nil {
			key = abs
		}
		if !seen[key] {
			seen[key] = true
			files = append(files, path)
		}
	}
	for _, path := range l.paths {
		fi, err := os.Stat(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading kubeconfig: %w", err))
			continue
		}
		switch {
		case fi.Mode().IsRegular():
			add(path)
		case fi.IsDir():
			entries, err := os.ReadDir(path) // sorted by name
			if err != nil {
				errs = append(errs, fmt.Errorf("reading kubeconfig directory: %w", err))
				continue
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") {
					continue
				}
				p := filepath.Join(path, e.Name())
				fi, err := os.Stat(p)
				if err != nil {
					errs = append(errs, fmt.Errorf("reading kubeconfig: %w", err))
					continue
				}
				if fi.Mode().IsRegular() {
					add(p)
				}
			}
		default:
			errs = append(errs, fmt.Errorf("%w %s: not a regular file or directory", ErrInvalidKubeconfig, path))
		}
	}
	return files, errs
}

// readKubeconfig parses data, one kubeconfig file read from path, and resolves the
// relative paths in it against the file's directory.
func readKubeconfig(path string, data []byte) (*clientcmdapi.Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		// clientcmd reads an empty file as an empty config. A file that is being
		// rewritten in place is briefly empty, and reading it as "no contexts" would
		// remove all its clusters.
		return nil, fmt.Errorf("%w %s: the file is empty", ErrInvalidKubeconfig, path)
	}
	kc, err := parseKubeconfig(data)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidKubeconfig, path, err)
	}
	// As clientcmd.LoadFromFile does; ResolveLocalPaths needs LocationOfOrigin.
	for _, c := range kc.Clusters {
		if c != nil {
			c.LocationOfOrigin = path
		}
	}
	for _, a := range kc.AuthInfos {
		if a != nil {
			a.LocationOfOrigin = path
		}
	}
	for _, c := range kc.Contexts {
		if c != nil {
			c.LocationOfOrigin = path
		}
	}
	if err := clientcmd.ResolveLocalPaths(kc); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalidKubeconfig, path, err)
	}
	return kc, nil
}

// parseKubeconfig decodes a kubeconfig. A Provider re-reads files that other programs
// are writing, so a panic of the decoder on odd input is turned into an error rather
// than allowed to take the process down.
func parseKubeconfig(data []byte) (kc *clientcmdapi.Config, err error) {
	defer func() {
		if r := recover(); r != nil {
			kc, err = nil, errors.New("the file cannot be parsed")
		}
	}()
	return clientcmd.Load(data)
}

// newCluster builds the Cluster of one context of the kubeconfig kc read from path.
// configMemo holds, for one load, the client configuration that clientcmd made of each
// pair of a kubeconfig's cluster and user: contexts that name the same pair (a context
// per namespace of a cluster, or many clusters behind one server and its credentials)
// get a copy of it, rather than clientcmd's merge by reflection, 65 µs, again. The
// configuration is a function of the two entries alone: the context's other fields
// (its namespace, its extensions) are not in it, nor are overrides, which the loader
// gives none.
type configMemo struct {
	// mu guards configs.
	mu      sync.Mutex
	configs map[configKey]*rest.Config
}

// configKey is a pair of a kubeconfig's cluster and user, by name.
type configKey struct {
	kc            *clientcmdapi.Config
	cluster, user string
}

// clientConfig returns a configuration of its own of the context of kc, whose cluster
// and user are those of key; the first one of key comes from clientcmd, the others are
// copies of it. An error is not kept: the next context of key asks clientcmd again.
func (m *configMemo) clientConfig(key configKey, context string) (*rest.Config, error) {
	m.mu.Lock()
	cfg := m.configs[key]
	m.mu.Unlock()
	if cfg == nil {
		// A nil ConfigAccess: client-go must not write refreshed auth-provider tokens
		// back into files that fleetwatch watches.
		var err error
		if cfg, err = clientcmd.NewNonInteractiveClientConfig(*key.kc, context, &clientcmd.ConfigOverrides{}, nil).ClientConfig(); err != nil {
			return nil, err
		}
		m.mu.Lock()
		if m.configs == nil {
			m.configs = map[configKey]*rest.Config{}
		}
		m.configs[key] = cfg
		m.mu.Unlock()
	}
	return rest.CopyConfig(cfg), nil
}

func (l *loader) newCluster(path string, kc *clientcmdapi.Config, context string, configs *configMemo) (*Cluster, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w %s, context %q: %w", ErrInvalidKubeconfig, path, context, fmt.Errorf(format, args...))
	}
	name := context
	if alias, ok := l.aliases[context]; ok {
		name = alias
	}
	if err := ValidateName(name); err != nil {
		return nil, fail("%w; give the context an alias", err)
	}
	kctx := kc.Contexts[context]
	if kctx == nil || kctx.Cluster == "" {
		return nil, fail("the context names no cluster")
	}
	kcluster := kc.Clusters[kctx.Cluster]
	if kcluster == nil {
		return nil, fail("cluster %q is not defined in this file", kctx.Cluster)
	}
	var user *clientcmdapi.AuthInfo
	if kctx.AuthInfo != "" {
		if user = kc.AuthInfos[kctx.AuthInfo]; user == nil {
			return nil, fail("user %q is not defined in this file", kctx.AuthInfo)
		}
	}
	// clientcmd quotes bad URLs in its errors, and they may carry a password.
	if kcluster.Server == "" {
		return nil, fail("cluster %q has no server", kctx.Cluster)
	}
	if _, err := url.Parse(kcluster.Server); err != nil {
		return nil, fail("the server of cluster %q is not a valid URL", kctx.Cluster)
	}
	if p := kcluster.ProxyURL; p != "" {
		u, err := url.Parse(p)
		if err != nil {
			return nil, fail("the proxy-url of cluster %q is not a valid URL", kctx.Cluster)
		}
		if u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5" {
			return nil, fail("the proxy-url of cluster %q has scheme %q, want http, https or socks5", kctx.Cluster, u.Scheme)
		}
	}
	cfg, err := configs.clientConfig(configKey{kc: kc, cluster: kctx.Cluster, user: kctx.AuthInfo}, context)
	if err != nil {
		return nil, fail("%w", err)
	}
	cfg.QPS = l.qps
	cfg.Burst = l.burst
	// The requests of many clusters of one apiserver, which share a transport, take
	// their connections one at a time instead of each dialing its own.
	cfg.Wrap(dialgate.Wrap)
	if l.userAgent != "" {
		cfg.UserAgent = l.userAgent
	}
	if _, _, err := rest.DefaultServerUrlFor(cfg); err != nil {
		return nil, fail("the server of cluster %q is not a valid URL", kctx.Cluster)
	}
	return &Cluster{
		Name:        name,
		Context:     context,
		Kubeconfig:  path,
		Config:      cfg,
		Fingerprint: fingerprint(kcluster, user),
	}, nil
}
