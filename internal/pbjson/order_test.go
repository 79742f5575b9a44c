package pbjson

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// reorder returns the message b, of schema m, with its fields in an order drawn by rng,
// at every level of its messages: the occurrences of one field (a repeated field's
// elements) keep their order among themselves, those of different fields are
// interleaved at random, and a map's entries are shuffled. Protobuf allows any order;
// Go's protobuf writes the fields by number and the entries of a map by key.
func reorder(t testing.TB, b []byte, m *message, rng *rand.Rand) []byte {
	t.Helper()
	var (
		nums  []uint64
		segs  = map[uint64][][]byte{}
		isMap = map[uint64]bool{}
	)
	r := reader{b: b}
	for !r.done() {
		start := r.pos
		num, wt := r.tag()
		f := m.field(num)
		var seg []byte
		if f != nil && wt == wireBytes && f.kind == kindMessage && !f.isMap {
			v := reorder(t, r.bytes(), f.msg, rng)
			seg = protowireBytes(num, v)
		} else {
			r.skip(wt)
			seg = b[start:r.pos]
		}
		if _, ok := segs[num]; !ok {
			nums = append(nums, num)
		}
		segs[num] = append(segs[num], seg)
		isMap[num] = f != nil && f.isMap
	}
	if r.err != nil {
		t.Fatalf("reorder: %v", r.err)
	}
	var out []byte
	for len(nums) > 0 {
		i := rng.IntN(len(nums))
		num := nums[i]
		s := segs[num]
		j := 0
		if isMap[num] {
			j = rng.IntN(len(s))
		}
		out = append(out, s[j]...)
		s = slices.Delete(s, j, j+1)
		segs[num] = s
		if len(s) == 0 {
			nums = slices.Delete(nums, i, i+1)
		}
	}
	return out
}

// protowireBytes returns the length-delimited field num of value v.
func protowireBytes(num uint64, v []byte) []byte {
	b := appendVarint(nil, num<<3|wireBytes)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// TestTranscodeFieldsOutOfOrder transcodes random objects of every kind with their
// fields in random orders (reorder), which protobuf allows: the JSON and the CBOR are
// those of the object in Go's order, the CBOR written directly.
func TestTranscodeFieldsOutOfOrder(t *testing.T) {
	var d jsondec.Decoder
	rng := rand.New(rand.NewPCG(1, 2))
	eachRandomObject(t, func(t *testing.T, i int, gvk schema.GroupVersionKind, obj runtime.Object) {
		pb, want := encode(t, obj, gvk)
		_, raw, err := Envelope(pb)
		if err != nil {
			t.Fatal(err)
		}
		shuffled := reorder(t, raw, schemaOf(gvk), rng)
		var tr Transcoder
		got, err := tr.Object(gvk, shuffled)
		if err != nil {
			t.Fatalf("#%d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("#%d, fields out of order:\n got %s\nwant %s", i, got, want)
		}
		for _, drop := range []bool{false, true} {
			tr := Transcoder{Options: Options{DropManagedFields: drop}}
			d.DropManagedFields = drop
			_, wantCBOR, err := tr.ObjectPartialCBOR(gvk, raw, &d)
			if err != nil {
				t.Fatal(err)
			}
			if !checkPartialCBOR(t, &tr, &d, gvk, shuffled) {
				t.Errorf("#%d (DropManagedFields %v): not written directly", i, drop)
			}
			_, gotCBOR, err := tr.ObjectPartialCBOR(gvk, shuffled, &d)
			if err != nil || !bytes.Equal(gotCBOR, wantCBOR) {
				t.Fatalf("#%d (DropManagedFields %v): CBOR of the fields out of order differs (%v)", i, drop, err)
			}
		}
	})
}

// TestTranscodeManyFieldsOutOfOrder: a message of more occurrences than are insertion
// sorted, out of order (a config map's hundred entries of data, then its metadata), and
// maps whose entries come unsorted, with a key given twice: the last of a key's values
// is written.
func TestTranscodeManyFieldsOutOfOrder(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", Labels: map[string]string{"b": "1", "a": "2", "c": "3"}},
		Data: map[string]string{}, BinaryData: map[string][]byte{"x": {1}, "y": {2}}}
	for i := range 100 {
		cm.Data[fmt.Sprintf("k%03d", i)] = fmt.Sprint(i)
	}
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	pb, want := encode(t, cm, gvk)
	_, raw, err := Envelope(pb)
	if err != nil {
		t.Fatal(err)
	}
	// The fields backwards: the map's entries in reverse, and the metadata (1) last.
	var fields [][]byte
	r := reader{b: raw}
	for !r.done() {
		start := r.pos
		_, wt := r.tag()
		r.skip(wt)
		fields = append(fields, raw[start:r.pos])
	}
	slices.Reverse(fields)
	backwards := bytes.Join(fields, nil)
	if len(fields) <= 64 {
		t.Fatalf("%d occurrences, not enough to be merge sorted", len(fields))
	}
	// A key given twice, the last value winning: data k000 again, with another value,
	// after the first.
	dup := protowireBytes(2, append(protowireBytes(1, []byte("k000")), protowireBytes(2, []byte("again"))...))
	withDup := append(slices.Clone(backwards), dup...)
	cm.Data["k000"] = "again"
	_, wantDup := encode(t, cm, gvk)

	var d jsondec.Decoder
	for _, tc := range []struct {
		name string
		raw  []byte
		want []byte
	}{
		{"backwards", backwards, want},
		{"key twice", withDup, wantDup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tr Transcoder
			got, err := tr.Object(gvk, tc.raw)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
			if !checkPartialCBOR(t, &tr, &d, gvk, tc.raw) {
				t.Error("not written directly")
			}
		})
	}
}

// TestTranscodeRepeatedOutOfOrder: the elements of a repeated field interleaved with
// other fields keep their order, in JSON and in CBOR.
func TestTranscodeRepeatedOutOfOrder(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Finalizers: []string{"a", "b", "c"}}}
	gvk := appsv1.SchemeGroupVersion.WithKind("Deployment")
	pb, want := encode(t, d, gvk)
	_, raw, err := Envelope(pb)
	if err != nil {
		t.Fatal(err)
	}
	// The metadata's fields: name (1), then the finalizers (14) one by one, with the
	// name again (the last wins, the same name) between them.
	meta := slices.Concat(protowireBytes(14, []byte("a")), protowireBytes(1, []byte("d")), protowireBytes(14, []byte("b")),
		protowireBytes(1, []byte("d")), protowireBytes(14, []byte("c")))
	var rest []byte
	r := reader{b: raw}
	for !r.done() {
		start := r.pos
		num, wt := r.tag()
		r.skip(wt)
		if num != 1 {
			rest = append(rest, raw[start:r.pos]...)
		}
	}
	interleaved := append(rest, protowireBytes(1, meta)...)
	var tr Transcoder
	got, err := tr.Object(gvk, interleaved)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
	var dec jsondec.Decoder
	if !checkPartialCBOR(t, &tr, &dec, gvk, interleaved) {
		t.Error("not written directly")
	}
}

// TestObjectPartialCBORUnknownField: a field this package does not know, in the object
// or in a message of it, is ErrUnsupported from ObjectPartialCBOR too, for the caller to
// ask for JSON.
func TestObjectPartialCBORUnknownField(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	pb, _ := encode(t, pod, gvk)
	_, raw, err := Envelope(pb)
	if err != nil {
		t.Fatal(err)
	}
	unknown := protowireBytes(99, []byte("x"))
	// The metadata (1) with the unknown field after its own.
	var inMeta []byte
	r := reader{b: raw}
	for !r.done() {
		start := r.pos
		num, wt := r.tag()
		if num == 1 {
			inMeta = append(inMeta, protowireBytes(1, slices.Concat(r.bytes(), unknown))...)
			continue
		}
		r.skip(wt)
		inMeta = append(inMeta, raw[start:r.pos]...)
	}
	for name, data := range map[string][]byte{
		"in the object":   slices.Concat(unknown, raw),
		"in the metadata": inMeta,
	} {
		var tr Transcoder
		var d jsondec.Decoder
		if _, _, err := tr.ObjectPartialCBOR(gvk, data, &d); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want ErrUnsupported", name, err)
		}
		if _, err := tr.Object(gvk, data); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: Object: got %v, want ErrUnsupported", name, err)
		}
	}
}
