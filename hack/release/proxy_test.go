package main

import (
	"archive/zip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteProxy serves the root module and mcprovider from HEAD and from the work tree,
// and checks what a proxy serves of each: the list, the go.mod, and a zip without the
// files of the modules nested in the module.
func TestWriteProxy(t *testing.T) {
	repo, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, src := range []Source{{Repo: repo, Commit: "HEAD"}, {Repo: repo}} {
		name := "work tree"
		if src.Commit != "" {
			name = src.Commit
		}
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			if err := WriteProxy(out, src, []Release{{".", "v0.1.0"}, {"mcprovider", "v0.1.0"}, {".", "v0.0.9"}}); err != nil {
				t.Fatal(err)
			}
			tests := []struct {
				dir, module string
				list        string
				mustHave    string
				nested      []string
			}{
				{"github.com/fleetwatch/fleetwatch/@v", "github.com/fleetwatch/fleetwatch", "v0.0.9\nv0.1.0\n", "aggregate/doc.go", []string{"mcprovider/", "examples/multicluster-runtime/", "hack/release/", "hack/tools/", "test/browser/"}},
				{"github.com/fleetwatch/fleetwatch/mcprovider/@v", "github.com/fleetwatch/fleetwatch/mcprovider", "v0.1.0\n", "provider.go", nil},
			}
			for _, tt := range tests {
				dir := filepath.Join(out, filepath.FromSlash(tt.dir))
				list, err := os.ReadFile(filepath.Join(dir, "list"))
				if err != nil || string(list) != tt.list {
					t.Errorf("%s list = %q (%v), want %q", tt.module, list, err, tt.list)
				}
				gomod, err := os.ReadFile(filepath.Join(dir, "v0.1.0.mod"))
				if err != nil || !strings.HasPrefix(string(gomod), "module "+tt.module+"\n") {
					t.Errorf("%s v0.1.0.mod does not name the module (%v):\n%.200s", tt.module, err, gomod)
				}
				zr, err := zip.OpenReader(filepath.Join(dir, "v0.1.0.zip"))
				if err != nil {
					t.Fatal(err)
				}
				prefix := tt.module + "@v0.1.0/"
				found := false
				for _, f := range zr.File {
					name, ok := strings.CutPrefix(f.Name, prefix)
					if !ok {
						t.Errorf("%s: %s is outside %s", tt.module, f.Name, prefix)
					}
					found = found || name == tt.mustHave
					for _, n := range tt.nested {
						if strings.HasPrefix(name, n) {
							t.Errorf("%s: the zip holds %s, of a nested module", tt.module, name)
						}
					}
				}
				zr.Close()
				if !found {
					t.Errorf("%s: the zip has no %s", tt.module, tt.mustHave)
				}
			}
		})
	}
}

func TestWriteProxyRejectsNonCanonicalVersions(t *testing.T) {
	repo, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.1.0", "v0.1", "v0.1.0+meta", "latest"} {
		if err := WriteProxy(t.TempDir(), Source{Repo: repo}, []Release{{".", v}}); err == nil {
			t.Errorf("WriteProxy took the version %q", v)
		}
	}
}
