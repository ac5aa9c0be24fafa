package cli

import (
	"fmt"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// NewVersionCommand returns the version command of the binary named
// binary, built as version (set at build time with -ldflags "-X
// main.version=…").
func NewVersionCommand(binary, version string) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the " + binary + " version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			goVersion := "unknown"
			if info, ok := debug.ReadBuildInfo(); ok {
				goVersion = info.GoVersion
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (%s)\n", binary, version, goVersion)
			return err
		},
	}
}
