package cluster

import (
	"fmt"
	"regexp"
	"strings"
)

// ValidateGlob reports whether pattern is a valid include or exclude glob.
//
// Globs match whole context names:
//   - '*' matches any sequence of characters, including '/' and ':', so "arn:aws:eks:*"
//     matches EKS context names such as "arn:aws:eks:eu-west-1:123:cluster/prod";
//   - '?' matches exactly one character;
//   - '[...]' matches one character of a class, such as "[a-c]" or "[!0-9]" ('^' may be
//     used instead of '!');
//   - '\' quotes the character that follows it.
//
// The empty pattern is invalid. The error wraps ErrInvalidGlob and quotes the pattern.
func ValidateGlob(pattern string) error {
	_, err := compileGlob(pattern)
	return err
}

// glob is a compiled include or exclude pattern.
type glob struct {
	pattern string
	re      *regexp.Regexp
}

func (g glob) match(name string) bool { return g.re.MatchString(name) }

func compileGlobs(patterns []string) ([]glob, error) {
	gs := make([]glob, 0, len(patterns))
	for _, p := range patterns {
		re, err := compileGlob(p)
		if err != nil {
			return nil, err
		}
		gs = append(gs, glob{pattern: p, re: re})
	}
	return gs, nil
}

func matchAny(gs []glob, name string) bool {
	for _, g := range gs {
		if g.match(name) {
			return true
		}
	}
	return false
}

// compileGlob translates a glob into an anchored regular expression. Translating, rather
// than using path.Match, is what lets '*' cross '/', and it makes matching linear in the
// length of the name.
func compileGlob(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, globError(pattern, "empty pattern")
	}
	rs := []rune(pattern)
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(rs); i++ {
		switch rs[i] {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '\\':
			if i+1 == len(rs) {
				return nil, globError(pattern, "trailing '\\'")
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			class, next, err := translateClass(rs, i)
			if err != nil {
				return nil, globError(pattern, err.Error())
			}
			b.WriteString(class)
			i = next - 1
		default:
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		}
	}
	b.WriteString(`)$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		// Not expected: every piece above is quoted. Keep the error anyway rather than panic.
		return nil, globError(pattern, err.Error())
	}
	return re, nil
}

// translateClass translates the character class that starts at rs[start] == '[' and
// returns the regular expression class and the index just past its closing ']'.
func translateClass(rs []rune, start int) (string, int, error) {
	i := start + 1
	var b strings.Builder
	b.WriteString("[")
	if i < len(rs) && (rs[i] == '!' || rs[i] == '^') {
		b.WriteString("^")
		i++
	}
	for n := 0; ; n++ {
		if i >= len(rs) {
			return "", 0, fmt.Errorf("missing ']'")
		}
		if rs[i] == ']' {
			if n == 0 {
				return "", 0, fmt.Errorf("empty character class")
			}
			b.WriteString("]")
			return b.String(), i + 1, nil
		}
		lo, next, err := classChar(rs, i)
		if err != nil {
			return "", 0, err
		}
		i = next
		hi := lo
		if i+1 < len(rs) && rs[i] == '-' && rs[i+1] != ']' {
			if hi, i, err = classChar(rs, i+1); err != nil {
				return "", 0, err
			}
			if hi < lo {
				return "", 0, fmt.Errorf("range %q-%q is out of order", lo, hi)
			}
		}
		fmt.Fprintf(&b, `\x{%x}`, lo)
		if hi != lo {
			fmt.Fprintf(&b, `-\x{%x}`, hi)
		}
	}
}

// classChar returns the character at rs[i], which may be quoted with '\', and the index
// after it.
func classChar(rs []rune, i int) (rune, int, error) {
	if rs[i] != '\\' {
		return rs[i], i + 1, nil
	}
	if i+1 == len(rs) {
		return 0, 0, fmt.Errorf("trailing '\\'")
	}
	return rs[i+1], i + 2, nil
}

func globError(pattern, reason string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidGlob, pattern, reason)
}

// Globs is a compiled list of globs, with the syntax of ValidateGlob. The zero value
// matches nothing.
type Globs struct {
	gs []glob
}

// CompileGlobs compiles patterns. The error wraps ErrInvalidGlob and quotes the first
// invalid pattern.
func CompileGlobs(patterns ...string) (Globs, error) {
	gs, err := compileGlobs(patterns)
	if err != nil {
		return Globs{}, err
	}
	return Globs{gs: gs}, nil
}

// Match reports whether name matches one of the globs.
func (g Globs) Match(name string) bool { return matchAny(g.gs, name) }
