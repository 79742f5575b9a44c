package server

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/fleetwatch/fleetwatch/internal/apifixtures"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
	"github.com/fleetwatch/fleetwatch/internal/pbjson"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestServedFixtures serves k8s.io/api's round-trip fixtures as the HTTP API writes an
// object of each cache encoding, and requires the JSON to be the fixture's, member for
// member, but for the cluster annotation: the object that jsondec decodes (objects), its
// partial CBOR as a compact fleet keeps it (compact), and that CBOR shortened by the
// compressed codec (compressed); each from the fixture's JSON, and from its protobuf
// through pbjson for every kind that the informers ask for in protobuf (pbjson.Supported).
// internal/pbjson's TestFixtures holds the way in; this holds the way out.
func TestServedFixtures(t *testing.T) {
	const cluster = "prod"
	for _, f := range apifixtures.All(t) {
		if f.Kind.Kind == "WatchEvent" {
			continue // an envelope, never served as an object
		}
		t.Run(f.Name, func(t *testing.T) {
			want := apifixtures.Map(t, f.JSON)
			gvr, _ := meta.UnsafeGuessKindToResource(f.Kind)
			res := &apiResource{gvr: gvr, kind: f.Kind.Kind}
			target := servedTarget{kind: f.Kind.Kind, apiVersion: f.Kind.GroupVersion().String(), cluster: cluster}

			ways := map[string]func(d *jsondec.Decoder) (map[string]any, []byte, error){
				"JSON": func(d *jsondec.Decoder) (map[string]any, []byte, error) {
					m, err := d.Object(f.JSON)
					if err != nil {
						return nil, nil, err
					}
					_, partial, err := d.ObjectPartialCBOR(f.JSON)
					return m, partial, err
				},
			}
			if pbjson.Supported(f.Kind) {
				ways["protobuf"] = func(d *jsondec.Decoder) (map[string]any, []byte, error) {
					gvk, raw, err := pbjson.Envelope(f.PB)
					if err != nil {
						return nil, nil, err
					}
					var tr pbjson.Transcoder
					js, err := tr.Object(gvk, raw)
					if err != nil {
						return nil, nil, err
					}
					m, err := d.Object(js)
					if err != nil {
						return nil, nil, err
					}
					_, partial, err := tr.ObjectPartialCBOR(gvk, raw, d)
					return m, partial, err
				}
			}
			for way, decode := range ways {
				var d jsondec.Decoder
				m, partial, err := decode(&d)
				if err != nil || partial == nil {
					t.Fatalf("%s: %v (CBOR %d bytes)", way, err, len(partial))
				}
				encodings := map[string]func() ([]byte, error){
					"objects": func() ([]byte, error) {
						return appendItem(nil, served(res, object{cluster: cluster, obj: &unstructured.Unstructured{Object: m}}, ""))
					},
					"compact": func() ([]byte, error) {
						return (&encodedServed{target: target, data: partial, codec: persist.Codec{}, res: res}).appendJSON(nil)
					},
					"compressed": func() ([]byte, error) {
						c := persist.Codec{Compress: true}
						return (&encodedServed{target: target, data: c.Shorten(partial), codec: c, res: res}).appendJSON(nil)
					},
				}
				for encoding, serve := range encodings {
					js, err := serve()
					if err != nil {
						t.Errorf("%s, %s: %v", way, encoding, err)
						continue
					}
					got := apifixtures.Map(t, js)
					if err := unserve(got, cluster, want); err != nil {
						t.Errorf("%s, %s: %v", way, encoding, err)
						continue
					}
					if d := apifixtures.Diff(got, want); len(d) > 0 {
						t.Errorf("%s, %s: served differently from the fixture at %v", way, encoding, d)
					}
				}
			}
		})
	}
}

// unserve takes out of got, an object as served, the cluster annotation, and the
// annotations and metadata that serving added where want, the object given, had none.
func unserve(got map[string]any, cluster string, want map[string]any) error {
	md, _ := got["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	if ann[ClusterAnnotation] != cluster {
		return fmt.Errorf("served without the annotation %s: %v", ClusterAnnotation, md)
	}
	delete(ann, ClusterAnnotation)
	wantMD, hasMD := want["metadata"].(map[string]any)
	if _, hasAnn := wantMD["annotations"]; !hasAnn && len(ann) == 0 {
		delete(md, "annotations")
	}
	if !hasMD && len(md) == 0 {
		delete(got, "metadata")
	}
	return nil
}
