package wire

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/randfill"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/metaenc/metaenctest"
	"github.com/fleetwatch/fleetwatch/internal/pbjson"
)

// checkDirect decodes raw, the protobuf of a PartialObjectMetadata, as the metadata
// clients do, by decodeCompactMetadata, and, if that writes it, by the CBOR that pbjson
// writes (decodePartialCBOR), and requires the same object of both: the same encoding,
// byte for byte, in the compact format, the same partial map, kind and filing fields.
// The object of decodeCompactMetadata must share no memory with its input, of which the
// writer's strings are views: the input is overwritten before the two are compared. It
// reports whether decodeCompactMetadata wrote it.
func checkDirect(t testing.TB, raw []byte, drop bool) bool {
	t.Helper()
	input := slices.Clone(raw)
	got, gotKind, ok := decodeCompactMetadata(new(jsondec.Decoder), input, drop)
	for i := range input {
		input[i] = 'x'
	}
	if !ok {
		if got != nil || gotKind != nil {
			t.Fatalf("declined, and returned %T %v", got, gotKind)
		}
		return false
	}
	s := &unstructuredProtobuf{
		json:    &unstructuredJSON{pool: newDecoderPool(1), dropManagedFields: drop, partial: true, metadata: true},
		refused: new(refusals),
	}
	tr := &pbjson.Transcoder{Options: pbjson.Options{DropManagedFields: drop}}
	want, wantKind, err := s.decodePartialCBOR(tr, new(jsondec.Decoder), MetadataKind, raw)
	if err != nil || want == nil {
		t.Fatalf("written directly, but the CBOR path gives %v, %v for % x", want, err, raw)
	}
	g, w := got.(*EncodedObject), want.(*EncodedObject)
	if !bytes.Equal(g.Encoded, w.Encoded) || len(w.Encoded) == 0 || w.Encoded[0] != CompactMetadataFormat {
		t.Fatalf("encoded\n% x\nwant\n% x\nfor % x", g.Encoded, w.Encoded, raw)
	}
	if !reflect.DeepEqual(g.Object, w.Object) {
		t.Fatalf("partial map\n%#v\nwant\n%#v", g.Object, w.Object)
	}
	if *gotKind != *wantKind || !g.Partial || !w.Partial {
		t.Fatalf("kind %v partial %v, want %v %v", *gotKind, g.Partial, *wantKind, w.Partial)
	}
	gl, _ := g.RawLabels()
	wl, _ := w.RawLabels()
	if g.GetNamespace() != w.GetNamespace() || g.GetName() != w.GetName() || g.Key() != w.Key() ||
		g.GetResourceVersion() != w.GetResourceVersion() || !reflect.DeepEqual(gl, wl) {
		t.Fatalf("filed %q %q %q %v, want %q %q %q %v", g.Key(), g.GetName(), g.GetResourceVersion(), gl,
			w.Key(), w.GetName(), w.GetResourceVersion(), wl)
	}
	return true
}

// rawOf returns the protobuf message of obj, without its envelope.
func rawOf(t testing.TB, obj *metav1.PartialObjectMetadata) []byte {
	t.Helper()
	obj = obj.DeepCopy()
	obj.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
	_, raw, err := pbjson.Envelope(protobufOf(t, obj))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// metadataFiller fills metadata objects at random, with some of the strings of
// package metaenc's table among their labels and finalizers.
func metadataFiller(seed int64) *randfill.Filler {
	return metaenctest.Filler(seed, []string{"app.kubernetes.io/name", "app", "true", "kubernetes.io/pvc-protection", "ReplicaSet", "apps/v1", ""})
}

// TestCompactMetadataDirect: the metadata clients' encoding written straight from the
// protobuf is the one written from pbjson's CBOR, for make bench's pods and random
// objects, managedFields dropped or kept; every object with a name is written directly
// unless its managedFields are kept.
func TestCompactMetadataDirect(t *testing.T) {
	direct := 0
	for i := range 3000 {
		var obj *metav1.PartialObjectMetadata
		if i < 20 {
			obj = benchMetadata(i)
		} else {
			obj = new(metav1.PartialObjectMetadata)
			metadataFiller(int64(i)).Fill(obj)
		}
		raw := rawOf(t, obj)
		for _, drop := range []bool{false, true} {
			ok := checkDirect(t, raw, drop)
			if !ok && obj.Name != "" && (drop || len(obj.ManagedFields) == 0) {
				t.Fatalf("#%d (drop %v) not written directly: %+v", i, drop, obj.ObjectMeta)
			}
			if ok {
				direct++
			}
		}
	}
	t.Logf("%d of 6000 written directly", direct)
}

// pbField is a field of a protobuf message, as the tests below build them.
type pbField struct {
	num, wt int
	v       uint64
	b       []byte
}

func str(num int, s string) pbField         { return pbField{num: num, wt: 2, b: []byte(s)} }
func msg(num int, fs ...pbField) pbField    { return pbField{num: num, wt: 2, b: marshalFields(fs)} }
func varintField(num int, v uint64) pbField { return pbField{num: num, wt: 0, v: v} }

func marshalFields(fs []pbField) []byte {
	var b []byte
	for _, f := range fs {
		b = appendUvarint(b, uint64(f.num)<<3|uint64(f.wt))
		if f.wt == 0 {
			b = appendUvarint(b, f.v)
			continue
		}
		b = appendUvarint(b, uint64(len(f.b)))
		b = append(b, f.b...)
	}
	return b
}

// TestCompactMetadataDirectCorners: protobuf that Go's protobuf does not write but a
// server could send, or that is not well-formed: what is written directly is the
// CBOR path's encoding, and what is declined is left to that path.
func TestCompactMetadataDirectCorners(t *testing.T) {
	label := func(k, v string) pbField { return msg(11, str(1, k), str(2, v)) }
	owner := func(fs ...pbField) pbField { return msg(13, fs...) }
	timestamp := func(num int, fs ...pbField) pbField { return msg(num, fs...) }
	base := []pbField{
		str(1, "web-1"), str(3, "shop"), str(5, "0a1b2c3d-0000-4000-8000-000000000001"), str(6, "4711"),
		varintField(7, 3), timestamp(8, varintField(1, 1782900000)),
		label("app", "web"), label("tier", "front"),
		msg(12, str(1, "note"), str(2, "x")),
		owner(str(5, "apps/v1"), str(1, "ReplicaSet"), str(3, "web"), str(4, "0a1b2c3d-0000-4000-8000-000000000002"), varintField(6, 1)),
		str(14, "kubernetes.io/pvc-protection"),
		msg(17, str(1, "kubectl")),
	}
	with := func(fs ...pbField) []pbField { return append(slices.Clone(base), fs...) }
	without := func(num int) []pbField {
		return slices.DeleteFunc(slices.Clone(base), func(f pbField) bool { return f.num == num })
	}
	reversed := slices.Clone(base)
	slices.Reverse(reversed)
	root := func(fs []pbField) []byte { return marshalFields([]pbField{msg(1, fs...)}) }
	meta := root(base)
	for _, tc := range []struct {
		name   string
		raw    []byte
		direct bool
	}{
		{"as Go writes it", meta, true},
		{"fields in reverse", root(reversed), true},
		{"a label twice, the last taken", root(with(label("app", "api"))), true},
		{"a label twice in a row", root(append(without(11), label("app", "x"), label("app", "y"))), true},
		{"labels out of order", root(with(label("aaa", "1"))), true},
		{"an entry without a value", root(with(msg(11, str(1, "empty")))), true},
		{"an entry without a key", root(with(msg(11, str(2, "v")))), true},
		{"an entry with a third field", root(with(msg(11, str(1, "k"), str(2, "v"), str(3, "x")))), false},
		{"the name twice, the last taken", root(with(str(1, "web-2"))), true},
		{"the generation twice", root(with(varintField(7, 9))), true},
		{"no generation", root(without(7)), true},
		{"a grace period of zero, written", root(with(varintField(10, 0))), true},
		{"a deletion timestamp", root(with(timestamp(9, varintField(1, 1782900100), varintField(2, 5)))), true},
		{"a creation timestamp with nanoseconds", root(append(without(8), timestamp(8, varintField(1, 1782900000), varintField(2, 999)))), true},
		{"a creation timestamp of no bytes", root(append(without(8), timestamp(8))), true},
		{"a creation timestamp twice", root(with(timestamp(8, varintField(1, 5)))), false},
		{"a creation timestamp in the year 10000", root(append(without(8), timestamp(8, varintField(1, 253402300800)))), false},
		{"a creation timestamp in the year 0", root(append(without(8), timestamp(8, varintField(1, 1<<64-62167219200)))), true},
		{"a creation timestamp before the year 0", root(append(without(8), timestamp(8, varintField(1, 1<<64-62167219201)))), false},
		{"a timestamp with a third field", root(append(without(8), timestamp(8, varintField(1, 5), varintField(3, 1)))), false},
		{"a uid in capitals, a text", root(append(without(5), str(5, "0A1B2C3D-0000-4000-8000-000000000001"))), true},
		{"a resourceVersion with a leading zero, a text", root(append(without(6), str(6, "0471"))), true},
		{"an owner with its name only", root(with(owner(str(3, "lone")))), true},
		{"an owner's controller of 2", root(with(owner(str(3, "x"), varintField(6, 2), varintField(7, 0)))), true},
		{"an owner with a field it does not have", root(with(owner(str(3, "x"), str(2, "y")))), false},
		{"an empty finalizer", root(with(str(14, ""))), true},
		{"no managedFields", root(without(17)), true},
		{"a field ObjectMeta does not have", root(with(str(16, "x"))), false},
		{"a deprecated field, clusterName", root(with(str(15, "x"))), false},
		{"the name as a varint", root(append(without(1), varintField(1, 1))), false},
		{"the generation as bytes", root(append(without(7), str(7, "x"))), false},
		{"no name", root(without(1)), false},
		{"an empty name", root(append(without(1), str(1, ""))), false},
		{"a label's key not UTF-8", root(with(label("\xff", "v"))), false},
		{"an annotation's value not UTF-8", root(with(msg(12, str(1, "k"), str(2, "a\xc3")))), false},
		{"the namespace not UTF-8", root(append(without(3), str(3, "sh\xffop"))), false},
		{"a finalizer not UTF-8", root(with(str(14, "\xfe"))), false},
		{"an owner's kind not UTF-8", root(with(owner(str(1, "\xfe"), str(3, "x")))), false},
		{"metadata twice", append(slices.Clone(meta), meta...), false},
		{"a second field of the object", append(slices.Clone(meta), marshalFields([]pbField{str(2, "x")})...), false},
		{"no metadata", nil, false},
		{"truncated", meta[:len(meta)-1], false},
		{"a length past the end", append(slices.Clone(meta), 0x0a, 0x7f), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkDirect(t, tc.raw, true); got != tc.direct {
				t.Fatalf("written directly: %v, want %v", got, tc.direct)
			}
		})
	}
	// managedFields kept: declined, for the CBOR, which Compact declines.
	if checkDirect(t, meta, false) {
		t.Error("written directly with managedFields kept")
	}
}

// FuzzCompactMetadataDirect: whatever protobuf decodeCompactMetadata writes directly,
// the CBOR path writes the same encoding and partial map of.
func FuzzCompactMetadataDirect(f *testing.F) {
	for i := range 3 {
		f.Add(rawOf(f, benchMetadata(i)), true)
	}
	for i := range 5 {
		obj := new(metav1.PartialObjectMetadata)
		metadataFiller(int64(i)).Fill(obj)
		f.Add(rawOf(f, obj), i%2 == 0)
	}
	f.Fuzz(func(t *testing.T, raw []byte, drop bool) {
		checkDirect(t, raw, drop)
	})
}
