package wire

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	restwatch "k8s.io/client-go/rest/watch"
)

// A watch that client-go opens (rest.Request.Watch) is read by a goroutine of its own,
// the StreamWatcher's, which decodes each event and hands it on through a channel: one
// goroutine per watch, besides the one that handles the events and the HTTP/2 stream's.
// A Watcher opens watches that the caller reads itself, one event per call of
// Stream.Next, with the framer and decoders that client-go would pick for the response:
// an idle watch then costs no goroutine of its own.

// Client is a dynamic client of this package, with the Watcher of the same requests.
type Client struct {
	dynamic.Interface
	// Watcher opens the watches that Interface's Watch would, read by the caller.
	Watcher *Watcher
}

// Watcher opens watches with the HTTP client and content negotiation of a RESTClient,
// whose events are read by the caller (Stream.Next).
type Watcher struct {
	rc         *rest.RESTClient
	negotiator runtime.ClientNegotiator
	// accept is the Accept header of the requests, as the client's own would send it; a
	// transport of this package may rewrite it (acceptTransport).
	accept string
}

// NewWatcher returns a Watcher for the requests of rc, whose responses are decoded as
// serializer, rc's NegotiatedSerializer, decodes them into version gv, and whose
// requests ask for accept.
func NewWatcher(rc *rest.RESTClient, serializer runtime.NegotiatedSerializer, gv schema.GroupVersion, accept string) *Watcher {
	return &Watcher{rc: rc, negotiator: runtime.NewClientNegotiator(serializer, gv), accept: accept}
}

// parameterCodec encodes ListOptions into the query of a request, as the dynamic and
// metadata clients do.
var parameterCodec = func() runtime.ParameterCodec {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	return runtime.NewParameterCodec(scheme)
}()

// Watch opens a watch of resource in namespace ("" for all) with opts, as the dynamic
// client's Watch does, and returns it once the server has answered. Unlike
// rest.Request.Watch, it does not retry a request that got no response: the caller
// backs off and watches again.
//
// The watch ends when ctx does, or when the Stream is closed.
func (w *Watcher) Watch(ctx context.Context, resource schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*Stream, error) {
	opts.Watch = true
	segments := []string{"api"}
	if resource.Group != "" {
		segments = []string{"apis", resource.Group}
	}
	segments = append(segments, resource.Version)
	if namespace != "" {
		segments = append(segments, "namespaces", namespace)
	}
	segments = append(segments, resource.Resource)
	url := w.rc.Get().AbsPath(segments...).SpecificallyVersionedParams(&opts, parameterCodec, schema.GroupVersion{Version: "v1"}).URL()

	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url.String(), nil)
	if err != nil {
		cancel()
		return nil, err
	}
	req.Header.Set("Accept", w.accept)
	client := w.rc.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer cancel()
		defer resp.Body.Close()
		return nil, w.responseError(resp)
	}
	mediaType, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		mediaType, params = "", nil
	}
	objects, events, framer, err := w.negotiator.StreamDecoder(mediaType, params)
	if err != nil {
		resp.Body.Close()
		cancel()
		return nil, err
	}
	frames := framer.NewFrameReader(resp.Body)
	return &Stream{
		decoder: restwatch.NewDecoder(streaming.NewDecoder(frames, events), objects),
		cancel:  cancel,
	}, nil
}

// maxErrorBody is how much of an error response is read, and of a text one quoted.
const maxErrorBody = 1 << 20

// responseError is the error of a response other than 200 OK, as a rest.Request's
// Result makes it: the Status that the server sent, or else an error of the response's
// code with its text.
func (w *Watcher) responseError(resp *http.Response) error {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if err != nil {
		return fmt.Errorf("reading the response to a watch, status %d: %w", resp.StatusCode, err)
	}
	if mediaType, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		if decoder, err := w.negotiator.Decoder(mediaType, params); err == nil {
			if obj, err := runtime.Decode(decoder, body); err == nil {
				if st, ok := obj.(*metav1.Status); ok && st.Status != metav1.StatusSuccess {
					return apierrors.FromObject(st)
				}
			}
		}
	}
	message := "unknown"
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/") {
		message = strings.TrimSpace(string(body[:min(len(body), 1024)]))
	}
	retryAfter, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, schema.GroupResource{}, "", message, retryAfter, true)
}

// Stream is an open watch, read by Next from the caller's goroutine. It is not safe for
// concurrent use, but for Close.
type Stream struct {
	decoder *restwatch.Decoder
	cancel  context.CancelFunc
}

// Next blocks until the next event of the watch and returns it. An Error event comes as
// an event, as the server sent it. At the end of the watch it returns io.EOF if the
// server ended it, or the error that ended it: the context's once it is done, or that
// of the connection or of a frame that cannot be decoded; once it has returned an error
// it returns one at every call.
func (s *Stream) Next() (watch.Event, error) {
	eventType, obj, err := s.decoder.Decode()
	if err != nil {
		return watch.Event{}, err
	}
	return watch.Event{Type: eventType, Object: obj}, nil
}

// Close ends the watch: its request is cancelled and its response closed. It may be
// called more than once, from any goroutine.
func (s *Stream) Close() {
	s.cancel()
	s.decoder.Close()
}
