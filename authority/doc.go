// Package authority is the reference fence authority: the one place that
// decides which cluster holds the ownership fence of a domain. It holds the
// fence state machine (a pure function of stored state, request and time), an
// etcd-backed store that applies it in one transaction per call, and the gRPC
// FenceService server.
package authority
