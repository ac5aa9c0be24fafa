// Package clitest runs a binary's root command in its tests and captures
// what the command prints, so that a test reads a command's answer as an
// operator's terminal would.
package clitest

import (
	"bytes"
	"context"

	"github.com/spf13/cobra"
)

// Execute runs root with args under ctx and returns what it wrote to its
// standard output and its standard error, with the error it returned.
func Execute(ctx context.Context, root *cobra.Command, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}
