package server

import (
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
)

// recoverPanics turns a panic in a handler into a 500 Status, if nothing was written
// yet, and logs it through the request's logger. http.ErrAbortHandler, the way to cut a
// response short, passes.
func recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			klog.FromContext(r.Context()).Error(fmt.Errorf("panic: %v", v), "Request handler panicked", "method", r.Method, "path", r.URL.Path, "stack", string(debug.Stack()))
			if sw, ok := w.(*statusWriter); ok && sw.code != 0 {
				panic(http.ErrAbortHandler)
			}
			writeStatus(w, r, apierrors.NewInternalError(errors.New("the server panicked; see its log")))
		}()
		next.ServeHTTP(w, r)
	})
}
