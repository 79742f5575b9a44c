package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleetwatch/fleetwatch/cluster/clustertest"
)

const (
	arnProd    = "arn:aws:eks:eu-west-1:123:cluster/prod"
	arnStaging = "arn:aws:eks:eu-west-1:123:cluster/staging"
)

// kctx returns a test context with its own server and token.
func kctx(name string) clustertest.Context {
	return clustertest.Context{
		Name:   name,
		Server: "https://" + strings.NewReplacer(":", "-", "/", "-").Replace(name) + ".example:6443",
		Token:  "token-" + name,
	}
}

// writeFile writes a hand-written file, creating its directory.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	clustertest.WriteFile(t, path, []byte(data))
}

// loaded is what a test expects of a Cluster.
type loaded struct {
	Name, Context, File string // File is relative to the test directory
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) Options
		want  []loaded
	}{{
		name: "one file, two contexts",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("b"), kctx("a"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}}
		},
		want: []loaded{{"a", "a", "a.yaml"}, {"b", "b", "a.yaml"}},
	}, {
		name: "several files",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx("b"), kctx("c"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "b.yaml"), filepath.Join(dir, "a.yaml")}}
		},
		want: []loaded{{"a", "a", "a.yaml"}, {"b", "b", "b.yaml"}, {"c", "c", "b.yaml"}},
	}, {
		name: "directory: regular files only, no dot files, no subdirectories",
		setup: func(t *testing.T, dir string) Options {
			d := filepath.Join(dir, "kc")
			if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			clustertest.WriteKubeconfig(t, filepath.Join(d, "2.yaml"), kctx("b"))
			clustertest.WriteKubeconfig(t, filepath.Join(d, "1.yaml"), kctx("a"))
			clustertest.WriteKubeconfig(t, filepath.Join(d, "sub", "3.yaml"), kctx("c"))
			writeFile(t, filepath.Join(d, ".1.yaml.swp"), "\x00garbage")
			if err := os.Symlink(filepath.Join(d, "1.yaml"), filepath.Join(dir, "link.yaml")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "link.yaml"), filepath.Join(d, "0-link.yaml")); err != nil {
				t.Fatal(err)
			}
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "other", "d.yaml"), kctx("d"))
			if err := os.Symlink(filepath.Join(dir, "other", "d.yaml"), filepath.Join(d, "4.yaml")); err != nil {
				t.Fatal(err)
			}
			return Options{Kubeconfigs: []string{d}, Exclude: []string{"a"}}
		},
		want: []loaded{{"b", "b", "kc/2.yaml"}, {"d", "d", "kc/4.yaml"}},
	}, {
		name: "a file listed itself and through its directory is read once",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "kc", "a.yaml"), kctx("a"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "kc"), filepath.Join(dir, "kc", "..", "kc", "a.yaml")}}
		},
		want: []loaded{{"a", "a", "kc/a.yaml"}},
	}, {
		name: "default: the KUBECONFIG path list",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx("b"))
			t.Setenv("KUBECONFIG", filepath.Join(dir, "a.yaml")+string(filepath.ListSeparator)+string(filepath.ListSeparator)+filepath.Join(dir, "b.yaml"))
			return Options{}
		},
		want: []loaded{{"a", "a", "a.yaml"}, {"b", "b", "b.yaml"}},
	}, {
		name: "default: ~/.kube/config",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, ".kube", "config"), kctx("home"))
			t.Setenv("KUBECONFIG", "")
			t.Setenv("HOME", dir)
			return Options{}
		},
		want: []loaded{{"home", "home", ".kube/config"}},
	}, {
		name: "~ is expanded",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "x", "kc.yaml"), kctx("a"))
			t.Setenv("HOME", dir)
			return Options{Kubeconfigs: []string{"~/x/kc.yaml"}}
		},
		want: []loaded{{"a", "a", "x/kc.yaml"}},
	}, {
		name: "include globs match EKS ARNs across '/' and ':'",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "kc"), kctx(arnProd), kctx(arnStaging), kctx("kind-dev"), kctx("minikube"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "kc")}, Include: []string{"arn:aws:eks:*:cluster/prod", "kind-*"}}
		},
		want: []loaded{{arnProd, arnProd, "kc"}, {"kind-dev", "kind-dev", "kc"}},
	}, {
		name: "exclude wins over include",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "kc"), kctx(arnProd), kctx(arnStaging), kctx("kind-dev"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "kc")}, Include: []string{"arn:*", "kind-*"}, Exclude: []string{"*/staging", "kind-?ev"}}
		},
		want: []loaded{{arnProd, arnProd, "kc"}},
	}, {
		name: "aliases name clusters; aliases of absent contexts are ignored",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "kc"), kctx(arnProd), kctx("kind-dev"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "kc")}, Aliases: map[string]string{arnProd: "prod", "gone": "x"}}
		},
		want: []loaded{{"kind-dev", "kind-dev", "kc"}, {"prod", arnProd, "kc"}},
	}, {
		name: "a context defined twice but excluded is no conflict",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"), kctx("default"))
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx("b"), kctx("default"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}, Exclude: []string{"default"}}
		},
		want: []loaded{{"a", "a", "a.yaml"}, {"b", "b", "b.yaml"}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			clusters, err := Load(tt.setup(t, dir))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			var got []loaded
			for _, c := range clusters {
				rel, err := filepath.Rel(dir, c.Kubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, loaded{c.Name, c.Context, filepath.ToSlash(rel)})
				if want := kctx(c.Context).Server; c.Config.Host != want {
					t.Errorf("cluster %q: Host = %q, want %q", c.Name, c.Config.Host, want)
				}
				if want := kctx(c.Context).Token; c.Config.BearerToken != want {
					t.Errorf("cluster %q: the token of its own file's user was not used", c.Name)
				}
				if c.Fingerprint == "" {
					t.Errorf("cluster %q: no fingerprint", c.Name)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Load() =\n  %v\nwant\n  %v", got, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) Options
		is    error
		want  []string // substrings of the message; "$DIR" is the test directory
	}{{
		name: "missing file",
		setup: func(t *testing.T, dir string) Options {
			return Options{Kubeconfigs: []string{filepath.Join(dir, "nope.yaml")}}
		},
		is:   fs.ErrNotExist,
		want: []string{"$DIR/nope.yaml"},
	}, {
		name: "missing file in KUBECONFIG",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))
			t.Setenv("KUBECONFIG", filepath.Join(dir, "a.yaml")+string(filepath.ListSeparator)+filepath.Join(dir, "nope.yaml"))
			return Options{}
		},
		is:   fs.ErrNotExist,
		want: []string{"$DIR/nope.yaml"},
	}, {
		name: "missing directory",
		setup: func(t *testing.T, dir string) Options {
			return Options{Kubeconfigs: []string{filepath.Join(dir, "nope") + "/"}}
		},
		is:   fs.ErrNotExist,
		want: []string{"$DIR/nope"},
	}, {
		name: "unreadable file",
		setup: func(t *testing.T, dir string) Options {
			if os.Geteuid() == 0 {
				t.Skip("root reads every file")
			}
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))
			if err := os.Chmod(filepath.Join(dir, "a.yaml"), 0); err != nil {
				t.Fatal(err)
			}
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}}
		},
		is:   fs.ErrPermission,
		want: []string{"$DIR/a.yaml"},
	}, {
		name: "garbage",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "a.yaml"), "\x00\x01\x02{{{ not: [yaml")
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/a.yaml"},
	}, {
		name: "YAML that is not a kubeconfig",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "a.yaml"), "contexts: 42\n")
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/a.yaml"},
	}, {
		name: "empty file",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "a.yaml"), " \n")
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/a.yaml", "empty"},
	}, {
		name: "garbage in a directory, next to a good file",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "kc", "a.yaml"), kctx("a"))
			writeFile(t, filepath.Join(dir, "kc", "b.yaml"), "}")
			return Options{Kubeconfigs: []string{filepath.Join(dir, "kc")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/kc/b.yaml"},
	}, {
		name: "context naming a cluster its file does not define",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))
			writeFile(t, filepath.Join(dir, "b.yaml"), `apiVersion: v1
kind: Config
contexts:
- name: b
  context: {cluster: a, user: a}
users:
- name: a
  user: {token: t}
`)
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/b.yaml", `context "b"`, `cluster "a" is not defined in this file`},
	}, {
		name: "context naming a user its file does not define",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "b.yaml"), `apiVersion: v1
kind: Config
clusters:
- name: b
  cluster: {server: "https://b.example"}
contexts:
- name: b
  context: {cluster: b, user: nobody}
`)
			return Options{Kubeconfigs: []string{filepath.Join(dir, "b.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/b.yaml", `context "b"`, `user "nobody" is not defined in this file`},
	}, {
		name: "cluster without server",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "b.yaml"), `apiVersion: v1
kind: Config
clusters:
- name: b
  cluster: {}
contexts:
- name: b
  context: {cluster: b}
`)
			return Options{Kubeconfigs: []string{filepath.Join(dir, "b.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/b.yaml", `context "b"`, "no server"},
	}, {
		name: "CA file that cannot be read, relative to the kubeconfig",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "kc", "b.yaml"), `apiVersion: v1
kind: Config
clusters:
- name: b
  cluster: {server: "https://b.example", certificate-authority: ca.crt}
contexts:
- name: b
  context: {cluster: b}
`)
			return Options{Kubeconfigs: []string{filepath.Join(dir, "kc", "b.yaml")}}
		},
		is:   ErrInvalidKubeconfig,
		want: []string{"$DIR/kc/b.yaml", `context "b"`, "$DIR/kc/ca.crt"},
	}, {
		name: "same context in two files",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"), kctx("prod"))
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx("prod"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}}
		},
		is:   ErrDuplicateContext,
		want: []string{`"prod"`, "$DIR/a.yaml", "$DIR/b.yaml"},
	}, {
		name: "alias colliding with a context name",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("prod"))
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx(arnProd))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}, Aliases: map[string]string{arnProd: "prod"}}
		},
		is:   ErrDuplicateCluster,
		want: []string{`"prod"`, `context "prod"`, `context "` + arnProd + `"`, "$DIR/a.yaml", "$DIR/b.yaml"},
	}, {
		name: "two aliases to one name",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"), kctx("b"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}, Aliases: map[string]string{"a": "x", "b": "x"}}
		},
		is:   ErrDuplicateCluster,
		want: []string{`"x"`, `context "a"`, `context "b"`},
	}, {
		name: "empty alias",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}, Aliases: map[string]string{"a": ""}}
		},
		is:   ErrInvalidName,
		want: []string{`alias of context "a"`},
	}, {
		name: "context with an empty name and no alias",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx(""))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}}
		},
		is:   ErrInvalidName,
		want: []string{"$DIR/a.yaml", `context ""`, "alias"},
	}, {
		name: "invalid globs",
		setup: func(t *testing.T, dir string) Options {
			return Options{Kubeconfigs: []string{dir}, Include: []string{"ok", "[prod"}, Exclude: []string{"x\\"}}
		},
		is:   ErrInvalidGlob,
		want: []string{`include: invalid glob "[prod"`, `exclude: invalid glob "x\\"`},
	}, {
		name: "no context selected",
		setup: func(t *testing.T, dir string) Options {
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), kctx("a"), kctx("b"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml")}, Include: []string{"prod-*"}}
		},
		is:   ErrNoClusters,
		want: []string{"2 context(s)", "$DIR/a.yaml", `"prod-*"`},
	}, {
		name: "every problem at once",
		setup: func(t *testing.T, dir string) Options {
			writeFile(t, filepath.Join(dir, "a.yaml"), "}")
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), kctx("x"))
			clustertest.WriteKubeconfig(t, filepath.Join(dir, "c.yaml"), kctx("x"))
			return Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "c.yaml"), filepath.Join(dir, "d.yaml")}}
		},
		is:   ErrDuplicateContext,
		want: []string{"$DIR/a.yaml", "$DIR/c.yaml", "$DIR/d.yaml"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			clusters, err := Load(tt.setup(t, dir))
			if err == nil {
				t.Fatalf("Load() = %d clusters, want an error", len(clusters))
			}
			t.Logf("error: %v", err)
			if !errors.Is(err, tt.is) {
				t.Errorf("Load() error = %v, want errors.Is %v", err, tt.is)
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "$DIR", dir); !strings.Contains(err.Error(), w) {
					t.Errorf("Load() error = %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestLoadErrorsHoldNoSecrets feeds broken kubeconfigs that hold a secret in various
// places, and checks that no error message repeats it.
func TestLoadErrorsHoldNoSecrets(t *testing.T) {
	const secret = "s3cr3t-Pa55"
	files := map[string]string{
		"unterminated flow": "users:\n- name: u\n  user:\n    token: [" + secret + "\n",
		"scalar for a list": "users: " + secret + "\n",
		"map for a string":  "users:\n- name: u\n  user:\n    token: {a: " + secret + "}\n",
		"json type error":   `{"users": [{"name": "u", "user": {"token": 5, "password": "` + secret + `"}}], "contexts": "` + secret + `"}`,
		"tab indentation":   "users:\n\t- token: " + secret + "\n",
		"duplicate key":     "users:\n- name: u\n  user:\n    token: " + secret + "\n    token: " + secret + "\n",
		"unparseable proxy": kubeconfigYAML(`proxy-url: "http://user:`+secret+`@[::1"`, "token: "+secret),
		"bad proxy scheme":  kubeconfigYAML(`proxy-url: "ftp://user:`+secret+`@proxy.example"`, "token: "+secret),
		"unparseable server with password": strings.Replace(kubeconfigYAML("", "token: "+secret),
			`"https://c.example"`, `"https://user:`+secret+`@c.example:port"`, 1),
		"exec without command":    kubeconfigYAML("", "token: "+secret+"\n    exec: {apiVersion: client.authentication.k8s.io/v1, args: ["+secret+"]}"),
		"two auth methods":        kubeconfigYAML("", "token: "+secret+"\n    username: u\n    password: "+secret),
		"client cert without key": kubeconfigYAML("", "client-certificate-data: "+secret),
	}
	for name, data := range files {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "kc")
			writeFile(t, path, data)
			_, err := Load(Options{Kubeconfigs: []string{path}})
			if err == nil {
				t.Fatal("Load() succeeded, want an error")
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains the secret", err)
			}
		})
	}
}

// kubeconfigYAML returns a kubeconfig with one context "c", with extra lines in its
// cluster and user entries.
func kubeconfigYAML(clusterExtra, userExtra string) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: "https://c.example"
    ` + clusterExtra + `
users:
- name: c
  user:
    ` + userExtra + `
contexts:
- name: c
  context: {cluster: c, user: c}
`
}

func TestLoadRestConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kc", "config")
	writeFile(t, filepath.Join(dir, "kc", "ca.crt"), "not checked at load time")
	writeFile(t, filepath.Join(dir, "kc", "token"), "file-token")
	writeFile(t, path, `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://c.example:6443", certificate-authority: ca.crt, tls-server-name: api.c}
users:
- name: u
  user: {tokenFile: token}
contexts:
- name: ctx
  context: {cluster: c, user: u, namespace: ns}
`)
	tests := []struct {
		name      string
		opts      Options
		qps       float32
		burst     int
		userAgent string
	}{
		{"defaults", Options{}, DefaultQPS, DefaultBurst, ""},
		{"set", Options{QPS: 7, Burst: 9, UserAgent: "fleetwatch-test"}, 7, 9, "fleetwatch-test"},
		{"no rate limit", Options{QPS: -1}, -1, DefaultBurst, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Kubeconfigs = []string{path}
			clusters, err := Load(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			cfg := clusters[0].Config
			if cfg.QPS != tt.qps || cfg.Burst != tt.burst || cfg.UserAgent != tt.userAgent {
				t.Errorf("QPS, Burst, UserAgent = %v, %v, %q; want %v, %v, %q", cfg.QPS, cfg.Burst, cfg.UserAgent, tt.qps, tt.burst, tt.userAgent)
			}
			if want := filepath.Join(dir, "kc", "ca.crt"); cfg.CAFile != want {
				t.Errorf("CAFile = %q, want %q (resolved against the kubeconfig's directory)", cfg.CAFile, want)
			}
			if want := filepath.Join(dir, "kc", "token"); cfg.BearerTokenFile != want {
				t.Errorf("BearerTokenFile = %q, want %q", cfg.BearerTokenFile, want)
			}
			if cfg.ServerName != "api.c" || cfg.Timeout != 0 {
				t.Errorf("ServerName, Timeout = %q, %v; want api.c, 0", cfg.ServerName, cfg.Timeout)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	for _, name := range []string{"prod", arnProd, "a/b%c", " "} {
		if err := ValidateName(name); err != nil {
			t.Errorf("ValidateName(%q) = %v", name, err)
		}
	}
	if err := ValidateName(""); !errors.Is(err, ErrInvalidName) {
		t.Errorf(`ValidateName("") = %v, want ErrInvalidName`, err)
	}
}

// TestLoadOfTheSameBytes: a load of files whose bytes did not change returns the
// clusters of the last load, the same ones, without building them again; a change of
// one byte, or a file more, builds them anew; a failed load is not kept.
func TestLoadOfTheSameBytes(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	clustertest.WriteKubeconfig(t, a, kctx("a"), kctx("b"))
	l, err := newLoader(Options{Kubeconfigs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := l.load()
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := l.load()
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 || again[0] != first[0] || again[1] != first[1] {
		t.Fatal("a load of the same bytes built the clusters again")
	}
	again[0] = nil // the caller's slice, not the loader's
	clustertest.WriteKubeconfig(t, b, kctx("c"))
	more, _, err := l.load()
	if err != nil {
		t.Fatal(err)
	}
	if len(more) != 3 || more[0] == first[0] {
		t.Fatalf("a file more: %d clusters, the first one the same: %v", len(more), more[0] == first[0])
	}
	writeFile(t, b, "\x00garbage")
	if _, _, err := l.load(); err == nil {
		t.Fatal("a garbage file loaded")
	}
	clustertest.WriteKubeconfig(t, b, kctx("c"))
	after, _, err := l.load()
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 3 || after[2] != more[2] {
		t.Error("the same bytes again after a failed load were built again, or differ")
	}
}

// TestLoadManyContexts: the clusters of many contexts, made on several cores, come back
// sorted by name, and the errors of the bad ones in the order of their files and
// contexts, among the duplicates found between files, every time.
// TestLoadContextsOfOneClusterAndUser: contexts that name the same cluster and user
// get configurations equal to what clientcmd makes of each, each its own (the memo of
// a load hands out copies); contexts of another user or cluster get theirs.
func TestLoadContextsOfOneClusterAndUser(t *testing.T) {
	dir := t.TempDir()
	kc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://c.example:6443
- name: d
  cluster:
    server: https://d.example:6443
    tls-server-name: d.internal
users:
- name: u
  user:
    token: token-u
- name: v
  user:
    username: v
    password: password-v
contexts:
- name: a1
  context: {cluster: c, user: u}
- name: a2
  context: {cluster: c, user: u, namespace: team-a}
- name: b1
  context: {cluster: c, user: v}
- name: c1
  context: {cluster: d, user: u}
- name: c2
  context: {cluster: d, user: u}
`
	path := filepath.Join(dir, "kc.yaml")
	writeFile(t, path, kc)
	clusters, err := Load(Options{Kubeconfigs: []string{path}})
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[*rest.Config]string{}
	for _, c := range clusters {
		want, err := clientcmd.NewNonInteractiveClientConfig(*parsed, c.Context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		got := c.Config
		if got.Host != want.Host || got.BearerToken != want.BearerToken || got.Username != want.Username ||
			got.Password != want.Password || got.TLSClientConfig.ServerName != want.TLSClientConfig.ServerName {
			t.Errorf("context %s: host %q, token set %t, user %q, server name %q; want %q, %t, %q, %q", c.Context,
				got.Host, got.BearerToken != "", got.Username, got.TLSClientConfig.ServerName,
				want.Host, want.BearerToken != "", want.Username, want.TLSClientConfig.ServerName)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("contexts %s and %s share one *rest.Config", prev, c.Context)
		}
		seen[got] = c.Context
	}
}

func TestLoadManyContexts(t *testing.T) {
	dir := t.TempDir()
	var a, b []clustertest.Context
	for i := range 300 {
		a = append(a, kctx(fmt.Sprintf("a%03d", i)))
	}
	b = append(b, kctx("a150"), kctx("b000"))
	clustertest.WriteKubeconfig(t, filepath.Join(dir, "a.yaml"), a...)
	clustertest.WriteKubeconfig(t, filepath.Join(dir, "b.yaml"), b...)
	opts := Options{Kubeconfigs: []string{filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")}}
	clusters, err := Load(opts)
	if !errors.Is(err, ErrDuplicateContext) {
		t.Fatalf("Load() = %d clusters, %v; want %v", len(clusters), err, ErrDuplicateContext)
	}

	// Bad contexts among good ones: a missing cluster, an alias that is not a name.
	var kc strings.Builder
	kc.WriteString("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://c.example:6443\ncontexts:\n")
	var want []string
	for i := range 300 {
		switch name := fmt.Sprintf("c%03d", i); {
		case i%37 == 5:
			fmt.Fprintf(&kc, "- name: %s\n  context:\n    cluster: missing-%s\n", name, name)
			want = append(want, fmt.Sprintf("context %q: cluster %q is not defined", name, "missing-"+name))
		default:
			fmt.Fprintf(&kc, "- name: %s\n  context:\n    cluster: c\n", name)
		}
	}
	writeFile(t, filepath.Join(dir, "c.yaml"), kc.String())
	opts = Options{Kubeconfigs: []string{filepath.Join(dir, "c.yaml")}}
	for range 3 {
		clusters, err := Load(opts)
		if err == nil {
			t.Fatalf("Load() = %d clusters, want an error", len(clusters))
		}
		msg, last := err.Error(), -1
		for _, w := range want {
			at := strings.Index(msg, w)
			if at < 0 {
				t.Fatalf("Load() error = %q\nwant it to contain %q", msg, w)
			}
			if at < last {
				t.Errorf("Load() error = %q\nnames %q out of the contexts' order", msg, w)
			}
			last = at
		}
	}
	writeFile(t, filepath.Join(dir, "c.yaml"), strings.ReplaceAll(kc.String(), "cluster: missing-", "cluster: c\n    namespace: n"))
	clusters, err = Load(opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 300 || !slices.IsSortedFunc(clusters, func(x, y *Cluster) int { return strings.Compare(x.Name, y.Name) }) {
		t.Errorf("Load() = %d clusters, sorted %v; want 300, sorted", len(clusters), slices.IsSortedFunc(clusters, func(x, y *Cluster) int { return strings.Compare(x.Name, y.Name) }))
	}
	for _, c := range clusters {
		if c.Config == nil || c.Config.Host != "https://c.example:6443" {
			t.Fatalf("cluster %s: config %+v", c.Name, c.Config)
		}
	}
}
