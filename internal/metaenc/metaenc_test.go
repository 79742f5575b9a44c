package metaenc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"sigs.k8s.io/randfill"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/metaenc/metaenctest"
)

// cborOf returns the CBOR that package wire's metadata clients write for the JSON of obj
// (jsondec's, managedFields dropped or not), without the format byte.
func cborOf(t testing.TB, js []byte, drop bool) []byte {
	t.Helper()
	d := jsondec.Decoder{DropManagedFields: drop}
	_, cbor, err := d.ObjectCBOR(js)
	if err != nil || cbor == nil {
		t.Fatalf("ObjectCBOR(%s): %v", js, err)
	}
	return cbor
}

// want is what the CBOR decodes to, as the snapshot's format 3 decodes it.
func want(t testing.TB, cbor []byte) (*metav1.PartialObjectMetadata, error) {
	t.Helper()
	p := new(metav1.PartialObjectMetadata)
	if err := direct.Unmarshal(cbor, p); err != nil {
		return nil, err
	}
	p.TypeMeta = metav1.TypeMeta{}
	return p, nil
}

// check requires Compact of cbor, if it writes it, to decode to what the CBOR decodes
// to, exactly (reflect.DeepEqual, the times' locations included), and to be shorter.
// It returns whether Compact wrote it.
func check(t testing.TB, cbor []byte) bool {
	t.Helper()
	c, ok := Compact(cbor)
	if !ok {
		return false
	}
	w, err := want(t, cbor)
	if err != nil {
		t.Fatalf("Compact wrote % x, whose CBOR does not decode: %v", cbor, err)
	}
	got, err := Decode(c)
	if err != nil {
		t.Fatalf("Decode(% x): %v", c, err)
	}
	if !reflect.DeepEqual(got, w) {
		t.Fatalf("decoded\n%#v\nwant\n%#v", got, w)
	}
	if len(c) >= len(cbor)+1 || cap(c) != len(c) {
		t.Errorf("%d bytes (cap %d) for %d of CBOR", len(c), cap(c), len(cbor))
	}
	return true
}

// filler fills metadata objects at random, with the strings of the static table among
// their labels and finalizers, which are written as their index.
func filler(seed int64) *randfill.Filler { return metaenctest.Filler(seed, table[:]) }

// TestCompactRandomObjects: random PartialObjectMetadata, written as JSON as the
// kube-apiserver does and as CBOR as package wire does, compact to an encoding that
// decodes to what the CBOR decodes to; every one without managedFields compacts.
func TestCompactRandomObjects(t *testing.T) {
	compacted := 0
	for i := range 2000 {
		var obj metav1.PartialObjectMetadata
		filler(int64(i)).Fill(&obj)
		obj.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
		js, err := json.Marshal(&obj)
		if err != nil {
			t.Fatal(err)
		}
		for _, drop := range []bool{false, true} {
			cbor := cborOf(t, js, drop)
			ok := check(t, cbor)
			if !ok && (drop || obj.ManagedFields == nil) {
				t.Fatalf("#%d not compacted: %s", i, js)
			}
			if ok {
				compacted++
			}
		}
	}
	t.Logf("%d compacted", compacted)
}

// TestCompactCorners: the texts that stay texts (a uid or a resourceVersion not in
// their canonical forms, timestamps with a fraction or an offset), empty maps and
// arrays, null members; and what Compact declines.
func TestCompactCorners(t *testing.T) {
	for _, tc := range []struct {
		metadata string
		declined bool
	}{
		{metadata: `{"name":"a","uid":"0F0E0D0C-0B0A-0908-0706-050403020100","resourceVersion":"007"}`},
		{metadata: `{"uid":"0f0e0d0c-0b0a-0908-0706-050403020100","resourceVersion":"18446744073709551615"}`},
		{metadata: `{"resourceVersion":"18446744073709551616","generation":-3}`},
		{metadata: `{"resourceVersion":"","uid":"","name":""}`},
		{metadata: `{"creationTimestamp":"2026-01-02T03:04:05.5Z","deletionTimestamp":"2026-01-02T03:04:05+01:00"}`},
		{metadata: `{"creationTimestamp":"0001-01-01T00:00:00Z","deletionTimestamp":"2026-01-02T03:04:05Z","deletionGracePeriodSeconds":30}`},
		{metadata: `{"creationTimestamp":null,"deletionTimestamp":null}`},
		{metadata: `{"labels":{},"annotations":{},"finalizers":[],"ownerReferences":[]}`},
		{metadata: `{"ownerReferences":[{},{"apiVersion":"v1","kind":"K","name":"n","uid":"u","controller":false,"blockOwnerDeletion":true}]}`},
		{metadata: `{"labels":{"a":"b","":""},"annotations":{"x":"` + strings.Repeat("y", 300) + `"}}`},
		{metadata: `{"creationTimestamp":"yesterday"}`, declined: true},
		{metadata: `{"managedFields":[]}`, declined: true},
		{metadata: `{"unknown":1}`, declined: true},
		{metadata: `{"labels":null}`, declined: true},
		{metadata: `{"labels":{"a":1}}`, declined: true},
		{metadata: `{"generation":1.5}`, declined: true},
		{metadata: `{"ownerReferences":[{"controller":null}]}`, declined: true},
		{metadata: `{"ownerReferences":[{"other":"x"}]}`, declined: true},
	} {
		t.Run(tc.metadata, func(t *testing.T) {
			js := `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":` + tc.metadata + `}`
			if ok := check(t, cborOf(t, []byte(js), false)); ok == tc.declined {
				t.Errorf("compacted: %v, want %v", ok, !tc.declined)
			}
		})
	}
	for _, js := range []string{`{"kind":"X","other":1}`, `[]`, `{"metadata":[]}`} {
		var d jsondec.Decoder
		_, cbor, _ := d.ObjectCBOR([]byte(js))
		if js == `[]` {
			cbor = []byte{0x80}
		}
		if _, ok := Compact(cbor); ok {
			t.Errorf("%s compacted", js)
		}
	}
}

// TestDecodeBadInput: truncated encodings, unknown and repeated tags, counts beyond the
// input, bad varints are errors that wrap ErrCorrupt.
func TestDecodeBadInput(t *testing.T) {
	good, ok := Compact(cborOf(t, []byte(`{"metadata":{"name":"n","uid":"0f0e0d0c-0b0a-0908-0706-050403020100","labels":{"a":"b"},"ownerReferences":[{"name":"o","controller":true}],"creationTimestamp":"2026-01-02T03:04:05Z"}}`), false))
	if !ok {
		t.Fatal("not compacted")
	}
	if _, err := Decode(good); err != nil {
		t.Fatal(err)
	}
	bad := [][]byte{
		nil, {}, {3}, {Format, 0}, {Format, tagCount}, {Format, tagName}, {Format, tagName, 5, 'a'},
		{Format, tagName, 0, tagName, 0}, {Format, tagUID, 0, tagUIDBytes}, {Format, tagRVInt, 0x80},
		{Format, tagLabels, 100, 0, 0}, {Format, tagLabels, 2, 1, 'a', 0, 1, 'a', 0},
		{Format, tagOwnerReferences, 1, 1, tagName, 0}, {Format, tagOwnerReferences, 1, 1, tagOwnerController, 2},
		{Format, tagCreation, 3, 'a', 'b', 'c'}, {Format, tagGeneration, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	}
	for i := range len(good) {
		bad = append(bad, good[:i])
	}
	for _, b := range bad {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			// A prefix of a good encoding may end between members: it must then decode.
			if err == nil && len(b) > 0 && len(b) < len(good) && string(good[:len(b)]) == string(b) {
				continue
			}
			t.Errorf("Decode(% x): %v, want ErrCorrupt", b, err)
		}
	}
}

// FuzzCompact: whatever Compact writes decodes to what its CBOR decodes to; Decode of
// anything returns an object or an error wrapping ErrCorrupt, without panicking.
func FuzzCompact(f *testing.F) {
	for i := range 5 {
		var obj metav1.PartialObjectMetadata
		filler(int64(i)).Fill(&obj)
		js, _ := json.Marshal(&obj)
		cbor := cborOf(f, js, true)
		f.Add(cbor)
		if c, ok := Compact(cbor); ok {
			f.Add(c)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data)
		if _, err := Decode(data); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Decode: %v", err)
		}
	})
}

// The size and digest of the table of format 4.
const (
	tableLen  = 140
	tableHash = "9115d549c0d4a74bf265104a0bc30b54cf7f159b9187a0eb38f0b51a43977557"
)

// TestTableFixed: the static table is part of format 4, so its strings and their order
// never change (a new table needs a new format byte); a string of it is written as its
// index, and decoded as the table's own string.
func TestTableFixed(t *testing.T) {
	h := sha256.New()
	for _, s := range table {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if got := hex.EncodeToString(h.Sum(nil)); len(table) != tableLen || got != tableHash {
		t.Fatalf("the table of format 4 changed: %d strings, sha256 %s", len(table), got)
	}
	c, ok := Compact(cborOf(t, []byte(`{"metadata":{"labels":{"app.kubernetes.io/name":"x"}}}`), false))
	if !ok || len(c) != 1+1+1+1+1+1 {
		t.Fatalf("% x, want the key as its index", c)
	}
	p, err := Decode(c)
	if err != nil {
		t.Fatal(err)
	}
	for k := range p.Labels {
		if unsafe.StringData(k) != unsafe.StringData(table[mustTableIndex(t, "app.kubernetes.io/name")]) {
			t.Error("the key is not the table's string")
		}
	}
}

func mustTableIndex(t *testing.T, s string) int {
	t.Helper()
	i, ok := tableIndex(s)
	if !ok {
		t.Fatalf("%q is not in the table", s)
	}
	return i
}

// TestTableIndex: tableIndex finds every string of the table and nothing else: not a
// string one byte longer or shorter, nor one with a byte changed, nor one longer than
// the table's strings. The probes stay short.
func TestTableIndex(t *testing.T) {
	for i, s := range table {
		if j, ok := tableIndex(s); !ok || j != i {
			t.Errorf("tableIndex(%q) = %d, %v; want %d", s, j, ok, i)
		}
		if j, ok := tableIndex([]byte(s)); !ok || j != i {
			t.Errorf("tableIndex([]byte(%q)) = %d, %v; want %d", s, j, ok, i)
		}
		for _, other := range []string{s + "x", s[:len(s)-1], "x" + s[1:], s[:len(s)-1] + "\x00", strings.Repeat(s, 64/len(s)+1)} {
			if j, ok := tableIndex(other); ok && table[j] != other {
				t.Errorf("tableIndex(%q) = %d (%q)", other, j, table[j])
			}
			if _, ok := tableIndex(other); ok != slices.Contains(table[:], other) {
				t.Errorf("tableIndex(%q) found %v", other, ok)
			}
		}
	}
	if _, ok := tableIndex(""); ok {
		t.Error("the empty string found")
	}
	if tableProbes > 4 {
		t.Errorf("a string of the table takes %d probes to find", tableProbes)
	}
}

// TestCanonicalSeconds: canonicalSeconds takes a text exactly when time.Parse and
// Format would find it canonical, whole seconds in UTC, and gives the same seconds:
// times over every year Format writes with four digits, and their texts with a byte
// changed (a 30th of February, a 24th hour, a 60th second, a letter, an offset).
func TestCanonicalSeconds(t *testing.T) {
	slow := func(s []byte) (int64, bool) {
		p, err := time.Parse(time.RFC3339, string(s))
		if err != nil || p.UTC().Format(time.RFC3339) != string(s) {
			return 0, false
		}
		return p.Unix(), true
	}
	lo := time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	hi := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix()
	r := rand.New(rand.NewPCG(1, 2))
	texts := [][]byte{[]byte("2024-02-29T12:00:00Z"), []byte("2023-02-29T12:00:00Z"), []byte("2024-04-31T00:00:00Z"),
		[]byte("2024-01-01T24:00:00Z"), []byte("2024-01-01T23:60:00Z"), []byte("2024-01-01T23:59:60Z"),
		[]byte("2024-01-01T00:00:00z"), []byte("2024-01-01T00:00:00+00:00"), []byte("2024-01-01T00:00:00.5Z"),
		[]byte("0000-01-01T00:00:00Z"), []byte("9999-12-31T23:59:59Z"), []byte("2024-00-10T00:00:00Z"),
		[]byte("2024-01-00T00:00:00Z"), []byte("2024-13-01T00:00:00Z"), []byte("-024-01-01T00:00:00Z")}
	for range 20000 {
		s := []byte(time.Unix(lo+r.Int64N(hi-lo+1), 0).UTC().Format(time.RFC3339))
		texts = append(texts, s)
		m := slices.Clone(s)
		m[r.IntN(len(m))] = "0123456789-:TZ+ a"[r.IntN(17)]
		texts = append(texts, m)
	}
	canonical := 0
	for _, s := range texts {
		got, ok := canonicalSeconds(s)
		want, wantOK := slow(s)
		if ok != wantOK || got != want {
			t.Fatalf("canonicalSeconds(%q) = %d, %v; Parse and Format: %d, %v", s, got, ok, want, wantOK)
		}
		if ok {
			canonical++
		}
	}
	t.Logf("%d of %d texts canonical", canonical, len(texts))
}

// TestDecodeSharesNothing: the strings of a decoded object are cut from Decode's own
// copy of the encoding, not from the caller's bytes (Decode) or string
// (DecodeString): changing the bytes after the decode, or decoding other objects,
// changes nothing in the object.
func TestDecodeSharesNothing(t *testing.T) {
	js := []byte(`{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"pod-a","namespace":"ns-a",` +
		`"uid":"not-a-uuid","resourceVersion":"0042","labels":{"app":"shop-a","spelled-out":"value-a"},` +
		`"annotations":{"note":"a note"},"finalizers":["example.com/a"],` +
		`"ownerReferences":[{"apiVersion":"example.com/v1","kind":"Thing","name":"owner-a","uid":"owner-uid","controller":true}]}}`)
	c, ok := Compact(cborOf(t, js, true))
	if !ok {
		t.Fatal("not compacted")
	}
	w, err := want(t, cborOf(t, js, true))
	if err != nil {
		t.Fatal(err)
	}
	for _, decode := range []struct {
		name string
		fn   func([]byte) (*metav1.PartialObjectMetadata, error)
	}{
		{"Decode", Decode},
		{"DecodeString", func(b []byte) (*metav1.PartialObjectMetadata, error) {
			// A string over the caller's bytes, as persist hands its encodings over.
			return DecodeString(unsafe.String(&b[0], len(b)))
		}},
	} {
		t.Run(decode.name, func(t *testing.T) {
			data := slices.Clone(c)
			got, err := decode.fn(data)
			if err != nil {
				t.Fatal(err)
			}
			for i := range data {
				data[i] = 'X'
			}
			other := bytes.ReplaceAll(js, []byte("-a"), []byte("-b"))
			if c2, ok := Compact(cborOf(t, other, true)); !ok {
				t.Fatal("not compacted")
			} else if _, err := decode.fn(c2); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, w) {
				t.Errorf("after the bytes changed:\n%#v\nwant\n%#v", got, w)
			}
		})
	}
}

// benchJSON is the JSON of the PartialObjectMetadata of a pod as make bench loads them
// (test/bench/load.go), managedFields left out: 7 labels, 6 annotations, an owner.
const benchJSON = `{"apiVersion":"meta.k8s.io/v1","kind":"PartialObjectMetadata","metadata":{"name":"cart-1234",` +
	`"namespace":"bench-4","uid":"0000162e-1111-4000-8000-00000000162e","resourceVersion":"101234",` +
	`"creationTimestamp":"2026-07-01T12:20:34Z","labels":{"app.kubernetes.io/name":"cart",` +
	`"app.kubernetes.io/instance":"cart-bench-4","app.kubernetes.io/version":"1.14.2","app.kubernetes.io/part-of":"shop",` +
	`"tier":"web","pod-template-hash":"7f9c4d5b8","app":"cart"},"annotations":{"prometheus.io/scrape":"true",` +
	`"prometheus.io/port":"9090","kubectl.kubernetes.io/default-container":"cart",` +
	`"checksum/config":"4f2a1c9e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f",` +
	`"sidecar.istio.io/status":"{\"initContainers\":null,\"containers\":[\"istio-proxy\"],\"volumes\":[\"istio-envoy\",\"istio-data\"],\"imagePullSecrets\":null,\"revision\":\"default\"}",` +
	`"cluster-autoscaler.kubernetes.io/safe-to-evict":"true"},"ownerReferences":[{"apiVersion":"apps/v1",` +
	`"kind":"ReplicaSet","name":"cart-7f9c4d5b8","uid":"00000004-0000-4000-8000-000000000004","controller":true,` +
	`"blockOwnerDeletion":true}]}}`

// BenchmarkCompact writes, and BenchmarkDecode reads, the encoding of a bench pod's
// metadata: what the informers do for each object of a compact metadata-only fleet,
// and each of its handlers.
//
//	go test -run '^$' -bench 'Compact|Decode' -count 6 ./internal/metaenc/
func BenchmarkCompact(b *testing.B) {
	cbor := cborOf(b, []byte(benchJSON), true)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Compact(cbor); !ok {
			b.Fatal("not compacted")
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	c, ok := Compact(cborOf(b, []byte(benchJSON), true))
	if !ok {
		b.Fatal("not compacted")
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(c); err != nil {
			b.Fatal(err)
		}
	}
}
