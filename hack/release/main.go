// Command release serves fleetwatch's modules by version from a directory laid out as a
// Go module proxy (GOPROXY=file://DIR), where nothing else serves them: github.com is not
// where they are fetched from in CI or here, and a version is a git tag, or a line of
// releases.txt, before it is anywhere else. make lint serves the last release with it,
// for the tidiness of the modules that require fleetwatch's by version; make test serves
// the work tree with it, for a build outside the repository (TestOutsideModule).
//
//	release proxy -out DIR [-repo DIR] [-commit REV] MODULE_DIR@VERSION...
//
// MODULE_DIR is the module's directory in the repository that holds -repo (the current
// directory by default): "." for the root module, "mcprovider". The files are those of
// commit REV, as the go command fetches a tagged version; without -commit, those of the
// work tree that git does not ignore. Either way a module's zip holds no file of a
// module nested in it.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 || args[0] != "proxy" {
		fmt.Fprintln(os.Stderr, "usage: release proxy -out DIR [-repo DIR] [-commit REV] MODULE_DIR@VERSION...")
		return 2
	}
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	out := fs.String("out", "", "the directory to write the proxy to (required)")
	commit := fs.String("commit", "", "the commit to take the files from; the work tree when empty")
	repo := fs.String("repo", ".", "a directory of the git work tree")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if err := proxyCommand(*out, *repo, *commit, fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "release proxy:", err)
		return 1
	}
	return 0
}

func proxyCommand(out, repo, commit string, args []string) error {
	if out == "" {
		return errors.New("-out is required")
	}
	if len(args) == 0 {
		return errors.New("no MODULE_DIR@VERSION")
	}
	var mods []Release
	for _, a := range args {
		dir, version, ok := strings.Cut(a, "@")
		if !ok || dir == "" || version == "" {
			return fmt.Errorf("%q is not MODULE_DIR@VERSION", a)
		}
		mods = append(mods, Release{Dir: dir, Version: version})
	}
	root, err := repoRoot(repo)
	if err != nil {
		return err
	}
	return WriteProxy(out, Source{Repo: root, Commit: commit}, mods)
}
