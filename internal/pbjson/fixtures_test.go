package pbjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleetwatch/fleetwatch/internal/apifixtures"
	"github.com/fleetwatch/fleetwatch/internal/jsondec"
)

// TestFixtures pushes k8s.io/api's round-trip fixtures through what fleetwatch does with
// an object, and requires what it would serve to be the fixture's JSON, member for
// member:
//
//   - JSON → cached → served: jsondec's map and CBOR (ObjectCBOR: the objects and the
//     snapshot), and its partial CBOR (ObjectPartialCBOR: a compact fleet);
//   - protobuf → cached → served, for every Supported kind: the Transcoder's JSON
//     (Object) through jsondec as above, and its partial CBOR written straight from the
//     protobuf (ObjectPartialCBOR);
//
// each with managedFields kept, and dropped (the default), which leaves the object's own
// out. A kind that is not Supported is asked for in JSON: its protobuf must be refused
// (ErrUnsupported), and for a Lossy kind, the fixture with the members that Losses
// names filled in (the fuzzer that wrote the fixtures leaves every TypeMeta empty; the
// apiserver's defaulting fills a StatefulSet's volumeClaimTemplates') must come out of
// its protobuf without exactly those members, and out of its JSON whole.
func TestFixtures(t *testing.T) {
	fixtures := apifixtures.All(t)
	var protobufKinds, jsonKinds, lossyKinds, otherKinds, events []string
	for _, f := range fixtures {
		base, gvk, js, pb := f.Name, f.Kind, f.JSON, f.PB
		t.Run(base, func(t *testing.T) {
			if gvk.Kind == "WatchEvent" {
				checkWatchEvent(t, js, pb)
				events = append(events, base)
				return
			}
			for _, drop := range []bool{false, true} {
				checkJSONPath(t, js, drop)
			}
			_, inScheme := scheme.Scheme.AllKnownTypes()[gvk]
			envGVK, raw, err := Envelope(pb)
			if err != nil || envGVK != gvk {
				t.Fatalf("Envelope: %v, %v", envGVK, err)
			}
			switch _, lossy := Lossy()[gvk]; {
			case Supported(gvk):
				protobufKinds = append(protobufKinds, base)
				for _, drop := range []bool{false, true} {
					checkProtobufPath(t, gvk, raw, js, drop)
				}
			case lossy:
				lossyKinds = append(lossyKinds, base)
				checkLossy(t, gvk, js)
			case inScheme:
				t.Fatalf("%v is in client-go's scheme, not Lossy, and not Supported", gvk)
			default:
				// Not a kind of client-go's scheme: fleetwatch reads it only as JSON.
				otherKinds = append(otherKinds, base)
			}
			if !Supported(gvk) {
				jsonKinds = append(jsonKinds, base)
				var tr Transcoder
				if _, err := tr.Object(gvk, raw); !errors.Is(err, ErrUnsupported) {
					t.Errorf("the protobuf of %v, which is asked for in JSON, transcodes: %v", gvk, err)
				}
			}
		})
	}
	t.Logf("%d fixtures: %d through protobuf and JSON; %d through JSON only: %d Lossy (%s), %d of no kind of client-go's scheme (%s); %d watch event envelope (%s)",
		len(fixtures), len(protobufKinds), len(jsonKinds), len(lossyKinds), strings.Join(lossyKinds, ", "),
		len(otherKinds), strings.Join(otherKinds, ", "), len(events), strings.Join(events, ", "))

	// docs/design.md says what this test covers.
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	prose := strings.Join(strings.Fields(string(doc)), " ")
	for _, claim := range []string{
		fmt.Sprintf("Of the %d fixtures, %d kinds go through both wires; %d through JSON only: the %d Lossy", len(fixtures), len(protobufKinds), len(jsonKinds), len(lossyKinds)),
		fmt.Sprintf("and %d of no kind of client-go's scheme", len(otherKinds)),
	} {
		if !strings.Contains(prose, claim) {
			t.Errorf("docs/design.md does not say %q", claim)
		}
	}
}

// checkWatchEvent requires the envelope of a watch event, which package wire reads
// (jsondec.Decoder.WatchEvent for JSON, apimachinery's metav1.WatchEvent for protobuf),
// to give the type and object of the fixture js, whatever the object (the fixture's is
// the JSON of a custom resource, which goes through JSON on either wire).
func checkWatchEvent(t *testing.T, js, pb []byte) {
	t.Helper()
	var w struct {
		Type   string          `json:"type"`
		Object json.RawMessage `json:"object"`
	}
	if err := json.Unmarshal(js, &w); err != nil {
		t.Fatal(err)
	}
	var d jsondec.Decoder
	typ, object, err := d.WatchEvent(js)
	if err != nil || typ != w.Type {
		t.Fatalf("WatchEvent of the JSON: %q, %v", typ, err)
	}
	checkJSONPath(t, object, false)
	requireSame(t, "the object of the JSON", want(t, object, false), want(t, w.Object, false))

	var u runtime.Unknown
	if err := u.Unmarshal(pb[len(protobufPrefix):]); err != nil {
		t.Fatalf("the envelope of the protobuf: %v", err)
	}
	var ev metav1.WatchEvent
	if err := ev.Unmarshal(u.Raw); err != nil {
		t.Fatalf("the WatchEvent of the protobuf: %v", err)
	}
	if ev.Type != w.Type {
		t.Errorf("type of the protobuf %q, want %q", ev.Type, w.Type)
	}
	requireSame(t, "the object of the protobuf", want(t, ev.Object.Raw, false), want(t, w.Object, false))
}

// want returns the fixture js as a map, as apimachinery decodes it, without the object's
// managedFields if drop.
func want(t *testing.T, js []byte, drop bool) map[string]any {
	t.Helper()
	m := apifixtures.Map(t, js)
	if md, ok := m["metadata"].(map[string]any); ok && drop {
		delete(md, "managedFields")
	}
	return m
}

// checkJSONPath requires what jsondec caches of js, and what is served from it, to be js.
func checkJSONPath(t *testing.T, js []byte, drop bool) {
	t.Helper()
	w := want(t, js, drop)
	d := jsondec.Decoder{DropManagedFields: drop}
	m, cbor, err := d.ObjectCBOR(js)
	if err != nil {
		t.Fatalf("ObjectCBOR: %v", err)
	}
	requireSame(t, fmt.Sprintf("JSON, managedFields dropped %v: map", drop), m, w)
	requireSame(t, fmt.Sprintf("JSON, managedFields dropped %v: CBOR", drop), fromCBOR(t, cbor), w)
	_, partial, err := d.ObjectPartialCBOR(js)
	if err != nil {
		t.Fatalf("ObjectPartialCBOR: %v", err)
	}
	requireSame(t, fmt.Sprintf("JSON, managedFields dropped %v: partial CBOR", drop), fromCBOR(t, partial), w)
}

// checkProtobufPath requires what is cached of the protobuf raw of kind gvk, and what is
// served from it, to be js.
func checkProtobufPath(t *testing.T, gvk schema.GroupVersionKind, raw, js []byte, drop bool) {
	t.Helper()
	w := want(t, js, drop)
	tr := Transcoder{Options: Options{DropManagedFields: drop}}
	out, err := tr.Object(gvk, raw)
	if err != nil {
		t.Fatalf("Object: %v", err)
	}
	d := jsondec.Decoder{DropManagedFields: drop}
	m, cbor, err := d.ObjectCBOR(out)
	if err != nil {
		t.Fatalf("ObjectCBOR of the transcoded JSON: %v", err)
	}
	requireSame(t, fmt.Sprintf("protobuf, managedFields dropped %v: map", drop), m, w)
	requireSame(t, fmt.Sprintf("protobuf, managedFields dropped %v: CBOR", drop), fromCBOR(t, cbor), w)
	_, partial, err := tr.ObjectPartialCBOR(gvk, raw, &d)
	if err != nil {
		t.Fatalf("ObjectPartialCBOR: %v", err)
	}
	requireSame(t, fmt.Sprintf("protobuf, managedFields dropped %v: partial CBOR", drop), fromCBOR(t, partial), w)
}

// checkLossy fills in the members of fixture js that the protobuf of kind gvk loses
// (Losses), and requires its protobuf, transcoded by a schema that ignores the losses,
// to lack exactly those, and its JSON to keep them all.
func checkLossy(t *testing.T, gvk schema.GroupVersionKind, js []byte) {
	t.Helper()
	typ := scheme.Scheme.AllKnownTypes()[gvk]
	losses := Losses(typ)
	filled := want(t, js, false)
	for _, l := range losses {
		if n := fill(filled, l); n == 0 {
			t.Fatalf("the fixture has nothing at %s to fill", l)
		}
	}
	filledJS, err := json.Marshal(filled)
	if err != nil {
		t.Fatal(err)
	}
	checkJSONPath(t, filledJS, false)

	obj := reflect.New(typ).Interface().(runtime.Object)
	if err := json.Unmarshal(filledJS, obj); err != nil {
		t.Fatalf("decoding the filled fixture: %v", err)
	}
	_, raw, err := Envelope(protobufOf(t, obj, gvk))
	if err != nil {
		t.Fatal(err)
	}
	b := builder{seen: map[reflect.Type]*message{}}
	msg, err := b.message(typ)
	if err != nil {
		t.Fatalf("schema of %v, losses ignored: %v", gvk, err)
	}
	var tr Transcoder
	if err := tr.object(gvk, raw, msg, ctxNone); err != nil {
		t.Fatalf("transcoding, losses ignored: %v", err)
	}
	diffs := apifixtures.Diff(apifixtures.Map(t, tr.out), filled)
	var unexplained []string
	explained := map[string]bool{}
	for _, d := range diffs {
		i := slices.IndexFunc(losses, func(l string) bool { return lossPattern(l).MatchString(d) })
		if i < 0 {
			unexplained = append(unexplained, d)
			continue
		}
		explained[losses[i]] = true
	}
	if len(unexplained) > 0 {
		t.Errorf("the protobuf differs where Losses does not say: %s", strings.Join(unexplained, ", "))
	}
	for _, l := range losses {
		if !explained[l] {
			t.Errorf("the protobuf keeps %s, which Losses says it loses", l)
		}
	}
}

// fill sets the member at path (a path of Losses, ending in apiVersion or kind) in every
// element that m has there, and returns how many it set.
func fill(m map[string]any, path string) int {
	tokens := regexp.MustCompile(`\[\]|\{\}|[^.\[\]{}]+`).FindAllString(path, -1)
	last := tokens[len(tokens)-1]
	values := map[string]string{"apiVersion": "fixture.example/v1", "kind": "Fixture"}
	if _, ok := values[last]; !ok {
		panic("fill: " + path)
	}
	var walk func(v any, tokens []string) int
	walk = func(v any, tokens []string) int {
		switch tok := tokens[0]; {
		case tok == "[]":
			a, _ := v.([]any)
			n := 0
			for _, e := range a {
				n += walk(e, tokens[1:])
			}
			return n
		case tok == "{}":
			o, _ := v.(map[string]any)
			n := 0
			for _, e := range o {
				n += walk(e, tokens[1:])
			}
			return n
		case len(tokens) == 1:
			o, ok := v.(map[string]any)
			if !ok {
				return 0
			}
			o[tok] = values[tok]
			return 1
		default:
			o, _ := v.(map[string]any)
			return walk(o[tok], tokens[1:])
		}
	}
	return walk(m, tokens)
}

// lossPattern matches the paths of diff that the path l of Losses stands for.
func lossPattern(l string) *regexp.Regexp {
	p := regexp.QuoteMeta(l)
	p = strings.ReplaceAll(p, regexp.QuoteMeta("{}"), `\.[^.\[]+`)
	return regexp.MustCompile("^" + p + "$")
}

// fromCBOR decodes the CBOR that jsondec or the Transcoder wrote, as the snapshot and a
// compact fleet decode it.
func fromCBOR(t *testing.T, cbor []byte) map[string]any {
	t.Helper()
	if cbor == nil {
		t.Fatal("no CBOR")
	}
	var m map[string]any
	if err := direct.Unmarshal(cbor, &m); err != nil {
		t.Fatalf("decoding the CBOR: %v", err)
	}
	return m
}

// requireSame fails t with the paths at which got and want differ.
func requireSame(t *testing.T, what string, got, want map[string]any) {
	t.Helper()
	if d := apifixtures.Diff(got, want); len(d) > 0 {
		t.Errorf("%s differs from the fixture at %s", what, strings.Join(d, ", "))
	}
}
