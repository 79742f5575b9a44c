package persist

import (
	"bytes"
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestSeal(t *testing.T) {
	sum := objectsSum("prod", string(pods))
	var enc cborEncoder
	for _, obj := range []runtime.Object{
		testPod(t, "shop", "web-0"),
		testMetadata(t, "shop", "md"),
		// Not in the encoder's fast path: encoded by direct.Marshal.
		&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}, "n": 1}},
	} {
		key := []byte("shop/x")
		value, err := encodeObject(obj)
		if err != nil {
			t.Fatal(err)
		}
		sealed := seal(sum, key, value)
		if got, err := enc.sealObject(obj, sum, key); err != nil || !bytes.Equal(got, sealed) {
			t.Errorf("%T: sealObject differs from seal of encodeObject (%v)", obj, err)
		}
		got, err := unseal(sum, string(key), string(sealed))
		if err != nil || got != string(value) {
			t.Errorf("%T: unseal: %q, %v", obj, got, err)
		}
		// Any other place, key or byte breaks the seal.
		for name, try := range map[string]func() error{
			"other resource": func() error {
				_, err := unseal(objectsSum("prod", string(deployments)), string(key), string(sealed))
				return err
			},
			"other cluster": func() error {
				_, err := unseal(objectsSum("prud", string(pods)), string(key), string(sealed))
				return err
			},
			"other key": func() error { _, err := unseal(sum, "shop/y", string(sealed)); return err },
			"a byte changed": func() error {
				b := bytes.Clone(sealed)
				b[len(b)/2] ^= 1
				_, err := unseal(sum, string(key), string(b))
				return err
			},
			"not sealed": func() error { _, err := unseal(sum, string(key), string(value)); return err },
			"too short":  func() error { _, err := unseal(sum, string(key), string(sealed[:4])); return err },
		} {
			if err := try(); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%T, %s: got %v, want ErrCorrupt", obj, name, err)
			}
		}
	}
}
