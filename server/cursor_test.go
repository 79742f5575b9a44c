package server

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

func TestCursorRoundTrip(t *testing.T) {
	for _, c := range []cursor{
		{epoch: "e", positions: map[string]position{}},
		{epoch: "e", positions: map[string]position{"prod": {rv: 12}, edge: {rv: 7, n: 3}, "x": {}}},
		// Positions of a later generation (a cluster that came back).
		{epoch: "e", positions: map[string]position{"prod": {gen: 2, rv: 12}, edge: {gen: 1, rv: 7, n: 3}, "x": {gen: 1, n: 4}}},
		// A merged cursor of a sharded fleet: the other replicas' cursors inside.
		{epoch: "e", positions: map[string]position{"prod": {rv: 12}}, peers: map[string]string{
			"fleetwatch-1": cursor{epoch: "f", positions: map[string]position{"far": {rv: 3}}}.String(),
		}},
		// ... that names the replica it is of.
		{epoch: "e", positions: map[string]position{}, replica: "fleetwatch-0", peers: map[string]string{
			"fleetwatch-1": cursor{epoch: "f", positions: map[string]position{}}.String(),
		}},
	} {
		s := c.String()
		if strings.ContainsAny(s, "+/=") {
			t.Errorf("cursor %q is not URL-safe", s)
		}
		got, err := parseCursor(s)
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("parseCursor(%q) = %+v, %v; want %+v", s, got, err, c)
		}
		if got.String() != s {
			t.Errorf("cursor does not encode the same way twice")
		}
	}
}

func TestParseCursorErrors(t *testing.T) {
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, s := range []string{
		"", "!", b64("null"), b64("{}"), b64(`{"e":""}`), b64(`{"e":"x","c":{"a":"1x"}}`),
		b64(`{"e":"x","c":{"a":"1.0"}}`), b64(`{"e":"x","c":{"a":"-1"}}`), b64(`{"e":"x","c":{"":"1"}}`),
		b64(`{"e":"x","z":1}`), b64(`{"e":"x"} {}`), b64(`{"e":"x","c":{"a":"1.99999999999"}}`),
		b64(`{"e":"x","c":{"a":"1~"}}`), b64(`{"e":"x","c":{"a":"1~0"}}`), b64(`{"e":"x","c":{"a":"1.2~x"}}`),
		b64(`{"e":"x","c":{"a":"1~2.3"}}`), b64(`{"e":"x","c":{"a":"1~99999999999"}}`), b64(`{"e":"x","c":{"a":"~1"}}`),
		// A replica's part must be one of its cursors, without parts of its own.
		b64(`{"e":"x","p":{"r":"1"}}`), b64(`{"e":"x","p":{"r":"!"}}`), b64(`{"e":"x","p":{"":"` + b64(`{"e":"y"}`) + `"}}`),
		b64(`{"e":"x","p":{"r":"` + b64(`{"e":"y","p":{"s":"`+b64(`{"e":"z"}`)+`"}}`) + `"}}`),
		// A replica's part names no replica, and the issuer is not among the parts.
		b64(`{"e":"x","p":{"r":"` + b64(`{"e":"y","r":"s"}`) + `"}}`),
		b64(`{"e":"x","r":"s","p":{"s":"` + b64(`{"e":"y"}`) + `"}}`),
		strings.Repeat("A", maxTokenLen+1),
	} {
		if _, err := parseCursor(s); err == nil {
			t.Errorf("parseCursor(%q) succeeded", s)
		}
	}
	if _, err := parseCursor("12345"); !errors.Is(err, errNotCursor) {
		t.Errorf("parseCursor of an integer: %v", err)
	}
}

// TestCursorRootedAt: a merged cursor handed out by one replica, as another replica
// would have handed it out at the same point: the same parts, each replica's once.
func TestCursorRootedAt(t *testing.T) {
	part := func(epoch, cl string, rv uint64) cursor {
		return cursor{epoch: epoch, positions: map[string]position{cl: {rv: rv}}}
	}
	a, b, c := part("ea", "prod", 1), part("eb", "far", 2), part("ec", "edge", 3)
	of0 := cursor{epoch: a.epoch, positions: a.positions, replica: "r0", peers: map[string]string{"r1": b.String(), "r2": c.String()}}
	parsed, err := parseCursor(of0.String())
	if err != nil {
		t.Fatal(err)
	}
	got := parsed.rootedAt("r1")
	want := cursor{epoch: b.epoch, positions: b.positions, replica: "r1", peers: map[string]string{"r0": a.String(), "r2": c.String()}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rooted at r1: %+v, want %+v", got, want)
	}
	if back := got.rootedAt("r0"); back.String() != of0.String() {
		t.Errorf("rooted back at r0: %+v, want %+v", back, of0)
	}
	// A replica without a part (it had none to send) starts its own from nothing.
	got = parsed.rootedAt("r3")
	if got.epoch != "" || got.replica != "r3" || len(got.peers) != 3 || got.peers["r0"] != a.String() {
		t.Errorf("rooted at r3: %+v", got)
	}
	// A replica's own cursor, and one of no identity, stay as they are.
	for _, self := range []string{"r0", ""} {
		if got := parsed.rootedAt(self); got.String() != of0.String() {
			t.Errorf("rooted at %q: %+v", self, got)
		}
	}
	anon := cursor{epoch: a.epoch, positions: a.positions, peers: of0.peers}
	if got := anon.rootedAt("r1"); got.String() != anon.String() {
		t.Errorf("a cursor of no replica, rooted at r1: %+v", got)
	}
}

func TestContinueRoundTrip(t *testing.T) {
	tok := continueToken{resourceVersion: cursor{epoch: "e"}.String(), after: aggregate.Key{Cluster: edge, Namespace: "ns", Name: "n"}}
	got, err := parseContinue(tok.String())
	if err != nil || got != tok {
		t.Errorf("parseContinue = %+v, %v; want %+v", got, err, tok)
	}
	for _, s := range []string{"", "x", base64.RawURLEncoding.EncodeToString([]byte(`{"rv":"1","k":"a//b"}`))} {
		if _, err := parseContinue(s); err == nil {
			t.Errorf("parseContinue(%q) succeeded", s)
		}
	}
}

func TestPositionNext(t *testing.T) {
	// Changes arrive: rv 10, 12, 11 (a relist), "" (no rv), 13; positions increase.
	var p position
	var got []string
	for _, rv := range []string{"10", "12", "11", "", "x", "13", "13"} {
		p = p.next(rv)
		got = append(got, p.String())
	}
	want := []string{"10", "12", "12.1", "12.2", "12.3", "13", "13.1"}
	if !slices.Equal(got, want) {
		t.Errorf("positions %q, want %q", got, want)
	}
	// A later generation starts again, after every position of the earlier ones, and
	// next keeps it.
	g := position{gen: 1}
	for _, rv := range []string{"", "9", "8"} {
		g = g.next(rv)
		want = append(want, g.String())
	}
	if !slices.Equal(want[len(want)-3:], []string{"0.1~1", "9~1", "9.1~1"}) {
		t.Errorf("positions of generation 1: %q", want[len(want)-3:])
	}
	for i := 1; i < len(want); i++ {
		a, _ := parsePosition(want[i-1])
		b, _ := parsePosition(want[i])
		if a.compare(b) >= 0 {
			t.Errorf("%s is not before %s", want[i-1], want[i])
		}
	}
}

func TestResourceCacheHistory(t *testing.T) {
	rc := newResourceCache(podsGVR, 3, nil)
	ev := func(cluster string, typ aggregate.EventType, name, rv string) {
		rc.apply(aggregate.Event{Cluster: cluster, Resource: podsGVR, Type: typ, Object: pod("ns", name, rv, nil)})
	}
	ev("a", aggregate.Added, "p", "5")
	ev("b", aggregate.Added, "p", "9")
	ev("a", aggregate.Updated, "p", "6")
	ev("a", aggregate.Deleted, "q", "7") // unknown object: no change
	ev("a", aggregate.Added, "q", "8")   // evicts a@5
	ev("a", aggregate.Updated, "q", "8") // the fleet's Updated of an object seen: Modified

	rc.mu.RLock()
	defer rc.mu.RUnlock()
	if rc.nextSeq != 5 || rc.firstSeqLocked() != 2 {
		t.Fatalf("seq %d, first %d", rc.nextSeq, rc.firstSeqLocked())
	}
	var got []string
	for _, e := range rc.readLocked(rc.firstSeqLocked(), 10, nil) {
		got = append(got, fmt.Sprintf("%d %s %s %s", e.seq, e.cluster, e.typ, e.pos))
	}
	want := []string{"2 a MODIFIED 6", "3 a ADDED 8", "4 a MODIFIED 8.1"}
	if !slices.Equal(got, want) {
		t.Errorf("history %q, want %q", got, want)
	}
	every := scope{cluster: allClusters}
	for _, tc := range []struct {
		positions map[string]position
		expired   string
	}{
		{map[string]position{"a": {rv: 6}, "b": {rv: 9}}, ""},
		{map[string]position{"a": {rv: 5}}, "b"},
		{map[string]position{"a": {rv: 4}, "b": {rv: 9}}, "a"},
	} {
		cl, old := rc.expiredLocked(cursor{positions: tc.positions}, every)
		if cl != tc.expired || old != (tc.expired != "") {
			t.Errorf("expired(%v) = %q, %v; want %q", tc.positions, cl, old, tc.expired)
		}
	}
	if _, old := rc.expiredLocked(cursor{positions: map[string]position{"a": {rv: 6}}}, scope{cluster: "a"}); old {
		t.Errorf("cluster a is expired though only b lost changes")
	}
	if c := rc.cursorLocked(&watchCache{epoch: "e"}, every); !reflect.DeepEqual(c.positions, map[string]position{"a": {rv: 8, n: 1}, "b": {rv: 9}}) {
		t.Errorf("cursor %+v", c)
	}
	items, more := rc.listLocked(&query{scope: every}, nil, 0).items()
	if len(items) != 3 || more {
		t.Errorf("list %d items", len(items))
	}
}

// TestCarryMoved: the position of a cluster that moved goes to the part of its owner,
// with the epoch of the part it came from; of several parts' positions of a cluster that
// moved more than once, the one of the greatest resourceVersion, unless the owner's own
// is of that resourceVersion; positions of one resourceVersion that differ otherwise
// cannot be ordered. A cluster moving now, or gone, cannot be carried either.
func TestCarryMoved(t *testing.T) {
	part := func(epoch string, positions map[string]position, origins map[string]string) cursor {
		return cursor{epoch: epoch, positions: positions, origins: origins}
	}
	owned := func(m map[string]string) map[string]owner {
		out := map[string]owner{}
		for cl, r := range m {
			out[cl] = owner{replica: r}
		}
		return out
	}
	tests := []struct {
		name   string
		self   string
		parts  map[string]cursor
		owners map[string]owner
		want   map[string]cursor // nil: the parts as they are
		failed string
	}{{
		name: "not moved",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5}}, nil),
			"b": part("eb", map[string]position{"y": {rv: 7}}, nil),
		},
		owners: owned(map[string]string{"x": "a", "y": "b"}),
	}, {
		name: "moved once",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5}}, nil),
			"b": part("eb", map[string]position{"y": {rv: 7}}, nil),
		},
		owners: owned(map[string]string{"x": "b", "y": "b"}),
		want: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 5}, "y": {rv: 7}}, map[string]string{"x": "ea"}),
		},
	}, {
		name: "moved to a replica that had sent nothing",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5, n: 2}}, nil),
		},
		owners: owned(map[string]string{"x": "c"}),
		want: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5, n: 2}}, nil),
			"c": part("ea", map[string]position{"x": {rv: 5, n: 2}}, nil),
		},
	}, {
		// A to B, the client resumed through B and saw x change there, then B to C:
		// A's part still holds x.
		name: "moved twice",
		self: "c",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5, n: 3}, "z": {rv: 3}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 9}, "y": {rv: 7}}, nil),
			"c": part("ec", map[string]position{"w": {rv: 2}}, nil),
		},
		owners: owned(map[string]string{"x": "c", "y": "b", "z": "a", "w": "c"}),
		want: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5, n: 3}, "z": {rv: 3}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 9}, "y": {rv: 7}}, nil),
			"c": part("ec", map[string]position{"w": {rv: 2}, "x": {rv: 9}}, map[string]string{"x": "eb"}),
		},
	}, {
		// B took x's position from A's part, and x did not change on B.
		name: "moved twice, the same position twice",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 6, n: 1}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 6, n: 1}}, nil),
		},
		owners: owned(map[string]string{"x": "c"}),
		want: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 6, n: 1}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 6, n: 1}}, nil),
			"c": part("ea", map[string]position{"x": {rv: 6, n: 1}}, nil),
		},
	}, {
		name: "moved twice, not ordered",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 6, n: 4}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 6, n: 1}}, nil),
		},
		owners: owned(map[string]string{"x": "c"}),
		failed: "x",
	}, {
		// A to B to A: A's own position is older than B's.
		name: "moved back",
		self: "b",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 9}}, nil),
		},
		owners: owned(map[string]string{"x": "a"}),
		want: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 9}}, map[string]string{"x": "eb"}),
			"b": part("eb", map[string]position{"x": {rv: 9}}, nil),
		},
	}, {
		// The old owner counted the deletions of x's objects as x left it.
		name: "the owner's at the same resourceVersion",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 9, n: 2}}, nil),
			"b": part("eb", map[string]position{"x": {rv: 9}}, nil),
		},
		owners: owned(map[string]string{"x": "b"}),
	}, {
		name: "moving",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5}}, nil),
		},
		owners: map[string]owner{"x": {moving: true}},
		failed: "x",
	}, {
		name: "gone",
		self: "a",
		parts: map[string]cursor{
			"a": part("ea", map[string]position{"x": {rv: 5}}, nil),
		},
		owners: map[string]owner{},
		failed: "x",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := cursor{peers: map[string]string{}, replica: tt.self}
			for id, c := range tt.parts {
				if id == tt.self {
					from.epoch, from.positions, from.origins = c.epoch, c.positions, c.origins
				} else {
					from.peers[id] = c.String()
				}
			}
			got, cl, ok := carryMoved(from, tt.self, scope{cluster: allClusters}, tt.owners)
			if tt.failed != "" {
				if ok || cl != tt.failed {
					t.Fatalf("carried: %q, %v; want %q to fail", cl, ok, tt.failed)
				}
				return
			}
			if !ok {
				t.Fatalf("%q cannot be carried", cl)
			}
			want := tt.want
			if want == nil {
				want = tt.parts
			}
			parts := map[string]string{tt.self: got.part().String()}
			for id, rv := range got.peers {
				parts[id] = rv
			}
			if len(parts) != len(want) {
				t.Errorf("parts %v, want %d", slices.Sorted(maps.Keys(parts)), len(want))
			}
			for id, c := range want {
				if parts[id] != c.String() {
					g, _ := base64.RawURLEncoding.DecodeString(parts[id])
					w, _ := base64.RawURLEncoding.DecodeString(c.String())
					t.Errorf("part %s: %s, want %s", id, g, w)
				}
			}
		})
	}
}

// cursorViaJSON is what cursor.String wrote before it wrote the JSON itself: its
// cursorJSON through encoding/json, the form that String must keep.
func cursorViaJSON(c cursor) string {
	j := cursorJSON{Epoch: c.epoch, Peers: c.peers, Origins: c.origins, Replica: c.replica}
	if c.short {
		j.Resource, j.Seq = c.resource, &c.seq
	}
	if len(c.positions) > 0 {
		j.Clusters = make(map[string]string, len(c.positions))
		for cl, p := range c.positions {
			j.Clusters[cl] = p.String()
		}
	}
	b, err := json.Marshal(j)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// TestCursorEncoding: cursors encode as encoding/json writes their cursorJSON, cluster
// names that JSON escapes included, and a watch's cluster order gives the same string.
func TestCursorEncoding(t *testing.T) {
	names := []string{"prod", "arn:aws:eks:eu-west-1:1:cluster/x", "a<b>&c", "quo\"te", "back\\slash", "tab\there", "ünï", "bad\xffutf8", "\u2028"}
	for _, c := range []cursor{
		{epoch: "e"},
		{epoch: "e", short: true, resource: "pods.v1", seq: 0},
		{epoch: "e<&>", short: true, resource: "deployments.v1.apps", seq: 1 << 63},
		{epoch: "e", positions: map[string]position{"prod": {rv: 1}}},
		{epoch: "e", positions: map[string]position{"a": {gen: 3, rv: 14, n: 2, scopes: "shop=12.1,web=14"}, "b": {}}, origins: map[string]string{"a": "o<1>"}},
		{epoch: "e", replica: "r0", peers: map[string]string{"r1": "x", "r&2": "y"}},
	} {
		if got, want := c.String(), cursorViaJSON(c); got != want {
			t.Errorf("%#v encodes as %q, want %q", c, got, want)
		}
	}
	c := cursor{epoch: "e", positions: map[string]position{}}
	for i, n := range names {
		c.positions[n] = position{rv: uint64(i), n: uint32(i % 2)}
	}
	if got, want := c.String(), cursorViaJSON(c); got != want {
		t.Errorf("names that JSON escapes: %q, want %q", got, want)
	}
	if got := c.encode(slices.Sorted(maps.Keys(c.positions))); got != c.String() {
		t.Errorf("in a given order: %q, want %q", got, c.String())
	}
}

// TestMergedAround: a merged cursor written around the JSON of a replica's own part is
// what cursor.String writes for the part's epoch and positions with the peers and the
// replica; partJSON takes a watch cache's cursors of positions only.
func TestMergedAround(t *testing.T) {
	peers := map[string]string{"fleetwatch-1": cursor{epoch: "p1", positions: map[string]position{"far": {rv: 4}}}.String(), "a<b>": "x"}
	for _, own := range []cursor{
		{epoch: "e"},
		{epoch: "e\"<", positions: map[string]position{}},
		{epoch: "e", positions: map[string]position{"prod": {rv: 1}}},
		{epoch: "snap:run", positions: map[string]position{"a\"b": {gen: 2, rv: 14, n: 1, scopes: "shop=12.1,web=14"}, "c\\d": {}, "o": {rv: 3}}},
	} {
		part, ok := partJSON(own.String())
		if !ok {
			t.Errorf("%#v: partJSON refused %s", own, own)
			continue
		}
		for _, replica := range []string{"", "fleetwatch-0"} {
			for _, p := range []map[string]string{{}, peers} {
				want := cursor{epoch: own.epoch, positions: own.positions, peers: p, replica: replica}.String()
				if got := mergedAround(part, peersJSON(p), replica); got != want {
					t.Errorf("%#v with %v, %q: %q, want %q", own, p, replica, got, want)
				}
			}
		}
	}
	for _, c := range []cursor{
		{epoch: "e", short: true, resource: "pods.v1", seq: 3},
		{epoch: "e", positions: map[string]position{"a": {}}, origins: map[string]string{"a": "o"}},
		{epoch: "e", replica: "r"},
		{epoch: "e", peers: map[string]string{"r": "x"}},
	} {
		if _, ok := partJSON(c.String()); ok {
			t.Errorf("partJSON took %#v", c)
		}
	}
	for _, j := range []string{`{"e":"x"`, `{"e":"x","c":{"a":"1"}`, `{"e":"x","c":{"a":1}}`, `{"e":"x","c":{"a":"1",}}`, `{"e":"x\"}`, `{"e":"x"}}`, `{"e":"x","c":{}}x`, `{"e":"x","c":{"a""1"}}`} {
		if _, ok := partJSON(base64.RawURLEncoding.EncodeToString([]byte(j))); ok {
			t.Errorf("partJSON took %s", j)
		}
	}
}
