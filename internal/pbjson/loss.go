package pbjson

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// Lossy returns the kinds of client-go's scheme whose protobuf carries less than their
// JSON, each with the JSON members that it loses (Losses). No transcoder can write
// those members back, so these kinds are not Supported: their informers ask for JSON.
// It is computed once, on first use; the caller must not modify it.
func Lossy() map[schema.GroupVersionKind][]string {
	return lossyKinds()
}

var lossyKinds = sync.OnceValue(func() map[schema.GroupVersionKind][]string {
	out := map[schema.GroupVersionKind][]string{}
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if l := Losses(t); len(l) > 0 {
			out[gvk] = l
		}
	}
	return out
})

// Losses returns the JSON members of objects of the struct type t that the protobuf of
// t does not carry, as paths from the object, such as
// "spec.volumeClaimTemplates[].apiVersion" ("[]" is an element of a slice, "{}" a
// value of a map), sorted. They are found by reflection on the json and protobuf tags of
// t and of every type it holds, through structs, pointers, slices and maps:
//
//   - the apiVersion and kind of a metav1.TypeMeta embedded below the object:
//     go-to-protobuf leaves TypeMeta out of every message, and only the envelope
//     (runtime.Unknown) carries the object's own. The items of a list are the
//     exception: the server's JSON gives them no apiVersion or kind either;
//   - a field that encoding/json writes (a json name, or none and exported) but that
//     has no protobuf tag.
//
// A type with its own JSON encoding (a time, a quantity, a raw extension...) is
// written by its MarshalJSON from what protobuf carries, and is not looked into.
func Losses(t reflect.Type) []string {
	w := lossWalker{memo: map[reflect.Type][]string{}, walking: map[reflect.Type]bool{}}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	l := w.object(t, true, strings.HasSuffix(t.Name(), "List"))
	slices.Sort(l)
	return slices.Compact(l)
}

// lossWalker walks Go types for Losses.
type lossWalker struct {
	// memo holds the losses of each struct type met below the object, as paths from it.
	memo map[reflect.Type][]string
	// walking holds the struct types being walked, for recursive types: a type met
	// again inside itself adds nothing that the outer walk does not find. cuts counts
	// such meetings: the losses of a type whose walk met one lack the paths through it,
	// and are not kept in memo.
	walking map[reflect.Type]bool
	cuts    int
}

// object returns the losses of struct type t. top: t's own TypeMeta is not a loss (the
// object, or an item of a list). list: t is a list, whose items are top.
func (w *lossWalker) object(t reflect.Type, top, list bool) []string {
	if customJSON(t) {
		return nil
	}
	if !top {
		if l, ok := w.memo[t]; ok {
			return l
		}
		if w.walking[t] {
			w.cuts++
			return nil
		}
		w.walking[t] = true
		defer delete(w.walking, t)
	}
	cuts := w.cuts
	var out []string
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if sf.Anonymous && sf.Type == typeTypeMeta && name == "" {
			if !top {
				out = append(out, "apiVersion", "kind")
			}
			continue
		}
		inline := sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct
		if name == "" && !inline {
			name = sf.Name
		}
		if sf.Tag.Get("protobuf") == "" {
			out = append(out, cmp.Or(name, sf.Name))
			continue
		}
		if inline {
			// Its members are written into t's object.
			out = append(out, w.object(sf.Type, top, false)...)
			continue
		}
		items := list && name == "items"
		for _, l := range w.value(sf.Type, items) {
			out = append(out, name+l)
		}
	}
	if !top && w.cuts == cuts {
		w.memo[t] = out
	}
	return out
}

// value returns the losses of a value of type t, as paths from the value's member
// (each starting with "." or "[]" or "{}"). item: t is the items of a list.
func (w *lossWalker) value(t reflect.Type, items bool) []string {
	prefix := ""
	for {
		switch {
		case t.Kind() == reflect.Pointer:
			t = t.Elem()
			continue
		case t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8 && !customJSON(t):
			prefix += "[]"
			t = t.Elem()
			continue
		case t.Kind() == reflect.Map && !customJSON(t):
			prefix += "{}"
			t = t.Elem()
			continue
		}
		break
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for _, l := range w.object(t, items, false) {
		out = append(out, prefix+"."+l)
	}
	return out
}
