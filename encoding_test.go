package fleetwatch

import (
	"os"
	"strings"
	"testing"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/informer"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestEncoding checks that Options.Encoding gives the fleet its Codec, that the default
// is compact, that Fleet.Codec takes its place, and that an unknown Encoding, or both
// set, is refused with an error that names the field.
func TestEncoding(t *testing.T) {
	newManager := func(opts Options) (*Manager, error) {
		opts.Clusters = cluster.Options{Kubeconfigs: []string{t.TempDir()}}
		opts.Resources = []informer.Resource{{Name: "configmaps"}}
		return NewManager(opts)
	}
	for _, tc := range []struct {
		encoding Encoding
		want     aggregate.Codec
	}{
		{EncodingObjects, nil},
		{EncodingCompact, persist.Codec{}},
		{EncodingCompressed, persist.Codec{Compress: true}},
		{EncodingCompressedDict, persist.Codec{Compress: true, Dictionary: true}},
	} {
		m, err := newManager(Options{Encoding: tc.encoding})
		if err != nil {
			t.Fatalf("Encoding %q: %v", tc.encoding, err)
		}
		if got := m.Fleet().Codec(); got != tc.want {
			t.Errorf("Encoding %q: the fleet's Codec is %#v, want %#v", tc.encoding, got, tc.want)
		}
	}

	if DefaultEncoding != EncodingCompact {
		t.Errorf("DefaultEncoding is %q, want %q", DefaultEncoding, EncodingCompact)
	}
	if os.Getenv("FLEETWATCH_TEST_CACHE_ENCODING") == "" {
		m, err := newManager(Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Fleet().Codec(), (persist.Codec{}); got != want {
			t.Errorf("no Encoding: the fleet's Codec is %#v, want the default's, %#v", got, want)
		}
	}

	own := persist.Codec{Compress: true}
	m, err := newManager(Options{Fleet: aggregate.Options{Codec: own}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Fleet().Codec(); got != own {
		t.Errorf("Fleet.Codec set: the fleet's Codec is %#v, want %#v", got, own)
	}

	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Encoding: "json"}, `Options.Encoding "json" is none of`},
		{Options{Encoding: "Compact"}, `Options.Encoding "Compact" is none of`},
		{Options{Encoding: EncodingCompact, Fleet: aggregate.Options{Codec: own}}, "Options.Encoding and Options.Fleet.Codec are both set"},
	} {
		if _, err := newManager(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Encoding %q, Codec %v: error %v, want one with %q", tc.opts.Encoding, tc.opts.Fleet.Codec, err, tc.want)
		}
	}
}
