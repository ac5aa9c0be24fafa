// Package authority is the reference fence authority: the one place that
// decides which cluster holds the ownership fence of a domain. It serves the
// gRPC FenceService (with refusals as FailedPrecondition errors carrying a
// google.rpc.ErrorInfo), gRPC health checking and server reflection.
//
// The rules live in package statemachine, as pure functions of the stored
// state, the request and the authority's clock. An internal store applies
// them to a record in etcd in one transaction per call, compared on the
// record's revision, so several authorities over one etcd are replicas of
// one authority; the fencing token of a grant is the etcd revision that
// committed it. Package etcdbackend provides the etcd: embedded in the
// process, or an external cluster. Package authoritytest runs a real
// authority for the tests of its clients.
package authority
