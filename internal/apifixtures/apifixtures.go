// Package apifixtures reads Kubernetes' own round-trip fixtures for tests: testdata/HEAD
// of the k8s.io/api module that go.mod requires, each kind of the module with every
// field filled, as JSON and as protobuf (All), and compares decoded JSON member for
// member (Diff). It is for tests only; of fleetwatch it imports nothing.
package apifixtures

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// Fixture is one kind's fixture: its JSON and its protobuf (the magic prefix and the
// runtime.Unknown envelope), both encodings of the same object.
type Fixture struct {
	// Name is the fixture's file name without its extension: group.version.Kind, the
	// core group spelled "core".
	Name     string
	Kind     schema.GroupVersionKind
	JSON, PB []byte
}

// All returns the fixtures of the k8s.io/api module that go.mod requires, sorted by
// name. It fails t if there are none.
func All(t testing.TB) []Fixture {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/api").Output()
	if err != nil {
		t.Fatalf("go list -m k8s.io/api: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "testdata", "HEAD")
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no round-trip fixtures in %s: %v", dir, err)
	}
	slices.Sort(names)
	fixtures := make([]Fixture, 0, len(names))
	for _, name := range names {
		base := strings.TrimSuffix(filepath.Base(name), ".json")
		js, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		pb, err := os.ReadFile(filepath.Join(dir, base+".pb"))
		if err != nil {
			t.Fatal(err)
		}
		fixtures = append(fixtures, Fixture{Name: base, Kind: kindOf(base), JSON: js, PB: pb})
	}
	return fixtures
}

// kindOf returns the kind of a fixture from its name.
func kindOf(base string) schema.GroupVersionKind {
	i := strings.LastIndexByte(base, '.')
	kind, rest := base[i+1:], base[:i]
	i = strings.LastIndexByte(rest, '.')
	version, group := rest[i+1:], rest[:i]
	if group == "core" {
		group = ""
	}
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}

// Map returns js decoded as apimachinery decodes an object into a map.
func Map(t testing.TB, js []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := utiljson.Unmarshal(js, &m); err != nil {
		t.Fatalf("decoding %.40q: %v", js, err)
	}
	return m
}

// Diff returns the paths at which got and want, decoded JSON, differ, sorted: members
// as .name from the object (the first without the dot), elements of arrays as [].
func Diff(got, want any) []string {
	out := diff("", got, want, nil)
	slices.Sort(out)
	return slices.Compact(out)
}

func diff(path string, got, want any, out []string) []string {
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return append(out, path)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				out = append(out, join(k))
				continue
			}
			out = diff(join(k), gv, wv, out)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				out = append(out, join(k))
			}
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return append(out, path)
		}
		for i := range w {
			out = diff(path+"[]", g[i], w[i], out)
		}
		return out
	default:
		if !reflect.DeepEqual(got, want) {
			return append(out, path)
		}
		return out
	}
}
