package wire

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// metaScheme has the kinds that a kube-apiserver sends to client-go's metadata client.
var metaScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	s.AddKnownTypes(metav1.SchemeGroupVersion, &metav1.PartialObjectMetadata{}, &metav1.PartialObjectMetadataList{})
	return s
}()

// metadataServer serves the metadata of pods as a kube-apiserver does for client-go's
// metadata client: lists and watches of PartialObjectMetadata, in protobuf if asked
// first, else in JSON, or with ignoreAs full pods in JSON, whatever was asked for. It
// records the Accept headers.
type metadataServer struct {
	objects  []metav1.PartialObjectMetadata
	ignoreAs bool

	mu      sync.Mutex
	accepts []string
}

func (s *metadataServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	accept := r.Header.Get("Accept")
	s.mu.Lock()
	s.accepts = append(s.accepts, accept)
	s.mu.Unlock()
	pb := strings.HasPrefix(accept, contentTypeProtobuf) && !s.ignoreAs
	watching := r.URL.Query().Get("watch") == "true"
	items := make([]runtime.Object, len(s.objects))
	for i := range s.objects {
		p := s.objects[i].DeepCopy()
		p.TypeMeta = metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}
		items[i] = p
		if s.ignoreAs {
			items[i] = &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{
				"name": p.Name, "namespace": p.Namespace, "resourceVersion": p.ResourceVersion}, "spec": map[string]any{"nodeName": "n1"}}}
		}
	}
	enc := func(obj runtime.Object) []byte {
		var buf bytes.Buffer
		var err error
		if pb {
			err = protobuf.NewSerializer(metaScheme, metaScheme).Encode(obj, &buf)
		} else {
			err = json.NewEncoder(&buf).Encode(obj)
		}
		if err != nil {
			panic(err)
		}
		return bytes.TrimSpace(buf.Bytes())
	}
	if !watching {
		list := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadataList"},
			ListMeta: metav1.ListMeta{ResourceVersion: "20"}}
		for _, o := range items {
			if p, ok := o.(*metav1.PartialObjectMetadata); ok {
				list.Items = append(list.Items, *p)
			}
		}
		if pb {
			w.Header().Set("Content-Type", contentTypeProtobuf+";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.Write(enc(list))
		return
	}
	events := make([]metav1.WatchEvent, 0, len(items)+1)
	for _, o := range items {
		events = append(events, metav1.WatchEvent{Type: string(watch.Added), Object: runtime.RawExtension{Raw: enc(o)}})
	}
	bookmark := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{ResourceVersion: "21", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	events = append(events, metav1.WatchEvent{Type: string(watch.Bookmark), Object: runtime.RawExtension{Raw: enc(bookmark)}})
	if pb {
		w.Header().Set("Content-Type", contentTypeProtobuf+";stream=watch")
		fw := protobuf.LengthDelimitedFramer.NewFrameWriter(w)
		raw := protobuf.NewRawSerializer(metaScheme, metaScheme)
		for i := range events {
			if err := raw.Encode(&events[i], fw); err != nil {
				panic(err)
			}
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for i := range events {
		b, _ := json.Marshal(events[i])
		w.Write(append(b, '\n'))
	}
}

// TestPartialMetadataClients lists and watches the metadata of pods through the clients
// of NewPartialMetadataClients, in protobuf and in JSON: they send client-go's metadata
// client's Accept headers; a list's items are PartialObjectMetadata as Unstructured
// objects; a watch's objects are partial, their encodings in CompactMetadataFormat, or
// MetadataFormat for one with managedFields kept, which
// DecodeEncoded decodes into the server's object without TypeMeta, as client-go's
// metadata client returns it; its bookmark comes whole. A server that ignores the
// requested kind sends pods, which come whole, without an encoding.
func TestPartialMetadataClients(t *testing.T) {
	created := metav1.Unix(1700000000, 0)
	objects := []metav1.PartialObjectMetadata{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "u-a", ResourceVersion: "11", Generation: 2, CreationTimestamp: created,
			Labels: map[string]string{"app": "shop", "tier": "web"}, Annotations: map[string]string{"note": `{"x":[1,2]}`},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "shop-1", UID: types.UID("u-rs"), Controller: ptr.To(true)}},
			Finalizers:      []string{"example.com/f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", UID: "u-b", ResourceVersion: "12", CreationTimestamp: created}},
	}
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	for _, pb := range []bool{true, false} {
		t.Run(map[bool]string{true: "protobuf", false: "JSON"}[pb], func(t *testing.T) {
			srv := &metadataServer{objects: objects}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			drop, keep, err := NewPartialMetadataClients(&rest.Config{Host: hs.URL})
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			if pb {
				ctx = WithProtobuf(ctx, MetadataKind)
			}
			list, err := drop.Resource(pods).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 2 || list.GetResourceVersion() != "20" {
				t.Fatalf("list: %v", list)
			}
			for i, item := range list.Items {
				if item.GetKind() != "PartialObjectMetadata" || item.GetName() != objects[i].Name || item.GetResourceVersion() != objects[i].ResourceVersion ||
					!equality.Semantic.DeepEqual(item.GetLabels(), objects[i].Labels) || item.GetManagedFields() != nil {
					t.Errorf("list item %d: %v", i, item.Object)
				}
			}
			for _, dropManaged := range []bool{true, false} {
				client := drop
				if !dropManaged {
					client = keep
				}
				w, err := client.Resource(pods).Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true})
				if err != nil {
					t.Fatal(err)
				}
				var got []runtime.Object
				for ev := range w.ResultChan() {
					got = append(got, ev.Object)
				}
				if len(got) != 3 {
					t.Fatalf("%d events, want 3: %v", len(got), got)
				}
				for i, want := range objects {
					// metaenc's encoding where it holds the object: not with managedFields.
					format := CompactMetadataFormat
					if !dropManaged && want.ManagedFields != nil {
						format = MetadataFormat
					}
					e, ok := got[i].(*EncodedObject)
					if !ok || !e.Partial || len(e.Encoded) == 0 || e.Encoded[0] != format {
						t.Fatalf("watched object %d: %#v, want a partial EncodedObject in format %d", i, got[i], format)
					}
					if e.GetName() != want.Name || e.GetResourceVersion() != want.ResourceVersion || !equality.Semantic.DeepEqual(e.GetLabels(), want.Labels) {
						t.Errorf("watched object %d: partial %v", i, e.Object)
					}
					decoded, err := DecodeEncoded(e.Encoded)
					if err != nil {
						t.Fatal(err)
					}
					want := want.DeepCopy()
					if dropManaged {
						want.ManagedFields = nil
					}
					if !equality.Semantic.DeepEqual(decoded, want) {
						t.Errorf("watched object %d decodes to\n%#v\nwant\n%#v", i, decoded, want)
					}
				}
				if a, err := meta.Accessor(got[2]); err != nil || a.GetResourceVersion() != "21" || a.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
					t.Errorf("bookmark: %#v", got[2])
				}
			}
			wantList := acceptMetadata(false, pb)
			wantWatch := acceptMetadata(true, pb)
			if want := []string{wantList, wantWatch, wantWatch}; !slices.Equal(srv.accepts, want) {
				t.Errorf("Accept headers %q, want %q", srv.accepts, want)
			}
		})
	}
	t.Run("a server that ignores the kind asked for", func(t *testing.T) {
		hs := httptest.NewServer(&metadataServer{objects: objects, ignoreAs: true})
		defer hs.Close()
		drop, _, err := NewPartialMetadataClients(&rest.Config{Host: hs.URL})
		if err != nil {
			t.Fatal(err)
		}
		w, err := drop.Resource(pods).Watch(WithProtobuf(t.Context(), MetadataKind), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ev := <-w.ResultChan()
		w.Stop()
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || u.GetKind() != "Pod" || u.Object["spec"] == nil {
			t.Errorf("a pod from a server that ignores the kind: %#v, want it whole", ev.Object)
		}
	})
}

// TestAcceptMetadata: the Accept headers are those of client-go's metadata client.
func TestAcceptMetadata(t *testing.T) {
	for _, c := range []struct {
		watch, protobuf bool
		want            string
	}{
		{false, true, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"},
		{true, true, "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"},
		{false, false, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"},
		{true, false, "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"},
	} {
		if got := acceptMetadata(c.watch, c.protobuf); got != c.want {
			t.Errorf("acceptMetadata(%v, %v) = %q, want %q", c.watch, c.protobuf, got, c.want)
		}
	}
}
