package informer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// jsonDecoders returns the JSON decoder of the dynamic client, and ours.
func jsonDecoders(t testing.TB, dropManagedFields bool) (apimachinery, ours runtime.Decoder) {
	t.Helper()
	base := dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer
	find := func(ns runtime.NegotiatedSerializer) runtime.Decoder {
		info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeJSON)
		if !ok {
			t.Fatal("no JSON serializer")
		}
		return ns.DecoderToVersion(info.Serializer, schema.GroupVersion{Version: "v1"})
	}
	return find(base), find(newNegotiatedSerializer(base, newDecoderPool(2), dropManagedFields))
}

// decodeCases are inputs for the decoders: objects, lists and errors as the apiserver
// sends them, and what it never sends.
var decodeCases = []string{
	string(podJSON),
	podListJSON(3),
	`{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"7"},"items":[]}`,
	`{"apiVersion":"v1","kind":"PodList","items":[{"metadata":{"name":"a"}},null]}`,
	`{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"10","annotations":{"k8s.io/initial-events-end":"true"}}}`,
	`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"pods"},"code":404}`,
	`{"kind":"Status","apiVersion":"other/v9","status":"Failure","code":410}`,
	`{"kind":"WatchEvent","apiVersion":"v1","type":"ADDED","object":{}}`,
	`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"v1","resources":[]}`,
	`{"kind":"Widget","apiVersion":"example.com/v1","spec":{"n":1e3,"m":-0,"big":12345678901234567890}}`,
	`{"kind":"Widget","apiVersion":"example.com/"}`,
	`{"kind":"Widget","apiVersion":"/v1"}`,
	`{"kind":"Widget","apiVersion":"a/b/c"}`,
	`{"kind":"Widget","apiVersion":null}`,
	`{"kind":"Widget","apiVersion":1}`,
	`{"kind":"Widget"}`,
	`{"kind":"","apiVersion":"v1"}`,
	`{"kind":null,"apiVersion":"v1"}`,
	`{"apiVersion":"v1"}`,
	`{"APIVersion":"v1","kind":"Pod"}`,
	`{"apiVersion":"v1","kind":"Pod","Kind":"Status"}`,
	`{"apiVersion":"v1","kind":"Pod","kind":"Pod"}`,
	`{"apiVersion":5,"apiVersion":"v1","kind":"Pod"}`,
	`{"apiVersion":"v1","kind":"PodList","items":{}}`,
	`{"apiVersion":"v1","kind":"PodList","items":[1]}`,
	`{"apiVersion":"v1","kind":"Pod","metadata":{"managedFields":[{"manager":"x"}]}}`,
	`{"apiVersion":"v1","kind":"Pod"} x`,
	`{"apiVersion":"v1","kind":"Pod"`,
	`{"apiVersion":"v1","kind":"Pod","spec":1e400}`,
	`null`,
	`[]`,
	`"Pod"`,
	``,
}

// podListJSON returns a PodList of n copies of podJSON, with other names and UIDs.
func podListJSON(n int) string {
	var pod map[string]any
	if err := json.Unmarshal(podJSON, &pod); err != nil {
		panic(err)
	}
	delete(pod, "apiVersion")
	delete(pod, "kind")
	var b strings.Builder
	b.WriteString(`{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"184467400"},"items":[`)
	for i := range n {
		md := pod["metadata"].(map[string]any)
		md["name"] = fmt.Sprintf("checkout-api-7d9f8b6c5d-%05d", i)
		md["uid"] = fmt.Sprintf("5b1c2d3e-4f50-4a6b-8c7d-%012d", i)
		md["resourceVersion"] = fmt.Sprint(184467321 + i)
		status := pod["status"].(map[string]any)
		status["podIP"] = fmt.Sprintf("10.%d.%d.%d", 64+i/65536, i/256%256, i%256)
		for j, c := range status["containerStatuses"].([]any) {
			c.(map[string]any)["containerID"] = fmt.Sprintf("containerd://%064x", i*8+j)
		}
		item, err := json.Marshal(pod)
		if err != nil {
			panic(err)
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(item)
	}
	b.WriteString("]}")
	return b.String()
}

// checkDecode checks that ours decodes data into a new object of newInto as
// apimachinery does, apart from the managedFields it drops.
func checkDecode(t *testing.T, apimachinery, ours runtime.Decoder, dropManagedFields bool, data []byte, newInto func() runtime.Object) {
	t.Helper()
	want, wantGVK, wantErr := apimachinery.Decode(data, nil, newInto())
	got, gotGVK, err := ours.Decode(data, nil, newInto())
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%.200q into %T: error %v, apimachinery's %v", data, newInto(), err, wantErr)
	}
	if err != nil {
		if err.Error() != wantErr.Error() {
			t.Errorf("%.200q into %T: error %v, apimachinery's %v", data, newInto(), err, wantErr)
		}
		return
	}
	if dropManagedFields {
		switch want := want.(type) {
		case *unstructured.Unstructured:
			want.SetManagedFields(nil)
		case *unstructured.UnstructuredList:
			for i := range want.Items {
				want.Items[i].SetManagedFields(nil)
			}
		}
	}
	if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
		t.Errorf("%.200q into %T:\ngot  %#v\nwant %#v", data, newInto(), got, want)
	}
	if !reflect.DeepEqual(gotGVK, wantGVK) {
		t.Errorf("%.200q into %T: kind %v, apimachinery's %v", data, newInto(), gotGVK, wantGVK)
	}
}

// sameJSON reports whether a and b encode alike, which reflect.DeepEqual does not
// check for negative zero.
func sameJSON(t *testing.T, a, b any) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}

var intos = []func() runtime.Object{
	func() runtime.Object { return nil },
	func() runtime.Object { return &unstructured.Unstructured{} },
	func() runtime.Object { return &unstructured.UnstructuredList{} },
	func() runtime.Object { return &metav1.Status{} },
}

func TestDecodeAsApimachinery(t *testing.T) {
	for _, drop := range []bool{false, true} {
		apimachinery, ours := jsonDecoders(t, drop)
		for _, data := range decodeCases {
			for _, into := range intos {
				checkDecode(t, apimachinery, ours, drop, []byte(data), into)
			}
		}
	}
}

// FuzzDecode checks that the dynamic clients of a Set decode what the dynamic client
// decodes to the same objects, and fail where it fails.
func FuzzDecode(f *testing.F) {
	for _, data := range decodeCases {
		f.Add([]byte(data), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, drop bool) {
		apimachinery, ours := jsonDecoders(t, drop)
		for _, into := range intos {
			checkDecode(t, apimachinery, ours, drop, data, into)
		}
	})
}

// TestDynamicClient lists and watches through the dynamic client of a Set, against a
// fake apiserver.
func TestDynamicClient(t *testing.T) {
	list := podListJSON(2)
	events := []string{
		`{"type":"ADDED","object":` + string(podJSON) + `}`,
		`{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}`,
		`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Expired","code":410}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/v1/namespaces/gone/pods":
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"gone"}`)
		case r.URL.Query().Get("watch") == "true":
			for _, ev := range events {
				fmt.Fprintln(w, ev)
			}
		default:
			fmt.Fprint(w, list)
		}
	}))
	defer srv.Close()

	cfg := &rest.Config{Host: srv.URL}
	h, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool := newDecoderPool(1)
	dyn, err := newDynamicClient(cfg, h, pool, true)
	if err != nil {
		t.Fatal(err)
	}
	pods := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"})

	got, err := pods.Namespace("shop-prod").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items) != 2 || got.GetResourceVersion() != "184467400" {
		t.Fatalf("listed %d items at %q", len(got.Items), got.GetResourceVersion())
	}
	a, b := got.Items[0], got.Items[1]
	if a.GetKind() != "Pod" || a.GetAPIVersion() != "v1" || a.GetName() == b.GetName() {
		t.Errorf("items %s %s %s, %s", a.GetAPIVersion(), a.GetKind(), a.GetName(), b.GetName())
	}
	if a.GetManagedFields() != nil {
		t.Error("managedFields decoded")
	}
	image := func(u unstructured.Unstructured) string {
		containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
		return containers[0].(map[string]any)["image"].(string)
	}
	if unsafe.StringData(image(a)) != unsafe.StringData(image(b)) {
		t.Error("the same image of two pods is not one string")
	}

	_, err = pods.Namespace("gone").List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("listing from a 404 with a Status: %v, want NotFound", err)
	}

	w, err := pods.Namespace("shop-prod").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	u, ok := ev.Object.(*unstructured.Unstructured)
	if ev.Type != watch.Added || !ok {
		t.Fatalf("first event %s %T", ev.Type, ev.Object)
	}
	if u.GetName() != "checkout-api-7d9f8b6c5d-x2k9p" || u.GetManagedFields() != nil {
		t.Errorf("watched %s, managedFields %v", u.GetName(), u.GetManagedFields())
	}
	if unsafe.StringData(image(*u)) != unsafe.StringData(image(a)) {
		t.Error("the image of a watched pod is not the listed pods' string")
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Bookmark || ev.Object.(*unstructured.Unstructured).GetResourceVersion() != "12" {
		t.Errorf("second event %s %#v", ev.Type, ev.Object)
	}
	if ev := <-w.ResultChan(); ev.Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) {
		t.Errorf("third event %s %#v, want an Expired Status", ev.Type, ev.Object)
	}

	kept, err := newDynamicClient(cfg, h, pool, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err = kept.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).Namespace("shop-prod").List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Items[0].GetManagedFields()) == 0 {
		t.Error("managedFields dropped by the client that keeps them")
	}
}
