// Package gate keeps a controller-runtime operator from acting while its
// cluster does not hold the fence of an object's domain: the cold-standby
// behaviour, without a hand-written fence.
//
// A Gate reads the fence without asking the authority: the domain's Fence
// object, through the manager's cache, and the membership Leases of
// fencegate's replicas, which prove a live hold (package
// fenceobject/membership). The Fence's status is written on change, not on
// heartbeats: were every fencegate pod to die, it would go on saying
// Holding while the authority hands the fence to another cluster once the
// lease ends. So the Gate believes a hold only until the latest end of
// validity that a replica's Lease publishes for the Fence's token, past
// which the state is unknown: the earlier of that end less
// Options.ClockSkew on the wall clock, and the time the hold had left when
// the replica wrote it counted on the Gate's own clock from when it saw
// the Lease, so that neither a clock that is off nor a slow watch alone
// stretches it. fencegate withdraws the hold from its Lease before it
// releases the fence.
//
// What the Gate offers:
//   - Complete builds a controller behind the Gate from the object it
//     reconciles, named once: it adds Source, hands the reconciler Client
//     and wraps it in Reconciler. The three stay public.
//   - Reconciler wraps a reconciler: while the cluster does not hold the
//     fence of the object's domain, Reconcile is not called; the object
//     gets the SourceConflict condition (when its type is Conditioned,
//     unless WithoutConditions; fencegate's Component is not: its
//     controller sets that condition) and is requeued without rate-limit
//     penalty. A deletion is handed to the reconciler flagged LocalOnly,
//     to tear down local state only.
//   - Source re-enqueues every object of a kind on each transition of its
//     domain.
//   - Client gates writes by the domain of the object written, not of the
//     reconcile: on a gated kind, creates, updates, patches, server-side
//     applies and deletes fail with ErrFenced while the cluster does not
//     hold that domain's fence; those in flight when it stops holding are
//     cancelled; and each asserts that hold's fencing token in the
//     request-only annotation fencegate.dev/write-token, which fencegate's
//     webhook checks: a write decided under an older token than the
//     fence's is refused (IsStaleToken) where the webhook sees it. The
//     Gate reports the gated kinds that no fencegate webhook fences
//     (fencegate_gate_unfenced_kinds). DeleteAllOf of a gated kind is
//     refused in every state: its objects may span domains.
//   - RESTConfig binds the client of an SDK that makes its own (Helm's) to
//     one reconcile: its writes stop with that reconcile's hold.
package gate
