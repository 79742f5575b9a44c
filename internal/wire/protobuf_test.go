package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/fleetwatch/fleetwatch/internal/intern"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// protobufOf returns obj in protobuf as a kube-apiserver sends it.
func protobufOf(t testing.TB, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestProtobufRefused: a list of pods in protobuf with a field that pbjson does not know
// (a newer server's) fails to decode rather than lose the field; from then on, that
// cluster's clients ask for pods in JSON, and their list is read, while another
// cluster's still ask for protobuf. A Status in protobuf is an API error, as
// in JSON. Requests without WithProtobuf ask for JSON only.
func TestProtobufRefused(t *testing.T) {
	podsKind := corev1.SchemeGroupVersion.WithKind("Pod")

	list := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "7"},
		Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns"}}}}
	pb := protobufOf(t, list)
	// The pod's field 99, a string: the list's items are field 2 of the list's message,
	// the last one here; lengthen it and the envelope's raw (field 2) by 4 bytes.
	newer := withTrailingField(t, pb)
	status := protobufOf(t, &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status: metav1.StatusFailure, Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: "gone"})

	var (
		mu      sync.Mutex
		accepts []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept"))
		mu.Unlock()
		if r.Header.Get("Accept") != acceptProtobuf {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"metadata":{"name":"a","namespace":"ns"}}]}`))
			return
		}
		w.Header().Set("Content-Type", contentTypeProtobuf)
		if r.URL.Path == "/api/v1/namespaces/gone/pods" {
			w.WriteHeader(http.StatusNotFound)
			w.Write(status)
			return
		}
		w.Write(newer)
	}))
	defer srv.Close()
	dyn, _, err := NewDynamicClients(&rest.Config{Host: srv.URL}, false)
	if err != nil {
		t.Fatal(err)
	}
	pods := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"})
	ctx := t.Context()

	if _, err := pods.Namespace("gone").List(WithProtobuf(ctx, podsKind), metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Status in protobuf: got %v, want NotFound", err)
	}
	if _, err := pods.List(WithProtobuf(ctx, podsKind), metav1.ListOptions{}); err == nil {
		t.Fatal("a list with a field pbjson does not know was decoded")
	}
	got, err := pods.List(WithProtobuf(ctx, podsKind), metav1.ListOptions{})
	if err != nil || len(got.Items) != 1 || got.Items[0].GetName() != "a" {
		t.Fatalf("the list in JSON after the refusal: %v, %v", got, err)
	}
	if _, err := pods.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	// The clients of another cluster still ask for protobuf.
	other, _, err := NewDynamicClients(&rest.Config{Host: srv.URL}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Resource(schema.GroupVersionResource{Version: "v1", Resource: "pods"}).List(WithProtobuf(ctx, podsKind), metav1.ListOptions{}); err == nil {
		t.Fatal("another cluster's list with a field pbjson does not know was decoded")
	}
	want := []string{acceptProtobuf, acceptProtobuf, "application/json", "application/json", acceptProtobuf}
	if !slices.Equal(accepts, want) {
		t.Errorf("Accept headers %q, want %q", accepts, want)
	}
}

// withTrailingField returns the protobuf of a pod list, pb, whose last item has a field
// 99 more, by lengthening every message that ends where the item does.
func withTrailingField(t *testing.T, pb []byte) []byte {
	t.Helper()
	// The envelope: the prefix, then typeMeta (field 1) and raw (field 2), the list.
	body := pb[4:]
	out := slices.Clone(pb[:4])
	off := 0
	for off < len(body) {
		tag := body[off]
		n, l := uvarint(body[off+1:])
		start := off + 1 + l
		value := body[start : start+int(n)]
		if tag == 0x12 { // raw: the list
			value = appendToLastItem(t, value)
		}
		out = append(out, tag)
		out = appendUvarint(out, uint64(len(value)))
		out = append(out, value...)
		off = start + int(n)
	}
	return out
}

// appendToLastItem returns the list message list with field 99 appended to its last
// item (field 2).
func appendToLastItem(t *testing.T, list []byte) []byte {
	var out []byte
	off, lastItem := 0, -1
	type field struct {
		tag   byte
		value []byte
	}
	var fields []field
	for off < len(list) {
		tag := list[off]
		n, l := uvarint(list[off+1:])
		start := off + 1 + l
		fields = append(fields, field{tag, list[start : start+int(n)]})
		if tag == 0x12 {
			lastItem = len(fields) - 1
		}
		off = start + int(n)
	}
	if lastItem < 0 {
		t.Fatal("no item")
	}
	fields[lastItem].value = append(slices.Clone(fields[lastItem].value), 0x9a, 0x06, 1, 'x')
	for _, f := range fields {
		out = append(out, f.tag)
		out = appendUvarint(out, uint64(len(f.value)))
		out = append(out, f.value...)
	}
	return out
}

func uvarint(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// TestPartialDynamicClientProtobuf: a streaming list in protobuf gives the clients of
// NewPartialDynamicClients the objects that the same list in JSON gives them, partial
// with the same encodings and interned as they are, whichever the client (managedFields
// dropped or kept): a realistic pod, pods with strings that JSON escapes or replaces, a
// bookmark that ends the initial events (whole), and an ERROR event's Status.
func TestPartialDynamicClientProtobuf(t *testing.T) {
	var pod corev1.Pod
	if err := json.Unmarshal(podJSON, &pod); err != nil {
		t.Fatal(err)
	}
	odd := pod.DeepCopy()
	odd.Name, odd.Labels = "odd\xff<>&\u2028", map[string]string{"a": "\xc3", "b": strings.Repeat("long", 100)}
	odd.Spec.Containers[0].Args = []string{"-x=\"y\"", "\x00"}
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "14",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	gone := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old"}
	type event struct {
		typ watch.EventType
		obj runtime.Object
	}
	events := []event{{watch.Added, &pod}, {watch.Added, odd}, {watch.Bookmark, bookmark}, {watch.Error, gone}}
	for _, ev := range events {
		gvks, _, err := scheme.Scheme.ObjectKinds(ev.obj)
		if err != nil {
			t.Fatal(err)
		}
		ev.obj.GetObjectKind().SetGroupVersionKind(gvks[0])
	}
	pbEvent := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") == acceptProtobuf {
			w.Header().Set("Content-Type", contentTypeProtobuf+";stream=watch")
			fw := protobuf.LengthDelimitedFramer.NewFrameWriter(w)
			for _, ev := range events {
				var buf bytes.Buffer
				e := &metav1.WatchEvent{Type: string(ev.typ), Object: runtime.RawExtension{Raw: protobufOf(t, ev.obj)}}
				if err := pbEvent.Encode(e, &buf); err != nil {
					t.Error(err)
					return
				}
				fw.Write(buf.Bytes())
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		for _, ev := range events {
			obj, err := json.Marshal(ev.obj)
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Fprintf(w, "{\"type\":%q,\"object\":%s}\n", ev.typ, obj)
		}
	}))
	defer srv.Close()
	drop, keep, err := NewPartialDynamicClients(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	podKind := corev1.SchemeGroupVersion.WithKind("Pod")
	for name, client := range map[string]dynamic.Interface{"drop": drop, "keep": keep} {
		t.Run(name, func(t *testing.T) {
			watchAll := func(ctx context.Context) []watch.Event {
				t.Helper()
				w, err := client.Resource(gvr).Watch(ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Stop()
				var got []watch.Event
				for ev := range w.ResultChan() {
					got = append(got, ev)
				}
				return got
			}
			fromJSON := watchAll(t.Context())
			fromProtobuf := watchAll(WithProtobuf(t.Context(), podKind))
			if len(fromJSON) != len(events) || len(fromProtobuf) != len(events) {
				t.Fatalf("%d events in JSON, %d in protobuf, want %d", len(fromJSON), len(fromProtobuf), len(events))
			}
			for i, want := range fromJSON {
				got := fromProtobuf[i]
				if got.Type != want.Type || reflect.TypeOf(got.Object) != reflect.TypeOf(want.Object) {
					t.Fatalf("event %d: %s %T in protobuf, %s %T in JSON", i, got.Type, got.Object, want.Type, want.Object)
				}
				// reflect's: the EncodedObjects' unexported filing fields are compared too.
				if !reflect.DeepEqual(got.Object, want.Object) {
					t.Errorf("event %d: %s %#v in protobuf,\n%#v in JSON", i, got.Type, got.Object, want.Object)
				}
				if e, ok := got.Object.(*EncodedObject); ok && i < 2 {
					if !e.Partial {
						t.Errorf("event %d: a whole object, want it partial", i)
					}
					if md := e.Object["metadata"].(map[string]any); len(md["resourceVersion"].(string)) <= intern.MaxValueLen {
						wantRV := want.Object.(*EncodedObject).Object["metadata"].(map[string]any)["resourceVersion"].(string)
						// Both decoders copy it rather than intern it: it is the
						// event's own, and the table would keep it.
						if unsafe.StringData(md["resourceVersion"].(string)) == unsafe.StringData(wantRV) {
							t.Errorf("event %d: resourceVersion interned", i)
						}
					}
				}
			}
			if b := fromProtobuf[2].Object.(*EncodedObject); b.Partial || b.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
				t.Errorf("bookmark %v, want it whole with its annotation", b)
			}
			if st, ok := fromProtobuf[3].Object.(*metav1.Status); !ok || st.Code != http.StatusGone {
				t.Errorf("error event %T %v, want the Status", fromProtobuf[3].Object, fromProtobuf[3].Object)
			}
		})
	}
}

// BenchmarkWatchEventPartial decodes a stream of watch events of realistic pods as the
// clients of NewPartialDynamicClients do, framing, envelope and object: in JSON, and in
// protobuf, whose objects are written as CBOR directly. It reports the time and the CPU
// of the process (the garbage collector's included) per event.
func BenchmarkWatchEventPartial(b *testing.B) {
	const n = 1000
	pods := newTestPods()
	var jsonStream, pbStream bytes.Buffer
	pbEvent := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	fw := protobuf.LengthDelimitedFramer.NewFrameWriter(&pbStream)
	for i := range n {
		obj := pods.append([]byte(`{"apiVersion":"v1","kind":"Pod",`), i)
		obj = slices.Delete(obj, len(`{"apiVersion":"v1","kind":"Pod",`), len(`{"apiVersion":"v1","kind":"Pod",{`))
		fmt.Fprintf(&jsonStream, "{\"type\":\"ADDED\",\"object\":%s}\n", obj)
		var pod corev1.Pod
		if err := json.Unmarshal(obj, &pod); err != nil {
			b.Fatal(err)
		}
		pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
		var buf bytes.Buffer
		if err := pbEvent.Encode(&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: protobufOf(b, &pod)}}, &buf); err != nil {
			b.Fatal(err)
		}
		fw.Write(buf.Bytes())
	}
	base := dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer
	ns := newNegotiatedSerializer(base, newDecoderPool(2), new(refusals), true, true, true, false)
	for _, bm := range []struct {
		name, mediaType string
		stream          []byte
	}{
		{"JSON", runtime.ContentTypeJSON, jsonStream.Bytes()},
		{"protobuf", contentTypeProtobuf, pbStream.Bytes()},
	} {
		b.Run(bm.name, func(b *testing.B) {
			info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), bm.mediaType)
			if !ok {
				b.Fatal("no serializer")
			}
			b.SetBytes(int64(len(bm.stream)))
			b.ReportAllocs()
			cpu0 := testenv.ProcessCPU()
			for b.Loop() {
				r := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(bm.stream)))
				d := restclientwatch.NewDecoder(streaming.NewDecoder(r, info.StreamSerializer.Serializer), info.Serializer)
				for range n {
					_, obj, err := d.Decode()
					if err != nil {
						b.Fatal(err)
					}
					if e, ok := obj.(*EncodedObject); !ok || !e.Partial {
						b.Fatalf("%T, want a partial *EncodedObject", obj)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/event")
			b.ReportMetric(float64(testenv.ProcessCPU()-cpu0)/float64(b.N*n), "cpu-ns/event")
		})
	}
}
