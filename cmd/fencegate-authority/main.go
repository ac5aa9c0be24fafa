// Command fencegate-authority is the reference fence authority: the gRPC
// FenceService that hands each domain's ownership fence to the cluster that
// declares the highest epoch, with its state in etcd. It is a binary of its
// own, apart from fencegate, so that a cluster pod never loads the
// authority and its embedded etcd server: they are a sixth of fencegate's
// resident memory at rest.
package main

import (
	"os"

	"github.com/spf13/cobra"
	// The image has no CA bundle: these roots verify an external etcd's
	// certificate from a public CA when no --etcd-ca is given. A system
	// bundle, where there is one, is used instead.
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
	root := cli.Root(newAuthorityCommand(logs), logs)
	root.AddCommand(cli.NewVersionCommand(root.Name(), version))
	envflag.Document(root)
	return root
}
