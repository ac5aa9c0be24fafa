// Package envflag lets every command-line flag be set from an environment
// variable: flag --lease-ttl is FENCEGATE_LEASE_TTL. A flag given on the
// command line wins over its variable, so a Helm chart can set defaults in
// the environment and a person can still override them by hand.
package envflag

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Prefix starts the name of every fencegate environment variable.
const Prefix = "FENCEGATE_"

// Name returns the environment variable of the flag with the given name.
func Name(flag string) string {
	return Prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Apply sets each flag of fs that was not given on the command line from its
// environment variable, if that is set. lookup is os.LookupEnv outside tests.
func Apply(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		value, ok := lookup(Name(f.Name))
		if !ok {
			return
		}
		if setErr := fs.Set(f.Name, value); setErr != nil {
			err = fmt.Errorf("environment variable %s=%q (for --%s): %w", Name(f.Name), value, f.Name, setErr)
		}
	})
	return err
}

// Document appends "[$FENCEGATE_…]" to the help text of every flag of cmd
// and its subcommands, so --help tells which variable sets each flag.
func Document(cmd *cobra.Command) {
	annotate := func(f *pflag.Flag) {
		if f.Name == "help" || strings.Contains(f.Usage, "[$"+Prefix) {
			return
		}
		f.Usage += " [$" + Name(f.Name) + "]"
	}
	cmd.LocalNonPersistentFlags().VisitAll(annotate)
	cmd.PersistentFlags().VisitAll(annotate)
	for _, sub := range cmd.Commands() {
		Document(sub)
	}
}
