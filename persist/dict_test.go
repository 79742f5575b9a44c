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
	"unsafe"

	"github.com/klauspost/compress/s2"
	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// freshDictionaries starts t with the registry of a new process, and leaves one to the
// tests after it.
func freshDictionaries(t testing.TB) {
	resetDictionaries()
	t.Cleanup(resetDictionaries)
}

// dictCodec returns a Codec that compresses pods with a dictionary, which it has the
// Codec make from the encodings of pods like dictPod's.
func dictCodec(t testing.TB) Codec {
	t.Helper()
	c := Codec{Compress: true, Dictionary: true}.forResource(pods.GroupVersionResource())
	for i := 0; c.dict.dict.Load() == nil; i++ {
		if i > 1000 {
			t.Fatal("no dictionary made")
		}
		if _, err := c.Encode(dictPod(t, i)); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// dictPod is the i-th of pods that share most of their bytes, as the pods of a
// Deployment do.
func dictPod(t testing.TB, i int) *unstructured.Unstructured {
	return bigPod(t, fmt.Sprintf("web-%04d", i), fmt.Sprint(i%7))
}

// TestCodecDictionary: a Codec with Dictionary compresses a resource's first encodings
// without a dictionary until it has made one of them, then with it, shorter; every
// Codec decodes and expands both forms, and Shorten leaves a compressed encoding alone.
func TestCodecDictionary(t *testing.T) {
	freshDictionaries(t)
	if c := (Codec{Compress: true}).forResource(pods.GroupVersionResource()); c.dict != nil {
		t.Fatal("a Codec without Dictionary got a dictionary")
	}
	// Without Dictionary, the fleet keeps the Codec it was given (a wrapper that embeds
	// one, too).
	if c := (Codec{Compress: true}).ForResource(pods.GroupVersionResource()); c != nil {
		t.Fatalf("ForResource without Dictionary: %#v, want nil", c)
	}
	c := Codec{Compress: true, Dictionary: true}.forResource(pods.GroupVersionResource())
	var formats []byte
	for i := 0; len(formats) == 0 || formats[len(formats)-1] != formatDict; i++ {
		data, err := c.Encode(dictPod(t, i))
		if err != nil {
			t.Fatal(err)
		}
		formats = append(formats, data[0])
	}
	if formats[0] != formatCompressed || len(formats) < 2 {
		t.Fatalf("formats %v: the first encodings must be compressed without a dictionary", formats)
	}
	// A Codec of the same resource made later shares the dictionary; one of another
	// resource does not.
	if other := (Codec{Compress: true, Dictionary: true}).forResource(pods.GroupVersionResource()); other.dict != c.dict {
		t.Error("two Codecs of one resource have two dictionaries")
	}
	if other := (Codec{Compress: true, Dictionary: true}).forResource(deployments.GroupVersionResource()); other.dict.dict.Load() != nil {
		t.Error("another resource has the pods' dictionary")
	}
	for i := 1000; i < 1010; i++ {
		pod := dictPod(t, i)
		plain, _ := Codec{}.Encode(pod)
		without, _ := Codec{Compress: true}.Encode(pod)
		data, err := c.Encode(pod)
		if err != nil || data[0] != formatDict {
			t.Fatalf("encoding: %v, format %d", err, data[0])
		}
		if len(data) >= len(without) {
			t.Errorf("%d bytes with the dictionary, %d without", len(data), len(without))
		}
		if short := c.Shorten(plain); !bytes.Equal(short, data) {
			t.Error("Shorten of the plain encoding differs from Encode")
		}
		if again := c.Shorten(data); &again[0] != &data[0] {
			t.Error("Shorten compressed a compressed encoding again")
		}
		for _, d := range []Codec{{}, {Compress: true}, c} {
			got, err := d.Decode(data)
			if err != nil || !reflect.DeepEqual(got, pod) {
				t.Errorf("Decode: %v, equal %v", err, reflect.DeepEqual(got, pod))
			}
		}
		if expanded, err := (Codec{}).Expand(nil, data); err != nil || !bytes.Equal(expanded, plain) {
			t.Errorf("Expand: %v, equal %v", err, bytes.Equal(expanded, plain))
		}
		var d fastDecoder
		obj, encoded, err := d.decodePartial(string(data))
		if err != nil || !bytes.Equal(encoded, data) || !sameFiling(obj, filing(pod)) {
			t.Errorf("partial decoding: %v, keeps the encoding %v", err, bytes.Equal(encoded, data))
		}
	}
	// Small encodings stay as they are.
	tiny := object("ns", "tiny", "1")
	plain, _ := Codec{}.Encode(tiny)
	if data, _ := c.Encode(tiny); len(plain) >= minCompressed || !bytes.Equal(data, plain) {
		t.Errorf("a small encoding (%d bytes) was compressed", len(plain))
	}
}

// TestDecodeDictDamage feeds the decoders damaged encodings in formatDict: each is
// ErrCorrupt from every decoder, and none allocates what a damaged length claims.
func TestDecodeDictDamage(t *testing.T) {
	freshDictionaries(t)
	c := dictCodec(t)
	data, _ := c.Encode(dictPod(t, 5000))
	if data[0] != formatDict {
		t.Fatal("not compressed with the dictionary")
	}
	d := c.dict.dict.Load()
	head := func(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte{formatDict}, id) }
	block := func(src []byte) []byte { return append(head(d.id), d.s2.Encode(nil, src)...) }
	unknown := slices.Clone(data)
	unknown[3] ^= 0xff
	cases := map[string][]byte{
		"no id":              {formatDict, 1, 2},
		"no block":           head(d.id),
		"an unknown id":      unknown,
		"truncated":          data[:len(data)/2],
		"a byte changed":     append(slices.Clone(data[:len(data)-3]), data[len(data)-3]^0xff, data[len(data)-2], data[len(data)-1]),
		"compressed twice":   block(data),
		"compressed as 5":    block(compress(mustEncode(t, dictPod(t, 1)))),
		"holds nothing":      block(nil),
		"holds no object":    block([]byte{0x01}),
		"claims 1 GiB":       append(head(d.id), 0x80, 0x80, 0x80, 0x80, 0x04, 0x00),
		"claims too much":    append(binary.AppendUvarint(head(d.id), maxExpanded+1), 0x00, 0x01),
		"without dictionary": append([]byte{formatDict}, s2.Encode(nil, mustEncode(t, dictPod(t, 1)))...),
	}
	checkDamagedCompressed(t, cases)
}

func mustEncode(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	data, err := encodeObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// writeDictPods writes n pods compressed with c's dictionary (those that it compresses
// so) to a new snapshot at path, and closes it. It returns the pods.
func writeDictPods(t *testing.T, path string, c Codec, n int) []runtime.Object {
	t.Helper()
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	var objs []runtime.Object
	dict := 0
	for i := range n {
		pod := dictPod(t, 2000+i)
		enc, err := c.Encode(pod)
		if err != nil {
			t.Fatal(err)
		}
		if enc[0] == formatDict {
			dict++
		}
		w.UpsertEncoded("prod", pods, pod, enc)
		objs = append(objs, pod)
	}
	if dict != n {
		t.Fatalf("%d of %d pods compressed with the dictionary", dict, n)
	}
	w.Checkpoint("prod", pods, "10")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestSnapshotDictionaryWarm: a snapshot of values compressed with a dictionary stores
// the dictionary, and loads, whole and partially, in a process that has never seen it;
// that process then compresses the resource with the same dictionary.
func TestSnapshotDictionaryWarm(t *testing.T) {
	freshDictionaries(t)
	c := dictCodec(t)
	id := c.dict.dict.Load().id
	path := testPath(t)
	want := writeDictPods(t, path, c, 30)

	resetDictionaries() // a new process
	s := openTest(t, path, Options{})
	got := resourceOf(mustLoad(t, s), "prod", pods)
	if got == nil || !reflect.DeepEqual(got.Objects, want) {
		t.Fatal("the warm load differs from what was written")
	}
	if lookupDictionary(id) == nil {
		t.Fatal("the load did not register the snapshot's dictionary")
	}
	again := Codec{Compress: true, Dictionary: true}.forResource(pods.GroupVersionResource())
	if data, _ := again.Encode(dictPod(t, 9000)); data[0] != formatDict || binary.BigEndian.Uint64(data[1:]) != id {
		t.Error("the warm process does not compress pods with the snapshot's dictionary")
	}
	resetDictionaries()
	err := s.LoadEach(LoadOptions{Partial: true}, func(_ string, cs *ClusterSnapshot) error {
		for i, e := range cs.Resources[pods].Encoded {
			if e == nil || e[0] != formatDict {
				t.Fatalf("object %d: the partial load did not keep the encoding", i)
			}
			checkPartial(t, cs.Resources[pods].Objects[i], e, want[i])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotDictionaryBad: a snapshot whose dictionary is missing or damaged is
// ErrCorrupt, moved aside, even where the process knows the dictionary.
func TestSnapshotDictionaryBad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b *bolt.Bucket) error
	}{
		{"missing", func(b *bolt.Bucket) error {
			k, _ := b.Cursor().First()
			return b.Delete(k)
		}},
		{"damaged", func(b *bolt.Bucket) error {
			k, v := b.Cursor().First()
			v = slices.Clone(v)
			v[len(v)/2] ^= 0x01
			return b.Put(k, v)
		}},
		{"not an S2 dictionary", func(b *bolt.Bucket) error {
			v := []byte{0}
			return b.Put(dictKey(dictIDOf(v)), v)
		}},
		{"another id", func(b *bolt.Bucket) error {
			k, v := b.Cursor().First()
			v = slices.Clone(v)
			if err := b.Delete(k); err != nil {
				return err
			}
			return b.Put(dictKey(binary.BigEndian.Uint64(k)+1), v)
		}},
	} {
		for _, known := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/known=%v", tc.name, known), func(t *testing.T) {
				freshDictionaries(t)
				path := testPath(t)
				writeDictPods(t, path, dictCodec(t), 5)
				db, err := bolt.Open(path, 0o600, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := db.Update(func(tx *bolt.Tx) error { return tc.damage(tx.Bucket(bucketDictionaries)) }); err != nil {
					t.Fatal(err)
				}
				db.Close()
				if !known {
					resetDictionaries()
				}
				s := openTest(t, path, Options{})
				loadEachCorrupt(t, s, LoadOptions{Partial: known}, func(string, *ClusterSnapshot) error { return nil })
			})
		}
	}
}

// TestSnapshotDictionaryOutlivesTheFile: the dictionaries that a load reads are copies,
// not views of the file's memory map: none lies in the map while the Store is open, and
// all still read and decode once it is closed (a view would fault).
func TestSnapshotDictionaryOutlivesTheFile(t *testing.T) {
	freshDictionaries(t)
	c := dictCodec(t)
	path := testPath(t)
	writeDictPods(t, path, c, 5)
	resetDictionaries()
	s := openTest(t, path, Options{})
	mustLoad(t, s)
	m := dictionaries.byID.Load()
	if m == nil || len(*m) != 1 {
		t.Fatal("the load registered no dictionary")
	}
	var d *dictionary
	for _, d = range *m {
	}
	var mapStart, mapEnd uintptr
	err := s.view(func(tx *bolt.Tx) error {
		mapStart = uintptr(tx.DB().Info().Data)
		mapEnd = mapStart + uintptr(tx.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p := uintptr(unsafe.Pointer(unsafe.SliceData(d.value))); p >= mapStart && p < mapEnd {
		t.Fatal("the dictionary is a view of the file's memory map")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if dictIDOf(d.value) != d.id {
		t.Error("the dictionary changed after the file was closed")
	}
	pod := dictPod(t, 7000)
	data := d.s2.Encode(nil, mustEncode(t, pod))
	enc := append(binary.BigEndian.AppendUint64([]byte{formatDict}, d.id), data...)
	if got, err := (Codec{}).Decode(enc); err != nil || !reflect.DeepEqual(got, pod) {
		t.Errorf("decoding with the loaded dictionary after Close: %v", err)
	}
}

// TestHandoverDictionary: a cluster whose values use a dictionary is exported with it,
// and imports into a process and a file that never had it; a state without the
// dictionary is refused as corrupt.
func TestHandoverDictionary(t *testing.T) {
	freshDictionaries(t)
	c := dictCodec(t)
	from := openTest(t, testPath(t), Options{})
	w := from.NewWriter(WriterOptions{})
	var want []runtime.Object
	for i := range 10 {
		pod := dictPod(t, 3000+i)
		enc, _ := c.Encode(pod)
		w.UpsertEncoded("prod", pods, pod, enc)
		want = append(want, pod)
	}
	w.Checkpoint("prod", pods, "10")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := from.ExportCluster("prod", &state, ExportOptions{}); err != nil {
		t.Fatal(err)
	}

	resetDictionaries() // the receiving process
	toPath := testPath(t)
	to := openTest(t, toPath, Options{})
	cs, err := to.ImportCluster("prod", bytes.NewReader(state.Bytes()), ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cs.Resources[pods].Objects, want) {
		t.Fatal("the imported objects differ")
	}
	if err := to.Close(); err != nil {
		t.Fatal(err)
	}
	resetDictionaries() // the receiver restarts: its file has the dictionary
	if got := resourceOf(mustLoad(t, openTest(t, toPath, Options{})), "prod", pods); got == nil || !reflect.DeepEqual(got.Objects, want) {
		t.Fatal("the file that imported the state does not load it")
	}

	// The same state without its dictionary frame.
	st, err := readFrames(bytes.NewReader(state.Bytes()))
	if err != nil || len(st.dicts) != 1 {
		t.Fatalf("reading the state: %v, %d dictionaries", err, len(st.dicts))
	}
	var stripped bytes.Buffer
	sw := newStateWriter(&stripped)
	for _, res := range st.resources {
		sw.frame(frameResource, []byte(res.key), res.rv)
		for i, k := range res.keys {
			sw.frame(frameObject, []byte(k), res.values[i])
		}
	}
	if err := sw.end(); err != nil {
		t.Fatal(err)
	}
	other := openTest(t, testPath(t), Options{})
	if _, err := other.ImportCluster("prod", &stripped, ImportOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("importing a state without its dictionary: %v, want ErrCorrupt", err)
	}
}

// addDictSeeds adds encodings in formatDict to the seeds of a fuzz test, whole and
// truncated, with a dictionary that the registry has while the test runs.
func addDictSeeds(f *testing.F) {
	freshDictionaries(f)
	c := dictCodec(f)
	for i := range 2 {
		data, err := c.Encode(dictPod(f, 100+i))
		if err != nil || data[0] != formatDict {
			f.Fatalf("encoding: %v", err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		f.Add(data[:1+dictIDSize])
	}
}
