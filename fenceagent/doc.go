// Package fenceagent declares this cluster's identity and epoch to the fence
// authority, tracks the answer, writes it as data.fence for the policies, and
// signals every fence transition.
//
// One goroutine, the loop that Start runs (loop.go), owns the agent's state
// as typed standings (of its lease, of data.fence) beside the fence state
// itself; declarations and releases run in goroutines of their own and send
// the loop their results, the watch sends it its events, and Check sends it
// its waits. The loop alone writes data.fence, under no lock.
//
// A ClusterFence declares at start, every renewal interval (the earlier of
// the declare interval and a third of lease TTL − margin, jittered below
// it) and at once on every WatchFence event, each call bounded by the
// declare timeout. Results carry sequence numbers: one older than the newest applied
// result is dropped, so a slow call never overwrites a newer answer. Answers
// map to a fencestate.Status (OK → active, the authority's ErrorInfo reasons
// → fenced, epoch_regressed or acquiring, PERMISSION_DENIED and other
// refusals, CLUSTER_RESTORED among them, → unknown with the authority's
// reason, Unimplemented → unsupported), each state naming the epoch its
// declaration was sent at;
// transient gRPC errors keep the last status, retried with backoff, until it
// expires. Being active is valid until send time + lease TTL − margin (the
// send of the declaration that got the lease: a holder that declares more
// often than it must asks for its lease to be kept, see KeepsLease), and a
// local timer turns it to unknown when that passes without renewal, whether
// or not any call returns. Told CLUSTER_FENCED while holding the fence, the
// agent writes "fenced" into the store first and only then releases the
// fence, so the next holder is granted only after this cluster stopped
// admitting changes. A grant to a declaration sent before that release ended
// is void: the authority may have answered it before it took the release in.
//
// An epoch refused as too large a step (EPOCH_STEP_TOO_LARGE, an
// operator's typo) after a lower one was accepted leaves the fence status as
// it was: the agent goes on declaring and renewing the accepted epoch, and
// State.EpochRefused says why, until the next SetEpoch (epochs.go). Every
// declaration presents the newest generation of the cluster the agent knows
// (Options.ClusterGeneration, accepted answers, AdoptClusterGeneration), so
// that a copy of the cluster restored from a backup, which presents an old
// one, is told CLUSTER_RESTORED and admits nothing.
//
// Each agent is one instance of its cluster (Options.Instance: the pod
// name, or the host name with a random suffix) and holds a lease of its
// own: a cluster runs several agents (its replicas, the old and new pods of
// a rollout), and the fence moves to another cluster only once every one
// of them released its lease or saw it end. A release gives up this
// instance's lease only. When Start's context ends, the agent writes
// "unknown" (SHUTTING_DOWN) and only then releases its lease, so that a
// stopping pod admits nothing more and a takeover does not wait for its
// lease.
//
// The agent writes through fencestate.Writer (the policy engine's store) and
// knows nothing of admission or reconciliation; the webhook and controller
// hear transitions through Subscribe.
package fenceagent
