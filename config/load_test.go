package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/fleetwatch/fleetwatch/config"
)

// input is what Load reads in a test.
type input struct {
	file string // contents of config.yaml; empty means no file
	env  map[string]string
	args []string
}

// load runs Load on in. It returns the problems, one a line, with the directory of the
// config file cut from them.
func (in input) load(t *testing.T) (*config.Config, []string, error) {
	t.Helper()
	opts := config.LoadOptions{LookupEnv: lookupIn(in.env)}
	dir := t.TempDir()
	if in.file != "" {
		opts.File = writeConfig(t, dir, in.file)
	}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.BindFlags(fs)
	if err := fs.Parse(in.args); err != nil {
		t.Fatalf("parsing %q: %v", in.args, err)
	}
	opts.Flags = fs
	c, err := config.Load(opts)
	if err == nil {
		return c, nil, nil
	}
	if c != nil {
		t.Errorf("Load returned a Config with the error %v", err)
	}
	msg := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
	return nil, strings.Split(msg, "\n"), err
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func writeConfig(t *testing.T, dir, content string) string {
	t.Helper()
	name := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// full is testdata/full.yaml.
func full() config.Config {
	return config.Config{
		Kubeconfig: []string{"/etc/fleetwatch/kubeconfigs", "/home/ops/.kube/config"},
		Contexts: config.Contexts{
			Include: []string{"prod-*", "arn:aws:eks:*"},
			Exclude: []string{"*-canary"},
			Aliases: map[string]string{
				"arn:aws:eks:eu-west-1:123:cluster/prod": "prod-eu",
				"Kind.Staging":                           "staging",
			},
		},
		Resources: []config.Resource{
			{
				Name:          "pods",
				Namespaces:    []string{"default", "kube-system"},
				LabelSelector: "app in (web, api),tier!=cache",
				FieldSelector: "status.phase=Running",
			},
			{Name: "deployments.apps"},
			{Name: "widgets.v1alpha1.example.com", MetadataOnly: true},
		},
		Sync:     config.Sync{Timeout: 90 * time.Second, MaxConcurrent: 4, MaxObjects: 50000},
		Health:   config.Health{Path: "/livez", Interval: 10 * time.Second, Timeout: 2 * time.Second},
		Cache:    config.Cache{Encoding: config.CacheEncodingCompact, KeepManagedFields: true, KeepSecretData: true, JSONOnly: true},
		Snapshot: config.Snapshot{Path: "/var/lib/fleetwatch/fleetwatch.db", Interval: 250 * time.Millisecond, MaxPending: 1000, KeepCorrupt: 1},
		History:  config.History{Enabled: true, Retention: 12 * time.Hour, MaxBytes: 1 << 30},
		Server: config.Server{
			Address:     "0.0.0.0:8443",
			AcceptHosts: []string{`fleetwatch\.example\.com`, `fleetwatch\.fleetwatch\.svc(\.cluster\.local)?`},
			TLS:         config.TLS{CertFile: "/etc/fleetwatch/tls/tls.crt", KeyFile: "/etc/fleetwatch/tls/tls.key"},
			Auth: config.Auth{TokenFile: "/etc/fleetwatch/tokens", Delegated: config.Delegated{
				Enabled: true, Kubeconfig: "/etc/fleetwatch/home/kubeconfig", Audiences: []string{"fleetwatch"}, QPS: 50, Burst: 100,
			}},
			Limits: config.Limits{MaxRequestsInFlight: 100, MaxWatches: 2000, MaxWatchesPerClient: 50},
		},
		Shard: config.Shard{
			Enabled: true, Identity: "fleetwatch-0", Namespace: "fleetwatch", HomeKubeconfig: "/etc/fleetwatch/home/kubeconfig",
			Address:       "https://fleetwatch-0.fleetwatch-peers.fleetwatch.svc:8443",
			LeaseDuration: 20 * time.Second, RenewDeadline: 12 * time.Second, RetryPeriod: 3 * time.Second,
			Replicas: 3, StartTimeout: 90 * time.Second, HandoverTimeout: 15 * time.Second, ParallelReceives: 8, Balance: "objects", PeerCAFile: "/etc/fleetwatch/peers/ca.crt",
		},
		Log: config.Log{Verbosity: 2, Format: config.LogFormatJSON},
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDefault(t *testing.T) {
	d := config.Default()
	if err := d.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	c, problems, _ := input{}.load(t)
	if problems != nil {
		t.Fatalf("Load with nothing set: %q", problems)
	}
	if !reflect.DeepEqual(*c, d) {
		t.Errorf("Load with nothing set = %+v, want Default() = %+v", *c, d)
	}
	// Every call returns its own slices.
	d.Contexts.Include[0] = "changed"
	d.Resources[0].Name = "changed"
	if again := config.Default(); again.Contexts.Include[0] != "*" || again.Resources[0].Name != "namespaces" {
		t.Errorf("Default shares slices between calls: %+v", again)
	}
}

func TestDefaultResources(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range config.DefaultResources() {
		if strings.HasPrefix(r.Name, "secrets") {
			t.Errorf("the default resources include %s; secrets are only cached when configured", r.Name)
		}
		seen[r.Name] = true
	}
	for _, name := range []string{"namespaces", "nodes", "pods", "services", "deployments.apps"} {
		if !seen[name] {
			t.Errorf("the default resources lack %s", name)
		}
	}
	c := config.Default()
	c.Resources = config.DefaultResources()
	if err := c.Validate(); err != nil {
		t.Errorf("the default resources are invalid: %v", err)
	}
}

func TestLoadFullFile(t *testing.T) {
	c, err := config.Load(config.LoadOptions{File: "testdata/full.yaml", LookupEnv: lookupIn(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if want := full(); !reflect.DeepEqual(*c, want) {
		t.Errorf("Load(testdata/full.yaml) =\n%+v\nwant\n%+v", *c, want)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tt := range []struct {
		name string
		c    config.Config
	}{
		{"default", config.Default()},
		{"full", full()},
		{"quoting", func() config.Config {
			c := config.Default()
			c.Contexts.Aliases = map[string]string{"true": "123", "a: b": "#c", "null": " x ", "~": "'\"\n"}
			c.Resources = []config.Resource{{Name: "pods", LabelSelector: "yes", Namespaces: []string{"0", "0x1"}}}
			c.Snapshot.Path = ""
			return c
		}()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Relative paths in a file are relative to its directory, so the output
			// loads back into the same Config in the working directory.
			t.Chdir(t.TempDir())
			text := tt.c.String()
			writeConfig(t, ".", text)
			got, err := config.Load(config.LoadOptions{File: "config.yaml", LookupEnv: lookupIn(nil)})
			if err != nil {
				t.Fatalf("loading\n%s: %v", text, err)
			}
			if !reflect.DeepEqual(*got, tt.c) {
				t.Errorf("round trip through\n%s\ngot  %+v\nwant %+v", text, *got, tt.c)
			}
		})
	}
}

func TestPrecedence(t *testing.T) {
	const file = `
server:
  address: 127.0.0.1:9000
sync:
  maxConcurrent: 3
contexts:
  exclude: [a, b]
  aliases: {ctx-a: x}
resources:
  - name: pods
    labelSelector: app=web
`
	fileValues := func(c *config.Config) {
		c.Server.Address = "127.0.0.1:9000"
		c.Sync.MaxConcurrent = 3
		c.Contexts.Exclude = []string{"a", "b"}
		c.Contexts.Aliases = map[string]string{"ctx-a": "x"}
		c.Resources = []config.Resource{{Name: "pods", LabelSelector: "app=web"}}
	}
	for _, tt := range []struct {
		name string
		in   input
		want func(c *config.Config)
	}{
		{
			name: "file only",
			in:   input{file: file},
			want: fileValues,
		},
		{
			name: "env overrides file",
			in:   input{file: file, env: map[string]string{"FLEETWATCH_SERVER_ADDRESS": "127.0.0.1:9001"}},
			want: func(c *config.Config) {
				fileValues(c)
				c.Server.Address = "127.0.0.1:9001"
			},
		},
		{
			name: "flags override env",
			in: input{
				file: file,
				env:  map[string]string{"FLEETWATCH_SERVER_ADDRESS": "127.0.0.1:9001", "FLEETWATCH_SYNC_TIMEOUT": "1m"},
				args: []string{"--server-address=127.0.0.1:9002"},
			},
			want: func(c *config.Config) {
				fileValues(c)
				c.Server.Address = "127.0.0.1:9002"
				c.Sync.Timeout = time.Minute
			},
		},
		{
			name: "a flag at its default value still overrides",
			in: input{
				file: file,
				env:  map[string]string{"FLEETWATCH_SYNC_MAXCONCURRENT": "5"},
				args: []string{"--sync-max-concurrent=8"},
			},
			want: func(c *config.Config) {
				fileValues(c)
				c.Sync.MaxConcurrent = 8
			},
		},
		{
			name: "env without a file",
			in:   input{env: map[string]string{"FLEETWATCH_SNAPSHOT_PATH": ""}},
			want: func(c *config.Config) { c.Snapshot.Path = "" },
		},
		{
			name: "an empty env list empties the file's list",
			in:   input{file: file, env: map[string]string{"FLEETWATCH_CONTEXTS_EXCLUDE": ""}},
			want: func(c *config.Config) {
				fileValues(c)
				c.Contexts.Exclude = nil
			},
		},
		{
			name: "env aliases replace the file's",
			in:   input{file: file, env: map[string]string{"FLEETWATCH_CONTEXTS_ALIASES": "Ctx.B=y, arn:aws:eks:eu-west-1:1:cluster/c = z"}},
			want: func(c *config.Config) {
				fileValues(c)
				c.Contexts.Aliases = map[string]string{"Ctx.B": "y", "arn:aws:eks:eu-west-1:1:cluster/c": "z"}
			},
		},
		{
			name: "flag resources replace the file's",
			in:   input{file: file, args: []string{"--resources=nodes,deployments.apps", "--resources", "pods"}},
			want: func(c *config.Config) {
				fileValues(c)
				c.Resources = []config.Resource{{Name: "nodes"}, {Name: "deployments.apps"}, {Name: "pods"}}
			},
		},
		{
			name: "env of every kind",
			in: input{env: map[string]string{
				"FLEETWATCH_KUBECONFIG":                      "/a:/b,c::/d",
				"FLEETWATCH_CONTEXTS_INCLUDE":                "prod-*, staging-*",
				"FLEETWATCH_CONTEXTS_ALIASES":                "a=x",
				"FLEETWATCH_RESOURCES":                       "pods, deployments.apps,",
				"FLEETWATCH_SYNC_TIMEOUT":                    "30s",
				"FLEETWATCH_SYNC_MAXCONCURRENT":              "2",
				"FLEETWATCH_SYNC_MAXOBJECTS":                 "3000",
				"FLEETWATCH_CACHE_ENCODING":                  "compact",
				"FLEETWATCH_CACHE_KEEPMANAGEDFIELDS":         "true",
				"FLEETWATCH_CACHE_KEEPSECRETDATA":            "1",
				"FLEETWATCH_CACHE_JSONONLY":                  "true",
				"FLEETWATCH_SNAPSHOT_INTERVAL":               "5s",
				"FLEETWATCH_SNAPSHOT_MAXPENDING":             "10",
				"FLEETWATCH_SERVER_ADDRESS":                  "[::1]:8080",
				"FLEETWATCH_SERVER_TLS_CERTFILE":             "/c",
				"FLEETWATCH_SERVER_TLS_KEYFILE":              "/k",
				"FLEETWATCH_SERVER_AUTH_TOKENFILE":           "/t",
				"FLEETWATCH_SERVER_AUTH_DELEGATED_ENABLED":   "true",
				"FLEETWATCH_SERVER_AUTH_DELEGATED_AUDIENCES": "fleetwatch, https://kubernetes.default.svc",
				"FLEETWATCH_SERVER_AUTH_DELEGATED_QPS":       "50",
				"FLEETWATCH_SERVER_AUTH_DELEGATED_BURST":     "100",
				"FLEETWATCH_LOG_VERBOSITY":                   "4",
				"FLEETWATCH_LOG_FORMAT":                      "json",

				"FLEETWATCH_SERVER_LIMITS_MAXWATCHES": "20",
			}},
			want: func(c *config.Config) {
				c.Kubeconfig = []string{"/a", "/b,c", "/d"}
				c.Contexts.Include = []string{"prod-*", "staging-*"}
				c.Contexts.Aliases = map[string]string{"a": "x"}
				c.Resources = []config.Resource{{Name: "pods"}, {Name: "deployments.apps"}}
				c.Sync = config.Sync{Timeout: 30 * time.Second, MaxConcurrent: 2, MaxObjects: 3000}
				c.Cache = config.Cache{Encoding: config.CacheEncodingCompact, KeepManagedFields: true, KeepSecretData: true, JSONOnly: true}
				c.Snapshot.Interval, c.Snapshot.MaxPending = 5*time.Second, 10
				c.Server = config.Server{Address: "[::1]:8080", TLS: config.TLS{CertFile: "/c", KeyFile: "/k"}, Auth: config.Auth{TokenFile: "/t", Delegated: config.Delegated{
					Enabled: true, Audiences: []string{"fleetwatch", "https://kubernetes.default.svc"}, QPS: 50, Burst: 100,
				}}, Limits: config.Limits{MaxRequestsInFlight: config.DefaultServerLimitsMaxRequestsInFlight, MaxWatches: 20,
					MaxWatchesPerClient: config.DefaultServerLimitsMaxWatchesPerClient}}
				c.Log = config.Log{Verbosity: 4, Format: config.LogFormatJSON}
			},
		},
		{
			name: "flags of every kind",
			in: input{args: []string{
				"--kubeconfig=/a", "--kubeconfig=/b,c",
				"--contexts-include=prod-*,staging-*", "--contexts-exclude=*-canary",
				"--contexts-aliases=a=x,b=y",
				"--resources=pods",
				"--sync-timeout=30s", "--sync-max-concurrent=2", "--sync-max-objects=3000",
				"--cache-encoding=compact", "--cache-keep-managed-fields", "--cache-keep-secret-data=true", "--cache-json-only",
				"--snapshot-path=", "--snapshot-interval=5s", "--snapshot-max-pending=10", "--snapshot-keep-corrupt=0",
				"--server-address=0.0.0.0:8443",
				"--server-tls-cert-file=/c", "--server-tls-key-file=/k", "--server-auth-token-file=/t",
				"--server-auth-delegated-enabled", "--server-auth-delegated-audiences=fleetwatch", "--server-auth-delegated-audiences=other",
				"--server-auth-delegated-qps=50", "--server-auth-delegated-burst=100",
				"--server-limits-max-requests-in-flight=10", "--server-limits-max-watches=20", "--server-limits-max-watches-per-client=5",
				"--log-verbosity=4", "--log-format=json",
			}},
			want: func(c *config.Config) {
				c.Kubeconfig = []string{"/a", "/b,c"}
				c.Contexts = config.Contexts{
					Include: []string{"prod-*", "staging-*"},
					Exclude: []string{"*-canary"},
					Aliases: map[string]string{"a": "x", "b": "y"},
				}
				c.Resources = []config.Resource{{Name: "pods"}}
				c.Sync = config.Sync{Timeout: 30 * time.Second, MaxConcurrent: 2, MaxObjects: 3000}
				c.Cache = config.Cache{Encoding: config.CacheEncodingCompact, KeepManagedFields: true, KeepSecretData: true, JSONOnly: true}
				c.Snapshot = config.Snapshot{Path: "", Interval: 5 * time.Second, MaxPending: 10, KeepCorrupt: 0}
				c.Server = config.Server{Address: "0.0.0.0:8443", TLS: config.TLS{CertFile: "/c", KeyFile: "/k"}, Auth: config.Auth{TokenFile: "/t", Delegated: config.Delegated{
					Enabled: true, Audiences: []string{"fleetwatch", "other"}, QPS: 50, Burst: 100,
				}}, Limits: config.Limits{MaxRequestsInFlight: 10, MaxWatches: 20, MaxWatchesPerClient: 5}}
				c.Log = config.Log{Verbosity: 4, Format: config.LogFormatJSON}
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, problems, _ := tt.in.load(t)
			if problems != nil {
				t.Fatalf("Load: %q", problems)
			}
			want := config.Default()
			tt.want(&want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("Load =\n%+v\nwant\n%+v", *got, want)
			}
		})
	}
}

func TestConfigFileSource(t *testing.T) {
	dir := t.TempDir()
	byOption := writeConfig(t, filepath.Join(dir), "log: {verbosity: 1}\n")
	byFlag := writeConfig(t, mkdir(t, dir, "flag"), "log: {verbosity: 2}\n")
	byEnv := writeConfig(t, mkdir(t, dir, "env"), "log: {verbosity: 3}\n")
	for _, tt := range []struct {
		name string
		file string
		args []string
		env  map[string]string
		want int
	}{
		{"none", "", nil, nil, 0},
		{"env", "", nil, map[string]string{config.ConfigEnv: byEnv}, 3},
		{"flag over env", "", []string{"--config", byFlag}, map[string]string{config.ConfigEnv: byEnv}, 2},
		{"option over flag", byOption, []string{"--config", byFlag}, map[string]string{config.ConfigEnv: byEnv}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			config.BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			opts := config.LoadOptions{File: tt.file, Flags: fs, LookupEnv: lookupIn(tt.env)}
			c, err := config.Load(opts)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[int]string{1: byOption, 2: byFlag, 3: byEnv}[tt.want]; opts.FileName() != want {
				t.Errorf("FileName() = %q, want %q", opts.FileName(), want)
			}
			if c.Log.Verbosity != tt.want {
				t.Errorf("log.verbosity = %d, want %d: the wrong file was read", c.Log.Verbosity, tt.want)
			}
		})
	}
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMissingFile(t *testing.T) {
	_, err := config.Load(config.LoadOptions{File: filepath.Join(t.TempDir(), "missing.yaml"), LookupEnv: lookupIn(nil)})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want fs.ErrNotExist", err)
	}
	if errors.Is(err, config.ErrInvalid) {
		t.Errorf("a missing file matches ErrInvalid: %v", err)
	}
}

func TestPaths(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	name := writeConfig(t, dir, `
kubeconfig: [kubeconfigs, ~/.kube/config, /abs/kubeconfig]
snapshot: {path: data/fleetwatch.db}
server:
  tls: {certFile: ../tls.crt, keyFile: ~/tls.key}
  auth: {tokenFile: tokens}
`)
	for _, tt := range []struct {
		name string
		env  map[string]string
		args []string
		want func(c *config.Config)
	}{
		{
			name: "relative to the file's directory",
			want: func(c *config.Config) {
				c.Kubeconfig = []string{filepath.Join(dir, "kubeconfigs"), filepath.Join(home, ".kube/config"), "/abs/kubeconfig"}
				c.Snapshot.Path = filepath.Join(dir, "data/fleetwatch.db")
				c.Server.TLS = config.TLS{CertFile: filepath.Join(filepath.Dir(dir), "tls.crt"), KeyFile: filepath.Join(home, "tls.key")}
				c.Server.Auth.TokenFile = filepath.Join(dir, "tokens")
			},
		},
		{
			name: "env and flags are relative to the working directory",
			env:  map[string]string{"FLEETWATCH_SNAPSHOT_PATH": "fw.db", "FLEETWATCH_KUBECONFIG": "kc:~/kc"},
			args: []string{"--server-auth-token-file=~/tokens", "--server-tls-cert-file=c.pem"},
			want: func(c *config.Config) {
				c.Kubeconfig = []string{"kc", filepath.Join(home, "kc")}
				c.Snapshot.Path = "fw.db"
				c.Server.TLS = config.TLS{CertFile: "c.pem", KeyFile: filepath.Join(home, "tls.key")}
				c.Server.Auth.TokenFile = filepath.Join(home, "tokens")
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			config.BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			got, err := config.Load(config.LoadOptions{File: name, Flags: fs, LookupEnv: lookupIn(tt.env)})
			if err != nil {
				t.Fatal(err)
			}
			want := config.Default()
			tt.want(&want)
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("Load =\n%+v\nwant\n%+v", *got, want)
			}
		})
	}
}

func TestEmptyResourcesAreTheDefaultSet(t *testing.T) {
	for _, in := range []input{
		{file: "log: {format: text}\n"},
		{file: "resources: []\n"},
		{file: "resources: ~\n"},
		{file: "resources:\n"},
		{file: "resources: [{name: pods}]\n", env: map[string]string{"FLEETWATCH_RESOURCES": ""}},
		{file: "resources: [{name: pods}]\n", args: []string{"--resources="}},
	} {
		c, problems, _ := in.load(t)
		if problems != nil {
			t.Fatalf("Load(%+v): %q", in, problems)
		}
		if want := config.DefaultResources(); !reflect.DeepEqual(c.Resources, want) {
			t.Errorf("Load(%+v).Resources = %+v, want the default set", in, c.Resources)
		}
	}
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	c, problems, _ := input{file: `
resources:
  - &base
    name: pods
    namespaces: &ns [team-a, team-b]
    labelSelector: app=web
  - <<: *base
    name: services
  - name: configmaps
    namespaces: *ns
    metadataOnly: true
  - <<: [{name: nodes, labelSelector: a=b}, *base]
`}.load(t)
	if problems != nil {
		t.Fatalf("Load: %q", problems)
	}
	ns := []string{"team-a", "team-b"}
	want := []config.Resource{
		{Name: "pods", Namespaces: ns, LabelSelector: "app=web"},
		{Name: "services", Namespaces: ns, LabelSelector: "app=web"},
		{Name: "configmaps", Namespaces: ns, MetadataOnly: true},
		{Name: "nodes", Namespaces: ns, LabelSelector: "a=b"},
	}
	if !reflect.DeepEqual(c.Resources, want) {
		t.Errorf("Resources = %+v, want %+v", c.Resources, want)
	}
}

func TestFileProblems(t *testing.T) {
	for _, tt := range []struct {
		name string
		file string
		want []string
	}{
		// Unknown keys, at every depth.
		{"unknown top-level key", "servr:\n  address: x\n", []string{
			"config.yaml:1: servr: unknown key",
		}},
		{"unknown key in a section", "log: {}\nserver:\n  adress: 127.0.0.1:1\n", []string{
			"config.yaml:3: server.adress: unknown key",
		}},
		{"unknown key two deep", "server:\n  tls:\n    cert: a\n", []string{
			"config.yaml:3: server.tls.cert: unknown key",
		}},
		{"unknown key in a resource", "resources:\n  - name: pods\n  - name: nodes\n    selector: a=b\n", []string{
			"config.yaml:4: resources[1].selector: unknown key",
		}},
		{"unknown key in the wrong case", "resources:\n  - name: pods\n    labelselector: a=b\n", []string{
			`config.yaml:3: resources[0].labelselector: unknown key (did you mean "labelSelector"?)`,
		}},
		{"key of another section", "address: 127.0.0.1:1\n", []string{
			"config.yaml:1: address: unknown key (did you mean server.address?)",
		}},

		// Wrong types.
		{"string for an integer", "sync:\n  maxConcurrent: \"8\"\n", []string{
			`config.yaml:2: sync.maxConcurrent: expected an integer, got the string "8"`,
		}},
		{"float for an integer", "snapshot:\n  maxPending: 1.5\n", []string{
			`config.yaml:2: snapshot.maxPending: expected an integer, got the number 1.5`,
		}},
		{"integer out of range", "log:\n  verbosity: 99999999999999999999\n", []string{
			`config.yaml:2: log.verbosity: expected an integer, got the number 99999999999999999999`,
		}},
		{"integer for a duration", "sync:\n  timeout: 30\n", []string{
			`config.yaml:2: sync.timeout: expected a duration such as "90s" or "2m", got the integer 30`,
		}},
		{"not a duration", "snapshot:\n  interval: 1 second\n", []string{
			`config.yaml:2: snapshot.interval: "1 second" is not a duration such as "90s" or "2m"`,
		}},
		{"yes is not a boolean", "cache:\n  keepSecretData: yes\n", []string{
			`config.yaml:2: cache.keepSecretData: expected true or false, got the string "yes"`,
		}},
		{"integer for a string", "server:\n  address: 8080\n", []string{
			"config.yaml:2: server.address: expected a string, got the integer 8080",
		}},
		{"string for a list", "kubeconfig: /a\n", []string{
			`config.yaml:1: kubeconfig: expected a list, got the string "/a"`,
		}},
		{"list for a section", "contexts: [a]\n", []string{
			"config.yaml:1: contexts: expected a mapping, got a list",
		}},
		{"mapping in a list of strings", "contexts:\n  include:\n    - '*'\n    - {a: b}\n", []string{
			"config.yaml:4: contexts.include[1]: expected a string, got a mapping",
		}},
		{"null in a list", "kubeconfig: [/a, ~]\n", []string{
			"config.yaml:1: kubeconfig[1]: expected a string, got null",
		}},
		{"string for a resource", "resources:\n  - pods\n", []string{
			`config.yaml:2: resources[0]: expected a mapping, got the string "pods"`,
		}},
		{"wrong type in a resource", "resources:\n  - name: pods\n    metadataOnly: 1\n", []string{
			"config.yaml:3: resources[0].metadataOnly: expected true or false, got the integer 1",
		}},
		{"integer alias", "contexts:\n  aliases:\n    a: 1\n", []string{
			`config.yaml:3: contexts.aliases["a"]: expected a string, got the integer 1`,
		}},
		{"integer context name", "contexts:\n  aliases:\n    1: a\n", []string{
			"config.yaml:3: contexts.aliases: expected a string key, got the integer 1",
		}},
		{"top level is a list", "- a\n", []string{
			"config.yaml:1: expected a mapping, got a list",
		}},
		{"bad merge", "sync:\n  <<: 5\n", []string{
			"config.yaml:2: sync.<<: expected a mapping or a list of mappings to merge, got the integer 5",
		}},

		// Syntax.
		{"not YAML", "server:\n  address: [\n", []string{
			"config.yaml:2: did not find expected node content",
		}},
		{"two documents", "log: {format: json}\n---\nlog: {format: text}\n", []string{
			"config.yaml:2: the file holds more than one YAML document",
		}},
		{"key defined twice", "sync:\n  timeout: 1m\n  timeout: 2m\n", []string{
			"config.yaml:3: sync.timeout: the key is already defined at line 2",
		}},
		{"context defined twice", "contexts:\n  aliases:\n    a: x\n    a: y\n", []string{
			`config.yaml:4: contexts.aliases["a"]: the key is already defined at line 3`,
		}},
		{"a problem in an anchor is reported at each use, once", "resources:\n  - &r {name: pods, name: nodes}\n  - <<: [*r, *r]\n", []string{
			"config.yaml:2: resources[0].name: the key is already defined at line 2",
			"config.yaml:2: resources[1].name: the key is already defined at line 2",
			`config.yaml:2: resources[1].name: "pods" is already configured by resources[0]`,
		}},

		// A value already reported is not reported again by validation.
		{"wrong type not validated again", "resources:\n  - name: 5\nserver:\n  address: 0.0.0.0:1\n  tls: {certFile: 5}\n", []string{
			"config.yaml:2: resources[0].name: expected a string, got the integer 5",
			"config.yaml:4: server.tls.keyFile: required because server.address \"0.0.0.0:1\" is not a loopback address",
			"config.yaml:4: server.auth.tokenFile: required (or server.auth.delegated.enabled) because server.address \"0.0.0.0:1\" is not a loopback address",
			"config.yaml:5: server.tls.certFile: expected a string, got the integer 5",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, problems, _ := input{file: tt.file}.load(t)
			if !reflect.DeepEqual(problems, tt.want) {
				t.Errorf("problems of\n%s\ngot  %q\nwant %q", tt.file, problems, tt.want)
			}
		})
	}
}

func TestValidationProblemsNameTheirSource(t *testing.T) {
	const file = `
resources:
  - name: pods
  - name: nodes
    labelSelector: "app in ("
`
	for _, tt := range []struct {
		name string
		in   input
		want []string
	}{
		{"file", input{file: file}, []string{
			`config.yaml:5: resources[1].labelSelector: "app in (": unable to parse requirement: found '', expected: ',', ')' or identifier`,
		}},
		{"env", input{env: map[string]string{"FLEETWATCH_SERVER_ADDRESS": "localhost"}}, []string{
			`env FLEETWATCH_SERVER_ADDRESS: server.address: "localhost": missing port in address`,
		}},
		{"flag", input{args: []string{"--sync-max-concurrent=0"}, env: map[string]string{"FLEETWATCH_SYNC_MAXCONCURRENT": "3"}}, []string{
			"flag --sync-max-concurrent: sync.maxConcurrent: must be at least 1, got 0",
		}},
		{"a missing key at the key that requires it", input{
			file: "server:\n  tls: {certFile: /c, keyFile: /k}\n",
			args: []string{"--server-address=:8443"},
		}, []string{
			`flag --server-address: server.auth.tokenFile: required (or server.auth.delegated.enabled) because server.address ":8443" is not a loopback address`,
		}},
		{"env values that do not parse", input{env: map[string]string{
			"FLEETWATCH_SYNC_MAXCONCURRENT":   "eight",
			"FLEETWATCH_SYNC_TIMEOUT":         "2",
			"FLEETWATCH_CACHE_KEEPSECRETDATA": "yes please",
			"FLEETWATCH_CONTEXTS_ALIASES":     "a=b,c",
		}}, []string{
			`env FLEETWATCH_CONTEXTS_ALIASES: contexts.aliases: "c" is not a context=cluster pair`,
			`env FLEETWATCH_SYNC_TIMEOUT: sync.timeout: "2" is not a duration such as "90s" or "2m"`,
			`env FLEETWATCH_SYNC_MAXCONCURRENT: sync.maxConcurrent: "eight" is not an integer`,
			`env FLEETWATCH_CACHE_KEEPSECRETDATA: cache.keepSecretData: "yes please" is not true or false`,
		}},
		{"an overridden file value is still checked", input{
			file: "sync:\n  timeout: 30\n",
			env:  map[string]string{"FLEETWATCH_SYNC_TIMEOUT": "-1s"},
		}, []string{
			`config.yaml:2: sync.timeout: expected a duration such as "90s" or "2m", got the integer 30`,
			"env FLEETWATCH_SYNC_TIMEOUT: sync.timeout: must be positive, got -1s",
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, problems, _ := tt.in.load(t)
			if !reflect.DeepEqual(problems, tt.want) {
				t.Errorf("problems\ngot  %q\nwant %q", problems, tt.want)
			}
		})
	}
}

func TestEveryProblemAtOnce(t *testing.T) {
	_, problems, err := input{file: `kubeconfig: [a.yaml, a.yaml]
contexts:
  include: ["prod-*", "[bad"]
  aliases:
    My.Ctx: prod
    other: prod
resources:
  - name: pods
    labelSelector: "app in ("
    metadataonly: true
  - name: Pods
    namespaces: [default, default]
  - name: pods
    metadataOnly: yes
sync:
  timeout: 30
  maxConcurrent: "8"
server:
  address: 0.0.0.0:8080
  tls:
    certFile: cert.pem
address: x
log: {verbosity: -1, format: xml}
`, env: map[string]string{"FLEETWATCH_SNAPSHOT_MAXPENDING": "0"}}.load(t)
	want := []string{
		`config.yaml:1: kubeconfig[1]: "a.yaml" is already listed as kubeconfig[0]`,
		`config.yaml:3: contexts.include[1]: invalid glob "[bad": missing ']'`,
		`config.yaml:6: contexts.aliases["other"]: cluster name "prod" is also the alias of context "My.Ctx"`,
		`config.yaml:9: resources[0].labelSelector: "app in (": unable to parse requirement: found '', expected: ',', ')' or identifier`,
		`config.yaml:10: resources[0].metadataonly: unknown key (did you mean "metadataOnly"?)`,
		`config.yaml:11: resources[1].name: invalid resource name: "Pods" must be lower case`,
		`config.yaml:12: resources[1].namespaces[1]: "default" is already listed as resources[1].namespaces[0]`,
		`config.yaml:13: resources[2].name: "pods" is already configured by resources[0]`,
		`config.yaml:14: resources[2].metadataOnly: expected true or false, got the string "yes"`,
		`config.yaml:16: sync.timeout: expected a duration such as "90s" or "2m", got the integer 30`,
		`config.yaml:17: sync.maxConcurrent: expected an integer, got the string "8"`,
		`config.yaml:19: server.tls.keyFile: required because server.address "0.0.0.0:8080" is not a loopback address`,
		`config.yaml:19: server.auth.tokenFile: required (or server.auth.delegated.enabled) because server.address "0.0.0.0:8080" is not a loopback address`,
		`config.yaml:22: address: unknown key (did you mean server.address?)`,
		`config.yaml:23: log.verbosity: must not be negative, got -1`,
		`config.yaml:23: log.format: "xml" is neither "text" nor "json"`,
		`env FLEETWATCH_SNAPSHOT_MAXPENDING: snapshot.maxPending: must be at least 1, got 0`,
	}
	if !reflect.DeepEqual(problems, want) {
		t.Errorf("problems\ngot  %q\nwant %q", problems, want)
	}

	// Each problem is a *FieldError that says what kind of problem it is.
	var kinds []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		for _, k := range []struct {
			name string
			err  error
		}{{"syntax", config.ErrSyntax}, {"unknown", config.ErrUnknownKey}, {"type", config.ErrWrongType}, {"value", config.ErrInvalidValue}} {
			if errors.Is(fe, k.err) {
				kinds = append(kinds, k.name)
			}
		}
		if !errors.Is(fe, config.ErrInvalid) {
			t.Errorf("%v does not match ErrInvalid", fe)
		}
	}
	wantKinds := []string{"value", "value", "value", "value", "unknown", "value", "value", "value", "type", "type", "type", "value", "value", "unknown", "value", "value", "value"}
	if !reflect.DeepEqual(kinds, wantKinds) {
		t.Errorf("kinds of the problems = %q, want %q", kinds, wantKinds)
	}
}

func TestFieldError(t *testing.T) {
	_, _, err := input{file: "log:\n  format: xml\n"}.load(t)
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("%v holds no *FieldError", err)
	}
	if filepath.Base(fe.File) != "config.yaml" || fe.Line != 2 || fe.Key != "log.format" || fe.Env != "" || fe.Flag != "" {
		t.Errorf("FieldError = %+v, want config.yaml line 2, key log.format", *fe)
	}
	if !errors.Is(err, config.ErrInvalidValue) || errors.Is(err, config.ErrWrongType) {
		t.Errorf("%v: want ErrInvalidValue only", err)
	}
}

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(c *config.Config)
		want   []string // empty: valid
	}{
		{"empty kubeconfig path", func(c *config.Config) { c.Kubeconfig = []string{"/a", ""} }, []string{
			"kubeconfig[1]: the path is empty",
		}},
		{"kubeconfig listed twice", func(c *config.Config) { c.Kubeconfig = []string{"/a", "/b", "/a"} }, []string{
			`kubeconfig[2]: "/a" is already listed as kubeconfig[0]`,
		}},
		{"invalid include glob", func(c *config.Config) { c.Contexts.Include = []string{"[a"} }, []string{
			`contexts.include[0]: invalid glob "[a": missing ']'`,
		}},
		{"empty exclude glob", func(c *config.Config) { c.Contexts.Exclude = []string{""} }, []string{
			`contexts.exclude[0]: invalid glob "": empty pattern`,
		}},
		{"empty alias", func(c *config.Config) { c.Contexts.Aliases = map[string]string{"a": ""} }, []string{
			`contexts.aliases["a"]: invalid cluster name: the name is empty`,
		}},
		{"empty context name", func(c *config.Config) { c.Contexts.Aliases = map[string]string{"": "x"} }, []string{
			`contexts.aliases[""]: the context name is empty`,
		}},
		{"two contexts, one cluster name", func(c *config.Config) { c.Contexts.Aliases = map[string]string{"b": "x", "a": "x", "c": "y"} }, []string{
			`contexts.aliases["b"]: cluster name "x" is also the alias of context "a"`,
		}},
		{"upper-case resource", func(c *config.Config) { c.Resources = []config.Resource{{Name: "Pods"}} }, []string{
			`resources[0].name: invalid resource name: "Pods" must be lower case`,
		}},
		{"empty resource name", func(c *config.Config) { c.Resources = []config.Resource{{Name: "pods"}, {}} }, []string{
			"resources[1].name: invalid resource name: empty",
		}},
		{"resource twice", func(c *config.Config) {
			c.Resources = []config.Resource{{Name: "pods"}, {Name: "nodes"}, {Name: "pods", MetadataOnly: true}}
		}, []string{
			`resources[2].name: "pods" is already configured by resources[0]`,
		}},
		{"invalid namespace", func(c *config.Config) {
			c.Resources = []config.Resource{{Name: "pods", Namespaces: []string{"Team_A"}}}
		}, []string{
			`resources[0].namespaces[0]: "Team_A" is not a namespace name: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
		}},
		{"namespace twice", func(c *config.Config) {
			c.Resources = []config.Resource{{Name: "pods", Namespaces: []string{"a", "a"}}}
		}, []string{
			`resources[0].namespaces[1]: "a" is already listed as resources[0].namespaces[0]`,
		}},
		{"invalid label selector", func(c *config.Config) { c.Resources = []config.Resource{{Name: "pods", LabelSelector: "app in ("}} }, []string{
			`resources[0].labelSelector: "app in (": unable to parse requirement: found '', expected: ',', ')' or identifier`,
		}},
		{"invalid field selector", func(c *config.Config) { c.Resources = []config.Resource{{Name: "pods", FieldSelector: "status.phase"}} }, []string{
			`resources[0].fieldSelector: "status.phase": invalid selector: 'status.phase'; can't understand 'status.phase'`,
		}},
		{"zero sync timeout", func(c *config.Config) { c.Sync.Timeout = 0 }, []string{
			"sync.timeout: must be positive, got 0s",
		}},
		{"negative sync timeout", func(c *config.Config) { c.Sync.Timeout = -time.Minute }, []string{
			"sync.timeout: must be positive, got -1m",
		}},
		{"unknown cache encoding", func(c *config.Config) { c.Cache.Encoding = "cbor" }, []string{
			`cache.encoding: "cbor" is none of "objects", "compact", "compressed" and "compressed-dict"`,
		}},
		{"relative health path", func(c *config.Config) { c.Health.Path = "readyz" }, []string{
			`health.path: must be an absolute path such as "/readyz", got "readyz"`,
		}},
		{"health path with a query", func(c *config.Config) { c.Health.Path = "/readyz?verbose" }, []string{
			`health.path: must be a path without query, fragment or escapes, got "/readyz?verbose"`,
		}},
		{"zero health interval and negative timeout", func(c *config.Config) { c.Health.Interval, c.Health.Timeout = 0, -time.Second }, []string{
			"health.interval: must be positive, got 0s",
			"health.timeout: must be positive, got -1s",
		}},
		{"zero concurrency", func(c *config.Config) { c.Sync.MaxConcurrent = 0 }, []string{
			"sync.maxConcurrent: must be at least 1, got 0",
		}},
		{"negative sync objects", func(c *config.Config) { c.Sync.MaxObjects = -5 }, []string{
			"sync.maxObjects: must be at least 1, got -5",
		}},
		{"negative snapshot interval", func(c *config.Config) { c.Snapshot.Interval = -time.Second }, []string{
			"snapshot.interval: must be positive, got -1s",
		}},
		{"negative snapshot batch", func(c *config.Config) { c.Snapshot.MaxPending = -1 }, []string{
			"snapshot.maxPending: must be at least 1, got -1",
		}},
		{"negative snapshot.keepCorrupt", func(c *config.Config) { c.Snapshot.KeepCorrupt = -1 }, []string{
			"snapshot.keepCorrupt: must not be negative, got -1",
		}},
		{"zero history.retention", func(c *config.Config) { c.History.Retention = 0 }, []string{
			"history.retention: must be positive, got 0s",
		}},
		{"history.maxBytes in GiB", func(c *config.Config) { c.History.MaxBytes = 36 }, []string{
			"history.maxBytes: must be at least 1048576 (1 MiB), got 36: it counts bytes",
		}},
		{"no port", func(c *config.Config) { c.Server.Address = "127.0.0.1" }, []string{
			`server.address: "127.0.0.1": missing port in address`,
		}},
		{"named port", func(c *config.Config) { c.Server.Address = "127.0.0.1:http" }, []string{
			`server.address: "127.0.0.1:http": the port "http" is not a number from 0 to 65535`,
		}},
		{"port out of range", func(c *config.Config) { c.Server.Address = "127.0.0.1:65536" }, []string{
			`server.address: "127.0.0.1:65536": the port "65536" is not a number from 0 to 65535`,
		}},
		{"accepted hosts", func(c *config.Config) {
			c.Server.AcceptHosts = []string{`fleetwatch\.example\.com`, "", "(a", `fleetwatch\.example\.com`, "a)|(b"}
		}, []string{
			`server.acceptHosts[1]: empty pattern`,
			"server.acceptHosts[2]: error parsing regexp: missing closing ): `(a`",
			`server.acceptHosts[3]: "fleetwatch\\.example\\.com" is already listed as server.acceptHosts[0]`,
			"server.acceptHosts[4]: error parsing regexp: unexpected ): `a)|(b`",
		}},
		{"every interface needs TLS and tokens", func(c *config.Config) { c.Server.Address = ":8080" }, []string{
			`server.tls.certFile: required because server.address ":8080" is not a loopback address`,
			`server.tls.keyFile: required because server.address ":8080" is not a loopback address`,
			`server.auth.tokenFile: required (or server.auth.delegated.enabled) because server.address ":8080" is not a loopback address`,
		}},
		{"a host name needs TLS and tokens", func(c *config.Config) {
			c.Server.Address = "fleetwatch.example.com:8443"
			c.Server.Auth.TokenFile = "/t"
		}, []string{
			`server.tls.certFile: required because server.address "fleetwatch.example.com:8443" is not a loopback address`,
			`server.tls.keyFile: required because server.address "fleetwatch.example.com:8443" is not a loopback address`,
		}},
		{"TLS without tokens", func(c *config.Config) {
			c.Server.Address = "10.0.0.1:8443"
			c.Server.TLS = config.TLS{CertFile: "/c", KeyFile: "/k"}
		}, []string{
			`server.auth.tokenFile: required (or server.auth.delegated.enabled) because server.address "10.0.0.1:8443" is not a loopback address`,
		}},
		{"TLS and delegated auth", func(c *config.Config) {
			c.Server.Address = "10.0.0.1:8443"
			c.Server.TLS = config.TLS{CertFile: "/c", KeyFile: "/k"}
			c.Server.Auth.Delegated.Enabled = true
		}, nil},
		{"home kubeconfig without delegation", func(c *config.Config) { c.Server.Auth.Delegated.Kubeconfig = "/home" }, []string{
			"server.auth.delegated.kubeconfig: is set, but server.auth.delegated.enabled is false",
		}},
		{"audiences without delegation", func(c *config.Config) { c.Server.Auth.Delegated.Audiences = []string{"fleetwatch"} }, []string{
			"server.auth.delegated.audiences: is set, but server.auth.delegated.enabled is false",
		}},
		{"bad audiences", func(c *config.Config) {
			c.Server.Auth.Delegated.Enabled = true
			c.Server.Auth.Delegated.Audiences = []string{"fleetwatch", "", "fleetwatch"}
		}, []string{
			"server.auth.delegated.audiences[1]: the audience is empty",
			`server.auth.delegated.audiences[2]: "fleetwatch" is already listed as server.auth.delegated.audiences[0]`,
		}},
		{"no review rate", func(c *config.Config) { c.Server.Auth.Delegated.QPS, c.Server.Auth.Delegated.Burst = 0, -1 }, []string{
			"server.auth.delegated.qps: must be at least 1, got 0",
			"server.auth.delegated.burst: must be at least 1, got -1",
		}},
		{"certificate without key", func(c *config.Config) { c.Server.TLS.CertFile = "/c" }, []string{
			"server.tls.keyFile: required because server.tls.certFile is set",
		}},
		{"key without certificate", func(c *config.Config) { c.Server.TLS.KeyFile = "/k" }, []string{
			"server.tls.certFile: required because server.tls.keyFile is set",
		}},
		{"no requests in flight", func(c *config.Config) { c.Server.Limits.MaxRequestsInFlight = 0 }, []string{
			"server.limits.maxRequestsInFlight: must be at least 1, got 0",
		}},
		{"negative watches", func(c *config.Config) { c.Server.Limits.MaxWatches = -1 }, []string{
			"server.limits.maxWatches: must be at least 1, got -1",
		}},
		{"no watches per client", func(c *config.Config) { c.Server.Limits.MaxWatchesPerClient = 0 }, []string{
			"server.limits.maxWatchesPerClient: must be at least 1, got 0",
		}},
		{"negative verbosity", func(c *config.Config) { c.Log.Verbosity = -1 }, []string{
			"log.verbosity: must not be negative, got -1",
		}},
		{"unknown log format", func(c *config.Config) { c.Log.Format = "" }, []string{
			`log.format: "" is neither "text" nor "json"`,
		}},
		{"shard identity that makes no Lease name", func(c *config.Config) { c.Shard.Identity = "Fleetwatch_0" }, []string{
			`shard.identity: "Fleetwatch_0" does not make a Lease name: use lower case letters, digits, '-' and '.', beginning and ending with a letter or digit, at most 234 in all`,
		}},
		{"shard renew deadline not shorter than the lease", func(c *config.Config) { c.Shard.RenewDeadline = c.Shard.LeaseDuration }, []string{
			"shard.renewDeadline: must be shorter than shard.leaseDuration (15s), got 15s",
		}},
		{"shard retry period too long for the renew deadline", func(c *config.Config) { c.Shard.RetryPeriod = 9 * time.Second }, []string{
			"shard.retryPeriod: must be shorter than shard.renewDeadline (10s) / 1.2, got 9s",
		}},
		{"negative shard replicas", func(c *config.Config) { c.Shard.Replicas = -1 }, []string{
			"shard.replicas: must not be negative, got -1",
		}},
		{"no shard start timeout", func(c *config.Config) { c.Shard.StartTimeout = 0 }, []string{
			"shard.startTimeout: must be positive, got 0s",
		}},
		{"no parallel receives", func(c *config.Config) { c.Shard.ParallelReceives = 0 }, []string{
			"shard.parallelReceives: must be at least 1, got 0",
		}},
		{"unknown shard balance", func(c *config.Config) { c.Shard.Balance = "bytes" }, []string{
			`shard.balance: "bytes" is neither "count" nor "objects"`,
		}},
		{"negative shard lease duration", func(c *config.Config) { c.Shard.LeaseDuration = -time.Second }, []string{
			"shard.leaseDuration: must be positive, got -1s",
		}},

		{"empty resources stand for the default set", func(c *config.Config) { c.Resources = nil }, nil},
		{"localhost", func(c *config.Config) { c.Server.Address = "localhost:8080" }, nil},
		{"IPv6 loopback", func(c *config.Config) { c.Server.Address = "[::1]:0" }, nil},
		{"all of 127/8 is loopback", func(c *config.Config) { c.Server.Address = "127.1.2.3:65535" }, nil},
		{"tokens and TLS on loopback", func(c *config.Config) {
			c.Server.TLS = config.TLS{CertFile: "/c", KeyFile: "/k"}
			c.Server.Auth.TokenFile = "/t"
		}, nil},
		{"tokens without TLS on loopback", func(c *config.Config) { c.Server.Auth.TokenFile = "/t" }, nil},
		{"any interface with TLS and tokens", func(c *config.Config) {
			c.Server.Address = "[::]:8443"
			c.Server.TLS = config.TLS{CertFile: "/c", KeyFile: "/k"}
			c.Server.Auth.TokenFile = "/t"
		}, nil},
		{"no persistence", func(c *config.Config) { c.Snapshot.Path = "" }, nil},
		{"full", func(c *config.Config) { *c = full() }, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			tt.change(&c)
			err := c.Validate()
			var got []string
			if err != nil {
				got = strings.Split(err.Error(), "\n")
				if !errors.Is(err, config.ErrInvalidValue) {
					t.Errorf("%v does not match ErrInvalidValue", err)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Validate\ngot  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestBindFlags(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	config.BindFlags(fs)
	for name, def := range map[string]string{
		"config":                 "",
		"kubeconfig":             "[]",
		"contexts-include":       "[*]",
		"contexts-exclude":       "[]",
		"contexts-aliases":       "[]",
		"resources":              "[]",
		"sync-timeout":           "2m0s",
		"sync-max-concurrent":    "256",
		"sync-max-objects":       "100000",
		"cache-keep-secret-data": "false",
		"snapshot-path":          "fleetwatch.db",
		"snapshot-max-pending":   "5000",
		"server-address":         "127.0.0.1:8080",
		"server-tls-cert-file":   "",
		"server-auth-token-file": "",
		"log-verbosity":          "0",
		"log-format":             "text",
	} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("no flag --%s", name)
			continue
		}
		if f.DefValue != def {
			t.Errorf("--%s defaults to %q, want %q", name, f.DefValue, def)
		}
		if f.Usage == "" {
			t.Errorf("--%s has no usage", name)
		}
	}

	// A program may define only some of the flags, with list flags of either kind.
	partial := pflag.NewFlagSet("partial", pflag.ContinueOnError)
	partial.StringSlice("kubeconfig", nil, "")
	partial.String("server-address", "", "")
	if err := partial.Parse([]string{"--kubeconfig=/a,/b", "--server-address=127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(config.LoadOptions{Flags: partial, LookupEnv: lookupIn(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Kubeconfig, []string{"/a", "/b"}) || c.Server.Address != "127.0.0.1:1" {
		t.Errorf("Load with a partial flag set = %+v", *c)
	}

	// A flag of the wrong type is the program's mistake, reported plainly.
	wrong := pflag.NewFlagSet("wrong", pflag.ContinueOnError)
	wrong.String("sync-max-concurrent", "", "")
	if err := wrong.Parse([]string{"--sync-max-concurrent=3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := config.Load(config.LoadOptions{Flags: wrong, LookupEnv: lookupIn(nil)}); err == nil || errors.Is(err, config.ErrInvalid) {
		t.Errorf("Load with a string flag for an int key = %v, want an error that is not ErrInvalid", err)
	}
}

func TestString(t *testing.T) {
	got := full().String()
	want := readFile(t, "testdata/full.golden.yaml")
	if got != want {
		t.Errorf("String() =\n%s\nwant (testdata/full.golden.yaml)\n%s", got, want)
	}
}

func TestAliasExpansionIsBounded(t *testing.T) {
	// A few kilobytes that stand for more than a hundred thousand values.
	var b strings.Builder
	b.WriteString("resources:\n  - &r {name: pods, namespaces: &n [")
	for i := range 1100 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("a")
	}
	b.WriteString("]}\n")
	for range 100 {
		b.WriteString("  - *r\n")
	}
	start := time.Now()
	_, problems, err := input{file: b.String()}.load(t)
	want := []string{"config.yaml:2: the file expands to more than 100000 values and keys, through YAML aliases"}
	if !reflect.DeepEqual(problems, want) || !errors.Is(err, config.ErrSyntax) {
		t.Errorf("problems = %q, want %q", problems, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Load took %v", d)
	}
}
