package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/tlsutil"
)

// ExternalOptions configure the connection to an external etcd cluster.
type ExternalOptions struct {
	// Endpoints are the cluster's client URLs (https://host:2379, …).
	Endpoints []string
	// TLS names the CA, client certificate and key; without any, the
	// endpoints are reached in plaintext.
	TLS tlsutil.ClientFiles
	// Logger receives the etcd client's errors.
	Logger logr.Logger
}

// dialTimeout bounds connecting to one endpoint.
const dialTimeout = 5 * time.Second

// Dial connects to an external etcd cluster and checks, within ctx, that it
// answers a read that needs a quorum.
func Dial(ctx context.Context, opts ExternalOptions) (*clientv3.Client, error) {
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("no etcd endpoints given")
	}
	cfg := clientv3.Config{
		Endpoints:            opts.Endpoints,
		DialTimeout:          dialTimeout,
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		Logger:               zapLogger(opts.Logger.WithName("etcd-client"), levelError),
	}
	if opts.TLS.Enabled() {
		tlsConfig, err := tlsutil.Client(opts.TLS)
		if err != nil {
			return nil, fmt.Errorf("etcd client TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to etcd at %s: %w", strings.Join(opts.Endpoints, ","), err)
	}
	if _, err := client.Get(ctx, "fencegate-connect-check", clientv3.WithCountOnly()); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("etcd at %s does not answer: %w", strings.Join(opts.Endpoints, ","), err)
	}
	return client, nil
}
