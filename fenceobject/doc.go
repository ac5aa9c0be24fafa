// Package fenceobject keeps a cluster's Fence object (one per fence domain,
// named after it): the fence as a Kubernetes object that operators read
// with kubectl and fail over with. It follows the fence state the
// process's policies see through a fencestate.Source.
//
// A Keeper has three runnables. On every replica:
//   - Instance keeps a Lease of its own alive (package membership) and
//     applies its own entry of status.instances (the fence state its
//     webhook answers from, and the cluster generation its agent presents)
//     under a field manager of its own, only when one of them changes;
//   - EpochSync makes its agent declare max(--epoch, spec.epoch) as soon as
//     that changes (never below the epoch the agent declares, unless the
//     authority refused that one for its step), hands the agent the cluster
//     generation the status keeps, and makes the Fence again when it is
//     deleted, at the epoch its agent declares when that is above --epoch,
//     so that deleting the Fence never lowers the epoch asked for. It never
//     touches an existing Fence's spec.
//
// On the elected leader, Status derives the rest of the status (Holding,
// Enforced and EpochAccepted, the holder, the token, a pending takeover,
// the Components, the cluster generation: the highest its own agent and the
// running instances present) from its fence state, the instances' entries,
// their Leases and the controller's marks as a pure value (Desired), prunes
// the entries of instances whose Lease ended, and applies the status under
// StatusFieldManager only when it changed: heartbeats that change nothing
// write nothing.
package fenceobject
