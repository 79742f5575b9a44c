package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// Sentinel errors of New and Start. Errors returned by this package wrap one of them; the
// message around it names the option that is wrong.
var (
	// ErrInvalidOptions means an Options field has a value that cannot work, such as a
	// negative timeout or a TLS certificate without its key.
	ErrInvalidOptions = errors.New("server: invalid options")

	// ErrInsecureAddress means the server would listen on an address other than loopback
	// without both TLS and a token file.
	ErrInsecureAddress = errors.New("server: non-loopback address requires TLS and a token file")

	// ErrAlreadyStarted means Start or Serve was called twice.
	ErrAlreadyStarted = errors.New("server: already started")
)

// Status reasons of responses that apimachinery has no constructor for.
const reasonNotAcceptable metav1.StatusReason = "NotAcceptable"

// writeStatus writes err as a Kubernetes Status.
func writeStatus(w http.ResponseWriter, r *http.Request, err error) {
	st := statusOf(r, err)
	if (st.Code == http.StatusServiceUnavailable || st.Code == http.StatusTooManyRequests) && st.Details != nil && st.Details.RetryAfterSeconds > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(st.Details.RetryAfterSeconds)))
	}
	if st.Code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleetwatch"`)
	}
	writeJSON(w, int(st.Code), st)
}

// statusOf returns the Status of err, with its kind set. Errors that are not API errors
// are internal errors; they are logged, and their text is not sent to the client.
func statusOf(r *http.Request, err error) *metav1.Status {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		klog.FromContext(r.Context()).Error(err, "Request failed", "path", r.URL.Path)
		se = apierrors.NewInternalError(errors.New("internal error; see the server log"))
	}
	st := se.Status()
	st.Kind, st.APIVersion = "Status", "v1"
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	if st.Code == 0 {
		st.Code = http.StatusInternalServerError
	}
	return &st
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b = []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"cannot encode the response","reason":"InternalError","code":500}`)
	}
	writeBody(w, code, "application/json", b)
}

func writeBody(w http.ResponseWriter, code int, contentType string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// badParameter returns a 400 Status for query parameter name, whose message starts with
// the parameter's name, as "labelSelector: unable to parse requirement: ...".
func badParameter(name string, err error) error {
	msg := fmt.Sprintf("%s: %v", name, err)
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusBadRequest,
		Reason:  metav1.StatusReasonBadRequest,
		Message: msg,
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
			Type:    metav1.CauseTypeFieldValueInvalid,
			Field:   name,
			Message: err.Error(),
		}}},
	}}
}

// notFound returns a 404 Status for name of a resource, or for the resource itself if
// name is empty.
func notFound(gr schema.GroupResource, name string) error {
	if name == "" {
		se := apierrors.NewNotFound(gr, "")
		se.ErrStatus.Message = fmt.Sprintf("the server could not find the requested resource (%s)", gr)
		return se
	}
	return apierrors.NewNotFound(gr, name)
}

// clusterNotFound returns a 404 Status for an unknown cluster.
func clusterNotFound(name string) error {
	se := apierrors.NewNotFound(clustersGR, name)
	se.ErrStatus.Message = fmt.Sprintf("cluster %q is not in the fleet", name)
	return se
}

func methodNotAllowed(r *http.Request) error {
	se := apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method)
	se.ErrStatus.Message = fmt.Sprintf("%s is not allowed: the fleetwatch API is read-only (GET only)", r.Method)
	se.ErrStatus.Details = nil
	return se
}

func notAcceptable(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotAcceptable,
		Reason:  reasonNotAcceptable,
		Message: msg,
	}}
}

func expired(msg string) error {
	return apierrors.NewResourceExpired(msg)
}
