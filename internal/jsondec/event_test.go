package jsondec

import (
	"strings"
	"testing"
)

func TestWatchEvent(t *testing.T) {
	plain := []struct{ data, typ, object string }{
		{`{"type":"ADDED","object":{"kind":"Pod"}}`, "ADDED", `{"kind":"Pod"}`},
		{" {\n\"object\" : [1, {\"a\":\"}\"}] ,\t\"type\" : \"DELETED\" }\r\n", "DELETED", `[1, {"a":"}"}]`},
		{`{"typ\u0065":"ADD\u0045D","object":"x"}`, "ADDED", `"x"`},
		{`{"type":"","object":-1.5e3}`, "", `-1.5e3`},
	}
	var d Decoder
	for _, tt := range plain {
		typ, object, err := d.WatchEvent([]byte(tt.data))
		if err != nil || typ != tt.typ || string(object) != tt.object {
			t.Errorf("%q: %q %q %v, want %q %q", tt.data, typ, object, err, tt.typ, tt.object)
		}
	}
	for _, data := range []string{
		``, `null`, `[]`, `{}`, `{"type":"ADDED"}`, `{"object":{}}`,
		`{"type":"ADDED","object":null}`, `{"type":null,"object":{}}`, `{"type":1,"object":{}}`,
		`{"type":"ADDED","object":{},"type":"ADDED"}`, `{"type":"ADDED","object":{},"object":{}}`,
		`{"type":"ADDED","object":{},"kind":"x"}`, `{"Type":"ADDED","object":{}}`,
		`{"type":"ADDED","object":{}`, `{"type":"ADDED","object":{}}}`, `{"type":"ADDED","object":{"a":}}`,
		`{"type":"ADDED","object":` + strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth) + `}`,
	} {
		if typ, object, err := d.WatchEvent([]byte(data)); err == nil {
			t.Errorf("%.60q: %q %.60q, want an error", data, typ, object)
		}
	}
	// Nested one level less, the object fits.
	data := `{"type":"ADDED","object":` + strings.Repeat(`[`, MaxDepth-1) + strings.Repeat(`]`, MaxDepth-1) + `}`
	if _, _, err := d.WatchEvent([]byte(data)); err != nil {
		t.Errorf("an object nested %d deep in the event: %v", MaxDepth-1, err)
	}
}
