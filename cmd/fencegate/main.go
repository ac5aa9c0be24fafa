// Command fencegate runs the per-cluster side of fencegate (agent,
// admission webhook and controller) and carries the operator's tools: the
// fence commands, the failover between two clusters and the offline policy
// evaluator. The fence authority is a binary of its own,
// fencegate-authority, so that a cluster pod never loads it.
package main

import (
	"errors"
	"os"
	"strings"

	"github.com/spf13/cobra"
	// The image has no CA bundle (its binaries are its only files): these
	// roots verify a public authority's certificate when no ca.crt is
	// given. A system bundle, where there is one, is used instead.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/internal/envflag"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	os.Exit(cli.Main(newRootCommand()))
}

func newRootCommand() *cobra.Command {
	logs := &cli.LogOptions{}
	root := cli.Root(&cobra.Command{
		Use:   "fencegate",
		Short: "Keep two Kubernetes clusters from both writing the same Components",
	}, logs)
	root.AddCommand(cli.NewVersionCommand(root.Name(), version))
	root.AddCommand(newRunCommand(logs))
	root.AddCommand(newMovedAuthorityCommand())
	// The daemon reads FENCEGATE_<FLAG>, which its chart sets. The
	// commands a person runs read FENCEGATE_<COMMAND>_<FLAG>, so that one
	// run inside a fencegate pod never acts with the pod's cluster UID,
	// epoch or instance.
	for _, cmd := range []*cobra.Command{newFenceCommand(), newEvalCommand(), newFailoverCommand()} {
		envflag.SetPrefix(cmd, envflag.Prefix+strings.ToUpper(cmd.Name())+"_")
		root.AddCommand(cmd)
	}
	envflag.Document(root)
	return root
}

// newMovedAuthorityCommand answers `fencegate authority`, which earlier
// versions served, with where the authority went, whatever its flags.
func newMovedAuthorityCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "authority",
		Short:              "Moved: the fence authority is the fencegate-authority binary",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return errors.New("the fence authority is a binary of its own: run fencegate-authority, with the same flags and FENCEGATE_ variables")
		},
	}
}
