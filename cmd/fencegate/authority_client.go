package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/internal/tlsutil"
)

// authorityClientOptions are the flags that reach a fence authority, shared
// by every command that talks to one.
type authorityClientOptions struct {
	address  string
	tls      tlsutil.ClientFiles
	insecure bool
}

func (o *authorityClientOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.address, "authority", cli.DefaultAuthorityAddress, "address (host:port) of the fence authority")
	fs.StringVar(&o.tls.CAFile, "authority-ca", "", "file of the CAs that the authority's certificate must chain to (default: the system's roots)")
	fs.StringVar(&o.tls.CertFile, "authority-cert", "", "client certificate file for an authority that requires mTLS")
	fs.StringVar(&o.tls.KeyFile, "authority-key", "", "key file of --authority-cert")
	fs.StringVar(&o.tls.ServerName, "authority-server-name", "", "name to check in the authority's certificate (default: the host of --authority)")
	fs.BoolVar(&o.insecure, "authority-insecure", false, "talk to a non-loopback authority in plaintext, without TLS")
}

// tlsConfig decides how to reach the authority: TLS when any TLS flag is
// given or the address is not a loopback one; plaintext to a loopback
// address, or anywhere with --authority-insecure.
func (o *authorityClientOptions) tlsConfig() (*tls.Config, error) {
	if o.address == "" {
		return nil, errors.New("--authority: the address of the fence authority is required")
	}
	if _, _, err := net.SplitHostPort(o.address); err != nil {
		return nil, fmt.Errorf("--authority %q: want host:port: %w", o.address, err)
	}
	switch {
	case o.insecure && o.tls.Enabled():
		return nil, errors.New("--authority-insecure turns TLS off: it cannot be combined with --authority-ca, --authority-cert, --authority-key or --authority-server-name")
	case o.insecure, !o.tls.Enabled() && cli.IsLoopback(o.address):
		return nil, nil
	}
	cfg, err := tlsutil.Client(o.tls)
	if err != nil {
		return nil, fmt.Errorf("TLS to the fence authority: %w", err)
	}
	return cfg, nil
}

// dial returns a connection to the authority. It connects lazily and
// reconnects on its own; it is closed when ctx ends, or by Close.
func (o *authorityClientOptions) dial(ctx context.Context) (*grpc.ClientConn, error) {
	cfg, err := o.tlsConfig()
	if err != nil {
		return nil, err
	}
	conn, err := fenceagent.Dial(o.address, cfg)
	if err != nil {
		return nil, err
	}
	context.AfterFunc(ctx, func() { _ = conn.Close() })
	return conn, nil
}
