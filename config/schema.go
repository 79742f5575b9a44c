package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode"
)

// EnvPrefix starts the name of every environment variable that sets a key.
const EnvPrefix = "FLEETWATCH_"

// kind is the type of a leaf key, which decides how its value is written in YAML, in an
// environment variable and on the command line.
type kind int

const (
	kindString kind = iota
	kindBool
	kindInt
	kindDuration
	kindStrings
	kindMap
	kindResources
)

// leaf is a key whose value a higher layer replaces as a whole: a scalar, a list, the
// aliases map or the resources list. Leaves are derived from the tags of Config, so that
// the keys, environment variables and flags cannot drift apart.
type leaf struct {
	// path is the key path, such as "server.tls.certFile".
	path  string
	index []int
	kind  kind
	// isPath marks file system paths (tag config:"path"); a list of them is a path list.
	isPath bool
	// env and flag name the environment variable and the flag (without dashes).
	env  string
	flag string
}

// leaves are the leaf keys of Config, in the order of its fields.
var leaves = collectLeaves(reflect.TypeFor[Config](), "", nil)

var (
	durationType  = reflect.TypeFor[time.Duration]()
	resourcesType = reflect.TypeFor[[]Resource]()
	stringsType   = reflect.TypeFor[[]string]()
	mapType       = reflect.TypeFor[map[string]string]()
)

func collectLeaves(t reflect.Type, prefix string, index []int) []leaf {
	var out []leaf
	for i := range t.NumField() {
		f := t.Field(i)
		path := joinKey(prefix, keyName(f))
		idx := append(append([]int(nil), index...), i)
		if f.Type.Kind() == reflect.Struct {
			out = append(out, collectLeaves(f.Type, path, idx)...)
			continue
		}
		out = append(out, leaf{
			path:   path,
			index:  idx,
			kind:   kindOf(f.Type),
			isPath: isPathField(f),
			env:    EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_")),
			flag:   flagName(path),
		})
	}
	return out
}

func kindOf(t reflect.Type) kind {
	switch t {
	case durationType:
		return kindDuration
	case resourcesType:
		return kindResources
	case stringsType:
		return kindStrings
	case mapType:
		return kindMap
	}
	switch t.Kind() {
	case reflect.String:
		return kindString
	case reflect.Bool:
		return kindBool
	case reflect.Int:
		return kindInt
	}
	panic(fmt.Sprintf("config: no kind for a key of type %s", t))
}

// keyName is the key of a struct field: its yaml tag.
func keyName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "" {
		panic(fmt.Sprintf("config: field %s has no yaml tag", f.Name))
	}
	return name
}

// isPathField reports whether f holds a path or a list of paths (tag config:"path").
func isPathField(f reflect.StructField) bool { return f.Tag.Get("config") == "path" }

// flagName turns a key path into a flag name: "sync.maxConcurrent" is
// "sync-max-concurrent".
func flagName(path string) string {
	var b strings.Builder
	for i, r := range path {
		switch {
		case r == '.':
			b.WriteByte('-')
		case unicode.IsUpper(r):
			if i > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// value returns the value of l in c.
func (l *leaf) value(c *Config) any {
	return reflect.ValueOf(c).Elem().FieldByIndex(l.index).Interface()
}

// leafOf returns the leaf that holds key, a key path that may reach into a leaf's value
// (such as "resources[2].name"), or nil.
func leafOf(key string) *leaf {
	for i := range leaves {
		l := &leaves[i]
		if key == l.path || strings.HasPrefix(key, l.path+".") || strings.HasPrefix(key, l.path+"[") {
			return l
		}
	}
	return nil
}

// fieldByKey returns the field of struct type t whose key is name.
func fieldByKey(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if f := t.Field(i); keyName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// suggest returns a hint for an unknown key name in struct type t: the key it
// misspells in case, or the full path of a key elsewhere whose last segment it is.
func suggest(t reflect.Type, name string) string {
	for i := range t.NumField() {
		if k := keyName(t.Field(i)); strings.EqualFold(k, name) {
			return fmt.Sprintf(" (did you mean %q?)", k)
		}
	}
	for _, l := range leaves {
		last := l.path[strings.LastIndexByte(l.path, '.')+1:]
		if strings.EqualFold(last, name) && strings.Contains(l.path, ".") {
			return fmt.Sprintf(" (did you mean %s?)", l.path)
		}
	}
	return ""
}

func joinKey(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

func indexKey(prefix string, i int) string { return fmt.Sprintf("%s[%d]", prefix, i) }

func mapKey(prefix, k string) string { return fmt.Sprintf("%s[%q]", prefix, k) }

// setNested stores v in m under a key path of dot-separated segments.
func setNested(m map[string]any, path string, v any) {
	segs := strings.Split(path, ".")
	for _, s := range segs[:len(segs)-1] {
		sub, ok := m[s].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[s] = sub
		}
		m = sub
	}
	m[segs[len(segs)-1]] = v
}

// parents yields key and each shorter key path that contains it, longest first:
// "resources[2].name", "resources[2]", "resources".
func parents(key string) []string {
	out := []string{key}
	for {
		i := strings.LastIndexAny(key, ".[")
		if i <= 0 {
			return out
		}
		key = key[:i]
		out = append(out, key)
	}
}
