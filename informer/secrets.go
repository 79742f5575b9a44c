package informer

import (
	"context"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// A Secret's values are in its data and stringData, and in the annotation in which
// kubectl apply (client-side, and kubectl create with --save-config) keeps the whole
// manifest it applied, values included. Unless Options.KeepSecretData is set, the
// transform drops all three from every Secret, full or metadata-only, before it reaches
// the store: nothing downstream (the fleet, the HTTP API, the snapshot) ever holds a
// value. managedFields are not touched: their fieldsV1 name the keys of data, never
// their values.
//
// The responses of the requests that list Secrets hold the values too, and client-go
// logs response bodies at verbosity 8 and above. The requests of an informer of Secrets
// that drops the values log through a logger that stops at level 7 (quietLogger).

// LastAppliedAnnotation is the annotation in which kubectl apply keeps the manifest it
// applied: for a Secret, its values.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// maxSecretRequestLogLevel is the highest verbosity at which the requests of an
// informer of Secrets log: client-go logs response bodies at 8.
const maxSecretRequestLogLevel = 7

// isSecrets reports whether gvr is the core Secrets resource, of any version.
func isSecrets(gvr schema.GroupVersionResource) bool {
	return gvr.Group == "" && gvr.Resource == "secrets"
}

// dropSecretValues removes the values of the Secret obj, an *unstructured.Unstructured
// or a *metav1.PartialObjectMetadata, in place: data, stringData and
// LastAppliedAnnotation. An annotations map left empty goes too.
func dropSecretValues(obj any) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		unstructured.RemoveNestedField(o.Object, "data")
		unstructured.RemoveNestedField(o.Object, "stringData")
		md, _ := o.Object["metadata"].(map[string]any)
		if ann, ok := md["annotations"].(map[string]any); ok {
			delete(ann, LastAppliedAnnotation)
			if len(ann) == 0 {
				delete(md, "annotations")
			}
		}
	case *metav1.PartialObjectMetadata:
		delete(o.Annotations, LastAppliedAnnotation)
		if len(o.Annotations) == 0 {
			o.Annotations = nil
		}
	}
}

// quietContext returns ctx with its logger limited to maxSecretRequestLogLevel: the
// context of the requests of an informer of Secrets that drops their values.
func quietContext(ctx context.Context) context.Context {
	return klog.NewContext(ctx, quietLogger(klog.FromContext(ctx), maxSecretRequestLogLevel))
}

// quietLogger returns logger without its levels above max. Errors are logged as before.
func quietLogger(logger logr.Logger, max int) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	// cappedSink's methods are one more frame between the caller and the sink.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return logger.WithSink(cappedSink{LogSink: sink, max: max})
}

// cappedSink is a logr.LogSink that drops the Info lines above level max and passes
// everything else to LogSink.
type cappedSink struct {
	logr.LogSink
	max int
}

var (
	_ logr.LogSink          = cappedSink{}
	_ logr.CallDepthLogSink = cappedSink{}
)

func (s cappedSink) Enabled(level int) bool {
	return level <= s.max && s.LogSink.Enabled(level)
}

func (s cappedSink) Info(level int, msg string, keysAndValues ...any) {
	if level <= s.max {
		s.LogSink.Info(level, msg, keysAndValues...)
	}
}

func (s cappedSink) Error(err error, msg string, keysAndValues ...any) {
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s cappedSink) WithValues(keysAndValues ...any) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithValues(keysAndValues...), max: s.max}
}

func (s cappedSink) WithName(name string) logr.LogSink {
	return cappedSink{LogSink: s.LogSink.WithName(name), max: s.max}
}

// WithCallDepth keeps the file and line of the sink's lines those of the caller.
func (s cappedSink) WithCallDepth(depth int) logr.LogSink {
	if cd, ok := s.LogSink.(logr.CallDepthLogSink); ok {
		return cappedSink{LogSink: cd.WithCallDepth(depth), max: s.max}
	}
	return s
}
