package authz

import (
	"strings"
	"testing"
)

// FuzzAuthorize asks the test policy about arbitrary identities, methods,
// domains and clusters, and checks every answer against the roles written
// out again here: nobody acts as a cluster it is not bound to, outside its
// domains; only operators revoke and forget; only operators and readers
// read the history; an identity without a role gets nothing but health
// checks; and every refusal says why.
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
		if !d.Allowed {
			if d.Reason == "" {
				t.Fatalf("%q %s: refused without a reason", identity, method)
			}
			return
		}
		bound, isCluster := clusterOf[identity]
		inDomain := identity != paymentsID || domain == "payments"
		isOperator, isReader := identity == oncallID, identity == boardID
		var ok bool
		switch method {
		case MethodDeclare, MethodRelease:
			ok = isCluster && cluster == bound && inDomain
		case MethodGet, MethodWatch:
			ok = isOperator || isReader || isCluster && inDomain
		case MethodHistory:
			ok = isOperator || isReader
		case MethodRevoke, MethodForget:
			ok = isOperator
		default:
			ok = strings.HasPrefix(method, "/grpc.health.") || strings.HasPrefix(method, "/grpc.reflection.") && (isCluster || isOperator || isReader)
		}
		if !ok {
			t.Fatalf("%q may call %s as cluster %q in domain %q: its role does not allow it", identity, method, cluster, domain)
		}
	})
}
