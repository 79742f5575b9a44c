package config

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// String returns c in the form of the config file, with every key. It is meant for logs:
// a Config holds no credentials, because secrets are only referenced by the paths of
// files (server.auth.tokenFile, server.tls.keyFile, the kubeconfig files), and this
// package never opens them. A test keeps it so: credential-like keys must be files.
func (c Config) String() string {
	return yamlText(encodeNode(reflect.ValueOf(c), false))
}

// yamlText writes n as YAML with an indent of two spaces.
func yamlText(n *yaml.Node) string {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(n); err != nil {
		// Not expected: every node is built from a known Go type.
		return fmt.Sprintf("<config: %v>", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Sprintf("<config: %v>", err)
	}
	return b.String()
}

// MarshalYAML encodes c with the keys of the config file and durations as strings such
// as "2m", so that the YAML loads back into an equal Config. Resource settings at their
// defaults are left out.
func (c Config) MarshalYAML() (any, error) {
	return encodeNode(reflect.ValueOf(c), false), nil
}

// encodeNode builds the YAML node of v. In the items of a list of mappings (omitZero),
// fields with zero values, other than the first, are left out.
func encodeNode(v reflect.Value, omitZero bool) *yaml.Node {
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	if v.Type() == durationType {
		return scalar("!!str", formatDuration(time.Duration(v.Int())))
	}
	switch v.Kind() {
	case reflect.String:
		return scalar("!!str", v.String())
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case reflect.Int:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if v.Type().Elem().Kind() != reflect.Struct || v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		for i := range v.Len() {
			n.Content = append(n.Content, encodeNode(v.Index(i), true))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, scalar("!!str", k.String()), encodeNode(v.MapIndex(k), false))
		}
		return n
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for i := range v.NumField() {
			if omitZero && i > 0 && v.Field(i).IsZero() {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", keyName(v.Type().Field(i))), encodeNode(v.Field(i), false))
		}
		return n
	}
	panic(fmt.Sprintf("config: no YAML encoding for %s", v.Type()))
}

// formatDuration writes d as time.Duration.String does, without zero trailing units:
// "2m" rather than "2m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
