package config

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the generated parts of docs/config.md")

const docsFile = "../docs/config.md"

// TestDocs keeps docs/config.md in step with the code: the tables of keys, the default
// resources and the sample of errors are generated (go test ./config -run TestDocs
// -update rewrites them), and the example file must load.
func TestDocs(t *testing.T) {
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	blocks := map[string]string{
		"keys":          keysTable(),
		"resource-keys": resourceKeysTable(),
		"default-resources": "```yaml\n" + yamlText(encodeNode(reflect.ValueOf(struct {
			Resources []Resource `yaml:"resources"`
		}{DefaultResources()}), false)) + "```\n",
		"errors": errorSample(t),
	}
	for name, content := range blocks {
		begin := "<!-- BEGIN GENERATED " + name + " (go test ./config -run TestDocs -update) -->\n"
		end := "<!-- END GENERATED " + name + " -->"
		i, j := strings.Index(doc, begin), strings.Index(doc, end)
		if i < 0 || j < i {
			t.Errorf("%s lacks the block %q ... %q", docsFile, begin, end)
			continue
		}
		if got := doc[i+len(begin) : j]; got != content {
			if !*update {
				t.Errorf("the generated block %s of %s is out of date; run go test ./config -run TestDocs -update\ngot:\n%s\nwant:\n%s", name, docsFile, got, content)
			}
			doc = doc[:i+len(begin)] + content + doc[j:]
		}
	}
	if *update {
		if err := os.WriteFile(docsFile, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Every key is also mentioned in the prose, with its environment variable and flag
	// in the table; the table is checked above.
	for _, l := range leaves {
		if !strings.Contains(doc, "`"+l.path+"`") {
			t.Errorf("%s does not mention the key %s", docsFile, l.path)
		}
	}

	t.Run("example", func(t *testing.T) {
		t.Setenv("HOME", t.TempDir())
		m := regexp.MustCompile("(?s)## Example\n.*?```yaml\n(.*?)```").FindStringSubmatch(doc)
		if m == nil {
			t.Fatalf("%s has no ```yaml block under ## Example", docsFile)
		}
		name := t.TempDir() + "/fleetwatch.yaml"
		if err := os.WriteFile(name, []byte(m[1]), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(LoadOptions{File: name, LookupEnv: func(string) (string, bool) { return "", false }})
		if err != nil {
			t.Fatalf("the example of %s does not load: %v", docsFile, err)
		}
		// The example shows every key, none at its zero value except the booleans and
		// the verbosity, so that it documents the form of each.
		if s := c.String(); strings.Count(s, `""`) > 0 || strings.Contains(s, "[]") || strings.Contains(s, "{}") {
			t.Errorf("the example leaves keys empty:\n%s", s)
		}
	})
}

func keysTable() string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Environment variable | Flag | Meaning |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	def := Default()
	for i := range leaves {
		l := &leaves[i]
		fmt.Fprintf(&b, "| `%s` | %s | %s | `%s` | `--%s` | %s |\n",
			l.path, typeName(l.kind, l.isPath), defaultText(l.kind, l.value(&def)), l.env, l.flag, usages[l.path])
	}
	return b.String()
}

func resourceKeysTable() string {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Meaning |\n")
	b.WriteString("|---|---|---|---|\n")
	t := reflect.TypeFor[Resource]()
	for i := range t.NumField() {
		f := t.Field(i)
		key := "resources[]." + keyName(f)
		def := "required"
		if i > 0 {
			def = defaultText(kindOf(f.Type), reflect.Zero(f.Type).Interface())
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", key, typeName(kindOf(f.Type), false), def, usages[key])
	}
	return b.String()
}

func typeName(k kind, isPath bool) string {
	switch k {
	case kindString:
		if isPath {
			return "path"
		}
		return "string"
	case kindBool:
		return "boolean"
	case kindInt:
		return "integer"
	case kindDuration:
		return "duration"
	case kindStrings:
		if isPath {
			return "list of paths"
		}
		return "list of strings"
	case kindMap:
		return "map of strings"
	case kindResources:
		return "list of resources"
	}
	panic(k)
}

func defaultText(k kind, v any) string {
	switch v := v.(type) {
	case []Resource:
		return "[the default set](#default-resources)"
	case string:
		if v == "" {
			return "`\"\"`"
		}
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "`[" + strings.Join(q, ", ") + "]`"
	case map[string]string:
		if len(v) == 0 {
			return "`{}`"
		}
	case time.Duration:
		return "`" + formatDuration(v) + "`"
	}
	return fmt.Sprintf("`%v`", v)
}

// errorSample returns testdata/invalid.yaml and its problems, as if it were config.yaml
// in the working directory.
func errorSample(t *testing.T) string {
	b, err := os.ReadFile("testdata/invalid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	name := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(LoadOptions{File: name, LookupEnv: func(string) (string, bool) { return "", false }})
	if err == nil {
		t.Fatal("testdata/invalid.yaml loads without errors")
	}
	problems := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
	return "```yaml\n# config.yaml\n" + string(b) + "```\n\n```\n" + problems + "\n```\n"
}

func TestSchema(t *testing.T) {
	paths, envs, flags := map[string]bool{}, map[string]bool{ConfigEnv: true}, map[string]bool{ConfigFlag: true}
	for _, l := range leaves {
		for _, name := range []struct {
			seen map[string]bool
			name string
		}{{paths, l.path}, {envs, l.env}, {flags, l.flag}} {
			if name.seen[name.name] {
				t.Errorf("key %s: %s is not unique", l.path, name.name)
			}
			name.seen[name.name] = true
		}
		if usages[l.path] == "" {
			t.Errorf("key %s has no usage", l.path)
		}
	}
	rt := reflect.TypeFor[Resource]()
	for i := range rt.NumField() {
		if key := "resources[]." + keyName(rt.Field(i)); usages[key] == "" {
			t.Errorf("key %s has no usage", key)
		}
	}
	for key := range usages {
		_, isResourceKey := fieldByKey(rt, strings.TrimPrefix(key, "resources[]."))
		if l := leafOf(key); (l == nil || l.path != key) && !(strings.HasPrefix(key, "resources[].") && isResourceKey) {
			t.Errorf("usages describes %s, which is not a key", key)
		}
	}

	for _, tt := range []struct{ path, env, flag string }{
		{"kubeconfig", "FLEETWATCH_KUBECONFIG", "kubeconfig"},
		{"server.address", "FLEETWATCH_SERVER_ADDRESS", "server-address"},
		{"snapshot.path", "FLEETWATCH_SNAPSHOT_PATH", "snapshot-path"},
		{"sync.maxConcurrent", "FLEETWATCH_SYNC_MAXCONCURRENT", "sync-max-concurrent"},
		{"server.tls.certFile", "FLEETWATCH_SERVER_TLS_CERTFILE", "server-tls-cert-file"},
	} {
		l := leafOf(tt.path)
		if l == nil || l.path != tt.path || l.env != tt.env || l.flag != tt.flag {
			t.Errorf("key %s: got %+v, want env %s, flag --%s", tt.path, l, tt.env, tt.flag)
		}
	}
}

// TestNoCredentials keeps Config free of secrets, which is what makes String safe to
// log: a key whose name looks like a credential must name a file. A key that holds a
// secret itself would need String to mask it. The name is the last segment of the key:
// server.auth.delegated.audiences is about authentication, but holds no credential.
func TestNoCredentials(t *testing.T) {
	credential := regexp.MustCompile(`(?i)token|passw|secret|credential|key|cert|auth`)
	for _, l := range leaves {
		if l.kind == kindBool || l.kind == kindInt || l.kind == kindDuration {
			continue
		}
		if credential.MatchString(l.path[strings.LastIndexByte(l.path, '.')+1:]) && !l.isPath {
			t.Errorf("key %s looks like a credential but is not a path (tag config:\"path\"); String would log it", l.path)
		}
	}
}
