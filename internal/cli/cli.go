// Package cli holds what fencegate's two binaries share on the command
// line: the root command's settings (every flag from its FENCEGATE_
// variable, the logging flags), the version command, the exit codes, and
// how a fence authority's address is judged. fencegate runs in a cluster
// and carries the operator's commands; fencegate-authority is the fence
// authority. They are two binaries so that a cluster pod never loads the
// authority and its embedded etcd server.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fencegate/fencegate/internal/envflag"
)

// Main executes root and returns the process exit code. SIGINT and SIGTERM
// cancel the command's context, so long-running commands drain and return.
func Main(root *cobra.Command) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
		return ExitCode(err)
	}
	return 0
}

// Root makes cmd a binary's root command: errors are printed once, by
// Main, without the usage text; every flag of every subcommand is read
// from its FENCEGATE_ variable when the command line does not give it;
// and logs' flags are persistent flags of every subcommand.
func Root(cmd *cobra.Command, logs *LogOptions) *cobra.Command {
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return envflag.Apply(cmd, os.LookupEnv)
	}
	logs.addFlags(cmd)
	return cmd
}

// ExitCodeError carries a process exit code other than 1 through cobra.
type ExitCodeError struct {
	// Code is the process exit code.
	Code int
	// Err is what went wrong.
	Err error
}

func (e *ExitCodeError) Error() string { return e.Err.Error() }
func (e *ExitCodeError) Unwrap() error { return e.Err }

// ExitCode is the process exit code for err: an ExitCodeError's code, or 1.
func ExitCode(err error) int {
	if e := (*ExitCodeError)(nil); errors.As(err, &e) {
		return e.Code
	}
	return 1
}
