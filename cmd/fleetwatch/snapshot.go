package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fleetwatch/fleetwatch/config"
	"github.com/fleetwatch/fleetwatch/persist"
)

func newSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Inspect or verify a fleetwatch snapshot file",
	}
	cmd.AddCommand(newSnapshotInspectCommand(), newSnapshotVerifyCommand())
	return cmd
}

// openSnapshot opens path read-only. A file in use by a running daemon is locked.
func openSnapshot(path string) (*persist.Store, error) {
	if path == "" {
		return nil, errors.New("--path is required")
	}
	store, err := persist.Open(path, persist.Options{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("opening snapshot: %w", err)
	}
	return store, nil
}

func newSnapshotInspectCommand() *cobra.Command {
	var path, output string
	cmd := &cobra.Command{
		Use:   "inspect",
		Short: "Print the clusters, resources, resourceVersions, object counts and size of a snapshot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output: %q is neither text nor json", output)
			}
			store, err := openSnapshot(path)
			if err != nil {
				return err
			}
			defer store.Close()
			info, err := store.Inspect()
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			return printInfo(cmd.OutOrStdout(), info)
		},
	}
	cmd.Flags().StringVar(&path, "path", config.DefaultSnapshotPath, "snapshot file")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func printInfo(out io.Writer, info persist.Info) error {
	objects := 0
	for _, c := range info.Clusters {
		for _, r := range c.Resources {
			objects += r.Objects
		}
	}
	fmt.Fprintf(out, "%s: schema v%d, created %s, %d bytes, %d clusters, %d objects\n\n",
		info.Path, info.SchemaVersion, info.Created.UTC().Format("2006-01-02T15:04:05Z"), info.FileSize, len(info.Clusters), objects)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CLUSTER\tUID\tRESOURCE\tRESOURCEVERSION\tOBJECTS\tBYTES")
	for _, c := range info.Clusters {
		if len(c.Resources) == 0 {
			fmt.Fprintf(w, "%s\t%s\t-\t-\t0\t0\n", c.Name, c.Identity.UID)
		}
		for _, r := range c.Resources {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\n", c.Name, c.Identity.UID, r.Resource, r.ResourceVersion, r.Objects, r.Bytes)
		}
	}
	return w.Flush()
}

func newSnapshotVerifyCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check a snapshot completely: bbolt's consistency check and every object decoded",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := openSnapshot(path)
			if err != nil {
				return err
			}
			defer store.Close()
			if err := store.Verify(); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", path)
			return err
		},
	}
	cmd.Flags().StringVar(&path, "path", config.DefaultSnapshotPath, "snapshot file")
	return cmd
}
