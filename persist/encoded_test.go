package persist

import (
	"bytes"
	"context"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

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

// TestDecodeAnyKeyOrder checks that maps are read whatever the order of their keys, as
// Writer.UpsertEncoded stores them.
func TestDecodeAnyKeyOrder(t *testing.T) {
	cases := append(slices.Clone(fastDecodeCases), struct {
		name string
		m    map[string]any
	}{"pod", testPod(t, "ns", "p").Object})
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			data := reversedCBOR(t, tt.m)
			var d fastDecoder
			got, ok := d.decodeMap(string(data))
			if !ok {
				t.Fatal("the fast decoder gave up")
			}
			var want map[string]any
			if err := direct.Unmarshal(data, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.m) || !reflect.DeepEqual(want, tt.m) {
				t.Errorf("fast decoder: %#v\ndirect.Unmarshal: %#v\nencoded: %#v", got, want, tt.m)
			}
		})
	}
}

func TestWriterUpsertEncoded(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	given := testPod(t, "shop", "given")
	givenCBOR := reversedCBOR(t, given.Object)
	w.UpsertEncoded("prod", pods, given, givenCBOR)
	// Not a map: the object is encoded instead.
	encoded := testPod(t, "shop", "encoded")
	w.UpsertEncoded("prod", pods, encoded, append([]byte{formatUnstructured}, givenCBOR...))
	w.Checkpoint("prod", pods, "10")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	values := map[string][]byte{}
	err := s.view(func(tx *bolt.Tx) error {
		objects := getBucket(tx, bucketClusters, []byte("prod"), bucketResources, []byte(pods), bucketObjects)
		return objects.ForEach(func(k, v []byte) error {
			v, err := unsealBytes(objectsSum("prod", string(pods)), string(k), v)
			values[string(k)] = bytes.Clone(v)
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(values["shop/given"], givenCBOR) {
		t.Errorf("the given encoding was not stored as given")
	}
	if want, err := encodeObject(encoded); err != nil || !bytes.Equal(values["shop/encoded"], want) {
		t.Errorf("an encoding that is not a map was stored (%v)", err)
	}

	snap := mustLoad(t, s)
	got := resourceOf(snap, "prod", pods).Objects
	if len(got) != 2 || !reflect.DeepEqual(got[0], encoded) || !reflect.DeepEqual(got[1], given) {
		t.Errorf("loaded %d objects, not those stored", len(got))
	}
}

// TestWriterUpsertEncodedKeepsNoObject checks that the Writer does not hold the object
// of an encoding it was given until its commit: only the encoding is written, and a
// compact fleet keeps the encoding alone, so the object held would be garbage kept
// alive, every listed object of a cold start's lists until the next Interval.
func TestWriterUpsertEncodedKeepsNoObject(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	given := testPod(t, "shop", "given")
	givenCBOR := reversedCBOR(t, given.Object)
	want := given.DeepCopy()
	collected := make(chan struct{})
	runtime.AddCleanup(given, func(c chan struct{}) { close(c) }, collected)
	w.UpsertEncoded("prod", pods, given, givenCBOR)
	given = nil
	w.Checkpoint("prod", pods, "10")
	deadline := time.Now().Add(10 * time.Second)
	for gone := false; !gone; {
		runtime.GC()
		select {
		case <-collected:
			gone = true
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the Writer keeps the object of an encoding it was given until its commit")
			}
		}
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap := mustLoad(t, s)
	if got := resourceOf(snap, "prod", pods).Objects; len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("loaded %d objects, not the one whose encoding was given", len(got))
	}
}
