package main

import (
	"testing"
	"time"

	"github.com/fleetwatch/fleetwatch/aggregate"
	"github.com/fleetwatch/fleetwatch/cluster"
	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/persist"
)

// TestManagerOptionsHealth checks that the health.* keys reach the Manager's probes.
func TestManagerOptionsHealth(t *testing.T) {
	cfg := config.Default()
	if got, want := managerOptions(&cfg).Health, (cluster.HealthOptions{
		Path: cluster.DefaultHealthPath, Interval: cluster.DefaultHealthInterval, Timeout: cluster.DefaultHealthTimeout,
	}); got != want {
		t.Errorf("defaults: Health = %+v, want %+v", got, want)
	}
	cfg.Health = config.Health{Path: "/livez", Interval: 2 * time.Second, Timeout: time.Second}
	if got, want := managerOptions(&cfg).Health, (cluster.HealthOptions{
		Path: "/livez", Interval: 2 * time.Second, Timeout: time.Second,
	}); got != want {
		t.Errorf("Health = %+v, want %+v", got, want)
	}
}

// TestManagerOptionsJSONOnly checks that cache.jsonOnly reaches the Manager.
func TestManagerOptionsJSONOnly(t *testing.T) {
	cfg := config.Default()
	if managerOptions(&cfg).JSONOnly {
		t.Error("defaults: JSONOnly = true, want protobuf where it can be read")
	}
	cfg.Cache.JSONOnly = true
	if !managerOptions(&cfg).JSONOnly {
		t.Error("cache.jsonOnly: true: JSONOnly = false")
	}
}

// TestManagerOptionsEncoding checks that each cache.encoding is an Encoding of the
// library that gives the fleet its Codec.
func TestManagerOptionsEncoding(t *testing.T) {
	for encoding, want := range map[string]aggregate.Codec{
		config.CacheEncodingObjects:        nil,
		config.CacheEncodingCompact:        persist.Codec{},
		config.CacheEncodingCompressed:     persist.Codec{Compress: true},
		config.CacheEncodingCompressedDict: persist.Codec{Compress: true, Dictionary: true},
	} {
		cfg := config.Default()
		cfg.Cache.Encoding = encoding
		got, err := managerOptions(&cfg).Encoding.Codec()
		if err != nil {
			t.Fatalf("cache.encoding %s: %v", encoding, err)
		}
		if got != want {
			t.Errorf("cache.encoding %s: Codec %#v, want %#v", encoding, got, want)
		}
	}
}
