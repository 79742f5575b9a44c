package persist

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// reversedCBOR encodes m as the encoder does, but with the keys of every map in
// descending order: an encoding that direct.Marshal would not write, which the decoder
// reads all the same.
func reversedCBOR(t testing.TB, m map[string]any) []byte {
	t.Helper()
	var e cborEncoder
	var value func(v any)
	value = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			e.head(cborMap, uint64(len(x)))
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range x {
					if !yield(k) {
						return
					}
				}
			})
			slices.Reverse(keys)
			for _, k := range keys {
				e.str(k)
				value(x[k])
			}
		case []any:
			e.head(cborArray, uint64(len(x)))
			for _, item := range x {
				value(item)
			}
		default:
			if !e.appendValue(x) {
				t.Fatalf("cannot encode %T", v)
			}
		}
	}
	value(m)
	return e.buf
}

func TestWellFormedMap(t *testing.T) {
	cases := append(slices.Clone(fastDecodeCases), struct {
		name string
		m    map[string]any
	}{"pod", testPod(t, "ns", "p").Object})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			data, err := direct.Marshal(tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if !wellFormedMap(data) {
				t.Error("rejected what direct.Marshal wrote")
			}
			if !wellFormedMap(reversedCBOR(t, tt.m)) {
				t.Error("rejected keys in descending order")
			}
		})
	}

	bad := map[string][]byte{
		"empty":                  nil,
		"not a map":              {0x80},
		"null":                   {0xf6},
		"trailing bytes":         {0xa0, 0x00},
		"truncated":              {0xa1, 0x41, 'a'},
		"truncated string":       {0xa1, 0x41, 'a', 0x43, 'b'},
		"duplicate key":          {0xa2, 0x41, 'a', 0x01, 0x41, 'a', 0x02},
		"duplicate text key":     {0xa2, 0x41, 'a', 0x01, 0x61, 'a', 0x02},
		"integer key":            {0xa1, 0x01, 0x01},
		"indefinite map":         {0xbf, 0xff},
		"uint64 beyond int64":    {0xa1, 0x41, 'a', 0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0},
		"negint beyond int64":    {0xa1, 0x41, 'a', 0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0},
		"invalid UTF-8 text":     {0xa1, 0x41, 'a', 0x61, 0xff},
		"invalid UTF-8 text key": {0xa1, 0x61, 0xff, 0x01},
		"NaN":                    {0xa1, 0x41, 'a', 0xf9, 0x7e, 0x00},
		"infinity":               {0xa1, 0x41, 'a', 0xf9, 0x7c, 0x00},
		"undefined":              {0xa1, 0x41, 'a', 0xf7},
		"tag":                    {0xa1, 0x41, 'a', 0xc1, 0x01},
		"long array header":      {0xa1, 0x41, 'a', 0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"deep":                   append(append([]byte{0xa1, 0x41, 'a'}, strings.Repeat("\x81", maxFastDepth+1)...), 0x01),
	}
	// A repeated key in a map too large to compare its keys one by one.
	large := map[string]any{}
	for i := range 40 {
		large[strings.Repeat("k", i+1)] = int64(i)
	}
	data := reversedCBOR(t, large)
	if data[0] != 0xb8 || data[1] != 40 {
		t.Fatalf("head % x", data[:2])
	}
	data[1] = 41 // one entry more, which repeats a key
	var e cborEncoder
	e.str("kkkkk")
	e.appendValue(int64(7))
	data = append(data, e.buf...)
	bad["duplicate key in a large map"] = data
	withoutDuplicate := slices.Clone(data)
	withoutDuplicate[len(data)-len(e.buf)+1] = 'x'
	if !wellFormedMap(withoutDuplicate) {
		t.Errorf("rejected a large map without a repeated key")
	}
	for name, data := range bad {
		t.Run(name, func(t *testing.T) {
			if wellFormedMap(data) {
				t.Errorf("accepted % x", data)
			}
			var d fastDecoder
			if _, ok := d.decodeMap(string(data)); ok {
				t.Errorf("the decoder reads % x: the test is wrong", data)
			}
		})
	}
}

// FuzzWellFormedMap checks that wellFormedMap accepts exactly what the decoder reads.
func FuzzWellFormedMap(f *testing.F) {
	for _, tt := range fastDecodeCases {
		f.Add(reversedCBOR(f, tt.m))
	}
	pod := reversedCBOR(f, testPod(f, "ns", "p").Object)
	f.Add(pod)
	f.Add(pod[:len(pod)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		var d fastDecoder
		_, ok := d.decodeMap(string(data))
		if got := wellFormedMap(data); got != ok {
			t.Fatalf("wellFormedMap = %v, the decoder reads it: %v", got, ok)
		}
	})
}

func TestWriterUpsertEncoded(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	given := testPod(t, "shop", "given")
	givenCBOR := reversedCBOR(t, given.Object)
	w.UpsertEncoded("prod", pods, given, givenCBOR)
	// Not well-formed: the object is encoded instead.
	encoded := testPod(t, "shop", "encoded")
	w.UpsertEncoded("prod", pods, encoded, []byte{0xa1, 0x41, 'a'})
	w.Checkpoint("prod", pods, "10")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	values := map[string][]byte{}
	err := s.view(func(tx *bolt.Tx) error {
		objects := getBucket(tx, bucketClusters, []byte("prod"), bucketResources, []byte(pods), bucketObjects)
		return objects.ForEach(func(k, v []byte) error {
			values[string(k)] = bytes.Clone(v)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := append([]byte{formatUnstructured}, givenCBOR...); !bytes.Equal(values["shop/given"], want) {
		t.Errorf("the given encoding was not stored as given")
	}
	if want, err := encodeObject(encoded); err != nil || !bytes.Equal(values["shop/encoded"], want) {
		t.Errorf("a malformed encoding was stored (%v)", err)
	}

	snap := mustLoad(t, s)
	got := resourceOf(snap, "prod", pods).Objects
	if len(got) != 2 || !reflect.DeepEqual(got[0], encoded) || !reflect.DeepEqual(got[1], given) {
		t.Errorf("loaded %d objects, not those stored", len(got))
	}
}
