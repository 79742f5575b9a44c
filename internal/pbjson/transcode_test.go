package pbjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/randfill"
)

var protoSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// encode returns obj as a kube-apiserver sends it in protobuf, and the JSON it sends for
// the object that protobuf decodes to.
func encode(t testing.TB, obj runtime.Object, gvk schema.GroupVersionKind) (pb, want []byte) {
	t.Helper()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	var buf bytes.Buffer
	if err := protoSerializer.Encode(obj, &buf); err != nil {
		t.Fatalf("protobuf of %v: %v", gvk, err)
	}
	decoded, _, err := protoSerializer.Decode(buf.Bytes(), nil, nil)
	if err != nil {
		t.Fatalf("decoding the protobuf of %v: %v", gvk, err)
	}
	decoded.GetObjectKind().SetGroupVersionKind(gvk)
	if want, err = json.Marshal(decoded); err != nil {
		t.Fatalf("JSON of %v: %v", gvk, err)
	}
	return buf.Bytes(), want
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
// requires the kinds that matter to be supported.
func TestSupported(t *testing.T) {
	var unsupported []string
	for _, gvk := range kinds() {
		if !Supported(gvk) {
			b := builder{seen: map[reflect.Type]*message{}}
			_, err := b.message(scheme.Scheme.AllKnownTypes()[gvk])
			unsupported = append(unsupported, fmt.Sprintf("%v: %v", gvk, err))
		}
	}
	t.Logf("%d of %d kinds unsupported:\n%s", len(unsupported), len(kinds()), strings.Join(unsupported, "\n"))
	for _, gvk := range []schema.GroupVersionKind{
		{Version: "v1", Kind: "Pod"}, {Version: "v1", Kind: "PodList"},
		{Version: "v1", Kind: "ConfigMap"}, {Version: "v1", Kind: "Secret"},
		{Version: "v1", Kind: "Service"}, {Version: "v1", Kind: "Node"}, {Version: "v1", Kind: "Event"},
		{Version: "v1", Kind: "Namespace"}, {Group: "apps", Version: "v1", Kind: "Deployment"},
		{Group: "apps", Version: "v1", Kind: "StatefulSet"}, {Group: "batch", Version: "v1", Kind: "Job"},
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
				pb, want := encode(t, obj, gvk)
				got, err := transcode(t, &tr, pb)
				if err != nil {
					t.Errorf("#%d: %v", i, err)
					continue
				}
				if !bytes.Equal(got, want) {
					t.Errorf("#%d:\n got %s\nwant %s", i, got, want)
				}
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
