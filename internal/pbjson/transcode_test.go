package pbjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"

	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
	"github.com/fleetwatch/fleetwatch/internal/intern"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

var protoSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// encode returns obj as a kube-apiserver sends it in protobuf, and the JSON it sends for
// the object that protobuf decodes to.
func encode(t testing.TB, obj runtime.Object, gvk schema.GroupVersionKind) (pb, want []byte) {
	t.Helper()
	pb = protobufOf(t, obj, gvk)
	decoded, _, err := protoSerializer.Decode(pb, nil, nil)
	if err != nil {
		t.Fatalf("decoding the protobuf of %v: %v", gvk, err)
	}
	decoded.GetObjectKind().SetGroupVersionKind(gvk)
	if want, err = json.Marshal(decoded); err != nil {
		t.Fatalf("JSON of %v: %v", gvk, err)
	}
	return pb, want
}

// protobufOf returns obj as a kube-apiserver sends it in protobuf.
func protobufOf(t testing.TB, obj runtime.Object, gvk schema.GroupVersionKind) []byte {
	t.Helper()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var buf bytes.Buffer
	if err := protoSerializer.Encode(obj, &buf); err != nil {
		t.Fatalf("protobuf of %v: %v", gvk, err)
	}
	return buf.Bytes()
}

func transcode(t testing.TB, tr *Transcoder, pb []byte) ([]byte, error) {
	t.Helper()
	gvk, raw, err := Envelope(pb)
	if err != nil {
		t.Fatalf("Envelope: %v", err)
	}
	return tr.Object(gvk, raw)
}

// kinds are the kinds of client-go's scheme, in a stable order.
func kinds() []schema.GroupVersionKind {
	var all []schema.GroupVersionKind
	for gvk := range scheme.Scheme.AllKnownTypes() {
		all = append(all, gvk)
	}
	slices.SortFunc(all, func(a, b schema.GroupVersionKind) int { return strings.Compare(a.String(), b.String()) })
	return all
}

// TestSupported lists the kinds of client-go's scheme that cannot be transcoded, and
// requires the kinds that matter to be supported, but for StatefulSet, whose protobuf
// loses the apiVersion and kind of its volumeClaimTemplates (TestLossy).
func TestSupported(t *testing.T) {
	var unsupported []string
	for _, gvk := range kinds() {
		if !Supported(gvk) {
			typ := scheme.Scheme.AllKnownTypes()[gvk]
			why := fmt.Sprintf("loses %s", strings.Join(Losses(typ), ", "))
			if _, lossy := Lossy()[gvk]; !lossy {
				b := builder{seen: map[reflect.Type]*message{}}
				_, err := b.message(typ)
				why = err.Error()
			}
			unsupported = append(unsupported, fmt.Sprintf("%v: %s", gvk, why))
		}
	}
	t.Logf("%d of %d kinds unsupported:\n%s", len(unsupported), len(kinds()), strings.Join(unsupported, "\n"))
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "Pod"}, {Version: "v1", Kind: "PodList"},
		{Version: "v1", Kind: "ConfigMap"}, {Version: "v1", Kind: "Secret"},
		{Version: "v1", Kind: "Service"}, {Version: "v1", Kind: "Node"}, {Version: "v1", Kind: "Event"},
		{Version: "v1", Kind: "Namespace"}, {Group: "apps", Version: "v1", Kind: "Deployment"},
		{Group: "batch", Version: "v1", Kind: "Job"},
	} {
		if !Supported(gvk) {
			t.Errorf("%v is not supported", gvk)
		}
	}
}

// filler fills typed objects with random values, those of the types with their own
// encodings as the apiserver could hold them.
func filler(seed int64) *randfill.Filler {
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 3).MaxDepth(12).Funcs(
		func(q *resource.Quantity, c randfill.Continue) {
			formats := []resource.Format{resource.DecimalSI, resource.BinarySI, resource.DecimalExponent}
			*q = *resource.NewMilliQuantity(c.Int63n(1<<40), formats[c.Intn(len(formats))])
		},
		func(j *metav1.Time, c randfill.Continue) {
			if c.Intn(4) == 0 {
				*j = metav1.Time{}
				return
			}
			*j = metav1.Unix(c.Int63n(4e9), 0)
		},
		func(j *metav1.MicroTime, c randfill.Continue) {
			if c.Intn(4) == 0 {
				*j = metav1.MicroTime{}
				return
			}
			*j = metav1.NewMicroTime(time.Unix(c.Int63n(4e9), c.Int63n(1e9)))
		},
		func(j *runtime.RawExtension, c randfill.Continue) {
			*j = runtime.RawExtension{}
			if c.Bool() {
				s, _ := json.Marshal(c.String(8))
				j.Raw = []byte(fmt.Sprintf(`{"apiVersion":"v1", "kind":"Thing","n":%d,"s":%s}`, c.Int63(), s))
			}
		},
		func(j *metav1.FieldsV1, c randfill.Continue) {
			*j = metav1.FieldsV1{}
			j.SetRawBytes([]byte(fmt.Sprintf(`{"f:metadata":{"f:labels":{"f:%d":{}}}}`, c.Intn(100))))
		},
		func(j *metav1.TypeMeta, c randfill.Continue) {
			*j = metav1.TypeMeta{}
		},
		func(j *intstr.IntOrString, c randfill.Continue) {
			if c.Bool() {
				*j = intstr.FromInt32(c.Int31())
			} else {
				*j = intstr.FromString(c.String(10))
			}
		},
		func(j *float64, c randfill.Continue) {
			*j = c.NormFloat64() * float64(c.Int63n(1e6))
		},
	)
}

// TestTranscodeRandomObjects transcodes random objects of every supported kind and
// compares the JSON with encoding/json's of the object the protobuf decodes to.
func TestTranscodeRandomObjects(t *testing.T) {
	var tr Transcoder
	eachRandomObject(t, func(t *testing.T, i int, gvk schema.GroupVersionKind, obj runtime.Object) {
		pb, want := encode(t, obj, gvk)
		got, err := transcode(t, &tr, pb)
		if err != nil {
			t.Errorf("#%d: %v", i, err)
			return
		}
		if !bytes.Equal(got, want) {
			t.Errorf("#%d:\n got %s\nwant %s", i, got, want)
		}
	})
}

// eachRandomObject calls f, in a subtest per kind, with random objects of every kind
// that pbjson transcodes: 20 each, PBJSON_RUNS if set, 3 with -short.
func eachRandomObject(t *testing.T, f func(t *testing.T, i int, gvk schema.GroupVersionKind, obj runtime.Object)) {
	runs := 20
	if s := os.Getenv("PBJSON_RUNS"); s != "" {
		runs, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		runs = 3
	}
	types := scheme.Scheme.AllKnownTypes()
	for _, gvk := range kinds() {
		// A WatchEvent's envelope is read by apimachinery (package wire), never
		// transcoded; its protobuf does not decode through the scheme's serializer
		// either, for want of a kind of its own.
		if !Supported(gvk) || gvk.Kind == "WatchEvent" {
			continue
		}
		typ := types[gvk]
		t.Run(gvk.String(), func(t *testing.T) {
			for i := range runs {
				obj := reflect.New(typ).Interface().(runtime.Object)
				filler(int64(i)).Fill(obj)
				f(t, i, gvk, obj)
			}
		})
	}
}

// TestTranscodeUnknownField is a newer server's object: a field this package does not
// know is ErrUnsupported, not left out.
func TestTranscodeUnknownField(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	pb, _ := encode(t, pod, corev1.SchemeGroupVersion.WithKind("Pod"))
	gvk, raw, err := Envelope(pb)
	if err != nil {
		t.Fatal(err)
	}
	// Field 99 of the pod, a string.
	raw = append(slices.Clone(raw), 0x9a, 0x06, 1, 'x')
	var tr Transcoder
	if _, err := tr.Object(gvk, raw); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("got %v, want ErrUnsupported", err)
	}
}

// FuzzTranscode transcodes arbitrary protobuf as a pod and as a pod list: the
// transcoder never panics (a recovered panic is a failure here), and what it returns is
// JSON that encoding/json reads.
func FuzzTranscode(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"a": "b"}}}
	filler(1).Fill(pod)
	pb, _ := encode(f, pod, corev1.SchemeGroupVersion.WithKind("Pod"))
	_, raw, err := Envelope(pb)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add(raw[:len(raw)/2])
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
	f.Add([]byte{0x0a, 0x80})
	var tr Transcoder
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, gvk := range []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Pod"), corev1.SchemeGroupVersion.WithKind("PodList")} {
			out, err := tr.Object(gvk, data)
			if errors.Is(err, errPanicked) {
				t.Fatalf("%v: %v", gvk, err)
			}
			if err == nil && !json.Valid(out) {
				t.Fatalf("%v: not JSON: %s", gvk, out)
			}
		}
	})
}

// TestEnvelope: what is not a kube-apiserver's protobuf envelope is ErrInvalid; one with
// a content encoding is ErrUnsupported.
func TestEnvelope(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}}
	pb, _ := encode(t, pod, corev1.SchemeGroupVersion.WithKind("Pod"))
	gvk, _, err := Envelope(pb)
	if err != nil || gvk != corev1.SchemeGroupVersion.WithKind("Pod") {
		t.Fatalf("Envelope: %v, %v", gvk, err)
	}
	for name, data := range map[string][]byte{
		"empty":       nil,
		"JSON":        []byte(`{"kind":"Pod"}`),
		"prefix only": pb[:4],
		"cut":         pb[:len(pb)-1],
	} {
		if _, _, err := Envelope(data); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", name, err)
		}
	}
	// Field 3 of the envelope, contentEncoding: "gzip".
	gz := append(slices.Clone(pb), 0x1a, 4, 'g', 'z', 'i', 'p')
	if _, _, err := Envelope(gz); !errors.Is(err, ErrUnsupported) {
		t.Errorf("content encoding: got %v, want ErrUnsupported", err)
	}
}

// BenchmarkTranscode transcodes the realistic pod of package jsondec's tests, without
// its managedFields, from protobuf, next to encoding/json's Marshal of the typed pod:
// the kube-apiserver's cost of the same JSON.
func BenchmarkTranscode(b *testing.B) {
	data, err := os.ReadFile("../jsondec/testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	pod := &corev1.Pod{}
	if err := json.Unmarshal(data, pod); err != nil {
		b.Fatal(err)
	}
	pod.ManagedFields = nil
	pb, want := encode(b, pod, corev1.SchemeGroupVersion.WithKind("Pod"))
	gvk, raw, err := Envelope(pb)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("pbjson", func(b *testing.B) {
		var tr Transcoder
		b.SetBytes(int64(len(want)))
		for b.Loop() {
			if _, err := tr.Object(gvk, raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(want)))
		for b.Loop() {
			if _, err := json.Marshal(pod); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// partialCBOR returns what the wire did before ObjectPartialCBOR: the object's JSON,
// decoded by d.ObjectPartialCBOR.
func partialCBOR(tr *Transcoder, d *jsondec.Decoder, gvk schema.GroupVersionKind, raw []byte) (map[string]any, []byte, error) {
	js, err := tr.Object(gvk, raw)
	if err != nil {
		return nil, nil, err
	}
	return d.ObjectPartialCBOR(js)
}

// checkPartialCBOR requires the direct CBOR of raw, and its partial map, to be those of
// its JSON (partialCBOR), byte for byte, with the same strings interned, and that of
// ObjectPartialCBOR too. It returns whether the direct CBOR was written.
func checkPartialCBOR(t testing.TB, tr *Transcoder, d *jsondec.Decoder, gvk schema.GroupVersionKind, raw []byte) (direct bool) {
	t.Helper()
	d.DropManagedFields = tr.DropManagedFields
	wantM, want, wantErr := partialCBOR(tr, d, gvk, raw)
	// The direct path itself, which must not fall back here.
	gotM, got, err := tr.directCBOR(gvk, raw, d)
	if errors.Is(err, errIndirect) {
		gotM, got, err = tr.ObjectPartialCBOR(gvk, raw, d)
	} else {
		direct = true
	}
	if errors.Is(err, errPanicked) {
		t.Fatalf("%v: %v", gvk, err)
	}
	if (err == nil) != (wantErr == nil) || errors.Is(err, ErrUnsupported) != errors.Is(wantErr, ErrUnsupported) ||
		errors.Is(err, ErrInvalid) != errors.Is(wantErr, ErrInvalid) {
		t.Fatalf("%v: direct: %v, by JSON: %v", gvk, err, wantErr)
	}
	if err != nil {
		return direct
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%v: CBOR differs at byte %d of %d (want %d):\n got …%x\nwant …%x", gvk, i, len(got), len(want),
			got[max(i-16, 0):min(i+32, len(got))], want[max(i-16, 0):min(i+32, len(want))])
	}
	if !reflect.DeepEqual(gotM, wantM) {
		t.Fatalf("%v: map differs:\n got %#v\nwant %#v", gvk, gotM, wantM)
	}
	if got != nil && cap(got) != len(got) {
		t.Errorf("%v: CBOR of %d bytes in %d", gvk, len(got), cap(got))
	}
	checkInterned(t, gotM, wantM, ctxRoot)
	return direct
}

// checkInterned requires the short strings of got, keys and values, to share their bytes
// with want's, as those of one jsondec.Decoder do, but for the uid and resourceVersion
// of the metadata, which both copy.
func checkInterned(t testing.TB, got, want map[string]any, ctx context) {
	t.Helper()
	for k, w := range want {
		if ctx == ctxMetadata && (k == "uid" || k == "resourceVersion") {
			// One-byte strings come from the runtime's static table, shared anyway.
			if g, ok := got[k].(string); ok && len(g) > 1 && unsafe.StringData(g) == unsafe.StringData(w.(string)) {
				t.Errorf("value %q of %q is interned", g, k)
			}
			continue
		}
		for gk := range got {
			if gk == k && unsafe.StringData(gk) != unsafe.StringData(k) {
				t.Errorf("key %q is not interned", k)
			}
		}
		switch w := w.(type) {
		case string:
			if g := got[k].(string); len(g) <= intern.MaxValueLen && unsafe.StringData(g) != unsafe.StringData(w) {
				t.Errorf("value %q of %q is not interned", g, k)
			}
		case map[string]any:
			sub := ctxNone
			if ctx == ctxRoot && k == "metadata" {
				sub = ctxMetadata
			}
			checkInterned(t, got[k].(map[string]any), w, sub)
		}
	}
}

// TestObjectPartialCBORRandomObjects writes random objects of every supported kind as
// CBOR, keeping managedFields and dropping them: what it writes and builds is what
// jsondec's ObjectPartialCBOR returns for their JSON.
func TestObjectPartialCBORRandomObjects(t *testing.T) {
	var d jsondec.Decoder
	trs := []*Transcoder{{}, {Options: Options{DropManagedFields: true}}}
	eachRandomObject(t, func(t *testing.T, i int, gvk schema.GroupVersionKind, obj runtime.Object) {
		pb, _ := encode(t, obj, gvk)
		gvk, raw, err := Envelope(pb)
		if err != nil {
			t.Fatal(err)
		}
		for _, tr := range trs {
			if !checkPartialCBOR(t, tr, &d, gvk, raw) {
				t.Errorf("#%d (DropManagedFields %v): not written directly", i, tr.DropManagedFields)
			}
		}
	})
}

// TestObjectPartialCBORCorners writes objects with the values whose JSON is not their
// protobuf's bytes, and those whose JSON only jsondec can judge, as CBOR: the CBOR and
// the map are those of their JSON.
func TestObjectPartialCBORCorners(t *testing.T) {
	many := map[string]string{}
	for i := range 30 {
		many[fmt.Sprintf("k%02d", i)] = strings.Repeat("v", i*10)
	}
	odd := "a\xffb\xc3<>&\u2028\u2029\"\\\x00\x1f\u00e9\ufffd" + "\xed\xa0\x80"
	long := strings.Repeat("x", intern.MaxValueLen+1)
	raw := func(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
	deep := strings.Repeat("[", jsondec.MaxDepth-2) + strings.Repeat("]", jsondec.MaxDepth-2)
	pod := corev1.SchemeGroupVersion.WithKind("Pod")
	configMap := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	secret := corev1.SchemeGroupVersion.WithKind("Secret")
	revision := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ControllerRevision"}
	for _, tc := range []struct {
		name string
		obj  runtime.Object
		gvk  schema.GroupVersionKind
		// indirect: the CBOR is written by way of the JSON.
		indirect bool
	}{
		{name: "empty pod", obj: &corev1.Pod{}, gvk: pod},
		{name: "odd strings", gvk: configMap, obj: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: odd, Namespace: odd, UID: "\xff", ResourceVersion: long,
				Labels: map[string]string{"a": odd, "b": long, "c": ""}, Annotations: map[string]string{"x": odd}},
			Data: map[string]string{odd[4 : len(odd)-3]: odd, "": ""}}},
		{name: "keys not UTF-8", gvk: configMap, indirect: true, obj: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "n"}, Data: map[string]string{"\xff": "a", "\xfe": "b"}}},
		{name: "labels keys not UTF-8", gvk: configMap, indirect: true, obj: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"\xff": "a"}}}},
		{name: "many labels", gvk: configMap, obj: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: many, Annotations: many}, Data: many}},
		{name: "empty maps", gvk: configMap, obj: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{}}, Data: map[string]string{}}},
		{name: "bytes", gvk: secret, obj: &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"},
			Data: map[string][]byte{"a": {0, 1, 2, 0xff}, "b": nil, "c": []byte(odd), "d": bytes.Repeat([]byte{7}, 300)}}},
		{name: "raw JSON", gvk: revision, obj: &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "r"},
			Data: raw(` { "a" : [ 1, -0, 3.0, 1e2, 1E-7, -1.5e300, 12345678901234567890, 9223372036854775807, -9223372036854775808, 0.1 ],
				"s": "\u00e9\ud83d\ude00\ud800 \/ \n <>& ` + "\xff\u2028" + `", "t": true, "f": false, "n": null, "o": {}, "e": [] } `)}},
		{name: "raw string", gvk: revision, obj: &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: raw(`"s"`)}},
		{name: "raw repeated key", gvk: revision, indirect: true, obj: &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: raw(`{"a":{"b":1,"b":2}}`)}},
		{name: "raw number out of range", gvk: revision, indirect: true, obj: &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: raw(`[1e400]`)}},
		{name: "raw not JSON", gvk: revision, indirect: true, obj: &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: raw(`{"a":`)}},
		{name: "raw deep", gvk: revision, obj: &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: raw("[" + deep + "]")}},
		{name: "raw too deep", gvk: revision, indirect: true, obj: &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: raw("[[" + deep + "]]")}},
		{name: "managed fields", gvk: pod, obj: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: "m", Operation: metav1.ManagedFieldsOperationApply, Time: &metav1.Time{Time: time.Unix(1e9, 0)},
			FieldsType: "FieldsV1", FieldsV1: fieldsV1(`{"f:metadata":{"f:labels":{".":{},"f:a":{}}}}`)}}}}},
		{name: "int or string, quantity, times", gvk: pod, obj: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.Unix(1e9, 0), DeletionTimestamp: &metav1.Time{}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"cpu": resource.MustParse("100m"), "memory": resource.MustParse("1.5Gi")}},
				Ports:     []corev1.ContainerPort{{ContainerPort: 80}},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}},
					TerminationGracePeriodSeconds: new(int64)},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(-8080)}}},
			}}},
			Status: corev1.PodStatus{StartTime: &metav1.Time{Time: time.Unix(-1e10, 0)}}}},
		{name: "kind in list", gvk: corev1.SchemeGroupVersion.WithKind("PodList"), obj: &corev1.PodList{
			ListMeta: metav1.ListMeta{ResourceVersion: "12"}, Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {}}}},
		{name: "event", gvk: eventsv1.SchemeGroupVersion.WithKind("Event"), obj: &eventsv1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: "e"}, EventTime: metav1.NewMicroTime(time.Unix(1e9, 123456789)),
			Series: &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NewMicroTime(time.Unix(1e9, 999))}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pb := protobufOf(t, tc.obj, tc.gvk)
			gvk, raw, err := Envelope(pb)
			if err != nil {
				t.Fatal(err)
			}
			var d jsondec.Decoder
			for _, drop := range []bool{false, true} {
				tr := Transcoder{Options: Options{DropManagedFields: drop}}
				if direct := checkPartialCBOR(t, &tr, &d, gvk, raw); direct == tc.indirect {
					t.Errorf("written directly: %v, want %v", direct, !tc.indirect)
				}
			}
		})
	}
}

func fieldsV1(raw string) *metav1.FieldsV1 {
	f := &metav1.FieldsV1{}
	f.SetRawString(raw)
	return f
}

// TestScalarCBOR writes numbers as CBOR as jsondec reads their JSON: the floats that
// encoding/json writes without a fraction are integers, if they fit an int64.
func TestScalarCBOR(t *testing.T) {
	f64 := func(f float64) uint64 { return math.Float64bits(f) }
	f32 := func(f float32) uint64 { return uint64(math.Float32bits(f)) }
	for _, tc := range []struct {
		k kind
		v uint64
	}{
		{kindFloat64, f64(3)}, {kindFloat64, f64(math.Copysign(0, -1))}, {kindFloat64, f64(0.1)},
		{kindFloat64, f64(1e20)}, {kindFloat64, f64(1e21)}, {kindFloat64, f64(123456789012345678)},
		{kindFloat64, f64(1 << 63)}, {kindFloat64, f64(-(1 << 63))}, {kindFloat64, f64(9.999999e-7)},
		{kindFloat64, f64(1e-7)}, {kindFloat64, f64(math.MaxFloat64)}, {kindFloat64, f64(math.SmallestNonzeroFloat64)},
		{kindFloat64, f64(-2.5e-300)}, {kindFloat64, f64(1234567.0)},
		{kindFloat32, f32(0.1)}, {kindFloat32, f32(3)}, {kindFloat32, f32(1e21)}, {kindFloat32, f32(-1e-7)},
		{kindFloat32, f32(math.MaxFloat32)}, {kindFloat32, f32(16777217)},
		{kindUint, math.MaxUint64}, {kindUint, math.MaxInt64}, {kindUint, math.MaxInt64 + 1}, {kindUint, 24},
		{kindInt, uint64(1 << 63)}, {kindInt, math.MaxUint64}, {kindInt32, uint64(1<<64 - 1<<31)}, {kindInt, 255}, {kindInt, 65536},
		{kindBool, 1}, {kindBool, 0},
	} {
		var tr Transcoder
		if err := tr.scalar(tc.k, tc.v); err != nil {
			t.Fatal(err)
		}
		js := "[" + string(tr.out) + "]"
		tr.out, tr.cbor = tr.out[:0], true
		if err := tr.scalar(tc.k, tc.v); err != nil {
			t.Fatal(err)
		}
		var d jsondec.Decoder
		_, want, err := d.ObjectCBOR([]byte(`{"v":` + js + `}`))
		if err != nil {
			t.Fatal(err)
		}
		// The map's head, the key, the array's head.
		want = want[1+2+1:]
		if !bytes.Equal(tr.out, want) {
			t.Errorf("%s (kind %d): got %x, want %x", js, tc.k, tr.out, want)
		}
	}
}

// FuzzTranscodeCBOR writes arbitrary protobuf as a pod, a pod list and a controller
// revision (a raw extension), as CBOR directly and by way of JSON: both fail, or both
// return the same CBOR and map, and neither panics.
func FuzzTranscodeCBOR(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"a": "b"}}}
	filler(1).Fill(pod)
	revision := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "r"}, Data: runtime.RawExtension{Raw: []byte(`{"a":[1,2.5,"x"]}`)}}
	for _, obj := range []runtime.Object{pod, revision} {
		gvk := corev1.SchemeGroupVersion.WithKind("Pod")
		if obj == revision {
			gvk = appsv1.SchemeGroupVersion.WithKind("ControllerRevision")
		}
		_, raw, err := Envelope(protobufOf(f, obj, gvk))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		f.Add(raw[:len(raw)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x00})
	var d jsondec.Decoder
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, gvk := range []schema.GroupVersionKind{corev1.SchemeGroupVersion.WithKind("Pod"),
			corev1.SchemeGroupVersion.WithKind("PodList"), appsv1.SchemeGroupVersion.WithKind("ControllerRevision")} {
			for _, drop := range []bool{false, true} {
				tr := Transcoder{Options: Options{DropManagedFields: drop}}
				checkPartialCBOR(t, &tr, &d, gvk, data)
			}
		}
	})
}

// BenchmarkObjectPartialCBOR decodes a pod from protobuf for the clients that keep it as
// CBOR (wire.NewPartialDynamicClients): by way of its JSON (Object, then jsondec's
// ObjectPartialCBOR), and directly (ObjectPartialCBOR); and, for comparison, from the
// JSON that the kube-apiserver would have sent (jsondec's ObjectPartialCBOR alone). The
// pods: aggregatetest.RealisticPod without managedFields, managedFields dropped, as
// fleetwatch caches pods by default; and package jsondec's realistic pod, with its
// managedFields kept.
func BenchmarkObjectPartialCBOR(b *testing.B) {
	realistic := &corev1.Pod{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(aggregatetest.RealisticPod("shop", "checkout-0", "1234", nil).Object, realistic); err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile("../jsondec/testdata/pod.json")
	if err != nil {
		b.Fatal(err)
	}
	managed := &corev1.Pod{}
	if err := json.Unmarshal(data, managed); err != nil {
		b.Fatal(err)
	}
	for _, bm := range []struct {
		name string
		pod  *corev1.Pod
		drop bool
	}{
		{"realistic/dropManagedFields", realistic, true},
		{"managedFields", managed, false},
	} {
		pb, js := encode(b, bm.pod, corev1.SchemeGroupVersion.WithKind("Pod"))
		gvk, raw, err := Envelope(pb)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(bm.name+"/byJSON", func(b *testing.B) {
			tr := Transcoder{Options: Options{DropManagedFields: bm.drop}}
			d := jsondec.Decoder{DropManagedFields: bm.drop}
			b.ReportAllocs()
			cpu0 := testenv.ProcessCPU()
			for b.Loop() {
				if _, cbor, err := partialCBOR(&tr, &d, gvk, raw); err != nil || cbor == nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
		b.Run(bm.name+"/direct", func(b *testing.B) {
			tr := Transcoder{Options: Options{DropManagedFields: bm.drop}}
			d := jsondec.Decoder{DropManagedFields: bm.drop}
			b.ReportAllocs()
			cpu0 := testenv.ProcessCPU()
			for b.Loop() {
				if _, cbor, err := tr.ObjectPartialCBOR(gvk, raw, &d); err != nil || cbor == nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
		b.Run(bm.name+"/JSON", func(b *testing.B) {
			d := jsondec.Decoder{DropManagedFields: bm.drop}
			b.ReportAllocs()
			cpu0 := testenv.ProcessCPU()
			for b.Loop() {
				if _, cbor, err := d.ObjectPartialCBOR(js); err != nil || cbor == nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu0)
		})
	}
}

// reportCPU reports the CPU of the process (the garbage collector's included) per
// operation since cpu0, which a busy machine inflates less than the time.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(testenv.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// TestDropManagedFieldsWhereJSONDecDrops: DropManagedFields leaves out the managedFields
// that jsondec.Decoder drops, the object's own or a list's items', and keeps those of a
// template, in JSON and in CBOR.
func TestDropManagedFieldsWhereJSONDecDrops(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "apps/v1",
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{}}`)}}
	deployment := func(name string) appsv1.Deployment {
		d := appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ManagedFields: managed}}
		d.Spec.Template.ObjectMeta = metav1.ObjectMeta{Labels: map[string]string{"app": name}, ManagedFields: managed}
		return d
	}
	one := deployment("a")
	list := &appsv1.DeploymentList{Items: []appsv1.Deployment{deployment("a"), deployment("b")}}
	for _, tc := range []struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{
		{&one, appsv1.SchemeGroupVersion.WithKind("Deployment")},
		{list, appsv1.SchemeGroupVersion.WithKind("DeploymentList")},
	} {
		t.Run(tc.gvk.Kind, func(t *testing.T) {
			pb, js := encode(t, tc.obj, tc.gvk)
			gvk, raw, err := Envelope(pb)
			if err != nil {
				t.Fatal(err)
			}
			var want map[string]any
			dropping := jsondec.Decoder{DropManagedFields: true}
			if tc.gvk.Kind == "DeploymentList" {
				l, err := dropping.List(js)
				if err != nil {
					t.Fatal(err)
				}
				want = l.UnstructuredContent()
			} else if want, err = dropping.Object(js); err != nil {
				t.Fatal(err)
			}
			tr := Transcoder{Options: Options{DropManagedFields: true}}
			out, err := tr.Object(gvk, raw)
			if err != nil {
				t.Fatal(err)
			}
			// Read as the wire reads it, by a Decoder that drops nothing (more).
			var got map[string]any
			var plain jsondec.Decoder
			if tc.gvk.Kind == "DeploymentList" {
				l, err := plain.List(out)
				if err != nil {
					t.Fatal(err)
				}
				got = l.UnstructuredContent()
			} else if got, err = plain.Object(out); err != nil {
				t.Fatal(err)
			}
			wantJSON, _ := json.Marshal(want)
			gotJSON, _ := json.Marshal(got)
			if !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("transcoded with DropManagedFields:\n%s\njsondec dropping them:\n%s", gotJSON, wantJSON)
			}
			if n := strings.Count(string(out), `"managedFields"`); n != strings.Count(string(wantJSON), `"managedFields"`) || n == 0 {
				t.Errorf("%d managedFields kept, want the templates' (%s)", n, out)
			}
			if tc.gvk.Kind == "Deployment" {
				var d jsondec.Decoder
				d.DropManagedFields = true
				checkPartialCBOR(t, &tr, &d, gvk, raw)
			}
		})
	}
}

// TestObjectPartialCBORSharesNoMemory: ObjectPartialCBOR reads the protobuf through
// unsafe strings and writes texts through its scratch space; what it returns (the map,
// whose long strings are not interned, and the CBOR) changes neither when the protobuf
// is overwritten nor when the Transcoder writes another object, also after a write that
// panicked and took the JSON detour.
func TestObjectPartialCBORSharesNoMemory(t *testing.T) {
	long := strings.Repeat("v", intern.MaxValueLen+1)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + long, Namespace: "ns", UID: "u-1", ResourceVersion: "7",
		Labels: map[string]string{"app": long, "key": "bad \xfe utf-8", "tier": "web"},
		// Raw JSON, which jsondec writes as CBOR (AppendValueCBOR) from the protobuf.
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)}}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("o", 300), Namespace: "other",
		Labels: map[string]string{"app": strings.Repeat("w", 300), "key": "\xff\xff worse"}}}
	gvk := corev1.SchemeGroupVersion.WithKind("Pod")
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panics=%v", panics), func(t *testing.T) {
			var tr Transcoder
			var d jsondec.Decoder
			pb, _ := encode(t, pod, gvk)
			_, raw, err := Envelope(pb)
			if err != nil {
				t.Fatal(err)
			}
			wantM, want, err := partialCBOR(&tr, &d, gvk, raw)
			if err != nil {
				t.Fatal(err)
			}
			if panics {
				testHookCBOR = func() { panic("a bug") }
				t.Cleanup(func() { testHookCBOR = nil })
			}
			if !panics {
				if _, _, err := tr.directCBOR(gvk, raw, &d); err != nil {
					t.Fatalf("not written directly: %v", err)
				}
			}
			m, cbor, err := tr.ObjectPartialCBOR(gvk, raw, &d)
			testHookCBOR = nil
			if err != nil || !bytes.Equal(cbor, want) || !reflect.DeepEqual(m, wantM) {
				t.Fatalf("ObjectPartialCBOR: %v, %x, %v; want %x, %v", err, cbor, m, want, wantM)
			}
			snapshot := func() string { return fmt.Sprintf("%#v %x", m, cbor) }
			before := snapshot()
			for i := range raw {
				raw[i] = 0xff
			}
			pb2, _ := encode(t, other, gvk)
			_, raw2, err := Envelope(pb2)
			if err != nil {
				t.Fatal(err)
			}
			if !checkPartialCBOR(t, &tr, &d, gvk, raw2) {
				t.Error("the next object was not written directly")
			}
			if after := snapshot(); after != before {
				t.Errorf("what was returned changed:\n%s\n%s", before, after)
			}
		})
	}
}

// TestTranscodePartialObjectMetadata transcodes random meta.k8s.io/v1
// PartialObjectMetadata and PartialObjectMetadataList objects, which client-go's scheme
// does not have, as TestTranscodeRandomObjects does the kinds it has.
func TestTranscodePartialObjectMetadata(t *testing.T) {
	s := protobuf.NewSerializer(metaKinds, metaKinds)
	var tr Transcoder
	for _, obj := range []runtime.Object{&metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadataList{}} {
		gvks, _, err := metaKinds.ObjectKinds(obj)
		if err != nil {
			t.Fatal(err)
		}
		gvk := gvks[0]
		if !Supported(gvk) {
			t.Fatalf("%v is not supported", gvk)
		}
		t.Run(gvk.Kind, func(t *testing.T) {
			for i := range 20 {
				obj := obj.DeepCopyObject()
				filler(int64(i)).Fill(obj)
				obj.GetObjectKind().SetGroupVersionKind(gvk)
				var buf bytes.Buffer
				if err := s.Encode(obj, &buf); err != nil {
					t.Fatal(err)
				}
				decoded, _, err := s.Decode(buf.Bytes(), nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				decoded.GetObjectKind().SetGroupVersionKind(gvk)
				want, err := json.Marshal(decoded)
				if err != nil {
					t.Fatal(err)
				}
				got, err := transcode(t, &tr, buf.Bytes())
				if err != nil {
					t.Fatalf("#%d: %v", i, err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("#%d:\n got %s\nwant %s", i, got, want)
				}
			}
		})
	}
}

// TestObjectPartialCBORPrefix writes random PartialObjectMetadata objects as CBOR with
// the Decoder's CBORPrefix (package wire's metadata clients): directly, the prefix and
// then the CBOR that jsondec writes for their JSON with that prefix, byte for byte.
func TestObjectPartialCBORPrefix(t *testing.T) {
	s := protobuf.NewSerializer(metaKinds, metaKinds)
	gvk := metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata")
	d := jsondec.Decoder{CBORPrefix: []byte{3}}
	for _, drop := range []bool{false, true} {
		tr := Transcoder{Options: Options{DropManagedFields: drop}}
		for i := range 30 {
			obj := &metav1.PartialObjectMetadata{}
			filler(int64(i)).Fill(obj)
			obj.SetGroupVersionKind(gvk)
			var buf bytes.Buffer
			if err := s.Encode(obj, &buf); err != nil {
				t.Fatal(err)
			}
			kind, raw, err := Envelope(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if !checkPartialCBOR(t, &tr, &d, kind, raw) {
				t.Errorf("#%d: not written directly", i)
			}
			_, cbor, err := tr.ObjectPartialCBOR(kind, raw, &d)
			if err != nil || len(cbor) == 0 || cbor[0] != 3 {
				t.Fatalf("#%d: %v, % x", i, err, cbor[:min(len(cbor), 4)])
			}
		}
	}
}

// TestOlderServer: a struct that is not a pointer is on the wire of every server whose
// type has it, even empty; absent, the server is older than this schema, and its JSON
// has no such member. A CSINode of a Kubernetes 1.36 apiserver has no status (new in
// 1.37), which encoding/json would write as {}.
func TestOlderServer(t *testing.T) {
	gvk := storagev1.SchemeGroupVersion.WithKind("CSINode")
	node := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", ResourceVersion: "7"},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: "csi.example", NodeID: "n1"}}},
	}
	raw, err := node.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var tr Transcoder
	// As this schema's server writes it: the empty status is on the wire, and in the JSON.
	want, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tr.Object(gvk, raw)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), `"status":{}`) || !sameObject(t, got, want) {
		t.Fatalf("as written by a server that has the status:\n%s\nwant\n%s", got, want)
	}
	// As a 1.36 server writes it: without field 3, the status.
	older := protobufWithout(t, raw, 3)
	got, err = tr.Object(gvk, older)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(got, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["status"]; ok || m["spec"] == nil {
		t.Fatalf("as written by a server without the status: %s", got)
	}
}

// sameObject reports whether the JSON objects got, less its kind and apiVersion, and
// want are equal.
func sameObject(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w map[string]any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	delete(g, "kind")
	delete(g, "apiVersion")
	return reflect.DeepEqual(g, w)
}

// protobufWithout returns the message raw without its fields of number num.
func protobufWithout(t *testing.T, raw []byte, num uint64) []byte {
	t.Helper()
	var out []byte
	for b := raw; len(b) > 0; {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag&7 != 2 {
			t.Fatalf("not a length-delimited field at %x", b)
		}
		size, m := binary.Uvarint(b[n:])
		end := n + m + int(size)
		if tag>>3 != num {
			out = append(out, b[:end]...)
		}
		b = b[end:]
	}
	return out
}
