package authz

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// The prefixes that give an identity its kind. A certificate's URI SANs,
// DNS SANs and subject CN are three namespaces: a DNS SAN or a CN that
// spells a SPIFFE ID is not that SPIFFE ID, because a CA that lets a
// subject choose its DNS names or CN need not let it choose its URI SANs.
const (
	// PrefixURI marks a URI SAN. A value with no prefix is a URI too, so
	// that files written before identities had kinds keep their meaning.
	PrefixURI = "uri:"
	// PrefixDNS marks a DNS SAN.
	PrefixDNS = "dns:"
	// PrefixCN marks the subject's common name.
	PrefixCN = "cn:"
)

// Caller is who makes a call, as the transport tells.
type Caller struct {
	// Identity is the identity the call is made as (see Claims). It is
	// empty without a verified client certificate.
	Identity string
	// Claims are the identities the caller's verified client certificate
	// names (see Identities). Without an authorization file the caller is
	// the first of them; with one, the one the file names.
	Claims []string
	// Expires is when the verified certificate chain expires (see
	// Guard.Credentials); zero without one.
	Expires time.Time
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
			c.Claims = Identities(chains[0][0])
			if len(c.Claims) > 0 {
				c.Identity = c.Claims[0]
			}
			c.Expires = chainExpiry(info.State)
		}
	}
	return c
}

// Identities returns the identities a certificate names, each once: its
// URI SANs as they are (spiffe://…), then its DNS SANs as dns:…, then its
// subject CN as cn:…. A URI that itself begins with one of the prefixes is
// written uri:… so that no two kinds ever spell the same string.
func Identities(cert *x509.Certificate) []string {
	var ids []string
	add := func(id string) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	for _, u := range cert.URIs {
		add(uriIdentity(u.String()))
	}
	for _, name := range cert.DNSNames {
		add(PrefixDNS + name)
	}
	if cn := cert.Subject.CommonName; cn != "" {
		add(PrefixCN + cn)
	}
	return ids
}

// uriIdentity is how a URI is written as an identity: as it is, unless it
// begins with a prefix of a kind.
func uriIdentity(u string) string {
	for _, prefix := range []string{PrefixURI, PrefixDNS, PrefixCN} {
		if strings.HasPrefix(u, prefix) {
			return PrefixURI + u
		}
	}
	return u
}

// parseIdentity reads an identity of the authorization file: uri:…, dns:…
// or cn:…, and anything else a URI. It returns the identity as Identities
// writes it, so that a file entry and a certificate's claim compare as
// strings. A URI must be absolute, as a certificate's URI SAN is: a bare
// host name, which an identity without a kind used to match as a DNS SAN,
// is refused and told to say dns: or cn:.
func parseIdentity(s string) (string, error) {
	kind, value := PrefixURI, s
	for _, prefix := range []string{PrefixURI, PrefixDNS, PrefixCN} {
		if v, ok := strings.CutPrefix(s, prefix); ok {
			kind, value = prefix, v
			break
		}
	}
	if value == "" {
		return "", fmt.Errorf("identity is empty")
	}
	switch kind {
	case PrefixDNS, PrefixCN:
		return kind + value, nil
	}
	u, err := url.Parse(value)
	if err != nil || !u.IsAbs() {
		return "", fmt.Errorf("identity %q is not an absolute URI: an identity without dns: or cn: names a URI SAN (a SPIFFE ID such as spiffe://example.org/fencegate/cluster/east); write dns:%s for a DNS SAN or cn:%s for a common name", s, value, value)
	}
	// Written as a certificate's URI SAN is read (its scheme in lower
	// case), so that the two compare.
	return uriIdentity(u.String()), nil
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
