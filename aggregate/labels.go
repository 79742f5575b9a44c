package aggregate

import (
	"iter"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/fleetwatch/fleetwatch/internal/labelenc"
)

// rawLabels is the labels map of an *unstructured.Unstructured, read in place.
// Unstructured.GetLabels copies the map on every call; the indexer reads labels on every
// write and every selector match, so it reads them without the copy. Every value is a
// string or nil (read as ""), as checked by labelsOf.
type rawLabels map[string]any

var _ labels.Labels = rawLabels(nil)

func (l rawLabels) Has(key string) bool {
	_, ok := l[key]
	return ok
}

func (l rawLabels) Get(key string) string {
	v, _ := l[key].(string)
	return v
}

func (l rawLabels) Lookup(key string) (string, bool) {
	v, ok := l[key]
	if !ok {
		return "", false
	}
	s, _ := v.(string)
	return s, true
}

// labelsOf returns the labels of obj, an object and not an *encodedObject, without
// copying them. It agrees with meta.Accessor(obj).GetLabels(): for unstructured
// objects, a labels field that is not a map of strings (nulls allowed) counts as no
// labels.
//
// An object that read its labels map when it was made (filedLabels: an informer's
// partial objects) is not read again.
func labelsOf(obj runtime.Object) labels.Labels {
	if f, ok := obj.(filedLabels); ok {
		if raw, filed := f.RawLabels(); filed {
			return unstructuredLabels(raw)
		}
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		raw, _ := md["labels"].(map[string]any)
		return unstructuredLabels(raw)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return labels.Set(nil)
	}
	return labels.Set(m.GetLabels())
}

// filedLabels is an object that read its labels map when it was made
// (wire.EncodedObject). RawLabels returns that map, not to be modified, and true, or
// false if the object did not read it.
type filedLabels interface {
	RawLabels() (map[string]any, bool)
}

// unstructuredLabels returns the labels of an unstructured object's labels map raw, as
// unstructured.Unstructured's GetLabels does: none if a value is not a string (nulls
// allowed).
func unstructuredLabels(raw map[string]any) labels.Labels {
	for _, v := range raw {
		if _, ok := v.(string); !ok && v != nil {
			return labels.Set(nil)
		}
	}
	return rawLabels(raw)
}

// resourceVersionOf returns the resourceVersion of obj, an object and not an
// *encodedObject, as meta.Accessor(obj).GetResourceVersion() does, reading an
// unstructured object in place.
func resourceVersionOf(obj runtime.Object) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		rv, _ := md["resourceVersion"].(string)
		return rv
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

// labelCount returns the number of labels in l, which labelsOf returned.
func labelCount(l labels.Labels) int {
	switch l := l.(type) {
	case rawLabels:
		return len(l)
	case labels.Set:
		return len(l)
	case compactLabels:
		n := 0
		for range l.all() {
			n++
		}
		return n
	}
	return 0
}

// eachLabel calls fn for every label in l, which labelsOf returned.
func eachLabel(l labels.Labels, fn func(key, value string)) {
	switch l := l.(type) {
	case rawLabels:
		for k, v := range l {
			s, _ := v.(string)
			fn(k, s)
		}
	case labels.Set:
		for k, v := range l {
			fn(k, v)
		}
	case compactLabels:
		for k, v := range l.all() {
			fn(k, v)
		}
	}
}

// sameLabels reports whether a and b, which labelsOf returned, hold the same labels.
func sameLabels(a, b labels.Labels) bool {
	if a, ok := a.(compactLabels); ok {
		if b, ok := b.(compactLabels); ok {
			return a.String() == b.String()
		}
	}
	if labelCount(a) != labelCount(b) {
		return false
	}
	same := true
	eachLabel(a, func(k, v string) {
		if bv, ok := b.Lookup(k); !ok || bv != v {
			same = false
		}
	})
	return same
}

// compactLabels are the labels of an object of a compact indexer, in one string: the
// labels sorted by key, each key and value preceded by its length as a uvarint
// (internal/labelenc), so that any key or value can be held. The indexer interns them
// (internLabelsLocked): the objects that carry the same labels, as the objects of a
// workload or of a chart do, share one copy, and each holds a pointer to it. The zero
// compactLabels has no labels.
//
// A labels.Set would take a map per object: about 340 bytes for 3 labels.
type compactLabels struct{ p *labelSet }

// labelSet is the string of compactLabels and, once interned, the number of entries
// that hold it. The string does not change; refs is guarded by the indexer's lock.
type labelSet struct {
	s    string
	refs int
}

var _ labels.Labels = compactLabels{}

// encodedLabels is an object that encoded its labels as compactLabels holds them when
// it was made, while they were in the CPU's cache (a snapshot's partial load:
// persist.PartialObject): read from a map here, after a whole run of objects was
// decoded on another goroutine, they would not be. EncodedLabels returns the encoding,
// and false if the object did not make one.
type encodedLabels interface {
	EncodedLabels() (string, bool)
}

// makeCompactLabels returns the labels of l, which labelsOf returned, not interned.
func makeCompactLabels(l labels.Labels) compactLabels {
	var buf [16]labelenc.Pair
	pairs := buf[:0]
	eachLabel(l, func(k, v string) {
		pairs = append(pairs, labelenc.Pair{Key: k, Value: v})
	})
	return compactLabelsOfPairs(pairs)
}

// compactLabelsOf is makeCompactLabels(labelsOf(obj)), but takes the labels that obj
// encoded when it was made (encodedLabels), and reads the labels map of an unstructured
// object, or of one that read it when it was made (filedLabels), once rather than twice
// (labelsOf's check that every value is a string, then the copy): each iteration of a
// map costs about as much as the rest of the work on it.
func compactLabelsOf(obj runtime.Object) compactLabels {
	if e, ok := obj.(encodedLabels); ok {
		if s, ok := e.EncodedLabels(); ok && labelenc.Valid(s) {
			if s == "" {
				return compactLabels{}
			}
			return compactLabels{&labelSet{s: s}}
		}
	}
	var raw map[string]any
	if f, ok := obj.(filedLabels); ok {
		var filed bool
		if raw, filed = f.RawLabels(); !filed {
			return makeCompactLabels(labelsOf(obj))
		}
	} else if u, ok := obj.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		raw, _ = md["labels"].(map[string]any)
	} else {
		return makeCompactLabels(labelsOf(obj))
	}
	var buf [16]labelenc.Pair
	pairs := buf[:0]
	for k, v := range raw {
		s, ok := v.(string)
		if !ok && v != nil {
			// As unstructuredLabels: no labels at all.
			return compactLabels{}
		}
		pairs = append(pairs, labelenc.Pair{Key: k, Value: s})
	}
	return compactLabelsOfPairs(pairs)
}

// compactLabelsOfPairs returns the compactLabels of pairs, whose keys are distinct (a
// map's); it sorts pairs.
func compactLabelsOfPairs(pairs []labelenc.Pair) compactLabels {
	if len(pairs) == 0 {
		return compactLabels{}
	}
	var buf [256]byte
	b, _ := labelenc.Append(buf[:0], pairs)
	return compactLabels{&labelSet{s: string(b)}}
}

func (c compactLabels) String() string {
	if c.p == nil {
		return ""
	}
	return c.p.s
}

// all yields every label, in the order of their keys.
func (c compactLabels) all() iter.Seq2[string, string] { return labelenc.All(c.String()) }

func (c compactLabels) Lookup(key string) (string, bool) {
	for k, v := range c.all() {
		switch strings.Compare(k, key) {
		case 0:
			return v, true
		case 1:
			return "", false
		}
	}
	return "", false
}

func (c compactLabels) Has(key string) bool {
	_, ok := c.Lookup(key)
	return ok
}

func (c compactLabels) Get(key string) string {
	v, _ := c.Lookup(key)
	return v
}
