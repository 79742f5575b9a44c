package persist

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/klauspost/compress/s2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// bigPod is a pod whose encoding S2 shortens: its containers repeat keys and values.
func bigPod(t testing.TB, name, marker string) *unstructured.Unstructured {
	t.Helper()
	pod := testPod(t, "shop", name)
	var containers []any
	for i := range 6 {
		containers = append(containers, map[string]any{"name": fmt.Sprintf("c%d-%s", i, marker), "image": "registry.example.com/shop/web:1.2.3",
			"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"})
	}
	if err := unstructured.SetNestedSlice(pod.Object, containers, "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	return pod
}

// TestCodecCompress checks a Codec with Compress: encodings S2 shortens are kept
// compressed, decode to the same objects as without it, and any Codec reads both forms;
// short or incompressible ones are kept as they are.
func TestCodecCompress(t *testing.T) {
	compressing := Codec{Compress: true}
	for _, obj := range []runtime.Object{bigPod(t, "web", "a"), testMetadata(t, "ns", "p"), testPod(t, "ns", "tiny")} {
		plain, err := Codec{}.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		data, err := compressing.Encode(obj)
		if err != nil {
			t.Fatal(err)
		}
		if short := compressing.Shorten(plain); !bytes.Equal(short, data) {
			t.Errorf("Shorten of the plain encoding differs from Encode")
		}
		if len(plain) >= minCompressed && len(data) < len(plain) {
			if data[0] != formatCompressed || len(data) > len(plain)-len(plain)/8 {
				t.Errorf("%d bytes compressed to %d, format %d", len(plain), len(data), data[0])
			}
		} else if !bytes.Equal(data, plain) {
			t.Errorf("%d bytes kept as %d", len(plain), len(data))
		}
		for _, c := range []Codec{{}, compressing} {
			got, err := c.Decode(data)
			if err != nil || !reflect.DeepEqual(got, obj) {
				t.Errorf("%+v: Decode: %v, equal %v", c, err, reflect.DeepEqual(got, obj))
			}
		}
		expanded, err := Codec{}.Expand(nil, data)
		if err != nil || !bytes.Equal(expanded, plain) {
			t.Errorf("Expand: %v, equal %v", err, bytes.Equal(expanded, plain))
		}
		if same, _ := (Codec{}).Expand(nil, plain); &same[0] != &plain[0] {
			t.Error("Expand copied an encoding that is not compressed")
		}
	}
	if data, _ := compressing.Encode(bigPod(t, "web", "a")); data[0] != formatCompressed {
		t.Fatal("the big pod is not compressed")
	}
	// Shorten never compresses twice, and leaves what it is given alone.
	plain, _ := Codec{}.Encode(bigPod(t, "web", "a"))
	before := slices.Clone(plain)
	once := compressing.Shorten(plain)
	if twice := compressing.Shorten(once); !bytes.Equal(twice, once) || !bytes.Equal(plain, before) {
		t.Error("Shorten compressed a compressed encoding, or modified its input")
	}
	if got := (Codec{}).Shorten(plain); &got[0] != &plain[0] {
		t.Error("Shorten without Compress made a copy")
	}
}

// TestDecodeCompressedDamage feeds the decoders damaged compressed encodings: each is
// ErrCorrupt, from decode, the pooled Codec.Decode, Expand and the partial decoding,
// and none allocates what a damaged length claims.
func TestDecodeCompressedDamage(t *testing.T) {
	data, _ := Codec{Compress: true}.Encode(bigPod(t, "web", "a"))
	block := func(src []byte) []byte { return append([]byte{formatCompressed}, s2.Encode(nil, src)...) }
	cases := map[string][]byte{
		"no block":         {formatCompressed},
		"truncated":        data[:len(data)/2],
		"a byte changed":   append(slices.Clone(data[:len(data)-3]), data[len(data)-3]^0xff, data[len(data)-2], data[len(data)-1]),
		"compressed twice": block(data),
		"holds nothing":    block(nil),
		"holds no object":  block([]byte{0x01}),
		"claims 1 GiB":     {formatCompressed, 0x80, 0x80, 0x80, 0x80, 0x04, 0x00},
		"claims too much":  append(binary.AppendUvarint([]byte{formatCompressed}, maxExpanded+1), 0x00, 0x01),
	}
	checkDamagedCompressed(t, cases)
}

// TestDecodeCompressedSharesNoMemory decodes compressed objects one after the other
// with the same decoders, whose scratch space each expands into: what was decoded
// before must not change, nor may the encodings.
func TestDecodeCompressedSharesNoMemory(t *testing.T) {
	a, b := bigPod(t, "web-a", "aaaa"), bigPod(t, "web-b", "bbbb")
	da, _ := Codec{Compress: true}.Encode(a)
	db, _ := Codec{Compress: true}.Encode(b)
	keep := [][]byte{slices.Clone(da), slices.Clone(db)}
	var d fastDecoder
	gotA, err := d.decode(string(da))
	if err != nil {
		t.Fatal(err)
	}
	partialA, encodedA, err := d.decodePartial(string(da))
	if err != nil || encodedA == nil {
		t.Fatalf("partial decoding: %v, encoded %v", err, encodedA != nil)
	}
	pooledA, err := Codec{}.Decode(da)
	if err != nil {
		t.Fatal(err)
	}
	// A damaged encoding is expanded part of the way into the same scratch space before
	// it fails: the error path must leave what was decoded before alone too.
	damaged := db[:len(db)-16]
	for range 3 {
		if _, err := d.decode(string(damaged)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decoding a truncated compressed encoding: %v, want ErrCorrupt", err)
		}
		if _, _, err := d.decodePartial(string(damaged)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("partially decoding a truncated compressed encoding: %v, want ErrCorrupt", err)
		}
		if _, err := d.decode(string(db)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := d.decodePartial(string(db)); err != nil {
			t.Fatal(err)
		}
		if _, err := (Codec{}).Decode(db); err != nil {
			t.Fatal(err)
		}
	}
	for _, got := range []runtime.Object{gotA, pooledA} {
		if !reflect.DeepEqual(got, a) {
			t.Errorf("an object decoded before changed with the next decodes")
		}
	}
	if !sameFiling(partialA, filing(a)) || !bytes.Equal(encodedA, da) {
		t.Errorf("a partial decoding changed with the next decodes, or does not keep the compressed encoding")
	}
	if !bytes.Equal(da, keep[0]) || !bytes.Equal(db, keep[1]) {
		t.Error("decoding modified an encoding")
	}
}

// TestPartialLoadOfCompressedOutlivesTheFile loads compressed encodings partially: the
// partial objects are built from the expansion in the decoder's scratch space, and the
// encodings are copies of values read in place from the file's memory map. Once the
// Store is closed (the file unmapped) and more objects were decoded through the same
// scratch space, everything the load handed out must still read as a fresh load of the
// file gives it: a view left in the map would fault, one left in the scratch space
// would read another object.
func TestPartialLoadOfCompressedOutlivesTheFile(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	for i := range 20 {
		pod := bigPod(t, fmt.Sprintf("web-%02d", i), fmt.Sprint(i))
		enc, err := Codec{Compress: true}.Encode(pod)
		if err != nil || enc[0] != formatCompressed {
			t.Fatalf("encoding: %v", err)
		}
		w.UpsertEncoded("prod", pods, pod, enc)
	}
	w.Checkpoint("prod", pods, "10")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	var encs [][]byte
	err := s.LoadEach(LoadOptions{Partial: true}, func(_ string, cs *ClusterSnapshot) error {
		rs := cs.Resources[pods]
		objs, encs = rs.Objects, rs.Encoded
		return nil
	})
	if err != nil || len(objs) != 20 {
		t.Fatalf("partial load: %d objects, %v", len(objs), err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The pooled decoders' scratch spaces expand other objects meanwhile.
	for i := range 20 {
		other, _ := Codec{Compress: true}.Encode(bigPod(t, fmt.Sprintf("other-%02d", i), "zzzz"))
		if _, err := (Codec{}).Decode(other); err != nil {
			t.Fatal(err)
		}
	}
	whole := resourceOf(mustLoad(t, openTest(t, path, Options{ReadOnly: true})), "prod", pods).Objects
	for i, obj := range objs {
		if encs[i] == nil || encs[i][0] != formatCompressed {
			t.Fatalf("object %d: the partial load did not keep its compressed encoding", i)
		}
		checkPartial(t, obj, encs[i], whole[i])
	}
}

// checkDamagedCompressed checks that every decoder of compressed encodings takes each of
// cases, named damaged encodings, for damage (ErrCorrupt), and keeps no more scratch
// space than a decoder keeps.
func checkDamagedCompressed(t *testing.T, cases map[string][]byte) {
	t.Helper()
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			var d fastDecoder
			if _, err := d.decode(string(b)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("decode: %v, want ErrCorrupt", err)
			}
			if _, err := (Codec{}).Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Codec.Decode: %v, want ErrCorrupt", err)
			}
			if _, _, err := d.decodePartial(string(b)); !errors.Is(err, ErrCorrupt) {
				t.Errorf("decodePartial: %v, want ErrCorrupt", err)
			}
			// The block format has no checksum (the snapshot's pages have theirs): a
			// changed byte expands, to CBOR that does not decode; Expand does not read the CBOR.
			if _, err := (Codec{}).Expand(nil, b); !errors.Is(err, ErrCorrupt) && name != "a byte changed" && name != "holds no object" {
				t.Errorf("Expand: %v, want ErrCorrupt", err)
			}
			if cap(d.scratch) > 1<<16 {
				t.Errorf("the decoder kept %d bytes of scratch space", cap(d.scratch))
			}
		})
	}
}
