package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	apiversion "k8s.io/apimachinery/pkg/version"
)

func TestVersion(t *testing.T) {
	cmd := newVersionCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), readBuild().String(); got != want || got == "" {
		t.Fatalf("version printed %q, want %q", got, want)
	}
}

func TestBuildOf(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	installed := &debug.BuildInfo{Main: debug.Module{Path: "github.com/fleetwatch/fleetwatch", Version: "v0.1.0"}}
	inTree := &debug.BuildInfo{
		Main:     debug.Module{Path: "github.com/fleetwatch/fleetwatch", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}},
	}
	tests := []struct {
		name     string
		ldflags  string
		info     *debug.BuildInfo
		want     string
		wantInfo apiversion.Info
	}{
		{"make build sets main.version", "v0.1.0-3-g0123456", installed, "v0.1.0-3-g0123456", apiversion.Info{GitVersion: "v0.1.0-3-g0123456"}},
		{"go install @v0.1.0", "", installed, "v0.1.0", apiversion.Info{GitVersion: "v0.1.0"}},
		{"go build in a modified work tree", "", inTree, "(devel) (commit 0123456789ab, modified)", apiversion.Info{GitVersion: "(devel)", GitCommit: rev, GitTreeState: "dirty"}},
		{"main.version and the commit", "v0.1.0", &debug.BuildInfo{Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}}}, "v0.1.0 (commit 0123456789ab)", apiversion.Info{GitVersion: "v0.1.0", GitCommit: rev, GitTreeState: "clean"}},
		{"no build info", "", nil, "(devel)", apiversion.Info{GitVersion: "(devel)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := buildOf(tt.ldflags, tt.info)
			if got := b.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			got := versionInfo(b)
			got.GoVersion, got.Platform = "", ""
			if got != tt.wantInfo {
				t.Errorf("versionInfo = %+v, want %+v", got, tt.wantInfo)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	if code := run([]string{"no-such-command"}); code == 0 {
		t.Fatal("an unknown command exited 0")
	}
}
