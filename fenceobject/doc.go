// Package fenceobject keeps a cluster's Fence object (one per fence domain,
// named after it): the fence as a Kubernetes object that operators read
// with kubectl and fail over with.
//
// Every fencegate replica runs an Instance. It creates the Fence when it is
// missing (never touching its spec), makes its agent declare
// max(--epoch, spec.epoch) as soon as spec.epoch rises, keeps a Lease of
// its own alive, and applies its own entry of status.instances — the fence
// state its webhook answers from — under a field manager of its own, only
// when that state changes.
//
// The elected leader also runs Status: it derives the rest of the status
// (Holding and Enforced, the holder, the token, a pending takeover, the
// Components) from its fence state, the instances' entries, their Leases
// and the controller's marks as a pure value (Desired), prunes the entries
// of instances whose Lease ended, and applies the status only when it
// changed: heartbeats that change nothing write nothing.
package fenceobject
