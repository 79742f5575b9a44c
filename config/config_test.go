package config_test

import (
	"slices"
	"testing"

	"github.com/fleetwatch/fleetwatch/config"
)

func TestWarmHandover(t *testing.T) {
	on := func(c *config.Config) {
		c.Shard.Enabled = true
		c.Server.Auth.Delegated.Enabled = true
		c.Shard.Address = "https://fleetwatch-0.fleetwatch-peers.fleetwatch.svc:8443"
	}
	tests := []struct {
		name    string
		set     func(c *config.Config)
		want    bool
		lacking []string
	}{
		{"sharded, with a snapshot, delegated auth and https", func(*config.Config) {}, true, nil},
		// Not asked for: nothing to log.
		{"not sharded", func(c *config.Config) { c.Shard.Enabled = false }, false, nil},
		{"no snapshot", func(c *config.Config) { c.Snapshot.Path = "" }, false, nil},
		{"turned off", func(c *config.Config) { c.Shard.HandoverTimeout = 0 }, false, nil},
		// Asked for, but the other replicas could not fetch the states.
		{"no delegated auth", func(c *config.Config) { c.Server.Auth.Delegated.Enabled = false }, false, []string{"server.auth.delegated.enabled"}},
		{"an http address", func(c *config.Config) { c.Shard.Address = "http://fleetwatch-0:8080" }, false, []string{"an https:// shard.address"}},
		{"neither", func(c *config.Config) { c.Server.Auth.Delegated.Enabled = false; c.Shard.Address = "" }, false, []string{"server.auth.delegated.enabled", "an https:// shard.address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := config.Default()
			on(&c)
			tt.set(&c)
			got, lacking := c.WarmHandover()
			if got != tt.want || !slices.Equal(lacking, tt.lacking) {
				t.Errorf("WarmHandover() = %v, %q; want %v, %q", got, lacking, tt.want, tt.lacking)
			}
		})
	}
}
