// Package statemachine holds the rules of the fence authority as pure
// functions: given a domain's stored fence state, a request and the
// authority's clock reading, it returns the next state, the answer and the
// changes that watchers hear about. It does no I/O, so every rule is tested
// with plain tables and an injected time, and the store that persists the
// state (in one etcd transaction per call) stays a thin loop around it.
//
// The rule behind every case: the fence moves to another cluster only with a
// strictly higher epoch, and never while the previous holder may still
// believe it is active. A cluster runs several processes that declare (the
// replicas of its fencegate, the old and new pods of a rollout), and each
// acts on its own answers, so the rule holds per process: every instance of
// the holder has a lease of its own, and the holder is free only once each
// instance released its lease or the lease ended.
package statemachine
