package aggregate

import (
	"testing"
	"unsafe"
)

// TestWithin: a string that the encoding spells shares the encoding's memory; any other
// is kept as it is.
func TestWithin(t *testing.T) {
	data := []byte("\xa1\x4fresourceVersion\x46123456")
	start, end := uintptr(unsafe.Pointer(&data[0])), uintptr(unsafe.Pointer(&data[len(data)-1]))
	for _, tc := range []struct {
		s      string
		shared bool
	}{
		{"123456", true},
		{"resourceVersion", true},
		{"1234567", false},
		{"", false},
	} {
		got := within(data, tc.s)
		if got != tc.s {
			t.Errorf("within(%q) = %q", tc.s, got)
		}
		p := uintptr(unsafe.Pointer(unsafe.StringData(got)))
		if shared := got != "" && p >= start && p <= end; shared != tc.shared {
			t.Errorf("within(%q) shares the encoding: %v, want %v", tc.s, shared, tc.shared)
		}
	}
	if got := within(nil, "1"); got != "1" {
		t.Errorf("within(nil, %q) = %q", "1", got)
	}
}
