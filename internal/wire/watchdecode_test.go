package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// frameStreams are streams of JSON values as a watch sends them, and others that only a
// framer meets.
var frameStreams = []string{
	``,
	"  \n",
	`{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}}`,
	"{\"type\":\"ADDED\",\"object\":{}}\n{\"type\":\"DELETED\",\"object\":{}}\n",
	`{"s":"a } ] { [ \" \\ \\\" \u0022"}` + "\r\n\t" + `[1,[2,{"x":[]}]]`,
	`{"a":"é ✓ \ud83d\ude00"}{}[]`,
	`1 -2.5e+3 true false null "x" "\"" 0`,
	`1[2]"a"{"b":3}`,
	`01 -0.5e-3 1E+2 12.25e7`,
	`true false null`,
	`{"deep":` + strings.Repeat(`[`, 100) + strings.Repeat(`]`, 100) + `}`,
	`{"long":"` + strings.Repeat("x", 100000) + `"}`,
}

// frames reads every frame of r with reads into a buffer of size n, putting the parts of
// a frame longer than the buffer back together as streaming.Decoder does. It returns the
// frames and the error that ended them.
func frames(r io.Reader, n int) ([]string, error) {
	var out []string
	buf := make([]byte, n)
	var frame []byte
	for {
		k, err := r.Read(buf)
		frame = append(frame, buf[:k]...)
		if errors.Is(err, io.ErrShortBuffer) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(frame))
		frame = frame[:0]
	}
}

// chunkReader returns at most n bytes per Read.
type chunkReader struct {
	data []byte
	n    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), r.n)], r.data)
	r.data = r.data[k:]
	return k, nil
}

func TestJSONFramerAsApimachinery(t *testing.T) {
	for _, stream := range frameStreams {
		want, wantErr := frames(json.Framer.NewFrameReader(io.NopCloser(strings.NewReader(stream))), 1<<20)
		if !errors.Is(wantErr, io.EOF) {
			t.Fatalf("apimachinery's framer: %v", wantErr)
		}
		for _, chunk := range []int{1, 7, 4096, 1 << 20} {
			for _, size := range []int{3, 64, 1 << 20} {
				r := jsonFramer{base: json.Framer}.NewFrameReader(io.NopCloser(&chunkReader{data: []byte(stream), n: chunk}))
				got, err := frames(r, size)
				if !errors.Is(err, io.EOF) {
					t.Errorf("%.40q, chunks of %d, buffer of %d: ended with %v", stream, chunk, size, err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%.40q, chunks of %d, buffer of %d: frames\n%.200q\nwant\n%.200q", stream, chunk, size, got, want)
				}
			}
		}
	}
}

func TestJSONFramerEnds(t *testing.T) {
	for _, tt := range []struct {
		stream string
		want   error
	}{
		{`{"a":1}{"b":`, io.ErrUnexpectedEOF},
		{`{"a":"1}`, io.ErrUnexpectedEOF},
		{`[[]`, io.ErrUnexpectedEOF},
	} {
		got, err := frames(jsonFramer{base: json.Framer}.NewFrameReader(io.NopCloser(strings.NewReader(tt.stream))), 64)
		if !errors.Is(err, tt.want) {
			t.Errorf("%q: frames %q, ended with %v, want %v", tt.stream, got, err, tt.want)
		}
	}
	// A reader's error ends the frames as it is.
	boom := errors.New("boom")
	r := jsonFramer{base: json.Framer}.NewFrameReader(io.NopCloser(io.MultiReader(strings.NewReader(`{"a":1} {"b"`), &errReader{boom})))
	if got, err := frames(r, 64); !errors.Is(err, boom) || len(got) != 1 {
		t.Errorf("frames %q, ended with %v, want one frame and %v", got, err, boom)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

// FuzzJSONFramer checks that the framer splits a stream as apimachinery's does, as far as
// that one finds valid values.
func FuzzJSONFramer(f *testing.F) {
	for _, s := range frameStreams {
		f.Add([]byte(s), uint8(7))
	}
	f.Fuzz(func(t *testing.T, stream []byte, chunk uint8) {
		want, wantErr := frames(json.Framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream))), 1<<20)
		r := jsonFramer{base: json.Framer}.NewFrameReader(io.NopCloser(&chunkReader{data: stream, n: int(chunk%64) + 1}))
		got, err := frames(r, 16)
		if errors.Is(wantErr, io.EOF) {
			if !errors.Is(err, io.EOF) || !reflect.DeepEqual(got, want) {
				t.Fatalf("frames %q (%v), want %q", got, err, want)
			}
			return
		}
		// Past apimachinery's first error the framer may split invalid input otherwise.
		if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			t.Fatalf("frames %q (%v), want %q before %v", got, err, want, wantErr)
		}
	})
}

// watchEvents are event frames, plain and not.
var watchEvents = []string{
	`{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a"}}}`,
	` { "object" : {"kind":"Pod"} , "type" : "MODIFIED" } `,
	`{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"12"}}}`,
	`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410}}`,
	`{"type":"ADD\u0045D","object":{}}`,
	`{"typ\u0065":"ADDED","obj\u0065ct":[1,2]}`,
	`{"type":"\xff","object":"x"}`,
	`{"type":"ADDED","object":1.5}`,
	`{"type":"ADDED","object":null}`,
	`{"type":null,"object":{}}`,
	`{"type":1,"object":{}}`,
	`{"type":"ADDED"}`,
	`{"object":{}}`,
	`{"type":"ADDED","object":{},"type":"DELETED"}`,
	`{"type":"ADDED","object":{},"object":{"a":1}}`,
	`{"type":"ADDED","object":{},"kind":"WatchEvent"}`,
	`{"Type":"ADDED","Object":{}}`,
	`{"type":"ADDED","object":{}`,
	`{"type":"ADDED","object":{}} x`,
	`{"type":"ADDED","object":{"a":tru}}`,
	`{"type":"ADDED","object":` + strings.Repeat(`[`, 9999) + strings.Repeat(`]`, 9999) + `}`,
	`{"type":"ADDED","object":` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `}`,
	`[]`,
	`null`,
	``,
}

// decodeEvent decodes an event frame with d into a fresh WatchEvent.
func decodeEvent(d runtime.Decoder, data []byte) (metav1.WatchEvent, *schema.GroupVersionKind, error) {
	var ev metav1.WatchEvent
	obj, gvk, err := d.Decode(data, nil, &ev)
	if err == nil && obj != &ev {
		panic("decoded into another object")
	}
	return ev, gvk, err
}

func checkWatchEvent(t *testing.T, data []byte) {
	t.Helper()
	base, ours := serializers(true)
	a := jsonInfo(t, base).StreamSerializer.Serializer
	o := jsonInfo(t, ours).StreamSerializer.Serializer
	want, wantKind, wantErr := decodeEvent(a, data)
	got, gotKind, err := decodeEvent(o, data)
	if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
		t.Fatalf("%.100q: error %v, want %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if got.Type != want.Type || !bytes.Equal(got.Object.Raw, want.Object.Raw) || got.Object.Object != nil {
		t.Fatalf("%.100q: decoded %q %.100q, want %q %.100q", data, got.Type, got.Object.Raw, want.Type, want.Object.Raw)
	}
	if !reflect.DeepEqual(gotKind, wantKind) {
		t.Fatalf("%.100q: kind %v, want %v", data, gotKind, wantKind)
	}
}

func TestWatchEventAsApimachinery(t *testing.T) {
	for _, ev := range watchEvents {
		checkWatchEvent(t, []byte(ev))
	}
	checkWatchEvent(t, []byte(`{"type":"ADDED","object":`+string(podJSON)+`}`))
}

// The object of a plain event is not shared with the frame, whose buffer the streaming
// decoder reuses.
func TestWatchEventCopiesTheObject(t *testing.T) {
	_, ours := serializers(true)
	data := []byte(`{"type":"ADDED","object":{"a":1}}`)
	ev, _, err := decodeEvent(jsonInfo(t, ours).StreamSerializer.Serializer, data)
	if err != nil {
		t.Fatal(err)
	}
	copy(data, bytes.Repeat([]byte("x"), len(data)))
	if string(ev.Object.Raw) != `{"a":1}` || ev.Type != "ADDED" {
		t.Errorf("after the frame changed: %q %q", ev.Type, ev.Object.Raw)
	}
}

// FuzzWatchEvent checks that the stream serializer decodes every frame as the dynamic
// client's does.
func FuzzWatchEvent(f *testing.F) {
	for _, ev := range watchEvents {
		f.Add([]byte(ev))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkWatchEvent(t, data)
	})
}
