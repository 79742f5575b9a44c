package persist

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"runtime"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/metaenc"
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

// TestWriterUpsertEncodedMetadata: the metadata of an object as the informers decode it
// from a kube-apiserver's PartialObjectMetadata (package wire: the byte 3, then its CBOR
// as jsondec writes it, or package metaenc's encoding, format 4) is stored as it is, beside the partial object that files it,
// and loads, as Codec decodes it, into a *metav1.PartialObjectMetadata without TypeMeta.
func TestWriterUpsertEncodedMetadata(t *testing.T) {
	const js = `{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","namespace":"shop","uid":"u-1","resourceVersion":"9",` +
		`"generation":3,"creationTimestamp":"2026-11-27T10:00:00Z","labels":{"app":"shop"},"annotations":{"a":"{\"x\":1}"},` +
		`"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"rs","uid":"u-rs","controller":true}],"finalizers":["f"]}}`
	d := &jsondec.Decoder{CBORPrefix: []byte{formatMetadataMap}}
	m, encoded, err := d.ObjectPartialCBOR([]byte(js))
	if err != nil || encoded == nil {
		t.Fatal(err)
	}
	// Package wire's short encoding of the same object (format 4).
	compact, ok := metaenc.Compact(encoded[1:])
	if !ok || compact[0] != formatMetadataCompact {
		t.Fatalf("not compacted: % x", compact)
	}
	want := new(metav1.PartialObjectMetadata)
	if err := json.Unmarshal([]byte(js), want); err != nil {
		t.Fatal(err)
	}
	want.TypeMeta = metav1.TypeMeta{}
	for _, encoded := range [][]byte{encoded, compact} {
		got, err := Codec{}.Decode(encoded)
		if err != nil || !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("Codec.Decode(format %d): %#v, %v; want %#v", encoded[0], got, err, want)
		}

		s := openTest(t, testPath(t), Options{})
		w := s.NewWriter(WriterOptions{})
		w.UpsertEncoded("prod", pods, &unstructured.Unstructured{Object: m}, encoded)
		w.Checkpoint("prod", pods, "10")
		if err := w.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		loaded := resourceOf(mustLoad(t, s), "prod", pods).Objects
		if len(loaded) != 1 || !equality.Semantic.DeepEqual(loaded[0], want) {
			t.Errorf("format %d: loaded %#v, want %#v", encoded[0], loaded, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
