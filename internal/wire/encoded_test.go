package wire

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// checkEncoding fails t unless encoded is the CBOR of u's map.
func checkEncoding(t *testing.T, u *unstructured.Unstructured, encoded []byte) {
	t.Helper()
	var m map[string]any
	if err := direct.Unmarshal(encoded, &m); err != nil {
		t.Fatalf("the encoding does not decode: %v", err)
	}
	if !reflect.DeepEqual(m, u.Object) {
		t.Errorf("the encoding decodes to\n%v\nnot to the object\n%v", m, u.Object)
	}
}

// TestDynamicClientEncodes checks that the dynamic clients that encode return
// the objects of watch events with their encoding, and everything else as before.
func TestDynamicClientEncodes(t *testing.T) {
	repeated := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"twice","name":"twice","resourceVersion":"13"}}`
	events := []string{
		`{"type":"ADDED","object":` + string(podJSON) + `}`,
		`{"type":"MODIFIED","object":` + repeated + `}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			for _, ev := range events {
				fmt.Fprintln(w, ev)
			}
			return
		}
		fmt.Fprint(w, podListJSON(2))
	}))
	defer srv.Close()
	drop, keep, err := NewDynamicClients(&rest.Config{Host: srv.URL}, true)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}

	// Lists are decoded into the caller's list, as before.
	list, err := drop.Resource(gvr).Namespace("shop-prod").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Items[0].GetManagedFields() != nil {
		t.Fatalf("listed %d items", len(list.Items))
	}

	for _, c := range []struct {
		name          string
		managedFields bool
	}{{"drop", false}, {"keep", true}} {
		t.Run(c.name, func(t *testing.T) {
			client := drop
			if c.managedFields {
				client = keep
			}
			w, err := client.Resource(gvr).Namespace("shop-prod").Watch(t.Context(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			ev := <-w.ResultChan()
			e, ok := ev.Object.(*EncodedObject)
			if ev.Type != watch.Added || !ok {
				t.Fatalf("first event %s %T, want an *EncodedObject", ev.Type, ev.Object)
			}
			if got := e.GetManagedFields() != nil; got != c.managedFields {
				t.Errorf("managedFields decoded: %v", got)
			}
			checkEncoding(t, e.Unstructured, e.Encoded)

			// An object that has no faithful encoding comes without.
			ev = <-w.ResultChan()
			if u, ok := ev.Object.(*unstructured.Unstructured); ev.Type != watch.Modified || !ok || u.GetName() != "twice" {
				t.Errorf("second event %s %T", ev.Type, ev.Object)
			}
			if ev := <-w.ResultChan(); ev.Type != watch.Error {
				t.Errorf("third event %s %T, want an error", ev.Type, ev.Object)
			}
		})
	}
}

// FuzzToPartial: the partial form of an object decoded with its encoding keeps that
// encoding, byte for byte, and files the object as the whole one does: the same key,
// resourceVersion, uid and labels, type and kind.
func FuzzToPartial(f *testing.F) {
	for _, data := range decodeCases {
		f.Add([]byte(data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, encoded, err := new(jsondec.Decoder).ObjectCBOR(data)
		if err != nil || encoded == nil {
			return
		}
		whole := &EncodedObject{Unstructured: &unstructured.Unstructured{Object: m}, Encoded: encoded}
		p := whole.ToPartial()
		if !p.Partial || !bytes.Equal(p.Encoded, encoded) {
			t.Fatalf("partial encoding %x, want %x", p.Encoded, encoded)
		}
		type filed struct {
			APIVersion, Kind, Namespace, Name, ResourceVersion string
			UID                                                any
			Labels                                             any
		}
		of := func(u *unstructured.Unstructured) filed {
			md, _ := u.Object["metadata"].(map[string]any)
			return filed{u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName(), u.GetResourceVersion(), md["uid"], md["labels"]}
		}
		if got, want := of(p.Unstructured), of(whole.Unstructured); !reflect.DeepEqual(got, want) {
			t.Fatalf("partial object filed as %+v, want %+v", got, want)
		}
		checkFiled(t, p)
	})
}

// checkFiled fails t unless e's namespace, name, resourceVersion, key and labels, read
// when e was made, are those of its map, and the key is cache.MetaNamespaceKeyFunc's.
func checkFiled(t *testing.T, e *EncodedObject) {
	t.Helper()
	u := e.Unstructured
	if e.GetNamespace() != u.GetNamespace() || e.GetName() != u.GetName() || e.GetResourceVersion() != u.GetResourceVersion() {
		t.Fatalf("filed as %q %q %q, the map has %q %q %q", e.GetNamespace(), e.GetName(), e.GetResourceVersion(), u.GetNamespace(), u.GetName(), u.GetResourceVersion())
	}
	want, err := cache.MetaNamespaceKeyFunc(u)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.Key(); got != want {
		t.Fatalf("key %q, want %q", got, want)
	}
	raw, filed := e.RawLabels()
	if filed != e.filed {
		t.Fatalf("RawLabels says filed %v, the object %v", filed, e.filed)
	}
	md, _ := u.Object["metadata"].(map[string]any)
	wantRaw, _ := md["labels"].(map[string]any)
	if filed && !reflect.DeepEqual(raw, wantRaw) {
		t.Fatalf("labels filed as %v, the map has %v", raw, wantRaw)
	}
}

// TestEncodedObjectFiling: a partial object that this package makes answers for its
// namespace, name, resourceVersion and key from what it read when it was made (a list's
// objects are asked for them after the whole list has come, when their maps are out of
// the CPU's cache), and its setters change both; an EncodedObject made elsewhere reads
// its map.
func TestEncodedObjectFiling(t *testing.T) {
	m, encoded, err := new(jsondec.Decoder).ObjectCBOR(podJSON)
	if err != nil {
		t.Fatal(err)
	}
	whole := &EncodedObject{Unstructured: &unstructured.Unstructured{Object: m}, Encoded: encoded}
	checkFiled(t, whole)
	if whole.filed {
		t.Error("a literal EncodedObject is filed")
	}
	p := whole.ToPartial()
	if !p.filed {
		t.Fatal("a partial object is not filed")
	}
	checkFiled(t, p)

	p.SetNamespace("")
	checkFiled(t, p)
	if p.Key() != p.GetName() {
		t.Errorf("cluster-scoped key %q, want the name %q", p.Key(), p.GetName())
	}
	p.SetNamespace("other")
	p.SetName("renamed")
	p.SetResourceVersion("99")
	p.SetLabels(map[string]string{"set": "later"})
	checkFiled(t, p)
	if raw, _ := p.RawLabels(); !reflect.DeepEqual(raw, map[string]any{"set": "later"}) {
		t.Errorf("after SetLabels: labels %v", raw)
	}
	p.SetLabels(nil)
	checkFiled(t, p)
	if raw, _ := p.RawLabels(); raw != nil {
		t.Errorf("after SetLabels(nil): labels %v", raw)
	}
	if p.Key() != "other/renamed" || p.GetResourceVersion() != "99" {
		t.Errorf("after the setters: key %q, resourceVersion %q", p.Key(), p.GetResourceVersion())
	}

	// The object of a partial client's watch event, decoded from the wire, is filed too.
	d := new(jsondec.Decoder)
	obj, _, ok := decodeEncoded(d, podJSON, true)
	e, isEncoded := obj.(*EncodedObject)
	if !ok || !isEncoded || !e.Partial || !e.filed {
		t.Fatalf("decoded %T (ok %v), want a filed partial *EncodedObject", obj, ok)
	}
	checkFiled(t, e)
}

// TestPartialDynamicClient: the clients of NewPartialDynamicClients return the objects of
// watch events partial, with the encoding that the encoding clients return for them;
// bookmarks whole, with their annotations; an object without a faithful encoding whole,
// without one.
func TestPartialDynamicClient(t *testing.T) {
	repeated := `{"kind":"Pod","apiVersion":"v1","metadata":{"name":"twice","name":"twice","resourceVersion":"13"}}`
	bookmark := `{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"14","annotations":{"k8s.io/initial-events-end":"true"}}}`
	events := []string{
		`{"type":"ADDED","object":` + string(podJSON) + `}`,
		`{"type":"BOOKMARK","object":` + bookmark + `}`,
		`{"type":"MODIFIED","object":` + repeated + `}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		for _, ev := range events {
			fmt.Fprintln(w, ev)
		}
	}))
	defer srv.Close()
	drop, _, err := NewPartialDynamicClients(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	w, err := drop.Resource(gvr).Namespace("shop-prod").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ev := <-w.ResultChan()
	e, ok := ev.Object.(*EncodedObject)
	if !ok || !e.Partial {
		t.Fatalf("first event %s %T, want a partial *EncodedObject", ev.Type, ev.Object)
	}
	whole, encoded, err := (&jsondec.Decoder{DropManagedFields: true}).ObjectCBOR(podJSON)
	if err != nil {
		t.Fatal(err)
	}
	want := (&EncodedObject{Unstructured: &unstructured.Unstructured{Object: whole}, Encoded: encoded}).ToPartial()
	if !reflect.DeepEqual(e.Object, want.Object) || !bytes.Equal(e.Encoded, encoded) {
		t.Errorf("partial object %v with %d bytes, want %v with %d", e.Object, len(e.Encoded), want.Object, len(encoded))
	}

	ev = <-w.ResultChan()
	if b, ok := ev.Object.(*EncodedObject); ev.Type != watch.Bookmark || !ok || b.Partial || b.GetAnnotations()["k8s.io/initial-events-end"] != "true" {
		t.Errorf("second event %s %T %v, want a whole bookmark with its annotation", ev.Type, ev.Object, ev.Object)
	}
	ev = <-w.ResultChan()
	if u, ok := ev.Object.(*unstructured.Unstructured); ev.Type != watch.Modified || !ok || u.GetName() != "twice" || u.GetResourceVersion() != "13" {
		t.Errorf("third event %s %T, want the whole object without an encoding", ev.Type, ev.Object)
	}
}
