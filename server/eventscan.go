package server

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// A fan-out watch writes each event of its parts again with the merged cursor as its
// object's resourceVersion. Decoding the event into maps and encoding it again cost
// more than the rest of the event's work at a few clusters; scanEvent finds what the
// merge needs in the event's line as it came, and spliceRV writes the line with the
// resourceVersion replaced, the object's bytes otherwise as they were.

// eventScan is what scanEvent found in a watch event's line.
type eventScan struct {
	// typ is the event's type.
	typ string
	// rv is its object's metadata.resourceVersion, and rvStart and rvEnd the bounds
	// of its JSON string in the line.
	rv             string
	rvStart, rvEnd int
}

// scanEvent finds the type of the watch event in line, one JSON object
// ({"type":…,"object":{…}}), and its object's metadata.resourceVersion, without
// decoding the object. It declines (ok false), leaving the event to the decoding path,
// wherever writing the line again with spliceRV could differ from decoding it, setting
// the resourceVersion and encoding it (setObjectRV): a line that is not valid JSON or
// not UTF-8 (decoding replaces what is not UTF-8 in strings), a member name with an
// escape, a member of the event other than type and object, one of those or the
// object's metadata or its resourceVersion twice, a resourceVersion that is not a
// non-empty string, and a Table (rows or columnDefinitions: its rows' objects carry
// resourceVersions too).
func scanEvent(line []byte) (ev eventScan, ok bool) {
	if !utf8.Valid(line) || !json.Valid(line) {
		return eventScan{}, false
	}
	var typSeen bool
	objStart, objEnd := -1, -1
	if !forMembers(line, skipSpace(line, 0), func(name []byte, v, end int) bool {
		switch string(name) {
		case "type":
			if typSeen || line[v] != '"' {
				return false
			}
			typSeen = true
			ev.typ = unquote(line[v:end])
		case "object":
			if objStart >= 0 || line[v] != '{' {
				return false
			}
			objStart, objEnd = v, end
		default:
			return false
		}
		return true
	}) || !typSeen || objStart < 0 {
		return eventScan{}, false
	}
	mdStart, mdEnd := -1, -1
	if !forMembers(line[:objEnd], objStart, func(name []byte, v, end int) bool {
		switch string(name) {
		case "metadata":
			if mdStart >= 0 || line[v] != '{' {
				return false
			}
			mdStart, mdEnd = v, end
		case "rows", "columnDefinitions":
			return false
		}
		return true
	}) || mdStart < 0 {
		return eventScan{}, false
	}
	ev.rvStart = -1
	if !forMembers(line[:mdEnd], mdStart, func(name []byte, v, end int) bool {
		if string(name) != "resourceVersion" {
			return true
		}
		if ev.rvStart >= 0 || line[v] != '"' {
			return false
		}
		ev.rvStart, ev.rvEnd = v, end
		ev.rv = unquote(line[v:end])
		return true
	}) || ev.rvStart < 0 || ev.rv == "" {
		return eventScan{}, false
	}
	return ev, true
}

// spliceRV returns line, as scanEvent scanned it into ev, with its object's
// resourceVersion rv, followed by a newline.
func spliceRV(line []byte, ev eventScan, rv string) []byte {
	b := make([]byte, 0, len(line)-(ev.rvEnd-ev.rvStart)+len(rv)+3)
	b = append(b, line[:ev.rvStart]...)
	b = appendString(b, rv)
	b = append(b, line[ev.rvEnd:]...)
	return append(b, '\n')
}

// forMembers calls fn with each member of the JSON object at b[i:], which must be
// valid JSON: its name as written between its quotes, and the bounds of its value in
// b. It returns false if b[i:] is no object, a name has an escape, or fn returns
// false.
func forMembers(b []byte, i int, fn func(name []byte, v, end int) bool) bool {
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) {
		nameEnd, ok := skipJSONString(b, i)
		if !ok {
			return false
		}
		name := b[i+1 : nameEnd-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			return false
		}
		i = skipSpace(b, nameEnd)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		v := skipSpace(b, i+1)
		end, ok := skipValue(b, v)
		if !ok || !fn(name, v, end) {
			return false
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case '}':
			return true
		case ',':
			i = skipSpace(b, i+1)
		default:
			return false
		}
	}
	return false
}

// skipValue returns the index after the JSON value at b[i:], which must be valid JSON.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipJSONString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, ok := skipJSONString(b, i)
				if !ok {
					return 0, false
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	}
	// A number, true, false or null: up to the next delimiter.
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, true
		}
		i++
	}
	return i, true
}

// skipSpace returns the index of the first byte at or after i that is not JSON's white
// space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// unquote returns the string of the valid JSON string s.
func unquote(s []byte) string {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s[1 : len(s)-1])
	}
	var v string
	_ = json.Unmarshal(s, &v) // valid JSON, checked by the caller
	return v
}
