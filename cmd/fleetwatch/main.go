// Command fleetwatch watches many Kubernetes clusters and serves one federated cache of
// their objects.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=..." (make build and
// make image set git describe). When it is not set, the module version from the build
// info is used: go install github.com/fleetwatch/fleetwatch/cmd/fleetwatch@v0.1.0
// reports v0.1.0.
var version = ""

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCommand()
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetwatch:", err)
		return 1
	}
	return 0
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "fleetwatch",
		Short:         "Watch many Kubernetes clusters through one federated cache",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newVersionCommand(), newSnapshotCommand(), newKubeconfigCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the fleetwatch version, and the commit it was built from when known",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), readBuild().String())
			return err
		},
	}
}

// build is what a binary knows of its own version.
type build struct {
	// Version is main.version when the build set it (make build: git describe), else
	// the module version that go install ...@vX.Y.Z recorded, else "(devel)".
	Version string
	// Revision is the VCS commit the go command recorded (go build in a git work tree
	// without -buildvcs=false); empty when it recorded none.
	Revision string
	// Modified says the work tree had changes that Revision does not hold.
	Modified bool
}

func readBuild() build {
	info, _ := debug.ReadBuildInfo()
	return buildOf(version, info)
}

// buildOf is readBuild's work on explicit inputs, for tests: ldflagsVersion is
// main.version, info the build info (nil when the binary has none).
func buildOf(ldflagsVersion string, info *debug.BuildInfo) build {
	b := build{Version: ldflagsVersion}
	if info == nil {
		if b.Version == "" {
			b.Version = "(devel)"
		}
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
	}
	if b.Version == "" {
		b.Version = "(devel)"
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// String is the line "fleetwatch version" prints: "v0.1.0", or "v0.1.0 (commit
// 0123456789ab, modified)" when the commit is known.
func (b build) String() string {
	if b.Revision == "" {
		return b.Version
	}
	rev := b.Revision
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if b.Modified {
		return fmt.Sprintf("%s (commit %s, modified)", b.Version, rev)
	}
	return fmt.Sprintf("%s (commit %s)", b.Version, rev)
}

// buildVersion is the version alone, for logs, user agents and /version.
func buildVersion() string {
	return readBuild().Version
}
