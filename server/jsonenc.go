package server

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// appendJSON appends to b the JSON of v, a value of an unstructured object: maps with
// string keys, slices, strings, int64, float64, bool and nil. The bytes are those of
// json.Marshal(v), keys sorted and HTML escaped alike (FuzzAppendJSON holds it to that),
// at a fraction of its allocations: json.Marshal sorts a map's keys through reflection,
// allocating for each key, which made a list page of 500 pods take about 510 allocations
// per pod. Strings that need escaping, and any other type, go through json.Marshal.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, v)
	case bool:
		return strconv.AppendBool(b, v), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case float64:
		return appendJSONFloat(b, v)
	case map[string]any:
		if v == nil {
			return append(b, "null"...), nil
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSONString(b, k); err != nil {
				return nil, err
			}
			b = append(b, ':')
			if b, err = appendJSON(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendJSON(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	default:
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		return append(b, raw...), nil
	}
}

// appendJSONString appends s quoted. Printable ASCII other than the characters that
// encoding/json escapes (", \ and, for HTML, <, > and &) is copied as it is; anything
// else, rare in Kubernetes objects, is quoted by json.Marshal.
func appendJSONString(b []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, err := json.Marshal(s)
			if err != nil {
				return nil, err
			}
			return append(b, raw...), nil
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// appendJSONFloat appends f as encoding/json does: as ES6 formats numbers.
func appendJSONFloat(b []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, fmt.Errorf("json: unsupported value: %s", strconv.FormatFloat(f, 'g', -1, 64))
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 to e-9, as encoding/json writes it.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}
