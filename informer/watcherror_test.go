package informer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestLogWatchError checks that every kind of watch error is logged without a
// Reflector: cache.DefaultWatchErrorHandler, called with none, dereferenced it and
// crashed the process on the first expired or failed watch.
func TestLogWatchError(t *testing.T) {
	for _, err := range []error{
		apierrors.NewResourceExpired("too old resource version: 1 (2)"),
		io.EOF,
		io.ErrUnexpectedEOF,
		fmt.Errorf("watch: %w", io.ErrUnexpectedEOF),
		apierrors.NewNotFound(schema.GroupResource{Resource: "widgets"}, ""),
		errors.New("connection refused"),
	} {
		t.Run(err.Error(), func(t *testing.T) { logWatchError(context.Background(), "widgets", err) })
	}
}
