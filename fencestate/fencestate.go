// Package fencestate defines data.fence: the fence state that the agent
// writes into the policy engine's store and that policies, the webhook and the
// controller read, with the agent's own reasons for it. It is the one
// vocabulary the agent, the engine and the packages that read the Fence
// share, so that none of them imports another for a word.
package fencestate

import "context"

// Status is this cluster's standing with the fence authority.
type Status string

// The values of data.fence.status.
const (
	// Active: this cluster holds the fence and its lease is valid.
	Active Status = "active"
	// Fenced: another cluster holds the fence, or a takeover by a higher
	// epoch is pending.
	Fenced Status = "fenced"
	// EpochRegressed: this cluster once declared a higher epoch than it does
	// now (a restored or misconfigured cluster).
	EpochRegressed Status = "epoch_regressed"
	// Acquiring: this cluster's takeover is accepted; the previous holder's
	// lease has not ended yet.
	Acquiring Status = "acquiring"
	// Unknown: no answer yet, the lease expired without renewal, or an
	// unexpected error.
	Unknown Status = "unknown"
	// Unsupported: the authority does not implement the fence protocol.
	Unsupported Status = "unsupported"
)

// Statuses returns every Status, so that callers that must know them all
// (the status metric, input validation) cannot miss one.
func Statuses() []Status {
	return []Status{Active, Fenced, EpochRegressed, Acquiring, Unknown, Unsupported}
}

// The agent's own reasons, written to data.fence.reason when the status does
// not come from an authority refusal.
const (
	// ReasonNoAnswerYet: no declaration has been answered since start.
	ReasonNoAnswerYet = "NO_ANSWER_YET"
	// ReasonLeaseExpired: the lease ran out (minus the margin) without
	// being renewed.
	ReasonLeaseExpired = "LEASE_EXPIRED"
	// ReasonAuthorityUnreachable: the last answer is too old to rely on and
	// the declarations since then failed.
	ReasonAuthorityUnreachable = "AUTHORITY_UNREACHABLE"
	// ReasonUnimplemented: the authority does not serve the fence protocol.
	ReasonUnimplemented = "UNIMPLEMENTED"
	// ReasonUnexpectedError: the authority answered with an error the agent
	// cannot interpret as a fence status.
	ReasonUnexpectedError = "UNEXPECTED_ERROR"
	// ReasonShuttingDown: the agent stopped (its process is shutting down)
	// and gives its lease up; this process no longer acts as holder.
	ReasonShuttingDown = "SHUTTING_DOWN"
	// ReasonDomainNotServed: the object belongs to a fence domain this
	// fencegate does not serve; no agent declares for it here. The engine
	// decides such objects with this reason, status unknown.
	ReasonDomainNotServed = "DOMAIN_NOT_SERVED"
)

// Cluster identifies a cluster and the epoch it declares.
type Cluster struct {
	// Name is the cluster's name, a DNS label.
	Name string `json:"name"`
	// UID is the UID of the cluster's kube-system Namespace.
	UID string `json:"uid"`
	// Epoch is the epoch the cluster declares (this cluster) or last
	// declared (the holder).
	Epoch uint64 `json:"epoch"`
}

// State is the JSON document stored at data.fence.
type State struct {
	// Status is this cluster's standing.
	Status Status `json:"status"`
	// Domain names the fence.
	Domain string `json:"domain"`
	// Cluster is this cluster.
	Cluster Cluster `json:"cluster"`
	// Holder is the cluster holding the fence as last reported by the
	// authority; empty when not known.
	Holder Cluster `json:"holder"`
	// Token is the holder's fencing token; it grows each time the fence
	// changes hands.
	Token uint64 `json:"token"`
	// ValidUntilNS is when (Unix nanoseconds) an active status stops being
	// valid unless renewed; 0 unless active.
	ValidUntilNS int64 `json:"valid_until_ns"`
	// LastSuccessNS is when (Unix nanoseconds) the last declaration that got
	// an answer from the authority was sent; 0 if none did.
	LastSuccessNS int64 `json:"last_success_ns"`
	// Reason is a machine-readable reason for the status: the authority's
	// ErrorInfo reason, or one of the agent's (e.g. LEASE_EXPIRED).
	Reason string `json:"reason"`
	// Message explains the status to a person.
	Message string `json:"message"`
	// ClusterGeneration is the newest generation of this cluster the
	// authority gave the agent (0 before any): what it presents in its
	// declarations, and what the Fence's status keeps for the cluster's
	// next processes.
	ClusterGeneration uint64 `json:"cluster_generation,omitempty"`
	// EpochRefused is set while the authority refuses the epoch the agent
	// was asked to declare and the agent goes on declaring the last epoch
	// it had accepted (Cluster.Epoch); nil otherwise.
	EpochRefused *EpochRefusal `json:"epoch_refused,omitempty"`
	// ResumeAtNS is when (Unix nanoseconds) this cluster's actuators may
	// resume after a grant that followed the previous holder's lease
	// expiry (a holder cut off from the authority): that holder began
	// suspending its own actuators only when its lease ran out, and is
	// given the takeover grace to finish. 0 when nothing is to wait for (a
	// first grant, a grant after a release, not active).
	ResumeAtNS int64 `json:"resume_at_ns,omitempty"`
}

// EpochRefusal is the authority's refusal of an epoch the agent was asked
// to declare, while the agent declares the last epoch it had accepted.
type EpochRefusal struct {
	// Epoch is the refused epoch.
	Epoch uint64 `json:"epoch"`
	// Reason is the authority's reason (EPOCH_STEP_TOO_LARGE).
	Reason string `json:"reason"`
	// Message explains the refusal and what to do, for a person.
	Message string `json:"message"`
}

// Writer stores the fence state where policies read it. The policy engine
// implements it by building a new immutable snapshot of its data and
// swapping it in whole: evaluations in flight finish with the state they
// started with, and no evaluation sees half of a write.
type Writer interface {
	WriteFence(ctx context.Context, state State) error
}
