// Package authz decides who may call what on the fence authority, so that
// every caller acts only as itself and an operator's power is explicit.
//
// A caller's verified client certificate (mTLS) names identities of three
// kinds, which never stand for one another (Identities): each URI SAN as it
// is (a SPIFFE ID such as spiffe://example.org/fencegate/cluster/east), each
// DNS SAN as dns:NAME, and the subject CN as cn:NAME. An authorization file
// binds identities, written with their kind (an identity without one is an
// absolute URI), to roles:
//
//	clusters:          # declare, release, read and watch, only as this cluster
//	  - identity: spiffe://example.org/fencegate/cluster/east
//	    cluster: east
//	    domains: ["*"] # or a list of domains
//	  - identity: dns:fencegate.west.example.org
//	    cluster: west
//	    domains: ["default"]
//	operators:         # read, watch, revoke, forget, history
//	  - spiffe://example.org/fencegate/operator/oncall
//	readers:           # read, watch, history
//	  - cn:fencegate-dashboard
//
// A call is made as the one identity of its certificate that the file
// names; a certificate the file names two or more identities of is refused.
// One the file names none of is its first identity, without a role; without
// a file, that first identity is the caller.
//
// Policy.Decide and Policy.Authorize are pure functions of the identities
// and the request, as the Kubernetes Node authorizer's rule is: a cluster's
// identity declares and releases only as that cluster, in its domains. A
// Source keeps the file's last good Policy and reloads it when the file
// changes; a Guard is the one gRPC interceptor that checks every call before
// any handler runs, answers a refused one with PermissionDenied (reason
// PERMISSION_DENIED), counts it and logs it at most once a minute per
// identity and method. Handlers never check who is calling again; they read
// the Caller the Guard put into the call's context, to record who made each
// change, and report to Guard.Refused a call the fence's own rules refuse
// with PermissionDenied, which is counted and logged the same way.
package authz
