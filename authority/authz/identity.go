package authz

import (
	"context"
	"crypto/x509"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Caller is who makes a call, as the transport tells.
type Caller struct {
	// Identity is the identity in the caller's verified client
	// certificate; empty without one.
	Identity string
	// Peer is the caller's network address.
	Peer string
}

// CallerOf returns the caller of a call from its peer.
func CallerOf(p *peer.Peer) Caller {
	if p == nil {
		return Caller{}
	}
	c := Caller{}
	if p.Addr != nil {
		c.Peer = p.Addr.String()
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
		// VerifiedChains is set only when the certificate was checked
		// against the client CAs: an unverified one names no one.
		if chains := info.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
			c.Identity = Identity(chains[0][0])
		}
	}
	return c
}

// Identity is the identity a certificate names: its first URI SAN, else its
// first DNS SAN, else its subject CN.
func Identity(cert *x509.Certificate) string {
	switch {
	case len(cert.URIs) > 0:
		return cert.URIs[0].String()
	case len(cert.DNSNames) > 0:
		return cert.DNSNames[0]
	}
	return cert.Subject.CommonName
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller the Guard put into ctx; the zero Caller
// outside a guarded call.
func CallerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}
