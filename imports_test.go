package fleetwatch_test

import (
	"go/build"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestImports holds each package to the imports its doc allows (docs/design.md,
// "Packages"): the rooms of fleetwatch import each other only in these directions, and
// none imports the root package.
func TestImports(t *testing.T) {
	const module = "github.com/fleetwatch/fleetwatch"
	allowed := map[string][]string{
		".":                  {"aggregate", "cluster", "history", "informer", "internal/gctune", "persist", "shard"},
		"aggregate":          {"internal/labelenc"},
		"api/v1alpha1":       nil,
		"client":             {"aggregate", "api/v1alpha1"},
		"cluster":            {"internal/dialgate", "internal/filewatch"},
		"config":             {"cluster", "informer", "persist", "server", "shard"},
		"history":            {"api/v1alpha1", "persist", "search"},
		"informer":           {"internal/intern", "internal/weakmap", "internal/wire"},
		"metrics":            {"aggregate", "cluster", "persist"},
		"persist":            {"internal/intern", "internal/labelenc", "internal/metaenc"},
		"search":             {"aggregate", "cluster"},
		"server":             {"aggregate", "api/v1alpha1", "cluster", "history", "internal/filewatch", "metrics", "search"},
		"shard":              {"cluster"},
		"internal/dialgate":  {"internal/weakmap"},
		"internal/filewatch": nil,
		"internal/gctune":    nil,
		"internal/intern":    nil,
		"internal/jsondec":   {"internal/cborenc", "internal/intern"},
		"internal/wire":      {"internal/jsondec", "internal/metaenc", "internal/pbjson"},
		"internal/pbjson":    {"internal/cborenc", "internal/jsondec"},
		"internal/cborenc":   nil,
		"internal/metaenc":   nil,
		"internal/labelenc":  nil,
		"internal/weakmap":   nil,
	}
	for dir, want := range allowed {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for _, imp := range pkg.Imports {
			rel, ok := strings.CutPrefix(imp, module+"/")
			if !ok {
				if imp == module {
					t.Errorf("%s imports the root package", dir)
				}
				continue
			}
			if !slices.Contains(want, path.Clean(rel)) {
				t.Errorf("%s imports %s, which its room does not allow (allowed: %v)", dir, rel, want)
			}
		}
	}
}
