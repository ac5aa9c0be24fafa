// Package envflag lets every command-line flag be set from an environment
// variable: flag --lease-ttl is FENCEGATE_LEASE_TTL. A flag given on the
// command line wins over its variable, so a Helm chart can set defaults in
// the environment and a person can still override them by hand.
//
// A command may give its flags a prefix of their own (SetPrefix): the
// operator's commands read FENCEGATE_FENCE_EPOCH, not FENCEGATE_EPOCH, so that
// one run by hand inside a pod never picks up the epoch, instance or cluster
// UID that the pod's own `fencegate run` is configured with.
package envflag

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Prefix starts the name of every fencegate environment variable.
const Prefix = "FENCEGATE_"

// prefixAnnotation holds a command's own prefix.
const prefixAnnotation = "fencegate.dev/env-prefix"

// Name returns the environment variable of the flag with the given name,
// for commands without a prefix of their own.
func Name(flag string) string { return name(Prefix, flag) }

func name(prefix, flag string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// SetPrefix makes the flags that cmd defines (its own and those it passes
// on to its subcommands) read variables that start with prefix instead of
// Prefix.
func SetPrefix(cmd *cobra.Command, prefix string) {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[prefixAnnotation] = prefix
}

// prefixOf is the prefix of the flags cmd defines: its own, or the one of
// the nearest parent that set one.
func prefixOf(cmd *cobra.Command) string {
	for c := cmd; c != nil; c = c.Parent() {
		if p, ok := c.Annotations[prefixAnnotation]; ok {
			return p
		}
	}
	return Prefix
}

// owner is the command, among cmd and its parents, that defines the flag.
func owner(cmd *cobra.Command, flag string) *cobra.Command {
	for c := cmd; c != nil; c = c.Parent() {
		if c.LocalFlags().Lookup(flag) != nil {
			return c
		}
	}
	return cmd
}

// Variable returns the environment variable that sets flag of cmd.
func Variable(cmd *cobra.Command, flag string) string {
	return name(prefixOf(owner(cmd, flag)), flag)
}

// Apply sets each flag of cmd that was not given on the command line from
// its environment variable, if that is set. lookup is os.LookupEnv outside
// tests.
func Apply(cmd *cobra.Command, lookup func(string) (string, bool)) error {
	fs := cmd.Flags()
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		variable := Variable(cmd, f.Name)
		value, ok := lookup(variable)
		if !ok {
			return
		}
		if setErr := fs.Set(f.Name, value); setErr != nil {
			err = fmt.Errorf("environment variable %s=%q (for --%s): %w", variable, value, f.Name, setErr)
		}
	})
	return err
}

// Document appends "[$FENCEGATE_…]" to the help text of every flag of cmd
// and its subcommands, so --help tells which variable sets each flag.
func Document(cmd *cobra.Command) {
	prefix := prefixOf(cmd)
	annotate := func(f *pflag.Flag) {
		if f.Name == "help" || strings.Contains(f.Usage, "[$"+Prefix) {
			return
		}
		f.Usage += " [$" + name(prefix, f.Name) + "]"
	}
	cmd.LocalNonPersistentFlags().VisitAll(annotate)
	cmd.PersistentFlags().VisitAll(annotate)
	for _, sub := range cmd.Commands() {
		Document(sub)
	}
}
