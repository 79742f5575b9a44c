//go:build unix

package persist

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"unsafe"
)

// TestDecoderFault: a decoder of Load that reads a value in memory it cannot read, as a
// value past the end of the file in the memory map is, fails on that chunk with
// ErrCorrupt instead of killing the process.
func TestDecoderFault(t *testing.T) {
	unreadable, err := syscall.Mmap(-1, 0, os.Getpagesize(), syscall.PROT_NONE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(unreadable)
	for _, sealed := range []bool{true, false} {
		work := make(chan *chunk, 1)
		var decoded sync.WaitGroup
		decoded.Add(1)
		work <- &chunk{
			cluster: "a", resource: string(pods), sealed: sealed,
			keys:   []string{"ns/pod"},
			values: []string{unsafe.String(&unreadable[0], 64)},
			done:   &decoded,
		}
		close(work)
		var errs []error
		done := make(chan struct{})
		go func() {
			defer close(done)
			decodeChunks(work, func(err error) { errs = append(errs, err) })
		}()
		<-done
		decoded.Wait()
		if len(errs) != 1 || !errors.Is(errs[0], ErrCorrupt) || !strings.Contains(errs[0].Error(), "invalid memory address") {
			t.Errorf("sealed %v: errors %v, want one ErrCorrupt that says the decoder faulted on an address", sealed, errs)
		}
	}
}
