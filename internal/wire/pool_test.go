package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	goruntime "runtime"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// poolClient is one kind of client of this package, as its negotiated serializer.
type poolClient struct {
	name                                      string
	dropManagedFields, encode, partial, metad bool
}

var poolClients = func() []poolClient {
	var clients []poolClient
	for _, c := range []poolClient{
		{name: "plain"},
		{name: "encoding", encode: true},
		{name: "partial", encode: true, partial: true},
		{name: "metadata", encode: true, partial: true, metad: true},
	} {
		for _, drop := range []bool{true, false} {
			c.dropManagedFields = drop
			clients = append(clients, c)
		}
	}
	return clients
}()

func (c poolClient) String() string {
	return fmt.Sprintf("%s (drop managedFields: %v)", c.name, c.dropManagedFields)
}

func (c poolClient) serializer(pool decoderPool) runtime.NegotiatedSerializer {
	base := dynamic.ConfigFor(&rest.Config{}).NegotiatedSerializer
	return newNegotiatedSerializer(base, pool, new(refusals), c.dropManagedFields, c.encode, c.partial, c.metad)
}

// poolDecode is one decoding that a client makes with a Decoder of its pool.
type poolDecode struct {
	name string
	do   func(t *testing.T, ns runtime.NegotiatedSerializer) any
}

// poolDecodes are the decodings of every path that takes a Decoder from a pool: objects
// and lists in JSON, the objects of watch events in JSON and in protobuf (partial,
// metadata compact or not), and watch events' envelopes.
func poolDecodes(t *testing.T) []poolDecode {
	var pod corev1.Pod
	if err := json.Unmarshal(podJSON, &pod); err != nil {
		t.Fatal(err)
	}
	pod.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	podProtobuf := protobufOf(t, &pod)
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: pod.ObjectMeta}
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	metaProtobuf := protobufOf(t, meta)
	decode := func(mediaType string, data []byte, into func() runtime.Object) func(*testing.T, runtime.NegotiatedSerializer) any {
		return func(t *testing.T, ns runtime.NegotiatedSerializer) any {
			info, ok := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), mediaType)
			if !ok {
				t.Fatalf("no %s serializer", mediaType)
			}
			var in runtime.Object
			if into != nil {
				in = into()
			}
			obj, _, err := info.Serializer.Decode(data, nil, in)
			if err != nil {
				return err.Error()
			}
			if e, ok := obj.(*EncodedObject); ok {
				return struct {
					Object  map[string]any
					Encoded []byte
					Partial bool
				}{e.Object, e.Encoded, e.Partial}
			}
			return obj
		}
	}
	return []poolDecode{
		{"a watched object", decode(runtime.ContentTypeJSON, podJSON, nil)},
		{"a watched object's metadata", decode(runtime.ContentTypeJSON, metaJSON, nil)},
		{"an object read", decode(runtime.ContentTypeJSON, podJSON, func() runtime.Object { return new(unstructured.Unstructured) })},
		{"a list", decode(runtime.ContentTypeJSON, []byte(podListJSON(2)), func() runtime.Object { return new(unstructured.UnstructuredList) })},
		{"a watched object in protobuf", decode(contentTypeProtobuf, podProtobuf, nil)},
		{"a watched object's metadata in protobuf", decode(contentTypeProtobuf, metaProtobuf, nil)},
		{"a watch event", func(t *testing.T, ns runtime.NegotiatedSerializer) any {
			info, _ := runtime.SerializerInfoForMediaType(ns.SupportedMediaTypes(), runtime.ContentTypeJSON)
			event := new(metav1.WatchEvent)
			data := fmt.Appendf(nil, `{"type":"ADDED","object":%s}`, podJSON)
			if _, _, err := info.StreamSerializer.Serializer.Decode(data, nil, event); err != nil {
				return err.Error()
			}
			return event
		}},
	}
}

// TestPoolKeepsNoSettingsOfAnotherClient: every client of the process shares one pool of
// Decoders (decoders), so a Decoder that one client sets up for its use (the metadata
// clients' CBORPrefix and Rewrite, DropManagedFields) is the next one's. Each decoding
// of every client gives what it gives with a pool of its own, after the others have
// used the pool's one Decoder, and with a Decoder handed back with every setting wrong.
func TestPoolKeepsNoSettingsOfAnotherClient(t *testing.T) {
	decodes := poolDecodes(t)
	want := map[string]any{}
	key := func(c poolClient, d poolDecode) string { return c.String() + ": " + d.name }
	for _, c := range poolClients {
		ns := c.serializer(newDecoderPool(1))
		for _, d := range decodes {
			want[key(c, d)] = d.do(t, ns)
		}
	}
	check := func(t *testing.T, c poolClient, d poolDecode, got any) {
		t.Helper()
		if !reflect.DeepEqual(got, want[key(c, d)]) {
			t.Errorf("%s: %v\nwith a pool of its own: %v", key(c, d), got, want[key(c, d)])
		}
	}

	shared := newDecoderPool(1)
	serializers := make([]runtime.NegotiatedSerializer, len(poolClients))
	for i, c := range poolClients {
		serializers[i] = c.serializer(shared)
	}
	t.Run("after each other", func(t *testing.T) {
		for range 2 {
			for _, d := range decodes {
				for i, c := range poolClients {
					check(t, c, d, d.do(t, serializers[i]))
				}
			}
		}
	})
	t.Run("handed back with every setting wrong", func(t *testing.T) {
		for _, drop := range []bool{true, false} {
			for _, d := range decodes {
				for i, c := range poolClients {
					select {
					case <-shared:
					default:
					}
					shared.put(&jsondec.Decoder{
						DropManagedFields: drop,
						CBORPrefix:        []byte{0xee},
						Rewrite:           func([]byte) ([]byte, bool) { return []byte{0xee}, true },
					})
					check(t, c, d, d.do(t, serializers[i]))
				}
			}
		}
	})
}

// BenchmarkDecodersHeap reports the heap that the Decoders of 100 clusters' clients
// keep, intern tables included, once each cluster has listed 20 pods of its own (names,
// uids and IPs; the rest alike): with a pool per cluster's clients, as before, or the
// process's pool.
func BenchmarkDecodersHeap(b *testing.B) {
	const clusters = 100
	lists := map[string][]byte{}
	for i := range clusters {
		// Another cluster's pods: other names, uids and IPs.
		ns := fmt.Sprint("c", i)
		lists[ns] = bytes.ReplaceAll(newTestPods().list(20), []byte("checkout-api-"), []byte(ns+"-checkout-api-"))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/"), "/pods")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(lists[ns])
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	h, err := rest.HTTPClientFor(dynamic.ConfigFor(cfg))
	if err != nil {
		b.Fatal(err)
	}
	podsResource := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for _, bm := range []struct {
		name string
		pool func() decoderPool
	}{
		{"per-cluster", func() decoderPool { return newDecoderPool(goruntime.GOMAXPROCS(0)) }},
		{"process", func() decoderPool { return newDecoderPool(2 * goruntime.GOMAXPROCS(0)) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			for b.Loop() {
				var before, after goruntime.MemStats
				goruntime.GC()
				goruntime.ReadMemStats(&before)
				shared := bm.pool()
				clients := make([]dynamic.Interface, clusters)
				for i := range clients {
					pool := shared
					if bm.name == "per-cluster" {
						pool = bm.pool()
					}
					if clients[i], err = newDynamicClient(cfg, h, pool, new(refusals), true, false, false, false); err != nil {
						b.Fatal(err)
					}
					if _, err := clients[i].Resource(podsResource).Namespace(fmt.Sprint("c", i)).List(b.Context(), metav1.ListOptions{}); err != nil {
						b.Fatal(err)
					}
				}
				goruntime.GC()
				goruntime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/clusters, "B/cluster")
				goruntime.KeepAlive(clients)
			}
		})
	}
}
