//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package persist

import (
	"context"
	"fmt"
	"reflect"
	"syscall"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"

	bolt "go.etcd.io/bbolt"
)

// mapsSupported is whether mapFile maps files here.
const mapsSupported = true

func TestWriterGrowsTheFileWithoutRemapping(t *testing.T) {
	// A first commit of many clusters grows a new file from nothing to megabytes. Each
	// remap within a commit copies out of the old map every key and value that the
	// commit's nodes point at (bbolt counts them as node dereferences); a map as large as
	// the file will grow makes none.
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	for i := range 100 {
		cluster := fmt.Sprintf("cluster-%03d", i)
		for j := range 20 {
			w.Upsert(cluster, pods, testPod(t, fmt.Sprintf("ns-%d", j%5), fmt.Sprintf("pod-%02d", j)))
		}
		w.Checkpoint(cluster, pods, "1")
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := s.db.Stats()
	if n := st.TxStats.GetNodeDeref(); n != 0 {
		t.Errorf("the commit remapped the file: %d nodes copied out of the old map", n)
	}
	// The file grows by growthStep beyond what the commit needs (bbolt's need counts one
	// page more than the pages it uses), not by more.
	var used int64
	if err := s.view(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	if size := s.fileSize(); used < 4<<20 || size < used || size > used+growthStep+int64(s.db.Info().PageSize) {
		t.Errorf("file of %d bytes for %d used, want at most %d beyond", size, used, growthStep)
	}
	if got := len(mustLoad(t, s).Clusters); got != 100 {
		t.Errorf("loaded %d clusters, want 100", got)
	}
}

// TestDecodeSharedFromUnmappedMemory: DecodeShared of values in memory that is unmapped
// after each call (as a bbolt value is by a remap): neither the objects it returned nor
// its table hold views of that memory, so reading them, and decoding again, after the
// unmap reads no unmapped page (a view would fault, and the test crash).
func TestDecodeSharedFromUnmappedMemory(t *testing.T) {
	pods, encs := sharedPods(t, Codec{}, 4)
	// Every mapping is made before the first is unmapped, so that none takes the place
	// of one unmapped before: a view of one would read unmapped memory, not another
	// copy of the value.
	var maps [][]byte
	for range 3 {
		for _, enc := range encs {
			m, err := syscall.Mmap(-1, 0, len(enc), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
			if err != nil {
				t.Fatal(err)
			}
			copy(m, enc)
			maps = append(maps, m)
		}
	}
	var d fastDecoder
	tab := new(keptValues)
	var objs []map[string]any
	for _, m := range maps {
		obj, err := d.decodeKept(unsafe.String(unsafe.SliceData(m), len(m)), tab)
		if err := syscall.Munmap(m); err != nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, obj.(*unstructured.Unstructured).Object)
	}
	for i, m := range objs {
		if !reflect.DeepEqual(m, pods[i%len(pods)].Object) {
			t.Fatalf("object %d read after the unmap as %v", i, m)
		}
	}

	// On the error path too: an object whose map "a" decodes, and is kept once met
	// twice, before its member "b", a NaN, fails the decode. The errors, and the decode
	// of the same map from the heap after the unmaps, read no unmapped page.
	sub, err := direct.Marshal(map[string]any{"x": int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	bad := append(append([]byte{0xa2, 0x61, 'a'}, sub...), 0x61, 'b', 0xf9, 0x7e, 0x00)
	maps = maps[:0]
	for range 2 {
		m, err := syscall.Mmap(-1, 0, len(bad), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		copy(m, bad)
		maps = append(maps, m)
	}
	tab = new(keptValues)
	var errs []error
	for _, m := range maps {
		_, err := d.decodeKept(unsafe.String(unsafe.SliceData(m), len(m)), tab)
		if err := syscall.Munmap(m); err != nil {
			t.Fatal(err)
		}
		if err == nil {
			t.Fatal("an object with a NaN decoded")
		}
		errs = append(errs, err)
	}
	if tab.bytes.Load() == 0 {
		t.Fatal("the failed decodes kept nothing: the error path is not tested")
	}
	for _, err := range errs {
		_ = err.Error()
	}
	good := append([]byte{0xa1, 0x61, 'a'}, sub...)
	for range 2 {
		obj, err := d.decodeKept(string(good), tab)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]any{"a": map[string]any{"x": int64(1)}}; !reflect.DeepEqual(obj.(*unstructured.Unstructured).Object, want) {
			t.Fatalf("decoded %v, want %v", obj, want)
		}
	}
}
