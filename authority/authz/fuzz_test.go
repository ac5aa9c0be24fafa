package authz

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzAuthorize asks the test policy about arbitrary identities, methods,
// domains and clusters, and checks every answer against the roles written
// out again here: nobody acts as a cluster it is not bound to, outside its
// domains; only operators revoke and forget; only operators and readers
// read the history; an identity without a role gets nothing but health
// checks; every call a role allows is allowed; and every refusal says why.
func FuzzAuthorize(f *testing.F) {
	methods := []string{MethodDeclare, MethodRelease, MethodGet, MethodWatch, MethodRevoke, MethodForget, MethodHistory,
		"/grpc.health.v1.Health/Check", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "/fencegate.fence.v1.FenceService/Other"}
	f.Add(eastID, uint8(0), "default", "east")
	f.Add(westID, uint8(0), "default", "east")
	f.Add(paymentsID, uint8(1), "payments", "east")
	f.Add(oncallID, uint8(4), "default", "west")
	f.Add(boardID, uint8(6), "x", "")
	f.Add("", uint8(7), "", "")
	f.Add("spiffe://example.org/fencegate/cluster/east/", uint8(0), "default", "east")
	p := testPolicy(f)
	clusterOf := map[string]string{eastID: "east", westID: "west", paymentsID: "east"}
	f.Fuzz(func(t *testing.T, identity string, m uint8, domain, cluster string) {
		method := methods[int(m)%len(methods)]
		d := p.Authorize(identity, Request{Method: method, Domain: domain, Cluster: cluster})
		bound, isCluster := clusterOf[identity]
		inDomain := identity != paymentsID || domain == "payments"
		isOperator, isReader := identity == oncallID, identity == boardID
		var want bool
		switch method {
		case MethodDeclare, MethodRelease:
			want = isCluster && cluster == bound && inDomain
		case MethodGet, MethodWatch:
			want = isOperator || isReader || isCluster && inDomain
		case MethodHistory:
			want = isOperator || isReader
		case MethodRevoke, MethodForget:
			want = isOperator
		default:
			want = strings.HasPrefix(method, "/grpc.health.") || strings.HasPrefix(method, "/grpc.reflection.") && (isCluster || isOperator || isReader)
		}
		// Both ways: a policy that refuses every call is as wrong as one
		// that allows too much.
		switch {
		case d.Allowed && !want:
			t.Fatalf("%q may call %s as cluster %q in domain %q: its role does not allow it", identity, method, cluster, domain)
		case !d.Allowed && want:
			t.Fatalf("%q is refused %s as cluster %q in domain %q (%s): its role allows it", identity, method, cluster, domain, d.Reason)
		case !d.Allowed && d.Reason == "":
			t.Fatalf("%q %s: refused without a reason", identity, method)
		}
	})
}

// FuzzIdentityKinds checks that the three kinds of identity never spell
// the same string, whatever a certificate holds, and that the file's
// spelling of each (dns:…, cn:…, a URI as it is) reads back as the claim
// the certificate makes: a DNS SAN or a CN can only ever match an entry
// written with its kind.
func FuzzIdentityKinds(f *testing.F) {
	for _, seed := range []string{eastID, "east.example.org", "dns:east.example.org", "uri:x:y", "cn:", "SPIFFE://x/y", ""} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		dns, cn, uri := PrefixDNS+value, PrefixCN+value, uriIdentity(value)
		if uri == dns || uri == cn || dns == cn {
			t.Fatalf("%q: two kinds spell one identity: uri %q, dns %q, cn %q", value, uri, dns, cn)
		}
		if value == "" {
			return
		}
		for _, claim := range []string{dns, cn} {
			if got, err := parseIdentity(claim); err != nil || got != claim {
				t.Errorf("the file's %q reads as %q, %v; want the claim %q", claim, got, err, claim)
			}
		}
		u, err := url.Parse(value)
		if err != nil || !u.IsAbs() {
			return
		}
		// A certificate's URI SAN is read as u; the file names it as the
		// claim is spelled (bare, unless the URI begins with a kind's
		// prefix), or with uri:.
		claim := uriIdentity(u.String())
		for _, written := range []string{claim, PrefixURI + u.String()} {
			if got, err := parseIdentity(written); err != nil || got != claim {
				t.Errorf("the file's %q reads as %q, %v; want the claim %q", written, got, err, claim)
			}
		}
	})
}
