package config_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/fleetwatch/fleetwatch/config"
)

func TestChanged(t *testing.T) {
	base := config.Default()
	for _, tt := range []struct {
		name   string
		change func(*config.Config)
		want   []string
	}{
		{"nothing", func(*config.Config) {}, nil},
		{"a scalar", func(c *config.Config) { c.Sync.Timeout = time.Minute }, []string{"sync.timeout"}},
		{"a nested scalar", func(c *config.Config) { c.Server.TLS.CertFile = "/tls.crt" }, []string{"server.tls.certFile"}},
		{"an element of a list", func(c *config.Config) { c.Resources[2].MetadataOnly = true }, []string{"resources"}},
		{"a map", func(c *config.Config) { c.Contexts.Aliases = map[string]string{"a": "b"} }, []string{"contexts.aliases"}},
		{"several, in field order", func(c *config.Config) {
			c.Log.Verbosity = 2
			c.Kubeconfig = []string{"/k"}
			c.Server.Address = "127.0.0.1:1"
		}, []string{"kubeconfig", "server.address", "log.verbosity"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			next := config.Default()
			tt.change(&next)
			if got := config.Changed(&base, &next); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Changed() = %q, want %q", got, tt.want)
			}
		})
	}
}
