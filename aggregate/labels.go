package aggregate

import (
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
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

// labelsOf returns the labels of obj without copying them. It agrees with
// meta.Accessor(obj).GetLabels(): for unstructured objects, a labels field that is not a
// map of strings (nulls allowed) counts as no labels.
func labelsOf(obj runtime.Object) labels.Labels {
	if o, ok := obj.(*encodedObject); ok {
		return o.labels
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		md, _ := u.Object["metadata"].(map[string]any)
		raw, _ := md["labels"].(map[string]any)
		for _, v := range raw {
			if _, ok := v.(string); !ok && v != nil {
				return labels.Set(nil)
			}
		}
		return rawLabels(raw)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return labels.Set(nil)
	}
	return labels.Set(m.GetLabels())
}

// labelCount returns the number of labels in l, which labelsOf returned.
func labelCount(l labels.Labels) int {
	switch l := l.(type) {
	case rawLabels:
		return len(l)
	case labels.Set:
		return len(l)
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
	}
}

// sameLabels reports whether a and b, which labelsOf returned, hold the same labels.
func sameLabels(a, b labels.Labels) bool {
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
