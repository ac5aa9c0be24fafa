// Package authz decides who may call what on the fence authority, so that
// every caller acts only as itself and an operator's power is explicit.
//
// The caller is the identity in its verified client certificate (mTLS):
// its first URI SAN (a SPIFFE ID such as
// spiffe://example.org/fencegate/cluster/east), else its first DNS SAN,
// else its subject CN. An authorization file binds identities to roles:
//
//	clusters:          # declare, release and read, only as this cluster
//	  - identity: spiffe://example.org/fencegate/cluster/east
//	    cluster: east
//	    domains: ["*"] # or a list of domains
//	operators:         # read, watch, revoke, forget, history
//	  - spiffe://example.org/fencegate/operator/oncall
//	readers:           # read, watch, history
//	  - spiffe://example.org/fencegate/dashboard
//
// Policy.Authorize is a pure function of the identity and the request, as
// the Kubernetes Node authorizer's rule is: a cluster's identity declares and
// releases only as that cluster, in its domains. A Source keeps the file's
// last good Policy and reloads it when the file changes; a Guard is the one
// gRPC interceptor that checks every call before any handler runs, answers a
// refused one with PermissionDenied (reason PERMISSION_DENIED), counts it and
// logs it at most once a minute per identity and method. Handlers never
// check who is calling again; they read the Caller the Guard put into the
// call's context, to record who made each change.
package authz
