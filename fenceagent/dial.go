package fenceagent

import (
	"crypto/tls"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// Keepalive settings of the connection to the authority. A half-open
// connection (a partition that drops packets) would otherwise keep the watch
// stream silently dead until the OS gives up, minutes later; with pings it is
// noticed and redialled within KeepaliveTime + KeepaliveTimeout. The
// authority must permit pings this often (its keepalive.EnforcementPolicy
// MinTime at most KeepaliveTime).
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// Dial returns a client connection to the fence authority at addr
// ("host:port", or any gRPC target). tlsConfig nil means plaintext; build it
// with internal/tlsutil.Client for TLS and mTLS. The connection is made
// lazily and redialled with a short backoff, so that an authority that comes
// back is used again within seconds.
func Dial(addr string, tlsConfig *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tlsConfig != nil {
		creds = credentials.NewTLS(tlsConfig)
	}
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time:                KeepaliveTime,
			Timeout:             KeepaliveTimeout,
			PermitWithoutStream: true,
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay:  200 * time.Millisecond,
				Multiplier: 1.6,
				Jitter:     0.2,
				MaxDelay:   5 * time.Second,
			},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("fence authority address %q: %w", addr, err)
	}
	return conn, nil
}
