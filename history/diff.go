package history

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetwatch/fleetwatch/api/v1alpha1"
)

// noise are the fields that change with every write and say nothing of what changed:
// Diff leaves them out.
var noise = []string{".metadata.managedFields", ".metadata.resourceVersion"}

// secretValues are the fields of a Secret that hold its values: never in a diff.
var secretValues = []string{"data", "stringData"}

// Diff returns the fields that differ between two objects' contents (their
// unstructured maps; nil for none), in path order: each leaf set, changed or removed,
// and each list or map that is empty on one side and absent on the other.
// .metadata.managedFields and .metadata.resourceVersion are left out, and so are a
// Secret's data and stringData (secret says that the objects are Secrets). The values
// returned are those of old and new, shared: they must not be modified.
func Diff(old, new map[string]any, secret bool) []v1alpha1.FieldChange {
	if secret {
		old, new = withoutSecretValues(old), withoutSecretValues(new)
	}
	var out []v1alpha1.FieldChange
	diffValue(&out, "", mapOrNil(old), mapOrNil(new))
	return out
}

// mapOrNil returns m as an any that is nil, not a nil map, when m is nil.
func mapOrNil(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m
}

// withoutSecretValues returns a shallow copy of o without a Secret's values.
func withoutSecretValues(o map[string]any) map[string]any {
	if o == nil {
		return nil
	}
	o = maps.Clone(o)
	for _, k := range secretValues {
		delete(o, k)
	}
	return o
}

func diffValue(out *[]v1alpha1.FieldChange, path string, old, new any) {
	if slices.Contains(noise, path) {
		return
	}
	om, oldMap := old.(map[string]any)
	nm, newMap := new.(map[string]any)
	if (oldMap || old == nil) && (newMap || new == nil) && len(om)+len(nm) > 0 {
		keys := slices.Sorted(maps.Keys(om))
		for k := range nm {
			if _, ok := om[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			diffValue(out, path+fieldSegment(k), om[k], nm[k])
		}
		return
	}
	ol, oldList := old.([]any)
	nl, newList := new.([]any)
	if (oldList || old == nil) && (newList || new == nil) && len(ol)+len(nl) > 0 {
		for i := range max(len(ol), len(nl)) {
			var o, n any
			if i < len(ol) {
				o = ol[i]
			}
			if i < len(nl) {
				n = nl[i]
			}
			diffValue(out, path+"["+strconv.Itoa(i)+"]", o, n)
		}
		return
	}
	if old == nil && new == nil || reflect.DeepEqual(old, new) {
		return
	}
	*out = append(*out, v1alpha1.FieldChange{Path: path, Old: old, New: new})
}

// fieldSegment is the path segment of a map key: .key for a key that is an identifier,
// else ["key"], quoted as in JSON.
func fieldSegment(k string) string {
	if isIdentifier(k) {
		return "." + k
	}
	b, _ := json.Marshal(k) // a string always marshals
	return "[" + string(b) + "]"
}

func isIdentifier(k string) bool {
	if k == "" {
		return false
	}
	return strings.IndexFunc(k, func(r rune) bool {
		return !(r == '_' || r == '$' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	}) < 0 && (k[0] < '0' || k[0] > '9')
}
