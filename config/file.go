package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/client-go/util/homedir"
)

// layer is what one source (the file, the environment or the flags) sets.
type layer struct {
	// values holds the leaves the layer sets, nested by key segment, typed as in Config.
	values map[string]any
	// set holds the path of every leaf the layer sets or tried to set.
	set map[string]bool
	// bad holds the key paths whose values could not be used; validation problems
	// under them are not reported again.
	bad  map[string]bool
	errs []*FieldError
}

func newLayer() layer {
	return layer{values: map[string]any{}, set: map[string]bool{}, bad: map[string]bool{}}
}

// isBad reports whether key or a key that contains it could not be used.
func (l *layer) isBad(key string) bool {
	for _, k := range parents(key) {
		if l.bad[k] {
			return true
		}
	}
	return false
}

// fileLayer is what the config file sets, with the line of every key.
type fileLayer struct {
	layer
	name  string
	lines map[string]int
}

// line returns the line of key, or of the closest key that contains it, or 0.
func (f *fileLayer) line(key string) int {
	for _, k := range parents(key) {
		if n, ok := f.lines[k]; ok {
			return n
		}
	}
	return 0
}

const (
	// maxMergeDepth bounds nested YAML merge keys, which could otherwise refer to
	// themselves.
	maxMergeDepth = 16
	// maxValues bounds the values and keys a file may expand to. Aliases let a small
	// file stand for a huge one ("billion laughs"); no real config comes close.
	maxValues = 100_000
)

// fileParser checks a YAML document against the schema of Config, node by node, so
// that every unknown key and wrong type is reported with its line. The walk follows
// the schema, whose depth is fixed, so aliases cannot make it recurse without end.
type fileParser struct {
	*fileLayer
	dir string
	// walked counts the values and keys walked, up to maxValues.
	walked int
}

var yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseFile parses the config file name with contents data.
func parseFile(name string, data []byte) *fileLayer {
	p := &fileParser{
		fileLayer: &fileLayer{layer: newLayer(), name: name, lines: map[string]int{}},
		dir:       filepath.Dir(name),
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if !errors.Is(err, io.EOF) {
			p.syntaxError(err)
		}
		return p.fileLayer
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.syntaxError(err)
		return p.fileLayer
	default:
		p.fail(ErrSyntax, "", next.Line, errors.New("the file holds more than one YAML document"))
		return p.fileLayer
	}
	if len(doc.Content) == 0 {
		return p.fileLayer
	}
	p.object(doc.Content[0], reflect.TypeFor[Config](), "", p.values)
	if p.walked > maxValues {
		// What was cut short is not used; the file is reported.
		clear(p.values)
	}
	return p.fileLayer
}

func (p *fileParser) syntaxError(err error) {
	line := 0
	msg := err.Error()
	if m := yamlLineError.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	p.fail(ErrSyntax, "", line, errors.New(msg))
}

func (p *fileParser) fail(kind error, key string, line int, err error) {
	fe := newFieldError(kind, key, err)
	fe.File, fe.Line = p.name, line
	p.errs = append(p.errs, fe)
	if kind == ErrWrongType || kind == ErrInvalidValue {
		p.bad[key] = true
	}
}

// wrongType reports that n, at key, is not what was wanted.
func (p *fileParser) wrongType(key string, n *yaml.Node, want string) {
	p.fail(ErrWrongType, key, n.Line, fmt.Errorf("expected %s, got %s", want, describe(n)))
}

// object walks mapping n of struct type t at path and stores what it sets in out,
// nested by key, recording the leaves it sets.
func (p *fileParser) object(n *yaml.Node, t reflect.Type, path string, out map[string]any) {
	n = deref(n)
	if isNull(n) || !p.spend(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.wrongType(path, n, "a mapping")
		return
	}
	p.fields(n, t, path, func(f reflect.StructField, key string, val *yaml.Node) {
		name := keyName(f)
		if f.Type.Kind() == reflect.Struct {
			sub := map[string]any{}
			p.object(val, f.Type, key, sub)
			if len(sub) > 0 {
				out[name] = sub
			}
			return
		}
		p.set[key] = true
		if v, ok := p.value(val, f.Type, key, isPathField(f)); ok {
			out[name] = v.Interface()
		}
	})
}

// fields calls fn for every key of mapping n that is a field of struct type t and whose
// value is not null, and reports the keys that are not.
func (p *fileParser) fields(n *yaml.Node, t reflect.Type, path string, fn func(f reflect.StructField, key string, val *yaml.Node)) {
	for _, e := range p.entries(n, func(k string) string { return joinKey(path, k) }, 0) {
		if !p.spend(e.key) {
			return
		}
		if e.key.Kind != yaml.ScalarNode {
			p.wrongType(path, e.key, "a string key")
			continue
		}
		key := joinKey(path, e.key.Value)
		f, ok := fieldByKey(t, e.key.Value)
		if !ok {
			p.fail(ErrUnknownKey, key, e.key.Line, fmt.Errorf("%w%s", ErrUnknownKey, suggest(t, e.key.Value)))
			continue
		}
		p.lines[key] = e.key.Line
		if isNull(deref(e.val)) {
			continue
		}
		fn(f, key, e.val)
	}
}

type entry struct{ key, val *yaml.Node }

// entries returns the key/value pairs of mapping n, with YAML merge keys ("<<: *base")
// expanded: a key set in n wins over a merged one, and an earlier merged mapping wins
// over a later one. A key that n sets twice is reported; keyOf returns its path.
func (p *fileParser) entries(n *yaml.Node, keyOf func(string) string, depth int) []entry {
	var out, merged []entry
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, p.merge(k, v, keyOf, depth)...)
			continue
		}
		if k.Kind == yaml.ScalarNode {
			if line, dup := seen[k.Value]; dup {
				p.fail(ErrSyntax, keyOf(k.Value), k.Line, fmt.Errorf("the key is already defined at line %d", line))
				continue
			}
			seen[k.Value] = k.Line
		}
		out = append(out, entry{k, v})
	}
	for _, e := range merged {
		if _, dup := seen[e.key.Value]; !dup {
			seen[e.key.Value] = e.key.Line
			out = append(out, e)
		}
	}
	return out
}

// merge returns the entries of the value v of merge key k: a mapping or a list of them.
func (p *fileParser) merge(k, v *yaml.Node, keyOf func(string) string, depth int) []entry {
	v = deref(v)
	key := keyOf(k.Value)
	if depth >= maxMergeDepth {
		p.fail(ErrSyntax, key, k.Line, errors.New("merge keys are nested too deeply"))
		return nil
	}
	switch v.Kind {
	case yaml.MappingNode:
		return p.entries(v, keyOf, depth+1)
	case yaml.SequenceNode:
		var out []entry
		for _, m := range v.Content {
			if m = deref(m); m.Kind != yaml.MappingNode {
				p.wrongType(key, m, "a mapping to merge")
				continue
			}
			out = append(out, p.entries(m, keyOf, depth+1)...)
		}
		return out
	}
	p.wrongType(key, v, "a mapping or a list of mappings to merge")
	return nil
}

// value decodes n as a value of type t at key. It reports a problem and returns false
// when n does not have that type. Paths are resolved against the file's directory.
func (p *fileParser) value(n *yaml.Node, t reflect.Type, key string, isPath bool) (reflect.Value, bool) {
	n = deref(n)
	if !p.spend(n) {
		return reflect.Value{}, false
	}
	switch {
	case t == durationType:
		s, ok := p.scalar(n, key, "!!str", "a duration such as \"90s\" or \"2m\"")
		if !ok {
			return reflect.Value{}, false
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			p.fail(ErrWrongType, key, n.Line, fmt.Errorf("%q is not a duration such as \"90s\" or \"2m\"", s))
			return reflect.Value{}, false
		}
		return reflect.ValueOf(d), true
	case t.Kind() == reflect.String:
		s, ok := p.scalar(n, key, "!!str", "a string")
		if !ok {
			return reflect.Value{}, false
		}
		if isPath {
			var err error
			if s, err = resolvePath(s, p.dir); err != nil {
				p.fail(ErrInvalidValue, key, n.Line, err)
				return reflect.Value{}, false
			}
		}
		return reflect.ValueOf(s), true
	case t.Kind() == reflect.Bool:
		if _, ok := p.scalar(n, key, "!!bool", "true or false"); !ok {
			return reflect.Value{}, false
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			p.fail(ErrWrongType, key, n.Line, err)
			return reflect.Value{}, false
		}
		return reflect.ValueOf(b), true
	case t.Kind() == reflect.Int:
		if _, ok := p.scalar(n, key, "!!int", "an integer"); !ok {
			return reflect.Value{}, false
		}
		var i int
		if err := n.Decode(&i); err != nil {
			p.fail(ErrWrongType, key, n.Line, fmt.Errorf("%s is out of range", n.Value))
			return reflect.Value{}, false
		}
		return reflect.ValueOf(i), true
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			p.wrongType(key, n, "a list")
			return reflect.Value{}, false
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			k := indexKey(key, i)
			p.lines[k] = item.Line
			// A bad item keeps its index, as the zero value, so that later items are
			// named by their place in the file.
			if v, ok := p.value(item, t.Elem(), k, isPath); ok {
				s.Index(i).Set(v)
			}
		}
		return s, true
	case t.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			p.wrongType(key, n, "a mapping")
			return reflect.Value{}, false
		}
		m := reflect.MakeMap(t)
		for _, e := range p.entries(n, func(k string) string { return mapKey(key, k) }, 0) {
			if e.key.Kind != yaml.ScalarNode || e.key.ShortTag() != "!!str" {
				p.wrongType(key, e.key, "a string key")
				continue
			}
			k := mapKey(key, e.key.Value)
			p.lines[k] = e.key.Line
			if v, ok := p.value(e.val, t.Elem(), k, isPath); ok {
				m.SetMapIndex(reflect.ValueOf(e.key.Value), v)
			}
		}
		return m, true
	case t.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			p.wrongType(key, n, "a mapping")
			return reflect.Value{}, false
		}
		s := reflect.New(t).Elem()
		p.fields(n, t, key, func(f reflect.StructField, fkey string, val *yaml.Node) {
			if v, ok := p.value(val, f.Type, fkey, isPathField(f)); ok {
				s.FieldByIndex(f.Index).Set(v)
			}
		})
		return s, true
	}
	panic(fmt.Sprintf("config: no YAML decoding for %s", t))
}

// spend counts one more value or key, at n. Past maxValues it reports the file once,
// marks every key as unusable, and returns false.
func (p *fileParser) spend(n *yaml.Node) bool {
	p.walked++
	if p.walked <= maxValues {
		return true
	}
	if p.walked == maxValues+1 {
		p.fail(ErrSyntax, "", n.Line, fmt.Errorf("the file expands to more than %d values and keys, through YAML aliases", maxValues))
		for _, l := range leaves {
			p.set[l.path] = true
			p.bad[l.path] = true
		}
	}
	return false
}

// scalar returns the text of n if n is a scalar with the YAML tag tag.
func (p *fileParser) scalar(n *yaml.Node, key, tag, want string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		p.wrongType(key, n, want)
		return "", false
	}
	return n.Value, true
}

// deref follows YAML aliases ("*name") to the node they refer to.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// describe names the type and value of n for an error message.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:37] + "..."
		}
		switch n.ShortTag() {
		case "!!str":
			return "the string " + strconv.Quote(v)
		case "!!int":
			return "the integer " + v
		case "!!float":
			return "the number " + v
		case "!!bool":
			return "the boolean " + v
		case "!!null":
			return "null"
		case "!!timestamp":
			return "the timestamp " + v
		}
		return fmt.Sprintf("%s %s", n.ShortTag(), strconv.Quote(v))
	}
	return "an unsupported YAML node"
}

// resolvePath expands a leading "~" to the home directory and, when dir is not empty,
// makes a relative path relative to dir. The empty path stays empty.
func resolvePath(p, dir string) (string, error) {
	if p == "" {
		return p, nil
	}
	if p == "~" || strings.HasPrefix(p, "~"+string(filepath.Separator)) {
		home := homedir.HomeDir()
		if home == "" {
			return "", fmt.Errorf("%q: there is no home directory to expand '~'", p)
		}
		return filepath.Join(home, p[1:]), nil
	}
	if dir != "" && !filepath.IsAbs(p) {
		return filepath.Join(dir, p), nil
	}
	return p, nil
}
