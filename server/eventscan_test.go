package server

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// viaDecode is what a fan-out watch writes for line without scanEvent: the event
// decoded (numbers as they came), its resourceVersion set, encoded again.
func viaDecode(t testing.TB, line []byte, rv string) []byte {
	t.Helper()
	var e struct {
		Type   string         `json:"type"`
		Object map[string]any `json:"object"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("decoding %q: %v", line, err)
	}
	setObjectRV(e.Object, rv)
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameJSON reports whether a and b decode to the same value, numbers as they are
// written.
func sameJSON(t testing.TB, a, b []byte) bool {
	t.Helper()
	decode := func(s []byte) any {
		dec := json.NewDecoder(bytes.NewReader(s))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decoding %q: %v", s, err)
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

// checkSplice checks that what scanEvent finds in line is what decoding it finds, and
// that spliceRV writes what decoding, setting rv and encoding write.
func checkSplice(t testing.TB, line []byte, ev eventScan, rv string) {
	t.Helper()
	var e struct {
		Type   string         `json:"type"`
		Object map[string]any `json:"object"`
	}
	if err := json.Unmarshal(line, &e); err != nil {
		t.Fatalf("scanEvent took %q, which does not decode: %v", line, err)
	}
	if ev.typ != e.Type || ev.rv != objectRV(e.Object) {
		t.Fatalf("scanEvent(%q) = type %q, resourceVersion %q; decoded: %q, %q", line, ev.typ, ev.rv, e.Type, objectRV(e.Object))
	}
	got := spliceRV(line, ev, rv)
	if !bytes.HasSuffix(got, []byte("\n")) {
		t.Fatalf("spliceRV(%q) = %q, without its newline", line, got)
	}
	if want := viaDecode(t, line, rv); !sameJSON(t, got, want) {
		t.Fatalf("spliceRV(%q) =\n%s\nwant (decoded and encoded again)\n%s", line, got, want)
	}
}

var scanEventCases = []struct {
	line    string
	ok      bool
	typ, rv string
}{
	{`{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"12"},"spec":{"n":9007199254740993,"f":0.1}}}`, true, "ADDED", "12"},
	{` { "type" : "MODIFIED" , "object" : { "metadata" : { "labels" : {"resourceVersion":"not this"}, "resourceVersion" : "7" } , "x" : [ "}" , "\"{" , {"a":[]} ] } } `, true, "MODIFIED", "7"},
	{`{"object":{"metadata":{"resourceVersion":"a\"b\\c\u00e9"}},"type":"DEL\u0045TED"}`, true, "DELETED", "a\"b\\c\u00e9"},
	{`{"type":"ADDED","object":{"data":{"resourceVersion":"1","rows":"x"},"metadata":{"resourceVersion":"3"}}}`, true, "ADDED", "3"},
	// Declined: left to decoding.
	{`{"type":"ADDED","object":{"metadata":{"name":"a"}}}`, false, "", ""},                                               // no resourceVersion
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":""}}}`, false, "", ""},                                     // empty
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":12}}}`, false, "", ""},                                     // not a string
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":null}}}`, false, "", ""},                                   // null
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1","resourceVersion":"2"}}}`, false, "", ""},              // twice
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"},"metadata":{"resourceVersion":"2"}}}`, false, "", ""}, // metadata twice
	{`{"type":"ADDED","type":"DELETED","object":{"metadata":{"resourceVersion":"1"}}}`, false, "", ""},                   // type twice
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}},"object":{}}`, false, "", ""},                        // object twice
	{`{"type":"ADDED","object":{"metadata":{"resource\u0056ersion":"1"}}}`, false, "", ""},                               // escaped name
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}},"extra":1}`, false, "", ""},                          // another member
	{`{"type":"ADDED","object":{"kind":"Table","metadata":{"resourceVersion":"1"},"rows":[]}}`, false, "", ""},           // a Table
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"},"columnDefinitions":[]}}`, false, "", ""},             // a Table
	{`{"type":"ADDED","object":null}`, false, "", ""},                                                                    // no object
	{`{"type":1,"object":{"metadata":{"resourceVersion":"1"}}}`, false, "", ""},                                          // type not a string
	{`{"object":{"metadata":{"resourceVersion":"1"}}}`, false, "", ""},                                                   // no type
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}}`, false, "", ""},                                     // not JSON
	{`{"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}}}}`, false, "", ""},                                   // not JSON
	{`[{"type":"ADDED"}]`, false, "", ""},                                                                                // not an object
	{``, false, "", ""},
}

// TestScanEvent: scanEvent finds the type and resourceVersion of the events that
// spliceRV writes as decoding would, and declines the rest.
func TestScanEvent(t *testing.T) {
	for _, c := range scanEventCases {
		ev, ok := scanEvent([]byte(c.line))
		if ok != c.ok {
			t.Errorf("scanEvent(%q): ok %v, want %v", c.line, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if ev.typ != c.typ || ev.rv != c.rv {
			t.Errorf("scanEvent(%q) = %q, %q, want %q, %q", c.line, ev.typ, ev.rv, c.typ, c.rv)
		}
		checkSplice(t, []byte(c.line), ev, "merged-"+c.rv)
	}
	// The object's bytes are kept as they came, the resourceVersion alone replaced.
	line := []byte(`{"type":"ADDED","object":{"z":1,"metadata":{"resourceVersion":"12","a":"<&>"},"a":1.50}}`)
	ev, _ := scanEvent(line)
	if got, want := string(spliceRV(line, ev, "m")), `{"type":"ADDED","object":{"z":1,"metadata":{"resourceVersion":"m","a":"<&>"},"a":1.50}}`+"\n"; got != want {
		t.Errorf("spliceRV = %s, want %s", got, want)
	}
}

// FuzzScanEvent: whatever the line, scanEvent does not panic, and what it takes
// spliceRV writes as decoding, setting the resourceVersion and encoding would.
func FuzzScanEvent(f *testing.F) {
	for _, c := range scanEventCases {
		f.Add([]byte(c.line), "rv")
	}
	f.Fuzz(func(t *testing.T, line []byte, rv string) {
		ev, ok := scanEvent(line)
		if !ok {
			return
		}
		checkSplice(t, line, ev, rv)
	})
}
