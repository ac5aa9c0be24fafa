// Command fencegate is the one fencegate binary. Its subcommands run the
// per-cluster side (agent, admission webhook and controller), the reference
// fence authority, the operator's fence tools, the failover between two
// clusters and the offline policy evaluator.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	// The image has no CA bundle (the binary is its only file): these
	// roots verify a public authority's certificate when no ca.crt is
	// given. A system bundle, where there is one, is used instead.
	_ "golang.org/x/crypto/x509roots/fallback"

	"github.com/fencegate/fencegate/internal/envflag"
)

func main() {
	os.Exit(run())
}

// run executes the command line and returns the process exit code. SIGINT
// and SIGTERM cancel the command's context, so long-running commands drain
// and return.
func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fencegate:", err)
		return exitCode(err)
	}
	return 0
}

// exitCodeError carries a process exit code other than 1 through cobra.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string { return e.err.Error() }
func (e *exitCodeError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if e := (*exitCodeError)(nil); errors.As(err, &e) {
		return e.code
	}
	return 1
}

func newRootCommand() *cobra.Command {
	logs := &logOptions{}
	root := &cobra.Command{
		Use:           "fencegate",
		Short:         "Keep two Kubernetes clusters from both writing the same Components",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return envflag.Apply(cmd, os.LookupEnv)
		},
	}
	logs.addFlags(root)
	root.AddCommand(newVersionCommand())
	root.AddCommand(newAuthorityCommand(logs))
	root.AddCommand(newRunCommand(logs))
	// The daemons read FENCEGATE_<FLAG>, which their charts set. The
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
