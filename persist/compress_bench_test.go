package persist

import (
	"testing"

	"github.com/fleetwatch/fleetwatch/aggregate/aggregatetest"
)

// BenchmarkCompress measures what Compress adds to a compact fleet's write (Shorten of
// an informer's encoding) and read (Decode) of a realistic pod.
func BenchmarkCompress(b *testing.B) {
	pod := aggregatetest.RealisticPod("shop", "web-1", "42", map[string]string{"app": "web"})
	plain, err := Codec{}.Encode(pod)
	if err != nil {
		b.Fatal(err)
	}
	compressed := Codec{Compress: true}.Shorten(plain)
	b.Logf("realistic pod: %d bytes, %d compressed", len(plain), len(compressed))
	b.Run("shorten", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			_ = Codec{Compress: true}.Shorten(plain)
		}
	})
	for name, data := range map[string][]byte{"plain": plain, "compressed": compressed} {
		b.Run("decode/"+name, func(b *testing.B) {
			for b.Loop() {
				if _, err := (Codec{}).Decode(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("expand/"+name, func(b *testing.B) {
			var dst []byte
			for b.Loop() {
				dst, _ = Codec{}.Expand(dst[:0], data)
			}
		})
	}
}
