package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// The program of TestOutsideModule: what a controller written from the docs compiles
// against, and a line per fleetwatch module with the version it was built with.
const outsideMain = `package main

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/fleetwatch/fleetwatch"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/mcprovider"
)

func main() {
	info, _ := debug.ReadBuildInfo()
	for _, m := range info.Deps {
		if strings.HasPrefix(m.Path, "github.com/fleetwatch/") {
			fmt.Println(m.Path, m.Version, m.Replace != nil)
		}
	}
}

// newProvider is the README's provider, compiled and never run.
func newProvider(kubeconfig string) (*mcprovider.Provider, error) {
	fleet, err := fleetwatch.NewManager(fleetwatch.Options{
		Clusters:  cluster.Options{Kubeconfigs: []string{kubeconfig}},
		Resources: []informer.Resource{{Name: "configmaps"}},
	})
	if err != nil {
		return nil, err
	}
	return mcprovider.New(fleet, mcprovider.Options{})
}

var _ = newProvider
`

// TestOutsideModule builds a module outside the repository that requires
// github.com/fleetwatch/fleetwatch and github.com/fleetwatch/fleetwatch/mcprovider by
// version, with no replace and no workspace, as a controller written from the docs
// does; and installs cmd/fleetwatch@VERSION, whose "fleetwatch version" must say
// VERSION. Both modules are the work tree, served at the versions go.work gives the work
// tree from a file GOPROXY that WriteProxy makes; the other modules come from the module
// cache's downloads, then from the GOPROXY of the environment. The module cache is one
// of the test's own, so that the work tree's v0.1.0 never lands in the real one, where
// the release's v0.1.0 is.
func TestOutsideModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fleetwatch and controller-runtime from a module cache of its own")
	}
	repo, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	versions := workTreeVersions(t, repo)
	rootVersion, mcVersion := versions["github.com/fleetwatch/fleetwatch"], versions["github.com/fleetwatch/fleetwatch/mcprovider"]
	if rootVersion == "" || mcVersion == "" {
		t.Fatalf("go.work replaces no version of the root module or of mcprovider with the work tree: %v", versions)
	}

	tmp := t.TempDir()
	proxy := filepath.Join(tmp, "proxy")
	if err := WriteProxy(proxy, Source{Repo: repo}, []Release{{".", rootVersion}, {"mcprovider", mcVersion}}); err != nil {
		t.Fatal(err)
	}
	gomodcache := strings.TrimSpace(goOutput(t, repo, nil, "env", "GOMODCACHE"))
	envProxy := strings.TrimSpace(goOutput(t, repo, nil, "env", "GOPROXY"))
	env := []string{
		"GOWORK=off",
		"GOPROXY=" + strings.Join([]string{fileURL(proxy), fileURL(filepath.Join(gomodcache, "cache", "download")), envProxy}, ","),
		"GOMODCACHE=" + filepath.Join(tmp, "modcache"),
		// -trimpath keeps the build cache's entries independent of the module cache's
		// place, so that a second run compiles only what changed.
		"GOFLAGS=-mod=mod -modcacherw -trimpath -buildvcs=false",
		// The checksum database knows nothing of the work tree; every other module is
		// checked against the sums the repository's go.sum files hold (below), or the
		// database.
		"GONOSUMDB=github.com/fleetwatch/fleetwatch",
	}

	mod := filepath.Join(tmp, "controller")
	if err := os.MkdirAll(mod, 0o755); err != nil {
		t.Fatal(err)
	}
	gomod := "module example.com/controller\n\ngo 1.26.3\n\nrequire (\n" +
		"\tgithub.com/fleetwatch/fleetwatch " + rootVersion + "\n" +
		"\tgithub.com/fleetwatch/fleetwatch/mcprovider " + mcVersion + "\n)\n"
	writeFile(t, filepath.Join(mod, "go.mod"), gomod)
	writeFile(t, filepath.Join(mod, "go.sum"), thirdPartySums(t, filepath.Join(repo, "go.sum"), filepath.Join(repo, "mcprovider", "go.sum")))
	writeFile(t, filepath.Join(mod, "main.go"), outsideMain)

	goOutput(t, mod, env, "build", "-o", filepath.Join(tmp, "controller-bin"), ".")
	built, err := os.ReadFile(filepath.Join(mod, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if f, err := modfile.Parse("go.mod", built, nil); err != nil || len(f.Replace) > 0 {
		t.Fatalf("go.mod after the build has replace lines, or does not parse (%v):\n%s", err, built)
	}
	out, err := exec.Command(filepath.Join(tmp, "controller-bin")).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "github.com/fleetwatch/fleetwatch " + rootVersion + " false\n" +
		"github.com/fleetwatch/fleetwatch/mcprovider " + mcVersion + " false\n"
	if string(out) != want {
		t.Errorf("the program outside was built with\n%s\nwant\n%s", out, want)
	}

	// go install ...@version builds outside any module, from the proxy alone.
	gobin := filepath.Join(tmp, "bin")
	goOutput(t, tmp, append(env, "GOBIN="+gobin), "install", "github.com/fleetwatch/fleetwatch/cmd/fleetwatch@"+rootVersion)
	version, err := exec.Command(filepath.Join(gobin, "fleetwatch"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(version)); got != rootVersion {
		t.Errorf("fleetwatch version of go install ...@%s printed %q", rootVersion, got)
	}
}

// workTreeVersions are the versions that go.work replaces with directories of the work
// tree, by module path: the versions the modules require each other at.
func workTreeVersions(t *testing.T, repo string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	wf, err := modfile.ParseWork("go.work", b, nil)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, r := range wf.Replace {
		if r.Old.Version != "" && r.New.Version == "" {
			versions[r.Old.Path] = r.Old.Version
		}
	}
	return versions
}

// thirdPartySums are the lines of the go.sum files that are not of fleetwatch's modules:
// the sums of the versions the repository was checked with.
func thirdPartySums(t *testing.T, files ...string) string {
	t.Helper()
	seen := map[string]bool{}
	var out strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "github.com/fleetwatch/") || seen[line] {
				continue
			}
			seen[line] = true
			out.WriteString(line + "\n")
		}
	}
	return out.String()
}

func goOutput(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return string(out)
}

func writeFile(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}
