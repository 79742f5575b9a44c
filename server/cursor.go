package server

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleetwatch/fleetwatch/aggregate"
)

// maxTokenLen bounds the length of a cursor or continue token, before decoding.
const maxTokenLen = 1 << 20

// position is where one cluster's stream of changes to one resource stands in the watch
// cache. It is the resourceVersion of the cluster's last change (rv), compared as an
// unsigned integer, and n, the number of changes since the last one whose
// resourceVersion went forward. Changes arrive out of resourceVersion order during
// initial lists and relists (items come in key order), for deletions detected by a
// relist (they carry the last known resourceVersion), and when a resource is watched by
// one informer per namespace; n gives each of them a position after every earlier one,
// so positions strictly increase in the order changes arrive, and "everything after
// this position" is exact.
//
// gen, compared first, is the generation of the cluster's positions in this watch
// cache: 0, and one more each time the cluster is loaded again from the change log in
// the same run (a warm handover that brings back a cluster that left, A to B to A),
// and at the first change after what was loaded stopped standing for the log (the
// cluster's identity changed, it left, the resource was dropped).
// The objects of such a load take the positions (gen, 0, n), as those of the first
// load do (positionLocked), before the positions that the earlier generations reached
// and after every one of them.
type position struct {
	gen uint32
	rv  uint64
	n   uint32
	// scopes is, in a cursor, where the cluster stands in each namespace of a resource
	// that one informer per namespace watches (ScopedChangeLog), encoded as
	// encodeScopes does; "" otherwise, and in the history's entries, which hold their
	// namespace's position beside (entry.spos). compare leaves it out: within a run the
	// positions of the cluster say it all; a later run places the cursor by namespace
	// (resumeLocked).
	scopes string
}

func (p position) compare(o position) int {
	return cmp.Or(cmp.Compare(p.gen, o.gen), cmp.Compare(p.rv, o.rv), cmp.Compare(p.n, o.n))
}

// next returns the position of a change with resourceVersion rv that arrives after p.
func (p position) next(rv string) position {
	if v, err := strconv.ParseUint(rv, 10, 64); err == nil && v > p.rv {
		return position{gen: p.gen, rv: v}
	}
	return position{gen: p.gen, rv: p.rv, n: p.n + 1}
}

// String is "rv", "rv.n", and with a generation, "rv~gen" or "rv.n~gen", followed by
// ";" and the scopes if there are any: "412.3~1;shop=410,web=412.1".
func (p position) String() string { return string(p.appendTo(nil)) }

// appendTo appends the String form of p to b. It holds digits, ".~;=," and namespace
// names (DNS labels) only, which JSON takes unescaped.
func (p position) appendTo(b []byte) []byte {
	b = strconv.AppendUint(b, p.rv, 10)
	if p.n != 0 {
		b = strconv.AppendUint(append(b, '.'), uint64(p.n), 10)
	}
	if p.gen != 0 {
		b = strconv.AppendUint(append(b, '~'), uint64(p.gen), 10)
	}
	if p.scopes != "" {
		b = append(append(b, ';'), p.scopes...)
	}
	return b
}

func parsePosition(s string) (position, error) {
	s, scopes, withScopes := strings.Cut(s, ";")
	p, err := parseOnePosition(s)
	if err != nil {
		return position{}, err
	}
	if withScopes {
		if scopes == "" {
			return position{}, fmt.Errorf("cluster position %q has no namespace positions after ;", s)
		}
		if _, err := parseScopes(scopes, p.gen); err != nil {
			return position{}, err
		}
		p.scopes = scopes
	}
	return p, nil
}

// parseOnePosition parses a position without scopes.
func parseOnePosition(s string) (position, error) {
	bad := fmt.Errorf("cluster position %q is not an unsigned integer, optionally followed by .n and ~gen", s)
	s, g, withGen := strings.Cut(s, "~")
	rv, n, dotted := strings.Cut(s, ".")
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return position{}, bad
	}
	p := position{rv: v}
	if dotted {
		m, err := strconv.ParseUint(n, 10, 32)
		if err != nil || m == 0 {
			return position{}, bad
		}
		p.n = uint32(m)
	}
	if withGen {
		m, err := strconv.ParseUint(g, 10, 32)
		if err != nil || m == 0 {
			return position{}, bad
		}
		p.gen = uint32(m)
	}
	return p, nil
}

// encodeScopes encodes the positions of a cluster by namespace as a position's
// scopes: "ns=rv" or "ns=rv.n" for each, in namespace order, separated by ",", without
// their generation, which is the cluster position's. "" if there are none.
func encodeScopes(scopes map[string]position) string {
	if len(scopes) == 0 {
		return ""
	}
	var b strings.Builder
	for i, ns := range slices.Sorted(maps.Keys(scopes)) {
		if i > 0 {
			b.WriteByte(',')
		}
		p := scopes[ns]
		p.gen, p.scopes = 0, ""
		b.WriteString(ns)
		b.WriteByte('=')
		b.WriteString(p.String())
	}
	return b.String()
}

// parseScopes decodes what encodeScopes encoded, each position in generation gen. It
// takes the canonical form only (namespace names in order, each once), so that equal
// cursors are equal strings.
func parseScopes(s string, gen uint32) (map[string]position, error) {
	out := map[string]position{}
	if s == "" {
		return out, nil
	}
	prev := ""
	for item := range strings.SplitSeq(s, ",") {
		ns, ps, ok := strings.Cut(item, "=")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || ns <= prev {
			return nil, fmt.Errorf("namespace positions %q are not namespace=position, in namespace order, each once", s)
		}
		if strings.Contains(ps, "~") {
			return nil, fmt.Errorf("namespace position %q has a generation of its own", item)
		}
		p, err := parseOnePosition(ps)
		if err != nil {
			return nil, err
		}
		p.gen = gen
		out[ns], prev = p, ns
	}
	return out, nil
}

// cursor is a fleet resourceVersion: the position of every cluster in the watch cache
// of one resource, and the epoch of that watch cache. A cluster that is missing has seen
// no change yet. Positions are only comparable within one epoch: a watch cache starts
// empty (a new epoch) each time the server starts, and cannot tell what happened before.
//
// Where no cursor outlives its run or its replica (watchCache.sequenced: no change log,
// not a replica of a sharded fleet), a client that may read every cluster
// (watchCache.shortFor) gets short cursors instead: the epoch, the resource,
// and seq, the number of the resource's changes that the watch cache had taken, which
// stands for the position of every cluster after them. Its length does not grow with
// the clusters: a cursor of positions takes some 30 bytes per cluster (its name and
// position), 30 KB at 1,000 clusters, in every event of a watch of the fleet
// (BenchmarkWatchEvent).
type cursor struct {
	epoch     string
	positions map[string]position
	// short is set on a short cursor, with resource and seq; positions, origins, peers
	// and replica are then empty.
	short    bool
	resource string
	seq      uint64
	// origins are the epochs of the positions of clusters that are not of epoch: in a
	// replica's part of a fan-out watch, the positions of the clusters that moved to it
	// by a warm handover since another replica's part held them (carryMoved), which it
	// places in the change log that came with them (ChangeLogSource.ChangeLogHolds).
	// Empty in the cursors that a watch cache hands out.
	origins map[string]string
	// peers are, in a list that a replica of a sharded fleet merged from the other
	// replicas (see fanout.go), the resourceVersion each of them returned, by replica
	// identity: each one a cursor of that replica, without peers of its own.
	peers map[string]string
	// replica is, in a merged cursor, the identity of the replica whose own cursor epoch
	// and positions are (Options.Replica), so that any replica can resume it: the one
	// asked takes its own part from peers, and asks the issuer for the top level's
	// (see rootedAt). Empty in a replica's own cursor, and where the issuer has no
	// identity.
	replica string
	// clusterRV is set on the cursor of a cluster's own resourceVersion, given in the
	// scope of that cluster (resolveResourceVersion): its position is of no
	// generation, and is taken in the cluster's current one (placeLocked).
	clusterRV bool
}

// cursorJSON is the encoded form of a cursor, as base64url (no padding) of its compact
// JSON, for example {"e":"k3J9xQ","c":{"prod":"1042","arn:aws:eks:eu-west-1:1:cluster/x":"77.2"}}.
type cursorJSON struct {
	Epoch    string            `json:"e"`
	Clusters map[string]string `json:"c,omitempty"`
	Peers    map[string]string `json:"p,omitempty"`
	Origins  map[string]string `json:"o,omitempty"`
	Replica  string            `json:"r,omitempty"`
	// Resource and Seq are a short cursor's: {"e":"k3J9xQ","g":"pods.v1","s":1042}.
	Resource string  `json:"g,omitempty"`
	Seq      *uint64 `json:"s,omitempty"`
}

// String encodes c: the base64url of its cursorJSON as encoding/json writes it, map keys
// in order, so that equal cursors encode equally.
func (c cursor) String() string { return c.encode(nil) }

// encode is String, given the clusters of c's positions in order, or nil. A watch keeps
// them so (watchStream.cursor): at thousands of clusters, sorting them was most of the
// cost of the cursor that each event carries.
func (c cursor) encode(order []string) string {
	b := make([]byte, 0, 64+40*len(c.positions))
	b = append(b, `{"e":`...)
	b = appendString(b, c.epoch)
	if len(c.positions) > 0 {
		if order == nil {
			order = slices.Sorted(maps.Keys(c.positions))
		}
		b = append(b, `,"c":{`...)
		for i, cl := range order {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(appendString(b, cl), ':', '"')
			b = append(c.positions[cl].appendTo(b), '"')
		}
		b = append(b, '}')
	}
	b = appendStringMap(b, `,"p":`, c.peers)
	b = appendStringMap(b, `,"o":`, c.origins)
	if c.replica != "" {
		b = appendString(append(b, `,"r":`...), c.replica)
	}
	if c.short {
		b = appendString(append(b, `,"g":`...), c.resource)
		b = strconv.AppendUint(append(b, `,"s":`...), c.seq, 10)
	}
	return base64.RawURLEncoding.EncodeToString(append(b, '}'))
}

// partJSON returns the JSON of rv if it is a replica's own cursor of positions as a
// watch cache writes it, {"e":…} or {"e":…,"c":{…}} and nothing else, so that the
// merged cursor of a fan-out watch can be written around it (mergedAround) without
// decoding its positions at every event.
func partJSON(rv string) ([]byte, bool) {
	b, err := base64.RawURLEncoding.DecodeString(rv)
	if err != nil || !bytes.HasPrefix(b, []byte(`{"e":`)) {
		return nil, false
	}
	i, ok := skipJSONString(b, len(`{"e":`))
	if ok && bytes.HasPrefix(b[i:], []byte(`,"c":`)) {
		i, ok = skipStringObject(b, i+len(`,"c":`))
	}
	if !ok || i != len(b)-1 || b[i] != '}' {
		return nil, false
	}
	return b, true
}

// mergedAround returns the merged cursor whose top level is the replica's own cursor
// part (partJSON's), with the other replicas' cursors peers, as peersJSON writes them,
// and the issuer replica: what cursor.String writes for the cursor of part's epoch and
// positions with those peers and replica.
func mergedAround(part, peers []byte, replica string) string {
	b := make([]byte, 0, len(part)+len(peers)+64)
	b = append(append(b, part[:len(part)-1]...), peers...)
	if replica != "" {
		b = appendString(append(b, `,"r":`...), replica)
	}
	return base64.RawURLEncoding.EncodeToString(append(b, '}'))
}

// peersJSON returns the peers member of a merged cursor, as cursor.String writes it: a
// fan-out watch writes it again only when a peer's cursor changes, not at each event of
// its own part.
func peersJSON(peers map[string]string) []byte { return appendStringMap(nil, `,"p":`, peers) }

// skipJSONString returns the index after the JSON string at b[i:].
func skipJSONString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipStringObject returns the index after the JSON object of strings at b[i:]: {},
// or {"k":"v",…}.
func skipStringObject(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	i++
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		var ok bool
		if i, ok = skipJSONString(b, i); !ok || i >= len(b) || b[i] != ':' {
			return 0, false
		}
		if i, ok = skipJSONString(b, i+1); !ok || i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '}':
			return i + 1, true
		case ',':
			i++
		default:
			return 0, false
		}
	}
}

// appendString appends s as a JSON string, as encoding/json writes it.
func appendString(b []byte, s string) []byte {
	b, _ = appendJSONString(b, s) // a string always encodes
	return b
}

// appendStringMap appends the member name and m as a JSON object, keys in order, as
// encoding/json writes it; nothing if m is empty (omitempty).
func appendStringMap(b []byte, name string, m map[string]string) []byte {
	if len(m) == 0 {
		return b
	}
	b = append(append(b, name...), '{')
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(append(appendString(b, k), ':'), m[k])
	}
	return append(b, '}')
}

// errNotCursor means a resourceVersion is a plain unsigned integer: the resourceVersion
// of an object or of one cluster, not a fleet cursor.
var errNotCursor = errors.New("a cluster's resourceVersion, not a fleet cursor")

// parseCursor decodes the String form of a cursor. A plain unsigned integer fails with
// errNotCursor, so that callers can tell a client that reused an object's
// resourceVersion from one that sent garbage.
func parseCursor(s string) (cursor, error) {
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return cursor{}, errNotCursor
	}
	if len(s) > maxTokenLen {
		return cursor{}, fmt.Errorf("longer than %d bytes", maxTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, errors.New("not a resourceVersion handed out by this server (not base64url)")
	}
	var j cursorJSON
	if err := decodeStrict(b, &j); err != nil {
		return cursor{}, fmt.Errorf("not a resourceVersion handed out by this server: %w", err)
	}
	if j.Epoch == "" {
		return cursor{}, errors.New("not a resourceVersion handed out by this server (no epoch)")
	}
	if j.Seq != nil || j.Resource != "" {
		if j.Seq == nil || j.Resource == "" || len(j.Clusters)+len(j.Origins)+len(j.Peers) > 0 || j.Replica != "" {
			return cursor{}, errors.New("not a resourceVersion handed out by this server (a sequence number with positions, or without its resource)")
		}
		return cursor{epoch: j.Epoch, short: true, resource: j.Resource, seq: *j.Seq}, nil
	}
	c := cursor{epoch: j.Epoch, positions: make(map[string]position, len(j.Clusters))}
	for cl, ps := range j.Clusters {
		if cl == "" {
			return cursor{}, errors.New("empty cluster name")
		}
		p, err := parsePosition(ps)
		if err != nil {
			return cursor{}, fmt.Errorf("cluster %q: %w", cl, err)
		}
		c.positions[cl] = p
	}
	for cl, epoch := range j.Origins {
		if _, ok := c.positions[cl]; !ok || epoch == "" {
			return cursor{}, fmt.Errorf("not a resourceVersion handed out by this server (the epoch of cluster %q)", cl)
		}
		if c.origins == nil {
			c.origins = make(map[string]string, len(j.Origins))
		}
		c.origins[cl] = epoch
	}
	for id, rv := range j.Peers {
		pc, err := parseCursor(rv)
		if id == "" || err != nil || pc.peers != nil || pc.replica != "" {
			return cursor{}, fmt.Errorf("not a resourceVersion handed out by this server (replica %q)", id)
		}
		if c.peers == nil {
			c.peers = make(map[string]string, len(j.Peers))
		}
		c.peers[id] = rv
	}
	if j.Replica != "" {
		if _, ok := j.Peers[j.Replica]; ok {
			return cursor{}, fmt.Errorf("not a resourceVersion handed out by this server (replica %q twice)", j.Replica)
		}
		c.replica = j.Replica
	}
	return c, nil
}

// rootedAt returns the merged cursor c as replica self would have handed it out: its
// own cursor at the top level, and every other replica's, the issuer's included, in
// peers. A cursor of self, or of an issuer without identity, is returned as it is.
func (c cursor) rootedAt(self string) cursor {
	if self == "" || c.replica == "" || c.replica == self {
		return c
	}
	peers := maps.Clone(c.peers)
	if peers == nil {
		peers = map[string]string{}
	}
	peers[c.replica] = c.part().String()
	out := cursor{peers: peers, replica: self}
	if own, ok := peers[self]; ok {
		delete(peers, self)
		// Checked by parseCursor.
		o, _ := parseCursor(own)
		out.epoch, out.positions, out.origins = o.epoch, o.positions, o.origins
	}
	return out
}

// part returns the top level of c, a replica's own cursor, without its peers.
func (c cursor) part() cursor {
	return cursor{epoch: c.epoch, positions: c.positions, origins: c.origins}
}

// epochOf returns the epoch of the position of cluster cl.
func (c cursor) epochOf(cl string) string {
	if e, ok := c.origins[cl]; ok {
		return e
	}
	return c.epoch
}

// continueToken is the continue parameter of a paged list: the resourceVersion of the
// first page, which every later page reports too, and the key of the last object
// returned. The next page starts after that key, in (cluster, namespace, name) order.
type continueToken struct {
	resourceVersion string
	after           aggregate.Key
}

type continueJSON struct {
	ResourceVersion string `json:"rv"`
	After           string `json:"k"`
}

func (t continueToken) String() string {
	b, err := json.Marshal(continueJSON{ResourceVersion: t.resourceVersion, After: t.after.String()})
	if err != nil {
		panic(fmt.Sprintf("encode continue token: %v", err))
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

func parseContinue(s string) (continueToken, error) {
	if len(s) > maxTokenLen {
		return continueToken{}, fmt.Errorf("longer than %d bytes", maxTokenLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return continueToken{}, errors.New("not a continue token handed out by this server (not base64url)")
	}
	var j continueJSON
	if err := decodeStrict(b, &j); err != nil {
		return continueToken{}, fmt.Errorf("not a continue token handed out by this server: %w", err)
	}
	if _, err := parseCursor(j.ResourceVersion); err != nil {
		return continueToken{}, fmt.Errorf("resourceVersion: %w", err)
	}
	k, err := aggregate.ParseKey(j.After)
	if err != nil {
		return continueToken{}, fmt.Errorf("last key: %w", err)
	}
	return continueToken{resourceVersion: j.ResourceVersion, after: k}, nil
}

// decodeStrict decodes one JSON object into v, rejecting unknown fields and trailing
// data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if err := dec.Decode(&json.RawMessage{}); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}
