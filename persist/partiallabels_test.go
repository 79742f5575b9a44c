package persist

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/internal/labelenc"
)

// labelSetFor is the labels of the object i of TestPartialLoadEncodesLabels: none, one
// set that most objects share, a set of one object's own, an empty value, and more
// labels than filingLabels holds on its stack.
func labelSetFor(i int) map[string]string {
	switch i % 5 {
	case 0:
		return nil
	case 1, 2:
		return map[string]string{"app.kubernetes.io/name": "cart", "tier": "backend", "app.kubernetes.io/part-of": "shop"}
	case 3:
		return map[string]string{"pod-template-hash": fmt.Sprintf("h%04d", i), "canary": ""}
	default:
		l := map[string]string{}
		for j := range 20 {
			l[fmt.Sprintf("k%02d", j)] = strings.Repeat("v", j)
		}
		return l
	}
}

// TestPartialLoadEncodesLabels: a partial load hands out each object's labels encoded,
// as a compact fleet keeps them (labelenc, EncodedLabels), one string for the objects
// of one decoder that carry the same labels, and GetLabels reads them back. Nothing of a
// filing object points into the memory map: read after the Store is closed and its file
// unmapped, a string that did would fault, here and not somewhere later (a name read as
// a view of the map does).
func TestPartialLoadEncodesLabels(t *testing.T) {
	path := testPath(t)
	s := openTest(t, path, Options{})
	w := s.NewWriter(WriterOptions{})
	const n = 50
	for i := range n {
		u := object("ns", fmt.Sprintf("cm-%03d", i), "1")
		u.SetLabels(labelSetFor(i))
		w.Upsert("alpha", pods, u)
	}
	w.Checkpoint("alpha", pods, "100")
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var objs []runtime.Object
	err := s.LoadEach(LoadOptions{Partial: true}, func(_ string, cs *ClusterSnapshot) error {
		objs = append(objs, cs.Resources[pods].Objects...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != n {
		t.Fatalf("loaded %d objects, want %d", len(objs), n)
	}
	// What each object said while the file was mapped.
	before := make([]string, n)
	for i, obj := range objs {
		before[i] = describeFiling(t, obj)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var shared string
	for i, obj := range objs {
		p := obj.(*PartialObject)
		if got := describeFiling(t, obj); got != before[i] {
			t.Errorf("%s: after the file was unmapped: %s, before: %s", p.Name, got, before[i])
		}
		if want := labelSetFor(i); !maps.Equal(p.GetLabels(), want) {
			t.Errorf("%s: GetLabels() = %v, want %v", p.Name, p.GetLabels(), want)
		}
		// The objects of one shared set hold one string (sorted in the file by name,
		// the objects come in the order they were written).
		if i%5 == 1 || i%5 == 2 {
			s, _ := p.EncodedLabels()
			if shared == "" {
				shared = s
			} else if unsafe.StringData(s) != unsafe.StringData(shared) {
				t.Errorf("%s: its labels are a string of their own, not the set's", p.Name)
			}
		}
	}
}

// describeFiling reads every string of obj, a filing object: its labels' encoding, byte
// by byte, what GetLabels makes of it, and the other members of its metadata.
func describeFiling(t *testing.T, obj runtime.Object) string {
	t.Helper()
	p, ok := obj.(*PartialObject)
	if !ok {
		t.Fatalf("a partial load handed out a %T", obj)
	}
	enc, ok := p.EncodedLabels()
	if !ok || !labelenc.Valid(enc) {
		t.Fatalf("%s: EncodedLabels() = %q, %v", p.Name, enc, ok)
	}
	return fmt.Sprintf("%x %v %s %s %s %s %s %s", []byte(enc), p.GetLabels(), p.APIVersion, p.Kind, p.Namespace, p.Name, p.UID, p.ResourceVersion)
}

// TestPartialObject: GetLabels, SetLabels and DeepCopyObject keep the labels of an
// object whose labels are encoded.
func TestPartialObject(t *testing.T) {
	enc, _ := labelenc.Append(nil, []labelenc.Pair{{Key: "b", Value: "2"}, {Key: "a", Value: "1"}})
	p := &PartialObject{labels: string(enc)}
	p.Name = "x"
	if got := p.GetLabels(); !maps.Equal(got, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("GetLabels() = %v", got)
	}
	c := p.DeepCopyObject().(*PartialObject)
	if c == p || c.Name != "x" || !maps.Equal(c.GetLabels(), p.GetLabels()) {
		t.Errorf("DeepCopyObject() = %+v, labels %v", c, c.GetLabels())
	}
	p.SetLabels(map[string]string{"c": "3"})
	if _, ok := p.EncodedLabels(); ok {
		t.Error("EncodedLabels() still ok after SetLabels")
	}
	if got := p.GetLabels(); !maps.Equal(got, map[string]string{"c": "3"}) {
		t.Errorf("GetLabels() after SetLabels = %v", got)
	}
	if got := c.GetLabels(); !maps.Equal(got, map[string]string{"a": "1", "b": "2"}) {
		t.Errorf("the copy's labels changed with the original's: %v", got)
	}
	p.SetLabels(nil)
	if got := p.GetLabels(); got != nil {
		t.Errorf("GetLabels() after SetLabels(nil) = %v", got)
	}
}
