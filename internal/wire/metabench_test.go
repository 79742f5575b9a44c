package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	restclientwatch "k8s.io/client-go/rest/watch"

	"github.com/fleetwatch/fleetwatch/internal/testenv"
)

// benchMetadata returns the PartialObjectMetadata of the i-th pod as make bench loads
// them (test/bench/load.go): 7 labels, 6 annotations, an owner reference, and a
// server-side apply's managedFields entry.
func benchMetadata(i int) *metav1.PartialObjectMetadata {
	app := fmt.Sprintf("app-%d", i%12)
	ns := fmt.Sprintf("bench-%d", i%10)
	name := fmt.Sprintf("%s-%d", app, i)
	hash := fmt.Sprintf("%x", i%97)
	sum := sha256.Sum256([]byte(ns + name))
	yes := true
	return &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, UID: types.UID(fmt.Sprintf("%08x-1111-4000-8000-%012x", i, i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: metav1.Unix(1782900000+int64(i), 0),
			Labels: map[string]string{
				"app.kubernetes.io/name": app, "app.kubernetes.io/instance": app + "-" + ns,
				"app.kubernetes.io/version": "1.14.2", "app.kubernetes.io/part-of": "shop",
				"tier": "web", "pod-template-hash": hash, "app": app,
			},
			Annotations: map[string]string{
				"prometheus.io/scrape": "true", "prometheus.io/port": "9090",
				"kubectl.kubernetes.io/default-container": app, "checksum/config": hex.EncodeToString(sum[:]),
				"sidecar.istio.io/status":                        `{"initContainers":null,"containers":["istio-proxy"],"volumes":["istio-envoy","istio-data"],"imagePullSecrets":null,"revision":"default"}`,
				"cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: app + "-" + hash,
				UID: types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", i%12, i%12)), Controller: &yes, BlockOwnerDeletion: &yes}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", Time: &metav1.Time{}, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(strings.Repeat(`{"f:metadata":{"f:labels":{"f:app":{}}}}`, 40))}},
		},
	}
}

// BenchmarkWatchEventMetadata decodes a stream of protobuf watch events of the
// PartialObjectMetadata of make bench's pods: "fleetwatch" as the clients of
// NewPartialMetadataClients do (managedFields dropped, the partial object and its
// compact encoding), then, as a handler of a compact fleet gets it, the object decoded
// from that encoding ("+handler"); "client-go" as client-go's metadata client does (a
// typed object, managedFields and all). It reports the CPU of the process per event.
//
//	go test -run '^$' -bench WatchEventMetadata -count 6 ./internal/wire/
func BenchmarkWatchEventMetadata(b *testing.B) {
	const n = 1000
	var stream bytes.Buffer
	pbEvent := protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
	fw := protobuf.LengthDelimitedFramer.NewFrameWriter(&stream)
	for i := range n {
		var buf bytes.Buffer
		if err := pbEvent.Encode(&metav1.WatchEvent{Type: "ADDED", Object: runtime.RawExtension{Raw: protobufOf(b, benchMetadata(i))}}, &buf); err != nil {
			b.Fatal(err)
		}
		fw.Write(buf.Bytes())
	}
	ours := newNegotiatedSerializer(dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer, newDecoderPool(2), new(refusals), true, true, true, true)
	theirs := metadata.ConfigFor(&rest.Config{}).NegotiatedSerializer
	for _, bm := range []struct {
		name    string
		ns      runtime.NegotiatedSerializer
		handler bool
	}{
		{"fleetwatch", ours, false},
		{"fleetwatch+handler", ours, true},
		{"client-go", theirs, false},
	} {
		b.Run(bm.name, func(b *testing.B) {
			info, ok := runtime.SerializerInfoForMediaType(bm.ns.SupportedMediaTypes(), contentTypeProtobuf)
			if !ok {
				b.Fatal("no serializer")
			}
			b.ReportAllocs()
			cpu0 := testenv.ProcessCPU()
			for b.Loop() {
				r := info.StreamSerializer.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream.Bytes())))
				d := restclientwatch.NewDecoder(streaming.NewDecoder(r, info.StreamSerializer.Serializer), info.Serializer)
				for range n {
					_, obj, err := d.Decode()
					if err != nil {
						b.Fatal(err)
					}
					if bm.handler {
						e, ok := obj.(*EncodedObject)
						if !ok || !e.Partial || e.Encoded[0] != CompactMetadataFormat {
							b.Fatalf("%T, want a partial *EncodedObject in the compact encoding", obj)
						}
						if _, err := DecodeEncoded(e.Encoded); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			b.ReportMetric(float64(testenv.ProcessCPU()-cpu0)/float64(b.N*n), "cpu-ns/event")
		})
	}
}
