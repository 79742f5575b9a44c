package persist

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// From schema version 4 on, every value that Load returns is sealed: an object, a
// resourceVersion, an identity is stored as the byte formatSealed, the CRC-32C
// (Castagnoli) of where it is stored and of itself, big-endian, then the value itself
// (an object in its encoding of version 2; see codec.go). "Where" is the names of its
// buckets below "clusters" and its key. A byte of the file that changed, and that
// Open's check of the page structure (pages.go) cannot see, is in a value, whose seal
// then fails, or in a key or a bucket name, which the seals of the values under it
// cover: Load never returns what was not committed. The meta bucket has a seal of its
// own, keySum, over the version and the creation time.
const (
	// sealedVersion is the first schema version whose values are sealed.
	sealedVersion = 4
	// formatSealed is the first byte of a sealed value.
	formatSealed byte = 3
	// sealSize is what sealing adds to a value.
	sealSize = 5
)

// keySum is the key of the meta bucket's seal, the CRC-32C of the values of keyVersion
// and keyCreated. Every later schema version keeps it so, so that a newer file is told
// apart from a damaged one.
var keySum = []byte("sum")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// bytesOf returns the bytes of s without a copy; they must not be modified.
func bytesOf(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// pathSum returns the CRC-32C of the names of the buckets below "clusters" that hold a
// value: the start of its seal.
func pathSum(buckets ...string) uint32 {
	var crc uint32
	for _, b := range buckets {
		crc = crc32.Update(crc, castagnoli, bytesOf(b))
		crc = crc32.Update(crc, castagnoli, []byte{0})
	}
	return crc
}

// objectsSum, rvSum and identitySum start the seals of an object of a resource, of the
// resourceVersion of a resource, and of the identity of a cluster.
func objectsSum(cluster, resource string) uint32 {
	return pathSum(cluster, resource, string(bucketObjects))
}

func rvSum(cluster, resource string) uint32 { return pathSum(cluster, resource) }

func identitySum(cluster string) uint32 { return pathSum(cluster) }

// seal returns the stored form of value, stored under key in the buckets whose pathSum
// is sum.
func seal(sum uint32, key, value []byte) []byte {
	out := make([]byte, sealSize+len(value))
	copy(out[sealSize:], value)
	sealHead(out, sum, key)
	return out
}

// sealHead writes the seal into the first sealSize bytes of out, which the value follows.
func sealHead(out []byte, sum uint32, key []byte) {
	out[0] = formatSealed
	binary.BigEndian.PutUint32(out[1:], crc32.Update(crc32.Update(sum, castagnoli, key), castagnoli, out[sealSize:]))
}

// sealObject is encodeObject and seal in one, with one copy of the encoding where it can:
// an unstructured object is encoded after room for the seal in e's buffer.
func (e *cborEncoder) sealObject(obj runtime.Object, sum uint32, key []byte) ([]byte, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok && u != nil && u.Object != nil {
		e.buf = append(e.buf[:0], make([]byte, sealSize)...)
		if e.appendMap(u.Object) {
			out := slices.Clone(e.buf)
			sealHead(out, sum, key)
			return out, nil
		}
	}
	value, err := e.encodeObject(obj)
	if err != nil {
		return nil, err
	}
	return seal(sum, key, value), nil
}

// unseal checks the seal of stored, what seal returned, and returns the value in it,
// which shares stored's memory. An error wraps ErrCorrupt.
func unseal(sum uint32, key, stored string) (string, error) {
	if len(stored) < sealSize || stored[0] != formatSealed {
		return "", fmt.Errorf("%w: key %q: the value is not sealed", ErrCorrupt, key)
	}
	value := stored[sealSize:]
	crc := crc32.Update(crc32.Update(sum, castagnoli, bytesOf(key)), castagnoli, bytesOf(value))
	if want := binary.BigEndian.Uint32(bytesOf(stored[1:])); crc != want {
		return "", fmt.Errorf("%w: key %q: the value does not match its seal", ErrCorrupt, key)
	}
	return value, nil
}

// unsealBytes is unseal for a value that bbolt returned: the result is valid as long as
// v is.
func unsealBytes(sum uint32, key string, v []byte) ([]byte, error) {
	value, err := unseal(sum, key, unsafe.String(unsafe.SliceData(v), len(v)))
	if err != nil {
		return nil, err
	}
	return v[sealSize:][:len(value)], nil
}

// metaSum is the seal of the meta bucket.
func metaSum(meta *bolt.Bucket) []byte {
	crc := crc32.Update(pathSum(string(bucketMeta)), castagnoli, meta.Get(keyVersion))
	crc = crc32.Update(crc, castagnoli, meta.Get(keyCreated))
	return binary.BigEndian.AppendUint32(nil, crc)
}

// sealed reports whether the Store writes sealed values: whether Open brought the file
// to a sealed schema version. Only tests open files with fewer migrations.
func (s *Store) sealed() bool { return len(s.opts.migrations) >= sealedVersion }

// isSealed reports whether the file in tx has sealed values.
func isSealed(tx *bolt.Tx) bool {
	v, err := readVersion(tx)
	return err != nil || v >= sealedVersion
}
