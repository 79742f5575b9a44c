package intern

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"
)

// same reports whether a and b share their bytes.
func same(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

func TestKeyAndValue(t *testing.T) {
	var tab Table
	buf := []byte("containerPort")
	k1 := tab.Key(string(buf))
	buf[0] = 'X' // the Table keeps a copy
	k2 := tab.Key("containerPort")
	if k1 != "containerPort" || !same(k1, k2) {
		t.Errorf("Key: %q and %q are not one string", k1, k2)
	}

	v1, ok1 := tab.Value(strings.Clone("TCP"))
	v2, ok2 := tab.Value(strings.Clone("TCP"))
	if !ok1 || !ok2 || v1 != "TCP" || !same(v1.(string), v2.(string)) {
		t.Errorf("Value: %v (%t) and %v (%t) are not one string", v1, ok1, v2, ok2)
	}
	if _, ok := tab.Value(strings.Repeat("x", MaxValueLen+1)); ok {
		t.Errorf("a value longer than MaxValueLen was interned")
	}
}

func TestTableStartsOver(t *testing.T) {
	var tab Table
	first := tab.Key("first")
	for i := range maxEntries {
		tab.Key(fmt.Sprint(i))
		tab.Value(fmt.Sprint(i))
	}
	if len(tab.keys) > maxEntries || len(tab.values) > maxEntries {
		t.Fatalf("%d keys and %d values, more than %d", len(tab.keys), len(tab.values), maxEntries)
	}
	if again := tab.Key(strings.Clone("first")); again != first {
		t.Errorf("Key after starting over: %q", again)
	}
}

func TestObject(t *testing.T) {
	newObject := func() map[string]any {
		return map[string]any{
			strings.Clone("kind"): strings.Clone("Pod"),
			"spec": map[string]any{
				strings.Clone("containers"): []any{
					map[string]any{strings.Clone("name"): strings.Clone("app"), "ports": []any{
						map[string]any{strings.Clone("protocol"): strings.Clone("TCP"), "containerPort": int64(80)},
					}},
					[]any{strings.Clone("TCP"), 1.5, true, nil},
				},
				"long": strings.Repeat("x", MaxValueLen+1),
			},
		}
	}
	var tab Table
	a, b := newObject(), newObject()
	want := newObject()
	tab.Object(a)
	tab.Object(b)
	if !reflect.DeepEqual(a, want) || !reflect.DeepEqual(b, want) {
		t.Fatalf("Object changed the content:\n%#v\n%#v", a, b)
	}
	portA := a["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["ports"].([]any)[0].(map[string]any)
	portB := b["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["ports"].([]any)[0].(map[string]any)
	if !same(portA["protocol"].(string), portB["protocol"].(string)) {
		t.Error("values of two objects are not shared")
	}
	if !same(a["spec"].(map[string]any)["containers"].([]any)[1].([]any)[0].(string), portB["protocol"].(string)) {
		t.Error("values in slices are not shared")
	}
	keyOf := func(m map[string]any, k string) string {
		for mk := range m {
			if mk == k {
				return mk
			}
		}
		t.Fatalf("no key %q", k)
		return ""
	}
	if !same(keyOf(portA, "protocol"), keyOf(portB, "protocol")) {
		t.Error("keys of two objects are not shared")
	}
}

// BenchmarkObject measures interning a realistic object's strings, against the cost of
// decoding it from JSON that it saves memory for.
func BenchmarkObject(b *testing.B) {
	newPod := func() map[string]any {
		m := map[string]any{}
		meta := map[string]any{"name": strings.Clone("checkout-7d9f8b6c5d-x2k9p"), "namespace": strings.Clone("shop"),
			"labels": map[string]any{"app": strings.Clone("checkout"), "tier": strings.Clone("backend")}}
		var containers []any
		for i := range 3 {
			containers = append(containers, map[string]any{
				"name": strings.Clone(fmt.Sprint("c", i)), "image": strings.Clone("registry.example.com/shop/checkout:v1.2.3"),
				"imagePullPolicy": strings.Clone("IfNotPresent"),
				"ports":           []any{map[string]any{"containerPort": int64(8080), "protocol": strings.Clone("TCP")}},
				"env":             []any{map[string]any{"name": strings.Clone("MODE"), "value": strings.Clone("prod")}},
			})
		}
		m["metadata"] = meta
		m["spec"] = map[string]any{"containers": containers}
		return m
	}
	pods := make([]map[string]any, 1000)
	for i := range pods {
		pods[i] = newPod()
	}
	var tab Table
	i := 0
	for b.Loop() {
		tab.Object(pods[i%len(pods)])
		i++
	}
}

// TestFront looks up more strings than the front cache has slots, each three times, from
// a buffer overwritten after each call: every lookup returns the string, the one copy
// of it that the first lookup made, whether it comes from the front cache or the map.
func TestFront(t *testing.T) {
	var tab Table
	n := 4 << frontBits
	firstKeys, firstValues := make([]string, n), make([]string, n)
	for round := range 3 {
		for i := range n {
			buf := []byte(fmt.Sprintf("string-%d", i))
			k := tab.Key(string(buf))
			v, ok := tab.Value(string(buf))
			want := string(buf)
			for j := range buf {
				buf[j] = 'X'
			}
			if k != want || !ok || v != want {
				t.Fatalf("round %d: Key %q, Value %v (%t), want %q", round, k, v, ok, want)
			}
			if round == 0 {
				firstKeys[i], firstValues[i] = k, v.(string)
				continue
			}
			if !same(k, firstKeys[i]) || !same(v.(string), firstValues[i]) {
				t.Fatalf("round %d: %q is not the first copy", round, want)
			}
		}
	}
}
