package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetwatch/fleetwatch/config"
)

func TestResolveShard(t *testing.T) {
	dir := t.TempDir()
	nsFile := filepath.Join(dir, "namespace")
	old := podNamespaceFile
	t.Cleanup(func() { podNamespaceFile = old })
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		shard     config.Shard
		namespace string // of the pod; empty: not in a pod
		want      config.Shard
		wantErr   string
	}{
		{name: "off: nothing is filled in", shard: config.Shard{}, want: config.Shard{}},
		{name: "set keys are kept", shard: config.Shard{Enabled: true, Identity: "r1", Namespace: "ns"}, want: config.Shard{Enabled: true, Identity: "r1", Namespace: "ns"}},
		{name: "the host name and the pod's namespace", shard: config.Shard{Enabled: true}, namespace: "fleetwatch\n", want: config.Shard{Enabled: true, Identity: host, Namespace: "fleetwatch"}},
		{name: "no namespace outside a pod", shard: config.Shard{Enabled: true, Identity: "r1"}, wantErr: "shard.namespace: empty, and not running in a pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			podNamespaceFile = filepath.Join(dir, "missing")
			if tc.namespace != "" {
				if err := os.WriteFile(nsFile, []byte(tc.namespace), 0o600); err != nil {
					t.Fatal(err)
				}
				podNamespaceFile = nsFile
			}
			cfg := config.Default()
			cfg.Shard = tc.shard
			err := resolveShard(&cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Shard != tc.want {
				t.Errorf("shard %+v, want %+v", cfg.Shard, tc.want)
			}
			if tc.want.Enabled && !strings.HasSuffix(userAgent(&cfg), " replica="+tc.want.Identity) {
				t.Errorf("user agent %q does not name the replica", userAgent(&cfg))
			}
		})
	}
}
