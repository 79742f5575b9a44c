package history

import (
	"encoding/json"
	"testing"
)

func TestDiff(t *testing.T) {
	obj := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name     string
		old, new map[string]any
		secret   bool
		want     string
	}{
		{name: "equal", old: obj(`{"a":1}`), new: obj(`{"a":1}`), want: `null`},
		{name: "both nil", want: `null`},
		{name: "a leaf changed", old: obj(`{"spec":{"replicas":1}}`), new: obj(`{"spec":{"replicas":3}}`),
			want: `[{"path":".spec.replicas","old":1,"new":3}]`},
		{name: "set and removed, in path order", old: obj(`{"b":"x","c":true}`), new: obj(`{"a":false,"c":true}`),
			want: `[{"path":".a","new":false},{"path":".b","old":"x"}]`},
		{name: "keys that are not identifiers", old: obj(`{"metadata":{"labels":{"app.kubernetes.io/name":"a"}}}`),
			new:  obj(`{"metadata":{"labels":{"app.kubernetes.io/name":"b","9x":"n"}}}`),
			want: `[{"path":".metadata.labels[\"9x\"]","new":"n"},{"path":".metadata.labels[\"app.kubernetes.io/name\"]","old":"a","new":"b"}]`},
		{name: "lists by index", old: obj(`{"c":[{"image":"a"},{"image":"b"}]}`), new: obj(`{"c":[{"image":"a2"}]}`),
			want: `[{"path":".c[0].image","old":"a","new":"a2"},{"path":".c[1].image","old":"b"}]`},
		{name: "empty map or list against absent", old: obj(`{"l":[]}`), new: obj(`{"m":{}}`),
			want: `[{"path":".l","old":[]},{"path":".m","new":{}}]`},
		{name: "a map replaced by a scalar", old: obj(`{"a":{"b":1}}`), new: obj(`{"a":"s"}`),
			want: `[{"path":".a","old":{"b":1},"new":"s"}]`},
		{name: "from nothing: every field", new: obj(`{"kind":"Pod","spec":{"x":[1]}}`),
			want: `[{"path":".kind","new":"Pod"},{"path":".spec.x[0]","new":1}]`},
		{name: "to nothing", old: obj(`{"a":1}`), want: `[{"path":".a","old":1}]`},
		{name: "noise left out", old: obj(`{"metadata":{"resourceVersion":"1","managedFields":[{"manager":"a"}],"generation":1}}`),
			new:  obj(`{"metadata":{"resourceVersion":"2","managedFields":[{"manager":"b"}],"generation":2}}`),
			want: `[{"path":".metadata.generation","old":1,"new":2}]`},
		{name: "a Secret's values never", secret: true,
			old:  obj(`{"data":{"k":"czNjcjN0"},"stringData":{"k":"s3cr3t"},"metadata":{"labels":{"a":"1"}}}`),
			new:  obj(`{"data":{"k":"b3RoZXI="},"metadata":{"labels":{"a":"2"}}}`),
			want: `[{"path":".metadata.labels.a","old":"1","new":"2"}]`},
		{name: "a Secret's values never, from nothing", secret: true, new: obj(`{"data":{"k":"czNjcjN0"},"type":"Opaque"}`),
			want: `[{"path":".type","new":"Opaque"}]`},
		{name: "data of others is data", old: obj(`{"data":{"k":"1"}}`), new: obj(`{"data":{"k":"2"}}`),
			want: `[{"path":".data.k","old":"1","new":"2"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.Marshal(Diff(tc.old, tc.new, tc.secret))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("Diff:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestDiffDoesNotModifyItsObjects(t *testing.T) {
	old := map[string]any{"data": map[string]any{"k": "v"}, "a": 1.0}
	new := map[string]any{"data": map[string]any{"k": "w"}, "a": 2.0}
	Diff(old, new, true)
	if _, ok := old["data"]; !ok {
		t.Error("Diff removed a Secret's data from the object it was given")
	}
	if _, ok := new["data"]; !ok {
		t.Error("Diff removed a Secret's data from the object it was given")
	}
}
