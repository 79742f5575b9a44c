package config

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// parseEnv reads the environment variable of every leaf through lookup. A variable that
// is set but empty counts: it empties a string or a list, and is an error for a number,
// a boolean or a duration.
func parseEnv(lookup func(string) (string, bool)) layer {
	ly := newLayer()
	for i := range leaves {
		l := &leaves[i]
		s, ok := lookup(l.env)
		if !ok {
			continue
		}
		ly.set[l.path] = true
		v, err := parseText(l, s)
		kind := ErrWrongType
		if err == nil && l.isPath {
			v, err = resolvePaths(v)
			kind = ErrInvalidValue
		}
		if err != nil {
			fe := newFieldError(kind, l.path, err)
			fe.Env = l.env
			ly.errs = append(ly.errs, fe)
			ly.bad[l.path] = true
			continue
		}
		setNested(ly.values, l.path, v)
	}
	return ly
}

// parseText parses the text of an environment variable as a value of l. Lists are
// comma-separated, except path lists, which are separated like $KUBECONFIG (':' on
// Unix). Aliases are context=cluster pairs, and resources are names.
func parseText(l *leaf, s string) (any, error) {
	switch l.kind {
	case kindString:
		return s, nil
	case kindBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not true or false", s)
		}
		return b, nil
	case kindInt:
		i, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", s)
		}
		return i, nil
	case kindDuration:
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration such as \"90s\" or \"2m\"", s)
		}
		return d, nil
	case kindStrings:
		if !l.isPath {
			return splitList(s), nil
		}
		var paths []string
		for _, p := range filepath.SplitList(s) {
			if p != "" {
				paths = append(paths, p)
			}
		}
		return paths, nil
	case kindMap:
		m := map[string]string{}
		for _, pair := range splitList(s) {
			k, v, ok := strings.Cut(pair, "=")
			if !ok {
				return nil, fmt.Errorf("%q is not a context=cluster pair", pair)
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		return m, nil
	case kindResources:
		return resourcesNamed(splitList(s)), nil
	}
	panic(fmt.Sprintf("config: no text form for key %s", l.path))
}

// splitList splits a comma-separated list, trimming spaces and dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// resourcesNamed returns a Resource with default settings for each name.
func resourcesNamed(names []string) []Resource {
	rs := make([]Resource, 0, len(names))
	for _, n := range names {
		rs = append(rs, Resource{Name: n})
	}
	return rs
}
