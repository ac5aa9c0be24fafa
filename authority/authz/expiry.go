package authz

import (
	"crypto/tls"
	"net"
	"time"

	"google.golang.org/grpc/credentials"
	"k8s.io/utils/clock"
)

// closeAfterExpiry is how long after its client certificate expires a
// connection is closed: long enough for the Guard to tell the streams it
// ends then why (Unauthenticated), short enough that a client with a
// rotated certificate is soon back.
const closeAfterExpiry = time.Second

// chainExpiry is when a connection's verified client certificate chain
// expires: when its first certificate does, the client's own unless a CA
// expires before it. It is zero without a verified chain.
func chainExpiry(state tls.ConnectionState) time.Time {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return time.Time{}
	}
	chain := state.VerifiedChains[0]
	expires := chain[0].NotAfter
	for _, cert := range chain[1:] {
		if cert.NotAfter.Before(expires) {
			expires = cert.NotAfter
		}
	}
	return expires
}

// Credentials returns creds whose connections close a moment after the
// client certificate they were made with expires, once the Guard has ended
// their calls with Unauthenticated. The TLS handshake checks a certificate
// once, and a gRPC connection lasts as long as the client keeps it: without
// the close, a client would be refused on its old connection for good,
// though it holds a rotated certificate (tlsutil.Client reads it at each
// handshake) that a new connection would present.
func (g *Guard) Credentials(creds credentials.TransportCredentials) credentials.TransportCredentials {
	return &expiringCredentials{TransportCredentials: creds, clock: g.clock}
}

type expiringCredentials struct {
	credentials.TransportCredentials
	clock clock.WithDelayedExecution
}

func (c *expiringCredentials) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	tlsInfo, ok := info.(credentials.TLSInfo)
	if !ok {
		return conn, info, nil
	}
	expires := chainExpiry(tlsInfo.State)
	if expires.IsZero() {
		return conn, info, nil
	}
	closing := c.clock.AfterFunc(expires.Sub(c.clock.Now())+closeAfterExpiry, func() { _ = conn.Close() })
	return &expiringConn{Conn: conn, closing: closing}, info, nil
}

func (c *expiringCredentials) Clone() credentials.TransportCredentials {
	return &expiringCredentials{TransportCredentials: c.TransportCredentials.Clone(), clock: c.clock}
}

// expiringConn is a connection that closes when its client certificate
// expires; closed before, it forgets the timer.
type expiringConn struct {
	net.Conn
	closing clock.Timer
}

func (c *expiringConn) Close() error {
	c.closing.Stop()
	return c.Conn.Close()
}
